"""The shard runtime: durability before answers, ordering, failure rollback, loading, timers,
offloaded assignors, sharding, restart. Every test runs on uvloop and on stock asyncio."""
import asyncio
import os
import threading

import msgspec
import pytest
import uvloop

from groupcoord.groups.consumer import target as consumer
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardSet, ShardState, java_string_hash, shard_for
from groupcoord.runtime import shard_runtime
from groupcoord.storage import Log

LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
TOPICS = TopicCatalog.of(orders=6, payments=12)


@pytest.fixture(params=sorted(LOOPS))
def run(request):
    factory = LOOPS[request.param]

    def _run(coro, timeout=30):
        async def bounded():
            return await asyncio.wait_for(coro, timeout)
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(bounded())
    return _run


def make(tmp_path, shards=4, **kw):
    # Assignment batching off: these tests check durability and restarts of exact sequences.
    shard_config = kw.pop("shard_config", ShardConfig(consumer_assignment_interval_ms=0))
    topics = kw.pop("topics", TOPICS)
    return ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=shards,
                                  shard_config=shard_config, **kw), topics=topics)


def cg_hb(group, member, epoch, topics=("orders",), **kw):
    base = dict(group_id=group, member_id=member, member_epoch=epoch)
    if epoch == 0:
        base.update(rebalance_timeout_ms=30000, subscribed_topic_names=list(topics),
                    topic_partitions=[])
    base.update(kw)
    return m.ConsumerGroupHeartbeatRequest(**base)


def commit(group, topic, partition, offset):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                 member_id="", topics=[m.OffsetCommitRequestTopic(
                                     name=topic, partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=partition, committed_offset=offset)])])


def fetch(group, topic, partitions):
    return m.OffsetFetchRequest(group_id=group, topics=[m.OffsetFetchRequestTopic(
        name=topic, partition_indexes=list(partitions))])


def fetched(resp):
    return {(t.name, p.partition_index): p.committed_offset
            for t in resp.topics for p in t.partitions}


def assigned(resp):
    a = resp.assignment
    return None if a is None else sorted(
        (t.topic_id, p) for t in a.topic_partitions for p in t.partitions)


async def converge(shards, group, members, topics=("orders",), rounds=10):
    """Heartbeat every member until nobody's assignment changes; -> member -> (epoch, parts)."""
    state = {mid: (0, []) for mid in members}
    for _ in range(rounds):
        changed = False
        for mid in members:
            epoch, parts = state[mid]
            owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=[p])
                     for t, p in parts]
            r = await shards.submit(cg_hb(group, mid, epoch, topics, topic_partitions=owned),
                                   1)
            assert r.error_code == 0, r
            new = assigned(r)
            if r.member_epoch != epoch or (new is not None and new != parts):
                changed = True
                state[mid] = (r.member_epoch, parts if new is None else new)
        if not changed:
            return state
    raise AssertionError("no convergence: %r" % state)


# ---------------------------------------------------------------------- sharding
def test_java_string_hash_matches_java():
    # Values of Java's String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00   # UTF-16 surrogates
    assert shard_for("polygenelubricants", 50) == 0          # Kafka's abs(MIN_VALUE) -> 0
    assert shard_for("hello", 50) == 99162322 % 50


def test_groups_spread_over_shards_and_logs(run, tmp_path):
    async def go():
        c = make(tmp_path, shards=8)
        await c.start()
        groups = ["g%d" % i for i in range(40)]
        for g in groups:
            r = await c.submit(commit(g, "orders", 0, 5), 8)
            assert r.topics[0].partitions[0].error_code == 0
        await c.close()
        return c
    c = run(go())
    used = {shard_for("g%d" % i, 8) for i in range(40)}
    assert len(used) > 4
    for i in range(8):
        d = c.shard_dir(i)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        assert (size > 0) == (i in used), i


