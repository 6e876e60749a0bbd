"""Kafka Connect assignors (groupcoord.assign.connect): eager and incremental cooperative.

Property tests compare the native kernels with the small pure-Python reference model below
(``ref_eager``, ``ref_ica``: obviously-correct, quadratic, written from the semantics in the
module docstring) and check the invariants independently of it. Hypothesis is seeded: the
default seed is 415; set GROUPCOORD_TEST_SEED=N to explore others (the seed in use is printed
with any failure).
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from groupcoord.assign.connect import (IcaState, WorkerAssignment, connect_units, eager,
                                       from_wire, incremental_cooperative, remap_previous,
                                       to_wire, units_to_wire, wire_to_units)

SEED = int(os.environ.get("GROUPCOORD_TEST_SEED", "415"))
PROPS = settings(max_examples=300, deadline=None, database=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow])
DELAY = 300_000          # scheduled.rebalance.max.delay.ms, Connect's default (5 minutes)


@pytest.fixture(autouse=True)
def _print_seed():
    print("hypothesis seed %d (set GROUPCOORD_TEST_SEED to change)" % SEED)


# ------------------------------------------------------------------- reference models
def ref_eager(n_workers, task_count):
    """Connect's eager assignor, literally: one circular iterator over the workers, first
    the connectors, then every connector's tasks."""
    base = [0]
    for t in task_count:
        base.append(base[-1] + t + 1)
    owner = [-1] * base[-1]
    if n_workers == 0:
        return owner

    def circular():
        while True:
            yield from range(n_workers)

    it = circular()
    for c in range(len(task_count)):
        owner[base[c]] = next(it)
    for c in range(len(task_count)):
        for t in range(task_count[c]):
            owner[base[c] + 1 + t] = next(it)
    return owner


def ref_ica(task_count, current, n_workers, now_ms, delay_ms, state=None, joined=None):
    """Incremental cooperative target, one unit at a time with a linear scan for the least
    loaded worker. Returns (owner, held, deadline, delay, moved)."""
    base = [0]
    for t in task_count:
        base.append(base[-1] + t + 1)
    n = base[-1]
    current = [int(v) for v in current]
    conn_units = [base[c] for c in range(len(task_count))]
    is_conn = set(conn_units)
    task_units = [u for u in range(n) if u not in is_conn]
    lost_prev = set(int(u) for u in state.lost) if state is not None else set()
    pending = state.deadline_ms if state is not None else -1
    deadline = now_ms + delay_ms
    if pending >= 0:
        deadline = min(deadline, pending)
    hold = delay_ms > 0 and now_ms < deadline
    W = n_workers
    if joined is None:
        cand = [all(v != w for v in current) for w in range(W)]
    else:
        cand = [bool(x) for x in joined]
    owner = [-1] * n
    held = []
    moved = 0
    for units in (conn_units, task_units):
        lost = [u for u in units
                if current[u] == -2 or (current[u] == -1 and u in lost_prev)]
        if W == 0:
            if hold:
                held += lost
            continue
        q, extras = divmod(len(units), W)
        cnt = [sum(1 for u in units if current[u] == w) for w in range(W)]
        cap = [q] * W
        for w in range(W):
            if cnt[w] > q and extras:
                cap[w] = q + 1
                extras -= 1
        load = [0] * W
        pool, held_here = [], []
        for u in units:
            v = current[u]
            if v >= 0 and load[v] < cap[v]:
                owner[u] = v
                load[v] += 1
            elif v >= 0:
                pool.append(u)
                moved += 1
            elif hold and u in lost:
                held_here.append(u)
            else:
                pool.append(u)

        def give(todo, eligible):
            nonlocal extras
            done = 0
            for u in todo:
                best = None
                for w in eligible:
                    if load[w] < q or (load[w] == q and extras > 0):
                        if best is None or load[w] < load[best]:
                            best = w
                if best is None:
                    break
                if load[best] == q:
                    extras -= 1
                owner[u] = best
                load[best] += 1
                done += 1
            return done

        if held_here and any(cand):
            taken = give(held_here, [w for w in range(W) if cand[w]])
            held_here = held_here[taken:]
        held += held_here
        give(pool, range(W))
    held.sort()
    if held:
        return owner, held, deadline, deadline - now_ms, moved
    return owner, [], -1, -1, moved


