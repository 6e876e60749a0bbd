"""KIP-848 server-side consumer assignors (groupcoord.assign.consumer): uniform and range.

The oracles are plain Python written from the contract (docs/assign.md and the module's
docstrings), not from the kernel:
  * ``check_valid``: every unit of a subscribed topic has exactly one owner, a subscriber of the
    topic; units of topics nobody subscribes are -1.
  * ``ref_range``: Kafka's range assignor, topic by topic.
  * ``ref_greedy_loads``: the simple greedy (topics with fewest subscribers first, each
    partition to the least-loaded subscriber, ties to the lower index).
  * ``improving_path``: a chain of moves along shared subscriptions that would narrow a gap of
    >= 2 between two members' loads (none may exist: most balanced load vector).
  * ``min_moves_homogeneous``: the fewest units that must change owner for a floor/ceil
    balanced assignment, from the current holdings.

Randomised tests are deterministic: hypothesis runs with @seed(SEED) (SEED defaults to a fixed
number; set GROUPCOORD_TEST_SEED=N to explore others) and every failure report notes the seed.
"""
import os
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, seed, settings
import hypothesis.strategies as st

from groupcoord.assign import consumer as C
from groupcoord._native import assign_uniform as K

_ENV_SEED = os.environ.get("GROUPCOORD_TEST_SEED")
SEED = int(_ENV_SEED) if _ENV_SEED else 848_2024

PROPS = settings(max_examples=300, deadline=None, derandomize=False, database=None,
                 print_blob=True, suppress_health_check=[HealthCheck.too_slow])


def seeded(f):
    return seed(SEED)(f)


def _note_seed():
    note("hypothesis seed: GROUPCOORD_TEST_SEED=%d" % SEED)


# ------------------------------------------------------------------------------ helpers

def csr(subscriptions):
    """list of topic lists -> (indptr int64, subs int32)."""
    indptr = np.zeros(len(subscriptions) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in subscriptions])
    flat = [t for s in subscriptions for t in s]
    return indptr, np.array(flat, dtype=np.int32)


def topic_of_unit(ppt):
    return [t for t, p in enumerate(ppt) for _ in range(p)]


def subscribers(ppt, subscriptions):
    subs = [set() for _ in ppt]
    for m, s in enumerate(subscriptions):
        for t in s:
            subs[t].add(m)
    return subs


def check_valid(out, ppt, subscriptions):
    ppt = list(ppt)
    assert out.dtype == np.int32 and out.shape == (sum(ppt),)
    subs = subscribers(ppt, subscriptions)
    for u, t in enumerate(topic_of_unit(ppt)):
        if subs[t]:
            assert int(out[u]) in subs[t], "unit %d (topic %d) owned by %d, subscribers %s" % (
                u, t, out[u], sorted(subs[t]))
        else:
            assert out[u] == -1, "unit %d of unsubscribed topic %d owned by %d" % (u, t, out[u])


def loads(out, n_members):
    return np.bincount(out[out >= 0], minlength=n_members)[:n_members] if n_members else \
        np.zeros(0, np.int64)


def valid_holdings(cur, ppt, subscriptions):
    """cur with the units whose owner is gone or unsubscribed replaced by -1."""
    M = len(subscriptions)
    sets = [set(s) for s in subscriptions]
    res = np.array(cur, dtype=np.int64, copy=True)
    for u, t in enumerate(topic_of_unit(ppt)):
        o = res[u]
        if not (0 <= o < M and t in sets[o]):
            res[u] = -1
    return res


def moved_units(cur, out, ppt, subscriptions):
    """Units taken away from a still-valid owner."""
    vh = valid_holdings(cur, ppt, subscriptions)
    return int(np.count_nonzero((vh >= 0) & (vh != out)))


