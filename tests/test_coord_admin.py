"""Group admin APIs (groups/admin.py) through the pure harness (tests/coord_harness.py:
every step is checked for purity, and every test ends with replay equality): DeleteGroups,
OffsetDelete, ListGroups v4/v5 filters, DescribeGroups of every group type, and the GROUP
resources of DescribeConfigs / IncrementalAlterConfigs. The expectations are Kafka 4's
(GroupCoordinatorShard.deleteGroups, OffsetMetadataManager.deleteOffsets,
GroupMetadataManager.listGroups/describeGroups, GroupConfig.validate, ConfigHelper)."""
import pytest

from coord_drivers import classic_join, classic_leave, committed, connect_hb
import coord_drivers as drivers
from coord_harness import Parked
from groupcoord.groups import admin
from groupcoord.groups.consumer import group as consumer
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import decode_record, encode_record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.shard import Shard, error_response
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

TOPICS = TopicCatalog.of(t=4, u=2, v=1)
LONG = 10_000_000
SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
GROUP = admin.GROUP_RESOURCE


def harness(coord, **cfg):
    kw = dict(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0,
              connect_session_timeout_ms=LONG)
    kw.update(cfg)
    return coord(config=ShardConfig(**kw), topics=TOPICS)


# ------------------------------------------------------------------------------ drivers
def commit(h, group, parts, gen=-1, member="", version=8):
    codes = drivers.commit(h, group, parts, gen, member, version, metadata="md")
    assert not any(codes.values()), codes


def consumer_hb(h, group, member, epoch, names=None, regex=None):
    r = h.send(m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=10_000,
        subscribed_topic_names=list(names) if names is not None else None,
        subscribed_topic_regex=regex,
        topic_partitions=[] if epoch == 0 else None), 1)
    assert r.error_code == 0, r
    return r


def delete_groups(h, *groups, version=2) -> list:
    r = h.send(m.DeleteGroupsRequest(groups_names=list(groups)), version)
    return [(x.group_id, x.error_code) for x in r.results]