# ------------------------------------------------------------------------ helpers
def kinds(task_count):
    base = connect_units(task_count)
    is_conn = np.zeros(int(base[-1]), dtype=bool)
    is_conn[base[:-1]] = True
    return is_conn


def per_worker(owner, mask, n_workers):
    o = np.asarray(owner)[mask]
    return np.bincount(o[o >= 0], minlength=n_workers)


def min_moves(task_count, current, n_workers):
    """The fewest units that must leave a live owner so that each kind can end balanced:
    sum over kinds of owned - max keepable, max keepable = sum(min(cnt, q)) + the number of
    workers above q that can keep q+1 (at most r)."""
    is_conn = kinds(task_count)
    cur = np.asarray(current)
    total = 0
    for mask in (is_conn, ~is_conn):
        cnt = per_worker(cur, mask, n_workers)
        q, r = divmod(int(mask.sum()), n_workers)
        keep = int(np.minimum(cnt, q).sum()) + min(r, int((cnt > q).sum()))
        total += int(cnt.sum()) - keep
    return total


def check_invariants(task_count, current, n_workers, res, state=None):
    """What must hold for any result, independent of the reference model."""
    owner, st_, delay = res.owner, res.next_state, res.rebalance_delay_ms
    n = int(connect_units(task_count)[-1])
    assert owner.dtype == np.int32 and owner.shape == (n,)
    assert owner.min(initial=0) >= -1 and owner.max(initial=-1) < n_workers
    held = np.asarray(st_.lost)
    unassigned = np.flatnonzero(owner == -1)
    if n_workers:
        # Every unit is assigned to a live worker, except the held lost ones.
        assert np.array_equal(unassigned, held)
    if len(held):
        assert st_.deadline_ms >= 0 and delay > 0
        # only lost units are held
        cur = np.asarray(current)
        prev = set(state.lost.tolist()) if state is not None else set()
        for u in held.tolist():
            assert cur[u] == -2 or (cur[u] == -1 and u in prev)
    else:
        assert st_ == IcaState() and delay == -1
    # Stickiness: a live owner loses exactly the minimal number of units.
    cur = np.asarray(current)
    live = cur >= 0
    lost_owner = int(np.count_nonzero(owner[live] != cur[live]))
    assert lost_owner == res.moved
    if n_workers:
        assert res.moved == min_moves(task_count, current, n_workers)
        # Balance per kind: quota over ALL units of the kind (held included).
        is_conn = kinds(task_count)
        for mask in (is_conn, ~is_conn):
            cnt = per_worker(owner, mask, n_workers)
            q, r = divmod(int(mask.sum()), n_workers)
            assert cnt.max() <= q + 1
            assert int((cnt == q + 1).sum()) <= r
            if not len(held):
                assert cnt.max() - cnt.min() <= 1


# ------------------------------------------------------------------------ strategies
@st.composite
def ica_case(draw):
    task_count = draw(st.lists(st.integers(0, 9), min_size=0, max_size=7))
    n = int(connect_units(task_count)[-1])
    n_workers = draw(st.integers(0, 7))
    current = draw(st.lists(st.integers(-2, n_workers - 1), min_size=n, max_size=n))
    lost = sorted(draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n))) if n else []
    now = draw(st.integers(0, 2000))
    delay = draw(st.sampled_from([0, 1, 500, 1000, DELAY]))
    if draw(st.booleans()):
        state = IcaState(draw(st.integers(-1, 3000)), np.array(lost, dtype=np.int32))
    else:
        state = None
    joined = None
    if draw(st.booleans()):
        joined = draw(st.lists(st.booleans(), min_size=n_workers, max_size=n_workers))
    return task_count, np.array(current, dtype=np.int32), n_workers, now, delay, state, joined