# ---------------------------------------------------------------------- restart
def test_restart_answers_same_epochs_and_assignments(run, tmp_path):
    async def first():
        c = make(tmp_path)
        await c.start()
        state = await converge(c, "cg", ["m1", "m2", "m3"], ("orders", "payments"))
        r = await c.submit(m.ConsumerGroupDescribeRequest(group_ids=["cg"]), 0)
        cm = msgspec.structs.replace(commit("cg", "orders", 1, 42), member_id="m1",
                                     generation_id_or_member_epoch=state["m1"][0])
        cr = await c.submit(cm, 9)
        assert cr.topics[0].partitions[0].error_code == 0, cr
        await c.close()
        return state, r.groups[0]

    async def second(state):
        c = make(tmp_path)
        await c.start()
        r = await c.submit(m.ConsumerGroupDescribeRequest(group_ids=["cg"]), 0)
        # Members keep their epochs: a heartbeat at the old epoch is accepted, no rejoin,
        # and the member's assignment is what it was.
        hbs = {}
        for mid, (epoch, parts) in state.items():
            owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=[p])
                     for t, p in parts]
            hb = await c.submit(cg_hb("cg", mid, epoch, topic_partitions=owned), 1)
            hbs[mid] = hb
        off = await c.submit(fetch("cg", "orders", [1]), 5)
        await c.close()
        return r.groups[0], hbs, off

    state, before = run(first())
    after, hbs, off = run(second(state))
    assert before.group_epoch == after.group_epoch
    assert before.assignment_epoch == after.assignment_epoch
    key = lambda mem: (mem.member_id, mem.member_epoch,  # noqa: E731
                       sorted((t.topic_id, tuple(t.partitions))
                              for t in mem.assignment.topic_partitions))
    assert sorted(map(key, before.members)) == sorted(map(key, after.members))
    for mid, hb in hbs.items():
        assert hb.error_code == 0 and hb.member_epoch == state[mid][0], (mid, hb)
    assert fetched(off) == {("orders", 1): 42}


def test_classic_group_survives_restart(run, tmp_path):
    proto = [m.JoinGroupRequestProtocol(name="p", metadata=b"x")]

    def join(member):
        return m.JoinGroupRequest(group_id="cls", session_timeout_ms=10000,
                                  rebalance_timeout_ms=10000, member_id=member,
                                  protocol_type="custom", protocols=proto)

    async def first():
        c = make(tmp_path, shard_config=ShardConfig(group_initial_rebalance_delay_ms=0))
        await c.start()
        r = await c.submit(join(""), 5)
        assert r.error_code == E.MEMBER_ID_REQUIRED
        mid = r.member_id
        r = await c.submit(join(mid), 5)
        assert r.error_code == 0 and r.leader == mid
        s = await c.submit(m.SyncGroupRequest(group_id="cls", generation_id=r.generation_id,
                                              member_id=mid, assignments=[
                                                  m.SyncGroupRequestAssignment(
                                                      member_id=mid, assignment=b"all")]), 3)
        assert s.error_code == 0 and s.assignment == b"all"
        await c.close()
        return mid, r.generation_id

    async def second(mid, gen):
        c = make(tmp_path)
        await c.start()
        hb = await c.submit(m.HeartbeatRequest(group_id="cls", generation_id=gen,
                                               member_id=mid), 3)
        d = await c.submit(m.DescribeGroupsRequest(groups=["cls"]), 3)
        await c.close()
        return hb, d.groups[0]

    mid, gen = run(first())
    hb, desc = run(second(mid, gen))
    assert hb.error_code == 0
    assert desc.group_state == "Stable" and [x.member_id for x in desc.members] == [mid]
    assert desc.members[0].member_assignment == b"all"


# ---------------------------------------------------------------------- durability
class Gate:
    """Holds every log write until opened (a slow disk); counts the writes."""

    def __init__(self, monkeypatch):
        self.open = threading.Event()
        self.writes = 0
        real = Log.write_flush

        def write_flush(log, job):
            self.writes += 1
            self.open.wait(10)
            return real(log, job)
        monkeypatch.setattr(Log, "write_flush", write_flush)