def offset_delete(h, group, parts):
    """parts: {topic: [partitions]} -> (group error, {(topic, partition): error})."""
    r = h.send(m.OffsetDeleteRequest(group_id=group, topics=[
        m.OffsetDeleteRequestTopic(name=t, partitions=[
            m.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
        for t, ps in parts.items()]), 0)
    return r.error_code, {(t.name, p.partition_index): p.error_code
                          for t in r.topics for p in t.partitions}


def listed(h, version=5, states=(), types=()):
    r = h.send(m.ListGroupsRequest(states_filter=list(states), types_filter=list(types)),
               version)
    assert r.error_code == 0
    return [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in r.groups]


def restarted(h) -> Shard:
    """The shard a restart loads: the durable records replayed through their log bytes."""
    fresh = h.replayed()
    fresh.rearm(h.now)
    return fresh


# =========================================================================== DeleteGroups
def test_delete_groups_errors_and_empty_groups_of_every_type(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "classic-busy", ptype="custom")
    classic_join(h, "classic-left", ptype="custom")
    classic_leave(h, "classic-left", h.shard.group("classic-left").leader)
    commit(h, "simple", {("t", 0): 5})                 # an offsets-only classic group
    consumer_hb(h, "cons-busy", "m1", 0, names=["t"])
    consumer_hb(h, "cons-left", "m1", 0, names=["t"])
    consumer_hb(h, "cons-left", "m1", -1)
    connect_hb(h, "conn-busy", "w1", 0)
    connect_hb(h, "conn-left", "w1", 0)
    h.send(m.ConnectGroupHeartbeatRequest(group_id="conn-left", member_id="w1", member_epoch=-1))
    for g in ("classic-left", "cons-left", "conn-left"):
        assert h.shard.group(g).is_empty()
        commit(h, g, {("t", 0): 1, ("u", 1): 2})
    written = len(h.log)
    assert delete_groups(h, "nope", "classic-busy", "cons-busy", "conn-busy") == [
        ("nope", E.GROUP_ID_NOT_FOUND), ("classic-busy", E.NON_EMPTY_GROUP),
        ("cons-busy", E.NON_EMPTY_GROUP), ("conn-busy", E.NON_EMPTY_GROUP)]
    assert len(h.log) == written                       # refusals write nothing
    assert delete_groups(h, "classic-left", "simple", "cons-left", "conn-left") == [
        ("classic-left", 0), ("simple", 0), ("cons-left", 0), ("conn-left", 0)]
    for g in ("classic-left", "simple", "cons-left", "conn-left"):
        assert h.shard.group(g) is None and committed(h, g) == set()
    assert {g for g, *_ in listed(h)} == {"classic-busy", "cons-busy", "conn-busy"}
    # Gone for good: a fetch answers -1 as for any unknown offset, a second delete 69.
    resp = h.send(m.OffsetFetchRequest(group_id="classic-left", topics=[
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 5)
    assert resp.topics[0].partitions[0].committed_offset == -1
    assert delete_groups(h, "cons-left") == [("cons-left", E.GROUP_ID_NOT_FOUND)]
    # A restart replays the tombstones: still gone, the busy groups still there.
    fresh = restarted(h)
    assert set(fresh.groups) == {"classic-busy", "cons-busy", "conn-busy"}
    assert set(fresh.offsets) == set()


def test_delete_groups_writes_offset_tombstones_before_the_groups(coord):
    h = harness(coord)
    consumer_hb(h, "c", "m1", 0, names=["t"])
    consumer_hb(h, "c", "m1", -1)
    commit(h, "c", {("u", 1): 2, ("t", 0): 1})
    commit(h, "s", {("v", 0): 3})
    written = len(h.log)
    assert delete_groups(h, "c", "s", version=0) == [("c", 0), ("s", 0)]
    kinds = [(type(r.key).__name__, r.value) for r in h.log[written:]]
    assert kinds[:2] == [("OffsetCommitKey", None)] * 2
    assert kinds[2:-2] == [(k, None) for k, _ in kinds[2:-2]]      # the consumer group's
    assert kinds[-3] == ("ConsumerGroupMetadataKey", None)
    assert kinds[-2:] == [("OffsetCommitKey", None), ("GroupMetadataKey", None)]
    # A commit afterwards starts a new (simple) group from nothing.
    commit(h, "c", {("t", 0): 9})
    assert h.shard.group("c").TYPE == "classic" and committed(h, "c") == {("t", 0)}


def test_delete_groups_names_a_group_twice_deletes_it_once(coord):
    h = harness(coord)
    commit(h, "s", {("t", 0): 1})
    written = len(h.log)
    assert delete_groups(h, "s", "s", version=1) == [("s", 0), ("s", 0)]
    assert len(h.log) == written + 2                   # one offset, one group tombstone


def test_delete_groups_refuses_a_classic_group_with_a_join_on_its_way(coord):
    """MEMBER_ID_REQUIRED: the member comes back with its id; Group.deletion keeps the
    group meanwhile, and DeleteGroups calls that not empty."""
    h = harness(coord)
    commit(h, "g", {("t", 0): 1})
    r = h.send(m.JoinGroupRequest(group_id="g", session_timeout_ms=1_000_000,
                                  rebalance_timeout_ms=10_000, member_id="",
                                  protocol_type="consumer",
                                  protocols=[m.JoinGroupRequestProtocol(name="range",
                                                                        metadata=b"x")]), 5)
    assert r.error_code == E.MEMBER_ID_REQUIRED
    assert h.shard.group("g").is_empty()
    assert delete_groups(h, "g") == [("g", E.NON_EMPTY_GROUP)]


# =========================================================================== OffsetDelete
def test_offset_delete_group_level_errors(coord):
    h = harness(coord)
    assert offset_delete(h, "", {"t": [0]}) == (E.INVALID_GROUP_ID, {})
    assert offset_delete(h, "nope", {"t": [0]}) == (E.GROUP_ID_NOT_FOUND, {})
    mid, gen = classic_join(h, "custom", ptype="custom")
    commit(h, "custom", {("t", 0): 1}, gen=gen, member=mid)
    connect_hb(h, "conn", "w1", 0)
    for g in ("custom", "conn"):
        # Members that do not use the consumer protocol: Kafka's NON_EMPTY_GROUP.
        assert offset_delete(h, g, {"t": [0]}) == (E.NON_EMPTY_GROUP, {})
    assert committed(h, "custom") == {("t", 0)}


def test_offset_delete_classic_consumer_protocol_group(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "g", topics=["t"])
    commit(h, "g", {("t", 0): 1, ("t", 1): 1, ("u", 0): 1, ("u", 1): 1}, gen=gen, member=mid)
    written = len(h.log)
    code, parts = offset_delete(h, "g", {"t": [0, 1], "u": [0, 1], "v": [0]})
    assert code == 0
    assert parts == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("t", 1): E.GROUP_SUBSCRIBED_TO_TOPIC,
                     ("u", 0): 0, ("u", 1): 0, ("v", 0): 0}
    # Tombstones for the offsets that existed only (v/0 had none).
    assert [(r.key.topic, r.key.partition, r.value) for r in h.log[written:]] == [
        ("u", 0, None), ("u", 1, None)]
    assert committed(h, "g") == {("t", 0), ("t", 1)}
    assert h.shard.group("g").state_name() == "Stable"          # the group is untouched
    # The same partition twice in one request: one tombstone.
    commit(h, "g", {("u", 0): 2}, gen=gen, member=mid)
    written = len(h.log)
    assert offset_delete(h, "g", {"u": [0, 0]}) == (0, {("u", 0): 0})
    assert len(h.log) == written + 1
    # Once the member left, nothing is subscribed.
    classic_leave(h, "g", mid)
    assert offset_delete(h, "g", {"t": [0, 1]}) == (0, {("t", 0): 0, ("t", 1): 0})
    assert committed(h, "g") == set() and h.shard.group("g") is not None


def test_offset_delete_classic_group_with_unreadable_subscriptions_refuses_every_topic(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "g", metadata=b"\x00\x07garbage")
    commit(h, "g", {("u", 0): 1}, gen=gen, member=mid)
    assert offset_delete(h, "g", {"u": [0]}) == (0, {("u", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})


def test_offset_delete_consumer_group_by_names_and_regex(coord):
    h = harness(coord)
    e = consumer_hb(h, "c", "m1", 0, names=["t"]).member_epoch
    consumer_hb(h, "c", "m2", 0, regex="^v$")
    commit(h, "c", {("t", 0): 1, ("u", 0): 1, ("v", 0): 1}, gen=e, member="m1", version=9)
    code, parts = offset_delete(h, "c", {"t": [0], "u": [0], "v": [0]})
    assert (code, parts) == (0, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0,
                                 ("v", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})
    assert committed(h, "c") == {("t", 0), ("v", 0)}
    assert e >= 1 and h.shard.group("c").state_name() != "Empty"
    # Any state will do for a consumer group; once empty every offset may go.
    consumer_hb(h, "c", "m1", -1)
    consumer_hb(h, "c", "m2", -1)
    assert offset_delete(h, "c", {"t": [0], "v": [0]}) == (0, {("t", 0): 0, ("v", 0): 0})
    assert committed(h, "c") == set()


def test_offset_delete_empty_connect_group(coord):
    h = harness(coord)
    connect_hb(h, "conn", "w1", 0)
    h.send(m.ConnectGroupHeartbeatRequest(group_id="conn", member_id="w1", member_epoch=-1))
    commit(h, "conn", {("t", 2): 1})
    assert offset_delete(h, "conn", {"t": [2]}) == (0, {("t", 2): 0})
    assert committed(h, "conn") == set()
    # Restart: the deleted offset stays deleted.
    assert "conn" not in restarted(h).offsets


# ============================================================================= ListGroups
def test_list_groups_state_and_type_filters(coord):
    h = harness(coord)
    classic_join(h, "a-classic", ptype="custom")
    commit(h, "b-simple", {("t", 0): 1})
    consumer_hb(h, "c-consumer", "m1", 0, names=["t"])
    connect_hb(h, "d-connect", "w1", 0)
    every = listed(h)
    assert [(g, t, p) for g, t, _s, p in every] == [
        ("a-classic", "classic", "custom"), ("b-simple", "classic", ""),
        ("c-consumer", "consumer", "consumer"), ("d-connect", "connect", "connect")]
    states = {g: s for g, _t, s, _p in every}
    assert states["a-classic"] == "Stable" and states["b-simple"] == "Empty"
    # States: case-insensitive and trimmed, as Kafka matches them.
    assert [g for g, *_ in listed(h, 4, states=[" STABLE ", "empty"])] == [
        g for g in ("a-classic", "b-simple", "c-consumer", "d-connect")
        if states[g] in ("Stable", "Empty")]
    # Types: case-insensitive; an unknown type matches nothing; both filters combine.
    assert [g for g, *_ in listed(h, types=["Classic"])] == ["a-classic", "b-simple"]
    assert [g for g, *_ in listed(h, types=["CONSUMER", "connect"])] == [
        "c-consumer", "d-connect"]
    assert listed(h, types=["share"]) == []
    assert [g for g, *_ in listed(h, states=["Empty"], types=["classic"])] == ["b-simple"]
    # Versions before the filters ignore them (the fields do not exist there).
    assert len(listed(h, 3, states=["Dead"], types=["share"])) == 4
    assert len(listed(h, 4, states=["Stable"], types=["share"])) == len(
        [g for g in states.values() if g == "Stable"])


# ========================================================================= DescribeGroups
def test_describe_classic_group_members(coord):
    h = harness(coord)
    meta = embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=["t"]))
    mid, gen = classic_join(h, "g", topics=["t"], instance="i-1")
    d = h.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert (d.error_code, d.group_id, d.group_state, d.protocol_type, d.protocol_data) == (
        0, "g", "Stable", "consumer", "range")
    assert [(x.member_id, x.group_instance_id, x.client_host, x.member_metadata,
             x.member_assignment) for x in d.members] == [(mid, "i-1", "", meta, b"A")]
    assert d.authorized_operations == -2**31                  # not asked for
    d = h.send(m.DescribeGroupsRequest(groups=["g"], include_authorized_operations=True),
               6).groups[0]
    assert d.authorized_operations == admin.GROUP_OPERATIONS and d.error_message is None
    # While rebalancing: members without metadata and assignment, no protocol (Kafka's).
    r = h.send(m.JoinGroupRequest(group_id="g", session_timeout_ms=1_000_000,
                                  rebalance_timeout_ms=10_000, member_id="",
                                  group_instance_id="i-2", protocol_type="consumer",
                                  protocols=[m.JoinGroupRequestProtocol(name="range",
                                                                        metadata=meta)]), 5)
    assert isinstance(r, Parked)
    d = h.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert (d.group_state, d.protocol_data) == ("PreparingRebalance", "")
    assert all(x.member_metadata == b"" and x.member_assignment == b"" for x in d.members)


def test_describe_groups_unknown_and_offsets_only_by_version(coord):
    h = harness(coord)
    commit(h, "s", {("t", 0): 1})
    req = m.DescribeGroupsRequest(groups=["nope", "s"], include_authorized_operations=True)
    for v in (0, 3, 5):
        out = h.send(req, v).groups
        assert [(d.group_id, d.error_code, d.group_state, d.protocol_type, d.members)
                for d in out] == [("nope", 0, "Dead", "", []), ("s", 0, "Empty", "", [])]
        assert all(d.authorized_operations == (admin.GROUP_OPERATIONS if v >= 3 else -2**31)
                   for d in out)
    out = h.send(req, 6).groups
    assert [(d.group_id, d.error_code, d.error_message, d.group_state) for d in out] == [
        ("nope", E.GROUP_ID_NOT_FOUND, "Group nope not found.", "Dead"), ("s", 0, None, "Empty")]
    # Errors carry no authorized operations (Kafka sets them on described groups only).
    assert [d.authorized_operations for d in out] == [-2**31, admin.GROUP_OPERATIONS]


def as_client(h, req, version, client_id, host):
    """A request from a named client (the harness sends with empty ones)."""
    res = h._pure(lambda: h.shard.handle(req, h.now, version, client_id, host))
    h._apply(res)
    return res.response


def member_hb(h, member, epoch, owned=None, **kw):
    """A KIP-848 heartbeat from client app-<n> at 10.0.0.<n> (n: the member id's digit)."""
    n = member[-1]
    r = as_client(h, m.ConsumerGroupHeartbeatRequest(
        group_id="c", member_id=member, member_epoch=epoch, rebalance_timeout_ms=10_000,
        topic_partitions=None if owned is None else [
            m.ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=TOPICS.get(t).topic_id, partitions=ps) for t, ps in owned.items()],
        **kw), 1, "app-" + n, "10.0.0." + n)
    assert r.error_code == 0, r
    return r


def decoded(d):
    """DescribeGroups members -> {member id: (instance id, client id, host, (subscription
    version, topics, owned, generation, rack, user data), (assignment version, assigned,
    user data))}, the bytes decoded with ConsumerProtocol."""
    out = {}
    for x in d.members:
        sv, sub = embedded.decode_subscription(x.member_metadata)
        av, asg = embedded.decode_assignment(x.member_assignment)
        out[x.member_id] = (
            x.group_instance_id, x.client_id, x.client_host,
            (sv, sub.topics, {t.topic: t.partitions for t in sub.owned_partitions},
             sub.generation_id, sub.rack_id, sub.user_data),
            (av, {t.topic: t.partitions for t in asg.assigned_partitions}, asg.user_data))
    return out


def test_describe_consumer_group_in_classic_terms(coord):
    h = harness(coord)
    member_hb(h, "m1", 0, owned={}, instance_id="i-1", rack_id="r1",
              subscribed_topic_names=["t", "zz"], server_assignor="range")
    member_hb(h, "m1", 1, owned={"t": [0, 1, 2, 3]})
    d = h.send(m.DescribeGroupsRequest(groups=["c"]), 5).groups[0]
    assert (d.error_code, d.group_id, d.group_state, d.protocol_type, d.protocol_data) == (
        0, "c", "Stable", "consumer", "range")
    assert decoded(d) == {"m1": ("i-1", "app-1", "10.0.0.1",
                                 (3, ["t", "zz"], {"t": [0, 1, 2, 3]}, 1, "r1", None),
                                 (3, {"t": [0, 1, 2, 3]}, None))}
    # m2 subscribes by regex (the catalog topics it matches); m1 must give up t-2 and t-3:
    # it still owns them (pending revocation) but they are no longer assigned to it.
    member_hb(h, "m2", 0, owned={}, subscribed_topic_regex="t|u")
    member_hb(h, "m1", 1, owned={"t": [0, 1, 2, 3]})
    d = h.send(m.DescribeGroupsRequest(groups=["c"], include_authorized_operations=True),
               6).groups[0]
    assert (d.error_code, d.error_message, d.group_state, d.protocol_data,
            d.authorized_operations) == (0, None, "Reconciling", "range", admin.GROUP_OPERATIONS)
    assert decoded(d) == {
        "m1": ("i-1", "app-1", "10.0.0.1", (3, ["t", "zz"], {"t": [0, 1, 2, 3]}, 1, "r1", None),
               (3, {"t": [0, 1]}, None)),
        "m2": (None, "app-2", "10.0.0.2", (3, ["t", "u"], {"u": [0, 1]}, 2, None, None),
               (3, {"u": [0, 1]}, None))}
    # The same group as ConsumerGroupDescribe shows it: state, assignor, assignments.
    cd = h.send(m.ConsumerGroupDescribeRequest(group_ids=["c"]), 1).groups[0]
    assert (cd.group_state, cd.assignor_name) == (d.group_state, d.protocol_data)
    assert {x.member_id: {t.topic_name: t.partitions for t in x.assignment.topic_partitions}
            for x in cd.members} == {k: v[4][1] for k, v in decoded(d).items()}
    # The bytes are the same at every version.
    d0 = h.send(m.DescribeGroupsRequest(groups=["c"]), 0).groups[0]
    assert [(x.member_metadata, x.member_assignment) for x in d0.members] == [
        (x.member_metadata, x.member_assignment) for x in d.members]
    assert listed(h)[0][:3] == ("c", "consumer", d.group_state)
    # Empty: no members, the assignor the group would use.
    for mid in ("m1", "m2"):
        member_hb(h, mid, -1)
    d = h.send(m.DescribeGroupsRequest(groups=["c"]), 6).groups[0]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data, d.members) == (
        0, "Empty", "consumer", "uniform", [])


