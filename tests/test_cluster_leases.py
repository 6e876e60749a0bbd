"""cluster/leases.py (one node's lease state machine) and cluster/balance.py (target owners),
without any database.

The state machine is driven through single scenarios, then through seeded random schedules
(`_World`): several nodes with skewed and drifting clocks share a model of the store (the
same rules as cluster/pg_leases.py, expiry by the store's clock), with calls delayed, failed,
or executed with their answer lost, nodes paused past their lease, unloads that take time, and
targets that disagree between nodes. After every event the world checks that no node serves
after its own deadline (recomputed here from the answers it was given), that a serving node
holds the lease in the store at that instant, and that no two nodes are OWNED at one epoch.
Each failure names its seed: replay it with `_World(seed).run()`.
"""
import heapq
import random

import numpy as np
import pytest

from groupcoord.cluster.balance import shards_of, target
from groupcoord.cluster.leases import (Acquire, LeaseConfig, LeaseMachine, Load, Release, Renew,
                                       State, Unload)

CFG = LeaseConfig(lease_ms=1000)          # safety 100, renew every 333, retry 100


def _only(actions, kind):
    found = [a for a in actions if isinstance(a, kind)]
    assert len(found) == 1, actions
    return found[0]


def _owned(m, shard=0, now=0, epoch=1):
    """A machine that acquired ``shard`` at ``now`` with ``epoch``."""
    m.set_target({shard})
    acq = _only(m.tick(now), Acquire)
    assert m.state(shard) is State.ACQUIRING and not m.serving(shard, now)
    assert m.acquired(shard, acq.attempt, epoch, now + 5) == [Load(shard, epoch)]
    return m


# ---------------------------------------------------------------------------- scenarios
def test_config_defaults_and_checks():
    c = LeaseConfig(lease_ms=9000)
    assert (c.safety_ms, c.renew_every_ms, c.retry_ms) == (900, 3000, 900)
    with pytest.raises(ValueError):
        LeaseConfig(lease_ms=1000, safety_ms=1000)
    with pytest.raises(ValueError):
        LeaseConfig(lease_ms=1000, renew_every_ms=950)       # past lease - safety
    with pytest.raises(ValueError):
        LeaseMachine(0)
    with pytest.raises(ValueError):
        LeaseMachine(4).set_target({4})


def test_a_grant_serves_until_start_plus_lease_minus_safety_not_from_the_answer():
    m = _owned(LeaseMachine(4, CFG), now=1000)
    # Sent at 1000, answered at 1005: the store's expiry is >= 1000 + 1000 in real time.
    assert m.deadline(0) == 1000 + 1000 - 100
    assert m.serving(0, 1899) and not m.serving(0, 1900)
    assert m.owned() == [0]


def test_renewals_go_out_every_third_of_the_lease_and_extend_from_their_start():
    m = _owned(LeaseMachine(4, CFG), now=0)
    assert not any(isinstance(a, Renew) for a in m.tick(332))
    r = _only(m.tick(333), Renew)
    assert r.epochs == ((0, 1),)
    assert not any(isinstance(a, Renew) for a in m.tick(400))     # one in flight, not due
    assert m.renewed(r.attempt, {0}, now=800) == []
    assert m.deadline(0) == 333 + 900
    # A stale answer (its attempt already answered) changes nothing.
    assert m.renewed(r.attempt, set(), now=801) == [] and m.state(0) is State.OWNED


def test_a_failed_renewal_is_retried_after_retry_ms_and_the_lease_runs_out_on_its_own():
    m = _owned(LeaseMachine(4, CFG), now=0)
    r = _only(m.tick(333), Renew)
    m.renewed(r.attempt, None, now=340)
    assert not any(isinstance(a, Renew) for a in m.tick(439))
    r2 = _only(m.tick(440), Renew)
    assert r2.attempt != r.attempt
    assert m.serving(0, 899)
    # Never answered: at the deadline the node stops on its own and unloads.
    assert m.tick(900) == [Unload(0, 1, "expired")] and not m.serving(0, 900)
    assert m.state(0) is State.LOST
    assert m.renewed(r2.attempt, {0}, now=901) == [] and m.state(0) is State.LOST
    assert m.unloaded(0, now=950) == [] and m.state(0) is State.NOT_OWNED
    # Maybe still ours in the store: asked again at once (a grant bumps the epoch).
    acq = _only(m.tick(950), Acquire)
    assert m.acquired(0, acq.attempt, 2, now=960) == [Load(0, 2)]


