"""Simulated group members: the SDK's sans-I/O state machines driven over the simulated network.

* `ConsumerSim`: a KIP-848 member (`ConsumerMemberState`), consuming and committing offsets;
* `ConnectSim`: a Connect worker (`ConnectMemberState`); when the coordinator chooses it, it
  runs PrepareAssignment -> `compute_install` (optionally slowly) -> InstallAssignment;
* `ClassicSim`: a classic consumer (`ClassicMemberState` + `ConsumerProtocol`), the leader
  running the client-side assignor.

Each member is one asyncio task on the simulation loop (plus a committer task for members
that consume). What a member *runs* (its own view, checked by invariants.Checker) changes
only here: `_hold` when its assigned callback starts, `_drop` when its revoked/lost callback
ends (callbacks take simulated time).

Lease (self-fencing): a member may run work only while it can be sure the coordinator has
not given that work away. Every answered heartbeat (or join/sync) proves the coordinator
heard it at or after the time it was *sent*, and the coordinator takes work away no sooner
than a session timeout or a rebalance timeout after that. So a member's lease runs until
send time + min(session, rebalance timeout) - margin, where the margin covers the
coordinator clock's configured jump bound; when the lease ends the member drops everything
(as the SDK's ConnectWorker does) and rejoins. An answer arriving after the lease ended is
not acted on.

Offsets carry metadata "m=<member id>;e=<epoch>" so that the checker can tell which member,
at which epoch, wrote the value the coordinator holds.
"""
from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Optional

from groupcoord.client import members_classic_state as cst
from groupcoord.client import members_consumer_state as kst
from groupcoord.client.connect_assignor import AssignorSpec, compute_install
from groupcoord.client.connect_member import Action, ConnectMemberState, Phase
from groupcoord.client.members_classic_protocol import ConsumerProtocol
from groupcoord.client.members_consumer_state import commit_errors, fetch_result
from groupcoord.protocol import messages as m

__all__ = ["SimMember", "ConsumerSim", "ConnectSim", "ClassicSim", "offset_meta", "parse_meta"]

REQUEST_TIMEOUT_S = 2.0


def offset_meta(member_id: str, epoch: int) -> str:
    return "m=%s;e=%d" % (member_id, epoch)


def parse_meta(meta: Optional[str]):
    """-> (member id, epoch) or None for metadata a simulated member did not write."""
    if not meta or not meta.startswith("m="):
        return None
    mid, _, e = meta[2:].rpartition(";e=")
    return mid, int(e)


def _fmt(units) -> str:
    return ",".join(("%s-%d" % (u[0], u[1])) for u in sorted(units))


def _fmt_wire(tps) -> str:
    if tps is None:
        return "null"
    return "[%s]" % ",".join("%s:%s" % (t.topic_id.hex()[:4], t.partitions) for t in tps)


def _version(req) -> int:
    return type(req).VERSIONS[1]