def test_describe_consumer_group_classic_member_keeps_its_own_metadata(coord):
    h = harness(coord)
    # A classic member with a v1 subscription upgrades to a consumer group when m2 joins.
    sub = embedded.encode_subscription(m.ConsumerProtocolSubscription(
        topics=["t"], user_data=b"ud", owned_partitions=[]), 1)
    own = embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic="t", partitions=[0, 1, 2, 3])]), 1)
    cid, _ = classic_join(h, "c", metadata=sub, assignment=own)
    member_hb(h, "m2", 0, owned={}, subscribed_topic_names=["t"])
    g = h.shard.groups["c"]
    assert g.TYPE == "consumer" and g.members[cid].meta.classic_member_metadata is not None
    d = h.send(m.DescribeGroupsRequest(groups=["c"]), 5).groups[0]
    assert (d.group_state, d.protocol_type, d.protocol_data) == (
        "Reconciling", "consumer", "uniform")
    by = {x.member_id: x for x in d.members}
    # Its JoinGroup bytes, and its assignment in their version (what its SyncGroup gets).
    assert by[cid].member_metadata == sub
    assert embedded.decode_assignment(by[cid].member_assignment) == (
        1, m.ConsumerProtocolAssignment(assigned_partitions=[
            m.ConsumerProtocolAssignmentTopicPartition(topic="t", partitions=[0, 1, 2, 3])]))
    assert decoded(d)["m2"][3][:2] == (3, ["t"])


