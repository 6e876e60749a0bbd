"""ConsumerGroupDescribe (api 69)."""
from __future__ import annotations

from groupcoord.groups.consumer.group import (MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER,
                                              ConsumerGroup)
from groupcoord.groups.modern.reconcile import EMPTY_SET
from groupcoord.groups.result import Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as _E

__all__ = ["consumer_group_describe"]


def consumer_group_describe(shard, req, ctx) -> Result:
    out = []
    for gid in req.group_ids:
        g = shard.groups.get(gid)
        if g is None:
            out.append(m.ConsumerGroupDescribeResponseDescribedGroup(
                error_code=int(_E.GROUP_ID_NOT_FOUND), group_id=gid,
                error_message="Group %s not found." % gid))
        elif not isinstance(g, ConsumerGroup):
            out.append(m.ConsumerGroupDescribeResponseDescribedGroup(
                error_code=int(_E.GROUP_ID_NOT_FOUND), group_id=gid,
                error_message="Group %s is not a consumer group." % gid))
        else:
            out.append(_describe(g, shard.topics))
    return Result(m.ConsumerGroupDescribeResponse(groups=out))


def _describe(g: ConsumerGroup, catalog):
    names = {tid: n for n, (tid, _) in g.topic_meta.items()}
    names.update((t.topic_id, t.name) for t in catalog.by_id.values())

    def assignment(units):
        by: dict = {}
        for tid, p in g.external(units):
            by.setdefault(tid, []).append(p)
        return m.ConsumerGroupDescribeResponseAssignment(topic_partitions=[
            m.ConsumerGroupDescribeResponseTopicPartitions(
                topic_id=tid, topic_name=names.get(tid, ""), partitions=ps)
            for tid, ps in by.items()])

    members = []
    for mid in sorted(g.members):
        mem = g.members[mid]
        meta = mem.meta
        members.append(m.ConsumerGroupDescribeResponseMember(
            member_id=mid, instance_id=meta.instance_id, rack_id=meta.rack_id,
            member_epoch=mem.a.epoch, client_id=meta.client_id, client_host=meta.client_host,
            subscribed_topic_names=list(meta.subscribed_topic_names),
            subscribed_topic_regex=meta.subscribed_topic_regex,
            assignment=assignment(mem.a.assigned),
            target_assignment=assignment(g.targets.get(mid, EMPTY_SET)),
            # A classic-protocol member inside a consumer group (migration) says so.
            member_type=(MEMBER_TYPE_CLASSIC if meta.classic_member_metadata is not None
                         else MEMBER_TYPE_CONSUMER)))
    return m.ConsumerGroupDescribeResponseDescribedGroup(
        group_id=g.group_id, group_state=g.state_name(), group_epoch=g.epoch,
        assignment_epoch=g.target_epoch, assignor_name=g.preferred_assignor(),
        members=members)