class SimMember(ABC):
    kind = ""

    def __init__(self, sim, group, name: str, *, instance_id: Optional[str] = None):
        self.sim = sim
        self.loop = sim.loop
        self.rng = sim.rng
        self.group = group
        self.name = name
        self.instance_id = instance_id
        self.member_id = ""
        self.incarnation = 0
        self.own: set = set()             # units this member runs now (its own view)
        self.epoch_of_own = 0
        self.lease_until_us = 0
        self._watchdog = None
        self.alive = False
        self.fatal: Optional[str] = None
        self.conn = None
        self.tasks: list = []
        self.positions: dict = {}         # TopicPartition -> consumed position (known)
        self.self_fences = 0
        self.leave_task = None            # a graceful leave in progress (faults.py)

    # ---------------------------------------------------------------- lifecycle
    def _cancel_leave(self) -> None:
        t = self.leave_task
        if t is not None and not t.done() and t is not asyncio.current_task():
            t.cancel()
        self.leave_task = None

    def start(self, mode: str = "fresh") -> None:
        self._cancel_leave()        # a leave of the previous incarnation must not touch us
        self.incarnation += 1
        self.alive = True
        self.fatal = None
        self.conn = None
        self.lease_until_us = 0
        self.reset_protocol(mode)
        self.sim.trace("member", "%s start (%s) id=%s" % (self.name, mode, self.member_id))
        self.tasks = [self.loop.create_task(self._guard(self.main()))]
        if self.group.commits:
            self.tasks.append(self.loop.create_task(self._guard(self.committer())))

    async def _guard(self, coro):
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except BaseException as exc:      # a bug in the simulator or the SDK: fail the seed
            from tests.simulation.invariants import InvariantViolation
            if isinstance(exc, InvariantViolation):
                self.sim.fail(str(exc))
            else:
                self.sim.fail("simulator error: member %s raised %r" % (self.name, exc))

    def crash(self) -> None:
        """The process dies: no callbacks, no leave. What it ran stops with it."""
        if not self.alive:
            return
        self.sim.trace("member", "%s crash" % self.name)
        self.alive = False
        self._cancel_leave()
        for t in self.tasks:
            t.cancel()
        self.tasks = []
        self._drop(set(self.own), "crash")
        self.positions.clear()
        self._cancel_watchdog()
        if self.conn is not None:
            self.sim.net._break(self.conn, 0)
        self.conn = None

    @abstractmethod
    def reset_protocol(self, mode: str) -> None:
        """A fresh protocol state machine for a (re)start: mode 'fresh', 'same-id' or
        'old-epoch'."""

    @abstractmethod
    async def main(self) -> None:
        """The member's driver task: join, heartbeat, reconcile, until it stops."""

    async def committer(self) -> None:
        return

    # ---------------------------------------------------------------- requests
    async def call(self, req, timeout_s: float = REQUEST_TIMEOUT_S):
        return await self.sim.net.call(self, req, _version(req), timeout_s)

    def now_us(self) -> int:
        return self.loop.now_us

    # ---------------------------------------------------------------- lease
    def extend_lease(self, sent_us: int) -> None:
        until = sent_us + self.group.lease_us
        if until > self.lease_until_us:
            self.lease_until_us = until
            self._cancel_watchdog()
            self._watchdog = self.loop.call_at(until / 1e6, self._lease_check)

    def lease_ok(self) -> bool:
        return self.now_us() < self.lease_until_us

    def _cancel_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _lease_check(self) -> None:
        self._watchdog = None
        if self.alive and not self.lease_ok() and self.own:
            self.self_fence("lease expired")

    def self_fence(self, why: str) -> None:
        """Drop all work at once (lost) and make the protocol rejoin."""
        self.self_fences += 1
        self.sim.trace("member", "%s self-fences (%s), drops %d units"
                       % (self.name, why, len(self.own)))
        self._drop(set(self.own), "self-fence")
        self.on_self_fence()

    def on_self_fence(self) -> None:
        pass

    # ---------------------------------------------------------------- own view
    def _hold(self, units, epoch: int) -> bool:
        units = set(units) - self.own
        if not units:
            return True
        if not self.lease_ok():
            return False
        self.sim.trace("member", "%s runs %s at epoch %d" % (self.name, _fmt(units), epoch))
        self.sim.checker.acquire(self, units, epoch)
        self.own |= units
        self.epoch_of_own = epoch
        return True

    def _drop(self, units, why: str) -> None:
        units = set(units) & self.own
        if not units:
            return
        self.sim.trace("member", "%s stops %s (%s)" % (self.name, _fmt(units), why))
        self.own -= units
        for u in units:
            self.positions.pop(u, None)
        self.sim.checker.release(self, units)

    async def callback_time(self) -> None:
        d = self.group.callback_ms(self.rng)
        if d:
            await asyncio.sleep(d / 1000)

    async def backoff(self) -> None:
        await asyncio.sleep((50 + self.rng.random() * 250) / 1000)

    # ---------------------------------------------------------------- offsets (consumers)
    async def _commit_once(self, build, tps) -> None:
        if not tps:
            return
        for tp in tps:
            self.positions[tp] += self.rng.randint(0, 7)
        offsets = {tp: (self.positions[tp], offset_meta(self.member_id, self.commit_epoch()))
                   for tp in sorted(tps)}
        resp = await self.call(build(offsets))
        if resp is not None:
            self.sim.stats["commits"] += 1
            if commit_errors(resp):
                self.sim.stats["commit_errors"] += 1

    def commit_epoch(self) -> int:
        return 0

    async def _fetch_positions(self, build, tps) -> None:
        """Where to start consuming newly assigned partitions: their committed offsets."""
        want = [tp for tp in tps if tp in self.own and tp not in self.positions]
        if not want:
            return
        resp = await self.call(build(want))
        if resp is None:
            return
        err, offsets, errors = fetch_result(resp)
        if err:
            return
        for tp, (off, _meta) in offsets.items():
            if tp in self.own and tp not in self.positions:
                self.positions[tp] = max(off, 0)