def test_describe_connect_group_classic_worker_keeps_its_own_metadata(coord):
    from test_coord_connect import ICA
    from test_coord_migration_connect import held, upgraded
    h, _, ids = upgraded(coord, version=1)
    d = h.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0, "Stable", "connect", ICA)
    by = {x.member_id: x for x in d.members}
    assert sorted(by) == sorted(ids + ["N1"])
    holds = held(h)
    g = h.shard.groups["g"]
    for mid in ids:
        x = by[mid]
        # What it offered in its last JoinGroup ("compatible", v1, with its allocation).
        assert x.member_metadata == bytes(
            g.members[mid].classic_member_metadata.supported_protocols[0].metadata)
        v, md = embedded.decode_connect_metadata(x.member_metadata)
        assert (v, md.url) == (1, "http://" + mid)
        v, a = embedded.decode_connect_assignment(x.member_assignment)
        assert (v, a.leader, a.leader_url, a.config_offset, a.revoked) == (
            1, "N1", "", 1, [])
        assert sorted(("%sC0" % c.connector) if t == -1 else "%sT%d" % (c.connector, t + 1)
                      for c in a.assignment for t in c.tasks) == holds[mid]
    v, md = embedded.decode_connect_metadata(by["N1"].member_metadata)
    assert (v, md.config_offset) == (1, 1)


