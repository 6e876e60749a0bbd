"""Light heartbeat flood for `groupcoord serve`: steady KIP-848 heartbeats at a small, fixed
generator cost per heartbeat (issue 19's 1 vs 2 node processes benchmark).

    PYTHONPATH=src python benchmarks/hbflood.py --bootstrap 127.0.0.1:9092 --groups 100 \
        --members 100 --topic topic-0 --seconds 5 [--server-pid PID]
    PYTHONPATH=src python benchmarks/hbflood.py --spec FILE|-      # the flood phase only

Two phases:

set-up  loadgen.LoadGen joins the consumer groups (ConsumerGroupHeartbeat v1, client id
        "loadgen") and runs until every group has converged and every member has confirmed
        its assignment (its last answered heartbeat reported exactly what it owns). Then the
        LoadGen is closed: from here on each member is only (group, member id, epoch).
flood   a process of its own (this file, --spec): no member objects, no state machines. Per
        connection the members (member i on connection i % connections) are cut into
        windows of --window; each window's requests are encoded ONCE, as one bytes object,
        with the light heartbeat a steady client sends (member id and epoch, everything else
        null / -1, so the node's steady fast path answers it) and a correlation id that is
        the same in every round. A connection has one window in flight: it is sent with one
        write, and the next window goes out when the last response of this one is read.

Checking the answers cheaply: responses come back in request order, and a stable member's
steady answer is the same bytes every round when its correlation id is, so a window's
answers are decoded in full once (the first round: correlation id, error 0, the member's
epoch, no assignment) and kept as that window's expected bytes; after that every chunk read
is compared with the expected bytes at its offset (one memcmp, bytes.startswith). On a
mismatch the window is split into frames and decoded: errors are counted by code (fenced:
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH), an answer with error 0 that differs (a new
assignment) counts as unsteady, and the window's expected bytes are taken again.

Latency is per window: from its write to its last response. The flood process reports its
own CPU (process time) per heartbeat, the CPU of each node (/proc/PID/stat) and of the
machine. --io selectors (non-blocking sockets and epoll, the default) or uvloop (asyncio
Protocols on uvloop): the same windows and checks; docs/benchmarks-cluster.md compares them.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import selectors
import socket
import struct
import sys
import time
from array import array
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loadgen as L  # noqa: E402

from groupcoord.protocol import decode_response_frame, encode_request_frame  # noqa: E402
from groupcoord.protocol import messages as m  # noqa: E402

__all__ = ["form", "flood", "run_flood"]

VERSION = 1                  # what loadgen's consumer members send
CLIENT_ID = "loadgen"        # the id they joined with: the fast path wants the same one
FENCED = (25, 110)           # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
_I32 = struct.Struct(">i")
_perf = time.perf_counter


# ----------------------------------------------------------------------------- set-up
def _confirmed(lg) -> bool:
    """Every member idle with nothing to report: its last accepted heartbeat reported
    exactly its assignment, so the node holds it as confirmed and a light heartbeat takes
    the steady path (an unconfirmed member is answered its assignment every time)."""
    return all(not x.inflight and x.sm.keepalive_ready() for x in lg.all_members())


async def form(host: str, port: int, groups: list, members: int, topics: list,
               connections: int, timeout: float = 300.0) -> list:
    """Join ``groups`` x ``members`` KIP-848 consumer members on one node and wait until
    they are steady -> [[group, member id, epoch]] in member order."""
    lg = L.LoadGen(host, port, connections, 64, client_id=CLIENT_ID)
    await lg.connect()
    try:
        for g in groups:
            lg.consumer_group(g, members, topics, VERSION)
        await lg.start(lg.all_members())
        await lg.wait_converged(lg.groups, timeout)
        t0 = _perf()
        while not (_confirmed(lg) and all(g.converged() for g in lg.groups)):
            if lg.fatal:
                raise RuntimeError(lg.fatal)
            if _perf() - t0 > timeout:
                raise TimeoutError("members not confirmed after %.0f s" % timeout)
            await asyncio.sleep(0.005)
        # No await between the check and close(): nothing is sent in between.
        out = [[x.group, x.member_id, x.epoch] for x in lg.all_members()]
    finally:
        await lg.close()
    return out


# ----------------------------------------------------------------------------- flood
class Stats:
    __slots__ = ("recording", "lat", "errors", "fenced", "unsteady", "mismatched", "fatal")

    def __init__(self):
        self.recording = False
        self.lat = array("d")        # per window, while recording (s)
        self.errors: Counter = Counter()   # error code -> answers
        self.fenced = 0
        self.unsteady = 0            # error 0, but not the steady answer (e.g. assignment)
        self.mismatched = 0          # windows that took the decode path after their first
        self.fatal = None


class Conn:
    """One connection's windows and the check of their answers. ``write`` is set by the
    I/O flavour (a non-blocking socket's send, or transport.write)."""
    __slots__ = ("node", "reqs", "sizes", "members", "corr0", "expect", "wi", "exp", "pos",
                 "slow", "t0", "hb", "st", "write")

    def __init__(self, node: int, members: list, window: int, st: Stats):
        self.node, self.st = node, st
        self.reqs, self.sizes, self.members, self.corr0 = [], [], [], []
        corr = 0
        for i in range(0, len(members), window):
            chunk = members[i:i + window]
            self.reqs.append(b"".join(
                encode_request_frame(m.ConsumerGroupHeartbeatRequest(
                    group_id=g, member_id=mid, member_epoch=ep), VERSION, corr + k, CLIENT_ID)
                for k, (g, mid, ep) in enumerate(chunk)))
            self.sizes.append(len(chunk))
            self.members.append(chunk)
            self.corr0.append(corr)
            corr += len(chunk)
        self.expect = [None] * len(self.reqs)      # each window's answers, once seen
        self.wi, self.exp, self.pos, self.slow, self.t0, self.hb = 0, None, 0, None, 0.0, 0
        self.write = None

    def start(self) -> None:
        self.t0 = _perf()
        self.write(self.reqs[0])

    def feed(self, data) -> None:
        """The hot path: one comparison per chunk read."""
        exp = self.exp
        if exp is not None and exp.startswith(data, self.pos):
            self.pos += len(data)
            if self.pos == len(exp):
                self._done()
            return
        self._feed_slow(data)

    def _done(self) -> None:
        now = _perf()
        self.hb += self.sizes[self.wi]
        if self.st.recording:
            self.st.lat.append(now - self.t0)
        wi = self.wi + 1
        if wi == len(self.reqs):
            wi = 0
        self.wi, self.exp, self.pos, self.slow, self.t0 = wi, self.expect[wi], 0, None, now
        self.write(self.reqs[wi])

    def _feed_slow(self, data) -> None:
        """First round of a window, or answers that differ from its expected bytes: collect
        the window's frames, then decode them all."""
        if self.slow is None:
            self.slow = bytearray(self.exp[:self.pos]) if self.pos else bytearray()
        buf = self.slow
        buf += data
        n, off, want = 0, 0, self.sizes[self.wi]
        while n < want and off + 4 <= len(buf):
            end = off + 4 + _I32.unpack_from(buf, off)[0]
            if end > len(buf):
                break
            off, n = end, n + 1
        if n < want:
            return
        if off != len(buf):
            self.st.fatal = "node %d: more answers than requests on a connection" % self.node
            return
        self._check(bytes(buf))
        self._done()

    def _check(self, raw: bytes) -> None:
        st = self.st
        first = self.expect[self.wi] is None
        if not first:
            st.mismatched += 1
        ok, off, mv = True, 0, memoryview(raw)
        for k, (g, _mid, ep) in enumerate(self.members[self.wi]):
            end = off + 4 + _I32.unpack_from(raw, off)[0]
            corr, r = decode_response_frame(mv[off + 4:end],
                                            m.ConsumerGroupHeartbeatRequest.API_KEY, VERSION)
            off = end
            if corr != self.corr0[self.wi] + k:
                st.fatal = "node %d: answer %d out of order" % (self.node, corr)
                return
            if r.error_code:
                st.errors[r.error_code] += 1
                st.fenced += r.error_code in FENCED
                ok = False
            elif r.member_epoch != ep or r.assignment is not None:
                st.unsteady += 1
                ok = False
        if ok:
            self.expect[self.wi] = raw
        elif first:
            st.fatal = st.fatal or ("node %d: the first answers of group %s are not steady "
                                    "(errors %s, unsteady %d)"
                                    % (self.node, g, dict(st.errors), st.unsteady))


def _connect(t: dict) -> socket.socket:
    s = socket.create_connection((t["host"], t["port"]))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    return s


def _sender(sock: socket.socket, sel, c: Conn):
    """send() on a non-blocking socket; what the kernel does not take now waits for
    EVENT_WRITE (rare: a window is a few KB and the previous one has been answered)."""
    rest = bytearray()

    def write(data) -> None:
        if data is None:                      # writable again
            data = bytes(rest)
            rest.clear()
        elif rest:
            rest.extend(data)
            return
        try:
            k = sock.send(data)
        except BlockingIOError:
            k = 0
        if k < len(data):
            rest.extend(memoryview(data)[k:])
            sel.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        elif sel.get_key(sock).events != selectors.EVENT_READ:
            sel.modify(sock, selectors.EVENT_READ, c)
    return write


def _run_selectors(conns: list, st: Stats, clock) -> None:
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for t, c in conns:
            s = _connect(t)
            socks.append(s)
            c.write = _sender(s, sel, c)
            sel.register(s, selectors.EVENT_READ, c)
        for _t, c in conns:
            c.start()
        select, R, W = sel.select, selectors.EVENT_READ, selectors.EVENT_WRITE
        for wake in clock:
            while True:
                left = wake - _perf()
                if left <= 0:
                    break
                for key, ev in select(left):
                    c = key.data
                    if ev & R:
                        data = key.fileobj.recv(1 << 18)
                        if not data:
                            raise ConnectionError("node %d closed a connection" % c.node)
                        c.feed(data)
                    if ev & W:
                        c.write(None)
                if st.fatal:
                    raise RuntimeError(st.fatal)
    finally:
        for s in socks:
            s.close()
        sel.close()


class _Proto(asyncio.Protocol):
    def __init__(self, c: Conn, st: Stats, closing: list):
        self.c, self.st, self.closing = c, st, closing
        self.data_received = c.feed

    def connection_made(self, transport):
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP,
                                                      socket.TCP_NODELAY, 1)
        self.c.write = transport.write

    def connection_lost(self, exc):
        if not self.closing:
            self.st.fatal = self.st.fatal or "node %d closed a connection" % self.c.node


