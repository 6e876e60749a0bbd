"""groupcoord.assign.many, "many groups at once" (docs/assign.md): every *_many function
against the per-group API on every group's slice, on seeded random inputs, and bad layouts
(offsets that decrease or do not span their arrays, lengths that disagree) rejected with a
clear ValueError before any kernel reads out of bounds.

GROUPCOORD_TEST_SEED (default below) seeds every random input; it is printed with each test.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from groupcoord.assign import classic as CL
from groupcoord.assign import connect as CN
from groupcoord.assign import consumer as CS
from groupcoord.assign import kernels as K
from groupcoord.assign import many as B

SEED = int(os.environ.get("GROUPCOORD_TEST_SEED", "20261121"))


@pytest.fixture(autouse=True)
def _show_seed():
    # captured, and shown with any failure of the test
    print("seed %d (GROUPCOORD_TEST_SEED)" % SEED)


# ------------------------------------------------------------------------------ assignors

def _consumer_groups(rng, G):
    """G random consumer groups: (ppt, topic_off, sub_indptr, subs, member_off, current)
    plus the per-group pieces."""
    groups = []
    for _ in range(G):
        T = int(rng.integers(0, 5))
        M = int(rng.integers(0, 7))
        ppt = rng.integers(0, 9, size=T).astype(np.int32)
        subs = [np.unique(rng.integers(0, T, size=int(rng.integers(0, T + 1))))
                if T else np.zeros(0, np.int64) for _ in range(M)]
        if M and T and rng.random() < 0.5:          # homogeneous half of the time
            subs = [np.arange(T)] * M
        sip = B.offsets([len(s) for s in subs])
        sv = (np.concatenate(subs) if subs else np.zeros(0)).astype(np.int32)
        n = int(ppt.sum())
        cur = rng.integers(-2, max(M, 1) + 1, size=n).astype(np.int32)   # some stale
        groups.append((ppt, sip, sv, cur, M))
    ppt = np.concatenate([g[0] for g in groups]).astype(np.int32)
    toff = B.offsets([len(g[0]) for g in groups])
    moff = B.offsets([g[4] for g in groups])
    sip = B.offsets(np.concatenate([np.diff(g[1]) for g in groups]))
    subs = np.concatenate([g[2] for g in groups]).astype(np.int32)
    cur = np.concatenate([g[3] for g in groups]).astype(np.int32)
    return (ppt, toff, sip, subs, moff, cur), groups


def test_consumer_assignors_many_equal_per_group():
    rng = np.random.default_rng(SEED)
    args, groups = _consumer_groups(rng, 60)
    ppt, toff, sip, subs, moff, cur = args
    uoff = B.consumer_unit_off(ppt, toff)
    uni = B.uniform_many(ppt, toff, sip, subs, moff, cur)
    rng_ = B.range_many(ppt, toff, sip, subs, moff)
    # cooperative-sticky claims: members own their units of current (valid owners only)
    cur_valid = np.where((cur >= 0) & (cur < np.repeat(np.diff(moff), np.diff(uoff))), cur, -1)
    tgt, fin = B.cooperative_sticky_many(ppt, toff, sip, subs, moff, cur_valid)
    for g, (p, si, sv, c, M) in enumerate(groups):
        sl = slice(uoff[g], uoff[g + 1])
        assert np.array_equal(uni[sl], CS.uniform(p, si, sv, c)), g
        assert np.array_equal(rng_[sl], CS.range_(p, si, sv)), g
        cv = cur_valid[sl]
        oip, own = K.members_csr(cv, M)
        ref = CL.cooperative_sticky(p, si, sv, oip, own, np.zeros(M, np.int32))
        assert np.array_equal(tgt[sl], ref.target_owner), g
        assert np.array_equal(fin[sl], ref.final_owner), g


def test_connect_assignors_many_equal_per_group():
    rng = np.random.default_rng(SEED + 1)
    G = 60
    tcs, curs, ws, holds, losts, cands = [], [], [], [], [], []
    for _ in range(G):
        tc = rng.integers(0, 6, size=int(rng.integers(0, 5))).astype(np.int64)
        n = int((tc + 1).sum())
        Wn = int(rng.integers(0, 6))
        cur = rng.integers(-2, max(Wn, 1), size=n).astype(np.int32)
        cur[cur >= Wn] = -1
        lost = rng.random(n) < 0.2
        lost &= cur == -1
        tcs.append(tc)
        curs.append(cur)
        ws.append(Wn)
        holds.append(bool(rng.random() < 0.6))
        losts.append(lost)
        cands.append(rng.random(Wn) < 0.5)
    tc = np.concatenate(tcs)
    coff = B.offsets([len(t) for t in tcs])
    moff = B.offsets(ws)
    cur = np.concatenate(curs)
    lost = np.concatenate(losts)
    cand = np.concatenate(cands) if sum(ws) else np.zeros(0, bool)
    uoff = B.connect_unit_off(tc, coff)
    eg = B.eager_many(tc, coff, ws)
    ica = B.incremental_cooperative_many(tc, coff, cur, ws, holds, lost, cand, moff)
    ica_default = B.incremental_cooperative_many(tc, coff, cur, ws, holds)
    for g in range(G):
        sl = slice(uoff[g], uoff[g + 1])
        assert np.array_equal(eg[sl], CN.eager(ws[g], tcs[g])), g
        # hold <=> the delay runs: now 0, delay 1000 (hold) or 0 (no hold)
        delay = 1000 if holds[g] else 0
        units = np.flatnonzero(losts[g]).astype(np.int32)
        state = CN.IcaState(1000, units) if len(units) else None
        ref = CN.incremental_cooperative(tcs[g], curs[g], ws[g], 0, delay, state,
                                         joined=cands[g])
        assert np.array_equal(ica.owner[sl], ref.owner), g
        assert ica.moved[g] == ref.moved, g
        assert ica.held[g] == len(ref.next_state.lost), g
        ref2 = CN.incremental_cooperative(tcs[g], curs[g], ws[g], 0, delay)
        assert np.array_equal(ica_default.owner[sl], ref2.owner), g


def test_kernels_many_equal_per_group():
    rng = np.random.default_rng(SEED + 2)
    G = 50
    ms = rng.integers(0, 6, size=G)
    ns = rng.integers(0, 30, size=G)
    prev = [rng.integers(-1, max(m, 1), size=n).astype(np.int32) for m, n in zip(ms, ns)]
    new = [rng.integers(-1, max(m, 1), size=n).astype(np.int32) for m, n in zip(ms, ns)]
    for p, m in zip(prev + new, list(ms) * 2):
        p[p >= m] = -1
    new[3][:1] = 99 if len(new[3]) else new[3][:1]          # one invalid owner
    uoff = B.offsets(ns)
    moff = B.offsets(ms)
    P = np.concatenate(prev)
    N = np.concatenate(new)
    ip, un = B.members_csr_many(N, uoff, moff)
    d = B.diff_counts_many(P, N, uoff)
    v = B.validate_many(N, uoff, moff)
    met = B.assignment_metrics(P, N, uoff, moff)
    for g in range(G):
        sl = slice(uoff[g], uoff[g + 1])
        M = int(ms[g])
        ok = (new[g] >= -1) & (new[g] < M)
        if ok.all():
            rip, run = K.members_csr(new[g], M)
            gip = ip[moff[g]:moff[g + 1] + 1]
            assert np.array_equal(gip - gip[0], rip)
            assert np.array_equal(un[gip[0]:gip[-1]], run)
            df = K.diff(prev[g], new[g], M)
            assert d[g, 0] == len(df.revoke_units) and d[g, 1] == len(df.assign_units)
            kept = int(((prev[g] == new[g]) & (prev[g] >= 0)).sum())
            assert d[g, 2] == kept
        assert v[g, 0] == int((new[g] == -1).sum())
        assert v[g, 1] == int((~ok).sum())
        assert met.unassigned[g] == int((new[g] == -1).sum())
        assert met.moved[g] == int(((prev[g] >= 0) & (prev[g] != new[g])).sum())
    # validate_lists: one kernel call over all groups, the same verdict as per group
    good = np.where((N >= -1) & (N < np.repeat(ms, ns)), N, -1)
    lists = B.validate_lists(good, uoff, moff)
    assert lists.counts[K.ViolationKind.UNASSIGNED] == int((good == -1).sum())
    assert lists.counts[K.ViolationKind.DUPLICATE] == 0


def test_min_moved_is_exact_for_one_pool():
    # 3 members holding 5, 1, 0 of 6 units -> quotas 2 each: 3 moves needed
    prev = np.array([0, 0, 0, 0, 0, 1], np.int32)
    new = np.array([0, 0, 1, 2, 2, 1], np.int32)
    m = B.assignment_metrics(prev, new, [0, 6], [0, 3])
    assert m.min_moved[0] == 3 and m.moved[0] == 3 and m.spread[0] == 0
    # 7 units over 3 members: one +1 slot goes to the member holding 5 (saves a move)
    prev = np.array([0, 0, 0, 0, 0, 1, -2], np.int32)
    m = B.assignment_metrics(prev, np.array([0, 0, 0, 1, 2, 1, 2], np.int32), [0, 7], [0, 3])
    assert m.min_moved[0] == 2 and m.moved[0] == 2


def test_unit_offsets_equal_per_group_unit_counts():
    rng = np.random.default_rng(SEED + 3)
    (ppt, toff, _, _, _, _), groups = _consumer_groups(rng, 40)
    uoff = B.consumer_unit_off(ppt, toff)
    assert np.array_equal(np.diff(uoff), [CS.topic_base(g[0])[-1] for g in groups])
    tcs = [rng.integers(0, 5, size=int(rng.integers(0, 4))) for _ in range(40)]
    coff = B.offsets([len(t) for t in tcs])
    cuoff = B.connect_unit_off(np.concatenate(tcs), coff)
    assert np.array_equal(np.diff(cuoff), [CN.connect_units(t)[-1] for t in tcs])


def _owner_groups(rng, G, max_m=6, max_n=30):
    """G random groups' owner arrays (-1 or a member; none invalid): (ms, ns, owners)."""
    ms = rng.integers(0, max_m, size=G)
    ns = rng.integers(0, max_n, size=G)
    owners = [rng.integers(-1, m, size=n).astype(np.int32) for m, n in zip(ms, ns)]
    return ms, ns, owners


