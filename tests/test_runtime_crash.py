"""Crash test through the runtime with a real child process: the child runs a ShardSet
(4 shards, fsync on) and keeps many offset commits and consumer-group joins/leaves in flight,
printing each commit only after its response came back (= acknowledged, durable). The parent
SIGKILLs it at random (seeded, printed) moments, restarts it on the same data directory a
number of times, and finally checks in-process that
  * every acknowledged commit is there (offsets only grow, so recovered >= acknowledged),
  * nothing was invented (recovered <= the highest offset the child ever sent),
  * the loaded state equals a naive replay of the shard logs (load == replay of the durable
    prefix the log kept).
Bounded to ~20 s."""
import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from groupcoord.groups.records import decode_record
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.runtime import RuntimeConfig, ShardSet
from groupcoord.storage import Log

GROUPS, PARTS = 12, 4

CHILD = textwrap.dedent("""
    import asyncio, random, sys
    from groupcoord.groups.topics import TopicCatalog
    from groupcoord.protocol import messages as m
    from groupcoord.runtime import RuntimeConfig, ShardSet

    d, seed, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    GROUPS, PARTS = %d, %d
    out = sys.stdout

    async def committer(c, g, p, r):
        off = start
        while True:
            off += r.randint(1, 5)
            print("S", g, p, off, file=out, flush=True)
            req = m.OffsetCommitRequest(group_id="g%%d" %% g, generation_id_or_member_epoch=-1,
                member_id="", topics=[m.OffsetCommitRequestTopic(name="t", partitions=[
                    m.OffsetCommitRequestPartition(partition_index=p, committed_offset=off)])])
            resp = await c.submit(req, 8)
            if resp.topics[0].partitions[0].error_code == 0:
                print("A", g, p, off, file=out, flush=True)

    async def churn(c, r):
        i = 0
        while True:
            i += 1
            mid = "m%%d-%%d" %% (seed, i)
            resp = await c.submit(m.ConsumerGroupHeartbeatRequest(group_id="cg%%d" %% (i %% 3),
                member_id=mid, member_epoch=0, rebalance_timeout_ms=30000,
                subscribed_topic_names=["t"], topic_partitions=[]), 1)
            if r.random() < 0.5 and resp.error_code == 0:
                await c.submit(m.ConsumerGroupHeartbeatRequest(group_id="cg%%d" %% (i %% 3),
                    member_id=mid, member_epoch=-1), 1)

    async def main():
        c = ShardSet(RuntimeConfig(data_dir=d, shards=4, segment_bytes=64 << 10,
                                   compact_min_dirty_bytes=64 << 10),
                     topics=TopicCatalog.of(t=PARTS))
        await c.start()
        print("ready", flush=True)
        r = random.Random(seed)
        await asyncio.gather(churn(c, r), *(committer(c, g, p, random.Random(seed + g * 10 + p))
                                            for g in range(GROUPS) for p in range(PARTS)))

    asyncio.run(main())
""" % (GROUPS, PARTS))


def _read_lines(proc, acked, sent):
    # Only complete lines: the kill may cut the last one mid-write ("S 3 1 12" of "S 3 1 123").
    for line in proc.stdout.read().decode().split("\n")[:-1]:
        parts = line.split()
        if len(parts) == 4 and parts[0] in ("A", "S"):
            key, off = (int(parts[1]), int(parts[2])), int(parts[3])
            table = acked if parts[0] == "A" else sent
            table[key] = max(table.get(key, -1), off)


async def _recovered(d):
    c = ShardSet(RuntimeConfig(data_dir=d, shards=4), topics=TopicCatalog.of(t=PARTS))
    await c.start()
    out = {}
    for g in range(GROUPS):
        resp = await c.submit(m.OffsetFetchRequest(group_id="g%d" % g, topics=[
            m.OffsetFetchRequestTopic(name="t", partition_indexes=list(range(PARTS)))]), 5)
        for p in resp.topics[0].partitions:
            out[(g, p.partition_index)] = p.committed_offset
    snaps = [s.shard.snapshot(durable=True) for s in c.shards]
    await c.close()
    return out, snaps


def test_sigkill_through_the_runtime_loses_nothing_acknowledged(tmp_path):
    seed = int(os.environ.get("GROUPCOORD_CRASH_SEED", random.randrange(1 << 30)))
    print("runtime crash test seed", seed, "(GROUPCOORD_CRASH_SEED=%d to repeat)" % seed)
    r = random.Random(seed)
    d = str(tmp_path / "data")
    import groupcoord
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__))) \
        + os.pathsep + env.get("PYTHONPATH", "")
    acked: dict = {}
    sent: dict = {}
    kills = 0
    deadline = time.monotonic() + 20
    while (time.monotonic() < deadline or kills < 5) and kills < 30:
        start = max(sent.values(), default=0) + 1     # offsets keep growing across runs
        p = subprocess.Popen([sys.executable, "-c", CHILD, d, str(r.randrange(1 << 30)),
                              str(start)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
        try:
            first = p.stdout.readline()
            assert first.startswith(b"ready"), (first, p.stderr.read()[-3000:])
            time.sleep(r.uniform(0.05, 0.5))    # the subject: a random (seeded) kill moment
            p.send_signal(signal.SIGKILL)
            _read_lines(p, acked, sent)
            p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        kills += 1
    assert acked, "the child acknowledged nothing"
    recovered, snaps = asyncio.run(_recovered(d))
    for key, off in acked.items():
        assert recovered[key] >= off, (key, off, recovered[key])
    for key, off in recovered.items():
        if off >= 0:
            assert off <= sent[key], (key, off, sent[key])
    # The loaded state is the replay of what each log holds.
    for i, snap in enumerate(snaps):
        sh = Shard(topics=TopicCatalog.of(t=PARTS))
        with Log(os.path.join(d, "__consumer_offsets-%d" % i)) as lg:
            for _o, k, v in lg.read():
                sh.replay(decode_record(k, v))
        assert sh.snapshot(durable=True) == snap, i
    print("kills", kills, "acknowledged commits", len(acked))