def test_response_waits_for_durability_and_reads_wait_for_earlier_writes(run, tmp_path,
                                                                           monkeypatch):
    async def go():
        c = make(tmp_path, shards=1)
        await c.start()
        gate = Gate(monkeypatch)
        w = asyncio.ensure_future(c.submit(commit("a", "orders", 0, 7), 8))
        while not gate.writes:                   # bounded by run()'s timeout
            await asyncio.sleep(0.005)
        assert not w.done()                      # not durable yet: not answered
        # A read that writes nothing, behind the pending write (another group, same shard):
        r = asyncio.ensure_future(c.submit(fetch("a", "orders", [0]), 5))
        await asyncio.sleep(0.05)                # a window for a wrong early answer
        assert not r.done()
        # More writes meanwhile join the next group commit.
        more = [asyncio.ensure_future(c.submit(commit("b%d" % i, "orders", 0, i), 8))
                for i in range(20)]
        await asyncio.sleep(0.05)                # staged meanwhile, behind the shut gate
        gate.open.set()
        w, r = await w, await r
        await asyncio.gather(*more)
        assert w.topics[0].partitions[0].error_code == 0
        assert fetched(r) == {("orders", 0): 7}
        writes = gate.writes
        await c.close()
        return writes
    writes = run(go())
    assert 2 <= writes <= 3          # 21 commits, but one write for the first, one for the rest


def test_failed_write_answers_not_available_and_rolls_back(run, tmp_path, monkeypatch):
    async def go():
        c = make(tmp_path, shards=1, reload_backoff_ms=10)
        await c.start()
        r = await c.submit(commit("g", "orders", 0, 1), 8)
        assert r.topics[0].partitions[0].error_code == 0
        real = Log.write_flush
        fail = {"n": 1}

        def write_flush(log, job):
            if fail["n"]:
                fail["n"] -= 1
                return OSError(5, "EIO (injected)")
            return real(log, job)
        monkeypatch.setattr(Log, "write_flush", write_flush)
        r = await c.submit(commit("g", "orders", 0, 2), 8)
        assert r.topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE
        # Meanwhile: not available / loading, then back with the last durable state.
        for _ in range(200):
            if c.shards[0].state is ShardState.ACTIVE:
                break
            await asyncio.sleep(0.01)
        assert c.shards[0].state is ShardState.ACTIVE
        f = await c.submit(fetch("g", "orders", [0]), 5)
        assert fetched(f) == {("orders", 0): 1}      # the failed commit is gone
        r = await c.submit(commit("g", "orders", 0, 3), 8)
        assert r.topics[0].partitions[0].error_code == 0
        await c.close()
    run(go())


def test_loading_answers_load_in_progress(run, tmp_path, monkeypatch):
    async def go():
        c = make(tmp_path, shards=2)
        await c.start()
        await c.submit(commit("g", "orders", 0, 9), 8)
        await c.close()
        release, loading = threading.Event(), threading.Event()
        real = shard_runtime.load_shard

        def slow(shard, log, **kw):
            loading.set()
            release.wait(10)
            return real(shard, log, **kw)
        monkeypatch.setattr(shard_runtime, "load_shard", slow)
        c = make(tmp_path, shards=2)
        started = asyncio.ensure_future(c.start())
        while not loading.is_set():              # bounded by run()'s timeout
            await asyncio.sleep(0.005)
        r = await c.submit(fetch("g", "orders", [0]), 5)
        assert r.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        d = await c.submit(m.DescribeGroupsRequest(groups=["g"]), 3)
        assert d.groups[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        release.set()
        await started
        r = await c.submit(fetch("g", "orders", [0]), 5)
        await c.close()
        return r
    assert fetched(run(go())) == {("orders", 0): 9}


# ---------------------------------------------------------------------- timers
def test_session_timeout_fires_as_an_event_and_survives_restart(run, tmp_path):
    cfg = ShardConfig(consumer_session_timeout_ms=300, consumer_heartbeat_interval_ms=100)

    async def go():
        c = make(tmp_path, shards=1, shard_config=cfg)
        await c.start()
        st = await converge(c, "cg", ["m1", "m2"])
        await c.close()
        # After a restart the session timers restart from load time: m2 keeps heartbeating,
        # m1 does not and is removed when its session expires.
        c = make(tmp_path, shards=1, shard_config=cfg)
        await c.start()
        d0 = await c.submit(m.ConsumerGroupDescribeRequest(group_ids=["cg"]), 0)
        epoch, parts = st["m2"]
        for _ in range(8):
            owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=[p])
                     for t, p in parts]
            r = await c.submit(cg_hb("cg", "m2", epoch, topic_partitions=owned), 1)
            assert r.error_code == 0, r
            epoch, parts = r.member_epoch, assigned(r) or parts
            await asyncio.sleep(0.1)             # the subject: m1's session runs out meanwhile
        d = await c.submit(m.ConsumerGroupDescribeRequest(group_ids=["cg"]), 0)
        await c.close()
        return d0.groups[0], d.groups[0]
    before, after = run(go())
    assert sorted(x.member_id for x in before.members) == ["m1", "m2"]
    assert [x.member_id for x in after.members] == ["m2"]
    assert after.group_epoch > before.group_epoch


