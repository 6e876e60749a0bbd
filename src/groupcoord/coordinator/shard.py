"""The shard: many groups, their offsets, the topic catalog and the timer table.

    result = shard.handle(request, now_ms, version)    # pure: reads state, returns a Result
    shard.apply(result)                                 # replay(records) + timer operations
    ... deliver result.response and result.completions once result's durable records are
    ... written (the runtime's job; tests deliver at once)
    for key in shard.due(now_ms): shard.apply(shard.fire(key, now_ms))

``replay`` is the only code that changes group or offset state: live writes and recovery run
the same code. No I/O, no clock reads, no threads: time is the ``now_ms`` argument.

Dispatch: each group module (classic, consumer, connect) and offsets.py exports
  API_HANDLERS  {api_key: fn(shard, request, ctx: RequestContext) -> Result}
  REPLAYERS     {RecordType | Volatile subclass: fn(shard, key_or_event, value)}
  TIMER_KINDS   {timer kind: fn(shard, TimerKey, now_ms) -> Result}
The group admin APIs (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete and the GROUP
resources of DescribeConfigs / IncrementalAlterConfigs) are admin.py's, answered from the Group
interface (group.py).
"""
from __future__ import annotations

import importlib
import logging
from typing import Iterable, Optional

from groupcoord.coordinator import limits, offsets
from groupcoord.coordinator.config import ShardConfig
from groupcoord.coordinator.records import Record
from groupcoord.coordinator.result import EMPTY, RequestContext, Result, TimerKey, Volatile
from groupcoord.coordinator.timers import Timers
from groupcoord.coordinator.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["Shard", "error_response", "GROUP_MODULES"]

log = logging.getLogger("groupcoord.coordinator")

GROUP_MODULES = ("classic", "consumer", "connect", "offsets", "admin")


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
        self._handlers: dict = {}
        self._replayers: dict = {}
        self._timer_kinds: dict = {}
        for name in GROUP_MODULES:
            mod = importlib.import_module("groupcoord.coordinator." + name)
            self._handlers.update(mod.API_HANDLERS)
            self._replayers.update(mod.REPLAYERS)
            self._timer_kinds.update(getattr(mod, "TIMER_KINDS", {}))

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
        from groupcoord.coordinator import consumer
        return consumer.on_topics_changed(self, now_ms)

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
        return {"groups": groups, "offsets": offsets, "configs": configs}


# ---------------------------------------------------------------------- error responses
def error_response(request, version: int, code: int, message: Optional[str] = None):
    """The response of ``request``'s API carrying ``code`` everywhere it can (top level, or
    per group / topic / partition as the API has it)."""
    cls = type(request)
    while cls.__module__ != m.__name__:     # an internal subclass answers as its wire message
        cls = cls.__base__
    name = cls.__name__
    resp_cls = getattr(m, name[:-len("Request")] + "Response")
    code = int(code)
    fields = resp_cls.__struct_fields__
    kw = {}
    if "error_code" in fields:
        kw["error_code"] = code
    if "error_message" in fields and message is not None:
        kw["error_message"] = message
    if isinstance(request, m.OffsetCommitRequest):
        kw["topics"] = [m.OffsetCommitResponseTopic(name=t.name, partitions=[
            m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in request.topics]
    elif isinstance(request, m.OffsetFetchRequest):
        if version >= 8:
            kw["groups"] = [m.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                            for g in request.groups]
    elif isinstance(request, m.DescribeGroupsRequest):
        kw["groups"] = [m.DescribeGroupsResponseDescribedGroup(error_code=code, group_id=g)
                        for g in request.groups]
    elif isinstance(request, (m.ConsumerGroupDescribeRequest, m.ConnectGroupDescribeRequest)):
        grp = getattr(m, name[:-len("Request")] + "ResponseDescribedGroup")
        kw["groups"] = [grp(error_code=code, error_message=message, group_id=g)
                        for g in request.group_ids]
    elif isinstance(request, m.FindCoordinatorRequest) and version >= 4:
        kw.pop("error_code", None)
        kw.pop("error_message", None)
        kw["coordinators"] = [m.FindCoordinatorResponseCoordinator(
            key=k, node_id=-1, error_code=code, error_message=message)
            for k in request.coordinator_keys]
    elif isinstance(request, m.LeaveGroupRequest) and version >= 3:
        kw["members"] = []
    elif isinstance(request, m.DeleteGroupsRequest):
        kw["results"] = [m.DeleteGroupsResponseDeletableGroupResult(group_id=g, error_code=code)
                         for g in request.groups_names]
    elif isinstance(request, m.DescribeConfigsRequest):
        kw["results"] = [m.DescribeConfigsResponseDescribeConfigsResult(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources]
    elif isinstance(request, m.IncrementalAlterConfigsRequest):
        kw["responses"] = [m.IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources]
    return resp_cls(**kw)
