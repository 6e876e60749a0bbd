"""`ConsumerMember`: a KIP-848 consumer group member (ConsumerGroupHeartbeat) on asyncio.

    class Listener:
        async def on_partitions_assigned(self, partitions): ...   # sync or async
        async def on_partitions_revoked(self, partitions): ...

    member = ConsumerMember("127.0.0.1:9092", "my-group", topics=["orders"],
                            listener=Listener())
    await member.start()        # CoordinatorNotFound if nothing answers within 30 s
    ...
    await member.commit({TopicPartition("orders", 0): 42})      # with the member epoch
    await member.committed([TopicPartition("orders", 0)])        # -> {tp: (42, "")}
    await member.close()                                         # leave (epoch -1)

The decisions live in the pure state machine `members_consumer_state.ConsumerMemberState`;
this module is its driver: one task that sends a heartbeat, applies the answer, runs the
callbacks (revoke first, then assign), then sleeps for the interval the coordinator returned
-- or not at all when the member must acknowledge a change. The callbacks run on that task,
so heartbeats wait for them: keep them shorter than the rebalance timeout.

Failures: a lost connection, a request timeout or a coordinator error finds the coordinator
again (paced by a Backoff) and resends the heartbeat with every field; FENCED_MEMBER_EPOCH /
UNKNOWN_MEMBER_ID report every partition lost (on_partitions_lost, defaulting to
on_partitions_revoked) and rejoin at epoch 0; any other error stops the member
(`member.error`, re-raised by `wait_closed()`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable, Mapping, Optional

from groupcoord.client.connection import DEFAULT_CLIENT_ID, Backoff
from groupcoord.client.errors import ClientError, RequestTimeout, ResponseError
from groupcoord.client.member_driver import NETWORK_ERRORS, MemberDriver
from groupcoord.client.members_common import COORDINATOR_ERRORS, CommitFailed, TopicPartition
from groupcoord.client.members_consumer_state import (FATAL, LEFT, STABLE, UNJOINED,
                                                      ConsumerMemberState, commit_errors,
                                                      fetch_result, new_member_id)
from groupcoord.client.security import ClientSecurity
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ConsumerMember"]

log = logging.getLogger("groupcoord.client.consumer")

_HEARTBEAT = m.ConsumerGroupHeartbeatRequest.API_KEY
_METADATA = m.MetadataRequest.API_KEY


class ConsumerMember(MemberDriver):
    """A KIP-848 consumer. Subscribe by `topics` (names), `regex`, or both; `server_assignor`
    asks the coordinator for one of its assignors (`uniform`, `range`); `instance_id` makes it
    a static member. `member_id` is generated (v1) unless given. start() (and `async with`)
    raises CoordinatorNotFound, naming the bootstrap addresses, when no node answered within
    `bootstrap_timeout_s`. `security` (client/security.py ClientSecurity): TLS and SASL for
    every connection; refused credentials make start() raise AuthenticationFailed."""
    _log = log

    def __init__(self, bootstrap: Any, group_id: str, *,
                 topics: Optional[Iterable[str]] = None, regex: Optional[str] = None,
                 listener: Any = None, instance_id: Optional[str] = None,
                 rack_id: Optional[str] = None, server_assignor: Optional[str] = None,
                 rebalance_timeout_ms: int = 300_000, member_id: Optional[str] = None,
                 client_id: str = DEFAULT_CLIENT_ID, request_timeout_s: float = 30.0,
                 bootstrap_timeout_s: float = 30.0, backoff: Optional[Backoff] = None,
                 security: Optional[ClientSecurity] = None):
        self.sm = ConsumerMemberState(group_id, topics=topics, regex=regex,
                                      member_id=member_id if member_id is not None else "",
                                      instance_id=instance_id, rack_id=rack_id,
                                      server_assignor=server_assignor,
                                      rebalance_timeout_ms=rebalance_timeout_ms)
        self._member_id_given = member_id is not None
        super().__init__(bootstrap, group_id, client_id, listener=listener,
                         request_timeout_s=request_timeout_s,
                         bootstrap_timeout_s=bootstrap_timeout_s, backoff=backoff,
                         security=security)
        self.heartbeats = 0                 # accepted heartbeat responses
        self.stale_commit_retries = 0       # commits retried after STALE_MEMBER_EPOCH
        self.rejoins = 0                    # fenced / unknown-member rejoins
        self._beat = asyncio.Condition()
        self._sent_waiters: list = []       # subscribe(): resolved when a heartbeat is sent

    # ------------------------------------------------------------------ properties
    @property
    def epoch(self) -> int:
        return self.sm.epoch

    @property
    def assignment(self) -> list:
        """The partitions this member owns (assigned-callback ran, not revoked), sorted."""
        return self.sm.owned_partitions()

    @property
    def stable(self) -> bool:
        """Joined, and everything the coordinator assigned is owned and acknowledged."""
        return (self.sm.state == STABLE and not self.sm.ack_pending
                and self.sm.target is not None and self.sm.target == self.sm.owned)

    # ------------------------------------------------------------------ lifecycle

    async def close(self, leave: bool = True, temporary: Optional[bool] = None,
                    timeout_s: float = 10.0) -> None:
        """Stop heartbeating, revoke what is owned (on_partitions_revoked), then leave:
        epoch -1, or -2 (`temporary`, default for a static member) so that a static member
        coming back within its session gets its partitions again. `leave=False` just stops
        (the coordinator expires the member after its session timeout)."""
        if not await self._stop_driver(timeout_s, cancel=False):
            return
        owned = self.sm.owned_partitions()
        if owned and self.sm.state != FATAL:
            await self._call("on_partitions_revoked", owned)
        if temporary is None:
            temporary = self.sm.instance_id is not None
        if leave and self.sm.state not in (UNJOINED, LEFT, FATAL) and self.sm.member_id:
            req = self.sm.leave_request(temporary=temporary)
            try:
                resp = await self.link.request(req, timeout_s=min(timeout_s,
                                                                  self.request_timeout_s))
                self.sm.on_heartbeat_response(req, resp)
            except ClientError as e:       # NETWORK_ERRORS are ClientErrors too
                log.info("%s: leave heartbeat failed (%s); the session will expire", self, e)
        await self.link.close()

    def __repr__(self) -> str:
        return "<ConsumerMember %s/%s epoch=%d %s>" % (self.sm.group_id, self.sm.member_id,
                                                     self.sm.epoch, self.sm.state)

    # ------------------------------------------------------------------ public operations
    async def subscribe(self, topics: Optional[Iterable[str]] = None,
                        regex: Optional[str] = None) -> None:
        """Change the subscription. The heartbeat carrying it goes out now; returns once it
        is written (so a request sent afterwards on this member's connection follows it)."""
        self.sm.subscribe(topics, regex)
        if self._task is None or self._task.done():
            return
        fut = asyncio.get_running_loop().create_future()
        self._sent_waiters.append(fut)
        self._wake.set()
        await fut

    def heartbeat_now(self) -> None:
        """Send the next heartbeat without waiting for the interval."""
        self._wake.set()

    async def wait_heartbeat(self, timeout_s: float = 30.0) -> None:
        """Wait for the next accepted heartbeat response (and ask for it now)."""
        seen = self.heartbeats
        self._wake.set()
        await self._wait_beat_after(seen, time.monotonic() + timeout_s)

    async def commit(self, offsets: Mapping[TopicPartition, Any],
                     timeout_s: float = 30.0) -> None:
        """OffsetCommit with the member epoch. offsets: {TopicPartition: offset or (offset,
        metadata)}. STALE_MEMBER_EPOCH: retried once the next heartbeat brought the
        current epoch; coordinator errors: retried after finding it again; anything else
        raises CommitFailed (`.errors`: {TopicPartition: code})."""
        async def send(deadline: float) -> tuple:
            seen = self.heartbeats
            req = self.sm.commit_request(offsets)
            return seen, req, await self.link.request(req, timeout_s=self._left(deadline))

        async def judge(sent: tuple, deadline: float) -> tuple[int, None]:
            seen, req, resp = sent
            errors = commit_errors(resp)
            codes = set(errors.values())
            if codes == {ErrorCode.STALE_MEMBER_EPOCH}:
                self.stale_commit_retries += 1
                await self._after_stale_epoch(req.generation_id_or_member_epoch, seen, deadline)
            elif errors and not codes <= COORDINATOR_ERRORS:
                raise CommitFailed(errors)
            return next(iter(codes), 0), None

        await self._offsets_call(timeout_s, send, judge)

    async def committed(self, partitions: Optional[Iterable[TopicPartition]] = None,
                        timeout_s: float = 30.0) -> dict:
        """OffsetFetch (naming this member and its epoch) -> {TopicPartition: (offset,
        metadata)}; offset -1 where nothing is committed. None = every committed partition.
        STALE_MEMBER_EPOCH is retried after the next heartbeat, like commit()."""
        parts = None if partitions is None else list(partitions)

        async def send(deadline: float) -> tuple:
            seen = self.heartbeats
            req = self.sm.fetch_request(parts)
            version = await self.link.version(m.OffsetFetchRequest.API_KEY)
            if version < 8:
                raise ClientError("OffsetFetch v%d cannot name a member (v8+ needed)" % version)
            return seen, req, await self.link.request(req, version=version,
                                                      timeout_s=self._left(deadline))

        async def judge(sent: tuple, deadline: float) -> tuple[int, Any]:
            seen, req, resp = sent
            err, offsets, errors = fetch_result(resp)
            if err == ErrorCode.STALE_MEMBER_EPOCH:
                await self._after_stale_epoch(req.groups[0].member_epoch, seen, deadline)
            elif err and err not in COORDINATOR_ERRORS:
                raise ResponseError(err)
            elif not err and errors:
                raise CommitFailed(errors)
            return err, offsets

        return await self._offsets_call(timeout_s, send, judge)

    async def _after_stale_epoch(self, epoch_sent: int, seen: int, deadline: float) -> None:
        """STALE_MEMBER_EPOCH: unless a heartbeat brought a new epoch since the request was
        built, ask for one now and wait for its answer; then the caller sends again."""
        if self.sm.epoch == epoch_sent:
            self._wake.set()
            await self._wait_beat_after(seen, deadline)

    # ------------------------------------------------------------------ the driver task
    async def _loop(self) -> None:
        while not self._closing:
            await self._heartbeat_once()
            if self.sm.state == FATAL:
                break
            if not self._closing:
                await self._reconcile()
            delay = 0.0 if (self.sm.ack_pending or self.sm.state == UNJOINED) \
                else max(self.sm.heartbeat_interval_ms, 10) / 1000.0
            await self._sleep(delay)

    async def _after_run(self) -> None:
        async with self._beat:          # commit()/committed() waiting for a beat: it stopped
            self._beat.notify_all()

    async def _heartbeat_once(self) -> None:
        self._wake.clear()
        try:
            if self.sm.state == UNJOINED and not self.sm.member_id and not self._member_id_given:
                version = await self.link.version(_HEARTBEAT)
                self.sm.version = version
                if version >= 1:
                    self.sm.member_id = new_member_id()
            req = self.sm.heartbeat_request()
            # Waiters resume after this task's next suspension, i.e. once the request
            # below is written to the connection.
            waiters, self._sent_waiters = self._sent_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            resp = await self.link.request(req, timeout_s=self.request_timeout_s)
        except NETWORK_ERRORS as e:
            log.info("%s: heartbeat failed (%s); retrying", self, e)
            self.sm.heartbeat_lost()
            await self._backoff_sleep()
            return
        out = self.sm.on_heartbeat_response(req, resp)
        if out.find_coordinator:
            self.link.invalidate()
            await self._backoff_sleep()
            return
        self.backoff.reset()
        if out.lost:
            self.rejoins += out.rejoin
            log.info("%s: %s, %d partition(s) lost", self,
                     ErrorCode(resp.error_code).name, len(out.lost))
            await self._call("on_partitions_lost", list(out.lost))
        if out.fatal is not None:
            log.error("%s: stopping: %s", self, out.fatal)
            self.error = out.fatal
            return
        if out.ok:
            self.heartbeats += 1
            async with self._beat:
                self._beat.notify_all()

    async def _reconcile(self) -> None:
        while not self._closing:
            rec = self.sm.next_reconciliation()
            if rec is None:
                return
            if rec.missing_topic_ids:
                if not await self._resolve_topics(rec.missing_topic_ids):
                    return                  # try again after the next heartbeat
                continue
            if rec.revoked:
                await self._call("on_partitions_revoked", rec.revoked)
            self.sm.revoke_done(rec)
            if rec.assigned:
                await self._call("on_partitions_assigned", rec.assigned)
            self.sm.assign_done(rec)

    async def _resolve_topics(self, topic_ids: frozenset) -> bool:
        """Metadata by topic id (v10+) or of every topic: learn the names of topic_ids."""
        try:
            version = await self.link.version(_METADATA)
            if version >= 10:
                req = m.MetadataRequest(topics=[m.MetadataRequestTopic(topic_id=t, name=None)
                                                for t in sorted(topic_ids)],
                                        allow_auto_topic_creation=False)
            else:
                req = m.MetadataRequest(topics=None, allow_auto_topic_creation=False)
            resp = await self.link.request(req, version=version,
                                           timeout_s=self.request_timeout_s)
        except NETWORK_ERRORS as e:
            log.info("%s: metadata failed (%s)", self, e)
            return False
        self.sm.add_topic_names({t.topic_id: t.name for t in resp.topics
                                 if not t.error_code and t.name})
        return all(t in self.sm.topic_names for t in topic_ids)

    # ------------------------------------------------------------------ helpers
    def _check_usable(self) -> None:
        super()._check_usable()
        if self.sm.state in (LEFT, FATAL):
            raise ClientError("member %s is %s" % (self.sm.member_id, self.sm.state))

    async def _wait_beat_after(self, seen: int, deadline: float) -> None:
        async with self._beat:
            while self.heartbeats <= seen:
                if self.error is not None or (self._task is not None and self._task.done()):
                    raise self.error or ClientError("member stopped")
                try:
                    await asyncio.wait_for(self._beat.wait(), self._left(deadline))
                except asyncio.TimeoutError:
                    raise RequestTimeout("no heartbeat before the deadline") from None