# ======================================================================== group configs
def describe_configs(h, name, keys=None, version=4, synonyms=False, docs=False,
                     rtype=GROUP):
    r = h.send(m.DescribeConfigsRequest(resources=[m.DescribeConfigsRequestDescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=keys)],
        include_synonyms=synonyms, include_documentation=docs), version).results
    assert len(r) == 1 and r[0].resource_name == name and r[0].resource_type == rtype
    return r[0]


def configs_of(res) -> dict:
    return {c.name: (c.value, c.config_source) for c in res.configs}


def alter(h, name, *ops, version=1, validate_only=False, rtype=GROUP):
    """ops: (config name, operation, value) -> (error code, message)."""
    r = h.send(m.IncrementalAlterConfigsRequest(resources=[
        m.IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=rtype, resource_name=name, configs=[
                m.IncrementalAlterConfigsRequestAlterableConfig(name=n, config_operation=o,
                                                                value=v)
                for n, o, v in ops])], validate_only=validate_only), version).responses
    assert len(r) == 1 and (r[0].resource_type, r[0].resource_name) == (rtype, name)
    return r[0].error_code, r[0].error_message


def test_describe_group_configs_defaults_and_overrides(coord):
    h = harness(coord, consumer_session_timeout_ms=50_000, consumer_heartbeat_interval_ms=6_000)
    res = describe_configs(h, "any-group")                 # no group needed, as in Kafka
    assert (res.error_code, res.error_message) == (0, None)
    assert configs_of(res) == {HEARTBEAT: ("6000", 5), SESSION: ("50000", 5)}
    assert all(c.config_type == 3 and not c.read_only and not c.is_sensitive
               and c.synonyms == [] and c.documentation is None for c in res.configs)
    assert alter(h, "any-group", (SESSION, 0, "55000")) == (0, None)
    res = describe_configs(h, "any-group", synonyms=True, docs=True)
    assert configs_of(res) == {HEARTBEAT: ("6000", 5), SESSION: ("55000", 8)}
    by = {c.name: c for c in res.configs}
    assert [(s.name, s.value, s.source) for s in by[SESSION].synonyms] == [
        (SESSION, "55000", 8)]
    assert by[SESSION].documentation and by[HEARTBEAT].documentation
    # Keys filter (unknown keys are left out); v1 has no documentation field.
    res = describe_configs(h, "any-group", keys=[SESSION, "nope"], version=1, docs=True)
    assert configs_of(res) == {SESSION: ("55000", 8)}
    assert configs_of(describe_configs(h, "other")) == {HEARTBEAT: ("6000", 5),
                                                        SESSION: ("50000", 5)}