# ------------------------------------------------------------------------ units, wire
def test_connect_units():
    assert connect_units([2, 1]).tolist() == [0, 3, 5]
    assert connect_units([]).tolist() == [0]
    assert connect_units([0, 0, 3]).tolist() == [0, 1, 2, 6]
    assert connect_units(np.array([5], dtype=np.int16)).dtype == np.int64
    with pytest.raises(ValueError):
        connect_units([1, -1])
    with pytest.raises(ValueError):
        connect_units([2 ** 31])


def test_wire_shape_of_the_seed_units():
    tc = [2, 1]      # A: AC0, AT1, AT2 (tasks 0, 1); B: BC0, BT1 (task 0)
    assert units_to_wire([4, 0, 1, 3], tc) == WorkerAssignment([0, 1], [(0, [0]), (1, [0])])
    assert units_to_wire([], tc) == WorkerAssignment([], [])
    assert wire_to_units(WorkerAssignment([1], [(0, [1])]), tc).tolist() == [3, 2]
    owner = np.array([0, 0, 0, 1, 1], dtype=np.int32)
    wire = to_wire(owner, tc, 3)
    assert wire == [WorkerAssignment([0], [(0, [0, 1])]), WorkerAssignment([1], [(1, [0])]),
                    WorkerAssignment([], [])]
    assert from_wire(wire, tc).tolist() == owner.tolist()


def test_wire_errors():
    tc = [2, 1]
    with pytest.raises(ValueError):
        wire_to_units(WorkerAssignment([2], []), tc)           # no connector 2
    with pytest.raises(ValueError):
        wire_to_units(WorkerAssignment([], [(0, [2])]), tc)    # A has tasks 0, 1
    with pytest.raises(ValueError):
        wire_to_units(WorkerAssignment([], [(5, [0])]), tc)
    with pytest.raises(ValueError):
        from_wire([WorkerAssignment([0], []), WorkerAssignment([0], [])], tc)   # twice
    with pytest.raises(ValueError):
        from_wire([WorkerAssignment([], [(0, [1, 1])])], tc)
    with pytest.raises(ValueError):
        units_to_wire([5], tc)
    with pytest.raises(ValueError):
        to_wire(np.array([0, 0, 0, 2, 0], dtype=np.int32), tc, 2)


@seed(SEED)
@PROPS
@given(st.lists(st.integers(0, 6), max_size=6), st.integers(0, 5), st.data())
def test_wire_round_trip(task_count, n_workers, data):
    n = int(connect_units(task_count)[-1])
    owner = np.array(data.draw(st.lists(st.integers(-1, n_workers - 1), min_size=n,
                                        max_size=n)), dtype=np.int32)
    wire = to_wire(owner, task_count, n_workers)
    assert len(wire) == n_workers
    assert from_wire(wire, task_count).tolist() == owner.tolist()
    for w, a in enumerate(wire):
        assert sorted(wire_to_units(a, task_count).tolist()) == np.flatnonzero(owner == w).tolist()


# ------------------------------------------------------------------------------ eager
def test_eager_seed_units():
    # AC0 W0, BC0 W1, then the tasks continue the same iterator: AT1 W0, AT2 W1, BT1 W0.
    assert eager(2, [2, 1]).tolist() == [0, 0, 1, 1, 0]
    assert eager(1, [2, 1]).tolist() == [0] * 5
    assert eager(0, [2, 1]).tolist() == [-1] * 5
    assert eager(3, []).tolist() == []
    # 3 connectors x 2 tasks over 4 workers: connectors 0,1,2; tasks continue at worker 3.
    assert eager(4, [2, 2, 2]).tolist() == [0, 3, 0, 1, 1, 2, 2, 3, 0]


