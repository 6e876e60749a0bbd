"""Requests that drive groups in the coordinator harness (tests/coord_harness.py), shared by
the coordinator tests that need groups of every type around them (admin APIs, retention)."""
from coord_harness import Parked
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E


def commit(h, group, parts, gen=-1, member="", version=8, retention=-1, metadata="m"):
    """parts: {(topic, partition): offset}; -> {(topic, partition): error code}."""
    by_topic = {}
    for (t, p), off in parts.items():
        by_topic.setdefault(t, []).append(m.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=metadata))
    resp = h.send(m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member,
        retention_time_ms=retention,
        topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
        version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def committed(h, group) -> set:
    return set(h.shard.offsets.get(group, {}))


def classic_join(h, group, *, topics=None, ptype="consumer", metadata=b"x", instance=None,
                 assignment=b"A", session_timeout_ms=1_000_000):
    """One member forms the classic group alone (Stable); its metadata is a consumer
    subscription of ``topics`` when given. -> (member id, generation)."""
    if topics is not None:
        metadata = embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=topics))
    req = m.JoinGroupRequest(group_id=group, session_timeout_ms=session_timeout_ms,
                             rebalance_timeout_ms=10_000, member_id="",
                             group_instance_id=instance, protocol_type=ptype,
                             protocols=[m.JoinGroupRequestProtocol(name="range",
                                                                   metadata=metadata)])
    r = h.send(req, 5)
    if not isinstance(r, Parked) and r.error_code == E.MEMBER_ID_REQUIRED:
        req.member_id = r.member_id
        r = h.send(req, 5)
    if isinstance(r, Parked):
        h.advance(0)
        r = h.completion(r)
    assert r.error_code == 0, r
    s = h.send(m.SyncGroupRequest(group_id=group, generation_id=r.generation_id,
                                  member_id=r.member_id,
                                  assignments=[m.SyncGroupRequestAssignment(
                                      member_id=r.member_id, assignment=assignment)]), 3)
    assert s.error_code == 0
    return r.member_id, r.generation_id


def classic_leave(h, group, member):
    assert h.send(m.LeaveGroupRequest(group_id=group, member_id=member), 1).error_code == 0


def connect_hb(h, group, member, epoch):
    """A connect worker's heartbeat (epoch 0: joins with one connector "A"). -> its epoch."""
    kw = {}
    if epoch == 0:
        kw = dict(rebalance_timeout_ms=10_000, client_assignors=[
            m.ConnectGroupHeartbeatRequestAssignor(name="incremental-cooperative",
                                                   minimum_version=0, maximum_version=1,
                                                   version=1)],
            config_state=m.ConnectGroupHeartbeatRequestConfigState(
                config_offset=1, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
                    name="A", task_count=1)]))
    r = h.send(m.ConnectGroupHeartbeatRequest(group_id=group, member_id=member,
                                              member_epoch=epoch, **kw))
    assert r.error_code in (0, E.COMPUTE_ASSIGNMENT), r
    return r.member_epoch