def test_members_csr_many_global_units_and_validate_many_required():
    rng = np.random.default_rng(SEED + 4)
    ms, ns, owners = _owner_groups(rng, 50)
    uoff, moff = B.offsets(ns), B.offsets(ms)
    owner = np.concatenate(owners)
    required = rng.random(owner.size) < 0.5
    ip, un = B.members_csr_many(owner, uoff, moff, local_units=False)
    v = B.validate_many(owner, uoff, moff, required)
    for g in range(len(ms)):
        rip, run = K.members_csr(owners[g], int(ms[g]))
        gip = ip[moff[g]:moff[g + 1] + 1]
        assert np.array_equal(gip - gip[0], rip), g
        assert np.array_equal(un[gip[0]:gip[-1]], run + uoff[g]), g
        req = required[uoff[g]:uoff[g + 1]]
        assert v[g, 0] == int(((owners[g] == -1) & req).sum()), g
        assert v[g, 1] == 0, g


def _metrics_reference(prev, new, M, kind):
    """assignment_metrics' definitions, written out for one group."""
    live = lambda a, sel: a[sel & (a >= 0) & (a < M)]          # noqa: E731
    everything = np.ones(new.size, bool)
    row = [int((new == -1).sum()), int(((new < -1) | (new >= M)).sum()),
           int(((prev >= 0) & (prev < M) & (prev != new)).sum()), 0, 0]
    for k in (0, 1):
        sel = kind == k
        n = int(sel.sum())
        if n == 0 or M == 0:
            continue
        q, r = divmod(n, M)
        kept = np.bincount(live(prev, sel), minlength=M)
        row[3] += int(np.maximum(kept - q, 0).sum()) - min(r, int((kept > q).sum()))
        got = np.bincount(live(new, sel), minlength=M)
        row[4] = max(row[4], int(got.max() - got.min()))
    load = np.bincount(live(new, everything), minlength=M) if M else np.zeros(1, int)
    return row + [int(load.max()), int(load.min())]


