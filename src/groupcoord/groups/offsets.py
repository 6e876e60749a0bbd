"""OffsetCommit / OffsetFetch for every group type.

State: ``shard.offsets[group_id][(topic, partition)] = OffsetCommitValue``, changed only by
replaying OFFSET_COMMIT records (a tombstone deletes the entry). Committing to a group that
does not exist (a "simple" consumer or an admin tool: generation < 0, no member id) creates an
Empty classic group when the record is replayed, as Kafka does.

Who may commit is the group type's business (Group.validate_offset_commit): classic groups
check generation/member/instance (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
REBALANCE_IN_PROGRESS); consumer and connect groups check the member epoch
(STALE_MEMBER_EPOCH). OffsetFetch v9 names a member and its epoch: checked the same way.

Limits (limits.py): a topic name must follow Kafka's topic rules (INVALID_TOPIC_EXCEPTION per
partition: it is written in every record), metadata is at most offset.metadata.max.bytes
(OFFSET_METADATA_TOO_LARGE), and the commit's records form one batch of at most
message.max.bytes, or none is written (INVALID_COMMIT_OFFSET_SIZE, as Kafka maps a too large
commit append); a commit too large by its partition count alone is refused before any
per-partition work. A commit whose frame exceeds message.max.bytes is not even decoded first:
the server scans it (native/commit_scan.pyx) and sends an ``OffsetCommitShape`` through the
shard queue; ``commit_shape_error`` decides from the shape alone whether the whole request is
refused (the group's error, or INVALID_COMMIT_OFFSET_SIZE), and only a commit it lets through
is decoded and handled as usual.

Retention (Kafka 2.1+, KIP-211; docs/coordinator.md "Offsets retention and expiry of empty
groups"). A periodic timer (``RETENTION``, every offsets.retention.check.interval.ms, armed by
Shard.rearm after load and re-armed by each firing) sweeps the shard's groups:
* a group without members (Empty) loses each offset whose retention
  (offsets.retention.minutes) has passed, counted from the later of its commit timestamp and
  the time the group became empty (Group.empty_since: a classic group's record says; when
  unknown, the commit timestamp alone, as Kafka counts for consumer groups);
* a group with members loses only offsets of topics it no longer subscribes to
  (Group.subscribed_topics: consumer groups, and Stable classic groups of protocol type
  "consumer" whose subscriptions parse), from their commit timestamp; every other group keeps
  its offsets while it has members;
* an offset committed with a RetentionTimeMs (OffsetCommit v2-4) carries an expire timestamp
  (record value v1, as Kafka writes it) that replaces the two rules above, once the group's
  state allows expiry at all (as Kafka does);
* a group left empty and without offsets is deleted: the tombstones of its records
  (Group.deletion), as Kafka's cleanupGroupMetadata does, for every group type.
Expired offsets and deleted groups are records (tombstones), replayed like every other. One
firing examines at most RETENTION_SCAN_MAX offsets and groups and expires at most
RETENTION_EXPIRE_MAX offsets; an unfinished sweep continues RETENTION_CONTINUE_MS later from
where it stopped (RetentionProgress, in memory: a restart starts a new sweep).

Decisions: RetentionTimeMs (v2-4) is honoured as Kafka honours it (above); -1, the default
every client we know sends, means the broker's retention. This node stores no topic data,
so commits are accepted for any legal topic name. RequireStable has no effect: there are no
transactional offsets here, so nothing is ever unstable.
"""
from __future__ import annotations

from itertools import islice

import msgspec

from groupcoord.groups import limits
from groupcoord.groups.classic.group import new_empty_group
from groupcoord.groups.errors import error_response
from groupcoord.groups.lifecycle import GROUP_DELETED, OFFSETS_EXPIRED, Event
from groupcoord.groups.records import Record
from groupcoord.groups.result import RequestContext, Result, TimerKey, Volatile
from groupcoord.groups.timers import OFFSETS_RETENTION
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["RETENTION", "RetentionProgress",
           "retention_timer", "RETENTION_SCAN_MAX", "RETENTION_EXPIRE_MAX",
           "RETENTION_CONTINUE_MS", "OffsetCommitShape", "commit_shape", "commit_shape_error",
           "shape_code"]