# ====================================================================== KIP-848 consumer
class ConsumerSim(SimMember):
    kind = "consumer"

    def reset_protocol(self, mode: str) -> None:
        g = self.group
        old = getattr(self, "sm", None)
        if mode == "fresh" or old is None or not self.member_id:
            self.member_id = self.sim.new_id()
        self.sm = kst.ConsumerMemberState(
            g.group_id, topics=g.topics, version=1, member_id=self.member_id,
            instance_id=self.instance_id, server_assignor=g.assignor,
            rebalance_timeout_ms=g.rebalance_timeout_ms)
        if mode == "old-epoch" and old is not None and old.epoch > 0:
            # A worker that comes back believing its old epoch (owning nothing any more).
            self.sm.epoch = old.epoch
            self.sm.state = kst.STABLE
        self.positions.clear()

    def on_self_fence(self) -> None:
        self.reset_protocol("same-id")

    def commit_epoch(self) -> int:
        return self.sm.epoch

    async def main(self) -> None:
        while True:
            sm = self.sm
            if sm.state in (kst.LEFT, kst.FATAL):
                return
            req = sm.heartbeat_request()
            sent = self.now_us()
            resp = await self.call(req)
            if sm is not self.sm:
                continue                    # self-fenced meanwhile: a new state machine
            if resp is None:
                sm.heartbeat_lost()
                await self.backoff()
                continue
            out = sm.on_heartbeat_response(req, resp)
            if resp.error_code or resp.assignment is not None or req.topic_partitions is not None:
                self.sim.trace("member", "%s hb epoch %d owned %s -> %s epoch %d assignment %s"
                               % (self.name, req.member_epoch, _fmt_wire(req.topic_partitions),
                                  resp.error_code, resp.member_epoch,
                                  _fmt_wire(resp.assignment.topic_partitions)
                                  if resp.assignment is not None else "-"))
            if out.ok:
                self.extend_lease(sent)
                await self._reconcile(sm)
                if sm is not self.sm:
                    continue
                wait = 0 if sm.ack_pending else sm.heartbeat_interval_ms / 1000
                if wait:
                    await asyncio.sleep(wait)
                continue
            if out.rejoin:
                self._drop(set(self.own), "fenced")
                self.positions.clear()
                continue
            if out.find_coordinator:
                await self.backoff()
                continue
            if out.fatal is not None:
                self._drop(set(self.own), "fatal")
                self.fatal = "%s" % (out.fatal,)
                self.sim.trace("member", "%s fatal %s" % (self.name, self.fatal))
                return
            if out.left:
                return

    async def _reconcile(self, sm) -> None:
        while sm is self.sm:
            rec = sm.next_reconciliation()
            if rec is None:
                return
            if rec.missing_topic_ids:
                names = {t.topic_id: t.name for t in self.sim.node.topics.by_name.values()}
                sm.add_topic_names({i: names[i] for i in rec.missing_topic_ids if i in names})
                if any(i not in sm.topic_names for i in rec.missing_topic_ids):
                    return
                continue
            if rec.revoked:
                await self._commit_once(sm.commit_request,
                                        [tp for tp in rec.revoked if tp in self.positions])
                await self.callback_time()
                if sm is not self.sm:
                    return
                self._drop(rec.revoked, "revoked")
                sm.revoke_done(rec)
            if rec.assigned:
                if not self._hold(rec.assigned, sm.epoch):
                    self.self_fence("answer after the lease ended")
                    return
                await self.callback_time()
                if sm is not self.sm:
                    return
                await self._fetch_positions(sm.fetch_request, rec.assigned)
            sm.assign_done(rec)

    async def committer(self) -> None:
        while True:
            await asyncio.sleep(self.group.commit_interval_ms / 1000)
            sm = self.sm
            if sm.state in (kst.STABLE, kst.RECONCILING) and self.lease_ok():
                await self._commit_once(sm.commit_request,
                                        [tp for tp in self.own if tp in self.positions])

    async def leave(self, temporary: bool) -> None:
        """Graceful: revoke everything, then the leave heartbeat (-1, or -2 if static)."""
        sm = self.sm
        if self.own:
            await self._commit_once(sm.commit_request,
                                    [tp for tp in self.own if tp in self.positions])
            await self.callback_time()
            self._drop(set(self.own), "leave")
        req = sm.leave_request(temporary and self.instance_id is not None)
        await self.call(req)