def ref_range(ppt, subscriptions, static=None):
    M = len(subscriptions)
    static = static if static is not None else [False] * M
    subs = subscribers(ppt, subscriptions)
    out = []
    for t, p in enumerate(ppt):
        ms = sorted(subs[t], key=lambda m: (not static[m], m))
        if not ms:
            out += [-1] * p
            continue
        q, r = divmod(p, len(ms))
        for i, m in enumerate(ms):
            out += [m] * (q + (1 if i < r else 0))
    return np.array(out, dtype=np.int32)


def ref_greedy_loads(ppt, subscriptions):
    M = len(subscriptions)
    subs = subscribers(ppt, subscriptions)
    load = [0] * M
    for t in sorted(range(len(ppt)), key=lambda t: (len(subs[t]), t)):
        if not subs[t]:
            continue
        for _ in range(ppt[t]):
            m = min(subs[t], key=lambda m: (load[m], m))
            load[m] += 1
    return np.array(load, dtype=np.int64)


def improving_path(out, ppt, subscriptions):
    """(a, b) if a unit could travel a -> ... -> b along shared subscriptions with
    load[a] >= load[b] + 2, else None."""
    M = len(subscriptions)
    subs = subscribers(ppt, subscriptions)
    tu = topic_of_unit(ppt)
    owns = [set() for _ in range(M)]
    for u, o in enumerate(out):
        if o >= 0:
            owns[o].add(tu[u])
    ld = loads(out, M)
    for a in range(M):
        seen = {a}
        dq = deque([a])
        while dq:
            x = dq.popleft()
            for t in owns[x]:
                for y in subs[t]:
                    if y not in seen:
                        if ld[y] <= ld[a] - 2:
                            return a, y
                        seen.add(y)
                        dq.append(y)
    return None


def min_moves_homogeneous(held, n_units):
    """held[m]: units m may keep. Fewest reclaimed units for a floor/ceil balance."""
    M = len(held)
    q, r = divmod(n_units, M)
    over = sum(max(0, h - q) for h in held)
    return over - min(r, sum(1 for h in held if h > q))


def run_uniform(ppt, subscriptions, cur=None, general=False):
    indptr, subs = csr(subscriptions)
    ppt_a = np.array(ppt, dtype=np.int32)
    if cur is None:
        cur = np.full(sum(ppt), -1, dtype=np.int32)
    cur = np.asarray(cur, dtype=np.int32)
    if general:
        return K.uniform(ppt_a, indptr, subs, cur, True)
    return C.uniform(ppt_a, indptr, subs, cur)


def is_homogeneous(ppt, subscriptions):
    sets = [frozenset(t for t in s if ppt[t] > 0) for s in subscriptions]
    return len(set(sets)) <= 1


# ------------------------------------------------------------------------------ strategies

@st.composite
def groups(draw, max_topics=6, max_partitions=9, max_members=8, homogeneous=None):
    T = draw(st.integers(1, max_topics))
    ppt = draw(st.lists(st.integers(0, max_partitions), min_size=T, max_size=T))
    M = draw(st.integers(0 if homogeneous is None else 1, max_members))
    homog = draw(st.booleans()) if homogeneous is None else homogeneous
    if homog:
        base = draw(st.lists(st.integers(0, T - 1), unique=True, max_size=T))
        subscriptions = []
        for _ in range(M):   # same set, any order, maybe a duplicate
            s = draw(st.permutations(base))
            if s and draw(st.integers(0, 4)) == 0:
                s = list(s) + [s[0]]
            subscriptions.append(list(s))
    else:
        subscriptions = [draw(st.lists(st.integers(0, T - 1), max_size=T + 1)) for _ in range(M)]
    N = sum(ppt)
    kind = draw(st.sampled_from(["empty", "random", "stale"]))
    if kind == "empty" or M == 0:
        cur = [-1] * N
    elif kind == "random":
        cur = draw(st.lists(st.integers(-1, M - 1), min_size=N, max_size=N))
    else:   # owners that have left (>= M) and junk
        cur = draw(st.lists(st.integers(-1, M + 2), min_size=N, max_size=N))
    return ppt, subscriptions, np.array(cur, dtype=np.int32)


