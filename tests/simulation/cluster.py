"""Cluster mode of the simulation (`--cluster N`; docs/simulation.md, "Cluster mode"): N nodes
over the simulated PostgreSQL store (store.py), shards moving between them by leases.

Each node (`ClusterNodeSim`) runs, on the one virtual-time loop:

* a ShardRuntime per shard (the real one: `ClusterShardRuntime` adds observation hooks and the
  process pause), its store a `SimPgStore`, whose logs are the REAL storage/pg_log.PgShardLog
  over the store's fake asyncpg pool: loads at an epoch, epoch-checked group commits, a refused
  append unloads the shard (NOT_COORDINATOR) and tells the glue;
* the REAL lease machine (cluster/leases.py LeaseMachine) on the node's local monotonic clock,
  which runs at its own rate (clock drift, within the machine's safety margin: lease/10), and
  the REAL balance (cluster/balance.py target), driven by a small glue of our own with
  cluster/node.py's shape (refresh every renew period: heartbeat, read live nodes and owners,
  set the target; tick at next_wakeup; run Acquire / Renew / Release as store calls and Load /
  Unload on the runtime, one per shard at a time, and report back);
* the request entry point: a request for a shard the machine does not serve *now* (its
  deadline on the local clock) is answered NOT_COORDINATOR; the member then finds the
  coordinator again (`Cluster.connect`: a random running node answers FindCoordinator from its
  last read of the store).

Faults (on top of the member and network faults of faults.py; each drawn per seed):

  node-crash   kill -9: the process's state is gone (in-flight store calls may still commit,
               their answers are never read), its leases run out; it restarts later
  node-pause   the process stops (SIGSTOP) for 0.2-3 leases: nothing of it runs, requests and
               store answers wait in its sockets; on waking it reads them first (as a loop's
               I/O callbacks run before its timers), then ticks: a zombie. Half of the pauses
               come at the node's next log round trip (1.5-3 leases): the write it was about
               to send goes out when it resumes
  store-down   the store is unreachable for a while (calls fail; a call in flight loses its
               answer: an unsure commit)
  disk-eio     (cluster meaning) the next store round trip's answer is lost (an unsure
               commit when it is a transaction)
  clock-jump   a node's wall clock (the groups' timers) jumps within the bound
  (per seed)   slow store round trips (slow commits), lost store answers, clock drift of each
               node's monotonic clock (rates within +-5%, below the 10% margin)
"""
from __future__ import annotations

import asyncio
from typing import Optional

import msgspec

from groupcoord.cluster.balance import shards_of, target
from groupcoord.cluster.leases import Acquire, LeaseConfig, LeaseMachine, Load, Release, Renew, \
    State, Unload
from groupcoord.groups.errors import error_response
from groupcoord.groups.shard import Shard
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.load import load_shard
from groupcoord.runtime.shard_runtime import ShardRuntime, ShardState
from groupcoord.runtime.shards import shard_for
from groupcoord.storage.pg_log import PgShardLog, PgSnapshot, _join_rows

from tests.simulation.clock import CoordinatorClock
from tests.simulation.disk import SimExecutor
from tests.simulation.faults import CLUSTER_KINDS, FaultInjector
from tests.simulation.invariants import InvariantViolation
from tests.simulation.network import error_codes
from tests.simulation.runner import Sim
from tests.simulation.store import SimPool, SimStore, StoreParams, StoreUnavailable

__all__ = ["ClusterSim", "Cluster", "ClusterNodeSim", "CLUSTER_KINDS"]

_UNAVAILABLE = {int(E.COORDINATOR_NOT_AVAILABLE), int(E.NOT_COORDINATOR),
                int(E.COORDINATOR_LOAD_IN_PROGRESS)}
_FAILED = object()