@pytest.mark.parametrize("with_kind", [False, True])
def test_assignment_metrics_equal_a_per_group_reference(with_kind):
    rng = np.random.default_rng(SEED + 5 + with_kind)
    ms, ns, news = _owner_groups(rng, 60)
    prevs = [rng.integers(-2, m + 2, size=n).astype(np.int32) for m, n in zip(ms, ns)]
    news[5][:2] = 77                                       # invalid owners count as such
    kinds = [(rng.random(n) < 0.7).astype(np.uint8) if with_kind else np.zeros(n, np.uint8)
             for n in ns]
    uoff, moff = B.offsets(ns), B.offsets(ms)
    met = B.assignment_metrics(np.concatenate(prevs), np.concatenate(news), uoff, moff,
                               np.concatenate(kinds) if with_kind else None)
    for g in range(len(ms)):
        got = [int(c[g]) for c in met]
        assert got == _metrics_reference(prevs[g], news[g], int(ms[g]), kinds[g]), g


def test_validate_lists_equals_per_group_validate():
    rng = np.random.default_rng(SEED + 7)
    ms, ns, owners = _owner_groups(rng, 50)
    uoff, moff = B.offsets(ns), B.offsets(ms)
    required = rng.random(int(uoff[-1])) < 0.6
    for req in (None, required):
        lists = B.validate_lists(np.concatenate(owners), uoff, moff, required=req)
        total = dict.fromkeys(K.ViolationKind, 0)
        for g in range(len(ms)):
            ip, un = K.members_csr(owners[g], int(ms[g]))
            one = K.validate(ip, un, int(ns[g]),
                             required=None if req is None else req[uoff[g]:uoff[g + 1]],
                             require_all=req is None, want_owner=False)
            for k, c in one.counts.items():
                total[k] += c
        assert lists.counts == total