# ------------------------------------------------------------------------------ hand-checked

def test_topic_base():
    np.testing.assert_array_equal(C.topic_base([3, 0, 2]), [0, 3, 3, 5])
    assert C.topic_base(np.array([], np.int32)).tolist() == [0]
    assert C.topic_base([3, 0, 2]).dtype == np.int64
    with pytest.raises(ValueError):
        C.topic_base([1, -1])


def test_uniform_3_members_2_topics_3_partitions():
    # 6 units, 3 members: quota 2 each, handed out in unit order to members in index order
    out = run_uniform([3, 3], [[0, 1], [0, 1], [1, 0]])
    assert out.tolist() == [0, 0, 1, 1, 2, 2]
    # member 2 leaves: its units (4, 5) go to 0 and 1 (quota 3 each); nothing else moves
    out2 = run_uniform([3, 3], [[0, 1], [0, 1]], out)
    assert out2.tolist() == [0, 0, 1, 1, 0, 1]
    # member 2 comes back: the +1 slots... N=6, M=3: quota 2; 0 and 1 give up their last unit
    out3 = run_uniform([3, 3], [[0, 1], [0, 1], [0, 1]], out2)
    assert out3.tolist() == [0, 0, 1, 1, 2, 2]


def test_uniform_extra_slot_goes_to_the_biggest_holder():
    # 5 units, 2 members: quotas 2 and 3; member 1 holds 4 so it keeps 3 (not member 0)
    out = run_uniform([5], [[0], [0]], [1, 1, 1, 1, 0])
    assert out.tolist() == [1, 1, 1, 0, 0]
    # tie on holdings: the lower index gets the extra
    out = run_uniform([5], [[0], [0]], [0, 0, 1, 1, -1])
    assert out.tolist() == [0, 0, 1, 1, 0]


def test_uniform_stale_and_unsubscribed_owners_are_reassigned():
    # topic 1 nobody subscribes -> -1 even though current says member 0; owner 7 is gone
    out = run_uniform([2, 2], [[0], [0]], [7, 1, 0, 0])
    assert out.tolist() == [0, 1, -1, -1]


def test_uniform_heterogeneous_hand_case():
    # m0, m1 subscribe t0; m2 subscribes t0 and t1 (3 partitions each). t1 first (1 subscriber):
    # m2 gets all of it; t0 fills the lighter m0, m1: loads 2, 1, 3 (the most balanced possible)
    out = run_uniform([3, 3], [[0], [0], [0, 1]])
    assert out.tolist() == [0, 0, 1, 2, 2, 2]
    assert improving_path(out, [3, 3], [[0], [0], [0, 1]]) is None


def test_uniform_heterogeneous_moves_the_flexible_topic():
    # m0 {A, B}, m1 {B}; m0 holds all of B. Balance requires A -> m0 and B -> m1.
    ppt, subs = [2, 2], [[0, 1], [1]]
    out = run_uniform(ppt, subs, [-1, -1, 0, 0])
    assert out.tolist() == [0, 0, 1, 1]


