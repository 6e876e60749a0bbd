"""`ClassicMember`: a classic group member (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)
on asyncio, for consumer groups with client-side assignors or for a custom protocol.

    member = ClassicMember("127.0.0.1:9092", "my-group", topics=["orders"],
                           assignors=["cooperative-sticky"], listener=listener)
    await member.start()
    ...
    await member.close()          # LeaveGroup (a static member just stops, Kafka's KIP-345)

    # custom protocol: opaque metadata, the leader's assign() decides
    member = ClassicMember(bootstrap, "workers", protocol=CustomProtocol(
        "work", [("v1", b"my url")], assign=lambda name, members: {...}), listener=l)

The request/response logic is the pure `members_classic_state.ClassicMemberState`; what the
bytes hold and which callbacks a rebalance means is the protocol's
(`members_classic_protocol`). This driver is one task:

    UNJOINED: [eager: on_*_revoked(everything)] JoinGroup (MEMBER_ID_REQUIRED -> again with
              the id) -> [leader: Metadata for the subscribed topics, the assignor] ->
              SyncGroup -> revoke what is gone, assign what is new -> STABLE
              (cooperative and something revoked: join again at once)
    STABLE:   Heartbeat every `heartbeat_interval_ms`; REBALANCE_IN_PROGRESS -> UNJOINED;
              ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID -> on_*_lost(everything), UNJOINED

JoinGroup and SyncGroup wait at the coordinator's barrier, so their request timeout is the
rebalance timeout plus 5 s (Kafka's). Callbacks run on the driver task: heartbeats wait for
them, so keep them shorter than the session timeout.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Iterable, Mapping, Optional, Sequence

from groupcoord.client.connection import DEFAULT_CLIENT_ID, Backoff
from groupcoord.client.errors import ClientError
from groupcoord.client.member_driver import NETWORK_ERRORS, MemberDriver
from groupcoord.client.members_classic_protocol import (ConsumerProtocol, CustomProtocol,
                                                        ClassicAssignment, listener_names)
from groupcoord.client.members_classic_state import (ASSIGNED, COORDINATOR, FATAL,
                                                     FATAL_ERROR, LEFT, LOST, REJOIN, STABLE,
                                                     SYNC, UNJOINED, ClassicMemberState)
from groupcoord.client.members_common import COORDINATOR_ERRORS, CommitFailed, TopicPartition
from groupcoord.client.members_consumer_state import commit_errors
from groupcoord.client.security import ClientSecurity
from groupcoord.protocol import messages as m

__all__ = ["ClassicMember"]

log = logging.getLogger("groupcoord.client.classic")


class ClassicMember(MemberDriver):
    """A classic member. Either `topics` (+ `assignors`, preference order; protocol type
    "consumer") or `protocol=CustomProtocol(...)`. `instance_id` makes it static. start()
    raises CoordinatorNotFound when no bootstrap node answered within `bootstrap_timeout_s`.
    `security` (client/security.py ClientSecurity): TLS and SASL for every connection;
    refused credentials make start() raise AuthenticationFailed."""
    _log = log

    def __init__(self, bootstrap: Any, group_id: str, *,
                 topics: Optional[Iterable[str]] = None,
                 assignors: Sequence[str] = ("range",), protocol: Any = None,
                 listener: Any = None, instance_id: Optional[str] = None,
                 rack_id: Optional[str] = None, session_timeout_ms: int = 45_000,
                 rebalance_timeout_ms: int = 300_000, heartbeat_interval_ms: int = 3_000,
                 client_id: str = DEFAULT_CLIENT_ID, request_timeout_s: float = 30.0,
                 bootstrap_timeout_s: float = 30.0, backoff: Optional[Backoff] = None,
                 security: Optional[ClientSecurity] = None):
        if (protocol is None) == (topics is None):
            raise ValueError("give topics (consumer protocol) or protocol=, not both")
        self.protocol = protocol if protocol is not None else ConsumerProtocol(
            topics, assignors, rack_id=rack_id)
        self.sm = ClassicMemberState(group_id, instance_id=instance_id,
                                     session_timeout_ms=session_timeout_ms,
                                     rebalance_timeout_ms=rebalance_timeout_ms)
        super().__init__(bootstrap, group_id, client_id, listener=listener,
                         request_timeout_s=request_timeout_s,
                         bootstrap_timeout_s=bootstrap_timeout_s, backoff=backoff,
                         security=security)
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000.0
        self._assigned_cb, self._revoked_cb, self._lost_cb = listener_names(self.protocol)
        self.joins = 0                   # JoinGroup requests sent
        self.generations: list = []      # generations this member synced in, in order

    # ------------------------------------------------------------------ properties
    @property
    def generation(self) -> int:
        return self.sm.generation

    @property
    def is_leader(self) -> bool:
        return self.sm.is_leader

    @property
    def assignment(self) -> Any:
        """Consumer protocol: sorted owned TopicPartitions; custom: the ClassicAssignment."""
        if isinstance(self.protocol, ConsumerProtocol):
            return sorted(self.protocol.owned)
        return self.protocol.current

    # ------------------------------------------------------------------ lifecycle

    async def commit(self, offsets: Mapping[TopicPartition, Any],
                     timeout_s: float = 30.0) -> None:
        """OffsetCommit with this member's generation and member id. offsets:
        {TopicPartition: offset or (offset, metadata)}. Coordinator errors are retried after
        finding it again; anything else (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID: the partitions may already be another member's) raises
        CommitFailed (`.errors`: {TopicPartition: code}), as Kafka's CommitFailedException."""
        async def send(deadline: float) -> Any:
            return await self.link.request(self.sm.commit_request(offsets),
                                           timeout_s=self._left(deadline))

        async def judge(resp: Any, deadline: float) -> tuple[int, None]:
            errors = commit_errors(resp)
            if errors and not set(errors.values()) <= COORDINATOR_ERRORS:
                raise CommitFailed(errors)
            return next(iter(errors.values()), 0), None

        await self._offsets_call(timeout_s, send, judge)

    def _check_usable(self) -> None:
        super()._check_usable()
        if self.sm.generation < 0:
            raise ClientError("member %s has no generation yet: nothing to commit for"
                              % (self.sm.member_id or "(unjoined)"))

    def rejoin(self) -> None:
        """Ask for a rebalance (e.g. after the subscription changed)."""
        self.sm.rejoin()
        self._wake.set()

    async def close(self, leave: Optional[bool] = None, timeout_s: float = 10.0) -> None:
        """Stop; revoke what is owned; LeaveGroup unless `leave` is False. By default a
        static member does not leave (it keeps its assignment at the coordinator until its
        session expires, so a restart within it changes nothing: KIP-345)."""
        # cancel: a parked JoinGroup may wait a rebalance timeout
        if not await self._stop_driver(timeout_s, cancel=True):
            return
        await self._revoke_all()
        if leave is None:
            leave = self.sm.instance_id is None
        if leave and self.sm.member_id and self.sm.state not in (LEFT, FATAL):
            try:
                version = await self.link.version(m.LeaveGroupRequest.API_KEY)
                await self.link.request(self.sm.leave_request(version), version=version,
                                        timeout_s=min(timeout_s, self.request_timeout_s))
            except ClientError as e:       # NETWORK_ERRORS are ClientErrors too
                log.info("%s: LeaveGroup failed (%s); the session will expire", self, e)
        self.sm.state = LEFT
        await self.link.close()

    def __repr__(self) -> str:
        return "<ClassicMember %s/%s gen=%d %s>" % (self.sm.group_id, self.sm.member_id,
                                                  self.sm.generation, self.sm.state)

    # ------------------------------------------------------------------ the driver task
    async def _loop(self) -> None:
        while not self._closing:
            if self.sm.state == UNJOINED:
                await self._join_and_sync()
            elif self.sm.state == STABLE:
                await self._sleep(self.heartbeat_interval_s)
                if self.sm.state == STABLE and not self._closing:
                    await self._heartbeat()
            elif self.sm.state in (FATAL, LEFT):
                break

    async def _barrier_call(self, what: str, call: Awaitable[Any]) -> Any:
        """`call`'s answer, or None when the network failed it: the state machine forgets
        the request and the driver pauses before joining again."""
        try:
            return await call
        except NETWORK_ERRORS as e:
            log.info("%s: %s failed (%s)", self, what, e)
            self.sm.request_lost()
            await self._backoff_sleep()
            return None

    async def _join_and_sync(self) -> None:
        if isinstance(self.protocol, ConsumerProtocol):
            eager = self.protocol.revoke_before_join()
            if eager:
                await self._call(self._revoked_cb, eager)
                self.protocol.revoked(eager)
        if isinstance(self.protocol, CustomProtocol) and self.protocol.current is not None:
            await self._call(self._revoked_cb, self.protocol.current)
            self.protocol.current = None
        barrier_s = self.sm.rebalance_timeout_ms / 1000.0 + 5.0
        req = self.sm.join_request(self.protocol.protocol_type,
                                   self.protocol.protocols(self.sm.generation))
        self.joins += 1
        resp = await self._barrier_call("JoinGroup", self.link.request(req, timeout_s=barrier_s))
        if resp is None:
            return
        out = self.sm.on_join_response(resp)
        if out.kind != SYNC:
            await self._after_error(out)
            return
        assignments: dict = {}
        if self.sm.is_leader and not self.sm.skip_assignment:
            partitions = await self._barrier_call(
                "Metadata for the assignor",
                self._partition_counts(self.protocol.topics_of(out.members)))
            if partitions is None:
                return
            assignments = self.protocol.leader_assign(self.sm.protocol_name, out.members,
                                                      partitions)
        resp = await self._barrier_call("SyncGroup", self.link.request(
            self.sm.sync_request(assignments), timeout_s=barrier_s))
        if resp is None:
            return
        out = self.sm.on_sync_response(resp)
        if out.kind != ASSIGNED:
            await self._after_error(out)
            return
        self.backoff.reset()
        self.generations.append(self.sm.generation)
        await self._install(out.assignment)

    async def _install(self, data: bytes) -> None:
        if isinstance(self.protocol, ConsumerProtocol):
            plan = self.protocol.plan_sync(data)
            if plan.revoked:
                await self._call(self._revoked_cb, plan.revoked)
                self.protocol.revoked(plan.revoked)
            if plan.assigned:
                await self._call(self._assigned_cb, plan.assigned)
            self.protocol.installed(plan, self.sm.generation)
            if plan.rejoin:
                self.sm.rejoin()         # cooperative: the follow-up rebalance hands them out
            return
        a = ClassicAssignment(self.sm.protocol_name or "", data, self.sm.generation,
                              self.sm.member_id, self.sm.leader)
        self.protocol.current = a
        await self._call(self._assigned_cb, a)

    async def _heartbeat(self) -> None:
        try:
            resp = await self.link.request(self.sm.heartbeat_request(),
                                           timeout_s=self.request_timeout_s)
        except NETWORK_ERRORS as e:
            log.info("%s: heartbeat failed (%s)", self, e)
            await self._backoff_sleep()
            return
        out = self.sm.on_heartbeat_response(resp)
        if out.kind != "OK":
            await self._after_error(out)
        else:
            self.backoff.reset()

    async def _after_error(self, out: Any) -> None:
        if out.kind == REJOIN:
            return                              # join again now (state is UNJOINED)
        if out.kind == LOST:
            if isinstance(self.protocol, ConsumerProtocol):
                lost = self.protocol.lost()
                if lost:
                    await self._call(self._lost_cb, lost)
            elif self.protocol.current is not None:
                cur, self.protocol.current = self.protocol.current, None
                await self._call(self._lost_cb, cur)
            return
        if out.kind == COORDINATOR:
            self.link.invalidate()
            await self._backoff_sleep()
            return
        if out.kind == FATAL_ERROR:
            log.error("%s: stopping: %s", self, out.error)
            self.error = out.error
            await self._revoke_all(lost=True)

    async def _partition_counts(self, topics: list) -> dict:
        if not topics:
            return {}
        version = await self.link.version(m.MetadataRequest.API_KEY)
        req = m.MetadataRequest(topics=[m.MetadataRequestTopic(name=t) for t in topics],
                                allow_auto_topic_creation=False)
        resp = await self.link.request(req, version=version, timeout_s=self.request_timeout_s)
        return {t.name: len(t.partitions) for t in resp.topics if not t.error_code}

    async def _revoke_all(self, lost: bool = False) -> None:
        if isinstance(self.protocol, ConsumerProtocol):
            owned = self.protocol.lost()
            if owned:
                await self._call(self._lost_cb if lost else self._revoked_cb, owned)
        elif self.protocol.current is not None:
            cur, self.protocol.current = self.protocol.current, None
            await self._call(self._lost_cb if lost else self._revoked_cb, cur)
