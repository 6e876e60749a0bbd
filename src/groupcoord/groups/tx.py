"""GroupTx: what one handler call (a request or a fired timer) stages for one group, and
nothing else. Every group type's handlers stage through it:

    tx = GroupTx(group_id, now_ms)
    tx.emit(record_or_event)            # in replay order
    tx.schedule(timer_key, deadline)    # deadline None cancels
    tx.complete(park_key, response)     # answers a parked request
    tx.note(lifecycle_event)            # for the log only (lifecycle.py)
    return tx.result(response)          # -> Result; Shard.apply replays it

Staging never touches the shard: ``Shard.apply`` replays the records (the only mutator) and
applies the timer operations. A group type that must see its own staged changes while it
decides (several steps of one heartbeat) keeps a draft next to the staging: classic's
``ClassicTx`` applies each event to a copy of the group, consumer/tx.py's ``ConsumerTx`` layers the edits
over the live group; connect/heartbeat.py reads the live group and stages records only.
"""
from __future__ import annotations

from typing import Iterable, Optional

from groupcoord.groups.result import ParkKey, Result, TimerKey

__all__ = ["GroupTx"]


class GroupTx:
    def __init__(self, group_id: str, now_ms: int):
        self.group_id = group_id
        self.now = now_ms
        self.records: list = []         # Records and Volatile events, in replay order
        self.timers: list = []          # (TimerKey, deadline or None)
        self.completions: list = []     # (ParkKey, response): parked requests answered
        self.offload: list = []         # assignor jobs to run off the event loop
        self.events: list = []          # lifecycle events (never replayed)

    def emit(self, item) -> None:
        self.records.append(item)

    def emit_all(self, items: Iterable) -> None:
        self.records.extend(items)

    def schedule(self, key: TimerKey, deadline: Optional[int]) -> None:
        self.timers.append((key, deadline))

    def schedule_all(self, ops: Iterable) -> None:
        self.timers.extend(ops)

    def complete(self, key: ParkKey, response) -> None:
        self.completions.append((key, response))

    def note(self, event) -> None:
        self.events.append(event)

    def result(self, response=None, park: Optional[ParkKey] = None) -> Result:
        return Result(response, tuple(self.records), tuple(self.timers),
                      tuple(self.completions), park, offload=tuple(self.offload),
                      events=tuple(self.events))