# ---------------------------------------------------------------------------- OffsetCommit
def _commit_error(shard, req, ctx: RequestContext) -> int:
    if not req.group_id:
        return ErrorCode.INVALID_GROUP_ID
    g = shard.groups.get(req.group_id)
    if g is None:
        # Only a commit that does not claim membership may create the group.
        if req.generation_id_or_member_epoch < 0 and not req.member_id \
                and req.group_instance_id is None:
            return 0
        return ErrorCode.ILLEGAL_GENERATION if ctx.version < 9 else ErrorCode.GROUP_ID_NOT_FOUND
    return g.validate_offset_commit(req.member_id, req.group_instance_id,
                                    req.generation_id_or_member_epoch, ctx.version)


def _commit_too_large(req, limit: int) -> bool:
    """Whether the commit's records cannot fit in one batch of ``limit`` bytes, from a lower
    bound (each partition's record without its metadata) counted in O(topics): a commit of a
    million partitions is refused before any per-partition work."""
    return _records_over(req.group_id, ((t.name, len(t.partitions)) for t in req.topics),
                         limit)


def _records_over(group_id: str, topics, limit: int) -> bool:
    """Whether one batch of the records of ``topics`` ((name, record count), ...) exceeds
    ``limit`` bytes, each record counted at its smallest (no metadata, minimal framing)."""
    gbytes = len(group_id.encode("utf-8", "surrogatepass"))
    total = limits.BATCH_OVERHEAD
    for name, n in topics:
        per = limits.RECORD_OVERHEAD_MIN + _KEY_FIXED + gbytes + len(name) + _VALUE_MIN
        total += per * n
        if total > limit:
            return True
    return False


# OffsetCommitKey: type, group and topic lengths, partition; OffsetCommitValue (newest
# version) with empty metadata.
_KEY_FIXED = 2 + 2 + 2 + 4
_VALUE_MIN = 24