def test_a_renewal_that_does_not_renew_a_shard_loses_it():
    m = LeaseMachine(4, CFG)
    m.set_target({0, 1})
    acqs = m.tick(0)
    for a in acqs:
        m.acquired(a.shard, a.attempt, 7, now=1)
    r = _only(m.tick(333), Renew)
    assert r.epochs == ((0, 7), (1, 7))
    assert m.renewed(r.attempt, {1}, now=340) == [Unload(0, 7, "lost")]
    assert not m.serving(0, 340) and m.serving(1, 340)
    m.unloaded(0, now=350)
    # Another node holds it: not asked for again before retry_ms.
    assert not any(isinstance(a, Acquire) for a in m.tick(439))
    assert Acquire(0, 4) in m.tick(440)


def test_a_fenced_append_unloads_and_the_shard_stops_serving_at_once():
    m = _owned(LeaseMachine(4, CFG), now=0, epoch=3)
    assert m.fenced(0, 2, now=10) == []                 # an older epoch's append: no news
    assert m.fenced(0, 3, now=10) == [Unload(0, 3, "fenced")]
    assert m.state(0) is State.LOST and not m.serving(0, 10)
    assert m.fenced(0, 3, now=11) == []
    m.unloaded(0, now=20)
    assert m.state(0) is State.NOT_OWNED


def test_hand_off_unloads_before_it_releases():
    m = _owned(LeaseMachine(4, CFG), now=0, epoch=4)
    m.set_target(set())
    assert m.tick(10) == [Unload(0, 4, "handoff")]
    assert m.state(0) is State.RELEASING and not m.serving(0, 10)
    # Still renewed while unloading (its last writes need the lease).
    r = _only(m.tick(333), Renew)
    assert r.epochs == ((0, 4),)
    assert m.unloaded(0, now=340) == [Release(0, 4)]
    assert m.tick(341) == []                            # no second Release, no renewal
    assert m.released(0, 4, now=350, error=True) == []
    # Sent again after retry_ms (and renewed meanwhile: the lease is still ours).
    assert not any(isinstance(a, Release) for a in m.tick(449))
    assert m.tick(450) == [Release(0, 4)]
    m.released(0, 4, now=460)
    assert m.state(0) is State.NOT_OWNED and m.idle()


def test_a_grant_for_a_shard_no_longer_targeted_is_released_without_loading():
    m = LeaseMachine(4, CFG)
    m.set_target({2})
    acq = _only(m.tick(0), Acquire)
    m.set_target(set())
    assert m.acquired(2, acq.attempt, 1, now=5) == [Release(2, 1)]


def test_a_grant_answered_after_its_deadline_is_not_served_but_asked_for_again():
    m = LeaseMachine(4, CFG)
    m.set_target({0})
    acq = _only(m.tick(0), Acquire)
    assert m.acquired(0, acq.attempt, 1, now=900) == []
    assert m.state(0) is State.NOT_OWNED and not m.serving(0, 900)
    acq2 = _only(m.tick(900), Acquire)
    assert m.acquired(0, acq2.attempt, 2, now=910) == [Load(0, 2)]


def test_refused_and_abandoned_acquires():
    m = LeaseMachine(4, CFG)
    m.set_target({1})
    a1 = _only(m.tick(0), Acquire)
    m.acquired(1, a1.attempt, None, now=10)
    assert m.state(1) is State.NOT_OWNED and m.tick(109) == []
    a2 = _only(m.tick(110), Acquire)
    # No answer for a whole lease: given up, asked again; the late answer is ignored.
    a3 = _only(m.tick(1110), Acquire)
    assert m.acquired(1, a2.attempt, 5, now=1111) == [] and m.state(1) is State.ACQUIRING
    assert m.acquired(1, a3.attempt, 6, now=1112) == [Load(1, 6)]


def test_an_epoch_granted_twice_is_refused():
    m = _owned(LeaseMachine(4, CFG), now=0, epoch=5)
    m.fenced(0, 5, now=1)
    m.unloaded(0, now=2)
    a = _only(m.tick(200), Acquire)
    with pytest.raises(ValueError):
        m.acquired(0, a.attempt, 5, now=201)


