"""Durability latency through the shard runtime: how long an offset commit waits for its
group commit (write + fdatasync) at a fixed offered load, open loop (requests are issued on
schedule whether or not earlier ones were answered, so queueing shows up in the figures).

    PYTHONPATH=src python benchmarks/bench_runtime.py [--dir DIR] [--seconds S]
        [--rates 1000,50000] [--shards N] [--loop uvloop|asyncio] [--out FILE]

For each rate it reports achieved writes/s, group commits/s (fsyncs), records per commit and
the latency percentiles, with fsync="always" and, as the baseline measured in the same run,
fsync="unsafe-no-fsync" (what the runtime costs without the disk). DIR should be on the disk
a coordinator would use (default: a temp dir under the current directory; /tmp may be tmpfs).
"""
import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.runtime import RuntimeConfig, ShardSet


def commit_request(i: int, partitions: int = 1) -> m.OffsetCommitRequest:
    """An OffsetCommit of ``partitions`` partitions (= records written) for one of 500 groups."""
    return m.OffsetCommitRequest(
        group_id="group-%d" % (i % 500), generation_id_or_member_epoch=-1, member_id="",
        topics=[m.OffsetCommitRequestTopic(name="t", partitions=[
            m.OffsetCommitRequestPartition(partition_index=(i + k) % 16, committed_offset=i)
            for k in range(partitions)])])


async def run_rate(d: str, rate: int, seconds: float, shards: int, fsync: str,
                   per_request: int = 1, io_threads: int = 4) -> dict:
    """rate: records (writes) per second, sent as requests of per_request records each."""
    writes = rate
    rate = max(1, rate // per_request)          # requests per second
    shutil.rmtree(d, ignore_errors=True)
    c = ShardSet(RuntimeConfig(data_dir=d, shards=shards, fsync=fsync,
                               io_threads=io_threads),
                 topics=TopicCatalog.of(t=16))
    await c.start()
    loop = asyncio.get_running_loop()
    n_total = int(rate * seconds)
    reqs = [commit_request(i, per_request) for i in range(min(n_total, 200_000))]
    lat = np.zeros(n_total, dtype=np.float64)
    errors = 0
    done = 0
    all_done = loop.create_future()

    async def one(i, t_sched):
        nonlocal errors, done
        resp = await c.submit(reqs[i % len(reqs)], 8)
        lat[i] = time.perf_counter() - t_sched
        if resp.topics[0].partitions[0].error_code:
            errors += 1
        done += 1
        if done == n_total and not all_done.done():
            all_done.set_result(None)

    tick = 0.001                               # issue what is due every millisecond
    t0 = time.perf_counter()
    issued = 0
    flushes0 = sum(s.flushes for s in c.shards)
    while issued < n_total:
        now = time.perf_counter()
        due = min(n_total, int((now - t0) * rate) + 1)
        while issued < due:
            # latency counts from the scheduled send time (open loop)
            loop.create_task(one(issued, t0 + issued / rate))
            issued += 1
        await asyncio.sleep(tick)
    await all_done
    elapsed = time.perf_counter() - t0
    flushes = sum(s.flushes for s in c.shards) - flushes0
    await c.close()
    shutil.rmtree(d, ignore_errors=True)
    ms = lat * 1000
    return {"rate": writes, "per_request": per_request, "fsync": fsync,
            "requests": n_total / elapsed, "achieved": n_total * per_request / elapsed,
            "commits_per_s": flushes / elapsed,
            "per_commit": n_total * per_request / max(flushes, 1),
            "p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()), "errors": errors}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="data directory (default: temp dir in cwd)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per rate (default 3)")
    ap.add_argument("--rates", default="1000,50000", help="writes/s to offer (default 1000,50000)")
    ap.add_argument("--shards", type=int, default=50)
    ap.add_argument("--per-request", default="1,10",
                    help="records (partitions) per OffsetCommit request, comma-separated "
                         "(default 1,10: a request per write, and consumers committing 10 "
                         "partitions at once)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--io-threads", type=int, default=RuntimeConfig().io_threads,
                    help="RuntimeConfig.io_threads: group commits written+fsynced at once")
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    a = ap.parse_args(argv)
    base = a.dir or tempfile.mkdtemp(prefix="bench-runtime-", dir=os.getcwd())
    rates = [int(x) for x in a.rates.split(",")]
    if a.loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    rows = []
    try:
        for per in [int(x) for x in a.per_request.split(",")]:
            for rate in rates:
                for fsync in ("unsafe-no-fsync", "always"):
                    with asyncio.Runner(loop_factory=factory) as r:
                        row = r.run(run_rate(os.path.join(base, "d"), rate, a.seconds,
                                             a.shards, fsync, per, a.io_threads))
                    rows.append(row)
                    print("rate %(rate)d x%(per_request)d fsync %(fsync)s: %(achieved).0f "
                          "writes/s, p50 %(p50).2f ms, p99 %(p99).2f ms" % row,
                          file=sys.stderr)
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    lines = ["| offered writes/s | records per request | fsync | achieved writes/s | "
             "requests/s | group commits/s | records per commit | p50 ms | p99 ms | max ms | "
             "p99 vs no-fsync |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["rate"], r["per_request"], r["fsync"]): r for r in rows}
    for r in rows:
        ratio = r["p99"] / max(by[(r["rate"], r["per_request"], "unsafe-no-fsync")]["p99"],
                               1e-9)
        lines.append("| %d | %d | %s | %.0f | %.0f | %.0f | %.1f | %.2f | %.2f | %.2f | %.1fx |"
                     % (r["rate"], r["per_request"], r["fsync"], r["achieved"], r["requests"],
                        r["commits_per_s"], r["per_commit"],
            r["p50"], r["p99"], r["max"], ratio))
        if r["errors"]:
            lines.append("|  | %d errors |" % r["errors"])
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