def _run_uvloop(conns: list, st: Stats, clock) -> None:
    loop = L.new_event_loop()
    closing: list = []

    async def run():
        transports = []
        try:
            for t, c in conns:
                tr, _p = await loop.create_connection(lambda c=c: _Proto(c, st, closing),
                                                      t["host"], t["port"])
                transports.append(tr)
            for _t, c in conns:
                c.start()
            for wake in clock:
                while _perf() < wake:
                    await asyncio.sleep(min(0.05, wake - _perf()))
                    if st.fatal:
                        raise RuntimeError(st.fatal)
        finally:
            closing.append(True)
            for tr in transports:
                tr.close()
            await asyncio.sleep(0)
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


def flood(spec: dict) -> dict:
    """The flood phase. spec: targets [{host, port, pid, connections, members: [[group,
    member id, epoch]]}], window, seconds, warmup, io -> heartbeats/s (all, per node),
    window latency, CPU (generator, nodes, machine), errors."""
    st = Stats()
    targets = spec["targets"]
    conns = []                             # (target, Conn); member i on connection i % k
    for n, t in enumerate(targets):
        k = t["connections"]
        conns += [(t, Conn(n + 1, t["members"][c::k], spec["window"], st)) for c in range(k)]
    res: dict = {}

    def node_hb() -> list:
        return [sum(c.hb for _t, c in conns if c.node == n + 1) for n in range(len(targets))]

    def clock():
        """The times the I/O loop wakes at (end of warm-up, end of the measurement); the
        readings are taken in between."""
        yield _perf() + spec["warmup"]
        pids = [t.get("pid") for t in targets]
        err0, fen0, uns0, mis0 = Counter(st.errors), st.fenced, st.unsteady, st.mismatched
        hb0 = node_hb()
        scpu0 = [L.proc_cpu_seconds(p) if p else None for p in pids]
        mb0, mt0 = L.machine_cpu()
        cpu0 = time.process_time()
        st.lat = array("d")
        st.recording = True
        t0 = _perf()
        yield t0 + spec["seconds"]
        dt = _perf() - t0
        cpu = time.process_time() - cpu0
        st.recording = False
        mb1, mt1 = L.machine_cpu()
        scpu = [L.proc_cpu_seconds(p) - c0 if p else None for p, c0 in zip(pids, scpu0)]
        per = [b - a for a, b in zip(hb0, node_hb())]
        hb = sum(per)
        err = Counter(st.errors)
        err.subtract(err0)
        pct = L.percentiles(st.lat)
        res.update({
            "heartbeats": hb, "seconds": dt, "rate": hb / dt, "per_node": [x / dt for x in per],
            "node_cpu": [None if c is None else c / dt for c in scpu],
            "gen_cpu": cpu / dt, "gen_us_per_hb": cpu / hb * 1e6 if hb else None,
            "machine_cpu": (mb1 - mb0) / max(1, mt1 - mt0) * (os.cpu_count() or 1),
            "p50_ms": pct[50], "p99_ms": pct[99], "windows": len(st.lat),
            "errors": {str(k): v for k, v in err.items() if v},
            "fenced": st.fenced - fen0, "unsteady": st.unsteady - uns0,
            "mismatched_windows": st.mismatched - mis0, "connections": len(conns),
            "window": spec["window"], "io": spec["io"]})

    gc.collect()
    gc.disable()                           # nothing here makes cycles: no collector pauses
    (_run_uvloop if spec["io"] == "uvloop" else _run_selectors)(conns, st, clock())
    if st.fatal:
        raise RuntimeError(st.fatal)
    return res