def test_next_wakeup_names_the_next_deadline_renewal_or_retry():
    m = LeaseMachine(4, CFG)
    assert m.next_wakeup(0) == 333                      # nothing to do: a renew period
    m.set_target({0})
    assert m.next_wakeup(0) == 0                        # acquire now
    a = _only(m.tick(0), Acquire)
    assert m.next_wakeup(1) == 1000                     # the acquire's timeout
    m.acquired(0, a.attempt, 1, now=2)
    assert m.next_wakeup(3) == 333                      # renewal before the 900 deadline
    m.tick(333)
    assert m.next_wakeup(334) == 666


# ---------------------------------------------------------------------------- random worlds
class _Store:
    """The rules of cluster/pg_leases.py and the log's fencing, with the store's clock = the
    world's real time."""

    def __init__(self, shards, lease):
        self.lease = lease
        self.rows = [[None, 0, None] for _ in range(shards)]    # owner, epoch, expires

    def acquire(self, node, shard, t):
        row = self.rows[shard]
        if row[0] is None or row[0] == node or row[2] is None or row[2] <= t:
            row[:] = [node, row[1] + 1, t + self.lease]
            return row[1]
        return None

    def renew(self, node, pairs, t):
        out = set()
        for shard, epoch in pairs:
            row = self.rows[shard]
            if row[0] == node and row[1] == epoch:
                row[2] = t + self.lease
                out.add(shard)
        return out

    def release(self, node, shard, epoch, t):
        row = self.rows[shard]
        if row[0] == node and row[1] == epoch:
            row[0] = row[2] = None
            return True
        return False

    def append(self, node, shard, epoch, t):
        row = self.rows[shard]
        return row[0] == node and row[1] == epoch


class _Node:
    def __init__(self, node_id, rng, machine_cls, cfg, shards):
        self.id = node_id
        self.offset = rng.randrange(-10**9, 10**9)      # monotonic clocks share no origin
        self.rate = rng.randint(985, 1015)               # per mille: drift within the margin
        self.m = machine_cls(shards, cfg)
        self.paused_until = 0
        self.loaded = {}                                 # shard -> epoch, as Load/Unload said
        self.proof = {}                                  # (shard, epoch) -> deadline confirmed

    def local(self, t):
        return self.offset + t * self.rate // 1000


