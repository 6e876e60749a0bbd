"""What ConsumerMember and ClassicMember share: partition names, the rebalance listener
protocol, calling sync-or-async callbacks, and the coordinator link with its retry rules.

    TopicPartition("orders", 3)
    class Listener:                       # any subset of the three methods
        async def on_partitions_assigned(self, partitions): ...   # or plain def
        def on_partitions_revoked(self, partitions): ...
        def on_partitions_lost(self, partitions): ...   # default: on_partitions_revoked

Callback order (both member kinds): revoke before assign, and a member reports a partition
as released only after its on_partitions_revoked returned, so no partition is ever held by
two members of a group at once (the coordinator only gives a partition out once its
previous owner released it).

`MemberLink` (connection.CoordinatorLink + request/version) is the one Connection a member
talks to its coordinator over: FindCoordinator on first use and again after a connection
loss, a request timeout or a NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS answer (`COORDINATOR_ERRORS`); the drivers pace their retries
with a `Backoff`.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, NamedTuple, Optional, Protocol

from groupcoord.client.connection import CoordinatorLink
from groupcoord.client.errors import ConnectionClosed, RequestTimeout, ResponseError
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["TopicPartition", "RebalanceListener", "call_listener", "MemberLink",
           "COORDINATOR_ERRORS", "CommitFailed", "offset_commit_request", "retry_pause"]

# Answers that mean "ask FindCoordinator again, then retry" (Kafka's coordinator errors).
COORDINATOR_ERRORS = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


class CommitFailed(ResponseError):
    """OffsetCommit / OffsetFetch failed for some partitions: `.errors` = {TopicPartition:
    code}; `.code` is the first of them."""

    def __init__(self, errors: dict):
        self.errors = dict(errors)
        first = next(iter(self.errors.values()))
        super().__init__(int(first), "%d partition(s) failed: %s" % (
            len(self.errors), ", ".join("%s-%d %s" % (tp[0], tp[1], getattr(c, "name", c))
                                        for tp, c in sorted(self.errors.items())[:5])))


class TopicPartition(NamedTuple):
    topic: str
    partition: int


async def retry_pause(backoff, deadline: float, cause: BaseException) -> None:
    """Sleep the backoff's next delay before a retry, or raise RequestTimeout when that
    would pass the deadline (monotonic seconds)."""
    delay = backoff.next_delay()
    if time.monotonic() + delay > deadline:
        raise RequestTimeout("gave up before the deadline: %s" % cause) from cause
    await asyncio.sleep(delay)


def offset_commit_request(group_id: str, generation_or_epoch: int, member_id: str,
                          instance_id: Optional[str], offsets) -> "m.OffsetCommitRequest":
    """OffsetCommit of one group. offsets: {TopicPartition: offset or (offset, metadata)};
    generation_or_epoch: a classic member's generation or a consumer member's epoch."""
    by_topic: dict = {}
    for tp, spec in sorted(offsets.items()):
        off, meta = (spec if isinstance(spec, tuple) else (spec, ""))
        by_topic.setdefault(tp.topic, []).append(m.OffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=int(off), committed_metadata=meta))
    return m.OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=generation_or_epoch,
        member_id=member_id, group_instance_id=instance_id,
        topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()])


class RebalanceListener(Protocol):
    """Kafka's ConsumerRebalanceListener. Every method may be sync or async; all optional.
    Partitions arrive as a sorted list of TopicPartition; an empty change is not reported."""

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> Any: ...

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> Any: ...

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> Any: ...


_LOST_FALLBACK = {"on_partitions_lost": "on_partitions_revoked", "on_lost": "on_revoked"}


async def call_listener(listener: Any, name: str, *args: Any) -> None:
    """Call listener.<name>(*args) if it exists, awaiting it when it is async.
    on_partitions_lost falls back to on_partitions_revoked (Kafka's default)."""
    if listener is None:
        return
    fn: Optional[Callable[..., Any]] = getattr(listener, name, None)
    if fn is None and name in _LOST_FALLBACK:
        fn = getattr(listener, _LOST_FALLBACK[name], None)
    if fn is None:
        return
    out = fn(*args)
    if inspect.isawaitable(out):
        await out


class MemberLink(CoordinatorLink):
    """connection.CoordinatorLink plus the two calls the member drivers make: `request()`
    (invalidates the connection on ConnectionClosed / RequestTimeout, then re-raises, so the
    caller decides whether and when to retry) and `version()`."""

    async def version(self, api_key: int) -> int:
        return (await self.get()).version(api_key)

    async def request(self, req: Any, version: Optional[int] = None,
                      timeout_s: Optional[float] = None) -> Any:
        conn = await self.get()
        try:
            return await conn.request(req, version=version, timeout_s=timeout_s)
        except (ConnectionClosed, RequestTimeout):
            self.invalidate(conn)
            raise
