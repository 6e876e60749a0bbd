"""Offsets retention and expiry of empty groups (offsets.py, "Retention"), through the pure
harness (tests/coord_harness.py: every step is checked for purity, and every test ends with
replay equality). Kafka's rules (KIP-211, OffsetMetadataManager.cleanupExpiredOffsets,
GroupCoordinatorShard.cleanupGroupMetadata): offsets of a group without members expire
retention after the later of their commit and the group becoming empty; a group with members
loses only offsets of topics it no longer subscribes to, from their commit; an empty group
without offsets is deleted by tombstones."""
import os
import random

import pytest

from coord_drivers import classic_leave, commit, committed, connect_hb
import coord_drivers as drivers
from groupcoord.groups import offsets
from groupcoord.groups.connect import group as connect
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import decode_record, encode_record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

R = 60_000              # offsets retention in these tests
I = 1_000               # check interval
LONG = 1_000_000        # sessions that outlive every test
KEY = TimerKey(offsets.RETENTION, "")
TOPICS = TopicCatalog.of(t=4, u=2)


def harness(coord, **cfg):
    """A shard loaded (empty) at time 0: the retention check is armed as after any load."""
    kw = dict(group_initial_rebalance_delay_ms=0, offsets_retention_ms=R,
              offsets_retention_check_interval_ms=I, consumer_session_timeout_ms=LONG,
              connect_session_timeout_ms=LONG)
    kw.update(cfg)
    h = coord(config=ShardConfig(**kw), topics=TOPICS)
    h.shard.rearm(h.now)
    return h


def advance_to(h, t):
    assert t >= h.now
    h.advance(t - h.now)


def listed(h) -> set:
    return {g.group_id for g in h.send(m.ListGroupsRequest(), 5).groups}


def compacted_replay(h) -> Shard:
    """A shard rebuilt from what compaction keeps of the harness log (the last record of each
    key, tombstones included, in log order): it must equal the live shard too."""
    last = {}
    for i, rec in enumerate(h.log):
        last[encode_record(rec)[0]] = i
    fresh = Shard(h.config, h.shard.topics, strict=True)
    for i in sorted(last.values()):
        fresh.replay(decode_record(*encode_record(h.log[i])))
    return fresh


# ------------------------------------------------------------------------------ members
def classic_join(h, group, topics=None, ptype="consumer", metadata=b"x"):
    return drivers.classic_join(h, group, topics=topics, ptype=ptype, metadata=metadata,
                                assignment=b"", session_timeout_ms=LONG)


def consumer_hb(h, group, member, epoch, names=(), regex=None):
    r = h.send(m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=10_000,
        subscribed_topic_names=list(names) if epoch == 0 else None,
        subscribed_topic_regex=regex if epoch == 0 else None,
        topic_partitions=[] if epoch == 0 else None), 1)
    assert r.error_code == 0, r
    return r.member_epoch


def test_the_check_is_armed_after_load_and_rearms_itself(coord):
    h = harness(coord)
    assert h.shard.timers.get(KEY) == I
    for n in range(1, 4):
        h.advance(I)
        assert h.shard.timers.get(KEY) == (n + 1) * I          # every interval, forever
    assert h.log == []                      # a check with nothing to do writes nothing


