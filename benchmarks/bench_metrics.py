"""What `serve --metrics-port` costs: heartbeats/s of two identical nodes, one without metrics
and one with them (scraped every --scrape-every seconds meanwhile), in alternating rounds of
the same run; then the cost of one scrape of a node holding many groups.

    PYTHONPATH=src python benchmarks/bench_metrics.py [--rounds 6] [--seconds 5]
        [--groups 100 --members 100] [--scrape-groups 10000] [--out FILE]

Two `groupcoord serve` children (bench_server.serve's arguments; the second also gets
--metrics-port 0) start side by side; loadgen (benchmarks/loadgen.py, as a library, through
hbflood.form) forms --groups x --members KIP-848 members on each and waits until every one is
steady. Then rounds alternate between the nodes, in the order A B B A A B ... so that a drift
of the machine over the run falls on both alike: each round is hbflood's light closed-loop
heartbeat flood (a process of its own, benchmarks/hbflood.py) against one node for --seconds
after --warmup, reporting heartbeats/s and the node's CPU (/proc). The node measured idles
meanwhile (its members' sessions outlast a round). Rounds with metrics run a scraper that GETs
/metrics every --scrape-every seconds: what a Prometheus scrape costs is in those figures.

Scrape cost: --scrape-groups single-member KIP-848 groups are formed on the node with metrics
(on top of the flood's), then /metrics is fetched once (it counts every group again: they all
changed) and --scrapes times more (only what changed since) with nothing else running: the
wall time of each GET over loopback (the exposition is built on the node's event loop, so
this is also about how long the loop is busy with it) and the size of the answer.

Nothing here asserts on time; the report is a markdown section (docs/benchmarks-server.md,
"Metrics overhead").
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_server as B  # noqa: E402
import hbflood as H  # noqa: E402
import loadgen as L  # noqa: E402

from groupcoord.groups.config import ShardConfig  # noqa: E402
from groupcoord.groups.topics import TopicCatalog  # noqa: E402
from groupcoord.protocol import encode_request_frame  # noqa: E402
from groupcoord.protocol import messages as m  # noqa: E402
from groupcoord.runtime import RuntimeConfig, ShardSet  # noqa: E402
from groupcoord.server.connection import ServerConnection  # noqa: E402
from groupcoord.server.metrics import COUNT_CHUNK, Metrics, RequestStats  # noqa: E402
from groupcoord.server.server import Server, ServerConfig  # noqa: E402


class Node:
    """One `groupcoord serve` child and the members formed on it."""

    def __init__(self, name: str, topics: list, metrics: bool):
        self.name = name
        self.data = B.data_root()
        argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--host", "127.0.0.1",
                "--port", "0", "--data-dir", self.data, "--log-level", "INFO",
                # rounds of the other node leave these members idle: sessions outlast them
                "--group-config", "group.consumer.max.session.timeout.ms=600000",
                "--group-config", "group.consumer.session.timeout.ms=600000"]
        for t in topics:
            argv += ["--topic", t]
        if metrics:
            argv += ["--metrics-port", "0"]
        self.proc = B.Proc(argv, "groupcoord serve")
        self.metrics_url = None
        if metrics:
            deadline = time.monotonic() + 10
            while self.metrics_url is None:
                m = re.search(r"metrics on http://([\d.]+):(\d+)/", self.proc.stderr_tail(100_000))
                if m:
                    self.metrics_url = (m.group(1), int(m.group(2)))
                elif time.monotonic() > deadline:
                    raise RuntimeError("no metrics line:\n" + self.proc.stderr_tail())
                else:
                    time.sleep(0.05)
        self.members: list = []

    def stop(self) -> None:
        rc = self.proc.stop()
        if rc not in (0, None):
            print("%s exit status %s:\n%s" % (self.name, rc, self.proc.stderr_tail()),
                  file=sys.stderr)
        shutil.rmtree(self.data, ignore_errors=True)


async def http_get(host: str, port: int, path: str) -> bytes:
    r, w = await asyncio.open_connection(host, port)
    w.write(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    data = await r.read()
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("GET %s: %r" % (path, head[:100]))
    return body


async def scraper(node: Node, every: float, out: list) -> None:
    while True:
        t0 = time.perf_counter()
        body = await http_get(*node.metrics_url, "/metrics")
        out.append((time.perf_counter() - t0, len(body)))
        await asyncio.sleep(every)


async def flood_round(a, node: Node, scrapes: list) -> dict:
    spec = {"targets": [{"host": node.proc.host, "port": node.proc.port, "pid": node.proc.pid,
                         "connections": a.connections, "members": node.members}],
            "window": a.window, "seconds": a.seconds, "warmup": a.warmup, "io": "selectors"}
    task = None
    if node.metrics_url is not None and a.scrape_every > 0:
        task = asyncio.get_running_loop().create_task(scraper(node, a.scrape_every, scrapes))
    try:
        r = await H.run_flood(spec)
    finally:
        if task is not None:
            task.cancel()
    cpu = r["node_cpu"][0]
    return {"rate": r["rate"], "cpu": cpu, "us_per_hb": cpu / r["rate"] * 1e6 if cpu else None,
            "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": r["errors"],
            "fenced": r["fenced"]}


# ----------------------------------------------------------------------------- in process
class _Transport:
    """What a ServerConnection needs of a transport; writes are counted, not sent."""

    def __init__(self):
        self.written = 0

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high=None):
        pass

    def write(self, data):
        self.written += len(data)

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        pass

    def abort(self):
        pass


async def micro(a) -> dict:
    """The connection layer alone, in this process: a ServerConnection over a real ShardSet
    is handed the same pipelined frames (--window steady KIP-848 heartbeats per loop turn, the
    node's hot path; and ApiVersions, the cheapest request) through a transport that only
    counts what is written. CPU time per request, request metrics off and on, alternating
    runs; the fastest and the median run of each."""
    data = tempfile.mkdtemp(prefix="groupcoord-bench-metrics-")
    cfg = ShardConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0)
    shards = ShardSet(RuntimeConfig(data_dir=data, shards=1, fsync="unsafe-no-fsync",
                                    shard_config=cfg), topics=TopicCatalog.of(t=a.window))
    await shards.start()
    srv = Server(ServerConfig(host="127.0.0.1", port=0), shards)
    await srv.start()
    try:
        members = await _steady_members(shards, a.window)
        hb = b"".join(encode_request_frame(m.ConsumerGroupHeartbeatRequest(
            group_id="micro", member_id=mid, member_epoch=ep), 0, i, "micro")
            for i, (mid, ep, _) in enumerate(members))
        av = b"".join(encode_request_frame(m.ApiVersionsRequest(), 3, i, "micro")
                      for i in range(a.window))

        async def run(frames: bytes, metered: bool, turns: int) -> float:
            srv.stats = RequestStats() if metered else None
            conn = ServerConnection(srv, srv.bound[0])
            conn.connection_made(_Transport())
            for _ in range(20):
                conn.data_received(frames)
                await asyncio.sleep(0)
            t0 = time.process_time()
            for _ in range(turns):
                conn.data_received(frames)
                await asyncio.sleep(0)      # the turn's answers are flushed
            dt = time.process_time() - t0
            conn.connection_lost(None)
            if metered and not srv.stats.table:
                raise RuntimeError("nothing was counted")
            return dt / (turns * a.window) * 1e9

        out = {}
        for name, frames in (("steady ConsumerGroupHeartbeat", hb), ("ApiVersions", av)):
            times: dict = {False: [], True: []}
            for i in range(a.micro_runs):
                for metered in ((False, True) if i % 2 == 0 else (True, False)):
                    times[metered].append(await run(frames, metered, a.micro_turns))
            out[name] = (min(times[False]), min(times[True]),
                         statistics.median(times[False]), statistics.median(times[True]))
            print("micro %s: %s" % (name, out[name]), file=sys.stderr)
        return out
    finally:
        srv.stats = None
        await srv.shutdown()
        shutil.rmtree(data, ignore_errors=True)


async def _steady_members(shards, n: int) -> list:
    """n KIP-848 members of group "micro", joined and reconciled until each one's last
    heartbeat reported exactly its assignment (the node's steady path answers them)."""
    def ask(req):
        return shards.submit(req, 0, "micro", "127.0.0.1")
    members = []
    for _ in range(n):
        r = await ask(m.ConsumerGroupHeartbeatRequest(
            group_id="micro", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["t"], topic_partitions=[]))
        members.append([r.member_id, r.member_epoch, r.assignment])
    for _ in range(50):
        changed = False
        for mb in members:
            owned = [] if mb[2] is None else [
                m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=tp.topic_id,
                                                              partitions=tp.partitions)
                for tp in mb[2].topic_partitions]
            r = await ask(m.ConsumerGroupHeartbeatRequest(
                group_id="micro", member_id=mb[0], member_epoch=mb[1], topic_partitions=owned))
            changed = changed or r.member_epoch != mb[1] or r.assignment is not None
            mb[1] = r.member_epoch
            if r.assignment is not None:
                mb[2] = r.assignment
        if not changed:
            return members
    raise RuntimeError("the micro group did not settle")


async def scrape_cost(a) -> dict:
    """What building /metrics costs the event loop, in this process: --scrape-groups
    single-member KIP-848 groups on a ShardSet of 50 shards with the metrics hooks; the
    exposition when every group must be counted again (all changed since the last scrape,
    e.g. a mass rebalance), at once (exposition) and in slices (exposition_async, what
    /metrics does: the longest time the loop is held is measured by a task that wakes at
    every turn), and when nothing changed."""
    data = tempfile.mkdtemp(prefix="groupcoord-bench-metrics-")
    cfg = ShardConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0)
    shards = ShardSet(RuntimeConfig(data_dir=data, shards=50, fsync="unsafe-no-fsync",
                                    shard_config=cfg), topics=TopicCatalog.of(t=8))
    metrics = Metrics(shards)
    metrics.watch_shards()
    await shards.start()
    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(shards.submit(m.ConsumerGroupHeartbeatRequest(
            group_id="s%05d" % i, member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["t"], topic_partitions=[]), 0)
            for i in range(a.scrape_groups)))
        formed = time.perf_counter() - t0
        metrics.exposition()

        def all_changed():
            metrics._group_cache.clear()    # as after every group changed: count them all

        def timed(fn) -> float:
            t1 = time.perf_counter()
            fn()
            return (time.perf_counter() - t1) * 1e3

        out = {"groups": a.scrape_groups, "formed_s": formed, "bytes": len(metrics.exposition())}
        cold, warm, whole, held = [], [], [], []
        for _ in range(a.scrapes):
            all_changed()
            cold.append(timed(metrics.exposition))
            warm.append(timed(metrics.exposition))
            all_changed()
            gaps: list = []
            stop = False

            async def watch():
                last = time.perf_counter()
                while not stop:
                    await asyncio.sleep(0)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now
            w = asyncio.ensure_future(watch())
            await asyncio.sleep(0)
            t1 = time.perf_counter()
            await metrics.exposition_async()
            whole.append((time.perf_counter() - t1) * 1e3)
            stop = True
            await w
            held.append(max(gaps) * 1e3)
        out.update(cold_ms=statistics.median(cold), warm_ms=statistics.median(warm),
                   sliced_ms=statistics.median(whole), held_ms=statistics.median(held),
                   held_max_ms=max(held))
        print("scrape cost: %s" % out, file=sys.stderr)
        return out
    finally:
        await shards.close()
        shutil.rmtree(data, ignore_errors=True)


