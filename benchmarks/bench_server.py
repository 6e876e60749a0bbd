"""Load benchmark of `groupcoord serve` over loopback, with the echo-server ceiling.

    PYTHONPATH=src python benchmarks/bench_server.py [--out docs/benchmarks-server.md]
        [--topic topic-0:1000 ...] [--seconds 5] [--quick] [--py-spy PATH]

Every scenario starts its own `groupcoord serve` (subprocess, default --fsync always, a fresh
data directory on disk: /tmp unless /tmp is a tmpfs, else ./bench-server-data) and drives it
with benchmarks/loadgen.py in this process (uvloop):

  steady     N members form their groups (consumer: ConsumerGroupHeartbeat v1 over the topic
             catalog, group i subscribing topic i mod topics; connect: workers, the chosen one
             computing with the incremental-cooperative assignor), every group converges, then
               flood   closed loop, --window heartbeats in flight per connection (throughput)
               paced   open loop at the real-client rate, N / heartbeat interval (5 s consumer,
                       3 s connect): "N members holding steady"
             Reported: heartbeats/s, p50/p99/p99.9 latency, errors, fenced members, CPU of the
             server (from /proc/PID/stat) and of the load generator (process_time).
  converge   a 1,000-member group (consumer; classic with the leader assigning round robin)
             formed and stable; then 100 members join at once. Time until every member is
             stable with a balanced assignment (client view: one epoch/generation, every
             partition owned exactly once, counts within one), confirmed by the server's
             Describe. Members heartbeat at their real interval meanwhile.
  echo       benchmarks/echo_server.py, the same load generator and the same steady consumer
             heartbeat frames (flood): the ceiling; ratios = server / echo.

--py-spy PATH: sample the server with py-spy during the 100k consumer flood and add its top
functions to the report. Nothing here asserts on time.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as L  # noqa: E402

import groupcoord  # noqa: E402

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))


# ----------------------------------------------------------------------------- processes
def _is_tmpfs(path: str) -> bool:
    path = os.path.realpath(path)
    best, fstype = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mnt, typ = parts[1], parts[2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, fstype = mnt, typ
    return fstype in ("tmpfs", "ramfs")


def data_root() -> str:
    base = tempfile.gettempdir()
    if _is_tmpfs(base):
        base = os.path.abspath("bench-server-data")
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="groupcoord-bench-", dir=base)


class Proc:
    """A child process that prints one 'listening on HOST:PORT' line when ready."""

    def __init__(self, argv, what: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, env=env,
                                  text=True)
        line = self.p.stdout.readline()
        if "listening on" not in line:
            self.stop()
            self.err.seek(0)
            raise RuntimeError("%s did not start: %r\n%s" % (what, line,
                                                           self.err.read().decode()[-3000:]))
        addr = line.split("listening on ", 1)[1].split()[0]
        host, _, port = addr.rpartition(":")
        self.host, self.port, self.pid = host, int(port), self.p.pid

    def stop(self, bound: float = 10.0) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(bound)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode

    def stderr_tail(self, n=2000) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-n:]


def serve(topics, fsync="always", shards=None) -> tuple:
    d = data_root()
    argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--host", "127.0.0.1", "--port",
            "0", "--data-dir", d, "--fsync", fsync, "--log-level", "WARNING"]
    for t in topics:
        argv += ["--topic", t]
    if shards:
        argv += ["--shards", str(shards)]
    return Proc(argv, "groupcoord serve"), d


def echo_server() -> Proc:
    return Proc([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "echo_server.py"), "--port", "0"], "echo server")


# ----------------------------------------------------------------------------- scenarios
async def run_steady(a, kind: str, groups: int, per: int, pyspy=None) -> dict:
    proc, d = serve(a.topic)
    try:
        lg = L.LoadGen(proc.host, proc.port, a.connections, a.window)
        await lg.connect()
        names = sorted(lg.partitions)
        for i in range(groups):
            if kind == "consumer":
                lg.consumer_group("c%04d" % i, per, [names[i % len(names)]])
            else:
                lg.connect_group("k%04d" % i, per, a.connectors, a.tasks_per_connector)
        t0 = time.perf_counter()
        await lg.start(lg.all_members())
        await lg.wait_converged(lg.groups, a.converge_timeout)
        form = time.perf_counter() - t0
        states = Counter()
        for g in lg.groups[:: max(1, len(lg.groups) // 20)]:
            states[(await g.server_stable(lg.conns[0]))[0]] += 1
        prof = None
        if pyspy:
            prof = subprocess.Popen([pyspy, "record", "-p", str(proc.pid), "-d",
                                     str(int(a.seconds)), "-f", "raw", "-o",
                                     os.path.join(d, "pyspy.txt"), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        flood = await lg.measure(a.seconds, 0, proc.pid, a.warmup)
        if prof is not None:
            prof.wait()
        interval = 5.0 if kind == "consumer" else 3.0
        paced = await lg.measure(a.seconds, groups * per / interval, proc.pid, a.warmup)
        # open loop at the target rate, and at half of what the closed loop sustained
        probes = [await lg.measure(a.seconds, r, proc.pid, a.warmup)
                  for r in (100_000, round(flood["rate"] / 2, -3))]
        # still holding steady: every group converged at the same epoch it had
        steady_ok = all(g.converged() for g in lg.groups)
        await lg.close()
        out = {"kind": kind, "groups": groups, "per": per, "form_s": form,
               "states": dict(states), "flood": flood, "paced": paced, "probes": probes,
               "steady_ok": steady_ok, "units": sum(g.units() for g in lg.groups)}
        if pyspy and os.path.exists(os.path.join(d, "pyspy.txt")):
            out["profile"] = summarize_pyspy(os.path.join(d, "pyspy.txt"))
        return out
    finally:
        rc = proc.stop()
        if rc not in (0, None):
            print("server exit status %s:\n%s" % (rc, proc.stderr_tail()), file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)


async def run_converge(a, kind: str, base: int = 1000, join: int = 100) -> dict:
    proc, d = serve(a.topic)
    try:
        lg = L.LoadGen(proc.host, proc.port, a.connections, a.window)
        await lg.connect()
        topic = sorted(lg.partitions)[0]
        if kind == "consumer":
            g = lg.consumer_group("conv-consumer", base, [topic])
        else:
            g = lg.classic_group("conv-classic", base, [topic], a.classic_heartbeat_ms)
        t0 = time.perf_counter()
        await lg.start(g.members)
        await lg.wait_converged([g], a.converge_timeout)
        form = time.perf_counter() - t0
        await asyncio.sleep(1.0)                      # settle into steady heartbeats
        st0 = Counter(lg.stats.errors)
        new = g.add(join)
        for x in new:                                 # connections first, off the clock
            if x.conn is None:
                _t, x.conn = await lg.loop.create_connection(
                    lambda: L.Conn(lg, len(lg.conns)), lg.host, lg.port)
                lg.conns.append(x.conn)
        t0 = time.perf_counter()
        await lg.start(new)                           # 100 joins in one loop iteration
        took = await lg.wait_converged([g], a.converge_timeout, poll=0.002)
        server = await g.server_stable(lg.conns[0])
        err = Counter(lg.stats.errors)
        err.subtract(st0)
        interval = (g.members[0].interval if kind == "consumer"
                    else a.classic_heartbeat_ms / 1000.0)
        await lg.close()
        return {"kind": kind, "base": base, "join": join, "form_s": form, "converge_s": took,
                "interval_s": interval, "server": server, "units": g.units(),
                "errors": {"%s:%s" % k: v for k, v in err.items() if v}}
    finally:
        proc.stop()
        shutil.rmtree(d, ignore_errors=True)


async def run_echo(a, members: int) -> dict:
    proc = echo_server()
    try:
        lg = L.LoadGen(proc.host, proc.port, a.connections, a.window, echo=True)
        await lg.connect()
        per = 100
        for i in range(members // per):
            lg.consumer_group("c%04d" % i, per, ["topic-0"])
        r = await lg.measure(a.seconds, 0, proc.pid, a.warmup)
        await lg.close()
        return r
    finally:
        proc.stop()


def summarize_pyspy(path: str, top: int = 12) -> list:
    self_c: Counter = Counter()
    incl: Counter = Counter()
    tot = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            n = int(n)
            tot += n
            frames = stack.split(";")
            self_c[frames[-1]] += n
            for fr in set(frames):
                incl[fr] += n
    return [("self", fr, 100.0 * n / tot) for fr, n in self_c.most_common(top)] + \
           [("incl", fr, 100.0 * n / tot) for fr, n in incl.most_common(top + 10)]


# ----------------------------------------------------------------------------- report
def _f(x, nd=1):
    return "-" if x is None else ("%.*f" % (nd, x))


def report(a, res: dict, cmd: str) -> str:
    echo = res["echo"]
    lines = ["# Server load benchmark (`groupcoord serve` over loopback)", "",
             "<!-- doc-test: skip (the load benchmark behind this page: minutes of both "
             "cores) -->", "```bash", cmd, "```", "",
             "Machine: %s, %d cores, Python %s, %s. The load generator (one process, uvloop) "
             "and the server (one process, one event loop) share the same cores; other jobs "
             "may have been running (load average at the start: %s)."
             % (platform.machine(), os.cpu_count(), platform.python_version(),
                platform.platform(), res["loadavg"]), "",
             "Server: `groupcoord serve --fsync always` (default), a fresh data directory on "
             "disk per scenario, catalog %s. Load generator: %d connections, at most %d "
             "heartbeats in flight per connection, measurement windows of %.0f s after %.0f s "
             "warm-up." % (" ".join("`%s`" % t for t in a.topic), a.connections, a.window,
                           a.seconds, a.warmup), "",
             "## Steady heartbeats", "",
             "| scenario | mode | heartbeats/s | p50 ms | p99 ms | p99.9 ms | errors / fenced "
             "| server CPU | loadgen CPU | machine CPU | vs echo | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    er = echo["rate"]
    lines.append("| echo server (ceiling), %d members' frames | flood | %.0f | %s | %s | %s | "
                 "- | %s | %s | %s | 1.00 | - |"
                 % (echo["members"], er, _f(echo["p50_ms"], 2), _f(echo["p99_ms"], 2),
                    _f(echo["p999_ms"], 2), _f(echo["server_cpu"], 2),
                    _f(echo["client_cpu"], 2), _f(echo.get("machine_cpu"), 2)))
    for r in res["steady"]:
        name = "%s: %d groups x %d = %d members (%d units)" % (
            r["kind"], r["groups"], r["per"], r["groups"] * r["per"], r["units"])
        rows = [("flood", r["flood"])] + [("paced", r["paced"])] + \
            [("probe", x) for x in r.get("probes", ())]
        for mode, x in rows:
            errs = sum(x["errors"].values())
            if mode == "flood":
                tgt = ">= 100k/s, p99 < 10 ms: %s" % (
                    "met" if x["rate"] >= 100_000 and x["p99_ms"] < 10 else
                    "missed (%.0f%% of the rate%s)" % (
                        100 * x["rate"] / 100_000,
                        "" if x["p99_ms"] < 10 else ", p99 %.1fx" % (x["p99_ms"] / 10)))
                label = "flood (closed loop)"
            elif mode == "paced":
                tgt = "holding steady: %s" % ("yes" if (x["fenced"] == 0 and errs == 0
                                                         and r["steady_ok"]) else "NO")
                label = "paced %.0f/s (members / interval)" % x["target_rate"]
            else:
                ok = x["rate"] >= 0.97 * x["target_rate"]
                tgt = "%s, p99 %s 10 ms" % ("sustained" if ok else "NOT sustained",
                                           "<" if x["p99_ms"] < 10 else ">=")
                label = "paced %.0f/s" % x["target_rate"]
            lines.append("| %s | %s | %.0f | %s | %s | %s | %d / %d | %s | %s | %s | %.2f | %s |"
                         % (name, label, x["rate"], _f(x["p50_ms"], 2), _f(x["p99_ms"], 2),
                            _f(x["p999_ms"], 2), errs, x["fenced"], _f(x["server_cpu"], 2),
                            _f(x["client_cpu"], 2), _f(x.get("machine_cpu"), 2),
                            x["rate"] / er, tgt))
    lines += ["", "Forming the groups (joins until every group converged, not a target): " +
              "; ".join("%s %d members: %.1f s" % (r["kind"], r["groups"] * r["per"],
                                                   r["form_s"]) for r in res["steady"]), "",
              "## Convergence: 100 members join a stable 1,000-member group at once", "",
              "| group | heartbeat interval | converged after | target (< 2 s + interval) | "
              "server state | errors seen (expected rebalance signals) | forming 1,000 |",
              "|---|---|---|---|---|---|---|"]
    for r in res["converge"]:
        tgt = 2.0 + r["interval_s"]
        lines.append("| %s, %d units | %.1f s | %.2f s | %s (%.2f s) | %s | %s | %.1f s |"
                     % (r["kind"], r["units"], r["interval_s"], r["converge_s"],
                        "met" if r["converge_s"] < tgt else "missed", tgt,
                        r["server"][0], ", ".join("%s x%d" % kv for kv in r["errors"].items())
                        or "none", r["form_s"]))
    if res.get("profile"):
        lines += ["", "## Server profile (py-spy, %s flood)" % res["profile_of"], "",
                  "| | frame | % of samples |", "|---|---|---|"]
        for kind, fr, pct in res["profile"]:
            lines.append("| %s | `%s` | %.1f |" % (kind, fr.replace("|", "/"), pct))
    lines += ["", "## Analysis", "", "ANALYSIS (written by hand after a run)", ""]
    return "\n".join(lines)


async def main_async(a) -> dict:
    res = {"loadavg": "%.2f %.2f %.2f" % os.getloadavg()}
    sizes = [(100, 100)] if a.quick else [(100, 100), (1000, 100)]
    res["echo"] = await run_echo(a, 10_000)
    print("echo", res["echo"], file=sys.stderr)
    res["steady"] = []
    for kind in ("consumer", "connect"):
        for groups, per in sizes:
            want = a.py_spy if (kind == "consumer" and groups * per == max(
                g * p for g, p in sizes)) else None
            r = await run_steady(a, kind, groups, per, want)
            print(kind, groups, per, {k: v for k, v in r.items() if k != "profile"},
                  file=sys.stderr)
            if "profile" in r:
                res["profile"] = r.pop("profile")
                res["profile_of"] = "%s %d members" % (kind, groups * per)
            res["steady"].append(r)
    res["converge"] = []
    for kind in ("consumer", "classic"):
        r = await run_converge(a, kind)
        print("converge", r, file=sys.stderr)
        res["converge"].append(r)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", action="append", default=None,
                    help="NAME:PARTITIONS of the server's catalog (repeatable; default "
                    "topic-0..topic-9 with 1000 partitions each)")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--connectors", type=int, default=100, help="per connect group")
    ap.add_argument("--tasks-per-connector", type=int, default=9)
    ap.add_argument("--classic-heartbeat-ms", type=int, default=3000)
    ap.add_argument("--converge-timeout", type=float, default=900.0)
    ap.add_argument("--quick", action="store_true", help="10k members only (100 groups x 100)")
    ap.add_argument("--py-spy", default=None, help="path of a py-spy binary")
    ap.add_argument("--out", default=None, help="markdown report (default: print)")
    a = ap.parse_args(argv)
    if not a.topic:
        a.topic = ["topic-%d:1000" % i for i in range(10)]
    loop = L.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        res = loop.run_until_complete(main_async(a))
    finally:
        loop.close()
    cmd = "PYTHONPATH=src python benchmarks/bench_server.py " + " ".join(
        x for x in (argv if argv is not None else sys.argv[1:]))
    text = report(a, res, cmd.strip())
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
