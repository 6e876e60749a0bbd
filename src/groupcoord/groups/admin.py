"""Group admin APIs, answered from the Group interface (group.py) with Kafka's semantics
(GroupCoordinatorShard, GroupMetadataManager, OffsetMetadataManager; docs/coordinator.md has a
section per API). Handlers only read; every change is a record replayed like any other.

  DescribeGroups (15)   every group type, in classic terms (Group.as_described_group):
                        state, protocol type, protocol (classic: the chosen one, while Stable;
                        consumer / connect: the assignor) and every member with its metadata
                        and assignment bytes (classic: while Stable). Kafka 4 describes
                        classic groups only (docs/decisions.md). An unknown id: Dead with no
                        error (v0-5), GROUP_ID_NOT_FOUND with a message (v6, KIP-1043).
  ListGroups (16)       every group with its protocol type; v4 state filter (case-insensitive),
                        v5 type filter (classic / consumer / connect, case-insensitive).
  DeleteGroups (42)     per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or the tombstones of
                        its offsets and then of the group (Group.deletion), one Result.
  OffsetDelete (47)     tombstones of a group's offsets of topics it does not subscribe to;
                        GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise. Group-level:
                        INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (a group with
                        members that does not use the consumer protocol).
  DescribeConfigs (32), IncrementalAlterConfigs (44), GROUP resources (type 32): a group's
                        consumer.session.timeout.ms / consumer.heartbeat.interval.ms
                        (group_config.py), one GROUP_CONFIG record per altered group holding
                        all its overrides (tombstone when none is left). Other resource types
                        are not kept here: INVALID_REQUEST per resource, with a message.

Records: OFFSET_COMMIT tombstones, each group type's own tombstones, GROUP_CONFIG (type 110,
this project's: Kafka keeps group configs in its metadata log's config store).
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

from groupcoord.groups import group_config as gc
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.lifecycle import GROUP_DELETED, Event
from groupcoord.groups.records import Record
from groupcoord.groups.result import RequestContext, Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["GROUP_RESOURCE", "GROUP_OPERATIONS"]


GROUP_RESOURCE = 32                 # ConfigResource.Type.GROUP
_RESOURCE_NAMES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS"}
# ConfigSource and ConfigType values of DescribeConfigs
_SOURCE_DEFAULT, _SOURCE_GROUP = 5, 8
_TYPE_INT = 3
# IncrementalAlterConfigs operations
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3
# AuthorizedOperations of a group with no authorizer (Kafka answers every operation a GROUP
# resource supports): READ 3, DELETE 6, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11.
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))


# --------------------------------------------------------------------------- DescribeGroups
def describe_groups(shard, req: m.DescribeGroupsRequest, ctx: RequestContext) -> Result:
    v = ctx.version
    ops = GROUP_OPERATIONS if v >= 3 and req.include_authorized_operations else None
    out = []
    for gid in req.groups:
        g = shard.groups.get(gid)
        d = g.as_described_group(shard.topics) if g is not None else _not_found(gid, v)
        if ops is not None and not d.error_code:
            d.authorized_operations = ops
        out.append(d)
    return Result(m.DescribeGroupsResponse(groups=out))


def _not_found(gid: str, version: int):
    if version >= 6:
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=int(E.GROUP_ID_NOT_FOUND), error_message="Group %s not found." % gid,
            group_id=gid, group_state="Dead")
    return m.DescribeGroupsResponseDescribedGroup(group_id=gid, group_state="Dead")


# ------------------------------------------------------------------------------- ListGroups
def list_groups(shard, req: m.ListGroupsRequest, ctx: RequestContext) -> Result:
    v = ctx.version
    # Kafka's matching: states lower-cased and trimmed, types lower-cased.
    states = {s.strip().lower() for s in req.states_filter} if v >= 4 else set()
    types = {t.lower() for t in req.types_filter} if v >= 5 else set()
    out = []
    for gid in sorted(shard.groups):
        g = shard.groups[gid]
        st = g.state_name()
        if states and st.lower() not in states:
            continue
        if types and g.TYPE not in types:
            continue
        out.append(m.ListGroupsResponseListedGroup(
            group_id=gid, protocol_type=g.protocol_type(), group_state=st, group_type=g.TYPE))
    return Result(m.ListGroupsResponse(groups=out))


# ----------------------------------------------------------------------------- DeleteGroups
def delete_groups(shard, req: m.DeleteGroupsRequest, ctx: RequestContext) -> Result:
    records: list = []
    timers: list = []
    codes: dict = {}                    # a group named twice is deleted once
    events: list = []
    for gid in req.groups_names:
        if gid in codes:
            continue
        g = shard.groups.get(gid)
        if g is None:
            codes[gid] = int(E.GROUP_ID_NOT_FOUND)
            continue
        deletion = g.deletion() if g.is_empty() else None
        if deletion is None:
            # Members, or (classic) a MEMBER_ID_REQUIRED join on its way back.
            codes[gid] = int(E.NON_EMPTY_GROUP)
            continue
        # Offsets first: replaying a commit tombstone of a missing group would recreate it.
        committed = shard.offsets.get(gid, {})
        records.extend(Record(m.OffsetCommitKey(group=gid, topic=t, partition=p), None)
                       for t, p in sorted(committed))
        records.extend(deletion[0])
        timers.extend(deletion[1])
        codes[gid] = 0
        events.append(Event(kind=GROUP_DELETED, group=gid, type=g.TYPE, reason="delete-request",
                            offsets=len(committed)))
    results = [m.DeleteGroupsResponseDeletableGroupResult(group_id=gid, error_code=codes[gid])
               for gid in req.groups_names]
    return Result(m.DeleteGroupsResponse(results=results), tuple(records), tuple(timers),
                  events=tuple(events))


# ----------------------------------------------------------------------------- OffsetDelete
class _All:
    """Subscribed to every topic: Kafka's answer when a consumer-protocol group's
    subscriptions cannot be read."""

    def __contains__(self, topic) -> bool:
        return True


def _classic_subscribed(g):
    """Kafka's ClassicGroup.isSubscribedToTopic: the topics of the members' subscriptions for
    the chosen protocol when the protocol type is "consumer"; none for another protocol type
    or no member; every topic when they cannot be read."""
    if g.protocol_type() != "consumer" or not g.members:
        return ()
    if g.protocol is None:
        return _All()
    topics = g.members_topics()
    return _All() if topics is None else topics


def _offset_delete_rule(g):
    """-> (group-level error code, container of subscribed topic names)."""
    if g.TYPE == "consumer":
        return 0, g.subscribed_topics()     # any state (Kafka's ConsumerGroup)
    if g.TYPE == "classic" and g.protocol_type() == "consumer":
        return 0, _classic_subscribed(g)
    # Members that do not use the consumer protocol: their offsets are theirs.
    return (0 if g.is_empty() else int(E.NON_EMPTY_GROUP)), ()


def offset_delete(shard, req: m.OffsetDeleteRequest, ctx: RequestContext) -> Result:
    gid = req.group_id
    g = shard.groups.get(gid) if gid else None
    if not gid:
        code, subscribed = int(E.INVALID_GROUP_ID), ()
    elif g is None:
        code, subscribed = int(E.GROUP_ID_NOT_FOUND), ()
    else:
        code, subscribed = _offset_delete_rule(g)
    if code:
        return Result(m.OffsetDeleteResponse(error_code=code))
    committed = shard.offsets.get(gid, {})
    records, written = [], set()
    topics = []
    for t in req.topics:
        refused = t.name in subscribed
        parts = []
        for p in t.partitions:
            parts.append(m.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=int(E.GROUP_SUBSCRIBED_TO_TOPIC) if refused else 0))
            tp = (t.name, p.partition_index)
            if not refused and tp in committed and tp not in written:
                written.add(tp)
                records.append(Record(m.OffsetCommitKey(group=gid, topic=t.name,
                                                        partition=p.partition_index), None))
        topics.append(m.OffsetDeleteResponseTopic(name=t.name, partitions=parts))
    return Result(m.OffsetDeleteResponse(topics=topics), tuple(records))


# -------------------------------------------------------------------------- DescribeConfigs
def _resource_error(rtype: int) -> str:
    what = _RESOURCE_NAMES.get(rtype)
    if what is None:
        return "Unsupported resource type: %d" % rtype
    return ("groupcoord keeps the configs of GROUP resources (type %d) only; %s resources "
            "are not served here" % (GROUP_RESOURCE, what))


def _entry(name: str, value: int, overridden: bool, synonyms: bool, docs: bool):
    src = _SOURCE_GROUP if overridden else _SOURCE_DEFAULT
    text = str(value)
    return m.DescribeConfigsResponseDescribeConfigsResourceResult(
        name=name, value=text, read_only=False, config_source=src, is_sensitive=False,
        synonyms=[m.DescribeConfigsResponseDescribeConfigsSynonym(
            name=name, value=text, source=src)] if synonyms else [],
        config_type=_TYPE_INT, documentation=gc.DOCS[name] if docs else None)


def describe_configs(shard, req: m.DescribeConfigsRequest, ctx: RequestContext) -> Result:
    docs = ctx.version >= 3 and req.include_documentation
    defaults = gc.defaults(shard.config)
    results = []
    for r in req.resources:
        res = m.DescribeConfigsResponseDescribeConfigsResult(
            error_code=0, error_message=None, resource_type=r.resource_type,
            resource_name=r.resource_name)
        if r.resource_type != GROUP_RESOURCE:
            res.error_code, res.error_message = int(E.INVALID_REQUEST), \
                _resource_error(r.resource_type)
        elif not r.resource_name:
            res.error_code, res.error_message = int(E.INVALID_REQUEST), \
                "Group name must not be empty"
        else:
            over = shard.group_configs.get(r.resource_name, {})
            keys = r.configuration_keys
            res.configs = [_entry(n, over.get(n, defaults[n]), n in over, req.include_synonyms,
                                  docs)
                           for n in gc.NAMES if not keys or n in keys]
        results.append(res)
    return Result(m.DescribeConfigsResponse(results=results))


# ------------------------------------------------------------------ IncrementalAlterConfigs
class _Refused(Exception):
    def __init__(self, code, message: str):
        super().__init__(message)
        self.code = int(code)
        self.message = message


def _altered(shard, r, current: Optional[dict]) -> Optional[dict]:
    """The group's overrides ({name: int}) after ``r``'s operations, validated; None when
    it has none. Raises _Refused with Kafka's code and message."""
    cfg = shard.config
    if r.resource_type != GROUP_RESOURCE:
        raise _Refused(E.INVALID_REQUEST, _resource_error(r.resource_type))
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise _Refused(E.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in r.configs if c.value is None and c.config_operation != _DELETE]
    if nulls:
        raise _Refused(E.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    if not r.resource_name:
        raise _Refused(E.INVALID_REQUEST, "Default group resources are not allowed.")
    if len(r.resource_name.encode("utf-8", "surrogatepass")) > cfg.name_max_bytes:
        raise _Refused(E.INVALID_GROUP_ID, "group id is longer than %d bytes (name.max.bytes)"
                       % cfg.name_max_bytes)
    text = {n: str(v) for n, v in (current or {}).items()}
    for c in r.configs:
        op = c.config_operation
        if op == _SET:
            text[c.name] = c.value
        elif op == _DELETE:
            text.pop(c.name, None)
        elif op in (_APPEND, _SUBTRACT):
            raise _Refused(E.INVALID_CONFIG, "Can't %s to key %s because its type is not LIST."
                           % ("APPEND" if op == _APPEND else "SUBTRACT", c.name))
        else:
            raise _Refused(E.INVALID_REQUEST, "Unknown operation type %d" % op)
    try:
        values = gc.validate(text, cfg)
    except gc.ConfigError as exc:
        raise _Refused(exc.code, exc.message) from None
    return values or None


def _config_record(gid: str, values: Optional[dict]) -> Record:
    if values is None:
        return Record(m.GroupConfigKey(group_id=gid), None)
    return Record(m.GroupConfigKey(group_id=gid), m.GroupConfigValue(configs=[
        m.GroupConfigValueConfig(name=n, value=str(values[n])) for n in sorted(values)]))


def incremental_alter_configs(shard, req: m.IncrementalAlterConfigsRequest,
                              ctx: RequestContext) -> Result:
    seen = Counter((r.resource_type, r.resource_name) for r in req.resources)
    held = len(shard.group_configs)
    limit = shard.config.shard_max_groups
    records, out = [], []
    for r in req.resources:
        code, message = 0, None
        try:
            if seen[(r.resource_type, r.resource_name)] > 1:
                raise _Refused(E.INVALID_REQUEST, "Each resource must appear at most once.")
            gid = r.resource_name
            current = shard.group_configs.get(gid)
            values = _altered(shard, r, current)
            if values != current:
                if current is None:
                    # Settings of groups that need not exist: bounded like groups are.
                    if held >= limit:
                        raise _Refused(E.POLICY_VIOLATION, "this shard holds the settings of "
                                       "%d groups (shard.max.groups)" % limit)
                    held += 1
                if not req.validate_only:
                    records.append(_config_record(gid, values))
        except _Refused as exc:
            code, message = exc.code, exc.message
        out.append(m.IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name))
    return Result(m.IncrementalAlterConfigsResponse(responses=out), tuple(records))


# ---------------------------------------------------------------------------------- replay
def _replay_group_config(shard, key: m.GroupConfigKey, value) -> None:
    gid = key.group_id
    if value is None:
        shard.group_configs.pop(gid, None)
    else:
        # Names this version does not know (a newer writer's) are left out, not failed on.
        shard.group_configs[gid] = {c.name: int(c.value) for c in value.configs
                                    if c.name in gc.DOCS}
    g = shard.groups.get(gid)
    if isinstance(g, ConsumerGroup):
        g.session_ms = gc.consumer_session_ms(shard, gid)   # what rearm gives its members