def test_describe_configs_refuses_other_resources_and_an_empty_name(coord):
    h = harness(coord)
    for rtype, word in ((2, "TOPIC"), (4, "BROKER"), (8, "BROKER_LOGGER"),
                        (16, "CLIENT_METRICS")):
        res = describe_configs(h, "t" if rtype == 2 else "0", rtype=rtype)
        assert res.error_code == E.INVALID_REQUEST and word in res.error_message
        assert res.configs == []
    res = describe_configs(h, "x", rtype=99)
    assert (res.error_code, res.error_message) == (E.INVALID_REQUEST,
                                                   "Unsupported resource type: 99")
    res = describe_configs(h, "")
    assert (res.error_code, res.error_message) == (E.INVALID_REQUEST,
                                                   "Group name must not be empty")


@pytest.mark.parametrize("ops, code, message", [
    ([("nope", 0, "1")], E.INVALID_CONFIG, "Unknown group config name: nope"),
    ([(SESSION, 0, "abc")], E.INVALID_CONFIG,
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type "
     "INT"),
    ([(SESSION, 0, "5_0000")], E.INVALID_CONFIG, None),
    ([(SESSION, 0, "99999999999")], E.INVALID_CONFIG, None),
    ([(HEARTBEAT, 0, "0")], E.INVALID_CONFIG,
     "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least "
     "1"),
    ([(HEARTBEAT, 0, "4999")], E.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms (5000)"),
    ([(HEARTBEAT, 0, "15001")], E.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be less than or equal to "
     "group.consumer.max.heartbeat.interval.ms (15000)"),
    ([(SESSION, 0, "44999")], E.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to "
     "group.consumer.min.session.timeout.ms (45000)"),
    ([(SESSION, 0, "60001")], E.INVALID_CONFIG,
     "consumer.session.timeout.ms must be less than or equal to "
     "group.consumer.max.session.timeout.ms (60000)"),
    ([(SESSION, 2, "50000")], E.INVALID_CONFIG,
     "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
    ([(SESSION, 3, "50000")], E.INVALID_CONFIG,
     "Can't SUBTRACT to key consumer.session.timeout.ms because its type is not LIST."),
    ([(SESSION, 7, "50000")], E.INVALID_REQUEST, "Unknown operation type 7"),
    ([(SESSION, 0, "50000"), (SESSION, 1, None)], E.INVALID_REQUEST,
     "Error due to duplicate config keys"),
    ([(SESSION, 0, None)], E.INVALID_REQUEST,
     "Null value not supported for : consumer.session.timeout.ms"),
])
def test_alter_group_config_refusals(coord, ops, code, message):
    h = harness(coord)
    got = alter(h, "g", *ops)
    assert got[0] == code and (message is None or got[1] == message), got
    assert h.log == [] and h.shard.group_configs == {}


def test_alter_group_config_session_must_exceed_heartbeat(coord):
    h = harness(coord, consumer_min_session_timeout_ms=1_000,
                consumer_max_heartbeat_interval_ms=50_000)
    assert alter(h, "g", (HEARTBEAT, 0, "45000")) == (
        E.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than "
                          "consumer.heartbeat.interval.ms (45000 <= 45000)")
    assert alter(h, "g", (HEARTBEAT, 0, "45000"), (SESSION, 0, "46000")) == (0, None)


def test_alter_group_config_request_level_refusals(coord):
    h = harness(coord)
    r = h.send(m.IncrementalAlterConfigsRequest(resources=[
        m.IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=GROUP, resource_name=n, configs=[
                m.IncrementalAlterConfigsRequestAlterableConfig(
                    name=SESSION, config_operation=0, value="50000")])
        for n in ("a", "b", "a")]), 1).responses
    assert [(x.resource_name, x.error_code, x.error_message) for x in r] == [
        ("a", E.INVALID_REQUEST, "Each resource must appear at most once."),
        ("b", 0, None),
        ("a", E.INVALID_REQUEST, "Each resource must appear at most once.")]
    assert alter(h, "", (SESSION, 0, "50000")) == (
        E.INVALID_REQUEST, "Default group resources are not allowed.")
    code, msg = alter(h, "t", ("retention.ms", 0, "1"), rtype=2)
    assert code == E.INVALID_REQUEST and "TOPIC" in msg
    code, msg = alter(h, "x" * 2000, (SESSION, 0, "50000"))
    assert code == E.INVALID_GROUP_ID and "name.max.bytes" in msg
    assert set(h.shard.group_configs) == {"b"}


def test_alter_group_config_records_validate_only_and_delete(coord):
    h = harness(coord)
    assert alter(h, "g", (SESSION, 0, "50000"), validate_only=True, version=0) == (0, None)
    assert h.log == [] and h.shard.group_configs == {}
    assert alter(h, "g", (SESSION, 0, " 50000 "), (HEARTBEAT, 0, "+6000")) == (0, None)
    assert h.shard.group_configs == {"g": {SESSION: 50000, HEARTBEAT: 6000}}
    rec = h.log[-1]
    assert rec.type.name == "GROUP_CONFIG" and rec.key.group_id == "g"
    assert [(c.name, c.value) for c in rec.value.configs] == [(HEARTBEAT, "6000"),
                                                              (SESSION, "50000")]
    # The same values again: nothing to write. Deleting an unset key: neither.
    n = len(h.log)
    assert alter(h, "g", (SESSION, 0, "50000")) == (0, None)
    assert alter(h, "g", (SESSION, 0, "50000"), (HEARTBEAT, 0, "6000")) == (0, None)
    assert len(h.log) == n
    # Deleting a key that is not set (known or not) changes nothing (Kafka validates the
    # resulting set, which does not hold it).
    assert alter(h, "g", ("nope", 1, None)) == (0, None)
    assert len(h.log) == n
    assert alter(h, "g", (HEARTBEAT, 1, None)) == (0, None)
    assert h.shard.group_configs == {"g": {SESSION: 50000}}
    assert alter(h, "g", (SESSION, 1, "ignored")) == (0, None)
    assert h.shard.group_configs == {} and h.log[-1].value is None          # a tombstone
    assert len(h.log) == n + 2


def test_alter_group_config_bounds_widen_to_the_node_default(coord):
    """This node accepts defaults outside Kafka's bounds; a group can be given them back."""
    h = harness(coord, consumer_session_timeout_ms=3_000, consumer_heartbeat_interval_ms=200)
    assert alter(h, "g", (SESSION, 0, "3000"), (HEARTBEAT, 0, "200")) == (0, None)
    assert alter(h, "g", (SESSION, 0, "2999"))[0] == E.INVALID_CONFIG
    assert alter(h, "g", (HEARTBEAT, 0, "199"))[0] == E.INVALID_CONFIG
    assert alter(h, "g", (SESSION, 0, "60000"), (HEARTBEAT, 0, "15000")) == (0, None)


def test_group_configs_are_bounded_like_groups(coord):
    h = harness(coord, shard_max_groups=2)
    assert alter(h, "a", (SESSION, 0, "50000")) == (0, None)
    assert alter(h, "b", (SESSION, 0, "50000")) == (0, None)
    code, msg = alter(h, "c", (SESSION, 0, "50000"))
    assert code == E.POLICY_VIOLATION and "shard.max.groups" in msg
    assert alter(h, "a", (SESSION, 0, "51000")) == (0, None)       # existing: fine
    assert alter(h, "a", (SESSION, 1, None)) == (0, None)
    assert alter(h, "c", (SESSION, 0, "50000")) == (0, None)       # room again


def test_group_config_applies_to_live_members_at_their_next_heartbeat(coord):
    h = harness(coord)
    r = consumer_hb(h, "c", "m1", 0, names=["t"])
    assert r.heartbeat_interval_ms == 5_000
    epoch = r.member_epoch
    key = TimerKey(consumer.SESSION_TIMER, "c", "m1")
    assert h.shard.timers.get(key) == h.now + 45_000
    h.now = 1_000
    assert alter(h, "c", (SESSION, 0, "52000"), (HEARTBEAT, 0, "7000")) == (0, None)
    assert h.shard.timers.get(key) == 45_000           # armed before: unchanged
    r = consumer_hb(h, "c", "m1", epoch)                # the steady-heartbeat path
    assert (r.error_code, r.heartbeat_interval_ms) == (0, 7_000)
    assert h.shard.timers.get(key) == 1_000 + 52_000
    h.now = 2_000
    r = consumer_hb(h, "c", "m2", 0, names=["t"])       # the general path
    assert r.heartbeat_interval_ms == 7_000
    assert h.shard.timers.get(TimerKey(consumer.SESSION_TIMER, "c", "m2")) == 2_000 + 52_000
    # A restart re-arms every member's session with the group's timeout...
    h.now = 3_000
    fresh = restarted(h)
    assert fresh.group_configs == {"c": {SESSION: 52_000, HEARTBEAT: 7_000}}
    assert fresh.timers.get(key) == 3_000 + 52_000
    # ...also when the setting was made before the group existed.
    assert alter(h, "later", (SESSION, 0, "58000")) == (0, None)
    consumer_hb(h, "later", "m1", 0, names=["u"])
    fresh = restarted(h)
    assert fresh.timers.get(TimerKey(consumer.SESSION_TIMER, "later", "m1")) == 3_000 + 58_000
    # Back to the node's values once deleted.
    assert alter(h, "c", (SESSION, 1, None), (HEARTBEAT, 1, None)) == (0, None)
    h.now = 4_000
    r = consumer_hb(h, "c", "m1", h.shard.group("c").members["m1"].a.epoch)
    assert r.heartbeat_interval_ms == 5_000 and h.shard.timers.get(key) == 4_000 + 45_000


def test_deleting_a_group_keeps_its_settings(coord):
    """Kafka keeps group configs apart from the group: DeleteGroups does not touch them."""
    h = harness(coord)
    commit(h, "g", {("t", 0): 1})
    assert alter(h, "g", (SESSION, 0, "50000")) == (0, None)
    assert delete_groups(h, "g") == [("g", 0)]
    assert h.shard.group_configs == {"g": {SESSION: 50000}}
    assert restarted(h).group_configs == {"g": {SESSION: 50000}}


def test_group_config_record_round_trips_and_ignores_unknown_names(coord):
    h = harness(coord)
    rec_bytes = encode_record(admin._config_record("g", {SESSION: 50_000}))
    assert decode_record(*rec_bytes) == admin._config_record("g", {SESSION: 50_000})
    newer = admin.Record(m.GroupConfigKey(group_id="g"), m.GroupConfigValue(configs=[
        m.GroupConfigValueConfig(name="consumer.future.setting", value="x"),
        m.GroupConfigValueConfig(name=SESSION, value="50000")]))
    h.shard.replay(newer)
    assert h.shard.group_configs == {"g": {SESSION: 50_000}}
    h.shard.replay(admin.Record(m.GroupConfigKey(group_id="g"), None))
    assert h.shard.group_configs == {}


# ===================================================== the runtime's errors for these APIs
def test_error_responses_name_every_group_and_resource():
    dg = error_response(m.DeleteGroupsRequest(groups_names=["a", "b"]), 2,
                        E.COORDINATOR_LOAD_IN_PROGRESS)
    assert [(r.group_id, r.error_code) for r in dg.results] == [
        ("a", E.COORDINATOR_LOAD_IN_PROGRESS), ("b", E.COORDINATOR_LOAD_IN_PROGRESS)]
    od = error_response(m.OffsetDeleteRequest(group_id="a"), 0, E.NOT_COORDINATOR)
    assert od.error_code == E.NOT_COORDINATOR
    res = [m.DescribeConfigsRequestDescribeConfigsResource(resource_type=32, resource_name="a")]
    dc = error_response(m.DescribeConfigsRequest(resources=res), 4,
                        E.COORDINATOR_NOT_AVAILABLE, "why")
    assert [(r.resource_name, r.error_code, r.error_message) for r in dc.results] == [
        ("a", E.COORDINATOR_NOT_AVAILABLE, "why")]
    ia = error_response(m.IncrementalAlterConfigsRequest(resources=[
        m.IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=32,
                                                             resource_name="a")]), 1,
        E.COORDINATOR_NOT_AVAILABLE)
    assert [(r.resource_name, r.error_code) for r in ia.responses] == [
        ("a", E.COORDINATOR_NOT_AVAILABLE)]
