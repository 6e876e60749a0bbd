"""OffsetCommit / OffsetFetch for every group type.

State: ``shard.offsets[group_id][(topic, partition)] = OffsetCommitValue``, changed only by
replaying OFFSET_COMMIT records (a tombstone deletes the entry). Committing to a group that
does not exist (a "simple" consumer or an admin tool: generation < 0, no member id) creates an
Empty classic group when the record is replayed, as Kafka does.

Who may commit is the group type's business (Group.validate_offset_commit): classic groups
check generation/member/instance (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
REBALANCE_IN_PROGRESS); consumer and connect groups check the member epoch
(STALE_MEMBER_EPOCH). OffsetFetch v9 names a member and its epoch: checked the same way.

Decisions: RetentionTimeMs (v2-4) is accepted and ignored: offsets live until deleted, which
is what Kafka does since KIP-211 while the group is non-empty. This node stores no topic data,
so commits are accepted for any topic name. RequireStable has no effect: there are no
transactional offsets here, so nothing is ever unstable.
"""
from __future__ import annotations

from groupcoord.coordinator.record_types import RecordType
from groupcoord.coordinator.records import Record
from groupcoord.coordinator.result import RequestContext, Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["API_HANDLERS", "REPLAYERS", "TIMER_KINDS", "MAX_METADATA_BYTES"]

# Kafka's offset.metadata.max.bytes default.
MAX_METADATA_BYTES = 4096


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


def handle_offset_commit(shard, req: m.OffsetCommitRequest, ctx: RequestContext) -> Result:
    err = int(_commit_error(shard, req, ctx))
    topics = []
    records = []
    now = ctx.now_ms
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code = err
            if not code:
                meta = p.committed_metadata
                if meta is not None and len(meta.encode()) > MAX_METADATA_BYTES:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                elif p.partition_index < 0:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    records.append(Record(
                        m.OffsetCommitKey(group=req.group_id, topic=t.name,
                                          partition=p.partition_index),
                        m.OffsetCommitValue(offset=p.committed_offset,
                                            leader_epoch=p.committed_leader_epoch,
                                            metadata=meta or "", commit_timestamp=now)))
            parts.append(m.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                         error_code=int(code)))
        topics.append(m.OffsetCommitResponseTopic(name=t.name, partitions=parts))
    return Result(m.OffsetCommitResponse(topics=topics), tuple(records))


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
        from groupcoord.coordinator import classic
        shard.groups[gid] = classic.new_empty_group(gid)
    if value is None:
        committed = shard.offsets.get(gid)
        if committed is not None:
            committed.pop(tp, None)
            if not committed:
                del shard.offsets[gid]
        return
    shard.offsets.setdefault(gid, {})[tp] = value


API_HANDLERS = {8: handle_offset_commit, 9: handle_offset_fetch}
REPLAYERS = {RecordType.OFFSET_COMMIT: _replay_offset,
             RecordType.LEGACY_OFFSET_COMMIT: _replay_offset}
TIMER_KINDS: dict = {}
