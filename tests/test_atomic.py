"""Atomic state changes: a Result's records are encoded and size-checked before anything is
applied (ShardRuntime._process), and the handlers refuse oversize input themselves.

* Regressions for the cases measured in issue 16: a 40 KB member id (no ghost member, a clear
  error, a later member's epoch is persisted), an OffsetCommit with a 40 KB topic name (refused,
  never served by OffsetFetch), with the handlers' checks on and with them off (the runtime's
  safety net alone).
* The runtime's event paths: a timer Result that cannot be written is dropped, logged once and
  its timer armed again; memory stays what the log holds.
* A seeded property test over every API the shard serves and every group type: random oversize
  strings in every string field of the requests that write, and many partitions, never leave
  memory different from a replay of what was written, and never add a member with an id over
  the bound. Set ATOMIC_SEED to replay one seed; the seed is printed.
"""
import asyncio
import logging
import os
import random

import msgspec
import pytest

from groupcoord.groups import limits
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import Record
from groupcoord.groups.result import Result, TimerKey
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardSet
from groupcoord.runtime import write_path

from coord_harness import Harness

TOPICS = TopicCatalog.of(orders=6, payments=3)
HUGE = "h" * 40_000
CFG = ShardConfig(consumer_assignment_interval_ms=0, group_initial_rebalance_delay_ms=0)


def run(coro, timeout=60):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    with asyncio.Runner() as r:
        return r.run(bounded())


def make(tmp_path, shard_config=CFG):
    return ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=2, fsync="unsafe-no-fsync",
                                  shard_config=shard_config), topics=TOPICS)


def cg_hb(member, epoch, group="cg", **kw):
    base = dict(group_id=group, member_id=member, member_epoch=epoch)
    if epoch == 0:
        base.update(rebalance_timeout_ms=30000, subscribed_topic_names=["orders", "payments"],
                    topic_partitions=[])
    base.update(kw)
    return m.ConsumerGroupHeartbeatRequest(**base)


def commit(topic, group="og", offset=7):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 topics=[m.OffsetCommitRequestTopic(name=topic, partitions=[
                                     m.OffsetCommitRequestPartition(partition_index=0,
                                                                    committed_offset=offset)])])


def fetch(topic, group="og"):
    return m.OffsetFetchRequest(group_id=group, topics=[m.OffsetFetchRequestTopic(
        name=topic, partition_indexes=[0])])


async def members(c, group="cg"):
    d = await c.submit(m.ConsumerGroupDescribeRequest(group_ids=[group]), 0)
    return {mb.member_id: mb.member_epoch for mb in d.groups[0].members}


def checks_off(monkeypatch):
    """Turn the handlers' own bounds off: what is left is the runtime's safety net."""
    monkeypatch.setattr(limits, "check_request", lambda shard, req, ctx: None)
    monkeypatch.setattr(limits, "validate_topic_name", lambda name: None)


# ------------------------------------------------------------------ measured regressions
@pytest.mark.parametrize("net_only", [False, True], ids=["handler-checks", "runtime-net"])
def test_a_40kb_member_id_leaves_no_ghost_and_later_members_are_persisted(
        tmp_path, monkeypatch, net_only):
    if net_only:
        checks_off(monkeypatch)

    async def first():
        c = make(tmp_path)
        await c.start()
        a = await c.submit(cg_hb("m1", 0), 1)
        assert a.error_code == 0
        ghost = await c.submit(cg_hb(HUGE, 0), 1)
        want = E.UNKNOWN_SERVER_ERROR if net_only else E.INVALID_REQUEST
        assert ghost.error_code == want, ghost
        assert ghost.error_message and ("member id" in ghost.error_message
                                        or "cannot be written" in ghost.error_message)
        b = await c.submit(cg_hb("m2", 0), 1)
        assert b.error_code == 0 and b.member_epoch > a.member_epoch
        got = await members(c)
        await c.close()
        return got, b.member_epoch

    got, epoch_b = run(first())
    assert set(got) == {"m1", "m2"}                 # no ghost

    async def second():
        c = make(tmp_path)
        await c.start()
        hb = await c.submit(cg_hb("m2", epoch_b), 1)
        got2 = await members(c)
        await c.close()
        return hb, got2

    hb, got2 = run(second())
    assert hb.error_code == 0 and hb.member_epoch >= epoch_b, hb   # its epoch was persisted
    assert set(got2) == {"m1", "m2"}


