"""The shard: many groups, their offsets, the topic catalog and the timer table.

    result = shard.handle(request, now_ms, version)    # pure: reads state, returns a Result
    shard.apply(result)                                 # replay(records) + timer operations
    ... deliver result.response and result.completions once result's durable records are
    ... written (the runtime's job; tests deliver at once)
    for key in shard.due(now_ms): shard.apply(shard.fire(key, now_ms))

``replay`` is the only code that changes group or offset state: live writes and recovery run
the same code. No I/O, no clock reads, no threads: time is the ``now_ms`` argument.

Dispatch: registry.py lists every handler (API key), replayer (record type or volatile
event class) and timer function (timer kind); the shard looks them up there.
The group admin APIs (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete and the GROUP
resources of DescribeConfigs / IncrementalAlterConfigs) are admin.py's, answered from the Group
interface (group.py).
"""
from __future__ import annotations

import logging
from typing import Iterable, Optional

from groupcoord.groups import limits, offsets
from groupcoord.groups.consumer.target import on_topics_changed
from groupcoord.groups.classic.handlers import rebalance_for_topics
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.errors import error_response
from groupcoord.groups.records import Record
from groupcoord.groups.registry import API_HANDLERS, REPLAYERS, TIMER_KINDS
from groupcoord.groups.result import EMPTY, RequestContext, Result, TimerKey, Volatile
from groupcoord.groups.timers import Timers
from groupcoord.groups.topics import TopicCatalog, catalog_changes, deleted_topic_offsets
from groupcoord.protocol.error_codes import ErrorCode

# error_response is errors.py's, named here too for the callers that build a Shard.
__all__ = ["Shard", "error_response", "on_catalog_change"]

log = logging.getLogger("groupcoord.groups")