@seed(SEED)
@PROPS
@given(st.lists(st.integers(0, 12), max_size=10), st.integers(0, 9))
def test_eager_matches_reference(task_count, n_workers):
    assert eager(n_workers, task_count).tolist() == ref_eager(n_workers, task_count)


def test_eager_large_matches_formula():
    rng = np.random.default_rng(SEED)
    tc = rng.integers(0, 50, size=2000)
    W = 37
    owner = eager(W, tc)
    base = connect_units(tc)
    is_conn = kinds(tc)
    units = np.arange(base[-1])
    conn_of = np.searchsorted(base, units, side="right") - 1
    k = units - conn_of - 1                                  # global task number
    expect = np.where(is_conn, conn_of % W, (len(tc) + k) % W)
    assert np.array_equal(owner, expect)


# -------------------------------------------------------------- incremental cooperative
@seed(SEED)
@settings(PROPS, max_examples=1000)
@given(ica_case())
def test_ica_matches_reference(case):
    task_count, current, W, now, delay, state, joined = case
    before = current.copy()
    res = incremental_cooperative(task_count, current, W, now, delay, state, joined)
    owner, held, deadline, d, moved = ref_ica(task_count, current, W, now, delay, state, joined)
    assert res.owner.tolist() == owner
    assert res.next_state.lost.tolist() == held
    assert res.next_state.deadline_ms == deadline
    assert res.rebalance_delay_ms == d
    assert res.moved == moved
    assert np.array_equal(current, before)            # inputs are not mutated


@seed(SEED)
@settings(PROPS, max_examples=1000)
@given(ica_case())
def test_ica_invariants(case):
    task_count, current, W, now, delay, state, joined = case
    res = incremental_cooperative(task_count, current, W, now, delay, state, joined)
    check_invariants(task_count, current, W, res, state)


@seed(SEED)
@PROPS
@given(ica_case())
def test_ica_is_deterministic(case):
    task_count, current, W, now, delay, state, joined = case
    a = incremental_cooperative(task_count, current, W, now, delay, state, joined)
    b = incremental_cooperative(list(task_count), current.copy(), W, now, delay,
                                None if state is None else IcaState.from_bytes(state.to_bytes()),
                                None if joined is None else list(joined))
    assert np.array_equal(a.owner, b.owner) and a.next_state == b.next_state
    assert a.rebalance_delay_ms == b.rebalance_delay_ms and a.moved == b.moved


@seed(SEED)
@PROPS
@given(st.lists(st.integers(0, 12), min_size=1, max_size=8), st.integers(1, 8), st.data())
def test_ica_stable_assignment_is_a_fixed_point_and_join_leave_move_minimum(tc, W, data):
    n = int(connect_units(tc)[-1])
    empty = np.full(n, -1, dtype=np.int32)
    full = incremental_cooperative(tc, empty, W, 0, DELAY)
    check_invariants(tc, empty, W, full)
    assert full.moved == 0 and full.next_state == IcaState()
    # A balanced target is a fixed point.
    again = incremental_cooperative(tc, full.owner, W, 1, DELAY, full.next_state)
    assert np.array_equal(again.owner, full.owner) and again.moved == 0
    # One worker joins (at any position in the sorted order): the minimum moves, all to it.
    pos = data.draw(st.integers(0, W))
    prev_to_new = np.array([p if p < pos else p + 1 for p in range(W)], dtype=np.int32)
    cur, joined, departed = remap_previous(full.owner, prev_to_new, W + 1)
    assert departed == 0 and np.flatnonzero(joined).tolist() == [pos]
    join = incremental_cooperative(tc, cur, W + 1, 2, DELAY, again.next_state, joined)
    check_invariants(tc, cur, W + 1, join)
    changed = np.flatnonzero(join.owner != cur)
    assert np.all(join.owner[changed] == pos)
    assert len(changed) == join.moved == min_moves(tc, cur, W + 1)
    # One worker leaves: its units are held, nothing else moves; after the delay they are
    # spread and only the minimum of the others' units move.
    gone = data.draw(st.integers(0, W))
    p2n = np.array([-1 if p == gone else p - (p > gone) for p in range(W + 1)], dtype=np.int32)
    cur2, joined2, departed2 = remap_previous(join.owner, p2n, W)
    assert departed2 == int(np.count_nonzero(join.owner == gone)) and not joined2.any()
    leave = incremental_cooperative(tc, cur2, W, 10, DELAY, join.next_state, joined2)
    check_invariants(tc, cur2, W, leave)
    assert leave.moved == 0
    assert leave.next_state.lost.tolist() == np.flatnonzero(cur2 == -2).tolist()
    if departed2:
        assert leave.rebalance_delay_ms == DELAY
        assert leave.next_state.deadline_ms == 10 + DELAY
    expired = incremental_cooperative(tc, leave.owner, W, 10 + DELAY, DELAY,
                                      leave.next_state, np.zeros(W, bool))
    check_invariants(tc, leave.owner, W, expired, leave.next_state)
    assert expired.next_state == IcaState() and expired.rebalance_delay_ms == -1
    assert expired.moved == min_moves(tc, leave.owner, W)