@pytest.mark.parametrize("net_only", [False, True], ids=["handler-checks", "runtime-net"])
def test_a_commit_with_a_40kb_topic_is_refused_and_never_served(tmp_path, monkeypatch,
                                                                net_only):
    if net_only:
        checks_off(monkeypatch)

    async def first():
        c = make(tmp_path)
        await c.start()
        ok = await c.submit(commit("orders"), 8)
        bad = await c.submit(commit(HUGE), 8)
        got = await c.submit(fetch(HUGE), 7)
        good = await c.submit(fetch("orders"), 7)
        await c.close()
        return ok, bad, got, good

    ok, bad, got, good = run(first())
    assert ok.topics[0].partitions[0].error_code == 0
    want = E.INVALID_COMMIT_OFFSET_SIZE if net_only else E.INVALID_TOPIC_EXCEPTION
    assert bad.topics[0].partitions[0].error_code == want
    assert got.topics[0].partitions[0].committed_offset == -1
    assert good.topics[0].partitions[0].committed_offset == 7

    async def second():
        c = make(tmp_path)
        await c.start()
        r = await c.submit(fetch(HUGE), 7), await c.submit(fetch("orders"), 7)
        await c.close()
        return r

    got, good = run(second())
    assert got.topics[0].partitions[0].committed_offset == -1
    assert good.topics[0].partitions[0].committed_offset == 7


def test_a_record_over_message_max_bytes_is_refused_by_the_runtime(tmp_path, monkeypatch):
    checks_off(monkeypatch)
    cfg = msgspec.structs.replace(CFG, message_max_bytes=2_000)

    async def go():
        c = make(tmp_path, cfg)
        await c.start()
        ok = await c.submit(cg_hb("m1", 0), 1)
        # 300 subscribed names take more than 2,000 bytes in the member's record.
        big = await c.submit(cg_hb("m2", 0, subscribed_topic_names=[
            "topic-%04d" % i for i in range(300)]), 1)
        got = await members(c)
        await c.close()
        return ok, big, got

    ok, big, got = run(go())
    assert ok.error_code == 0
    assert big.error_code == E.UNKNOWN_SERVER_ERROR and "message.max.bytes" in big.error_message
    assert set(got) == {"m1"}


# ------------------------------------------------------------------ event paths
def test_an_unwritable_timer_result_is_dropped_logged_once_and_rearmed(tmp_path, caplog):
    async def go():
        c = make(tmp_path)
        await c.start()
        assert (await c.submit(commit("orders"), 8)).topics[0].partitions[0].error_code == 0
        rt = c.shards[c.shard_of("og")]
        before = rt.shard.snapshot()
        written = rt.records_written
        key = TimerKey("classic-session", "og", "ghost")
        bad = Result(None, (Record(m.OffsetCommitKey(group="og", topic=HUGE, partition=0),
                                   m.OffsetCommitValue(offset=1, leader_epoch=-1, metadata="",
                                                       commit_timestamp=0)),),
                     timers=((TimerKey("classic-join", "og", ""), 123),))
        now = rt.clock()
        with caplog.at_level(logging.ERROR, logger="groupcoord"):
            for _ in range(3):
                assert rt._process(bad, now, event=key) is None
        assert rt.shard.snapshot() == before and rt.records_written == written
        timers = dict(rt.shard.timers.items())
        assert timers.get(key) == now + write_path.UNWRITABLE_RETRY_MS
        assert TimerKey("classic-join", "og", "") not in timers     # nothing of it applied
        # A request's unwritable Result: answered, nothing applied.
        w = rt._process(bad, now, commit("orders"), 8)
        resp = w.future.result()
        assert resp.topics[0].partitions[0].error_code == E.INVALID_COMMIT_OFFSET_SIZE
        assert rt.shard.snapshot() == before
        await c.close()

    run(go())
    lines = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(lines) == 2, [r.getMessage() for r in lines]    # once for the timer, once req
    assert "'og'" in lines[0].getMessage() and "classic-session" in lines[0].getMessage()


# ------------------------------------------------------------------ property test
LONG = "L" * 1025
WIDE = "é" * 600                    # 1,200 bytes in 600 characters
BAD = [LONG, HUGE, WIDE]            # over name.max.bytes, over a record field, wide UTF-8
BAD_TOPICS = ["bad name!", "t" * 250, HUGE, "..", ""]
PROP_CFG = ShardConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0,
                       message_max_bytes=200_000)
RATE = 0.08                         # how often a field is made oversize


def pick(rng, good, bad=BAD):
    """A valid value, or (at RATE) an oversize one."""
    return rng.choice(bad) if rng.random() < RATE else rng.choice(good)


def _opt(rng, good=("i1", "i2")):
    return None if rng.random() < 0.5 else pick(rng, list(good))