# ====================================================================== a node's pieces
class SimPgStore:
    """runtime/stores.PgStore for one node incarnation: its logs are PgShardLogs over the
    simulated store's pool."""
    kind = "postgresql"

    def __init__(self, node, inc: int):
        self.node = node
        self.inc = inc

    def where(self, index: int) -> str:
        return "sim-postgresql shard %d" % index

    def open(self, index: int, epoch: int, clock) -> PgShardLog:
        n = self.node
        return PgShardLog(SimPool(n.store, n, self.inc, epoch), index, n.node_id, epoch,
                          clock=clock, executor=n.cpu)

    def __str__(self) -> str:
        return "sim-postgresql"


class ClusterShardRuntime(ShardRuntime):
    """The real runtime; hooks: the durability check after a load, and the process pause (a
    stopped process fires no timer: the timer fires when it resumes)."""
    node = None

    async def load(self) -> None:
        await super().load()
        node = self.node
        if self.state is ShardState.ACTIVE and node is not None:
            node.sim.trace("node", "n%d shard %d loaded at epoch %d (%d records to offset %d)"
                           % (node.node_id, self.index, self.epoch,
                              getattr(self.load_stats, "records_read", 0),
                              self.log.next_offset))
            try:
                node.sim.checker.on_cluster_loaded(self, node)
            except InvariantViolation as exc:
                node.sim.fail(str(exc))

    def _on_timer(self) -> None:
        node = self.node
        if node is not None and node.paused():
            self._timer = None
            self._timer_at = None
            node.defer(self._after_pause, self.generation)
            return
        super()._on_timer()

    def _after_pause(self, gen: int) -> None:
        if gen == self.generation and self.state is ShardState.ACTIVE:
            self._arm_timer()