class Shard:
    def __init__(self, config: Optional[ShardConfig] = None,
                 topics: Optional[TopicCatalog] = None, *, strict: bool = False):
        """strict=True re-raises handler exceptions (tests); otherwise a handler bug answers
        UNKNOWN_SERVER_ERROR for that request, is logged, and changes nothing."""
        self.config = config or ShardConfig()
        self.topics = topics if topics is not None else TopicCatalog()
        self.strict = strict
        self.groups: dict = {}          # group id -> Group
        self.offsets: dict = {}         # group id -> {(topic, partition): OffsetCommitValue}
        self.group_configs: dict = {}   # group id -> {config name: int}, overrides (admin.py)
        self.timers = Timers()
        self.retention_sweep = None     # offsets.RetentionProgress of a running sweep
        # The shard's own copies, so that a test may replace one entry of one shard.
        self._handlers = dict(API_HANDLERS)
        self._replayers = dict(REPLAYERS)
        self._timer_kinds = dict(TIMER_KINDS)

    # ------------------------------------------------------------------ handling
    def handle(self, request, now_ms: int, version: Optional[int] = None,
               client_id: str = "", client_host: str = "") -> Result:
        cls = type(request)
        if version is None:
            version = cls.VERSIONS[1]
        fn = self._handlers.get(cls.API_KEY)
        if fn is None:
            return Result(error_response(request, version, ErrorCode.UNSUPPORTED_VERSION,
                                         "this coordinator does not serve %s" % cls.__name__))
        ctx = RequestContext(version, now_ms, client_id, client_host)
        try:
            # Bounds first (limits.py): nothing a handler does is spent on a refused request.
            refused = limits.check_request(self, request, ctx)
            if refused is not None:
                return refused
            result = fn(self, request, ctx)
            if cls.API_KEY in limits.GROUP_CREATING_APIS:
                refused = limits.refuse_new_group(self, request, ctx, result)
                if refused is not None:
                    return refused
            return result
        except Exception as exc:
            if self.strict:
                raise
            log.exception("handler for %s failed; answering UNKNOWN_SERVER_ERROR",
                          cls.__name__)
            return Result(error_response(request, version, ErrorCode.UNKNOWN_SERVER_ERROR,
                                         "internal error: %s" % type(exc).__name__))

    def fire(self, key: TimerKey, now_ms: int) -> Result:
        """Handle an expired timer (the runtime removed it from the table with pop_due)."""
        fn = self._timer_kinds.get(key.kind)
        if fn is None:
            return EMPTY
        try:
            return fn(self, key, now_ms)
        except Exception:
            if self.strict:
                raise
            if key.kind == offsets.RETENTION:
                # The periodic sweep must not die with one bad firing: start afresh later.
                log.exception("offsets retention check failed; the next one starts a new "
                              "sweep")
                return Result(None, (offsets.RetentionProgress(),),
                              (offsets.retention_timer(now_ms, self.config),))
            log.exception("timer %s failed; ignored", key)
            return EMPTY

    def update_topics(self, catalog: TopicCatalog, now_ms: int) -> Result:
        """Install a new topic catalog (an input, like Kafka's metadata image) and return the
        records of the epoch bumps of the groups whose subscribed topics changed."""
        self.topics = catalog
        return on_topics_changed(self, now_ms)

    # ------------------------------------------------------------------ mutation
    def replay(self, item) -> None:
        """Apply one record or volatile event. The only mutator of groups and offsets."""
        if isinstance(item, Record):
            fn = self._replayers.get(item.type)
            if fn is None:
                raise ValueError("no replayer for record type %s" % item.type.name)
            fn(self, item.key, item.value)
        elif isinstance(item, Volatile):
            self._replayers[type(item)](self, item, None)
        else:
            raise TypeError("cannot replay %r" % (item,))

    def apply(self, result: Result) -> Result:
        """Replay the result's records and events, then apply its timer operations."""
        replay = self.replay
        for item in result.records:
            replay(item)
        if result.timers:
            self.timers.apply(result.timers)
        return result

    def due(self, now_ms: int) -> Iterable[TimerKey]:
        """Pop expired timers in deadline order (generator; fire each as it comes)."""
        while True:
            key = self.timers.pop_due(now_ms)
            if key is None:
                return
            yield key

    def rearm(self, now_ms: int) -> None:
        """After loading from the log: schedule every group's timers afresh, and the offsets
        retention check one interval from now (as Kafka schedules it when a shard loads)."""
        for g in list(self.groups.values()):
            self.timers.apply(g.rearm(now_ms))
        self.timers.apply((offsets.retention_timer(now_ms, self.config),))

    def scratch(self) -> "Shard":
        """An empty shard of the same configuration and catalog: where a handler may replay
        records it is staging to see the group they make (connect/heartbeat.py's _upgrade)."""
        return Shard(self.config, self.topics, strict=self.strict)

    # ------------------------------------------------------------------ inspection
    def group(self, group_id: str):
        return self.groups.get(group_id)

    def snapshot(self, durable: bool = True) -> dict:
        """Comparable plain data of all groups and offsets (see Group.snapshot)."""
        groups = {gid: (g.TYPE, g.snapshot(durable)) for gid, g in self.groups.items()}
        if durable:
            groups = {gid: v for gid, v in groups.items() if v[1] is not None}
        offsets = {gid: {k: (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                             v.expire_timestamp) for k, v in tp.items()}
                   for gid, tp in self.offsets.items() if tp}
        configs = {gid: dict(c) for gid, c in self.group_configs.items()}
        snap = {"groups": groups, "offsets": offsets, "configs": configs}
        if not durable:
            # In-memory only: an offsets sweep's position, and the shard's index of offsets by
            # group as it is (a handler leaving an empty entry behind counts as a change).
            snap["volatile"] = (self.retention_sweep, frozenset(self.offsets))
        return snap


def on_catalog_change(shard: Shard, old: TopicCatalog, new: TopicCatalog, now_ms: int) -> list:
    """What a catalog change means for a shard besides the consumer groups' epoch bumps
    (``Shard.update_topics``): -> Results to apply in order. Classic groups of the
    "consumer" protocol type whose members subscribe to a changed topic rebalance (Kafka
    leaves that to each client's metadata refresh; here the change is known at once), and a
    deleted topic's committed offsets are deleted in every group. Pure."""
    changed, deleted = catalog_changes(old, new)
    if not changed:
        return []
    return (rebalance_for_topics(shard, changed, now_ms)
            + deleted_topic_offsets(shard, deleted, shard.config.message_max_bytes))