def test_ica_large_round_trip_invariants():
    rng = np.random.default_rng(SEED)
    tc = rng.integers(0, 400, size=500)
    n = int(connect_units(tc)[-1])
    W = 1000
    full = incremental_cooperative(tc, np.full(n, -1, np.int32), W, 0, DELAY)
    check_invariants(tc, np.full(n, -1, np.int32), W, full)
    # from empty, each kind is handed out round robin in unit order
    is_conn = kinds(tc)
    assert np.array_equal(full.owner[is_conn], np.arange(is_conn.sum()) % W)
    assert np.array_equal(full.owner[~is_conn], np.arange((~is_conn).sum()) % W)
    cur, joined, _ = remap_previous(full.owner, np.arange(W, dtype=np.int32), W + 1)
    join = incremental_cooperative(tc, cur, W + 1, 1, DELAY, full.next_state, joined)
    check_invariants(tc, cur, W + 1, join)
    p2n = np.where(np.arange(W + 1) == 17, -1, np.arange(W + 1) - (np.arange(W + 1) > 17))
    cur2, joined2, departed = remap_previous(join.owner, p2n.astype(np.int32), W)
    leave = incremental_cooperative(tc, cur2, W, 2, DELAY, join.next_state, joined2)
    check_invariants(tc, cur2, W, leave)
    assert len(leave.next_state.lost) == departed > 0 and leave.rebalance_delay_ms == DELAY
    back = incremental_cooperative(tc, leave.owner, W, 2 + DELAY, DELAY, leave.next_state)
    check_invariants(tc, leave.owner, W, back, leave.next_state)
    assert back.moved == 0 and back.next_state == IcaState()


# --------------------------------------------------------------- delay semantics
def test_delay_is_kept_across_rebalances_and_capped_by_the_config():
    tc = [3, 3]
    cur = np.array([0, 0, 1, 2, 1, 2, 0, 1], dtype=np.int32)
    cur[cur == 2] = -2                                  # worker 2 departed: 2 tasks lost
    r1 = incremental_cooperative(tc, cur, 2, 1000, 5000)
    assert r1.rebalance_delay_ms == 5000 and r1.next_state.deadline_ms == 6000
    assert r1.next_state.lost.tolist() == [3, 5]
    # Another rebalance during the delay (e.g. config change elsewhere): same deadline,
    # remaining time reported, the held work stays held.
    r2 = incremental_cooperative(tc, r1.owner, 2, 2500, 5000, r1.next_state)
    assert np.array_equal(r2.owner, r1.owner)
    assert r2.rebalance_delay_ms == 3500 and r2.next_state == r1.next_state
    # A second departure during the delay joins the same deadline.
    cur3 = r2.owner.copy()
    cur3[cur3 == 1] = -2
    r3 = incremental_cooperative(tc, cur3, 1, 3000, 5000, r2.next_state)
    assert r3.next_state.deadline_ms == 6000 and r3.rebalance_delay_ms == 3000
    assert r3.next_state.lost.tolist() == [2, 3, 4, 5, 7]
    # The configured delay shrank: the deadline is capped at now + delay.
    r4 = incremental_cooperative(tc, r3.owner, 1, 3000, 1000, r3.next_state)
    assert r4.next_state.deadline_ms == 4000 and r4.rebalance_delay_ms == 1000
    # One ms before the deadline: still held; at the deadline: all assigned.
    r5 = incremental_cooperative(tc, r4.owner, 1, 3999, 1000, r4.next_state)
    assert r5.rebalance_delay_ms == 1 and (r5.owner == -1).sum() == 5
    r6 = incremental_cooperative(tc, r5.owner, 1, 4000, 1000, r5.next_state)
    assert r6.owner.tolist() == [0] * 8 and r6.rebalance_delay_ms == -1
    assert r6.next_state == IcaState()


