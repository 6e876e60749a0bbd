"""Cluster benchmarks (issue 19): 1 vs 2 node processes, failover over PostgreSQL, and the
durable-write cost of the PostgreSQL store against the file store.

    PYTHONPATH=src python benchmarks/bench_cluster.py [--out docs/benchmarks-cluster.md]
        [--only heartbeats,failover,store] [--seconds 5] [--kills 20] [--lease-ms 3000]

heartbeats  `groupcoord serve` with 1 process, then `--processes 2`, each with a fresh data
            directory, driven by the same light flood generator (benchmarks/hbflood.py) with
            the same groups (KIP-848 consumer groups, --groups x --members) and the same
            number of connections: with 2 processes each node gets the groups whose shard it
            owns (owner_of) over half the connections, as a client that follows
            FindCoordinator would send them. Set-up: loadgen.LoadGen joins the groups on each
            node and waits until they are steady; then one process of its own (hbflood.py
            --spec) floods steady heartbeats to every node: windows of --window pre-encoded
            requests per connection, one window in flight per connection, the answers checked
            by comparing bytes (decoded in full the first time). --io selectors|uvloop picks
            its I/O. Closed loop heartbeats/s, window latency p50/p99, CPU of every node and
            of the generator, node and generator CPU per heartbeat. The two configurations
            alternate --rounds times.
failover    a private PostgreSQL (tests/pg_server.py PgServer) and two `serve --store
            postgresql://` nodes; one KIP-848 member heartbeats every 100 ms. Each of --kills
            rounds: kill -9 the node that coordinates its group, then time until the member's
            first successful heartbeat (it re-finds the coordinator through the surviving
            node every 50 ms, as a client's retry backoff); restart the killed node and wait
            until the cluster has settled again.
store       one node on the file store (--fsync always) and one on the PostgreSQL store (a
            private server with fsync on, synchronous_commit on: both durable), OffsetCommit
            of one partition (one record) per request at 1k and 20k requests/s, open loop
            over --connections connections, 500 groups over the 50 shards. Latency from the
            write to the response (the answer is sent after the durable write), p50/p99, and
            the records/s acknowledged.

Nothing here asserts on time. The markdown report is printed (and written to --out).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import hbflood as H  # noqa: E402
import loadgen as L  # noqa: E402
from bench_server import Proc, data_root  # noqa: E402

from groupcoord.protocol import decode_response_frame, encode_request_frame  # noqa: E402
from groupcoord.protocol import messages as m  # noqa: E402
from groupcoord.runtime import shard_for  # noqa: E402
from groupcoord.server.processes import owner_of  # noqa: E402

SHARDS = 50
TOPIC = "topic-0"


# ----------------------------------------------------------------------------- helpers
def _nodes_of(pid: int) -> dict:
    """node id -> pid of the children of a --processes supervisor (their --process-node)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if int(data[data.rindex(b")") + 2:].split()[1]) == pid and b"--process-node" in argv:
            out[int(argv[argv.index(b"--process-node") + 1])] = int(name)
    return out


def _serve(extra: list, what: str) -> tuple:
    d = data_root()
    argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--host", "127.0.0.1",
            "--port", "0", "--data-dir", d, "--log-level", "WARNING",
            "--topic", "%s:100" % TOPIC] + extra
    return Proc(argv, what), d


def pct(samples, p: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


class Client:
    """One connection, one request at a time (FindCoordinator, a member's heartbeats)."""

    def __init__(self, reader, writer):
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 2.0) -> "Client":
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(r, w)

    async def call(self, req, version: int, timeout: float = 5.0):
        self.corr += 1
        self.w.write(encode_request_frame(req, version, self.corr, "bench-cluster"))

        async def read():
            n = struct.unpack(">i", await self.r.readexactly(4))[0]
            return await self.r.readexactly(n)
        raw = await asyncio.wait_for(read(), timeout)
        return decode_response_frame(raw, type(req).API_KEY, version)[1]

    def close(self) -> None:
        self.w.close()