class _World:
    SHARDS, NODES, LEASE = 6, 3, 1000

    def __init__(self, seed, machine_cls=LeaseMachine, cfg=None, own_deadline=True):
        self.seed = seed
        self.own_deadline = own_deadline      # check the node against its own deadline too
        self.rng = random.Random(seed)
        self.cfg = cfg or LeaseConfig(lease_ms=self.LEASE)
        self.store = _Store(self.SHARDS, self.LEASE)
        self.nodes = [_Node(i + 1, self.rng, machine_cls, self.cfg, self.SHARDS)
                      for i in range(self.NODES)]
        self.t = 0
        self.events = []
        self.seq = 0
        self.serves = 0
        self.fenced = 0

    # -- the event queue (real time) -------------------------------------------------------
    def at(self, t, node, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, node, fn, args))

    def delay(self):
        r = self.rng.random()
        return self.rng.randint(0, 30) if r < 0.8 else self.rng.randint(30, 1500)

    def run(self, duration=60_000):
        for n in self.nodes:
            self.at(0, n, self.tick)
            self.at(self.rng.randint(0, 500), n, self.retarget)
            self.at(self.rng.randint(0, 500), n, self.serve)
            self.at(self.rng.randint(0, 5000), n, self.pause)
        while self.events and self.events[0][0] <= duration:
            t, _, node, fn, args = heapq.heappop(self.events)
            self.t = t
            if node is not None and node.paused_until > t:
                self.at(node.paused_until, node, fn, *args)   # a paused process does nothing
                continue
            fn(node, *args)
            self.check()
        return self

    def fail(self, what):
        pytest.fail("seed %d, t=%d: %s" % (self.seed, self.t, what))

    # -- node events -----------------------------------------------------------------------
    def tick(self, n):
        now = n.local(self.t)
        self.run_actions(n, n.m.tick(now), now)
        for shard, epoch in n.loaded.items():
            if self.own_deadline and now >= n.proof.get((shard, epoch), -1):
                self.fail("node %d keeps shard %d loaded after a tick past its deadline"
                          % (n.id, shard))
        self.at(self.t + self.rng.randint(5, 150), n, self.tick)

    def retarget(self, n):
        if self.rng.random() < 0.5:
            owners = [row[0] if row[2] is not None and row[2] > self.t else None
                      for row in self.store.rows]
            live = [x.id for x in self.nodes if self.rng.random() < 0.8]
            n.m.set_target(shards_of(n.id, target(self.SHARDS, live, owners)))
        else:       # views that disagree: several nodes may want the same shard
            n.m.set_target({s for s in range(self.SHARDS) if self.rng.random() < 0.4})
        self.at(self.t + self.rng.randint(100, 4000), n, self.retarget)

    def pause(self, n):
        n.paused_until = self.t + self.rng.randint(0, 3 * self.LEASE)
        self.at(n.paused_until + self.rng.randint(0, 8000), n, self.pause)

    def serve(self, n):
        shard = self.rng.randrange(self.SHARDS)
        now = n.local(self.t)
        if n.m.serving(shard, now):
            epoch = n.m.epoch(shard)
            if n.loaded.get(shard) != epoch:
                self.fail("node %d serves shard %d at epoch %s without loading it"
                          % (n.id, shard, epoch))
            self.serves += 1
            # The append travels to the store; a refused one is reported back as fenced.
            self.at(self.t + self.delay(), None, self.append, n, shard, epoch)
        self.at(self.t + self.rng.randint(1, 40), n, self.serve)

    def run_actions(self, n, actions, now):
        for a in actions:
            if isinstance(a, Load):
                n.loaded[a.shard] = a.epoch
            elif isinstance(a, Unload):
                if n.loaded.pop(a.shard, None) != a.epoch:
                    self.fail("node %d unloads shard %d epoch %d it had not loaded"
                              % (n.id, a.shard, a.epoch))
                self.at(self.t + self.rng.randint(0, 300), n, self.unloaded, a.shard)
            else:
                self.at(self.t + self.delay(), None, self.execute, n, a, now)

    def unloaded(self, n, shard):
        now = n.local(self.t)
        self.run_actions(n, n.m.unloaded(shard, now), now)

    # -- the store's side: execute at arrival, answer later (or fail) ------------------------
    def execute(self, _none, n, a, sent):
        r = self.rng.random()
        if r < 0.05:
            result, executed = None, False                  # refused: the store was down
        else:
            executed = True
            if isinstance(a, Acquire):
                result = self.store.acquire(n.id, a.shard, self.t)
            elif isinstance(a, Renew):
                result = self.store.renew(n.id, a.epochs, self.t)
            else:
                result = self.store.release(n.id, a.shard, a.epoch, self.t)
            if r < 0.10:
                result = None                               # done, but the answer was lost
        self.at(self.t + self.delay(), n, self.answer, a, sent, result, executed)

    def answer(self, n, a, sent, result, executed):
        now = n.local(self.t)
        good = sent + self.LEASE - self.cfg.safety_ms
        if isinstance(a, Acquire):
            if result is not None:
                n.proof[(a.shard, result)] = max(n.proof.get((a.shard, result), -1), good)
            actions = n.m.acquired(a.shard, a.attempt, result, now)
        elif isinstance(a, Renew):
            if result is not None:
                for shard, epoch in a.epochs:
                    if shard in result:
                        n.proof[(shard, epoch)] = max(n.proof.get((shard, epoch), -1), good)
            actions = n.m.renewed(a.attempt, result, now)
        else:
            actions = n.m.released(a.shard, a.epoch, now, error=result is None)
        self.run_actions(n, actions, now)

    def append(self, _none, n, shard, epoch):
        if not self.store.append(n.id, shard, epoch, self.t):
            self.fenced += 1
            self.at(self.t + self.delay(), n, self.fenced_answer, shard, epoch)

    def fenced_answer(self, n, shard, epoch):
        now = n.local(self.t)
        self.run_actions(n, n.m.fenced(shard, epoch, now), now)

    # -- invariants --------------------------------------------------------------------------
    def check(self):
        for shard in range(self.SHARDS):
            owned, serving = {}, []
            for n in self.nodes:
                m = n.m
                if m.state(shard) is State.OWNED:
                    e = m.epoch(shard)
                    if e in owned:
                        self.fail("nodes %d and %d are both OWNED of shard %d at epoch %d"
                                  % (owned[e], n.id, shard, e))
                    owned[e] = n.id
                now = n.local(self.t)
                if m.serving(shard, now):
                    e = m.epoch(shard)
                    if self.own_deadline and now >= n.proof.get((shard, e), -1):
                        self.fail("node %d serves shard %d (epoch %d) after its own deadline"
                                  % (n.id, shard, e))
                    # The store's row is this tenure, or a later one of the same node (a
                    # delayed acquire of its own bumped the epoch: that fences the node's
                    # own writes, nobody else's), and its lease is live by the store's clock.
                    row = self.store.rows[shard]
                    if row[0] != n.id or row[1] < e or row[2] is None or row[2] <= self.t:
                        self.fail("node %d serves shard %d at epoch %d but the store has %s"
                                  % (n.id, shard, e, row))
                    serving.append(n.id)
            if len(serving) > 1:
                self.fail("shard %d served by nodes %s at once" % (shard, serving))


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_schedules_keep_one_server_per_shard_within_its_lease(seed):
    print("seed", seed)
    w = _World(seed).run()
    # The schedule exercised something: shards were served and moved between nodes.
    assert w.serves > 0
    assert max(row[1] for row in w.store.rows) > 1