def test_zero_delay_reassigns_at_once_and_new_work_is_never_held():
    tc = [1, 2]
    cur = np.array([0, -2, 1, -1, -1], dtype=np.int32)   # AT0 lost, B's two tasks new
    r = incremental_cooperative(tc, cur, 2, 0, 0)
    assert (r.owner >= 0).all() and r.rebalance_delay_ms == -1
    r = incremental_cooperative(tc, cur, 2, 0, DELAY, joined=[False, False])
    assert r.owner.tolist() == [0, -1, 1, 0, 1]         # new tasks: least loaded first
    assert r.next_state.lost.tolist() == [1] and r.rebalance_delay_ms == DELAY


def test_no_workers():
    tc = [1, 1]
    r = incremental_cooperative(tc, np.array([-2, -2, -1, -1], np.int32), 0, 0, 100)
    assert r.owner.tolist() == [-1] * 4 and r.next_state.lost.tolist() == [0, 1]
    r2 = incremental_cooperative(tc, r.owner, 0, 100, 100, r.next_state)
    assert r2.owner.tolist() == [-1] * 4 and r2.next_state == IcaState()
    # the first worker then gets everything at once (nothing is lost any more)
    r3 = incremental_cooperative(tc, r2.owner, 1, 101, 100, r2.next_state)
    assert r3.owner.tolist() == [0] * 4


def test_bad_arguments():
    tc = [1, 1]
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.array([0, 0, 2, 0], np.int32), 2, 0, 0)   # worker 2
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.array([0, 0, -3, 0], np.int32), 2, 0, 0)
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.array([0, 0, 0], np.int32), 2, 0, 0)
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.zeros(4, np.int32), 2, 0, 0,
                                IcaState(5, np.array([4], np.int32)))
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.zeros(4, np.int32), 2, 0, 0, joined=[True])
    with pytest.raises(ValueError):
        incremental_cooperative(tc, np.zeros(4, np.int32), -1, 0, 0)
    with pytest.raises(ValueError):
        remap_previous(np.array([0, 3], np.int32), np.array([0, 1], np.int32), 2)
    with pytest.raises(ValueError):
        remap_previous(np.array([0, 1], np.int32), np.array([0, 0], np.int32), 2)
    with pytest.raises(ValueError):
        remap_previous(np.array([0, 1], np.int32), np.array([0, 2], np.int32), 2)


def test_state_bytes():
    s = IcaState(123456789012, np.array([3, 9, 1 << 30], np.int32))
    assert IcaState.from_bytes(s.to_bytes()) == s
    assert IcaState.from_bytes(b"") == IcaState() == IcaState.from_bytes(IcaState().to_bytes())
    assert IcaState() != s
    for bad in (s.to_bytes()[:-1], s.to_bytes()[:5],
                IcaState(1, np.array([3, 3], np.int32)).to_bytes(),
                IcaState(1, np.array([-1], np.int32)).to_bytes()):
        with pytest.raises(ValueError):
            IcaState.from_bytes(bad)