class Gen:
    """Random requests of every API the shard serves, biased to oversize fields."""

    def __init__(self, rng, h):
        self.rng = rng
        self.h = h

    def member_of(self, gid):
        g = self.h.shard.groups.get(gid)
        ids = list(getattr(g, "members", {}) or {}) if g is not None else []
        return self.rng.choice(ids) if ids and self.rng.random() < 0.7 else \
            pick(self.rng, ["m1", "c1", "w1", ""])

    def epoch_of(self, gid, mid):
        g = self.h.shard.groups.get(gid)
        mem = (getattr(g, "members", {}) or {}).get(mid) if g is not None else None
        for attr in ("epoch", "generation"):
            v = getattr(getattr(mem, "a", mem), attr, None) if mem is not None else None
            if isinstance(v, int):
                return v
        return getattr(g, "generation", 0) if g is not None else 0

    def commit(self):
        r = self.rng
        n = r.choice([1, 2, 5, 300_000]) if r.random() < 0.1 else r.choice([1, 2, 5])
        return m.OffsetCommitRequest(
            group_id=pick(r, ["g1", "cg", "og"]), generation_id_or_member_epoch=-1, member_id="",
            topics=[m.OffsetCommitRequestTopic(name=pick(r, ["orders", "payments"],
                                                         BAD_TOPICS), partitions=[
                m.OffsetCommitRequestPartition(
                    partition_index=i, committed_offset=r.randrange(100),
                    committed_metadata=pick(r, [None, "", "meta"], ["m" * 5000, HUGE]))
                for i in range(n)]) for _ in range(r.randint(1, 2))])

    def fetch(self):
        return m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(
            group_id=pick(self.rng, ["g1", "cg", "og"]), topics=None)])

    def join(self):
        r = self.rng
        gid = pick(r, ["g1", "g2"])
        mid = r.choice(["", self.member_of(gid)])
        meta = pick(r, [b"x", b""], [b"s" * 120_000])
        return m.JoinGroupRequest(
            group_id=gid, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
            member_id=mid, group_instance_id=_opt(r), protocol_type=pick(r, ["consumer"]),
            protocols=[m.JoinGroupRequestProtocol(name=pick(r, ["range"]), metadata=meta)],
            reason=_opt(r, ("why",)))

    def sync(self):
        r = self.rng
        gid = r.choice(["g1", "g2"])
        mid = self.member_of(gid)
        g = self.h.shard.groups.get(gid)
        ids = list(getattr(g, "members", {}) or {}) if g is not None else []
        return m.SyncGroupRequest(
            group_id=gid, generation_id=self.epoch_of(gid, mid), member_id=mid,
            assignments=[m.SyncGroupRequestAssignment(
                member_id=x, assignment=pick(r, [b"a"], [b"b" * 120_000])) for x in ids])

    def heartbeat(self):
        gid = pick(self.rng, ["g1", "g2"])
        mid = self.member_of(gid)
        return m.HeartbeatRequest(group_id=gid, generation_id=self.epoch_of(gid, mid),
                                  member_id=mid)

    def leave(self):
        gid = pick(self.rng, ["g1", "g2", "cg"])
        return m.LeaveGroupRequest(group_id=gid, members=[m.LeaveGroupRequestMemberIdentity(
            member_id=self.member_of(gid), reason=_opt(self.rng, ("why",)))])

    def consumer(self):
        r = self.rng
        gid = pick(r, ["cg"])
        known = r.random() < 0.5
        mid = self.member_of(gid) if known else pick(r, ["c1", "c2", "c3"])
        epoch = self.epoch_of(gid, mid) if known else 0
        if r.random() < 0.2:
            epoch = -1                      # leave
        topics = pick(r, [["orders"], ["orders", "payments"]],
                      [["t" * 300], ["topic-%05d" % i for i in range(20_000)], [HUGE]])
        return m.ConsumerGroupHeartbeatRequest(
            group_id=gid, member_id=mid, member_epoch=epoch, instance_id=_opt(r),
            rack_id=_opt(r, ("rack-a",)), rebalance_timeout_ms=30_000,
            subscribed_topic_names=topics if epoch == 0 or r.random() < 0.3 else None,
            subscribed_topic_regex=pick(r, [None, None, "ord.*"]),
            server_assignor=pick(r, [None, None, "uniform"]),
            topic_partitions=[] if epoch == 0 else None)

    def connect(self):
        r = self.rng
        gid = pick(r, ["wg"])
        known = r.random() < 0.5
        mid = self.member_of(gid) if known else pick(r, ["w1", "w2"])
        epoch = self.epoch_of(gid, mid) if known else 0
        conn = pick(r, ["A", "B"])
        return m.ConnectGroupHeartbeatRequest(
            group_id=gid, member_id=mid, member_epoch=epoch, instance_id=_opt(r),
            worker_url=pick(r, [None, "http://w:8083"]), rebalance_timeout_ms=60_000,
            client_assignors=[m.ConnectGroupHeartbeatRequestAssignor(
                name=pick(r, ["incremental-cooperative"]), minimum_version=0,
                maximum_version=2, version=2, reason=0,
                metadata=pick(r, [b""], [b"z" * 250_000]))] if epoch == 0 else None,
            config_state=m.ConnectGroupHeartbeatRequestConfigState(
                config_offset=r.randrange(1, 5), connectors=[
                    m.ConnectGroupHeartbeatRequestConnectorConfig(name=conn, task_count=2)])
            if r.random() < 0.5 else None,
            owned_connectors_and_tasks=None)

    def prepare(self):
        mid = self.member_of("wg")
        return m.ConnectGroupPrepareAssignmentRequest(group_id="wg", member_id=mid,
                                                      member_epoch=self.epoch_of("wg", mid))

    def install(self):
        r = self.rng
        g = self.h.shard.groups.get("wg")
        mid = self.member_of("wg")
        ids = list(getattr(g, "members", {}) or {}) if g is not None else []
        conn = pick(r, ["A", "B"])
        return m.ConnectGroupInstallAssignmentRequest(
            group_id="wg", member_id=mid, member_epoch=self.epoch_of("wg", mid),
            group_epoch=getattr(g, "epoch", 0) if g is not None else 0, error=0,
            rebalance_delay_ms=0, assignor_state=pick(r, [None, b"s"], [b"q" * 250_000]),
            members=[m.ConnectGroupInstallAssignmentRequestMember(
                member_id=x, version=2, metadata=b"", connectors_and_tasks=
                m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                    connectors=[conn], tasks=[
                        m.ConnectGroupInstallAssignmentRequestConnectorTasks(
                            connector=conn, task_ids=[0, 1])])) for x in ids])

    def read_only(self):
        r = self.rng
        return r.choice([
            m.DescribeGroupsRequest(groups=[pick(r, ["g1", "og"])]),
            m.ListGroupsRequest(),
            m.ConsumerGroupDescribeRequest(group_ids=[pick(r, ["cg"])]),
            m.ConnectGroupDescribeRequest(group_ids=[pick(r, ["wg"])])])

    def next(self):
        kinds = [self.commit, self.fetch, self.join, self.join, self.sync, self.heartbeat,
                 self.leave, self.consumer, self.consumer, self.connect, self.connect,
                 self.prepare, self.install, self.read_only]
        return self.rng.choice(kinds)()