# ----------------------------------------------------------------------------- heartbeats
def _group_names(n: int) -> list:
    return ["hb-%04d" % i for i in range(n)]


async def _flood(a, procs: int) -> dict:
    extra = ["--processes", str(procs)] if procs > 1 else []
    proc, d = _serve(extra, "serve --processes %d" % procs)
    try:
        if procs == 1:
            nodes = [(proc.port, proc.pid)]
        else:
            pids = _nodes_of(proc.pid)
            assert sorted(pids) == list(range(1, procs + 1)), pids
            nodes = [(proc.port + i - 1, pids[i]) for i in sorted(pids)]
        names = _group_names(a.groups)
        conns = max(1, a.connections // procs)
        mine = [[g for g in names if procs == 1 or owner_of(shard_for(g, SHARDS), procs) == i]
                for i in range(1, procs + 1)]
        # Set-up by the full load generator (joins, assignments, confirmations), then the
        # flood by hbflood's process alone: this one only waits.
        members = await asyncio.gather(*(H.form("127.0.0.1", port, gs, a.members, [TOPIC],
                                                conns)
                                         for (port, _pid), gs in zip(nodes, mine)))
        r = await H.run_flood({"targets": [{"host": "127.0.0.1", "port": port, "pid": pid,
                                            "connections": conns, "members": ms}
                                           for (port, pid), ms in zip(nodes, members)],
                               "window": a.window, "seconds": a.seconds,
                               "warmup": a.warmup, "io": a.io})
        return {"procs": procs, "rate": r["rate"], "per_node": r["per_node"],
                "groups_per_node": [len(gs) for gs in mine],
                "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "node_cpu": r["node_cpu"],
                "gen_cpu": r["gen_cpu"], "gen_us": r["gen_us_per_hb"],
                "machine_cpu": r["machine_cpu"], "errors": sum(r["errors"].values()),
                "error_codes": r["errors"], "fenced": r["fenced"],
                "unsteady": r["unsteady"], "mismatched": r["mismatched_windows"]}
    finally:
        rc = proc.stop(30)
        if rc not in (0, None):
            print("serve exit status %s:\n%s" % (rc, proc.stderr_tail()), file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)


async def bench_heartbeats(a) -> list:
    out = []
    for r in range(a.rounds):
        for procs in (1, 2):
            x = await _flood(a, procs)
            x["round"] = r + 1
            print("heartbeats", x, file=sys.stderr)
            out.append(x)
    return out


# ----------------------------------------------------------------------------- failover
class Member:
    """One KIP-848 consumer member that heartbeats every ``interval`` s and, when its
    coordinator fails or moves, asks the nodes in turn for the coordinator again every
    ``backoff`` s. ``ok`` records the perf_counter time of every successful heartbeat."""

    def __init__(self, group: str, addrs, interval=0.1, backoff=0.05):
        self.group, self.addrs = group, addrs      # addrs(): [(host, port)] to ask
        self.interval, self.backoff = interval, backoff
        self.member_id, self.epoch = "", 0
        self.conn = None
        self.ok = array("d")
        self.errors = 0
        self.stopped = False

    async def _find(self) -> None:
        for host, port in self.addrs():
            try:
                c = await Client.connect(host, port)
            except (OSError, asyncio.TimeoutError):
                continue
            try:
                r = await c.call(m.FindCoordinatorRequest(coordinator_keys=[self.group],
                                                          key_type=0), 4, timeout=2.0)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                c.close()
                continue
            c.close()
            co = r.coordinators[0]
            if co.error_code == 0:
                self.conn = await Client.connect(co.host, co.port)
                return
        raise ConnectionError("no coordinator yet")

    def _request(self):
        if self.epoch == 0:
            return m.ConsumerGroupHeartbeatRequest(
                group_id=self.group, member_id=self.member_id, member_epoch=0,
                rebalance_timeout_ms=30000, subscribed_topic_names=[TOPIC],
                topic_partitions=[])
        return m.ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id,
                                               member_epoch=self.epoch)

    async def run(self) -> None:
        while not self.stopped:
            try:
                if self.conn is None:
                    await self._find()
                r = await self.conn.call(self._request(), 0, timeout=2.0)
            except (OSError, ConnectionError, asyncio.TimeoutError,
                    asyncio.IncompleteReadError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                await asyncio.sleep(self.backoff)
                continue
            if r.error_code == 0:
                self.member_id, self.epoch = r.member_id or self.member_id, r.member_epoch
                self.ok.append(time.perf_counter())
                await asyncio.sleep(self.interval)
                continue
            self.errors += 1
            if r.error_code in (25, 110):           # unknown member / fenced: join again
                self.epoch = 0
            self.conn.close()
            self.conn = None                        # NOT_COORDINATOR, moving: find again
            await asyncio.sleep(self.backoff)


def _node(dsn: str, node_id: int, port: int, lease_ms: int, d: str) -> Proc:
    return Proc([sys.executable, "-m", "groupcoord.cli", "serve", "--store", dsn,
                 "--node-id", str(node_id), "--host", "127.0.0.1", "--port", str(port),
                 "--lease-ms", str(lease_ms), "--topic", "%s:4" % TOPIC,
                 "--log-level", "WARNING"],
                "node %d" % node_id)


async def _settled(ports, keys, timeout=120.0) -> None:
    """Until every node lists both, and every shard has a live owner that both agree on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = []
        try:
            for p in ports:
                c = await Client.connect("127.0.0.1", p)
                md = await c.call(m.MetadataRequest(topics=[]), 12)
                fc = await c.call(m.FindCoordinatorRequest(coordinator_keys=keys,
                                                           key_type=0), 4)
                c.close()
                views.append((len(md.brokers), [(x.error_code, x.node_id)
                                                 for x in fc.coordinators]))
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            views = []
        if views and all(n == len(ports) and all(e == 0 for e, _ in fc) for n, fc in views) \
                and all(v[1] == views[0][1] for v in views) \
                and {n for _, n in views[0][1]} == set(range(1, len(ports) + 1)):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("the cluster did not settle in %.0f s" % timeout)


async def bench_failover(a) -> dict:
    from pg_server import PgServer
    pg = PgServer().start()
    d = tempfile.mkdtemp(prefix="groupcoord-bench-failover-")
    nodes = {}
    try:
        dsn = pg.dsn()
        ports = [_free_port(), _free_port()]
        ports = {1: ports[0], 2: ports[1]}
        for i in (1, 2):
            nodes[i] = _node(dsn, i, ports[i], a.lease_ms, d)
        # one key per shard: the cluster has settled when every shard has an agreed owner
        keys = []
        k = 0
        while len(keys) < SHARDS:
            g = "probe-%d" % k
            if shard_for(g, SHARDS) == len(keys):
                keys.append(g)
            k += 1
        await _settled(list(ports.values()), keys)
        member = Member("failover-group", lambda: [("127.0.0.1", p) for p in ports.values()])
        task = asyncio.ensure_future(member.run())
        times = []
        for n in range(a.kills):
            # the node coordinating the group now, with the member heartbeating on it
            while True:
                c = await Client.connect("127.0.0.1", ports[1 if n % 2 else 2])
                r = await c.call(m.FindCoordinatorRequest(coordinator_keys=[member.group],
                                                          key_type=0), 4)
                c.close()
                co = r.coordinators[0]
                if co.error_code == 0 and member.conn is not None and len(member.ok) and \
                        time.perf_counter() - member.ok[-1] < 0.5:
                    break
                await asyncio.sleep(0.05)
            victim = co.node_id
            seen = len(member.ok)
            t_kill = time.perf_counter()
            os.kill(nodes[victim].pid, signal.SIGKILL)
            nodes[victim].p.wait()
            while True:
                if len(member.ok) > seen and member.ok[-1] > t_kill:
                    first = next(t for t in member.ok[seen:] if t > t_kill)
                    break
                await asyncio.sleep(0.01)
            times.append(first - t_kill)
            print("failover %d: node %d killed, heartbeat OK after %.3f s"
                  % (n + 1, victim, times[-1]), file=sys.stderr)
            nodes[victim].stop()
            nodes[victim] = _node(dsn, victim, ports[victim], a.lease_ms, d)
            await _settled(list(ports.values()), keys)
        member.stopped = True
        await asyncio.wait_for(task, 10)
        return {"lease_ms": a.lease_ms, "times": times, "errors": member.errors,
                "p50": pct(times, 50), "p99": pct(times, 99), "max": max(times)}
    finally:
        for p in nodes.values():
            p.stop()
        pg.stop()
        shutil.rmtree(d, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- store
async def _commit_load(port: int, rate: float, seconds: float, conns: int,
                       warmup: float = 1.0) -> dict:
    """Open loop: ``rate`` OffsetCommit requests/s (one partition each) for warmup +
    seconds; latency of those sent within the window."""
    loop = asyncio.get_running_loop()
    groups = ["sw-%d" % i for i in range(500)]
    lat, errors = array("d"), [0]
    state = {"recording": False, "answered": 0}
    clients = []

    class P(asyncio.Protocol):
        def __init__(self):
            self.buf, self.sent, self.corr, self.t = bytearray(), {}, 0, None

        def connection_made(self, t):
            self.t = t

        def data_received(self, data):
            self.buf += data
            while len(self.buf) >= 4:
                n = struct.unpack_from(">i", self.buf)[0]
                if len(self.buf) < 4 + n:
                    break
                raw = bytes(self.buf[4:4 + n])
                del self.buf[:4 + n]
                corr, resp = decode_response_frame(raw, m.OffsetCommitRequest.API_KEY, 8)
                t0, rec = self.sent.pop(corr)
                code = resp.topics[0].partitions[0].error_code
                if code:
                    errors[0] += 1
                elif rec:
                    lat.append((time.perf_counter() - t0) * 1000.0)
                    state["answered"] += 1

        def send(self, k: int):
            self.corr += 1
            req = m.OffsetCommitRequest(group_id=groups[k % len(groups)], topics=[
                m.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                    m.OffsetCommitRequestPartition(partition_index=k % 4,
                                                   committed_offset=k)])])
            self.sent[self.corr] = (time.perf_counter(), state["recording"])
            self.t.write(encode_request_frame(req, 8, self.corr, "bench-store"))

    for _ in range(conns):
        _t, p = await loop.create_connection(P, "127.0.0.1", port)
        clients.append(p)
    k, credit, last = 0, 0.0, time.perf_counter()
    start = last
    t_rec = None
    while True:
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        if t_rec is None and now - start >= warmup:
            state["recording"], t_rec = True, now
        if t_rec is not None and now - t_rec >= seconds:
            state["recording"] = False
            break
        credit = min(credit + (now - last) * rate, rate * 0.01 + conns)
        last = now
        while credit >= 1:
            clients[k % conns].send(k)
            k += 1
            credit -= 1
    dt = time.perf_counter() - t_rec
    deadline = time.perf_counter() + 30
    while any(c.sent for c in clients) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    for c in clients:
        c.t.close()
    return {"target": rate, "records_s": state["answered"] / dt, "p50_ms": pct(lat, 50),
            "p99_ms": pct(lat, 99), "errors": errors[0],
            "unanswered": sum(len(c.sent) for c in clients)}


async def bench_store(a) -> list:
    from pg_server import PgServer
    out = []
    proc, d = _serve(["--fsync", "always"], "serve (file store)")
    try:
        for rate in a.rates:
            r = await _commit_load(proc.port, rate, a.seconds, a.connections)
            r["store"] = "file (--fsync always)"
            print("store", r, file=sys.stderr)
            out.append(r)
    finally:
        proc.stop()
        shutil.rmtree(d, ignore_errors=True)
    pg = PgServer(settings={"fsync": "on"}).start()
    cat = tempfile.mkdtemp(prefix="groupcoord-bench-store-")
    node = None
    try:
        node = _node(pg.dsn(), 1, _free_port(), 10_000, cat)
        keys = ["sw-%d" % i for i in range(500)]
        await _settled([node.port], keys)
        for rate in a.rates:
            r = await _commit_load(node.port, rate, a.seconds, a.connections)
            r["store"] = "postgresql (fsync on)"
            print("store", r, file=sys.stderr)
            out.append(r)
    finally:
        if node is not None:
            node.stop()
        pg.stop()
        shutil.rmtree(cat, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- report
def _f(x, nd=1) -> str:
    return "-" if x is None else "%.*f" % (nd, x)


def report(a, res: dict, cmd: str) -> str:
    lines = ["# Cluster benchmarks (issue 19)", "",
             "<!-- doc-test: skip (minutes of both cores and a private PostgreSQL) -->",
             "```bash", cmd, "```", "",
             "Machine: %s, %d cores, Python %s, %s; load average at the start: %s. Every "
             "process of a scenario (nodes, load generator, PostgreSQL) shares these cores."
             % (platform.machine(), os.cpu_count(), platform.python_version(),
                platform.platform(), res["loadavg"]), ""]
    hb = res.get("heartbeats")
    if hb:
        base = {r["round"]: r["rate"] for r in hb if r["procs"] == 1}
        lines += ["## Heartbeats/s: 1 vs 2 node processes (`--processes 2`)", "",
                  "%d KIP-848 consumer groups x %d members (%d members), %d connections in "
                  "all, light flood generator (benchmarks/hbflood.py, one process, --io %s): "
                  "windows of %d pre-encoded steady heartbeats, one window in flight per "
                  "connection (closed loop), %.0f s measurements after %.0f s warm-up. "
                  "Latency is per window (its write to its last answer). Node CPU is each "
                  "node's share of one core (/proc/PID/stat); the generator's is its process "
                  "time per second. CPU not ours: the machine's busy CPU minus the nodes' and "
                  "the generator's (other users' processes, and kernel time charged to no "
                  "process)."
                  % (a.groups, a.members, a.groups * a.members, a.connections, a.io,
                     a.window, a.seconds, a.warmup), "",
                  "| round | processes | heartbeats/s | vs 1 process | per node | p50 ms | "
                  "p99 ms | node CPU | node CPU us / heartbeat | generator CPU | generator "
                  "CPU us / heartbeat | machine CPU (of %d) | CPU not ours | errors / fenced |"
                  % (os.cpu_count() or 1),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in hb:
            cpu_per = [c / x * 1e6 for c, x in zip(r["node_cpu"], r["per_node"]) if x]
            other = r["machine_cpu"] - sum(r["node_cpu"]) - r["gen_cpu"]
            lines.append("| %d | %d | %.0f | %.2fx | %s | %s | %s | %s | %s | %s | %s | %s | "
                         "%s | %d / %d |" % (
                             r["round"], r["procs"], r["rate"], r["rate"] / base[r["round"]],
                             " + ".join("%.0f" % x for x in r["per_node"]),
                             _f(r["p50_ms"], 2), _f(r["p99_ms"], 2),
                             " + ".join(_f(c, 2) for c in r["node_cpu"]),
                             " / ".join("%.1f" % c for c in cpu_per),
                             _f(r["gen_cpu"], 2), _f(r["gen_us"], 2), _f(r["machine_cpu"], 2),
                             _f(other, 2), r["errors"], r["fenced"]))
        lines += ["", "Answers that differed from their window's first answers (decoded: "
                  "errors, or error 0 with a new assignment / epoch): %d windows, %d unsteady "
                  "answers." % (sum(r["mismatched"] for r in hb),
                                sum(r["unsteady"] for r in hb)), ""]
    fo = res.get("failover")
    if fo:
        goal = fo["lease_ms"] / 1000.0 + 2.0
        lines += ["## Failover over PostgreSQL: kill -9 to the moved group's first heartbeat",
                  "", "Two nodes (`--store postgresql://`, `--lease-ms %d`), a private "
                  "PostgreSQL 15 (tests/pg_server.py, fsync off), one KIP-848 member "
                  "heartbeating every 100 ms and re-finding its coordinator every 50 ms while "
                  "it has none. %d kills, each of the node coordinating the group; the killed "
                  "node is restarted and the cluster settles before the next."
                  % (fo["lease_ms"], len(fo["times"])), "",
                  "| kills | lease | p50 | p99 | max | goal (lease + 2 s) | error answers "
                  "seen |", "|---|---|---|---|---|---|---|",
                  "| %d | %.1f s | %.2f s | %.2f s | %.2f s | %s (%.1f s) | %d |"
                  % (len(fo["times"]), fo["lease_ms"] / 1000.0, fo["p50"], fo["p99"],
                     fo["max"], "met" if fo["p99"] <= goal else "missed", goal,
                     fo["errors"]), "",
                  "Every kill: " + ", ".join("%.2f" % t for t in fo["times"]) + " s.", ""]
    st = res.get("store")
    if st:
        file_by = {r["target"]: r for r in st if r["store"].startswith("file")}
        lines += ["## Durable writes: PostgreSQL store vs file store (OffsetCommit load)", "",
                  "One node per store, OffsetCommit of one partition (one record) per request "
                  "to 500 groups over the 50 shards, open loop over %d connections, %.0f s "
                  "windows after 1 s warm-up. The answer is sent after the write is durable "
                  "(file: fsync of the group commit; PostgreSQL: COMMIT with fsync on and "
                  "synchronous_commit on, on the same disk)." % (a.connections, a.seconds), "",
                  "| store | target writes/s | records/s acknowledged | p50 ms | p99 ms | "
                  "p50 / p99 vs file | errors | unanswered |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in st:
            f = file_by.get(r["target"])
            lines.append("| %s | %.0f | %.0f | %s | %s | %s | %d | %d |" % (
                r["store"], r["target"], r["records_s"], _f(r["p50_ms"], 2),
                _f(r["p99_ms"], 2),
                "%.2fx / %.2fx" % (r["p50_ms"] / f["p50_ms"], r["p99_ms"] / f["p99_ms"])
                if f else "-",
                r["errors"], r["unanswered"]))
        lines.append("")
    lines += ["## Analysis", "", "ANALYSIS (written by hand after a run)", ""]
    return "\n".join(lines)


async def main_async(a) -> dict:
    res = {"loadavg": "%.2f %.2f %.2f" % os.getloadavg()}
    if "heartbeats" in a.only:
        res["heartbeats"] = await bench_heartbeats(a)
    if "failover" in a.only:
        res["failover"] = await bench_failover(a)
    if "store" in a.only:
        res["store"] = await bench_store(a)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="heartbeats,failover,store",
                    help="comma-separated: heartbeats, failover, store")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--members", type=int, default=100, help="per group")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--window", type=int, default=64,
                    help="heartbeats: requests per window (one window in flight a connection)")
    ap.add_argument("--io", choices=("selectors", "uvloop"), default="selectors",
                    help="heartbeats: the flood generator's I/O (benchmarks/hbflood.py)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2, help="1-vs-2 pairs, alternating")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--lease-ms", type=int, default=3000)
    ap.add_argument("--rates", default="1000,20000", help="store: writes/s to offer")
    ap.add_argument("--out", default=None, help="markdown report (default: print)")
    a = ap.parse_args(argv)
    a.only = set(a.only.split(","))
    a.rates = [float(x) for x in a.rates.split(",")]
    loop = L.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        res = loop.run_until_complete(main_async(a))
    finally:
        loop.close()
    cmd = "PYTHONPATH=src python benchmarks/bench_cluster.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    text = report(a, res, cmd.strip())
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