# ------------------------------------------------------------------------------ reconcile

def _reconcile_state(rng, ms, ns):
    """Random groups mid-rebalance, in reconcile_round_many's arrays (global numbering)."""
    G = len(ms)
    uoff, moff = B.offsets(ns), B.offsets(ms)
    pick = lambda m, n: rng.integers(-1, m, size=n).astype(np.int32)     # noqa: E731
    holder_old = np.concatenate([pick(m, n) for m, n in zip(ms, ns)])
    target = np.concatenate([pick(m, n) for m, n in zip(ms, ns)])
    phase = rng.random(int(moff[-1]))
    hb_order = np.concatenate([moff[g] + np.argsort(phase[moff[g]:moff[g + 1]], kind="stable")
                               for g in range(G)]).astype(np.int32)
    glob_old = K.globalize(holder_old, uoff, moff)
    glob_tgt = K.globalize(target, uoff, moff)
    own_ip, own_u = K.members_csr(glob_old, int(moff[-1]))
    tgt_ip, tgt_u = K.members_csr(glob_tgt, int(moff[-1]))
    n = int(uoff[-1])
    counts = (rng.random(n) < 0.9).astype(np.uint8)
    state = dict(holder_old=holder_old, holder_new=np.full(n, -1, np.int32),
                 told=np.zeros(n, np.uint8), since=np.zeros(n),
                 released_at=np.full(n, np.nan), acquired_at=np.full(n, np.nan),
                 down=np.zeros(G), unowned=np.zeros(G, np.int64),
                 max_unowned=np.zeros(G, np.int64), in_flight=np.zeros(G, np.int64),
                 last_change=np.zeros(G))
    fixed = dict(hb_order=hb_order, phase=phase, own_indptr=own_ip, own_units=own_u,
                 tgt_indptr=tgt_ip, tgt_units=tgt_u, target=target, counts=counts)
    return uoff, moff, fixed, state