def _no_ghost(h, cfg, where):
    bound = cfg.name_max_bytes + 37         # a classic member id: client id + "-" + UUID
    for gid, g in h.shard.groups.items():
        assert not limits.over(gid, cfg.name_max_bytes), where
        for mid in getattr(g, "members", {}) or {}:
            assert not limits.over(mid, bound), "%s: ghost member %r... in %r" % (
                where, mid[:20], gid[:20])


def _step(h, req, client_id, cfg, where):
    res = h._pure(lambda: h.shard.handle(req, h.now, None, client_id, "127.0.0.1"))
    try:
        # What the runtime does before applying: the handlers must never get here with
        # records that cannot be written.
        write_path.encode_checked(res.records, cfg.message_max_bytes)
    except write_path.Unwritable as exc:
        raise AssertionError("%s: %s returned records that cannot be written: %s"
                             % (where, type(req).__name__, exc)) from None
    h._apply(res)


SEEDS = int(os.environ.get("ATOMIC_SEEDS", "6"))
STEPS = int(os.environ.get("ATOMIC_STEPS", "80"))


@pytest.mark.parametrize("i", range(SEEDS))
def test_oversize_input_never_leaves_memory_and_log_different(i):
    seed = int(os.environ.get("ATOMIC_SEED", random.SystemRandom().randrange(1 << 32))) + i
    print("test_atomic property seed=%d (replay: ATOMIC_SEED=%d ATOMIC_SEEDS=1)" % (seed, seed))
    rng = random.Random(seed)
    h = Harness(PROP_CFG, TOPICS)
    gen = Gen(rng, h)
    for step in range(STEPS):
        where = "seed %d step %d" % (seed, step)
        req = gen.next()
        client_id = pick(rng, ["cid", ""], ["C" * 2000])
        _step(h, req, client_id, PROP_CFG, where)
        if rng.random() < 0.2:
            h.advance(rng.choice([100, 5_000, 40_000]))     # timers fire on the way
        h.check_replay()
        _no_ghost(h, PROP_CFG, where)