class ClusterNodeSim:
    """One groupcoord process of the cluster (see the module docstring)."""

    def __init__(self, cluster, node_id: int):
        self.cluster = cluster
        self.sim = sim = cluster.sim
        self.loop = sim.loop
        self.store: SimStore = cluster.store
        self.node_id = node_id
        rng = sim.rng
        d = cluster.drift
        self.rate = 1.0 + (rng.uniform(-d, d) if d else 0.0)
        self.mono0 = rng.randint(0, 1_000_000)      # monotonic clocks share no origin
        self.clock = CoordinatorClock(sim.loop)      # the wall clock of the groups' timers
        self.io = SimExecutor(sim.loop, lambda _fn: (0.1 + rng.random() * 1.5) / 1000, "io")
        self.cpu = SimExecutor(sim.loop, lambda _fn: (1 + rng.random() * 40) / 1000, "cpu")
        self.up = False
        self.incarnation = 0
        self.paused_until_us = 0
        self.pause_at_next_write: Optional[float] = None    # ms (the node-pause fault)
        self._deferred: list = []
        self._resume: list = []
        self._wake_handle = None
        self.shards: list = []
        self.machine: Optional[LeaseMachine] = None
        self._tasks: set = set()
        self._locks: list = []
        self._kick = None
        self.live: list = []
        self.view: list = []          # (owner, epoch, lease_left_ms, local read time) per shard
        # counters
        self.crashes = self.pauses = self.loads = self.fences = 0

    # ---------------------------------------------------------------- process
    def local_ms(self) -> int:
        return self.mono0 + int(self.rate * self.loop.now_us / 1000)

    def _virtual_s(self, local_ms: float) -> float:
        return local_ms / self.rate / 1000

    def paused(self) -> bool:
        return self.loop.now_us < self.paused_until_us

    async def running(self, inc: int) -> None:
        """Return when this incarnation runs (not paused); raise when it is gone."""
        while True:
            if inc != self.incarnation or not self.up:
                raise StoreUnavailable("simulated: the node process is gone")
            if not self.paused():
                return
            fut = self.loop.create_future()
            self._resume.append(fut)
            await fut

    def defer(self, fn, *args) -> None:
        """Run fn when the process resumes (a paused process runs nothing)."""
        self._deferred.append((fn, args))

    def pause(self, ms: float) -> None:
        self.pauses += 1
        self.paused_until_us = max(self.paused_until_us, self.loop.now_us + int(ms * 1000))
        self.sim.trace("fault", "node %d paused for %d ms (lease %d ms)"
                       % (self.node_id, ms, self.cluster.lease_ms))
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        self._wake_handle = self.loop.call_at(self.paused_until_us / 1e6, self._wake)

    def _wake(self) -> None:
        self._wake_handle = None
        if not self.up:
            return
        self.sim.trace("node", "node %d resumes" % self.node_id)
        # What waited in its sockets first, then its timers and tasks.
        while self._deferred:
            fn, args = self._deferred.pop(0)
            fn(*args)
        resume, self._resume = self._resume, []
        for f in resume:
            if not f.done():
                f.set_result(None)

    def start(self) -> None:
        if self.up:
            return
        self.incarnation += 1
        inc = self.incarnation
        self.up = True
        cl = self.cluster
        n = cl.shard_count
        self.sim.trace("node", "node %d start (incarnation %d)" % (self.node_id, inc))
        self.machine = LeaseMachine(n, LeaseConfig(lease_ms=cl.lease_ms))
        store = SimPgStore(self, inc)
        self.shards = []
        for i in range(n):
            rt = ClusterShardRuntime(i, store.where(i), cl.rcfg, cl.topics, clock=self.clock,
                                     io_pool=self.io, cpu_pool=self.cpu, store=store,
                                     on_fenced=lambda i, e, inc=inc: self._fenced(inc, i, e))
            rt.node = self
            self.shards.append(rt)
        self._locks = [asyncio.Lock() for _ in range(n)]
        self.view = [(None, 0, None, 0)] * n
        self.live = []
        self._kick = self.loop.create_future()
        self._spawn(self._run(inc))
        self._spawn(self._refresher(inc))

    def crash(self) -> None:
        if not self.up:
            return
        self.crashes += 1
        self.sim.trace("node", "node %d CRASH (incarnation %d)" % (self.node_id, self.incarnation))
        self.up = False
        for rt in self.shards:
            # The process is gone: nothing of it runs again (its logs' calls in flight may
            # still commit in the store; their answers are never read).
            rt.generation += 1
            rt.state = ShardState.UNLOADED
            rt._cancel_timer()
            if rt._reload_task is not None:
                rt._reload_task.cancel()
        for t in list(self._tasks):
            t.cancel()
        self._tasks.clear()
        # Jobs in its thread pools die with it; what awaited them (a store log's compaction
        # task) is cancelled rather than left to be collected while pending.
        dropped = [job[3] for ex in (self.io, self.cpu) for job in ex.pending.values()]
        self.io.crash()
        self.cpu.crash()
        for fut in dropped:
            fut.cancel()
        self.sim.net.node_crashed(self)
        self._deferred.clear()
        self.paused_until_us = 0
        self.pause_at_next_write = None
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None
        resume, self._resume = self._resume, []
        for f in resume:
            if not f.done():
                f.set_result(None)      # running() sees the incarnation gone and raises
        self.shards = []
        self.machine = None

    def _spawn(self, coro) -> None:
        async def guarded():
            try:
                await coro
            except (asyncio.CancelledError, StoreUnavailable):
                pass                    # the process died (or paused into its death)
            except InvariantViolation as exc:
                self.sim.fail(str(exc))
            except BaseException as exc:
                self.sim.fail("simulator error: node %d glue raised %r" % (self.node_id, exc))
        t = self.loop.create_task(guarded())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------------- the lease glue
    def _wakeup(self) -> None:
        if self._kick is not None and not self._kick.done():
            self._kick.set_result(None)

    async def _run(self, inc: int) -> None:
        while True:
            await self.running(inc)
            self._kick = self.loop.create_future()
            self._dispatch(inc, self.machine.tick(self.local_ms()))
            now = self.local_ms()
            delay = max(1, self.machine.next_wakeup(now) - now)
            await asyncio.wait([self._kick], timeout=self._virtual_s(delay))

    async def _refresher(self, inc: int) -> None:
        cfg = self.machine.config
        failures = 0
        while True:
            await self.running(inc)
            if await self._refresh(inc):
                failures = 0
                delay = cfg.renew_every_ms
            else:
                failures += 1
                delay = min(cfg.retry_ms * 2 ** min(failures - 1, 16), cfg.renew_every_ms)
            await asyncio.sleep(self._virtual_s(delay))

    async def _call(self, inc: int, fn, *args):
        try:
            return await self.store.call(self, inc, fn, *args)
        except StoreUnavailable:
            if inc != self.incarnation:
                raise
            return _FAILED

    async def _refresh(self, inc: int) -> bool:
        cl = self.cluster
        if await self._call(inc, self.store.heartbeat, self.node_id) is _FAILED:
            return False
        got = await self._call(inc, self.store.read, cl.lease_ms)
        if got is _FAILED:
            return False
        live, rows = got
        if self.node_id not in live:
            live = sorted(live + [self.node_id])
        now = self.local_ms()
        self.live = live
        self.view = [(o, e, left, now) for o, e, left in rows]
        owners = target(cl.shard_count, live, [o for o, _e, _l in rows])
        self.machine.set_target(shards_of(self.node_id, owners))
        self._wakeup()
        return True

    def _dispatch(self, inc: int, actions) -> None:
        for a in actions:
            if isinstance(a, Acquire):
                self._spawn(self._acquire(inc, a))
            elif isinstance(a, Renew):
                self._spawn(self._renew(inc, a))
            elif isinstance(a, Release):
                self._spawn(self._release(inc, a))
            elif isinstance(a, Load):
                self._spawn(self._load(inc, a))
            elif isinstance(a, Unload):
                self.sim.trace("node", "n%d unload shard %d epoch %d (%s)"
                               % (self.node_id, a.shard, a.epoch, a.reason))
                self._spawn(self._unload(inc, a))
        if actions:
            self._wakeup()

    async def _acquire(self, inc: int, a: Acquire) -> None:
        epoch = await self._call(inc, self.store.acquire, a.shard, self.node_id,
                                 self.cluster.lease_ms)
        await self.running(inc)
        self.sim.trace("node", "n%d acquire shard %d -> %s" % (
            self.node_id, a.shard, "failed" if epoch is _FAILED else epoch))
        self._dispatch(inc, self.machine.acquired(a.shard, a.attempt,
                                                  None if epoch is _FAILED else epoch,
                                                  self.local_ms()))

    async def _renew(self, inc: int, a: Renew) -> None:
        got = await self._call(inc, self.store.renew, self.node_id, a.epochs,
                               self.cluster.lease_ms)
        await self.running(inc)
        self._dispatch(inc, self.machine.renewed(a.attempt, None if got is _FAILED else got,
                                                 self.local_ms()))

    async def _release(self, inc: int, a: Release) -> None:
        done = await self._call(inc, self.store.release, a.shard, self.node_id, a.epoch)
        await self.running(inc)
        if done is not _FAILED and done:
            self.sim.trace("node", "n%d released shard %d epoch %d"
                           % (self.node_id, a.shard, a.epoch))
        self._dispatch(inc, self.machine.released(a.shard, a.epoch, self.local_ms(),
                                                  error=done is _FAILED))

    async def _load(self, inc: int, a: Load) -> None:
        async with self._locks[a.shard]:
            await self.running(inc)
            mc = self.machine
            if mc.state(a.shard) is not State.OWNED or mc.epoch(a.shard) != a.epoch:
                return
            rt = self.shards[a.shard]
            rt.epoch = a.epoch
            self.loads += 1
            try:
                await rt.load()
            except asyncio.CancelledError:
                raise
            except InvariantViolation:
                raise
            except Exception as exc:
                if inc != self.incarnation:
                    return
                self.sim.trace("node", "n%d load of shard %d at epoch %d failed: %s"
                               % (self.node_id, a.shard, a.epoch, exc))
                self._dispatch(inc, mc.fenced(a.shard, a.epoch, self.local_ms()))

    async def _unload(self, inc: int, a: Unload) -> None:
        async with self._locks[a.shard]:
            await self.shards[a.shard].close()
            await self.running(inc)
            self._dispatch(inc, self.machine.unloaded(a.shard, self.local_ms()))

    def _fenced(self, inc: int, index: int, epoch: int) -> None:
        if inc != self.incarnation or self.machine is None:
            return
        self.fences += 1
        self.sim.trace("node", "n%d shard %d fenced at epoch %d" % (self.node_id, index, epoch))
        self._dispatch(inc, self.machine.fenced(index, epoch, self.local_ms()))

    # ---------------------------------------------------------------- serving
    def owner_view(self, index: int) -> Optional[int]:
        """FindCoordinator's answer for a shard: this node if it serves it, else the owner
        of its last read of the store if that lease looked live then (None: moving)."""
        now = self.local_ms()
        if self.machine.serving(index, now):
            return self.node_id
        owner, _e, left, read_at = self.view[index]
        if owner is None or owner == self.node_id or left is None \
                or left - (now - read_at) <= 0 or owner not in self.live:
            return None
        return owner

    def serves(self, index: int) -> bool:
        return self.up and self.machine is not None \
            and self.machine.serving(index, self.local_ms()) \
            and self.shards[index].state is ShardState.ACTIVE

    def receive(self, conn, seq, req, version, respond) -> None:
        if self.paused():
            self.defer(self.receive, conn, seq, req, version, respond)
            return
        sim = self.sim
        gid = req.groups[0].group_id if isinstance(req, m.OffsetFetchRequest) else req.group_id
        idx = shard_for(gid, self.cluster.shard_count)
        rt = self.shards[idx]
        sim.stats["requests"] += 1
        checker = sim.checker
        if not self.machine.serving(idx, self.local_ms()):
            sim.stats["not_coordinator"] += 1
            respond(conn, seq, error_response(req, version, E.NOT_COORDINATOR))
            return
        active = rt.state is ShardState.ACTIVE
        if active:
            checker.on_serve(self, idx, rt.epoch)
        r = rt.submit_nowait(req, version, conn.member.name, "sim")
        tgt = rt.log.next_offset if (rt.state is ShardState.ACTIVE and rt.log is not None) \
            else None
        if active and rt.shard is not None:
            checker.after_request(rt, gid, req)
        inc = self.incarnation

        def done(resp):
            if inc != self.incarnation:
                return
            if self.paused():
                self.defer(done, resp)
                return
            if tgt is not None and not any(c in _UNAVAILABLE for c in error_codes(resp)):
                checker.note_ack(idx, tgt)
                checker.note_commit_ack(gid, req, resp, tgt)
            checker.observe_response(gid, req, resp)
            respond(conn, seq, resp)

        if isinstance(r, asyncio.Future):
            r.add_done_callback(lambda f: None if f.cancelled() else done(f.result()))
        else:
            done(r)