def handle_offset_commit(shard, req: m.OffsetCommitRequest, ctx: RequestContext) -> Result:
    if type(req) is OffsetCommitShape:
        return _handle_commit_shape(shard, req, ctx)
    err = int(_commit_error(shard, req, ctx))
    cfg = shard.config
    batch_max = cfg.message_max_bytes
    if not err and _commit_too_large(req, batch_max):
        err = int(ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
    meta_max = cfg.offset_metadata_max_bytes
    topics = []
    records = []
    size = limits.BATCH_OVERHEAD
    now = ctx.now_ms
    gbytes = len(req.group_id.encode("utf-8", "surrogatepass"))
    # KIP-211: a RetentionTimeMs other than -1 (v2-4 only) gives the offsets an expire
    # timestamp, as Kafka's OffsetMetadataManager does.
    rt = req.retention_time_ms if ctx.version <= 4 else -1
    expire = -1 if rt == -1 else max(0, now + rt)
    for t in req.topics:
        parts = []
        # A topic name is written in every record of the commit: Kafka's rules (ASCII, so
        # its length is its size).
        bad_topic = None if err else limits.validate_topic_name(t.name)
        # A record's size but its metadata, an upper bound (varint lengths at their widest).
        fixed = limits.RECORD_OVERHEAD_MAX + _KEY_FIXED + gbytes + len(t.name) + _VALUE_MIN + 2
        for p in t.partitions:
            code = err
            if not code:
                meta = p.committed_metadata
                mbytes = len(meta.encode("utf-8", "surrogatepass")) if meta else 0
                if bad_topic is not None:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                elif mbytes > meta_max:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                elif p.partition_index < 0:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    size += fixed + mbytes
                    records.append(Record(
                        m.OffsetCommitKey(group=req.group_id, topic=t.name,
                                          partition=p.partition_index),
                        m.OffsetCommitValue(offset=p.committed_offset,
                                            leader_epoch=p.committed_leader_epoch,
                                            metadata=meta or "", commit_timestamp=now,
                                            expire_timestamp=expire)))
            parts.append(m.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                         error_code=int(code)))
        topics.append(m.OffsetCommitResponseTopic(name=t.name, partitions=parts))
    if size > batch_max:
        # One batch per commit, as Kafka appends it: all or nothing. Partitions refused for
        # their own reason keep it (Kafka filters them out before the append).
        too_large = int(ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
        for t in topics:
            for p in t.partitions:
                if not p.error_code:
                    p.error_code = too_large
        return Result(m.OffsetCommitResponse(topics=topics))
    return Result(m.OffsetCommitResponse(topics=topics), tuple(records))


# ------------------------------------------------- OffsetCommit scanned instead of decoded
class OffsetCommitShape(m.OffsetCommitRequest, gc=False):
    """An OffsetCommit the server scanned instead of decoding (a frame over message.max.bytes:
    server/connection.py): its header fields, and ``topic_shapes``, per topic (name, partition
    count, metadata bytes). ``topics`` holds one probe partition, not the request's.

    It travels as the OffsetCommit it stands for (api key 8: the coordinator's routing by
    group id, limits.check_request's group id bound, the shard's queue and the order of the
    shard's other requests), and handle_offset_commit answers it with commit_shape_error. It
    writes nothing and changes nothing. Every answer it can get, from the handler or from the
    runtime (the shard not serving, failed before answering, a refused bound), is
    ``error_response(shape, version, code)``: the probe partition carries the code
    (``shape_code``)."""
    topic_shapes: list = msgspec.field(default_factory=list)


def commit_shape(group_id: str, generation_id_or_member_epoch: int, member_id: str,
                 group_instance_id, retention_time_ms: int, topics: list) -> OffsetCommitShape:
    """The shape of a scanned commit (the fields of commit_scan.scan_offset_commit after its
    header, in its order)."""
    probe = [m.OffsetCommitRequestTopic(name="", partitions=[
        m.OffsetCommitRequestPartition(partition_index=-1)])]
    return OffsetCommitShape(group_id=group_id,
                             generation_id_or_member_epoch=generation_id_or_member_epoch,
                             member_id=member_id, group_instance_id=group_instance_id,
                             retention_time_ms=retention_time_ms, topics=probe,
                             topic_shapes=topics)


def shape_code(resp: m.OffsetCommitResponse) -> int:
    """The whole-request error code of an answer to an OffsetCommitShape (0: decode the
    commit and handle it as usual)."""
    return resp.topics[0].partitions[0].error_code


def commit_shape_error(shard, shape: OffsetCommitShape, ctx: RequestContext) -> int:
    """The error refusing the whole scanned commit, or 0 when it must be decoded and handled
    as usual. As handle_offset_commit decides before any per-partition work: the group's
    check first (every partition gets the group's error, as Kafka answers a request whose
    group check fails), then the lower bound of its records against message.max.bytes
    (INVALID_COMMIT_OFFSET_SIZE), with each topic counted at least one record, so that a
    million topics without partitions are refused as well (their answer lists no partition:
    the code shows nowhere, and nothing is written either way)."""
    err = int(_commit_error(shard, shape, ctx))
    if err:
        return err
    if _records_over(shape.group_id, ((name, max(n, 1)) for name, n, _meta in
                                      shape.topic_shapes), shard.config.message_max_bytes):
        return int(ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
    return 0


def _handle_commit_shape(shard, shape: OffsetCommitShape, ctx: RequestContext) -> Result:
    return Result(error_response(shape, ctx.version, commit_shape_error(shard, shape, ctx)))


# ----------------------------------------------------------------------------- OffsetFetch
def _fetch_group(shard, group_id: str, topics, member_id, member_epoch, resp_topic,
                 resp_part) -> tuple:
    """-> (error code, [resp_topic]) for one group; topics None = every committed offset."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, []
    g = shard.groups.get(group_id)
    if g is not None and member_id is not None:
        err = g.validate_offset_fetch(member_id, member_epoch)
        if err:
            return err, []
    committed = shard.offsets.get(group_id, {})
    if topics is None:
        by_topic: dict = {}
        for (topic, part) in sorted(committed):
            by_topic.setdefault(topic, []).append(part)
        wanted = sorted(by_topic.items())
    else:
        wanted = [(t.name, t.partition_indexes) for t in topics]
    out = []
    for name, parts in wanted:
        rp = []
        for p in parts:
            v = committed.get((name, p))
            if v is None:
                rp.append(resp_part(partition_index=p, committed_offset=-1,
                                    committed_leader_epoch=-1, metadata="", error_code=0))
            else:
                rp.append(resp_part(partition_index=p, committed_offset=v.offset,
                                    committed_leader_epoch=v.leader_epoch,
                                    metadata=v.metadata, error_code=0))
        out.append(resp_topic(name=name, partitions=rp))
    return 0, out


def handle_offset_fetch(shard, req: m.OffsetFetchRequest, ctx: RequestContext) -> Result:
    if ctx.version >= 8:
        groups = []
        for gr in req.groups:
            member = gr.member_id if ctx.version >= 9 else None
            err, topics = _fetch_group(shard, gr.group_id, gr.topics, member, gr.member_epoch,
                                       m.OffsetFetchResponseTopics,
                                       m.OffsetFetchResponsePartitions)
            groups.append(m.OffsetFetchResponseGroup(group_id=gr.group_id, topics=topics,
                                                     error_code=int(err)))
        return Result(m.OffsetFetchResponse(groups=groups))
    topics = req.topics
    if topics is None and ctx.version < 2:
        topics = []
    err, out = _fetch_group(shard, req.group_id, topics, None, -1, m.OffsetFetchResponseTopic,
                            m.OffsetFetchResponsePartition)
    if err and ctx.version < 2:
        # v0-1 have no top-level error: report it on every requested partition.
        out = [m.OffsetFetchResponseTopic(name=t.name, partitions=[
            m.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1,
                                           error_code=int(err)) for p in t.partition_indexes])
            for t in (topics or [])]
    return Result(m.OffsetFetchResponse(topics=out, error_code=int(err)))


# ---------------------------------------------------------------------------------- replay
def _replay_offset(shard, key: m.OffsetCommitKey, value) -> None:
    gid = key.group
    tp = (key.topic, key.partition)
    # A commit creates its (empty, classic) group if there is none; so does a tombstone:
    # compaction may have removed the commit the tombstone deletes, and replaying the
    # compacted log must give the same groups as replaying the full one.
    if gid not in shard.groups:
        shard.groups[gid] = new_empty_group(gid)
    if value is None:
        committed = shard.offsets.get(gid)
        if committed is not None:
            committed.pop(tp, None)
            if not committed:
                del shard.offsets[gid]
        return
    shard.offsets.setdefault(gid, {})[tp] = value


# ------------------------------------------------------------------------------- retention
RETENTION = OFFSETS_RETENTION            # the shard's one retention timer (group id "")
# Bounds of one firing: the loop is held for a few ms at most (docs/coordinator.md), and a
# shard of 250k offsets is swept in a few hundred firings RETENTION_CONTINUE_MS apart.
RETENTION_SCAN_MAX = 10_000      # offsets and groups examined per firing
RETENTION_EXPIRE_MAX = 1_000     # offsets expired per firing (plus the groups they free)
RETENTION_CONTINUE_MS = 10       # when an unfinished sweep goes on


class RetentionProgress(Volatile, frozen=True, gc=False):
    """Where the running retention sweep stands: the groups it visits (the ids there were when
    it started; later ones wait for the next sweep), the position of the next one, and the
    position in that group's offsets. ``groups`` empty: no sweep is running."""
    groups: tuple = ()
    group_pos: int = 0
    offset_pos: int = 0


def retention_timer(now_ms: int, config) -> tuple:
    """The timer operation arming the next sweep one check interval after ``now_ms``."""
    return (TimerKey(RETENTION, ""), now_ms + config.offsets_retention_check_interval_ms)


def _expiry_rule(g):
    """-> (empty-since timestamp or -1, topics whose offsets stay), or None when the group
    keeps all its offsets (it has members and does not say what it subscribes to)."""
    if g.is_empty():
        return g.empty_since(), ()
    subscribed = g.subscribed_topics()
    return None if subscribed is None else (-1, subscribed)


def _expired(v: m.OffsetCommitValue, since: int, now: int, retention_ms: int) -> bool:
    if v.expire_timestamp >= 0:                 # committed with a RetentionTimeMs
        return now >= v.expire_timestamp
    return now - max(since, v.commit_timestamp) >= retention_ms


def _retention_check(shard, key: TimerKey, now: int) -> Result:
    """One firing of the sweep (module docstring): offset tombstones, then the tombstones of
    the groups they leave empty and without offsets."""
    cfg = shard.config
    retention = cfg.offsets_retention_ms
    sweep = shard.retention_sweep
    if sweep is None:
        groups, gpos, opos = tuple(shard.groups), 0, 0
    else:
        groups, gpos, opos = sweep.groups, sweep.group_pos, sweep.offset_pos
    scan, budget = RETENTION_SCAN_MAX, RETENTION_EXPIRE_MAX
    records, timers, events = [], [], []
    while gpos < len(groups) and scan > 0 and budget > 0:
        gid = groups[gpos]
        g = shard.groups.get(gid)
        scan -= 1
        if g is None:                           # deleted since the sweep started
            gpos, opos = gpos + 1, 0
            continue
        committed = shard.offsets.get(gid)
        n = len(committed) if committed else 0
        expired = 0
        topics = set()
        rule = _expiry_rule(g) if n else None
        if rule is None:
            opos = n                            # none to examine, or all kept
        else:
            since, keep = rule
            for (topic, part), v in islice(committed.items(), opos, None):
                if scan <= 0 or budget <= 0:
                    break
                scan -= 1
                opos += 1
                if topic not in keep and _expired(v, since, now, retention):
                    records.append(Record(m.OffsetCommitKey(group=gid, topic=topic,
                                                            partition=part), None))
                    expired += 1
                    topics.add(topic)
                    budget -= 1
        if expired:
            events.append(Event(kind=OFFSETS_EXPIRED, group=gid, type=g.TYPE,
                                offsets=expired, topics=tuple(sorted(topics))))
        if opos < n:
            # Out of budget inside this group: the next firing resumes here, where the
            # offsets expired now (all before this position) will be gone.
            opos -= expired
            break
        if expired == n and g.is_empty():
            deletion = g.deletion()
            if deletion is not None:
                records.extend(deletion[0])
                timers.extend(deletion[1])
                events.append(Event(kind=GROUP_DELETED, group=gid, type=g.TYPE,
                                    reason="empty-expired"))
        gpos, opos = gpos + 1, 0
    done = gpos >= len(groups)
    if not (done and sweep is None):            # the sweep's position changed
        records.append(RetentionProgress(() if done else groups, gpos, opos))
    timers.append((key, now + (cfg.offsets_retention_check_interval_ms if done
                               else RETENTION_CONTINUE_MS)))
    # What expired and which groups went are lifecycle events (one per group), not a line.
    return Result(None, tuple(records), tuple(timers), events=tuple(events))


def _replay_progress(shard, ev: RetentionProgress, _value) -> None:
    shard.retention_sweep = ev if ev.groups else None