def test_remap_previous():
    prev = np.array([0, 1, 2, -1, 1], np.int32)
    cur, joined, departed = remap_previous(prev, np.array([1, -1, 0], np.int32), 3)
    assert cur.tolist() == [1, -2, 0, -1, -2]
    assert joined.tolist() == [False, False, True] and departed == 2


# --------------------------------------------------- the seed's case studies (KIP-415)
# Config topic: AC0, AT1, AT2, BC0, BT1 (connector A with 2 tasks, B with 1). Connect numbers
# tasks from 0 and writes the connector as task -1; the seed writes them 1-based with C0 the
# connector: unit 0 = AC0, 1 = AT1, 2 = AT2, 3 = BC0, 4 = BT1.
TC = [2, 1]
CONNECTORS = ["A", "B"]
NAMES = ["AC0", "AT1", "AT2", "BC0", "BT1"]


def named(owner, workers):
    """{worker: [unit names]} through the wire shape (as the coordinator would send it)."""
    out = {}
    for w, a in zip(workers, to_wire(owner, TC, len(workers))):
        names = ["%sC0" % CONNECTORS[c] for c in a.connectors]
        names += ["%sT%d" % (CONNECTORS[c], t + 1) for c, ids in a.tasks for t in ids]
        out[w] = sorted(names)
    return out


def owner_of(assignment, workers):
    """Owner array from {worker: [unit names]} (the seed's notation)."""
    owner = np.full(len(NAMES), -1, np.int32)
    for w, names in assignment.items():
        for n in names:
            owner[NAMES.index(n)] = workers.index(w)
    return owner


class Group:
    """The coordinator's side, reduced to what the assignor sees: the group epoch, the
    members (sorted ids = tie-break order), the target (owner array + its members + epoch)
    and the assignor state. rebalance() is one PrepareAssignment -> assignor ->
    InstallAssignment round."""

    def __init__(self, epoch=0):
        self.epoch = epoch
        self.members = []
        self.target_members = []
        self.target = np.full(len(NAMES), -1, np.int32)
        self.target_epoch = epoch
        self.state = IcaState()
        self.delay = -1

    def join(self, w):
        self.members = sorted(self.members + [w])
        self.epoch += 1

    def leave(self, w):
        self.members.remove(w)
        self.epoch += 1

    def rebalance(self, now_ms):
        prev_to_new = np.array([self.members.index(m) if m in self.members else -1
                                for m in self.target_members], np.int32)
        cur, joined, _ = remap_previous(self.target, prev_to_new, len(self.members))
        res = incremental_cooperative(TC, cur, len(self.members), now_ms, DELAY,
                                      IcaState.from_bytes(self.state.to_bytes()), joined)
        self.target, self.target_members = res.owner, list(self.members)
        self.target_epoch = self.epoch
        self.state, self.delay = res.next_state, res.rebalance_delay_ms
        return named(res.owner, self.members)


def test_case_w1_joins_then_w2_joins():
    g = Group()
    assert g.rebalance(0) == {} and g.delay == -1
    # W1 joins: group epoch 1; W1 runs the assignor and gets everything.
    g.join("W1")
    assert g.epoch == 1
    assert g.rebalance(0) == {"W1": ["AC0", "AT1", "AT2", "BC0", "BT1"]}
    assert g.target_epoch == 1 and g.delay == -1          # no delayed rebalance
    # W2 joins: group epoch 2; the balanced split with the fewest moves (BC0, BT1 move).
    g.join("W2")
    before = g.target.copy()
    assert g.rebalance(10) == {"W1": ["AC0", "AT1", "AT2"], "W2": ["BC0", "BT1"]}
    assert g.target_epoch == 2 and g.delay == -1
    assert int(np.count_nonzero(before != g.target)) == 2