# ====================================================================== connect worker
class ConnectSim(SimMember):
    kind = "connect"

    def reset_protocol(self, mode: str) -> None:
        g = self.group
        old = getattr(self, "st", None)
        if mode == "fresh" or old is None or not self.member_id:
            self.member_id = self.sim.new_id()
        self.st = ConnectMemberState(
            group_id=g.group_id, member_id=self.member_id, worker_url="http://%s" % self.name,
            assignors=(AssignorSpec(g.assignor, 0, 2),), instance_id=self.instance_id,
            rebalance_timeout_ms=g.rebalance_timeout_ms)
        offset, conns = g.config
        self.st.set_config(conns, offset)
        if mode == "old-epoch" and old is not None and old.member_epoch > 0:
            self.st.member_epoch = old.member_epoch
            self.st.phase = Phase.STABLE
        self._hb_seq = 0
        self._compute_floor = 0
        self._compute_task = None

    def on_self_fence(self) -> None:
        self.st.owned = frozenset()
        self.st.abandon()

    async def main(self) -> None:
        while True:
            st = self.st
            if st.phase in (Phase.FATAL, Phase.LEFT):
                return
            offset, conns = self.group.config
            if offset > st.config_offset:
                st.set_config(conns, offset)           # the worker read the config topic
            req = st.heartbeat_request()
            self._hb_seq += 1
            seq = self._hb_seq
            sent = self.now_us()
            resp = await self.call(req)
            if st is not self.st:
                continue
            if resp is None:
                st.on_request_failed()
                await self.backoff()
                continue
            out = st.on_response(resp)
            if out.action is Action.OK:
                self.extend_lease(sent)
                if out.revoke:
                    await self.callback_time()
                    self._drop(out.revoke, "revoked")
                    st.revoked(out.revoke)
                if out.assign:
                    if not self._hold(out.assign, st.member_epoch):
                        self.self_fence("answer after the lease ended")
                        continue
                    st.assigned(out.assign)
                    await self.callback_time()
                if out.compute and seq > self._compute_floor and (
                        self._compute_task is None or self._compute_task.done()):
                    self._compute_task = self.loop.create_task(self._guard(self._compute()))
                    self.tasks.append(self._compute_task)
                if not out.revoke:
                    await asyncio.sleep(out.interval_ms / 1000)
                continue
            if out.action is Action.REJOIN:
                await self.callback_time()
                self._drop(out.revoke, "rejoin")
                st.owned = frozenset()
                continue
            if out.action in (Action.FIND_COORDINATOR, Action.RETRY):
                await self.backoff()
                continue
            self._drop(set(self.own), "fatal")
            self.fatal = "%s %s" % (out.error, out.error_message)
            self.sim.trace("member", "%s fatal %s" % (self.name, self.fatal))
            return

    async def _compute(self) -> None:
        st = self.st
        epoch = st.member_epoch
        try:
            p = await self.call(m.ConnectGroupPrepareAssignmentRequest(
                group_id=self.group.group_id, member_id=st.member_id, member_epoch=epoch))
            if p is None or p.error_code:
                return
            slow = self.group.assignor_delay_ms(self.rng)
            if slow:
                await asyncio.sleep(slow / 1000)        # a slow assignor worker
            plan = compute_install(p, self.group.scheduled_delay_ms)
            r = await self.call(m.ConnectGroupInstallAssignmentRequest(
                group_id=self.group.group_id, member_id=st.member_id, member_epoch=epoch,
                group_epoch=p.group_epoch, error=plan.error,
                rebalance_delay_ms=plan.rebalance_delay_ms, assignor_state=plan.assignor_state,
                members=plan.members))
            if r is not None and not r.error_code:
                self.sim.stats["installs"] += 1
        finally:
            self._compute_floor = self._hb_seq

    async def leave(self, temporary: bool) -> None:
        st = self.st
        if self.own:
            await self.callback_time()
            self._drop(set(self.own), "leave")
            st.owned = frozenset()
        if st.member_epoch > 0:
            await self.call(st.leave_request(temporary and self.instance_id is not None))