def test_uniform_heterogeneous_refinement_path():
    # t0 (1 partition) {m1, m2}, t1 (2 partitions) {m0, m1}. The simple greedy (t0 first, ties
    # to the lower index) gives t0 -> m1, then t1 -> m0, m0: loads 2, 1, 0. Most balanced is
    # 1, 1, 1: t0 -> m2, t1 -> m0 and m1.
    ppt, subs = [1, 2], [[1], [0, 1], [0]]
    assert ref_greedy_loads(ppt, subs).tolist() == [2, 1, 0]
    out = run_uniform(ppt, subs)
    assert out.tolist() == [2, 0, 1]
    # from the greedy's assignment, the refinement moves t0's unit along m1 -> m2 and one of
    # m0's t1 units to m1 (a path m0 -t1-> m1 -t0-> m2): 2 moves, the fewest possible
    out = run_uniform(ppt, subs, [1, 0, 0])
    assert out.tolist() == [2, 0, 1]
    assert improving_path(out, ppt, subs) is None
    # a longer chain: 4 topics in a line, all load starts at one end
    ppt = [4, 1, 1, 1]
    subs = [[0], [0, 1], [1, 2], [2, 3]]
    out = run_uniform(ppt, subs, [0, 0, 0, 0, 1, 2, 3])
    check_valid(out, ppt, subs)
    assert improving_path(out, ppt, subs) is None
    assert sorted(loads(out, 4).tolist()) == [1, 2, 2, 2]


def test_uniform_zero_members_and_zero_units():
    assert run_uniform([2, 1], []).tolist() == [-1, -1, -1]
    assert run_uniform([0, 0], [[0, 1], [1]]).tolist() == []
    assert C.uniform(np.array([], np.int32), [0, 0], [], None).tolist() == []


def test_range_hand_cases():
    ppt, subs = [3, 3], [[0, 1], [0, 1], [0, 1]]
    assert C.range_(ppt, *csr(subs)).tolist() == [0, 1, 2, 0, 1, 2]
    # 7 partitions over 3: 3, 2, 2; co-partitioned topics line up
    ppt, subs = [7, 7], [[0, 1], [1, 0], [0, 1]]
    out = C.range_(ppt, *csr(subs))
    assert out.tolist() == [0, 0, 0, 1, 1, 2, 2] * 2
    # static member 2 goes first
    out = C.range_(ppt, *csr(subs), static_member=[False, False, True])
    assert out.tolist() == [2, 2, 2, 0, 0, 1, 1] * 2
    # heterogeneous: topic 1 only member 1; topic 2 nobody
    out = C.range_([2, 3, 1], *csr([[0], [0, 1]]))
    assert out.tolist() == [0, 1, 1, 1, 1, -1]


def test_bad_arguments():
    with pytest.raises(ValueError):
        C.uniform([2], [0, 1], [1], None)                 # topic 1 does not exist
    with pytest.raises(ValueError):
        C.uniform([2], [0, 2], [0], None)                 # indptr past the end
    with pytest.raises(ValueError):
        C.uniform([2], [1, 1], [0], None)                 # indptr must start at 0
    with pytest.raises(ValueError):
        C.uniform([2], [0, 1], [0], [0, 0, 0])            # wrong current length
    with pytest.raises(ValueError):
        C.uniform([2], [0, 1], [0], np.array([0, 2**40]))  # does not fit int32
    with pytest.raises(TypeError):
        C.uniform([2], [0, 1], [0], np.array([0.0, 1.0]))
    with pytest.raises(ValueError):
        C.range_([2], [0, 1], [0], static_member=[True, False])


def test_inputs_are_not_mutated_and_read_only_inputs_work():
    ppt = np.array([5, 4, 3], np.int32)
    indptr, subs = csr([[0, 1], [1, 2], [2, 0], [0]])
    cur = np.array([0, 1, 2, 3, -1, 0, 1, 2, 3, -1, 0, 1], np.int32)
    arrays = [ppt, indptr, subs, cur]
    copies = [a.copy() for a in arrays]
    for a in arrays:
        a.flags.writeable = False
    a1 = C.uniform(ppt, indptr, subs, cur)
    a2 = C.range_(ppt, indptr, subs, cur, static_member=np.array([0, 1, 0, 0], bool))
    for a, b in zip(arrays, copies):
        np.testing.assert_array_equal(a, b)
    assert a1.flags.writeable and a2.flags.writeable
    assert not np.shares_memory(a1, cur)


# ------------------------------------------------------------------------------ properties