def _epoch_35():
    g = Group(epoch=34)
    g.members = ["W1", "W2", "W3"]
    g.epoch = 35
    g.target_members = list(g.members)
    g.target = owner_of({"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]},
                        g.members)
    g.target_epoch = 35
    # the epoch-35 target is a fixed point of the assignor
    assert g.rebalance(0) == {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]}
    return g


def test_case_worker_leaves_work_held_for_the_delay_then_reassigned():
    g = _epoch_35()
    t0 = 1_000
    # W2 misses its session timeout: group epoch 36. W3 (say) runs the assignor: nothing
    # changes, W2's BC0 and BT1 are held, and a rebalance is asked for after the delay d.
    g.leave("W2")
    assert g.epoch == 36
    assert g.rebalance(t0) == {"W1": ["AC0", "AT1"], "W3": ["AT2"]}
    assert g.target_epoch == 36 and g.delay == DELAY
    assert [NAMES[u] for u in g.state.lost] == ["BC0", "BT1"]
    # Any rebalance before the deadline keeps holding it and reports the remaining delay.
    g.epoch += 1
    assert g.rebalance(t0 + DELAY - 1) == {"W1": ["AC0", "AT1"], "W3": ["AT2"]}
    assert g.delay == 1
    # The delayed rebalance (group epoch 37): the lost work is spread over W1 and W3.
    # The seed draws W1=[AC0, AT1, BC0], W3=[BT1, AT2] ("BC1" is its typo for BT1): the
    # same 3/2 split, but it puts both connectors on W1; Connect balances connectors and
    # tasks separately, so BC0 goes to W3 (no connector) and BT1 to W1 (tasks tie 1-1,
    # lowest index first).
    g.epoch = 37
    assert g.rebalance(t0 + DELAY) == {"W1": ["AC0", "AT1", "BT1"], "W3": ["AT2", "BC0"]}
    assert g.target_epoch == 37 and g.delay == -1 and g.state == IcaState()


@pytest.mark.parametrize("explicit_joined", [True, False])
def test_case_worker_bounces_within_the_delay_gets_its_work_back(explicit_joined):
    g = _epoch_35()
    g.leave("W2")
    assert g.rebalance(1_000) == {"W1": ["AC0", "AT1"], "W3": ["AT2"]}
    assert g.delay == DELAY
    # W2 comes back before the delay expires (group epoch 37): it is a new member of the
    # target, the candidate for the held work, and gets exactly BC0 and BT1 back.
    g.join("W2")
    assert g.epoch == 37
    if explicit_joined:
        assert g.rebalance(1_000 + DELAY // 2) == {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"],
                                                   "W3": ["AT2"]}
    else:
        # Connect's default candidate rule (workers owning nothing in the previous target)
        cur, _, _ = remap_previous(g.target, np.array([0, 2], np.int32), 3)
        res = incremental_cooperative(TC, cur, 3, 1_000 + DELAY // 2, DELAY, g.state)
        assert named(res.owner, g.members) == {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"],
                                               "W3": ["AT2"]}
        g.state, g.delay = res.next_state, res.rebalance_delay_ms
    assert g.delay == -1 and g.state == IcaState()       # no delayed rebalance pending


def test_candidate_takes_lost_work_only_up_to_balance():
    # 3 workers x 4 tasks (1 connector of 12 tasks on W0); W1 and W2 leave, one new worker
    # joins: it takes lost tasks up to its quota (13 units, 2 workers -> tasks 6 each), the
    # rest stays held for the delay.
    tc = [12]
    cur = np.array([0] + [0] * 4 + [-2] * 4 + [-2] * 4, np.int32)
    r = incremental_cooperative(tc, cur, 2, 0, DELAY, joined=[False, True])
    assert r.owner.tolist() == [0] + [0] * 4 + [1] * 4 + [1, 1, -1, -1]
    assert r.next_state.lost.tolist() == [11, 12] and r.rebalance_delay_ms == DELAY
    # a worker that was already there is not a candidate: W0 gets none of it
    assert (r.owner == 0).sum() == 5
