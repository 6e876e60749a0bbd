"""Native owner-array kernels against the pure-Python reference model (tests/reference_assign.py),
on random groups and random churn; plus the invariant that reconciliation never lets two
members hold a unit at once."""
import numpy as np
import pytest
from hypothesis import given, settings
import hypothesis.strategies as st

import reference_assign as ref
from groupcoord.assign import kernels as K
from groupcoord.assign.kernels import MemberState, ViolationKind
from groupcoord.assign.units import Interner, blocks, remap_blocks


@st.composite
def groups(draw, max_units=60, max_members=8):
    n_members = draw(st.integers(1, max_members))
    n_units = draw(st.integers(0, max_units))
    owner = st.lists(st.integers(-1, n_members - 1), min_size=n_units, max_size=n_units)
    return n_members, np.array(draw(owner), np.int32), np.array(draw(owner), np.int32)


def csr_lists(indptr, units):
    return [list(units[indptr[m]:indptr[m + 1]]) for m in range(len(indptr) - 1)]


@settings(max_examples=200, deadline=None)
@given(groups())
def test_members_csr_and_diff_match_reference(g):
    n, current, target = g
    ip, units = K.members_csr(current, n)
    assert csr_lists(ip, units) == ref.members(current.tolist(), n)
    d = K.diff(current, target, n)
    kept, revoke, assign = ref.diff(current.tolist(), target.tolist(), n)
    assert d.kept.tolist() == kept
    assert [d.revoke(m).tolist() for m in range(n)] == revoke
    assert [d.assign(m).tolist() for m in range(n)] == assign


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_validate_matches_reference(data):
    n_members = data.draw(st.integers(1, 6))
    n_units = data.draw(st.integers(0, 30))
    lists = [sorted(data.draw(st.lists(st.integers(-2, n_units + 1), max_size=8)))
             for _ in range(n_members)]
    alive = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n_members,
                                                    max_size=n_members)))
    indptr = np.zeros(n_members + 1, np.int64)
    indptr[1:] = np.cumsum([len(x) for x in lists])
    units = np.array([u for x in lists for u in x], np.int32)
    v = K.validate(indptr, units, n_units, alive=alive)
    owner, found = ref.validate(lists, n_units, alive)
    assert v.owner.tolist() == owner
    got = sorted((x.kind.name, x.unit, x.member, x.other) for x in v.violations)
    assert got == sorted(found)
    assert v.ok == (not found)
    assert sum(v.counts.values()) == len(found)


def test_validate_reports_each_invariant_precisely():
    # units 0..4; member 0: [0, 1], member 1: [1, 7], member 2 (departed): [3]; unit 2, 4 left
    indptr = np.array([0, 2, 4, 5], np.int64)
    units = np.array([0, 1, 1, 7, 3], np.int32)
    v = K.validate(indptr, units, 5, alive=[True, True, False])
    assert not v.ok
    assert v.counts == {ViolationKind.UNASSIGNED: 2, ViolationKind.DUPLICATE: 1,
                        ViolationKind.OUT_OF_RANGE: 1, ViolationKind.NOT_MEMBER: 1}
    text = sorted(str(x) for x in v.violations)
    assert text == ["member 1 is assigned unit 7, which does not exist",
                    "member 2 is assigned units but is not a member",
                    "unit 1 is assigned to members 0 and 1",
                    "unit 2 is not assigned", "unit 4 is not assigned"]
    with pytest.raises(ValueError):
        K.owner_from_csr(indptr, units, 5)


def test_validate_caps_the_violation_list_but_counts_all():
    v = K.validate(np.array([0, 0], np.int64), np.array([], np.int32), 1000,
                   max_violations=10)
    assert len(v.violations) == 10 and v.counts[ViolationKind.UNASSIGNED] == 1000