# ---------------------------------------------------------------------- offload
def test_large_assignor_run_goes_off_loop_and_is_installed(run, tmp_path):
    async def go():
        c = make(tmp_path, shards=1, offload_partitions=10)   # 12 partitions: offloaded
        await c.start()
        r = await c.submit(cg_hb("big", "m1", 0, ("payments",)), 1)
        assert r.error_code == 0
        got = assigned(r)
        # The first answer may come before the assignor finished (empty assignment); the
        # target is installed as an event and reaches the member on a later heartbeat.
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
            r = await c.submit(cg_hb("big", "m1", r.member_epoch, ("payments",),
                                     topic_partitions=[]), 1)
            got = assigned(r) or got
        await c.close()
        return got
    got = run(go())
    assert len(got) == 12


def test_offloaded_result_is_dropped_when_the_epoch_moved():
    from groupcoord.groups.shard import Shard
    sh = Shard(ShardConfig(consumer_assignor_offload_partitions=1), TOPICS)
    res = sh.handle(cg_hb("g", "a", 0), 0, 1)
    [job] = res.offload
    sh.apply(res)
    assert sh.groups["g"].target_epoch < sh.groups["g"].epoch
    owners = job.run()
    res2 = sh.handle(cg_hb("g", "b", 0), 1, 1)         # the group moves on to a new epoch
    sh.apply(res2)
    assert consumer.install_offloaded(sh, job, owners, 2).records == ()
    [job2] = res2.offload
    out = consumer.install_offloaded(sh, job2, job2.run(), 3)
    assert out.records
    sh.apply(out)
    g = sh.groups["g"]
    assert g.target_epoch == g.epoch
    assert sum(len(g.targets[x]) for x in ("a", "b")) == 6


# ---------------------------------------------------------------------- routing
def test_multi_group_requests_fan_out_and_keep_order(run, tmp_path):
    async def go():
        c = make(tmp_path, shards=8)
        await c.start()
        groups = ["grp-%d" % i for i in range(12)]
        for g in groups:
            await c.submit(commit(g, "orders", 0, len(g)), 8)
        d = await c.submit(m.DescribeGroupsRequest(groups=list(reversed(groups))), 5)
        lg = await c.submit(m.ListGroupsRequest(), 4)
        f = await c.submit(m.OffsetFetchRequest(groups=[
            m.OffsetFetchRequestGroup(group_id=g, topics=[m.OffsetFetchRequestTopics(
                name="orders", partition_indexes=[0])]) for g in groups]), 8)
        await c.close()
        return groups, d, lg, f
    groups, d, lg, f = run(go())
    assert len({shard_for(g, 8) for g in groups}) > 3
    assert [x.group_id for x in d.groups] == list(reversed(groups))
    assert sorted(x.group_id for x in lg.groups) == sorted(groups) and lg.error_code == 0
    assert [x.group_id for x in f.groups] == groups
    assert [x.topics[0].partitions[0].committed_offset for x in f.groups] == \
        [len(g) for g in groups]


def test_set_topics_reaches_every_shard(run, tmp_path):
    async def go():
        c = make(tmp_path, shards=3)
        await c.start()
        st = await converge(c, "cg", ["m1"], ("newtopic",))
        assert st["m1"][1] == []
        await c.set_topics(TOPICS.with_topics(("newtopic", 4)))
        st = await converge(c, "cg", ["m1"], ("newtopic",))
        await c.close()
        return st
    st = run(go())
    assert len(st["m1"][1]) == 4


