"""One simulated world per seed: build it, run it, report.

    res = run_seed(1234, Options(liveness=True))
    res.ok, res.failure, res.replay, res.trace_tail, res.stats

The world: one coordinator node (`Node`) with `shards` real `ShardRuntime`s (the server's
runtime, unchanged: group commit, ack after fdatasync, failure -> reload, timers, offloaded
assignor runs) over one `SimDisk`, their I/O and assignor pools replaced by `SimExecutor`s;
1-3 groups (KIP-848 consumer, connect, classic) of simulated members (members.py) over the
simulated network (network.py); a fault injector (faults.py). Everything random comes from
one `random.Random(seed)`; time is the `SimLoop`'s virtual clock; no threads, no wall clock.

With `operator`, an operator also acts during the fault phase, from an rng of its own (the
seed's world and fault mix stay what they are without it): now and then DeleteGroups or
OffsetDelete on one of the groups, through the shard like an admin tool's request
(`Sim._operator`, with the invariants those answers must keep).

Phases: the fault phase (`duration_s` of virtual time with the seed's fault mix), then, in
liveness mode, the calm phase: faults stop, the network heals, crashed processes come back,
and every group must converge (invariants.converged) within `bound_s`; the time it took is
reported. At the end the live state of every shard must equal a fresh load of its log.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
import zlib
from collections import Counter, deque
from typing import Optional

import msgspec

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.shards import shard_for
from groupcoord.runtime.load import load_shard
from groupcoord.runtime.shard_runtime import ShardRuntime, ShardState
from groupcoord.storage import Log

from tests.simulation.clock import CoordinatorClock, SimIdle, SimLoop
from tests.simulation.disk import SimDisk, SimExecutor
from tests.simulation.faults import FaultInjector, draw_mix
from tests.simulation.invariants import Checker, ErrorLogWatcher, InvariantViolation, converged
from tests.simulation.members import ClassicSim, ConnectSim, ConsumerSim
from tests.simulation.network import NetParams, Network

__all__ = ["Options", "SeedResult", "run_seed", "replay_command", "HASH_SEED"]


# The runner command fixes PYTHONHASHSEED to this (see __main__._fixed_hash_seed).
HASH_SEED = "0"

_UNAVAILABLE = {int(E.COORDINATOR_NOT_AVAILABLE), int(E.NOT_COORDINATOR),
                int(E.COORDINATOR_LOAD_IN_PROGRESS)}


class Options(msgspec.Struct, kw_only=True):
    duration_s: float = 30.0          # fault phase (virtual seconds)
    liveness: bool = False
    bound_s: float = 90.0             # liveness: every group converges within this
    kinds: Optional[tuple] = None     # group kinds to draw from (None: all)
    faults: Optional[tuple] = None    # fault kinds to enable (None: swarm draws them)
    mutation: Optional[str] = None    # a planted bug (mutations.py) for checking the checkers
    operator: bool = False            # operator actions: DeleteGroups / OffsetDelete
    cluster: int = 0                  # > 0: this many nodes over the simulated store (cluster.py)


class SeedResult(msgspec.Struct, kw_only=True):
    seed: int
    ok: bool
    failure: str = ""
    replay: str = ""
    world: str = ""
    mix: str = ""
    trace_tail: list = []
    stats: dict = {}
    converge_ms: int = -1
    virtual_s: float = 0.0
    wall_s: float = 0.0
    digest: int = 0


def replay_command(seed: int, opts: Options) -> str:
    cmd = "python -m tests.simulation --seed %d --duration %g" % (seed, opts.duration_s)
    if opts.liveness:
        cmd += " --liveness --bound %g" % opts.bound_s
    if opts.kinds:
        cmd += " --kinds %s" % ",".join(opts.kinds)
    if opts.faults:
        cmd += " --faults %s" % ",".join(opts.faults)
    if opts.mutation:
        cmd += " --mutation %s" % opts.mutation
    if opts.operator:
        cmd += " --operator"
    if opts.cluster:
        cmd += " --cluster %d" % opts.cluster
    return cmd + " --trace"


# ====================================================================== the world
class GroupSpec:
    def __init__(self, sim, kind: str, group_id: str, rng, topics, shard_cfg, clock_bound_ms,
                 mix):
        self.kind = kind
        self.group_id = group_id
        self.members: list = []
        self.rebalance_timeout_ms = rng.choice((3000, 5000, 8000))
        self.heartbeat_interval_ms = rng.choice((200, 400))
        self.commit_interval_ms = rng.choice((300, 700))
        self.scheduled_delay_ms = rng.choice((0, 1000, 3000))
        self.slow_callback_p = mix.slow_callback_p
        self.slow_assignor_p = mix.slow_assignor_p if kind == "connect" else 0.0
        self.commits = kind != "connect"
        if kind == "consumer":
            self.topics = rng.sample(topics, rng.randint(1, len(topics)))
            self.assignor = rng.choice(("uniform", "range"))
            session = shard_cfg.consumer_session_timeout_ms
        elif kind == "connect":
            self.topics = []
            self.assignor = rng.choice(("incremental-cooperative", "incremental-cooperative",
                                        "eager"))
            session = shard_cfg.connect_session_timeout_ms
            n = rng.randint(1, 3)
            self.config = (1, {"conn%d" % i: rng.randint(0, 4) for i in range(n)})
        else:
            self.topics = rng.sample(topics, rng.randint(1, len(topics)))
            self.assignor = rng.choice(("range", "roundrobin", "cooperative-sticky"))
            session = rng.choice((3000, 5000))
            self.session_timeout_ms = session
        # The member's lease: see members.py.
        lease_ms = min(session, self.rebalance_timeout_ms) - 2 * clock_bound_ms - 50
        self.lease_us = max(lease_ms, 100) * 1000

    def callback_ms(self, rng) -> float:
        if self.slow_callback_p and rng.random() < self.slow_callback_p:
            return rng.uniform(100, 2500)
        return rng.uniform(0, 5)

    def assignor_delay_ms(self, rng) -> float:
        if self.slow_assignor_p and rng.random() < self.slow_assignor_p:
            return rng.uniform(100, 2 * self.rebalance_timeout_ms)
        return rng.uniform(0, 10)

    def describe(self) -> str:
        extra = self.assignor
        if self.kind == "connect":
            extra += " conns=%s" % (self.config[1],)
        else:
            extra += " topics=%s" % ",".join(self.topics)
        return "%s[%s %d members %s]" % (self.group_id, self.kind, len(self.members), extra)


class SimShardRuntime(ShardRuntime):
    """The real runtime with two observation hooks (no behaviour change)."""
    sim = None

    async def load(self) -> None:
        await super().load()
        if self.state is ShardState.ACTIVE and self.sim is not None:
            try:
                self.sim.checker.on_loaded(self)
            except InvariantViolation as exc:
                self.sim.fail(str(exc))     # not through the runtime's reload retry loop

    def _fail(self, exc) -> None:
        if self.state is not ShardState.FAILED and self.sim is not None:
            self.sim.trace("node", "shard %d failed: %s" % (self.index, exc))
            self.sim.checker.capture(self)
        super()._fail(exc)


def _error_codes(resp):
    c = getattr(resp, "error_code", None)
    if c is not None:
        yield c
    for g in getattr(resp, "groups", None) or ():
        c = getattr(g, "error_code", None)
        if c is not None:
            yield c
    for t in getattr(resp, "topics", None) or ():
        for p in getattr(t, "partitions", None) or ():
            c = getattr(p, "error_code", None)
            if c is not None:
                yield c


class Node:
    """The coordinator process: shard runtimes over the simulated disk."""

    def __init__(self, sim, rcfg: RuntimeConfig, topics: TopicCatalog, mix):
        self.sim = sim
        self.loop = sim.loop
        self.rcfg = rcfg
        self.topics = topics
        self.disk = SimDisk()
        self.clock = CoordinatorClock(sim.loop)
        rng = sim.rng

        def io_latency(_fn):
            ms = 0.1 + rng.random() * 1.5
            if mix.disk_spike_p and rng.random() < mix.disk_spike_p:
                ms += rng.random() * 300
            return ms / 1000

        self.io = SimExecutor(sim.loop, io_latency, "io")
        self.cpu = SimExecutor(sim.loop, lambda _fn: (1 + rng.random() * 40) / 1000, "cpu")
        self.mix = mix
        self.up = False
        self.incarnation = 0
        self.shards: list = []
        self._tasks: list = []

    def start(self) -> None:
        if self.up:
            return
        self.incarnation += 1
        self.up = True
        self.sim.trace("node", "start (incarnation %d)" % self.incarnation)
        self.shards = []
        for i in range(self.rcfg.shards):
            rt = SimShardRuntime(i, "/data/__consumer_offsets-%d" % i, self.rcfg, self.topics,
                                 clock=self.clock, io_pool=self.io, cpu_pool=self.cpu,
                                 file_ops=self.disk)
            rt.sim = self.sim
            self.shards.append(rt)
        self._tasks = [self.sim.spawn(self._load(rt)) for rt in self.shards]

    async def _load(self, rt) -> None:
        while True:
            try:
                await rt.load()
                return
            except OSError as exc:
                if "simulated" not in str(exc):
                    raise
                # The injected EIO hit recovery: an environment error; start again, as an
                # operator (or a supervisor) would.
                self.sim.trace("node", "shard %d load hit %s; retrying" % (rt.index, exc))
                await asyncio.sleep(0.2)
            except InvariantViolation as exc:
                self.sim.fail(str(exc))
                return
            except Exception as exc:
                self.sim.fail("no-internal-error: shard %d failed to load from the simulated "
                              "disk: %r" % (rt.index, exc))
                return

    def crash(self) -> None:
        if not self.up:
            return
        self.sim.trace("node", "CRASH (incarnation %d)" % self.incarnation)
        self.up = False
        rng = self.sim.rng
        for rt in self.shards:
            self.sim.checker.capture(rt)
        for rt in self.shards:
            # The process is gone: nothing of it runs again.
            rt.generation += 1
            rt.state = ShardState.UNLOADED
            rt._cancel_timer()
            if rt._reload_task is not None:
                rt._reload_task.cancel()
        for t in self._tasks:
            t.cancel()
        self.io.crash(lambda fn: rng.random() < 0.5, self.disk)
        self.cpu.crash()
        self.disk.crash(rng, tear=self.mix.tear)
        self.sim.net.node_crashed()
        self.shards = []

    def connect(self, member):
        """FindCoordinator: the one node coordinates every group."""
        return self

    def runtime_for(self, gid: str):
        if not self.up or not self.shards:
            return None
        rt = self.shards[shard_for(gid, len(self.shards))]
        return rt if rt.state is ShardState.ACTIVE else None

    def set_topics(self, catalog: TopicCatalog) -> None:
        self.topics = catalog
        for rt in self.shards:
            rt.set_topics(catalog)

    def receive(self, conn, seq, req, version, respond) -> None:
        gid = req.groups[0].group_id if isinstance(req, m.OffsetFetchRequest) else req.group_id
        idx = shard_for(gid, len(self.shards))
        rt = self.shards[idx]
        r = rt.submit_nowait(req, version, conn.member.name, "sim")
        target = rt.log.next_offset if (rt.state is ShardState.ACTIVE and rt.log is not None) \
            else None
        self.sim.stats["requests"] += 1
        self.sim.checker.after_request(rt, gid, req)
        inc = self.incarnation
        checker = self.sim.checker

        def done(resp):
            if inc != self.incarnation:
                return
            if target is not None and not any(c in _UNAVAILABLE for c in _error_codes(resp)):
                checker.note_ack(idx, target)
            checker.observe_response(gid, req, resp)
            respond(conn, seq, resp)

        if isinstance(r, asyncio.Future):
            r.add_done_callback(lambda f: None if f.cancelled() else done(f.result()))
        else:
            done(r)


class Sim:
    Injector = FaultInjector          # cluster.ClusterSim: its own node faults

    def __init__(self, seed: int, opts: Options):
        self.seed = seed
        self.opts = opts
        self.rng = rng = random.Random(seed)
        self.loop = SimLoop()
        self.stats: Counter = Counter()
        self.failure: Optional[str] = None
        self._trace: deque = deque(maxlen=300)
        self.digest = 0
        self.checker = Checker(self)
        self.mix = draw_mix(rng, only=opts.faults)
        self.net = Network(self.loop, rng, NetParams(
            base_ms=rng.choice((0.5, 2.0)), jitter_ms=rng.choice((1.0, 10.0)),
            spike_p=self.mix.spike_p, loss_p=self.mix.loss_p, dup_p=self.mix.dup_p),
            self.trace)
        # ---- topics, shards, groups
        topics = TopicCatalog.of(**{"t%d" % i: rng.randint(1, 8) for i in range(rng.randint(1, 3))})
        scfg = ShardConfig(
            consumer_session_timeout_ms=rng.choice((3000, 5000)),
            consumer_heartbeat_interval_ms=rng.choice((200, 500)),
            connect_session_timeout_ms=rng.choice((3000, 5000)),
            connect_heartbeat_interval_ms=rng.choice((200, 500)),
            group_min_session_timeout_ms=1000,
            group_initial_rebalance_delay_ms=rng.choice((0, 200, 1000)))
        self.rcfg = RuntimeConfig(
            data_dir="/data", shards=rng.choice((1, 2, 3)),
            segment_bytes=rng.choice((2048, 8192, 1 << 20)),
            compact_min_dirty_bytes=rng.choice((4096, 1 << 30)), compact_min_dirty_ratio=0.5,
            tombstone_retention_ms=rng.choice((0, 5000, 86_400_000)),
            offload_partitions=rng.choice((1, 100_000)), reload_backoff_ms=200,
            shard_config=scfg)
        self.node = self._make_node(topics)
        self.net.node = self.node
        kinds = opts.kinds or ("consumer", "connect", "classic")
        self.specs: list = []
        self.members: list = []
        for gi in range(rng.randint(1, 3)):
            kind = rng.choice(kinds)
            spec = GroupSpec(self, kind, "%s-g%d" % (kind, gi), rng, sorted(topics.by_name),
                             scfg, self.mix.clock_bound_ms, self.mix)
            cls = {"consumer": ConsumerSim, "connect": ConnectSim, "classic": ClassicSim}[kind]
            for mi in range(rng.randint(1, 5)):
                static = rng.random() < 0.3
                name = "%s-m%d" % (spec.group_id, mi)
                x = cls(self, spec, name, instance_id=("i-" + name) if static else None)
                spec.members.append(x)
                self.members.append(x)
            self.specs.append(spec)
        self.injector = self.Injector(self, self.mix)
        self._tasks: list = []
        self._ids = 0

    def _make_node(self, topics):
        return Node(self, self.rcfg, topics, self.mix)

    def _node_stats(self) -> dict:
        node = self.node
        return dict(disk_crashes=node.disk.crashes, torn=node.disk.torn, eio=node.disk.eio)

    # ---------------------------------------------------------------- services
    def trace(self, kind: str, text: str) -> None:
        line = "%9.3f %-6s %s" % (self.loop.now_us / 1e6, kind, text)
        self._trace.append(line)
        self.digest = zlib.crc32(line.encode(), self.digest)

    def fail(self, msg: str) -> None:
        if self.failure is None:
            self.failure = msg
            self.trace("FAIL", msg)
        self.loop.stop()

    def spawn(self, coro):
        async def guarded():
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except InvariantViolation as exc:
                self.fail(str(exc))
            except BaseException as exc:
                self.fail("simulator error: %r" % (exc,))
        t = self.loop.create_task(guarded())
        self._tasks.append(t)
        return t

    def new_id(self) -> str:
        self._ids += 1
        return base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")) \
            .rstrip(b"=").decode()

    def restart_member(self, x, mode: str) -> None:
        if not x.alive:
            x.start(mode)

    def change_config(self) -> bool:
        rng = self.rng
        connects = [s for s in self.specs if s.kind == "connect"]
        if connects and rng.random() < 0.6:
            s = rng.choice(connects)
            offset, conns = s.config
            conns = dict(conns)
            op = rng.random()
            if op < 0.4 or not conns:
                conns["conn%d" % (offset + 10)] = rng.randint(0, 4)
            elif op < 0.7 and len(conns) > 1:
                conns.pop(rng.choice(sorted(conns)))
            else:
                c = rng.choice(sorted(conns))
                conns[c] = rng.randint(0, 5)
            s.config = (offset + 1, conns)
            self.trace("fault", "%s config %d %s" % (s.group_id, offset + 1, conns))
            return True
        topics = self.node.topics
        t = rng.choice(sorted(topics.by_name))
        cur = topics.get(t)
        if cur.partitions >= 12:
            return False
        self.node.set_topics(topics.with_topics((t, cur.partitions + rng.randint(1, 3),
                                                 cur.topic_id)))
        self.trace("fault", "topic %s grows to %d partitions"
                   % (t, self.node.topics.get(t).partitions))
        return True

    def world(self) -> str:
        return "shards=%d seg=%d %s" % (self.rcfg.shards, self.rcfg.segment_bytes,
                                        " ".join(s.describe() for s in self.specs))

    # ---------------------------------------------------------------- phases
    async def main(self) -> None:
        rng = self.rng
        self.node.start()
        for x in self.members:
            self.loop.call_later(rng.uniform(0, 1.5), self.restart_member, x, "fresh")
        fault_end = self.loop.now_us + int(self.opts.duration_s * 1e6)
        self.spawn(self.injector.run(fault_end))
        if self.opts.operator:
            self.spawn(self._operator(fault_end))
        await asyncio.sleep(self.opts.duration_s)
        if self.opts.liveness:
            await self._calm()
        await self._final_checks()

    async def _operator(self, until_us: int) -> None:
        """An operator's admin requests, about one every 4 virtual seconds: DeleteGroups of
        one group (it succeeds once every member is gone) or OffsetDelete of some of a group's
        topics. Invariants (checked on the state the shard answered from, as the handler runs
        at submission): a group with members is never deleted (NON_EMPTY_GROUP), a topic the
        group's live members subscribe to keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC), a
        connect group with members refuses OffsetDelete (NON_EMPTY_GROUP). What was deleted
        leaves the offsets invariant's memory: a group starts afresh after it."""
        rng = random.Random(self.seed * 1_000_003 + 17)
        loop = self.loop
        while True:
            await asyncio.sleep(rng.expovariate(0.25))
            if loop.now_us >= until_us:
                return
            spec = rng.choice(self.specs)
            rt = self.node.runtime_for(spec.group_id)
            if rt is None:
                continue
            gid = spec.group_id
            g = rt.shard.groups.get(gid)
            members = bool(g is not None and not g.is_empty())
            if rng.random() < 0.4:
                req, version = m.DeleteGroupsRequest(groups_names=[gid]), 2
            else:
                names = sorted(self.node.topics.by_name)
                topics = rng.sample(names, rng.randint(1, len(names))) + ["never-committed"]
                req, version = m.OffsetDeleteRequest(group_id=gid, topics=[
                    m.OffsetDeleteRequestTopic(name=t, partitions=[
                        m.OffsetDeleteRequestPartition(partition_index=p)
                        for p in range(rng.randint(1, 3))]) for t in topics]), 0
            held = dict(rt.shard.offsets.get(gid) or {})
            r = rt.submit_nowait(req, version, "operator", "sim")
            self.stats["operator"] += 1
            self.checker.after_operator(spec, req, members, held, rt.shard,
                                        rt.log.next_offset if rt.log is not None else None)
            if isinstance(r, asyncio.Future):
                r.add_done_callback(lambda f, spec=spec, req=req, members=members:
                                    None if f.cancelled()
                                    else self.checker.operator_answer(spec, req, f.result(),
                                                                      members))
            else:
                self.checker.operator_answer(spec, req, r, members)

    async def _calm(self) -> None:
        self.trace("phase", "calm: faults stop")
        self.net.params = self.net.params.calm()
        self.net.cut.clear()
        self._calm_node()
        for s in self.specs:
            s.slow_callback_p = 0.0
            s.slow_assignor_p = 0.0
        for x in self.members:
            if not x.alive:
                self.loop.call_later(self.rng.uniform(0, 0.5), self.restart_member, x, "fresh")
        start = self.loop.now_us
        deadline = start + int(self.opts.bound_s * 1e6)
        while True:
            await asyncio.sleep(0.1)
            states = [converged(self, s) for s in self.specs]
            if all(ok for ok, _ in states):
                self.stats["converge_ms"] = (self.loop.now_us - start) // 1000
                self.trace("phase", "converged after %d ms" % self.stats["converge_ms"])
                return
            if self.loop.now_us >= deadline:
                why = "; ".join("%s: %s" % (s.group_id, w)
                                for s, (ok, w) in zip(self.specs, states) if not ok)
                self.fail("liveness: not converged within %gs: %s" % (self.opts.bound_s, why))
                return

    def _calm_node(self) -> None:
        """The calm phase: no injected I/O error, the node runs."""
        self.node.disk.fail_next = None
        if not self.node.up:
            self.node.start()

    async def _final_checks(self) -> None:
        node = self.node
        # The fault phase is over: an EIO injected near its end and not yet consumed (nothing
        # wrote since) must not fail the check's own flush (seed 888).
        node.disk.fail_next = None
        if not node.up:
            return
        for _ in range(50):
            if all(rt.state is ShardState.ACTIVE for rt in node.shards):
                break
            await asyncio.sleep(0.1)
        for x in self.members:              # stop the world: no more requests
            x.crash()
        self.net.frozen = True
        for rt in node.shards:
            if rt.state is not ShardState.ACTIVE:
                continue
            while rt.state is ShardState.ACTIVE and rt.log.next_offset != rt.log.durable_offset:
                await rt.flush()                # (timers may append meanwhile: until idle)
            if rt.state is not ShardState.ACTIVE:
                continue
            live = rt.shard.snapshot(durable=True)
            lg = Log(rt.directory, fsync="always", segment_bytes=self.rcfg.segment_bytes,
                     clock=node.clock, ops=node.disk)
            try:
                fresh = Shard(rt.shard.config, node.topics)
                load_shard(fresh, lg)
            finally:
                lg.close(flush=False)
            got = fresh.snapshot(durable=True)
            if got != live:
                diffs = ["group %s" % g for g in sorted(set(live["groups"]) | set(got["groups"]))
                         if live["groups"].get(g) != got["groups"].get(g)]
                for gid in sorted(set(live["offsets"]) | set(got["offsets"])):
                    a, b = live["offsets"].get(gid, {}), got["offsets"].get(gid, {})
                    diffs += ["offset %s %s: live %s, log %s" % (gid, k, a.get(k), b.get(k))
                              for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                self.fail("replay: shard %d live state differs from a fresh load of its log: %s"
                          % (rt.index, "; ".join(diffs[:4])))
                return

    # ---------------------------------------------------------------- running
    def run(self) -> SeedResult:
        t0 = time.perf_counter()
        watcher = ErrorLogWatcher(self)
        glog = logging.getLogger("groupcoord")
        glog.addHandler(watcher)
        self.loop.set_exception_handler(self._loop_error)
        asyncio.set_event_loop(self.loop)
        try:
            self.trace("world", self.world())
            self.trace("world", "faults: " + self.mix.describe())
            main = self.loop.create_task(self.main())
            try:
                self.loop.run_until_complete(main)
            except RuntimeError:
                if self.failure is None:
                    raise
            except SimIdle as exc:
                self.fail("simulator error: %s" % exc)
            except InvariantViolation as exc:
                self.fail(str(exc))
            except Exception:
                if not main.done():
                    raise
                # main's own exception: a failing seed (below), not a crash of the runner
            if main.done() and not main.cancelled() and main.exception() is not None \
                    and self.failure is None:
                exc = main.exception()
                self.fail(str(exc) if isinstance(exc, InvariantViolation)
                          else "simulator error: %r" % (exc,))
        finally:
            glog.removeHandler(watcher)
            self._teardown()
            asyncio.set_event_loop(None)
        stats = dict(self.stats)
        stats.update(faults=dict(self.injector.applied), checks=self.checker.checks,
                     net_lost=self.net.lost, net_dup=self.net.duplicated,
                     net_timeouts=self.net.timeouts, **self._node_stats(),
                     self_fences=sum(x.self_fences for x in self.members),
                     fatal=sum(1 for x in self.members if x.fatal))
        return SeedResult(seed=self.seed, ok=self.failure is None, failure=self.failure or "",
                          replay=replay_command(self.seed, self.opts), world=self.world(),
                          mix=self.mix.describe(), trace_tail=list(self._trace), stats=stats,
                          converge_ms=self.stats.get("converge_ms", -1),
                          virtual_s=self.loop.now_us / 1e6,
                          wall_s=time.perf_counter() - t0, digest=self.digest)

    def _loop_error(self, loop, context) -> None:
        exc = context.get("exception")
        if isinstance(exc, asyncio.CancelledError):
            return
        if isinstance(exc, InvariantViolation):
            self.fail(str(exc))
        else:
            self.fail("simulator error: %s %r" % (context.get("message", ""), exc))

    def _teardown(self) -> None:
        loop = self.loop
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            try:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            except BaseException:
                pass
        loop.close()


def run_seed(seed: int, opts: Optional[Options] = None) -> SeedResult:
    """Run one seed (with opts.mutation planted for the duration of the run, if any)."""
    opts = opts or Options()
    cls = Sim
    if opts.cluster:
        from tests.simulation.cluster import ClusterSim
        cls = ClusterSim
    if opts.mutation is None:
        return cls(seed, opts).run()
    from tests.simulation.mutations import MUTATIONS
    with MUTATIONS[opts.mutation]():
        return cls(seed, opts).run()
