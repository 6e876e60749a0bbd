"""The group admin APIs' changes survive kill -9 (`groupcoord serve`, tests/serve_proc.py): a
deleted group stays deleted, deleted offsets stay deleted, an altered group config keeps its
value. Every response that depends on a write is sent after the write is durable, so what a
client was told before the kill is what the restarted node says."""
from serve_proc import RawClient, ServeProc
from groupcoord.protocol import messages as m

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"


def commit(c, group, parts):
    by = {}
    for (t, p), off in parts.items():
        by.setdefault(t, []).append(m.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=""))
    r = c.call(m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by.items()]), 8)
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r


def fetch(c, group) -> dict:
    r = c.call(m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(group_id=group,
                                                                      topics=None)]), 8)
    g = r.groups[0]
    assert g.error_code == 0, g
    return {(t.name, p.partition_index): p.committed_offset
            for t in g.topics for p in t.partitions}


def listed(c) -> dict:
    r = c.call(m.ListGroupsRequest(), 5)
    assert r.error_code == 0
    return {g.group_id: (g.group_type, g.group_state) for g in r.groups}


def group_configs(c, group) -> dict:
    r = c.call(m.DescribeConfigsRequest(resources=[m.DescribeConfigsRequestDescribeConfigsResource(
        resource_type=32, resource_name=group, configuration_keys=None)]), 4).results[0]
    assert r.error_code == 0, r
    return {x.name: (x.value, x.config_source) for x in r.configs}


def consumer_group_left_empty(c, group, topic):
    """A KIP-848 group whose one member joined and left: empty, with its records."""
    r = c.call(m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="m-1", member_epoch=0, rebalance_timeout_ms=10_000,
        subscribed_topic_names=[topic], topic_partitions=[]), 1)
    assert r.error_code == 0, r
    r = c.call(m.ConsumerGroupHeartbeatRequest(group_id=group, member_id="m-1",
                                               member_epoch=-1), 1)
    assert r.error_code == 0, r


def test_deleted_groups_offsets_and_altered_configs_survive_kill9(tmp_path):
    with ServeProc(tmp_path / "data", topics={"t": 2, "u": 1}, shards=4) as srv:
        with RawClient(srv.host, srv.port) as c:
            consumer_group_left_empty(c, "cons-gone", "t")
            commit(c, "cons-gone", {("t", 0): 7})
            commit(c, "gone", {("t", 0): 1, ("t", 1): 2})
            commit(c, "keep", {("t", 0): 3, ("u", 0): 4})
            assert {"cons-gone", "gone", "keep"} <= set(listed(c))
            r = c.call(m.DeleteGroupsRequest(groups_names=["gone", "cons-gone", "nope"]), 2)
            assert [(x.group_id, x.error_code) for x in r.results] == [
                ("gone", 0), ("cons-gone", 0), ("nope", 69)]
            r = c.call(m.OffsetDeleteRequest(group_id="keep", topics=[
                m.OffsetDeleteRequestTopic(name="u", partitions=[
                    m.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
            assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
            r = c.call(m.IncrementalAlterConfigsRequest(resources=[
                m.IncrementalAlterConfigsRequestAlterConfigsResource(
                    resource_type=32, resource_name=g, configs=[
                        m.IncrementalAlterConfigsRequestAlterableConfig(
                            name=SESSION, config_operation=0, value="50000")])
                for g in ("keep", "not-yet-a-group")]), 1)
            assert [x.error_code for x in r.responses] == [0, 0]
            before = (listed(c), fetch(c, "keep"), group_configs(c, "keep"))
        srv.restart(kill9=True)
        with RawClient(srv.host, srv.port) as c:
            groups = listed(c)
            assert "gone" not in groups and "cons-gone" not in groups
            assert fetch(c, "gone") == {} and fetch(c, "cons-gone") == {}
            assert fetch(c, "keep") == {("t", 0): 3}
            assert group_configs(c, "keep")[SESSION] == ("50000", 8)
            assert group_configs(c, "not-yet-a-group")[SESSION] == ("50000", 8)
            assert group_configs(c, "gone")[SESSION] == ("45000", 5)
            assert (groups, fetch(c, "keep"), group_configs(c, "keep")) == before
            # The settings apply to a group made after the restart: the node's heartbeat
            # interval until one is set, then the group's at the member's next heartbeat.
            r = c.call(m.ConsumerGroupHeartbeatRequest(
                group_id="not-yet-a-group", member_id="m-1", member_epoch=0,
                rebalance_timeout_ms=10_000, subscribed_topic_names=["t"],
                topic_partitions=[]), 1)
            assert r.error_code == 0 and r.heartbeat_interval_ms == 1000
            epoch = r.member_epoch
            r = c.call(m.IncrementalAlterConfigsRequest(resources=[
                m.IncrementalAlterConfigsRequestAlterConfigsResource(
                    resource_type=32, resource_name="not-yet-a-group", configs=[
                        m.IncrementalAlterConfigsRequestAlterableConfig(
                            name=HEARTBEAT, config_operation=0, value="2000")])]), 0)
            assert r.responses[0].error_code == 0
            r = c.call(m.ConsumerGroupHeartbeatRequest(
                group_id="not-yet-a-group", member_id="m-1", member_epoch=epoch), 1)
            assert r.error_code == 0 and r.heartbeat_interval_ms == 2000
