"""What security costs `groupcoord serve`: heartbeats over PLAINTEXT, with ACLs, over SASL_SSL,
and new TLS + SCRAM connections per second, all in one run against baselines of that run.

    PYTHONPATH=src python benchmarks/bench_security.py [--out FILE] [--groups 100]
        [--members 100] [--seconds 3] [--rate 2000 --rate 20000] [--rounds 5]
        [--handshake-seconds 3] [--concurrency 8]

Certificates are made at run time (tests/tls_certs.py: a self-signed CA, EC P-256, a server
certificate for 127.0.0.1). Users are set offline before each node starts (`groupcoord users
set NAME --mechanism SCRAM-SHA-512 --password-stdin --data-dir DIR`); ACLs are created over the
wire (CreateAcls v1) by User:admin (a --super-user) on the SASL_SSL listener.

Heartbeat scenarios (a `groupcoord serve` each, default --fsync always, the same load:
--groups consumer groups x --members members over the catalog, ConsumerGroupHeartbeat v1,
16 connections x 64 in flight, as bench_server's steady rows):
  plain        no security flags at all: the PLAINTEXT baseline (no authorizer on the path)
  plain+acl    --listener PLAINTEXT + SASL_SSL, --allow-if-no-acl false; the load is
               User:ANONYMOUS on PLAINTEXT, allowed by ACLs: READ on groups prefixed "sb-",
               DESCRIBE on topics prefixed "topic-" (the same four ACLs also cover User:bench)
  sasl_ssl     the same node flags; the load connects over SASL_SSL as User:bench
               (SCRAM-SHA-512, TLS checked against the test CA)
The three nodes start and their groups form and converge first (members not being measured
heartbeat at --idle-interval-ms, 15 s, so the idle scenarios stay quiet); then each round
measures the three in turn (order rotated per round): a closed-loop flood (throughput) and
open-loop paced runs at each --rate (latency at the same offered rate). Short windows taken
in turn, rather than one scenario after the other, because the machine is shared and busy in
bursts. Node CPU per heartbeat = the node process's CPU (/proc/PID/stat) / heartbeats. The
report gives the medians over the rounds, and every round with ratios against the PLAINTEXT
row of the same round.

Handshake scenario: one node with all four listeners; --concurrency clients each open a
connection, complete it and close it, over and over, for --handshake-seconds per kind (the
four kinds in turn, --rounds times):
  PLAINTEXT   TCP connect, ApiVersions v3, close
  SSL         TCP connect, TLS handshake (full: no session resumption), ApiVersions v3, close
  SASL_PLAINTEXT  TCP connect, ApiVersions v3, SaslHandshake v1, SaslAuthenticate v2 x2
              (SCRAM-SHA-512), close: the SASL part alone, without TLS
  SASL_SSL    TCP connect, TLS handshake, ApiVersions v3, SaslHandshake v1, SaslAuthenticate v2
              x2 (SCRAM-SHA-512; the client's PBKDF2 is memoized, loadgen.py _cached_pbkdf2), close
Latency is from the connect to the last answer. Nothing here asserts on time.

A narrower A/B, e.g. the authorizer alone: --scenario plain+acl --flood-only --no-handshakes
--rounds 8 (plain, the baseline, is always in).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import bench_server as BS  # noqa: E402
import loadgen as L  # noqa: E402
from tls_certs import Pki  # noqa: E402

from groupcoord.protocol import messages as m  # noqa: E402
from groupcoord.protocol.error_codes import ErrorCode  # noqa: E402
from groupcoord.security.acl import (AclOperation, AclPermissionType, PatternType,  # noqa: E402
                                     ResourceType)

MECH = "SCRAM-SHA-512"
USERS = {"bench": "bench-secret-1", "admin": "admin-secret-1"}
GROUP_PREFIX = "sb-"
TOPIC_PREFIX = "topic-"
LOAD_PRINCIPALS = ("User:ANONYMOUS", "User:bench")
GROUP_AUTHORIZATION_FAILED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


# ----------------------------------------------------------------------------- node
class Node:
    """`groupcoord serve` with the given flags; ``listeners``: protocol -> (host, port), from
    its 'listening on' line."""

    def __init__(self, flags: list, users: dict):
        self.dir = BS.data_root()
        env = dict(os.environ)
        env["PYTHONPATH"] = BS.PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        for name, password in users.items():
            r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "users", "set", name,
                                "--mechanism", MECH, "--password-stdin", "--data-dir",
                                self.dir], input=password + "\n", text=True, env=env,
                               capture_output=True)
            if r.returncode:
                raise RuntimeError("users set %s: exit %d: %s" % (name, r.returncode,
                                                                  r.stderr[-2000:]))
        argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--data-dir", self.dir,
                "--log-level", "WARNING"] + flags
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, env=env,
                                  text=True)
        self.pid = self.p.pid
        line = self.p.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError("serve did not start: %r\n%s" % (line, self.stderr_tail()))
        addr = line.split("listening on ", 1)[1].split()[0]
        host, _, port = addr.rpartition(":")
        self.listeners = {"PLAINTEXT": (host, int(port))}
        if "; listeners: " in line:
            self.listeners = {}
            for spec in line.split("; listeners: ", 1)[1].rstrip(")\n").split(", "):
                proto, _, hp = spec.partition("://")
                h, _, p = hp.rpartition(":")
                self.listeners[proto] = (h, int(p))

    def stderr_tail(self, n: int = 3000) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-n:]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if self.p.returncode not in (0, None, -signal.SIGTERM):
            print("serve exit status %s:\n%s" % (self.p.returncode, self.stderr_tail()),
                  file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)


def secured_flags(pki_srv, extra_listeners=()) -> list:
    flags = ["--listener", "PLAINTEXT://127.0.0.1:0"]
    for proto in extra_listeners:
        flags += ["--listener", "%s://127.0.0.1:0" % proto]
    return flags + ["--listener", "SASL_SSL://127.0.0.1:0",
                    "--ssl-certfile", pki_srv.cert, "--ssl-keyfile", pki_srv.key,
                    "--sasl-mechanism", MECH, "--super-user", "User:admin"]


async def create_acls(node: Node, ctx) -> None:
    """The ACLs the load needs, for both load principals, by User:admin over SASL_SSL."""
    host, port = node.listeners["SASL_SSL"]
    lg = L.LoadGen(host, port, 1, ssl=ctx, sasl=(MECH, "admin", USERS["admin"]))
    lg.loop = asyncio.get_running_loop()
    c = await lg.open_conn(0)
    creations = []
    for principal in LOAD_PRINCIPALS:
        creations += [
            m.CreateAclsRequestAclCreation(
                resource_type=int(ResourceType.GROUP), resource_name=GROUP_PREFIX,
                resource_pattern_type=int(PatternType.PREFIXED), principal=principal,
                host="*", operation=int(AclOperation.READ),
                permission_type=int(AclPermissionType.ALLOW)),
            m.CreateAclsRequestAclCreation(
                resource_type=int(ResourceType.TOPIC), resource_name=TOPIC_PREFIX,
                resource_pattern_type=int(PatternType.PREFIXED), principal=principal,
                host="*", operation=int(AclOperation.DESCRIBE),
                permission_type=int(AclPermissionType.ALLOW))]
    r = await c.call(m.CreateAclsRequest(creations=creations), 1)
    bad = [(x.error_code, x.error_message) for x in r.results if x.error_code]
    lg.closing = True
    c.transport.close()
    if bad:
        raise RuntimeError("CreateAcls refused: %s" % bad)


# ----------------------------------------------------------------------------- heartbeats
class Scenario:
    """One heartbeat scenario: its node and its load, formed once, measured every round."""

    def __init__(self, name: str):
        self.name = name
        self.node: Optional[Node] = None
        self.lg: Optional[L.LoadGen] = None
        self.form_s = 0.0

    async def form(self, a, srv, ctx) -> None:
        flags = _topics(a) + ["--group-config", "group.consumer.heartbeat.interval.ms=%d"
                              % a.idle_interval_ms]
        if self.name == "plain":
            self.node = Node(["--host", "127.0.0.1", "--port", "0"] + flags, {})
        else:
            self.node = Node(secured_flags(srv) + ["--allow-if-no-acl", "false"] + flags,
                             USERS)
            await create_acls(self.node, ctx)
        if self.name == "sasl_ssl":
            host, port = self.node.listeners["SASL_SSL"]
            lg = L.LoadGen(host, port, a.connections, a.window, ssl=ctx,
                           sasl=(MECH, "bench", USERS["bench"]))
        else:
            host, port = self.node.listeners["PLAINTEXT"]
            lg = L.LoadGen(host, port, a.connections, a.window)
        self.lg = lg
        await lg.connect()
        names = sorted(lg.partitions)
        if not names:
            raise RuntimeError("%s: Metadata listed no topic (ACLs?)" % self.name)
        if self.name != "plain":
            # The authorizer is on the path: a group outside the ACLs' prefix is refused.
            r = await lg.conns[0].call(m.ConsumerGroupHeartbeatRequest(
                group_id="not-" + GROUP_PREFIX, member_id="probe", member_epoch=0,
                rebalance_timeout_ms=30000, subscribed_topic_names=names[:1]), 1)
            if r.error_code != GROUP_AUTHORIZATION_FAILED:
                raise RuntimeError("%s: a group without ACLs answered %d, expected %d"
                                   % (self.name, r.error_code, GROUP_AUTHORIZATION_FAILED))
        for i in range(a.groups):
            lg.consumer_group("%s%04d" % (GROUP_PREFIX, i), a.members, [names[i % len(names)]])
        t0 = time.perf_counter()
        await lg.start(lg.all_members())
        await lg.wait_converged(lg.groups, a.converge_timeout)
        self.form_s = time.perf_counter() - t0

    async def measure(self, a) -> dict:
        la = os.getloadavg()
        lg, pid = self.lg, self.node.pid
        runs = [("flood", await lg.measure(a.seconds, 0, pid, a.warmup))]
        for rate in a.rate:
            runs.append(("paced", await lg.measure(a.seconds, rate, pid, a.warmup)))
        return {"name": self.name, "runs": runs, "loadavg": la}

    async def close(self) -> bool:
        """Still converged at the end (nobody fenced meanwhile)?"""
        ok = False
        if self.lg is not None:
            ok = bool(self.lg.groups) and all(g.converged() for g in self.lg.groups)
            await self.lg.close()
        if self.node is not None:
            self.node.stop()
        return ok


def _topics(a) -> list:
    out = []
    for t in a.topic:
        out += ["--topic", t]
    return out


# ----------------------------------------------------------------------------- handshakes
class _OneShot(L.Conn):
    """A connection opened, used and closed by the handshake loop (not a load connection:
    its loss is expected)."""

    def __init__(self, lg, index):
        super().__init__(lg, index)
        self.gone = lg.loop.create_future()

    def connection_lost(self, exc):
        self.lost = True
        self.fail_calls(exc)
        if not self.gone.done():
            self.gone.set_result(exc)


async def _one_handshake(lg, kind: str) -> float:
    t0 = time.perf_counter()
    if lg.ssl is None:
        _t, c = await lg.loop.create_connection(lambda: _OneShot(lg, 0), lg.host, lg.port)
    else:
        _t, c = await lg.loop.create_connection(lambda: _OneShot(lg, 0), lg.host, lg.port,
                                                ssl=lg.ssl, server_hostname=lg.host)
    v = await c.call(m.ApiVersionsRequest(client_software_name="bench-security",
                                          client_software_version="1"), 3)
    if v.error_code:
        raise RuntimeError("ApiVersions error %d" % v.error_code)
    if kind.startswith("SASL_"):
        await L.sasl_authenticate(c, MECH, "bench", USERS["bench"])
    took = time.perf_counter() - t0
    c.transport.close()
    await asyncio.wait_for(c.gone, 10)
    return took


async def run_handshakes(a, kind: str, node: Node, ctx) -> dict:
    host, port = node.listeners[kind]
    lg = L.LoadGen(host, port, 0, ssl=ctx if kind in ("SSL", "SASL_SSL") else None)
    lg.loop = asyncio.get_running_loop()
    lat: list = []
    done = [0]
    state = {"recording": False, "stop": False}

    async def worker():
        while not state["stop"]:
            took = await _one_handshake(lg, kind)
            if state["recording"]:
                done[0] += 1
                lat.append(took)

    tasks = [lg.loop.create_task(worker()) for _ in range(a.concurrency)]
    try:
        await asyncio.sleep(a.warmup)
        cpu0 = time.process_time()
        scpu0 = L.proc_cpu_seconds(node.pid)
        mb0, mt0 = L.machine_cpu()
        t0 = time.perf_counter()
        state["recording"] = True
        await asyncio.sleep(a.handshake_seconds)
        state["recording"] = False
        dt = time.perf_counter() - t0
        n = done[0]
        cpu = time.process_time() - cpu0
        scpu = L.proc_cpu_seconds(node.pid) - scpu0
        mb1, mt1 = L.machine_cpu()
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()
    finally:
        state["stop"] = True
        await asyncio.gather(*tasks, return_exceptions=True)
    pct = L.percentiles(lat)
    return {"kind": kind, "n": n, "rate": n / dt, "p50_ms": pct[50], "p99_ms": pct[99],
            "server_cpu": scpu / dt, "client_cpu": cpu / dt,
            "machine_cpu": (mb1 - mb0) / max(1, mt1 - mt0) * (os.cpu_count() or 1),
            "server_us": scpu / max(1, n) * 1e6, "client_us": cpu / max(1, n) * 1e6}


# ----------------------------------------------------------------------------- report
LABELS = {"plain": "PLAINTEXT, no ACLs (baseline)",
          "plain+acl": "PLAINTEXT, ACLs (--allow-if-no-acl false), User:ANONYMOUS",
          "sasl_ssl": "SASL_SSL, SCRAM-SHA-512, same ACLs, User:bench"}
STEPS = {"PLAINTEXT": "connect, ApiVersions, close",
         "SSL": "connect, TLS handshake, ApiVersions, close",
         "SASL_PLAINTEXT": "connect, ApiVersions, SaslHandshake, SaslAuthenticate x2 "
                           "(SCRAM-SHA-512), close",
         "SASL_SSL": "connect, TLS handshake, ApiVersions, SaslHandshake, SaslAuthenticate x2 "
                     "(SCRAM-SHA-512), close"}


def _f(x, nd=1):
    return "-" if x is None else "%.*f" % (nd, x)


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _us_per_hb(r):
    return r["server_cpu"] / r["rate"] * 1e6 if r["rate"] else None


def _mode_label(mode, r):
    return "flood (closed loop)" if mode == "flood" else "paced %.0f/s" % r["target_rate"]


def report(a, res: dict, cmd: str) -> str:
    rounds = res["rounds"]
    lines = ["## Security: TLS, SASL and ACLs", "",
             "<!-- doc-test: skip (the security benchmark: minutes of both cores) -->",
             "```bash", cmd, "```", "",
             "Machine: %s, %d cores, Python %s, %s, %s. Load average before the run: %s "
             "(before each scenario: last column of the per-round table). The load generator "
             "(one process, uvloop) and the node share the cores."
             % (platform.machine(), os.cpu_count(), platform.python_version(),
                platform.platform(), res["openssl"], res["loadavg"]), "",
             "Same load in every row: %d consumer groups x %d members (ConsumerGroupHeartbeat "
             "v1, group i on topic i mod %d of the catalog %s), %d connections x %d heartbeats "
             "in flight, windows of %g s after %g s warm-up; one node per scenario "
             "(`--fsync always`), all formed first (members not measured heartbeat every "
             "%g s), then measured in turn, %d round(s), the order rotated each round. "
             "\"node CPU/hb\": the node process's CPU time (/proc) per heartbeat answered."
             % (a.groups, a.members, len(a.topic), "`%s` .. `%s`" % (a.topic[0], a.topic[-1])
                if len(a.topic) > 1 else "`%s`" % a.topic[0], a.connections, a.window,
                a.seconds, a.warmup, a.idle_interval_ms / 1000.0, len(rounds)), "",
             "### Heartbeats: medians over the rounds", "",
             "Ratios: median of the scenario / median of the PLAINTEXT baseline.", "",
             "| listener / authorization | mode | heartbeats/s | vs baseline | p50 ms | p99 ms "
             "| node CPU/hb us | vs baseline |",
             "|---|---|---|---|---|---|---|---|"]
    names = [s["name"] for s in rounds[0]]
    runs_of = {}                     # (name, mode, target) -> [run per round]
    for scen in rounds:
        for s in scen:
            for mode, r in s["runs"]:
                runs_of.setdefault((s["name"], mode, r["target_rate"]), []).append(r)
    keys = [(mode, r["target_rate"]) for mode, r in rounds[0][0]["runs"]]
    for name in names:
        for mode, tgt in keys:
            rs = runs_of[(name, mode, tgt)]
            bs = runs_of[(names[0], mode, tgt)]
            rate, brate = _median(r["rate"] for r in rs), _median(r["rate"] for r in bs)
            us, bus = _median(_us_per_hb(r) for r in rs), _median(_us_per_hb(r) for r in bs)
            lines.append("| %s | %s | %.0f | %.2f | %s | %s | %s | %s |" % (
                LABELS[name], _mode_label(mode, rs[0]), rate, rate / brate,
                _f(_median(r["p50_ms"] for r in rs), 2), _f(_median(r["p99_ms"] for r in rs), 2),
                _f(us, 2), _f(us / bus if us and bus else None, 2)))
    lines += ["", "### Heartbeats: every round", "",
              "Ratios against the PLAINTEXT row of the same round.", "",
              "| round | listener / authorization | mode | heartbeats/s | vs baseline | p50 ms "
              "| p99 ms | p99.9 ms | errors / fenced | node CPU | node CPU/hb us | vs baseline "
              "| loadgen CPU | machine CPU | load avg |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rnd, scen in enumerate(rounds, 1):
        base = {(mode, r["target_rate"]): r for mode, r in scen[0]["runs"]}
        for s in scen:
            for mode, r in s["runs"]:
                b = base[(mode, r["target_rate"])]
                us, bus = _us_per_hb(r), _us_per_hb(b)
                lines.append(
                    "| %d | %s | %s | %.0f | %.2f | %s | %s | %s | %d / %d | %s | %s | %s | %s | "
                    "%s | %.2f |" % (
                        rnd, LABELS[s["name"]], _mode_label(mode, r), r["rate"],
                        r["rate"] / b["rate"], _f(r["p50_ms"], 2), _f(r["p99_ms"], 2),
                        _f(r["p999_ms"], 2), sum(r["errors"].values()), r["fenced"],
                        _f(r["server_cpu"], 2), _f(us, 2),
                        _f(us / bus if us and bus else None, 2), _f(r["client_cpu"], 2),
                        _f(r["machine_cpu"], 2), s["loadavg"][0]))
    lines += ["", "Forming the groups (joins until every group converged, once per scenario): "
              + "; ".join("%s %.1f s%s" % (name, form_s, "" if ok else
                                           " (NOT all converged at the end)")
                          for name, form_s, ok in res["formed"]), ""]
    if "handshakes" in res:
        lines += _handshake_report(a, res)
    lines += ["", "ANALYSIS (written by hand after a run)", ""]
    return "\n".join(lines)


def _handshake_report(a, res: dict) -> list:
    lines = [
        "### New connections", "",
        "%d clients at once, each connecting, completing and closing connections in a loop "
        "for %g s per listener (the four in turn, %d round(s), medians; the range is over the "
        "rounds), one node with the four listeners. SSL and SASL_SSL: an EC P-256 server "
        "certificate, %s, full handshakes (no session resumption); the client checks the "
        "certificate against the test CA. The client caches its SCRAM PBKDF2 result "
        "(benchmarks/loadgen.py _cached_pbkdf2); the node never runs PBKDF2 for SCRAM. Latency: "
        "connect to the last answer (the close is not in it)."
        % (a.concurrency, a.handshake_seconds, len(res["handshakes"]), res["tls_version"]),
        "",
        "| listener | steps | connections/s | range | vs PLAINTEXT | p50 ms | p99 ms | "
        "node CPU/connection us | vs PLAINTEXT | loadgen CPU/connection us | machine CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    kinds = [h["kind"] for h in res["handshakes"][0]]
    per = {k: [h for rnd in res["handshakes"] for h in rnd if h["kind"] == k] for k in kinds}
    brate = _median(h["rate"] for h in per[kinds[0]])
    bus = _median(h["server_us"] for h in per[kinds[0]])
    for k in kinds:
        hs = per[k]
        rate = _median(h["rate"] for h in hs)
        us = _median(h["server_us"] for h in hs)
        lines.append("| %s | %s | %.0f | %.0f-%.0f | %.2f | %s | %s | %.0f | %.2f | %.0f | %s |"
                     % (k, STEPS[k], rate, min(h["rate"] for h in hs),
                        max(h["rate"] for h in hs), rate / brate,
                        _f(_median(h["p50_ms"] for h in hs), 2),
                        _f(_median(h["p99_ms"] for h in hs), 2), us, us / bus,
                        _median(h["client_us"] for h in hs),
                        _f(_median(h["machine_cpu"] for h in hs), 2)))
    return lines


# ----------------------------------------------------------------------------- main
async def main_async(a, pki, srv) -> dict:
    ctx = L.client_ssl_context(pki.ca_pem)
    res = {"loadavg": "%.2f %.2f %.2f" % os.getloadavg(), "openssl": ssl.OPENSSL_VERSION,
           "rounds": []}
    scenarios = [Scenario(n) for n in a.scenario]
    try:
        for sc in scenarios:
            await sc.form(a, srv, ctx)
            print("formed", sc.name, "%.1f s" % sc.form_s, file=sys.stderr)
        for rnd in range(a.rounds):
            # one scenario after the other, the order rotated each round
            k = rnd % len(scenarios)
            order = scenarios[k:] + scenarios[:k]
            got = {}
            for sc in order:
                got[sc.name] = await sc.measure(a)
                print("round", rnd + 1, sc.name, got[sc.name], file=sys.stderr)
            res["rounds"].append([got[sc.name] for sc in scenarios])
    finally:
        res["formed"] = [(sc.name, sc.form_s, await sc.close()) for sc in scenarios]
    if not a.handshakes:
        return res
    node = Node(secured_flags(srv, ["SSL", "SASL_PLAINTEXT"]) + _topics(a)[:2], USERS)
    try:
        res["handshakes"] = []
        for _ in range(a.rounds):
            rnd = []
            for kind in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
                h = await run_handshakes(a, kind, node, ctx)
                print("handshakes", h, file=sys.stderr)
                rnd.append(h)
            res["handshakes"].append(rnd)
        # what the TLS listener negotiated with this client context
        host, port = node.listeners["SSL"]
        _r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
        res["tls_version"] = "%s %s" % (w.get_extra_info("ssl_object").version(),
                                        w.get_extra_info("cipher")[0])
        w.close()
    finally:
        node.stop()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_security", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", action="append", default=None,
                    help="NAME:PARTITIONS (repeatable; default topic-0..topic-9:1000)")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--members", type=int, default=100, help="per group")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="each measurement window (short: the rounds take turns)")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rate", type=float, action="append", default=None,
                    help="paced heartbeats/s (repeatable; default 2000 = members / 5 s, "
                    "and 20000)")
    ap.add_argument("--scenario", action="append", choices=list(LABELS), default=None,
                    help="heartbeat scenarios (repeatable; default all three; plain, the "
                    "baseline, is always measured)")
    ap.add_argument("--flood-only", action="store_true", help="no paced runs")
    ap.add_argument("--no-handshakes", dest="handshakes", action="store_false",
                    help="skip the new-connection measurements")
    ap.add_argument("--rounds", type=int, default=5,
                    help="the scenarios in turn this many times (medians reported)")
    ap.add_argument("--handshake-seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=8, help="handshaking clients at once")
    ap.add_argument("--converge-timeout", type=float, default=600.0)
    ap.add_argument("--idle-interval-ms", type=int, default=15000,
                    help="the nodes' consumer heartbeat interval: what members not being "
                    "measured send (Kafka's upper bound by default, to keep the idle "
                    "scenarios quiet)")
    ap.add_argument("--out", default=None, help="write the markdown section here")
    a = ap.parse_args(argv)
    if not a.topic:
        a.topic = ["topic-%d:1000" % i for i in range(10)]
    if a.flood_only:
        a.rate = []
    elif not a.rate:
        a.rate = [a.groups * a.members / 5.0, 20000.0]
    a.scenario = ["plain"] + [n for n in LABELS if n != "plain" and n in (a.scenario or LABELS)]
    tmp = tempfile.mkdtemp(prefix="bench-security-pki-")
    try:
        pki = Pki(tmp)
        srv = pki.server()
        loop = L.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            res = loop.run_until_complete(main_async(a, pki, srv))
        finally:
            loop.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cmd = "PYTHONPATH=src python benchmarks/bench_security.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    text = report(a, res, cmd.strip())
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