# ------------------------------------------------------------------------------ simple groups
def test_simple_group_offsets_expire_from_their_commit_then_the_group_is_deleted(coord):
    h = harness(coord)
    h.now = 500
    assert commit(h, "s", {("t", 0): 5, ("t", 1): 6}) == {("t", 0): 0, ("t", 1): 0}
    # Due at 500 + R; the first check at or after it runs at 61,000.
    advance_to(h, 60_999)
    assert committed(h, "s") == {("t", 0), ("t", 1)} and "s" in listed(h)
    written = len(h.log)
    advance_to(h, 61_000)
    assert committed(h, "s") == set() and h.shard.group("s") is None and "s" not in listed(h)
    # Offset tombstones first, then the group's (Kafka's cleanupGroupMetadata).
    assert [(type(r.key).__name__, r.value) for r in h.log[written:]] == [
        ("OffsetCommitKey", None), ("OffsetCommitKey", None), ("GroupMetadataKey", None)]
    # Fetch answers -1 like any unknown offset; a new commit starts the group afresh.
    resp = h.send(m.OffsetFetchRequest(group_id="s", topics=[
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 5)
    assert resp.topics[0].partitions[0].committed_offset == -1
    assert commit(h, "s", {("t", 0): 7}) == {("t", 0): 0}
    assert committed(h, "s") == {("t", 0)}
    assert compacted_replay(h).snapshot() == h.shard.snapshot()


def test_a_fresh_commit_restarts_the_retention_of_its_offset_only(coord):
    h = harness(coord)
    commit(h, "s", {("t", 0): 1, ("t", 1): 1})
    h.now = 30_000
    commit(h, "s", {("t", 1): 2})
    advance_to(h, R)
    assert committed(h, "s") == {("t", 1)}
    advance_to(h, 30_000 + R)
    assert committed(h, "s") == set() and h.shard.group("s") is None


# ------------------------------------------------------------------------------ classic
def test_classic_group_keeps_offsets_while_it_has_members(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "g", ptype="custom")
    assert commit(h, "g", {("t", 0): 1, ("old", 0): 1}, gen=gen, member=mid) == {
        ("t", 0): 0, ("old", 0): 0}
    advance_to(h, 3 * R)
    assert committed(h, "g") == {("t", 0), ("old", 0)}
    assert h.shard.group("g").state_name() == "Stable"


def test_classic_retention_counts_from_the_group_becoming_empty_or_a_later_commit(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "g", ptype="custom")
    commit(h, "g", {("t", 0): 1}, gen=gen, member=mid)
    left = h.now = 2 * R + 250
    classic_leave(h, "g", mid)
    g = h.shard.group("g")
    assert g.state_name() == "Empty" and g.empty_since() == left
    h.now = left + R // 2
    assert commit(h, "g", {("t", 1): 2}) == {("t", 1): 0}      # an admin commit, later
    advance_to(h, left + R - 1)
    assert committed(h, "g") == {("t", 0), ("t", 1)}
    advance_to(h, left + R + I)                 # the check after left + R
    assert committed(h, "g") == {("t", 1)} and h.shard.group("g") is not None
    advance_to(h, left + R // 2 + R + I)
    assert committed(h, "g") == set() and h.shard.group("g") is None
    assert compacted_replay(h).snapshot() == h.shard.snapshot()


def test_stable_classic_consumer_group_loses_offsets_of_topics_it_no_longer_subscribes(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "good", topics=["t"])
    commit(h, "good", {("t", 0): 1, ("old", 0): 1}, gen=gen, member=mid)
    # The same protocol type with metadata that is not a subscription: unknown, all kept.
    bmid, bgen = classic_join(h, "bad", metadata=b"not a subscription")
    commit(h, "bad", {("t", 0): 1, ("old", 0): 1}, gen=bgen, member=bmid)
    advance_to(h, R)
    assert committed(h, "good") == {("t", 0)}
    assert committed(h, "bad") == {("t", 0), ("old", 0)}
    assert h.shard.group("good").state_name() == "Stable"          # members: never deleted
    advance_to(h, 3 * R)
    assert committed(h, "good") == {("t", 0)}


# ------------------------------------------------------------------------------ consumer
def test_consumer_group_expires_unsubscribed_topics_then_everything_once_empty(coord):
    h = harness(coord)
    e1 = consumer_hb(h, "cg", "m1", 0, names=["t"])
    consumer_hb(h, "cg", "m2", 0, regex="u.*")
    commit(h, "cg", {("t", 0): 1, ("u", 0): 1, ("ux", 0): 1, ("old", 0): 1},
           gen=e1, member="m1", version=9)
    advance_to(h, R)
    # "t" by name, "u" (a catalog topic) and "ux" (none) by the regex: subscribed, kept.
    assert committed(h, "cg") == {("t", 0), ("u", 0), ("ux", 0)}
    h.now = 2 * R + 100
    consumer_hb(h, "cg", "m1", -1)
    consumer_hb(h, "cg", "m2", -1)
    assert h.shard.group("cg").state_name() == "Empty"
    written = len(h.log)
    # Kafka counts a consumer group's retention from the commit alone (its records do not
    # say when it became empty): long past, so the next check expires all and deletes it.
    advance_to(h, 2 * R + I)
    assert committed(h, "cg") == set() and h.shard.group("cg") is None
    assert "cg" not in listed(h)
    kinds = [type(r.key).__name__ for r in h.log[written:]]
    assert kinds[:3] == ["OffsetCommitKey"] * 3
    assert kinds[-3:] == ["ConsumerGroupTargetAssignmentMetadataKey",
                          "ConsumerGroupPartitionMetadataKey", "ConsumerGroupMetadataKey"]
    assert all(r.value is None for r in h.log[written:])
    # The same member id joins a new group at epoch 1.
    assert consumer_hb(h, "cg", "m1", 0, names=["t"]) == 1
    assert compacted_replay(h).snapshot() == h.shard.snapshot()


# ------------------------------------------------------------------------------ connect
def test_connect_group_keeps_offsets_with_members_and_is_deleted_once_empty(coord):
    h = harness(coord)
    epoch = connect_hb(h, "cn", "W1", 0)
    assert commit(h, "cn", {("t", 0): 1}, gen=epoch, member="W1", version=9) == {("t", 0): 0}
    advance_to(h, 2 * R)
    assert committed(h, "cn") == {("t", 0)}
    connect_hb(h, "cn", "W1", -1)
    assert h.shard.group("cn").state_name() == "Empty"
    written = len(h.log)
    advance_to(h, 2 * R + I)
    assert committed(h, "cn") == set() and h.shard.group("cn") is None
    assert [type(r.key).__name__ for r in h.log[written:]][-3:] == [
        "ConnectWorkerGroupTargetAssignmentMetadataKey",
        "ConnectWorkerGroupConnectorsTasksMetadataKey", "ConnectWorkerGroupMetadataKey"]
    assert not [k for k in h.shard.timers.keys("cn")]
    assert h.shard.timers.get(TimerKey(connect.DELAYED, "cn")) is None
    assert compacted_replay(h).snapshot() == h.shard.snapshot()


# ------------------------------------------------------------------------------ empty groups
def test_empty_groups_without_offsets_are_deleted_at_the_next_check_with_offsets_they_stay(
        coord):
    h = harness(coord)
    mid, _ = classic_join(h, "classic", ptype="custom")
    classic_leave(h, "classic", mid)
    consumer_hb(h, "consumer", "m1", 0, names=["t"])
    consumer_hb(h, "consumer", "m1", -1)
    connect_hb(h, "connect", "W1", 0)
    connect_hb(h, "connect", "W1", -1)
    kid, kgen = classic_join(h, "kept", ptype="custom")
    commit(h, "kept", {("t", 0): 1}, gen=kgen, member=kid)
    classic_leave(h, "kept", kid)
    empty = {"classic", "consumer", "connect", "kept"}
    assert {gid for gid, g in h.shard.groups.items() if g.is_empty()} == empty
    advance_to(h, I)                    # no retention to wait for: nothing to expire
    assert set(h.shard.groups) == {"kept"}
    advance_to(h, R + I)
    assert h.shard.groups == {}


def test_an_empty_classic_group_awaiting_a_member_id_required_rejoin_stays(coord):
    h = harness(coord)
    mid, _ = classic_join(h, "g", ptype="custom")
    classic_leave(h, "g", mid)
    r = h.send(m.JoinGroupRequest(group_id="g", session_timeout_ms=10_000,
                                  rebalance_timeout_ms=10_000, member_id="",
                                  protocol_type="custom",
                                  protocols=[m.JoinGroupRequestProtocol(name="r",
                                                                        metadata=b"")]), 5)
    assert r.error_code == E.MEMBER_ID_REQUIRED
    g = h.shard.group("g")
    assert g.state_name() == "Empty" and g.pending
    advance_to(h, I)
    assert h.shard.group("g") is g                     # the rejoin may still come
    advance_to(h, 20_000)                               # it did not: forgotten, then deleted
    assert h.shard.group("g") is None


# ------------------------------------------------------------------------------ RetentionTimeMs
@pytest.mark.parametrize("version", [2, 3, 4])
def test_retention_time_of_offset_commit_v2_to_v4_is_an_expire_timestamp(coord, version):
    h = harness(coord)
    h.now = 100
    assert commit(h, "r", {("t", 0): 1}, version=version, retention=5_000) == {("t", 0): 0}
    assert commit(h, "d", {("t", 0): 1}, version=version) == {("t", 0): 0}
    assert commit(h, "v5", {("t", 0): 1}, version=5, retention=5_000) == {("t", 0): 0}
    v = h.shard.offsets["r"][("t", 0)]
    assert v.expire_timestamp == 5_100 and v.commit_timestamp == 100
    assert h.shard.offsets["d"][("t", 0)].expire_timestamp == -1
    assert h.shard.offsets["v5"][("t", 0)].expire_timestamp == -1      # v5+ has no field
    # Written as value version 1, the only one holding an expire timestamp (Kafka's choice).
    rec = next(r for r in h.log if r.key.group == "r")
    assert encode_record(rec)[1][:2] == b"\x00\x01"
    advance_to(h, 5_000)
    assert committed(h, "r") == {("t", 0)}
    advance_to(h, 6_000)
    assert h.shard.group("r") is None
    assert committed(h, "d") == {("t", 0)} and committed(h, "v5") == {("t", 0)}
    advance_to(h, R + I)
    assert h.shard.groups == {}


def test_an_expire_timestamp_waits_while_the_group_has_members(coord):
    h = harness(coord)
    mid, gen = classic_join(h, "g", ptype="custom")
    commit(h, "g", {("t", 0): 1}, gen=gen, member=mid, version=4, retention=1_000)
    advance_to(h, 10 * I)
    assert committed(h, "g") == {("t", 0)}          # Kafka: only once the group allows
    h.now += 1
    classic_leave(h, "g", mid)
    advance_to(h, 11 * I)
    assert h.shard.group("g") is None


# ------------------------------------------------------------------------------ bounded work
def test_one_firing_expires_at_most_its_bound_and_the_sweep_goes_on_soon(coord):
    h = harness(coord)
    n = 2 * offsets.RETENTION_EXPIRE_MAX + 500
    assert set(commit(h, "big", {("t", p): p for p in range(n)}).values()) == {0}
    commit(h, "small", {("t", 0): 1})
    advance_to(h, R - I)
    first = len(h.results)
    advance_to(h, R)                    # the first check that finds them due
    fired = h.results[first:]
    assert len(fired) == 1
    assert len(committed(h, "big")) == n - offsets.RETENTION_EXPIRE_MAX
    assert h.shard.timers.get(KEY) == R + offsets.RETENTION_CONTINUE_MS
    assert h.shard.retention_sweep is not None
    h.advance(offsets.RETENTION_CONTINUE_MS)
    assert len(committed(h, "big")) == n - 2 * offsets.RETENTION_EXPIRE_MAX
    h.advance(offsets.RETENTION_CONTINUE_MS)
    # The last firing finishes "big" (and deletes it) and "small", and the sweep.
    assert h.shard.groups == {} and h.shard.offsets == {}
    assert h.shard.retention_sweep is None
    assert h.shard.timers.get(KEY) == h.now + I
    for res in h.results[first:]:
        tombstones = [r for r in res.records if getattr(r, "key", None) is not None
                      and type(r.key) is m.OffsetCommitKey]
        assert len(tombstones) <= offsets.RETENTION_EXPIRE_MAX


def test_a_sweep_in_small_steps_expires_exactly_what_one_pass_would(coord, monkeypatch):
    """Seeded: many groups with old and fresh offsets interleaved, commits while the sweep
    runs (to groups already swept, not yet swept, new ones; fresh commits over old offsets);
    tiny bounds make nearly every position of the sweep a firing boundary. At the end exactly
    the old offsets are gone, and exactly the groups left without offsets."""
    seed = int(os.environ.get("GROUPCOORD_RETENTION_SEED", random.randrange(1 << 30)))
    print("retention sweep seed", seed, "(GROUPCOORD_RETENTION_SEED repeats a run)")
    rnd = random.Random(seed)
    monkeypatch.setattr(offsets, "RETENTION_SCAN_MAX", rnd.randint(2, 9))
    monkeypatch.setattr(offsets, "RETENTION_EXPIRE_MAX", rnd.randint(1, 5))
    sweep_at = 10 * R
    h = harness(coord, offsets_retention_check_interval_ms=sweep_at)    # one sweep
    last = {}                               # (group, (topic, partition)) -> last commit time

    def commit_some(gid):
        parts = {("t%d" % rnd.randrange(3), rnd.randrange(6)): 1
                 for _ in range(rnd.randint(1, 8))}
        assert set(commit(h, gid, parts).values()) == {0}
        for tp in parts:
            last[(gid, tp)] = h.now

    for i in range(30):
        commit_some("g%d" % i)              # old: due long before the sweep
    h.now = sweep_at - R // 2
    for i in range(0, 30, 2):
        commit_some("g%d" % i)              # fresh: still within retention at the sweep
    h.now = sweep_at
    firings = 0
    while True:
        for key in h.shard.due(h.now):
            assert key == KEY
            h._apply(h._pure(lambda: h.shard.fire(key, h.now)))
            firings += 1
        if h.shard.retention_sweep is None:
            break
        h.now = h.shard.timers.get(KEY)
        if rnd.random() < 0.3:
            commit_some("g%d" % rnd.randrange(40))
    assert firings > 1
    want = {}
    for (gid, tp), when in last.items():
        if when >= sweep_at - R // 2:
            want.setdefault(gid, set()).add(tp)
    assert {gid: set(tps) for gid, tps in h.shard.offsets.items()} == want
    assert set(h.shard.groups) == set(want)
    assert compacted_replay(h).snapshot() == h.shard.snapshot()


def test_a_failing_check_is_logged_and_rearmed_with_a_new_sweep(monkeypatch, caplog):
    sh = Shard(ShardConfig(offsets_retention_ms=R, offsets_retention_check_interval_ms=I))
    sh.rearm(0)
    sh.apply(sh.handle(m.OffsetCommitRequest(group_id="s", topics=[m.OffsetCommitRequestTopic(
        name="t", partitions=[m.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1)])]), 0, 8))

    def broken(g):
        raise RuntimeError("planted")
    monkeypatch.setattr(offsets, "_expiry_rule", broken)
    with caplog.at_level("ERROR", logger="groupcoord"):
        for key in sh.due(R):
            sh.apply(sh.fire(key, R))
    assert "offsets retention check failed" in caplog.text
    assert sh.timers.get(KEY) == R + I and sh.retention_sweep is None
    assert "s" in sh.offsets
    monkeypatch.undo()
    for key in sh.due(R + I):
        sh.apply(sh.fire(key, R + I))
    assert sh.offsets == {} and sh.groups == {}


# ------------------------------------------------------------------------------ config
def test_settings_under_kafkas_names():
    from groupcoord.server.main import CatalogError, parse_group_config
    assert ShardConfig().offsets_retention_ms == 10_080 * 60_000         # 7 days
    assert ShardConfig().offsets_retention_check_interval_ms == 600_000
    c = parse_group_config(["offsets.retention.minutes=2",
                            "offsets.retention.check.interval.ms=50"])
    assert (c.offsets_retention_ms, c.offsets_retention_check_interval_ms) == (120_000, 50)
    assert parse_group_config(["offsets_retention_ms=1500"]).offsets_retention_ms == 1500
    for bad in ("offsets.retention.minutes=0", "offsets.retention.check.interval.ms=0"):
        with pytest.raises(CatalogError, match="must be >= 1"):
            parse_group_config([bad])
