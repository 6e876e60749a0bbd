"""Offsets retention across kill -9, through the runtime with a real child process (the style
of tests/test_runtime_crash.py): the child runs a ShardSet, commits offsets to a simple
group and to a KIP-848 consumer group whose member subscribes to topic "t" only, prints what
was acknowledged, and is SIGKILLed. The parent then loads the same data directory in-process
and checks that
  * offsets expired before the kill stay expired (their tombstones were durable: the restarted
    node cannot expire anything itself, its check being an hour away), and the emptied simple
    group stays deleted;
  * the retention check is re-armed after load, so offsets that became due while the node was
    down expire soon after start (the restarted node's clock runs two hours ahead of the
    child's instead of the test sleeping), while a subscribed topic's offsets stay;
  * the loaded state equals a naive replay of the shard logs.
No assertion on timings: waits are bounded polls for the state."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

from groupcoord.groups import offsets
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import decode_record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.runtime import RuntimeConfig, ShardSet
from groupcoord.runtime.shard_runtime import wall_clock_ms
from groupcoord.storage import Log

SHARDS = 2
HOUR = 3_600_000
TOPICS = {"t": 2}

CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from groupcoord.groups.config import ShardConfig
    from groupcoord.groups.topics import TopicCatalog
    from groupcoord.protocol import messages as m
    from groupcoord.runtime import RuntimeConfig, ShardSet

    d, retention, interval, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    def commit(group, topics, epoch=-1, member=""):
        return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch,
            member_id=member, topics=[m.OffsetCommitRequestTopic(name=t, partitions=[
                m.OffsetCommitRequestPartition(partition_index=0, committed_offset=42)])
                for t in topics])

    async def fetch(c, group, topic):
        r = await c.submit(m.OffsetFetchRequest(group_id=group, topics=[
            m.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 5)
        return r.topics[0].partitions[0].committed_offset

    async def main():
        c = ShardSet(RuntimeConfig(data_dir=d, shards=%d, shard_config=ShardConfig(
            offsets_retention_ms=retention, offsets_retention_check_interval_ms=interval)),
            topics=TopicCatalog.of(t=2))
        await c.start()
        r = await c.submit(commit("s", ["t"]), 8)
        assert r.topics[0].partitions[0].error_code == 0, r
        r = await c.submit(m.ConsumerGroupHeartbeatRequest(group_id="cg", member_id="m1",
            member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
            topic_partitions=[]), 1)
        assert r.error_code == 0, r
        r = await c.submit(commit("cg", ["t", "old"], r.member_epoch, "m1"), 9)
        assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r
        print("committed", flush=True)
        if wait == "expired":
            # An OffsetFetch is answered after every record before it is durable, the
            # expiry's tombstones included.
            deadline = time.monotonic() + 30
            while (await fetch(c, "s", "t") != -1 or await fetch(c, "cg", "old") != -1):
                assert time.monotonic() < deadline, "nothing expired in 30 s"
                await asyncio.sleep(0.05)
            print("expired", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""" % SHARDS)


def run_child(d, retention, interval, wait):
    """Run the child until it prints ``wait``, then SIGKILL it."""
    import groupcoord
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__))) \
        + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "-c", CHILD, d, str(retention), str(interval), wait],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        for _ in range(2):
            line = p.stdout.readline()
            if line.strip().decode() == wait or not line:
                break
        assert line.strip().decode() == wait, (line, p.stderr.read()[-3000:])
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def shard_set(d, interval, skew_ms=0, retention=HOUR):
    return ShardSet(RuntimeConfig(data_dir=d, shards=SHARDS, shard_config=ShardConfig(
        offsets_retention_ms=retention, offsets_retention_check_interval_ms=interval)),
        topics=TopicCatalog.of(**TOPICS), clock=lambda: wall_clock_ms() + skew_ms)


async def fetch(c, group, topic):
    r = await c.submit(m.OffsetFetchRequest(group_id=group, topics=[
        m.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 5)
    return r.topics[0].partitions[0].committed_offset


async def state(c) -> dict:
    out = {(g, t): await fetch(c, g, t) for g, t in (("s", "t"), ("cg", "t"), ("cg", "old"))}
    listed = await c.submit(m.ListGroupsRequest(), 5)
    out["groups"] = sorted(g.group_id for g in listed.groups)
    return out


def check_load_is_replay(d, c):
    for i, rt in enumerate(c.shards):
        sh = Shard(topics=TopicCatalog.of(**TOPICS))
        with Log(os.path.join(d, "__consumer_offsets-%d" % i)) as lg:
            for _o, k, v in lg.read():
                sh.replay(decode_record(k, v))
        assert sh.snapshot(durable=True) == rt.shard.snapshot(durable=True), i


def retention_timers(c) -> list:
    return [rt.shard.timers.get(TimerKey(offsets.RETENTION, "")) for rt in c.shards]


def test_offsets_expired_before_a_kill9_stay_expired(tmp_path):
    d = str(tmp_path / "data")
    run_child(d, retention=300, interval=100, wait="expired")

    async def go():
        # Retention and check an hour away: nothing here can expire anything.
        c = shard_set(d, interval=HOUR)
        await c.start()
        try:
            got = await state(c)
            check_load_is_replay(d, c)
        finally:
            await c.close()
        return got

    got = asyncio.run(go())
    assert got == {("s", "t"): -1, ("cg", "t"): 42, ("cg", "old"): -1, "groups": ["cg"]}, got


def test_offsets_due_while_down_expire_soon_after_start(tmp_path):
    d = str(tmp_path / "data")
    run_child(d, retention=HOUR, interval=HOUR, wait="committed")

    async def go():
        c = shard_set(d, interval=200, skew_ms=2 * HOUR)      # two hours later
        await c.start()
        try:
            loaded_at = c.clock()
            # Re-armed by the load, one check interval after it (as Kafka schedules it).
            for deadline in retention_timers(c):
                assert deadline is not None and deadline >= loaded_at
            bound = time.monotonic() + 20
            while (await fetch(c, "s", "t") != -1 or await fetch(c, "cg", "old") != -1):
                assert time.monotonic() < bound, "nothing expired after the restart"
                await asyncio.sleep(0.05)
            got = await state(c)
            check_load_is_replay(d, c)
        finally:
            await c.close()
        # Loaded again with no check possible: the expiry was written, not only applied.
        c = shard_set(d, interval=HOUR, skew_ms=2 * HOUR)
        await c.start()
        try:
            again = await state(c)
        finally:
            await c.close()
        return got, again

    got, again = asyncio.run(go())
    # The consumer group's member is alive (its session restarts at load): "t", which it
    # subscribes to, stays; "old" expired. The simple group lost its only offset and is gone.
    want = {("s", "t"): -1, ("cg", "t"): 42, ("cg", "old"): -1, "groups": ["cg"]}
    assert got == want, got
    assert again == want, again