# ====================================================================== classic consumer
class ClassicSim(SimMember):
    kind = "classic"

    def reset_protocol(self, mode: str) -> None:
        g = self.group
        keep_id = mode != "fresh" and getattr(self, "sm", None) is not None
        mid = self.sm.member_id if keep_id else ""
        self.sm = cst.ClassicMemberState(
            g.group_id, instance_id=self.instance_id, session_timeout_ms=g.session_timeout_ms,
            rebalance_timeout_ms=g.rebalance_timeout_ms, member_id=mid)
        self.proto = ConsumerProtocol(g.topics, [g.assignor])
        self.member_id = mid
        self.positions.clear()

    _assigned_counts = None

    def _counts(self) -> dict:
        return {t.name: t.partitions for t in self.sim.node.topics.by_name.values()}

    def on_self_fence(self) -> None:
        self.proto.lost()
        self.sm.request_lost()

    def commit_epoch(self) -> int:
        return self.sm.generation

    def _commit_request(self, offsets):
        sm = self.sm
        by: dict = {}
        for tp, (off, meta) in sorted(offsets.items()):
            by.setdefault(tp.topic, []).append(m.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=off, committed_metadata=meta))
        return m.OffsetCommitRequest(
            group_id=sm.group_id, generation_id_or_member_epoch=sm.generation,
            member_id=sm.member_id, group_instance_id=sm.instance_id,
            topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by.items()])

    def _fetch_request(self, tps):
        by: dict = {}
        for tp in sorted(tps):
            by.setdefault(tp.topic, []).append(tp.partition)
        return m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(
            group_id=self.sm.group_id,
            topics=[m.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in by.items()])], require_stable=True)

    async def _lose_all(self, why: str) -> None:
        self.proto.lost()
        self._drop(set(self.own), why)

    async def main(self) -> None:
        g = self.group
        join_timeout = (g.rebalance_timeout_ms + 5000) / 1000
        while True:
            sm = self.sm
            if sm.state in (cst.LEFT, cst.FATAL):
                return
            if sm.state == cst.UNJOINED:
                eager = self.proto.revoke_before_join()
                if eager:
                    await self._commit_once(self._commit_request,
                                            [tp for tp in eager if tp in self.positions])
                    await self.callback_time()
                    self._drop(eager, "eager revoke")
                    self.proto.revoked(eager)
                req = sm.join_request(self.proto.protocol_type,
                                      self.proto.protocols(sm.generation))
                sent = self.now_us()
                resp = await self.call(req, join_timeout)
                if sm is not self.sm:
                    continue
                if resp is None:
                    sm.request_lost()
                    await self.backoff()
                    continue
                out = sm.on_join_response(resp)
                self.member_id = sm.member_id
                self.sim.trace("member", "%s join -> %s gen %d (%s)" % (
                    self.name, out.kind, sm.generation, resp.error_code))
                if out.kind == cst.SYNC:
                    await self._sync(sm, out, sent, join_timeout)
                elif out.kind == cst.COORDINATOR:
                    await self.backoff()
                elif out.kind == cst.FATAL_ERROR:
                    await self._lose_all("fatal")
                    self.fatal = str(out.error)
                    return
                continue
            if sm.state == cst.STABLE:
                await asyncio.sleep(g.heartbeat_interval_ms / 1000)
                if sm is not self.sm or sm.state != cst.STABLE:
                    continue
                if sm.is_leader and self._assigned_counts != self._counts():
                    # The leader watches metadata (as Kafka's does): partitions were added.
                    sm.rejoin()
                    continue
                sent = self.now_us()
                resp = await self.call(sm.heartbeat_request())
                if sm is not self.sm:
                    continue
                if resp is None:
                    continue                # keep beating; the lease decides
                out = sm.on_heartbeat_response(resp)
                if resp.error_code:
                    self.sim.trace("member", "%s heartbeat gen %d -> %s" % (
                        self.name, sm.generation, resp.error_code))
                if out.kind == cst.OK and sm.state == cst.STABLE and resp.error_code == 0:
                    self.extend_lease(sent)
                elif out.kind == cst.LOST:
                    await self._lose_all("lost")
                elif out.kind == cst.COORDINATOR:
                    await self.backoff()
                elif out.kind == cst.FATAL_ERROR:
                    await self._lose_all("fatal")
                    self.fatal = str(out.error)
                    return
                continue
            # JOINING / SYNCING left over after a self-fence: start again
            sm.request_lost()

    async def _sync(self, sm, out, sent, timeout) -> None:
        assignments = {}
        if sm.is_leader and not sm.skip_assignment:
            counts = self._counts()
            self._assigned_counts = counts
            assignments = self.proto.leader_assign(sm.protocol_name, out.members, counts)
        resp = await self.call(sm.sync_request(assignments), timeout)
        if sm is not self.sm:
            return
        if resp is None:
            sm.request_lost()
            return
        out2 = sm.on_sync_response(resp)
        self.sim.trace("member", "%s sync gen %d -> %s (%s)" % (
            self.name, sm.generation, out2.kind, resp.error_code))
        if out2.kind == cst.ASSIGNED:
            self.extend_lease(sent)
            fences = self.self_fences
            plan = self.proto.plan_sync(out2.assignment)
            if plan.revoked:
                await self._commit_once(self._commit_request,
                                        [tp for tp in plan.revoked if tp in self.positions])
                await self.callback_time()
                self._drop(plan.revoked, "revoked")
                self.proto.revoked(plan.revoked)
            if plan.assigned:
                if not self._hold(plan.assigned, sm.generation):
                    self.self_fence("answer after the lease ended")
                    return
                await self.callback_time()
            if self.self_fences != fences:
                # The lease ended during a callback: the member dropped everything (lost) and
                # rejoins; installing this assignment now would claim partitions it does
                # not run, and the sticky leader would keep them with it for ever.
                return
            self.proto.installed(plan, sm.generation)
            await self._fetch_positions(self._fetch_request, plan.assigned)
            if plan.rejoin:
                sm.rejoin()
        elif out2.kind == cst.LOST:
            await self._lose_all("lost")
        elif out2.kind == cst.FATAL_ERROR:
            await self._lose_all("fatal")
            self.fatal = str(out2.error)
            sm.state = cst.FATAL

    async def committer(self) -> None:
        while True:
            await asyncio.sleep(self.group.commit_interval_ms / 1000)
            if self.sm.state == cst.STABLE and self.lease_ok():
                await self._commit_once(self._commit_request,
                                        [tp for tp in self.own if tp in self.positions])

    async def leave(self, temporary: bool) -> None:
        if self.own:
            await self._commit_once(self._commit_request,
                                    [tp for tp in self.own if tp in self.positions])
            await self.callback_time()
            await self._lose_all("leave")
        if self.instance_id is not None and temporary:
            return                          # a static member bounces without LeaveGroup
        if self.sm.member_id:
            await self.call(self.sm.leave_request(m.LeaveGroupRequest.VERSIONS[1]))