@seeded
@PROPS
@given(groups())
def test_uniform_properties(g):
    _note_seed()
    ppt, subscriptions, cur = g
    cur_before = cur.copy()
    out = run_uniform(ppt, subscriptions, cur)
    np.testing.assert_array_equal(cur, cur_before)
    check_valid(out, ppt, subscriptions)
    # deterministic, and a function of the subscription *sets* (order, duplicates irrelevant)
    np.testing.assert_array_equal(out, run_uniform(ppt, subscriptions, cur))
    reordered = [sorted(set(s), reverse=True) for s in subscriptions]
    np.testing.assert_array_equal(out, run_uniform(ppt, reordered, cur))
    M = len(subscriptions)
    ld = loads(out, M)
    vh = valid_holdings(cur, ppt, subscriptions)
    if M and is_homogeneous(ppt, subscriptions):
        pool = int(np.count_nonzero(out >= 0))
        if pool:
            assert ld.max() - ld.min() <= 1
        # exactly the minimum number of units leave a still-valid owner
        held = [int(np.count_nonzero(vh == m)) for m in range(M)]
        assert moved_units(cur, out, ppt, subscriptions) == min_moves_homogeneous(held, pool)
        # the general (heterogeneous) path agrees on homogeneous input
        np.testing.assert_array_equal(out, run_uniform(ppt, subscriptions, cur, general=True))
    elif M:
        # most balanced possible, hence no worse than the simple greedy at either end
        assert improving_path(out, ppt, subscriptions) is None
        ref = ref_greedy_loads(ppt, subscriptions)
        assert ld.max() <= ref.max()
        active = [m for m in range(M) if any(ppt[t] for t in subscriptions[m])]
        if active:
            assert ld[active].min() >= ref[active].min()
        assert sorted(ld) and sum(ld) == sum(ref)
    # sticky: a member never loses a unit of a topic it still subscribes and, in the same
    # rebalance, gains another unit of that topic
    tu = topic_of_unit(ppt)
    lost = {(int(vh[u]), tu[u]) for u in range(len(out)) if vh[u] >= 0 and out[u] != vh[u]}
    gained = {(int(out[u]), tu[u]) for u in range(len(out)) if out[u] >= 0 and out[u] != vh[u]}
    assert not (lost & gained), sorted(lost & gained)


@seeded
@PROPS
@given(groups(homogeneous=False, max_topics=5, max_members=7), st.integers(0, 3))
def test_uniform_heterogeneous_is_stable_when_nothing_changes(g, rounds):
    # Re-running on its own output changes nothing (a target assignment is a fixed point).
    _note_seed()
    ppt, subscriptions, cur = g
    out = run_uniform(ppt, subscriptions, cur)
    for _ in range(rounds + 1):
        again = run_uniform(ppt, subscriptions, out)
        np.testing.assert_array_equal(again, out)


@seeded
@PROPS
@given(groups(homogeneous=True, max_members=9), st.data())
def test_uniform_homogeneous_join_and_leave(g, data):
    _note_seed()
    ppt, subscriptions, cur = g
    if not subscriptions:
        return
    start = run_uniform(ppt, subscriptions, cur)       # a balanced assignment
    topics = subscriptions[0]
    pool = int(np.count_nonzero(start >= 0))
    # one member joins (at the end: the newest index)
    joined = run_uniform(ppt, subscriptions + [list(topics)], start)
    held = [int(np.count_nonzero(start == m)) for m in range(len(subscriptions))] + [0]
    assert moved_units(start, joined, ppt, subscriptions + [topics]) == \
        min_moves_homogeneous(held, pool)
    # one member leaves (any index; the rest are renumbered, keeping their order)
    leaver = data.draw(st.integers(0, len(subscriptions) - 1))
    if len(subscriptions) == 1:
        return
    remap = np.array([i if i < leaver else i - 1 for i in range(len(subscriptions))] + [-1])
    renumbered = np.where(start >= 0, remap[start], -1).astype(np.int32)
    renumbered[start == leaver] = -1
    left = run_uniform(ppt, subscriptions[:-1], renumbered)
    keep = renumbered >= 0
    np.testing.assert_array_equal(left[keep], renumbered[keep])   # only the leaver's units move
    assert np.ptp(loads(left, len(subscriptions) - 1)) <= 1