def _round(uoff, moff, fixed, state, t0):
    f, s = fixed, state
    B.reconcile_round_many(uoff, moff, f["hb_order"], f["phase"], f["own_indptr"],
                           f["own_units"], f["tgt_indptr"], f["tgt_units"], f["target"],
                           s["holder_old"], s["holder_new"], s["told"], f["counts"],
                           s["since"], s["released_at"], s["acquired_at"], s["down"],
                           s["unowned"], s["max_unowned"], s["in_flight"], s["last_change"],
                           t0)


PER_GROUP = ("down", "unowned", "max_unowned", "in_flight", "last_change")


def _one_group(g, uoff, moff, fixed, state):
    """Group g's slices of every array, renumbered as a call with that group alone."""
    u0, u1, m0, m1 = uoff[g], uoff[g + 1], moff[g], moff[g + 1]
    f = dict(hb_order=(fixed["hb_order"][m0:m1] - m0).astype(np.int32),
             phase=fixed["phase"][m0:m1].copy(), target=fixed["target"][u0:u1].copy(),
             counts=fixed["counts"][u0:u1].copy())
    for k in ("own", "tgt"):
        ip = fixed[k + "_indptr"][m0:m1 + 1]
        f[k + "_indptr"] = ip - ip[0]
        f[k + "_units"] = (fixed[k + "_units"][ip[0]:ip[-1]] - u0).astype(np.int32)
    s = {k: (v[g:g + 1] if k in PER_GROUP else v[u0:u1]).copy() for k, v in state.items()}
    return np.array([0, u1 - u0]), np.array([0, m1 - m0]), f, s


def test_reconcile_round_many_equals_each_group_alone_and_converges():
    rng = np.random.default_rng(SEED + 8)
    ms, ns, _ = _owner_groups(rng, 40, max_m=5, max_n=20)
    uoff, moff, fixed, state = _reconcile_state(rng, ms, ns)
    alone = [_one_group(g, uoff, moff, fixed, state) for g in range(len(ms))]
    for r in range(4):
        _round(uoff, moff, fixed, state, float(r))
        for a in alone:
            _round(*a, float(r))
    for g, (_, _, _, s) in enumerate(alone):
        u0, u1 = uoff[g], uoff[g + 1]
        for k, v in s.items():
            whole = state[k][g:g + 1] if k in PER_GROUP else state[k][u0:u1]
            assert np.array_equal(whole, v, equal_nan=True), (g, k)
    # revoke before assign: every target reached in 4 rounds, nothing ever held twice
    assert not state["in_flight"].any()
    tgt = fixed["target"]
    assert np.array_equal(state["holder_new"][tgt >= 0], tgt[tgt >= 0])
    assert not B.owned_twice_many(uoff, state["holder_old"], state["holder_new"],
                                  state["released_at"], state["acquired_at"]).any()


def test_owned_twice_many_equals_its_definition_per_group():
    rng = np.random.default_rng(SEED + 9)
    ns = rng.integers(0, 12, size=30)
    uoff = B.offsets(ns)
    n = int(uoff[-1])
    old = rng.integers(-1, 3, size=n).astype(np.int32)
    new = rng.integers(-1, 3, size=n).astype(np.int32)
    rel = np.where(rng.random(n) < 0.3, np.nan, rng.random(n))
    acq = np.where(rng.random(n) < 0.3, np.nan, rng.random(n))
    got = B.owned_twice_many(uoff, old, new, rel, acq)
    # held by two members now, or acquired before the release (NaN: never happened)
    twice = ((old >= 0) & (new >= 0) & (old != new)) | (acq < rel)
    for g in range(len(ns)):
        assert got[g] == int(twice[uoff[g]:uoff[g + 1]].sum()), g


# ------------------------------------------------------------------------------ bad layouts

def _i32(*v):
    return np.array(v, np.int32)


def _i64(*v):
    return np.array(v, np.int64)


# Two consumer groups (topics of 2 and 1 partitions; 2 and 1 members, all subscribed) and
# two connect groups (one connector of 1 task each; 1 and 2 workers): each case below breaks
# exactly one thing of a valid call.
PPT, TOFF, SIP, SUBS, MOFF = _i32(2, 1), _i64(0, 1, 2), _i64(0, 1, 2, 3), _i32(0, 0, 0), \
    _i64(0, 2, 3)
