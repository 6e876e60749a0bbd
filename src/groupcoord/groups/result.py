"""What a handler returns, and the volatile events that travel with durable records.

A handler (``Shard.handle``, ``Shard.fire``, ``Shard.update_topics``) never mutates; it returns
a :class:`Result`. The caller (runtime, simulation, tests) then calls ``Shard.apply(result)``,
which replays ``records`` in order through ``Shard.replay`` (the only mutator) and applies the
timer operations, and finally delivers ``response`` and ``completions``.

``records`` holds two kinds of item, replayed in order:
  * :class:`~groupcoord.groups.records.Record`: durable; the runtime appends it to the
    log before the response may be sent, and recovery replays it.
  * :class:`Volatile` events: in-memory only (e.g. a classic member waiting at the join
    barrier, the connect worker chosen to compute an assignment). They are lost on restart,
    exactly like Kafka's in-flight classic rebalances; clients recover by rejoining.

``events`` are lifecycle events (lifecycle.py: a member joined, a rebalance completed, ...):
data for the runtime's log lines, neither replayed nor written, so that replay (recovery)
reports nothing again and the state machines make no logging call.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import msgspec

__all__ = ["Result", "ParkKey", "TimerKey", "Volatile", "is_durable", "EMPTY", "RequestContext"]


class TimerKey(NamedTuple):
    """A timer is identified by what it is about; rescheduling a key replaces its deadline.

    kind: "session", "join" (classic rebalance timeout), "initial-delay", "sync",
    "revocation", "assignment" (connect chosen worker), "delayed-rebalance"."""
    kind: str
    group_id: str
    member_id: str = ""


class RequestContext(NamedTuple):
    """What a handler knows besides the request body: the API version it was sent at, the
    coordinator time, and who sent it (request header client id, peer host)."""
    version: int
    now_ms: int
    client_id: str = ""
    client_host: str = ""


class ParkKey(NamedTuple):
    """A request answered later (classic JoinGroup at the barrier, SyncGroup before the
    leader's assignment). ``kind`` is "join" or "sync"."""
    group_id: str
    member_id: str
    kind: str


class Result(NamedTuple):
    """response: the response struct, or None when the request is parked under ``park``.
    records: Records and Volatile events, in replay order.
    timers: (TimerKey, deadline_ms) to schedule or (TimerKey, None) to cancel.
    completions: (ParkKey, response) answering earlier parked requests. The runtime delivers
    completions before it registers ``park`` (so a request may supersede its own key).
    offload: assignor runs the runtime should do off the event loop (consumer.AssignorJob);
    their results come back through ``consumer.install_offloaded``. Shards configured without
    an offload threshold never produce any.
    events: lifecycle.Event values for the log (the runtime writes them once the Result is
    applied; Shard.apply ignores them)."""
    response: Any
    records: tuple = ()
    timers: tuple = ()
    completions: tuple = ()
    park: Optional[ParkKey] = None
    offload: tuple = ()
    events: tuple = ()


EMPTY = Result(None)


class Volatile(msgspec.Struct, frozen=True, gc=False):
    """Base of in-memory events replayed like records but never written to the log."""


def is_durable(item) -> bool:
    return not isinstance(item, Volatile)