# ====================================================================== the cluster
class Cluster:
    """What the runner, the network, the members and the checker see as "the node"."""

    def __init__(self, sim, n: int, store: SimStore, lease_ms: int, drift: float, topics,
                 rcfg):
        self.sim = sim
        self.store = store
        self.lease_ms = lease_ms
        self.drift = drift
        self.topics = topics
        self.rcfg = rcfg
        self.shard_count = rcfg.shards
        self.nodes = [ClusterNodeSim(self, i + 1) for i in range(n)]
        self.incarnation = 0          # (the network asks the node of each connection)
        self.up = True

    def start(self) -> None:
        for x in self.nodes:
            x.start()

    def connect(self, member):
        """FindCoordinator, asked of a random running node (a client's bootstrap list)."""
        rng = self.sim.rng
        running = [x for x in self.nodes if x.up and not x.paused()]
        if not running:
            return rng.choice(self.nodes)
        asked = rng.choice(running)
        owner = asked.owner_view(shard_for(member.group.group_id, self.shard_count))
        return self.nodes[owner - 1] if owner is not None else asked

    def runtime_for(self, gid: str):
        idx = shard_for(gid, self.shard_count)
        for x in self.nodes:
            if x.serves(idx):
                return x.shards[idx]
        return None

    def set_topics(self, catalog) -> None:
        self.topics = catalog
        for x in self.nodes:
            for rt in x.shards:
                rt.set_topics(catalog)