def test_random_schedules_fence_zombies():
    worlds = [_World(seed).run() for seed in range(5)]
    assert sum(w.fenced for w in worlds) > 0


class _ServesPastDeadline(LeaseMachine):
    """Planted bug: serves whatever is OWNED, without looking at the clock."""

    def serving(self, shard, now):
        return self.state(shard) is State.OWNED


class _DeadlineFromAnswer(LeaseMachine):
    """Planted bug: measures a renewed lease from when the answer arrived, not from when the
    renewal was sent."""

    def renewed(self, attempt, renewed, now):
        if attempt in self._renewals:
            self._renewals[attempt] = (now, self._renewals[attempt][1])
        return super().renewed(attempt, renewed, now)


@pytest.mark.parametrize("planted", [_ServesPastDeadline, _DeadlineFromAnswer])
def test_the_random_schedules_find_a_planted_bug(planted):
    # Found by what the store says alone (not by the node's deadline recomputed here).
    for seed in range(40):
        print("seed", seed)
        try:
            _World(seed, planted, own_deadline=False).run()
        except pytest.fail.Exception as exc:
            assert "the store has" in str(exc) or "at once" in str(exc)
            return
    pytest.fail("%s went unnoticed in 40 seeds" % planted.__name__)


# ---------------------------------------------------------------------------- balance
def _counts(owners, nodes):
    return sorted(sum(1 for o in owners if o == n) for n in nodes)


@pytest.mark.parametrize("n", range(1, 8))
def test_target_spreads_shards_evenly(n):
    nodes = [10 * i + 3 for i in range(n)]
    owners = target(50, nodes, [None] * 50)
    c = _counts(owners, nodes)
    assert sum(c) == 50 and c[-1] - c[0] <= 1


def test_target_is_the_same_whatever_order_the_nodes_come_in():
    cur = [None, 4, 4, 9, None, 1, 9, 1, 1, 4]
    assert target(10, [9, 1, 4], cur) == target(10, [4, 9, 1, 1], cur)


def test_a_joining_node_takes_only_its_share_and_a_leaving_one_gives_only_its_own():
    rng = random.Random(7)
    nodes = [1, 2, 3]
    owners = target(50, nodes, [None] * 50)
    for step in range(60):
        print("step", step, nodes)
        if len(nodes) > 1 and (len(nodes) > 9 or rng.random() < 0.5):
            gone = rng.choice(nodes)
            nodes = [x for x in nodes if x != gone]
            new = target(50, nodes, owners)
            moved = [i for i in range(50) if new[i] != owners[i]]
            assert moved == sorted(shards_of(gone, owners))
        else:
            joined = max(nodes) + rng.randint(1, 3)
            nodes = nodes + [joined]
            new = target(50, nodes, owners)
            moved = [i for i in range(50) if new[i] != owners[i]]
            assert set(moved) == shards_of(joined, new)
            assert len(moved) in (50 // len(nodes), -(-50 // len(nodes)))
        c = _counts(new, nodes)
        assert sum(c) == 50 and c[-1] - c[0] <= 1
        assert target(50, nodes, new) == new            # a balanced target is kept as is
        owners = new


def test_target_with_no_live_node_or_unknown_owners():
    assert target(3, [], [1, 2, None]) == [None, None, None]
    # Owner 5 is not live: its shard is moved, the live owner keeps its own.
    assert target(2, [1, 2], [5, 2]) == [1, 2]
    with pytest.raises(ValueError):
        target(3, [1], [None])
    assert np.array_equal(np.array(target(4, [7], [None] * 4)), np.full(4, 7))