CUR = _i32(0, 1, 0)
TC, COFF, NW = _i64(1, 1), _i64(0, 1, 2), _i32(1, 2)


def _reconcile_args(**bad):
    n, m, g = 3, 3, 2
    a = dict(unit_off=_i64(0, 2, 3), member_off=_i64(0, 2, 3), hb_order=_i32(1, 0, 2),
             phase=np.zeros(m), own_indptr=_i64(0, 1, 2, 3), own_units=_i32(0, 1, 2),
             tgt_indptr=_i64(0, 1, 2, 3), tgt_units=_i32(1, 0, 2), target=_i32(1, 0, 0),
             holder_old=_i32(0, 1, 0), holder_new=np.full(n, -1, np.int32),
             told=np.zeros(n, np.uint8), counts=np.ones(n, np.uint8), since=np.zeros(n),
             released_at=np.full(n, np.nan), acquired_at=np.full(n, np.nan),
             down=np.zeros(g), unowned=np.zeros(g, np.int64), max_unowned=np.zeros(g, np.int64),
             in_flight=np.zeros(g, np.int64), last_change=np.zeros(g), t0=0.0)
    a.update(bad)
    return lambda: B.reconcile_round_many(**a)


BAD = {
    "topic_off decreases": (lambda: B.uniform_many(PPT, _i64(0, 2, 1, 2), SIP, SUBS,
                                                   _i64(0, 2, 3, 3), CUR),
                            "topic_off decreases at entry 2"),
    "topic_off short of the topics": (lambda: B.range_many(PPT, _i64(0, 1), SIP, SUBS,
                                                           _i64(0, 3)),
                                      "topic_off must start at 0 and end at 2"),
    "empty offsets": (lambda: B.consumer_unit_off(PPT, _i64()),
                      "topic_off must have at least one entry"),
    "member_off decreases": (lambda: B.uniform_many(PPT, TOFF, SIP, SUBS, _i64(0, 3, 2),
                                                    CUR), "member_off decreases at entry 2"),
    "member_off per group": (lambda: B.range_many(PPT, TOFF, SIP, SUBS, _i64(0, 3)),
                             "member_off must have 3 entries, got 2"),
    "sub_indptr decreases": (lambda: B.range_many(PPT, TOFF, _i64(0, 2, 1, 3), SUBS, MOFF),
                             "sub_indptr decreases at entry 2"),
    "sub_indptr per member": (lambda: B.cooperative_sticky_many(PPT, TOFF, _i64(0, 3), SUBS,
                                                                MOFF, CUR),
                              "sub_indptr must have 4 entries, got 2"),
    "subs longer than sub_indptr": (lambda: B.uniform_many(PPT, TOFF, SIP, _i32(0, 0, 0, 0),
                                                           MOFF, CUR),
                                    "sub_indptr must start at 0 and end at 4"),
    "current per unit": (lambda: B.uniform_many(PPT, TOFF, SIP, SUBS, MOFF, _i32(0, 1)),
                         "current has 2 units, the groups 3"),
    "sticky current per unit": (lambda: B.cooperative_sticky_many(PPT, TOFF, SIP, SUBS, MOFF,
                                                                  _i32(0)),
                                "current/target/final must have 3 units"),
    "negative partitions": (lambda: B.consumer_unit_off(_i32(2, -1), TOFF),
                            r"partitions_per_topic\[1\] = -1 is negative"),
    "topic outside the group": (lambda: B.uniform_many(PPT, TOFF, SIP, _i32(0, 1, 0), MOFF,
                                                       CUR), "group 0: topic index out of range"),
    "conn_off decreases": (lambda: B.eager_many(_i64(1, 1, 1), _i64(0, 2, 1, 3), _i32(1, 1, 1)),
                           "conn_off decreases at entry 2"),
    "negative task count": (lambda: B.connect_unit_off(_i64(1, -2), COFF),
                            r"task_count\[1\] = -2 is negative"),
    "n_workers per group": (lambda: B.eager_many(TC, COFF, _i32(1)),
                            "n_workers must have one entry per group"),
    "hold per group": (lambda: B.incremental_cooperative_many(TC, COFF, _i32(0, 0, 1, 1), NW,
                                                              [True]),
                       "n_workers and hold must have one entry per group"),
    "ica current per unit": (lambda: B.incremental_cooperative_many(TC, COFF, _i32(0), NW,
                                                                    [True, False]),
                             "current/out must have 4 units"),
    "candidates per worker": (lambda: B.incremental_cooperative_many(
        TC, COFF, _i32(0, 0, 1, 1), NW, [True, False], None, [True, True], _i64(0, 1, 2)),
        "member_off must start at 0 and end at 2, got 0..2|group 1: cand has 1 entries"),
    "ica current not a worker": (lambda: B.incremental_cooperative_many(
        TC, COFF, _i32(0, 0, 5, 1), NW, [True, False]),
        r"group 1: current\[0\] = 5 is not -2, -1 or a worker index < 2"),
    "unit_off short of the units": (lambda: B.members_csr_many(CUR, _i64(0, 2), _i64(0, 2)),
                                    "unit_off must start at 0 and end at 3, got 0..2"),
    "unit_off decreases": (lambda: B.validate_many(CUR, _i64(0, 3, 2, 3), _i64(0, 1, 2, 3)),
                           "unit_off decreases at entry 2"),
    "required per unit": (lambda: B.validate_many(CUR, _i64(0, 2, 3), MOFF, [True]),
                          "required must be empty or per unit"),
    "prev and new lengths": (lambda: B.assignment_metrics(_i32(0, 0), CUR, _i64(0, 2, 3), MOFF),
                             "prev and new must have the same length"),
    "kind not 0 or 1": (lambda: B.assignment_metrics(CUR, CUR, _i64(0, 2, 3), MOFF,
                                                     _i32(0, 2, 1)), r"kind\[1\] = 2"),
    "diff lengths": (lambda: B.diff_counts_many(CUR, _i32(0), _i64(0, 2, 3)),
                     "current and target must have the same length"),
    "validate_lists offsets": (lambda: B.validate_lists(CUR, _i64(0, 2, 3), _i64(0, 2)),
                               "member_off must have 3 entries, got 2"),
    "owned_twice lengths": (lambda: B.owned_twice_many(_i64(0, 2, 3), CUR, _i32(0, 1),
                                                       np.zeros(3), np.zeros(3)),
                            r"holder_new must have one entry per unit \(3\), got 2"),
    "negative sizes": (lambda: B.offsets([2, -1]), r"sizes\[1\] = -1 is negative"),
    "reconcile unit_off": (_reconcile_args(unit_off=_i64(0, 3, 2)),
                           "unit_off must start at 0 and end at 3, got 0..2"),
    "reconcile per member": (_reconcile_args(phase=np.zeros(2)),
                             r"phase must have one entry per member \(3\), got 2"),
    "reconcile per group": (_reconcile_args(in_flight=np.zeros(1, np.int64)),
                            r"in_flight must have one entry per group \(2\), got 1"),
    "reconcile own_indptr": (_reconcile_args(own_indptr=_i64(0, 2, 1, 3)),
                             "own_indptr decreases at entry 2"),
    "reconcile member of another group": (_reconcile_args(hb_order=_i32(2, 0, 2)),
                                          r"hb_order\[0\] = 2 is not a member of group 0"),
    "reconcile unit of another group": (_reconcile_args(tgt_units=_i32(2, 0, 2)),
                                        r"tgt_units\[0\] = 2 is not a unit of group 0"),
    "reconcile state dtype": (_reconcile_args(holder_new=np.full(3, -1, np.int64)),
                              "Buffer dtype mismatch"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_layouts_are_value_errors(case):
    call, message = BAD[case]
    with pytest.raises(ValueError, match=message):
        call()


def test_the_valid_call_behind_the_bad_layouts_runs():
    # each BAD case differs from these calls in the one thing it breaks
    assert B.uniform_many(PPT, TOFF, SIP, SUBS, MOFF, CUR).tolist() == [0, 1, 0]
    assert B.eager_many(TC, COFF, NW).tolist() == [0, 0, 0, 1]
    _reconcile_args()()