class ClusterFaultInjector(FaultInjector):
    def _running_node(self):
        xs = [x for x in self.sim.node.nodes if x.up and not x.paused()]
        return self.rng.choice(xs) if xs else None

    def _node_crash(self) -> bool:
        x = self._running_node()
        if x is None:
            return False
        x.crash()
        lease = self.sim.node.lease_ms
        self._later(self.rng.uniform(100, 2 * lease), x.start)
        return True

    def _node_pause(self) -> bool:
        x = self._running_node()
        if x is None:
            return False
        lease = self.sim.node.lease_ms
        if self.rng.random() < 0.5:
            x.pause(self.rng.uniform(0.2, 3.0) * lease)
        else:
            # At its next log round trip, long enough for another node to take over: the
            # zombie's write goes out when it resumes.
            x.pause_at_next_write = self.rng.uniform(1.5, 3.0) * lease
        return True

    def _store_down(self) -> bool:
        self.sim.node.store.down_for(self.rng.uniform(100, 1.5 * self.sim.node.lease_ms))
        return True

    def _disk_eio(self) -> bool:
        self.sim.node.store.lose_next = True
        return True

    def _clock_jump(self) -> bool:
        x = self._running_node()
        if x is None:
            return False
        b = self.mix.clock_bound_ms
        x.clock.offset_ms = self.rng.randint(-b, b)
        self.sim.trace("fault", "node %d clock offset %+d ms" % (x.node_id, x.clock.offset_ms))
        return True