def test_catalog_changed_while_no_shard_was_live_bumps_on_load(run, tmp_path):
    """A topic change nobody saw (the shard was down or failed) is found when the shard
    loads: the group's persisted subscription metadata is compared with the catalog (found
    by the simulation, seed 101457: new partitions were never assigned)."""
    async def go():
        c = make(tmp_path, shards=1)
        await c.start()
        st = await converge(c, "cg", ["m1"], ("newtopic",))
        await c.close()
        epoch, parts = st["m1"]
        assert parts == []
        c = make(tmp_path, shards=1, topics=TOPICS.with_topics(("newtopic", 4)))
        await c.start()
        r = await c.submit(cg_hb("cg", "m1", epoch, ("newtopic",), topic_partitions=[]), 1)
        await c.close()
        return epoch, r
    epoch, r = run(go())
    assert r.error_code == 0 and r.member_epoch == epoch + 1
    assert len(assigned(r)) == 4


def test_unload_and_load_one_shard(run, tmp_path):
    async def go():
        c = make(tmp_path, shards=2)
        await c.start()
        g = next(x for x in ("a", "b", "c", "d") if shard_for(x, 2) == 0)
        await c.submit(commit(g, "orders", 0, 11), 8)
        await c.unload_shard(0)
        r = await c.submit(fetch(g, "orders", [0]), 5)
        assert r.error_code == E.NOT_COORDINATOR
        await c.load_shard(0)
        r = await c.submit(fetch(g, "orders", [0]), 5)
        await c.close()
        return r
    assert fetched(run(go())) == {("orders", 0): 11}


def test_runtime_config_rejects_nonsense():
    with pytest.raises(ValueError):
        RuntimeConfig(shards=0)
    with pytest.raises(ValueError):
        RuntimeConfig(fsync="sometimes")
    assert msgspec.structs.replace(RuntimeConfig(), shards=3).shards == 3


def test_a_shard_past_its_lease_deadline_answers_not_coordinator(run, tmp_path):
    # Cluster mode checks the lease per request (ShardSet lease_check): a node that resumes
    # after a pause reads queued requests before the tick that unloads the shard, and must
    # not answer them from its state (simulation mutation serve-after-lease-expiry).
    allowed = {"now": True}

    async def go():
        shards = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=2),
                          topics=TOPICS, lease_check=lambda index: allowed["now"])
        await shards.start()
        try:
            r = await shards.submit(commit("g", "orders", 0, 5), 8)
            assert r.topics[0].partitions[0].error_code == 0
            allowed["now"] = False
            r = await shards.submit(commit("g", "orders", 0, 6), 8)
            assert r.topics[0].partitions[0].error_code == E.NOT_COORDINATOR
            allowed["now"] = True
            got = await shards.submit(fetch("g", "orders", [0]), 7)
            assert fetched(got) == {("orders", 0): 5}      # the refused commit changed nothing
        finally:
            await shards.close()

    run(go())


def test_list_groups_leaves_out_shards_this_node_does_not_hold(run, tmp_path):
    # Cluster mode / --processes: a node lists the groups of the shards it holds, as a Kafka
    # broker lists those of the coordinators it leads; the others are not an error.
    async def go():
        shards = make(tmp_path, shards=4)
        groups = ["g%d" % i for i in range(12)]
        held = {shard_for(g, 4) for g in groups[:1]}
        await shards.start(shards=sorted(held))
        try:
            for g in groups:
                if shard_for(g, 4) in held:
                    r = await shards.submit(commit(g, "orders", 0, 1), 8)
                    assert r.topics[0].partitions[0].error_code == 0
            resp = await shards.submit(m.ListGroupsRequest(), 4)
            assert resp.error_code == 0
            assert sorted(x.group_id for x in resp.groups) == \
                sorted(g for g in groups if shard_for(g, 4) in held)
        finally:
            await shards.close()

    run(go())