@seeded
@PROPS
@given(groups(max_topics=7, max_partitions=12, max_members=9), st.data())
def test_range_matches_reference(g, data):
    _note_seed()
    ppt, subscriptions, cur = g
    M = len(subscriptions)
    static = data.draw(st.lists(st.booleans(), min_size=M, max_size=M))
    use_static = data.draw(st.booleans())
    indptr, subs = csr(subscriptions)
    out = C.range_(ppt, indptr, subs, cur, static_member=static if use_static else None)
    np.testing.assert_array_equal(out, ref_range(ppt, subscriptions,
                                                 static if use_static else None))
    check_valid(out, ppt, subscriptions)


# ------------------------------------------------------------------------------ larger shapes

def _numpy_check_valid(out, ppt, indptr, subs):
    T, M = len(ppt), len(indptr) - 1
    mat = np.zeros((M, T), dtype=bool)
    mat[np.repeat(np.arange(M), np.diff(indptr)), subs] = True
    tu = np.repeat(np.arange(T), ppt)
    has_sub = mat.any(axis=0)[tu]
    assert np.all((out >= 0) == has_sub)
    assert np.all(mat[out[has_sub], tu[has_sub]])


def test_uniform_homogeneous_large_join_leave():
    rng = np.random.default_rng(SEED)
    T, M = 40, 700
    ppt = rng.integers(50, 400, T).astype(np.int32)
    indptr = np.arange(M + 1, dtype=np.int64) * T
    subs = np.tile(rng.permutation(T).astype(np.int32), M)
    N = int(ppt.sum())
    full = C.uniform(ppt, indptr, subs, None)
    _numpy_check_valid(full, ppt, indptr, subs)
    ld = np.bincount(full, minlength=M)
    assert ld.max() - ld.min() <= 1
    # scramble a bit: random current, then re-balance must move the minimum
    cur = full.copy()
    idx = rng.choice(N, N // 10, replace=False)
    cur[idx] = rng.integers(-1, M, idx.size)
    out = C.uniform(ppt, indptr, subs, cur)
    held = np.bincount(cur[cur >= 0], minlength=M)
    assert int(np.count_nonzero((cur >= 0) & (out != cur))) == min_moves_homogeneous(
        held.tolist(), N)
    # join
    indptr2 = np.arange(M + 2, dtype=np.int64) * T
    subs2 = np.tile(subs[:T], M + 1)
    joined = C.uniform(ppt, indptr2, subs2, out)
    moved = int(np.count_nonzero(joined != out))
    q = N // (M + 1)
    assert moved == np.count_nonzero(joined == M) == q or moved == q + 1
    assert moved == min_moves_homogeneous(np.bincount(out, minlength=M).tolist() + [0], N)
    # leave: member 0 goes, everyone else keeps everything
    renum = np.where(joined == 0, -1, joined - 1).astype(np.int32)
    left = C.uniform(ppt, indptr, subs, renum)
    np.testing.assert_array_equal(left[renum >= 0], renum[renum >= 0])


def test_uniform_heterogeneous_buckets_large():
    """Kafka's benchmark shape (members and topics in 5 disjoint buckets): one member joining a
    bucket moves only that bucket's minimum; the other buckets do not change."""
    rng = np.random.default_rng(SEED + 1)
    T, M, B = 50, 400, 5
    ppt = rng.integers(20, 120, T).astype(np.int32)
    tb = np.array_split(np.arange(T, dtype=np.int32), B)
    member_bucket = np.repeat(np.arange(B), M // B)
    rows = [tb[b] for b in member_bucket]
    indptr, subs = csr(rows)
    out = C.uniform(ppt, indptr, subs, None)
    _numpy_check_valid(out, ppt, indptr, subs)
    tu = np.repeat(np.arange(T), ppt)
    unit_bucket = np.searchsorted(np.array([t[-1] for t in tb]), tu)
    for b in range(B):
        ld = np.bincount(out[unit_bucket == b], minlength=M)[member_bucket == b]
        assert ld.max() - ld.min() <= 1
    assert C.uniform(ppt, indptr, subs, out).tolist() == out.tolist()
    # join bucket 2
    indptr2, subs2 = csr(rows + [tb[2]])
    joined = C.uniform(ppt, indptr2, subs2, out)
    _numpy_check_valid(joined, ppt, indptr2, subs2)
    changed = joined != out
    assert not np.any(changed & (unit_bucket != 2))
    in_b = unit_bucket == 2
    held = np.bincount(out[in_b], minlength=M)[member_bucket == 2].tolist() + [0]
    assert int(changed.sum()) == min_moves_homogeneous(held, int(in_b.sum()))


def test_uniform_heterogeneous_random_large():
    rng = np.random.default_rng(SEED + 2)
    T, M = 60, 300
    ppt = rng.integers(0, 60, T).astype(np.int32)
    rows = [np.unique(rng.choice(T, rng.integers(1, 12), replace=False)).astype(np.int32)
            for _ in range(M)]
    indptr, subs = csr(rows)
    N = int(ppt.sum())
    cur = rng.integers(-1, M, N).astype(np.int32)
    out = C.uniform(ppt, indptr, subs, cur)
    _numpy_check_valid(out, ppt, indptr, subs)
    ref = ref_greedy_loads(ppt.tolist(), [r.tolist() for r in rows])
    ld = np.bincount(out[out >= 0], minlength=M)
    assert ld.max() <= ref.max()
    assert improving_path(out, ppt.tolist(), [r.tolist() for r in rows]) is None
    np.testing.assert_array_equal(out, C.uniform(ppt, indptr, subs, cur))
    # fixed point
    np.testing.assert_array_equal(C.uniform(ppt, indptr, subs, out), out)


def test_range_large_matches_reference():
    rng = np.random.default_rng(SEED + 3)
    T, M = 80, 150
    ppt = rng.integers(0, 90, T).astype(np.int32)
    rows = [rng.choice(T, rng.integers(0, 20), replace=True).astype(np.int32)
            for _ in range(M)]
    static = rng.random(M) < 0.3
    indptr, subs = csr(rows)
    out = C.range_(ppt, indptr, subs, None, static_member=static)
    np.testing.assert_array_equal(out, ref_range(ppt.tolist(), [r.tolist() for r in rows],
                                                 static.tolist()))


# Run lengths around the range kernel's memcmp blocks (8, doubling to 1024 rows), so a run can
# end at, before or after a block edge, or inside a block that must be bisected.
RUN_LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 24, 25, 63, 64, 65, 120, 1023, 1024, 1025, 1100]


def _runs_group(rng):
    """Members in runs of byte-identical rows (how real groups look: one run per distinct
    subscription), with the neighbours that must not join a run: the same set in another
    order, one topic more, a duplicate entry, an empty row."""
    T = int(rng.integers(1, 30))
    ppt = rng.integers(0, 60, T).astype(np.int32)
    ppt[rng.random(T) < 0.1] = 0
    rows = []
    target = int(rng.choice([20, 300, 2500]))
    while len(rows) < target:
        k = int(rng.integers(0, min(T, 12) + 1))
        row = rng.choice(T, k, replace=False).astype(np.int32)
        kind = rng.integers(0, 6)
        if kind == 0 and k > 1:
            row = np.append(row, row[0]).astype(np.int32)          # a duplicate entry
        n = int(rng.choice(RUN_LENGTHS))
        rows += [row] * n
        if kind == 1 and k > 1:
            rows.append(row[::-1].copy())                          # same set, other order
        elif kind == 2 and k < T:
            extra = np.setdiff1d(np.arange(T, dtype=np.int32), row)[:1]
            rows.append(np.concatenate([row, extra]).astype(np.int32))
        elif kind == 3:
            rows.append(np.zeros(0, np.int32))
    return ppt, rows


def test_range_runs_match_reference():
    """Seeded random groups built from runs of identical rows (statics or not) against the
    plain-Python reference. On failure, rerun with the GROUPCOORD_TEST_SEED printed."""
    print("range runs: GROUPCOORD_TEST_SEED=%d" % SEED)
    rng = np.random.default_rng(SEED + 4)
    for case in range(40):
        ppt, rows = _runs_group(rng)
        M = len(rows)
        static = (rng.random(M) < 0.2) if case % 3 == 0 else None
        indptr, subs = csr(rows)
        out = C.range_(ppt, indptr, subs, None, static_member=static)
        ref = ref_range(ppt.tolist(), [r.tolist() for r in rows],
                        None if static is None else static.tolist())
        assert np.array_equal(out, ref), "case %d (GROUPCOORD_TEST_SEED=%d)" % (case, SEED)


def test_range_argument_forms_agree():
    """Arrays the kernel takes as they are, and everything the wrapper converts first (lists,
    other integer widths, strided and big-endian arrays, bool/uint8/int statics), give the
    same owners."""
    ppt = np.array([5, 0, 7, 3], np.int32)
    rows = [[0, 2], [0, 2], [3, 2, 0], [2], [0, 2]]
    indptr, subs = csr(rows)
    static = np.array([0, 1, 0, 0, 1], np.uint8)
    want = ref_range(ppt.tolist(), rows, static.astype(bool).tolist())
    strided = np.zeros(2 * subs.size, np.int32)
    strided[::2] = subs
    forms = [
        (ppt, indptr, subs, static),
        (ppt.tolist(), indptr.tolist(), subs.tolist(), static.tolist()),
        (ppt.astype(np.int64), indptr.astype(np.int32), subs.astype(np.int16), static.astype(bool)),
        (ppt.astype(">i4"), indptr.astype(">i8"), strided[::2], static.astype(np.int64) * 7),
    ]
    for p, i, s, st_ in forms:
        np.testing.assert_array_equal(C.range_(p, i, s, None, static_member=st_), want)
    # the kernel itself answers None (convert first) for anything it cannot read as it is
    assert K.range_(ppt, indptr, strided[::2]) is None
    assert K.range_(ppt.astype(np.int64), indptr, subs) is None
    assert K.range_(ppt, indptr, subs, static.astype(np.int32)) is None
    np.testing.assert_array_equal(K.range_(ppt, indptr, subs, static.astype(bool)), want)


def test_range_bad_arguments_fast_path():
    ppt = np.array([2, 2], np.int32)
    with pytest.raises(ValueError):                 # a later run's row names topic 2 of 2
        C.range_(ppt, np.array([0, 1, 2, 3], np.int64), np.array([0, 0, 2], np.int32))
    with pytest.raises(ValueError):                 # indptr going backwards
        C.range_(ppt, np.array([0, 2, 1, 3], np.int64), np.array([0, 1, 0], np.int32))
    with pytest.raises(ValueError):                 # current of the wrong length
        C.range_(ppt, np.array([0, 1], np.int64), np.array([0], np.int32),
                 np.zeros(3, np.int32))
    with pytest.raises(ValueError):
        C.range_(np.array([-1], np.int32), np.array([0, 1], np.int64), np.array([0], np.int32))
    assert C.range_(np.array([3], np.int32), np.array([0], np.int64),
                    np.zeros(0, np.int32)).tolist() == [-1, -1, -1]