@settings(max_examples=300, deadline=None)
@given(groups(max_units=40, max_members=6), st.data())
def test_reconcile_matches_reference_and_never_double_assigns(g, data):
    n, current, target = g
    # What each member holds now: its current assignment (owner_now = current), possibly a
    # subset of it if it already revoked some units.
    owned_lists = [[u for u in ref.members(current.tolist(), n)[m]
                    if data.draw(st.booleans())] for m in range(n)]
    owner_now = np.full(len(current), -1, np.int32)
    for m, lst in enumerate(owned_lists):
        owner_now[lst] = m
    oip = np.zeros(n + 1, np.int64)
    oip[1:] = np.cumsum([len(x) for x in owned_lists])
    owned = np.array([u for x in owned_lists for u in x], np.int32)
    tip, tunits = K.members_csr(target, n)
    r = K.reconcile(oip, owned, tip, tunits, owner_now)
    for m in range(n):
        want, state = ref.reconcile(owned_lists[m], tunits[tip[m]:tip[m + 1]].tolist(),
                                    owner_now, m)
        assert r.next(m).tolist() == want
        assert MemberState(r.state[m]).name == state
    # Safety: applying every member's next assignment at once never gives a unit to two
    # members, because units are only handed over once released (owner_now == -1 or self).
    seen = {}
    for m in range(n):
        for u in r.next(m).tolist():
            assert u not in seen, "unit %d held by %d and %d" % (u, seen[u], m)
            seen[u] = m


def test_reconcile_revoke_before_assign_sequence():
    # Member 0 holds [0, 1]; the target moves unit 1 to member 1.
    target = np.array([0, 1], np.int32)
    tip, tu = K.members_csr(target, 2)
    owner_now = np.array([0, 0], np.int32)
    r = K.reconcile(np.array([0, 2, 2]), np.array([0, 1], np.int32), tip, tu, owner_now)
    assert MemberState(r.state[0]) is MemberState.UNREVOKED and r.next(0).tolist() == [0]
    assert MemberState(r.state[1]) is MemberState.UNRELEASED and r.next(1).tolist() == []
    # Member 0 acknowledges the revocation: unit 1 is released and member 1 gets it.
    owner_now = np.array([0, -1], np.int32)
    r = K.reconcile(np.array([0, 1, 1]), np.array([0], np.int32), tip, tu, owner_now)
    assert [MemberState(s) for s in r.state] == [MemberState.STABLE, MemberState.STABLE]
    assert r.next(1).tolist() == [1]


def test_batched_groups_are_one_call():
    a = np.array([0, 1, -1, 1], np.int32)
    b = np.array([2, 0, 0], np.int32)
    owner, uoff, moff = K.concat_groups([a, b], [2, 3])
    assert owner.tolist() == [0, 1, -1, 1, 4, 2, 2] and uoff.tolist() == [0, 4, 7]
    ip, units = K.members_csr(owner, int(moff[-1]))
    # group 1's member 0 is global member 2
    assert units[ip[2]:ip[3]].tolist() == [5, 6]
    assert K.localize(owner, uoff, moff).tolist() == [0, 1, -1, 1, 2, 0, 0]
    assert np.array_equal(K.globalize(K.localize(owner, uoff, moff), uoff, moff), owner)


def test_bad_owner_values_are_clear_errors():
    with pytest.raises(ValueError, match="owner\\[1\\] = 5"):
        K.members_csr(np.array([0, 5], np.int32), 2)
    with pytest.raises(ValueError, match="units"):
        K.diff(np.zeros(3, np.int32), np.zeros(2, np.int32), 1)


def test_interner_reuses_freed_indices_and_sorts_by_name():
    it = Interner(["w2", "w0", "w1"])
    assert [it["w2"], it["w0"], it["w1"]] == [0, 1, 2]
    it.remove("w0")
    assert it.add("w9") == 1 and it.capacity == 3
    assert it.sorted_indices().tolist() == [2, 0, 1]      # w1, w2, w9
    assert it.alive().tolist() == [True, True, True]
    it.remove("w2")
    assert it.alive().tolist() == [False, True, True] and len(it) == 2


def test_remap_blocks_keeps_owners_of_surviving_units():
    # topic sizes [2, 3] -> [3, 1]: topic 0 grows, topic 1 shrinks; a new topic appended.
    owner = np.array([5, 6, 7, 8, 9], np.int32)
    out = remap_blocks([2, 3], [3, 1, 2], owner)
    assert out.tolist() == [5, 6, -1, 7, -1, -1]
    assert blocks([2, 3]).tolist() == [0, 2, 5]


def test_split_blocks_gives_per_topic_partitions():
    from groupcoord.assign.units import split_blocks
    base = blocks([3, 0, 2])                      # topics of 3, 0 and 2 partitions
    got = [(t, p.tolist()) for t, p in split_blocks([0, 2, 3, 4], base)]
    assert got == [(0, [0, 2]), (2, [0, 1])]
    assert split_blocks([], base) == []
    with pytest.raises(ValueError):
        split_blocks([4, 0], base)