async def wait_idle(pid: int, bound: float = 120.0) -> None:
    """Until the process uses under 5% of a core over half a second (bounded)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        c0 = L.proc_cpu_seconds(pid)
        await asyncio.sleep(0.5)
        if L.proc_cpu_seconds(pid) - c0 < 0.025:
            return


async def main_async(a) -> dict:
    res = {"loadavg0": "%.2f %.2f %.2f" % os.getloadavg(), "rounds": []}
    if a.micro_runs:
        res["micro"] = await micro(a)
    if a.scrape_groups:
        res["scrape_cost"] = await scrape_cost(a)
    if not a.rounds:
        res["loadavg1"] = "%.2f %.2f %.2f" % os.getloadavg()
        return res
    off = Node("without metrics", a.topic, False)
    on = Node("with metrics", a.topic, True)
    try:
        names = ["hb-%04d" % i for i in range(a.groups)]
        topics = [t.split(":")[0] for t in a.topic]
        for n in (off, on):
            t0 = time.perf_counter()
            n.members = await H.form(n.proc.host, n.proc.port, names, a.members, topics,
                                     a.connections)
            print("%s: %d members formed in %.1f s" % (n.name, len(n.members),
                                                       time.perf_counter() - t0),
                  file=sys.stderr)
        scrapes: list = []
        order = []
        for i in range(a.rounds):
            order += [(off, on), (on, off)][i % 2]
        pairs: dict = {}
        for i, node in enumerate(order):
            r = await flood_round(a, node, scrapes)
            pairs.setdefault(i // 2, {})[node is on] = r
            print("round %d %s: %s" % (i // 2, node.name, r), file=sys.stderr)
        res["rounds"] = [(p[False], p[True]) for _, p in sorted(pairs.items())]
        res["flood_scrapes"] = scrapes
        # The scrape of a node with many groups, nothing else running.
        if a.scrape_groups:
            t0 = time.perf_counter()
            await form_many(on, a.scrape_groups, topics[0])
            res["formed_s"] = time.perf_counter() - t0
            await wait_idle(on.proc.pid)   # timers of the new groups fired, joins written
            # The first scrape after forming counts every group that changed (all of them);
            # the next ones only what changed since (nothing: the members stay quiet).
            t1 = time.perf_counter()
            body = await http_get(*on.metrics_url, "/metrics")
            cold = time.perf_counter() - t1
            stable = [x for x in body.decode().splitlines()
                      if x.startswith('groupcoord_groups{state="Stable",type="consumer"}')]
            times = []
            for _ in range(a.scrapes):
                await asyncio.sleep(0.05)
                t1 = time.perf_counter()
                body = await http_get(*on.metrics_url, "/metrics")
                times.append(time.perf_counter() - t1)
            res["big_scrape"] = {"groups": a.scrape_groups + a.groups, "bytes": len(body),
                                 "cold_ms": cold * 1e3, "stable": stable,
                                 "p50_ms": statistics.median(times) * 1e3,
                                 "max_ms": max(times) * 1e3}
    finally:
        off.stop()
        on.stop()
    res["loadavg1"] = "%.2f %.2f %.2f" % os.getloadavg()
    return res


async def form_many(node: Node, n: int, topic: str) -> None:
    """n single-member consumer groups on node, formed in batches (loadgen)."""
    batch = 2000
    for start in range(0, n, batch):
        lg = L.LoadGen(node.proc.host, node.proc.port, 8, 64)
        await lg.connect()
        try:
            for i in range(start, min(n, start + batch)):
                lg.consumer_group("sg-%05d" % i, 1, [topic])
            await lg.start(lg.all_members())
            await lg.wait_converged(lg.groups, 600)
        finally:
            await lg.close()


def report(a, res: dict, cmd: str) -> str:
    rows = res["rounds"]
    out = ["## Metrics overhead", ""]
    mi = res.get("micro")
    if mi:
        out += ["In process (the connection layer alone, no sockets; `micro` in "
                "benchmarks/bench_metrics.py): a ServerConnection over a real ShardSet is handed "
                "%d pipelined requests per loop turn through a transport that only counts the "
                "bytes written; CPU per request with the request metrics off and on, %d "
                "alternating runs of %d turns each." % (a.window, a.micro_runs, a.micro_turns),
                "", "| request | metrics off: ns/request (fastest / median run) | metrics on | "
                "cost of counting (fastest runs) | ratio |", "|---|---|---|---|---|"]
        for name, (off, on, off_med, on_med) in mi.items():
            out.append("| %s | %.0f / %.0f | %.0f / %.0f | %+.0f ns | %.3f |" % (
                name, off, off_med, on, on_med, on - off, on / off))
        out.append("")
    sc = res.get("scrape_cost")
    if sc:
        out += ["What building /metrics costs the event loop (in process, `scrape_cost`: %d "
                "single-member KIP-848 groups on 50 shards, medians of %d): when every group "
                "must be counted again (all changed since the last scrape) %.1f ms at once, "
                "%.1f ms in all when counted in slices of %d groups as /metrics does, the loop "
                "held at most %.2f ms at a time (worst of the runs %.2f ms); when nothing "
                "changed %.2f ms (%d bytes)." % (
                    sc["groups"], a.scrapes, sc["cold_ms"], sc["sliced_ms"], COUNT_CHUNK,
                    sc["held_ms"], sc["held_max_ms"], sc["warm_ms"], sc["bytes"]), ""]
    if not rows:
        return _tail(out, res, cmd)
    out += [
           "Two identical nodes side by side, one started with `--metrics-port` (and scraped "
           "every %g s during its rounds), one without; %d KIP-848 groups x %d members on each "
           "(%d members), steady. Rounds alternate between the nodes (A B B A ...), each a "
           "closed-loop heartbeat flood (benchmarks/hbflood.py, %d connections, window %d) for "
           "%g s after %g s of warm-up. Server CPU is the node's own (/proc), per heartbeat."
           % (a.scrape_every, a.groups, a.members, a.groups * a.members, a.connections,
              a.window, a.seconds, a.warmup), "",
           "| round | without: heartbeats/s | with: heartbeats/s | ratio | without: server "
           "us/hb | with: server us/hb | ratio | p99 ms without / with | errors |",
           "|---|---|---|---|---|---|---|---|---|"]
    ratios, cratios = [], []
    for i, (x, y) in enumerate(rows):
        ratio = y["rate"] / x["rate"]
        ratios.append(ratio)
        cr = (y["us_per_hb"] / x["us_per_hb"]) if x["us_per_hb"] and y["us_per_hb"] else None
        if cr:
            cratios.append(cr)
        errs = sum(x["errors"].values()) + sum(y["errors"].values()) + x["fenced"] + y["fenced"]
        out.append("| %d | %.0f | %.0f | %.3f | %.2f | %.2f | %s | %.1f / %.1f | %d |" % (
            i + 1, x["rate"], y["rate"], ratio, x["us_per_hb"] or 0, y["us_per_hb"] or 0,
            "%.3f" % cr if cr else "-", x["p99_ms"], y["p99_ms"], errs))
    out.append("| **median** | %.0f | %.0f | **%.3f** | %.2f | %.2f | **%s** | | |" % (
        statistics.median(x["rate"] for x, _ in rows),
        statistics.median(y["rate"] for _, y in rows), statistics.median(ratios),
        statistics.median(x["us_per_hb"] or 0 for x, _ in rows),
        statistics.median(y["us_per_hb"] or 0 for _, y in rows),
        "%.3f" % statistics.median(cratios) if cratios else "-"))
    sc = res.get("flood_scrapes") or []
    if sc:
        out += ["", "Scrapes during the flood rounds: %d, answered in p50 %.1f ms, max %.1f ms "
                "(%d bytes), queued behind the flood's heartbeats on a saturated node."
                % (len(sc), statistics.median(t for t, _ in sc) * 1e3,
                   max(t for t, _ in sc) * 1e3, sc[-1][1])]
    big = res.get("big_scrape")
    if big:
        out += ["", "Scrape cost, nothing else running, on the node with metrics holding %d "
                "groups (%d single-member groups added, formed in %.0f s; %s): the first "
                "scrape after they formed, which counts every group again, %.1f ms; the next "
                "%d, which count only the groups changed since, p50 %.1f ms, max %.1f ms "
                "(%d bytes). Wall time of the GET over loopback; the exposition is built on "
                "the node's event loop." % (
                    big["groups"], big["groups"] - a.groups, res["formed_s"],
                    big["stable"][0] if big["stable"] else "?", big["cold_ms"], a.scrapes,
                    big["p50_ms"], big["max_ms"], big["bytes"])]
    return _tail(out, res, cmd)


def _tail(out: list, res: dict, cmd: str) -> str:
    out += ["", "Load average before / after: %s / %s." % (res["loadavg0"], res["loadavg1"]),
            "", "Produced by `%s` on %s, %d CPUs, Python %s." % (
                cmd, platform.machine(), os.cpu_count() or 0, platform.python_version()), ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_metrics", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", action="append", default=None,
                    help="NAME:PARTITIONS (repeatable; default topic-0:1000)")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--members", type=int, default=100, help="per group")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6, help="pairs of rounds (one per node)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--scrape-every", type=float, default=1.0,
                    help="seconds between scrapes of the node with metrics during its rounds "
                         "(0: none)")
    ap.add_argument("--scrape-groups", type=int, default=10_000,
                    help="groups formed for the scrape-cost measurement (0: skip it)")
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--micro-runs", type=int, default=10,
                    help="in-process runs per setting (0: skip the in-process part)")
    ap.add_argument("--micro-turns", type=int, default=2000,
                    help="loop turns of --window requests per in-process run")
    ap.add_argument("--out", default=None, help="write the markdown section here")
    a = ap.parse_args(argv)
    if not a.topic:
        a.topic = ["topic-0:1000"]
    loop = L.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        res = loop.run_until_complete(main_async(a))
    finally:
        loop.close()
    cmd = "PYTHONPATH=src python benchmarks/bench_metrics.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    text = report(a, res, cmd.strip())
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