# ====================================================================== the world
class ClusterSim(Sim):
    Injector = ClusterFaultInjector

    def _make_node(self, topics):
        rng = self.rng
        only = self.opts.faults
        self.rcfg = msgspec.structs.replace(self.rcfg, shards=rng.choice((2, 3, 4, 6)))
        lease_ms = rng.choice((1000, 2000, 4000))
        drift = rng.choice((0.0, 0.02, 0.05))
        for k in CLUSTER_KINDS:
            if (only is None and rng.random() < 0.5) or (only is not None and k in only):
                self.mix.rates[k] = rng.choice((2, 6, 15))
        params = StoreParams(base_ms=rng.choice((0.3, 1.0)), jitter_ms=rng.choice((0.5, 3.0)),
                             slow_p=rng.choice((0.0, 0.0, 0.02, 0.1)),
                             slow_ms=rng.choice((300.0, 1.5 * lease_ms)),
                             lose_p=rng.choice((0.0, 0.0, 0.005, 0.02)))
        store = SimStore(self.loop, rng, self.rcfg.shards, params, self.trace)
        # Through sim.fail: the exception alone would reach PgShardLog as a failed write.
        store.on_write = lambda *a: self._oracle(self.checker.on_store_write, *a)
        store.on_conflict = lambda *a: self._oracle(self.checker.on_store_conflict, *a)
        self.net.refind = True
        return Cluster(self, self.opts.cluster, store, lease_ms, drift, topics, self.rcfg)

    def _oracle(self, check, *args) -> None:
        try:
            check(*args)
        except InvariantViolation as exc:
            self.fail(str(exc))
            raise

    def _node_stats(self) -> dict:
        c = self.node
        s = c.store
        return dict(node_crashes=sum(x.crashes for x in c.nodes),
                    pauses=sum(x.pauses for x in c.nodes), loads=sum(x.loads for x in c.nodes),
                    fences=sum(x.fences for x in c.nodes), store_calls=s.calls,
                    store_failed=s.failed, store_unsure=s.unsure, store_commits=s.commits)

    def world(self) -> str:
        c = self.node
        p = c.store.params
        return "nodes=%d lease=%dms drift=%g rates=%s store[slow_p=%g lose_p=%g] %s" % (
            len(c.nodes), c.lease_ms, c.drift, ",".join("%.3f" % x.rate for x in c.nodes),
            p.slow_p, p.lose_p, super().world())

    def _calm_node(self) -> None:
        c = self.node
        c.store.down_until_us = 0
        c.store.params.slow_p = c.store.params.lose_p = 0.0
        c.store.lose_next = False
        for x in c.nodes:
            if not x.up:
                x.start()

    async def _final_checks(self) -> None:
        c = self.node
        n = c.shard_count
        # The fault phase is over: a lost commit answer injected near its end must not fail
        # the check's own flush (as runner.Sim._final_checks: seed 888 in single-node mode).
        c.store.lose_next = False
        # Let the leases settle (nodes restarted, shards loaded), as far as they do.
        for _ in range(int(3 * c.lease_ms / 100) + 50):
            if all(any(x.serves(i) for x in c.nodes) for i in range(n)):
                break
            await asyncio.sleep(0.1)
        for x in self.members:
            x.crash()
        self.net.frozen = True
        for i in range(n):
            rt = None
            for x in c.nodes:
                if x.serves(i):
                    rt = x.shards[i]
            live = None
            if rt is not None:
                try:
                    while rt.state is ShardState.ACTIVE \
                            and rt.log.next_offset != rt.log.durable_offset:
                        await rt.flush()
                except Exception:
                    rt = None               # its lease went meanwhile: check the store alone
                if rt is not None and rt.state is ShardState.ACTIVE:
                    live = rt.shard.snapshot(durable=True)
                    cfg = rt.shard.config
            rows = c.store.rows_of(i)
            data, nxt = _join_rows(i, rows)
            fresh = Shard(self._shard_config() if live is None else cfg, c.topics)
            load_shard(fresh, PgSnapshot(i, data, nxt, len(rows)))
            acked = self.checker.acked.get(i, 0)
            if nxt < acked:
                self.fail("durability: at the end shard %d's rows end at %d, below the "
                          "acknowledged %d" % (i, nxt, acked))
                return
            try:
                self.checker.check_acked(i, fresh, n, "the end")
            except InvariantViolation as exc:
                self.fail(str(exc))
                return
            if live is not None:
                got = fresh.snapshot(durable=True)
                if got != live:
                    diffs = [g for g in sorted(set(live["groups"]) | set(got["groups"]))
                             if live["groups"].get(g) != got["groups"].get(g)]
                    self.fail("replay: shard %d's live state differs from a fresh load of its "
                              "rows in the store (groups %s; offsets equal: %s)"
                              % (i, diffs[:4], live["offsets"] == got["offsets"]))
                    return

    def _teardown(self) -> None:
        # The run is over: nothing the runtimes started may act (or log) while the loop's
        # tasks are cancelled.
        for x in self.node.nodes:
            for rt in x.shards:
                rt.generation += 1
                rt.state = ShardState.UNLOADED
                rt._cancel_timer()
        super()._teardown()

    def _shard_config(self):
        cfg = self.rcfg.shard_config
        if not cfg.consumer_assignor_offload_partitions:
            cfg = msgspec.structs.replace(
                cfg, consumer_assignor_offload_partitions=self.rcfg.offload_partitions)
        return cfg