async def run_flood(spec: dict) -> dict:
    """flood(spec) in a process of its own (this file, --spec -): the caller's heap and event
    loop stay out of the generator's CPU."""
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(HERE), "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    p = await asyncio.create_subprocess_exec(
        sys.executable, os.path.abspath(__file__), "--spec", "-", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await p.communicate(json.dumps(spec).encode())
    if p.returncode != 0:
        raise RuntimeError("hbflood exited with %s:\n%s" % (p.returncode,
                                                            err.decode(errors="replace")[-3000:]))
    return json.loads(out)


# ----------------------------------------------------------------------------- CLI
def _parse_args(argv=None):
    p = argparse.ArgumentParser(prog="hbflood", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", default=None,
                   help="run the flood phase only, from this JSON file ('-': stdin)")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="HOST:PORT")
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--members", type=int, default=100, help="per group")
    p.add_argument("--topic", action="append", default=None,
                   help="topic the members subscribe (repeatable; default: every topic)")
    p.add_argument("--group-prefix", default="hb")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--window", type=int, default=64, help="heartbeats per window")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--io", choices=("selectors", "uvloop"), default="selectors")
    p.add_argument("--server-pid", type=int, default=None,
                   help="also report this process's CPU (from /proc)")
    return p.parse_args(argv)


async def _standalone(a) -> dict:
    host, _, port = a.bootstrap.rpartition(":")
    topics = a.topic
    if not topics:
        lg = L.LoadGen(host, int(port), 1)
        await lg.connect()
        topics = sorted(lg.partitions)
        await lg.close()
    names = ["%s-%04d" % (a.group_prefix, i) for i in range(a.groups)]
    members = await form(host, int(port), names, a.members, topics, a.connections)
    return await run_flood({"targets": [{"host": host, "port": int(port), "pid": a.server_pid,
                                         "connections": a.connections, "members": members}],
                            "window": a.window, "seconds": a.seconds, "warmup": a.warmup,
                            "io": a.io})


def main(argv=None) -> int:
    a = _parse_args(argv)
    if a.spec is not None:
        with (sys.stdin if a.spec == "-" else open(a.spec)) as f:
            spec = json.load(f)
        out = flood(spec)
    else:
        loop = L.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            out = loop.run_until_complete(_standalone(a))
        finally:
            loop.close()
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
