"""The harness of the hostile-client suite (tests/hostile/) and of benchmarks/bench_hostile.py.

One `groupcoord serve` child (Node, a tests/serve_proc.py ServeProc) runs with a small topic
catalog and group timeouts short enough that a stalled node shows within a case:

    GoodGroup   two well-behaved confluent-kafka groups on topic "good" (6 partitions): a
                KIP-848 group (group.protocol=consumer) and a classic group (range, eager), two
                consumers each, polled continuously by one thread. Every rebalance callback
                is recorded with its time. `undisturbed()` says what changed since
                `baseline()`: a callback (revoke, assign, lost), a consumer's assignment, or
                the server's view (ConsumerGroupDescribe member ids and epochs, DescribeGroups
                members and state). A session that expired shows in every one of them.
    Probe       every PROBE_INTERVAL_S, on a FRESH connection: ApiVersions v3 then
                FindCoordinator v4 for the KIP-848 group; the time from connect() to the
                second answer is recorded. Probes are never asserted as timings; a case
                asserts only that each was answered within PROBE_BOUND_S (the classic
                session timeout: a node slower than that is stalled).
    RssSampler  the child's VmRSS (/proc/PID/status) every 50 ms, with its peak.
    LoadProc    one hostile load (tests/hostile/hostile_loads.py) in a child process of its
                own, so that its Python work never competes with the probe for our GIL.

Raw requests go over `Wire`, a blocking connection on our own codec (groupcoord.protocol).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for _p in (TESTS, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from serve_proc import RawClient, ServeProc, package_root  # noqa: E402

from groupcoord.protocol import (decode_response_frame, encode_request_frame,  # noqa: E402
                                 messages as M)

GOOD_TOPIC = "good"
GOOD_PARTITIONS = 6
GROUP_848 = "good-848"
GROUP_CLASSIC = "good-classic"
# Filler topics: a Metadata(all) answer of ~50 KB, as in the pipelining measurement.
FILLER_TOPICS = 100
FILLER_PARTITIONS = 16

CLASSIC_SESSION_MS = 6000           # group.min.session.timeout.ms, Kafka's default
CONSUMER_SESSION_MS = 6000          # group.consumer.session.timeout.ms for the KIP-848 group
CONSUMER_HEARTBEAT_MS = 500
PROBE_INTERVAL_S = 0.075
PROBE_BOUND_S = CLASSIC_SESSION_MS / 1000.0
MIB = 1 << 20


# ---------------------------------------------------------------------------------- the node
def catalog(filler_topics=FILLER_TOPICS, filler_partitions=FILLER_PARTITIONS, extra=None):
    """{name: partitions}: the good topic plus the filler topics (plus `extra`)."""
    topics = {GOOD_TOPIC: GOOD_PARTITIONS}
    for i in range(filler_topics):
        topics["filler-%05d" % i] = filler_partitions
    topics.update(extra or {})
    return topics


def write_topics_file(path, topics) -> str:
    with open(path, "w") as f:
        json.dump([{"name": n, "partitions": p} for n, p in topics.items()], f)
    return str(path)


def serve_flags():
    """The flags `groupcoord serve --help` lists (the suite adapts to flags that other work
    adds, e.g. a segment size, and fails loudly where a flag it needs is missing)."""
    import argparse
    from groupcoord.server.main import add_serve_parser
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    add_serve_parser(sub)
    serve = sub.choices["serve"]
    return {s for a in serve._actions for s in a.option_strings}


class Node(ServeProc):
    """`groupcoord serve` for the hostile suite: the catalog in a topics file, the group
    timeouts below, no fsync (speed; the fd case restarts with kill -9, which keeps what was
    written), and optionally a lower RLIMIT_NOFILE (soft and hard) for the child."""

    def __init__(self, data_dir, topics=None, extra_args=(), group_config=(), nofile=None,
                 shards=4, fsync="unsafe-no-fsync", **kw):
        os.makedirs(str(data_dir), exist_ok=True)
        topics = catalog() if topics is None else topics
        tf = write_topics_file(os.path.join(str(data_dir), "..",
                                            os.path.basename(str(data_dir)) + "-topics.json"),
                               topics)
        args = ["--topics-file", tf, "--fsync", fsync]
        for setting in ("group.consumer.session.timeout.ms=%d" % CONSUMER_SESSION_MS,
                        "group.consumer.heartbeat.interval.ms=%d" % CONSUMER_HEARTBEAT_MS,
                        "group.consumer.assignment.interval.ms=0") + tuple(group_config):
            args += ["--group-config", setting]
        super().__init__(data_dir, topics=None, shards=shards, extra_args=args + list(extra_args),
                         **kw)
        self.catalog = dict(topics)
        self.nofile = nofile

    def _argv(self):
        argv = super()._argv()
        if self.nofile is None:
            return argv
        # Lower both limits, then exec the real command (same pid): the node cannot raise
        # its soft limit back above the hard one.
        code = ("import os, resource, sys; n = int(sys.argv[1]); "
                "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                "os.execv(sys.executable, [sys.executable] + sys.argv[2:])")
        return [sys.executable, "-c", code, str(self.nofile)] + argv[1:]

    @property
    def pid(self):
        return self.proc.pid

    def rss_bytes(self) -> int:
        return rss_bytes(self.proc.pid)

    def fd_count(self) -> int:
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def shard_of(self, group_id: str) -> int:
        from groupcoord.runtime.shards import shard_for
        return shard_for(group_id, self.shards)


def rss_bytes(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


def wait_rss_below(node, limit, timeout):
    """Wait until the node's RSS is under `limit` bytes (memory given back), bounded."""
    deadline = time.monotonic() + timeout
    while True:
        rss = node.rss_bytes()
        if rss < limit:
            return rss
        if time.monotonic() > deadline:
            raise AssertionError("RSS still %.0f MiB after %.0f s (expected under %.0f MiB)"
                                 % (rss / MIB, timeout, limit / MIB))
        time.sleep(0.1)


class RssSampler:
    def __init__(self, pid, interval=0.05):
        self.pid = pid
        self.interval = interval
        self.samples = []            # (monotonic, bytes)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_bytes(self.pid)))
            except (OSError, RuntimeError):
                return
            self._stop.wait(self.interval)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join(5)
        return self

    @property
    def peak(self) -> int:
        return max((b for _, b in self.samples), default=0)


# ---------------------------------------------------------------------------------- raw wire
class Wire(RawClient):
    """RawClient with the request's client id chosen per call, and send/recv apart (for
    pipelining): call(request, version) -> response body."""

    def __init__(self, host, port, timeout=30.0, client_id="hostile-tests"):
        super().__init__(host, port, timeout)
        self.client_id = client_id

    def send(self, request, version, client_id=None) -> int:
        self.corr += 1
        self.sock.sendall(encode_request_frame(request, version, self.corr,
                                               self.client_id if client_id is None
                                               else client_id))
        return self.corr

    def recv(self, request_type, version, corr):
        size = struct.unpack(">i", self._read(4))[0]
        got, body = decode_response_frame(self._read(size), request_type.API_KEY, version)
        assert got == corr, (got, corr)
        return body

    def call(self, request, version, client_id=None):
        corr = self.send(request, version, client_id)
        return self.recv(type(request), version, corr)


def describe_848(host, port, group=GROUP_848):
    with Wire(host, port) as w:
        return w.call(M.ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]


def describe_classic(host, port, group=GROUP_CLASSIC):
    with Wire(host, port) as w:
        return w.call(M.DescribeGroupsRequest(groups=[group]), 5).groups[0]


def offset_fetch(host, port, group, topics=None):
    """{(topic, partition): (offset, metadata)} committed for group (all topics if None)."""
    req = M.OffsetFetchRequest(group_id=group, topics=None if topics is None else [
        M.OffsetFetchRequestTopic(name=t, partition_indexes=list(p)) for t, p in topics.items()])
    with Wire(host, port) as w:
        r = w.call(req, 7)
    assert r.error_code == 0, r
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata)
            for t in r.topics for p in t.partitions if p.committed_offset >= 0}


def node_serves(host, port) -> bool:
    """A fresh connection gets ApiVersions and Metadata(all) answered, error 0."""
    with Wire(host, port, timeout=PROBE_BOUND_S) as w:
        if w.call(M.ApiVersionsRequest(), 3).error_code != 0:
            return False
        md = w.call(M.MetadataRequest(topics=None), 12)
        return all(t.error_code == 0 for t in md.topics) and len(md.topics) > 0


# ---------------------------------------------------------------------------------- the probe
class Probe:
    """ApiVersions v3 + FindCoordinator v4 on a fresh connection every `interval` seconds."""

    def __init__(self, host, port, interval=PROBE_INTERVAL_S, bound=PROBE_BOUND_S):
        self.host, self.port = host, port
        self.interval = interval
        self.bound = bound
        self.results = []            # (start monotonic, latency s or None, error or None)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True, name="probe")

    def once(self):
        t0 = time.monotonic()
        try:
            with Wire(self.host, self.port, timeout=self.bound) as w:
                av = w.call(M.ApiVersionsRequest(client_software_name="probe",
                                                 client_software_version="1"), 3)
                fc = w.call(M.FindCoordinatorRequest(key_type=0,
                                                     coordinator_keys=[GROUP_848]), 4)
            lat = time.monotonic() - t0
            err = None
            if av.error_code != 0:
                err = "ApiVersions error %d" % av.error_code
            elif fc.coordinators[0].error_code != 0:
                err = "FindCoordinator error %d" % fc.coordinators[0].error_code
            if lat > self.bound:
                err = "answered after %.1f s (bound %.1f s)" % (lat, self.bound)
        except (OSError, ConnectionError) as e:
            lat, err = None, "%s: %s" % (type(e).__name__, e)
        self.results.append((t0, lat, err))

    def _run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join(self.bound + 5)
        return self

    def failures(self, since=None, until=None):
        return [(t, e) for t, _, e in self.results if e is not None
                and (since is None or t >= since) and (until is None or t < until)]

    def latencies(self, since=None, until=None):
        return [lat for t, lat, e in self.results if lat is not None
                and (since is None or t >= since) and (until is None or t < until)]

    def summary(self, since=None, until=None) -> dict:
        return latency_summary(self.latencies(since, until),
                               len(self.failures(since, until)))


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]     # nearest rank


def latency_summary(lats, failures=0) -> dict:
    return {"n": len(lats), "failures": failures,
            "p50_ms": percentile(lats, 50) * 1000, "p99_ms": percentile(lats, 99) * 1000,
            "max_ms": (max(lats) * 1000) if lats else float("nan"),
            "mean_ms": (statistics.fmean(lats) * 1000) if lats else float("nan")}


# ---------------------------------------------------------------------------------- good group
def _consumer_config(bootstrap, group, name, errors):
    return {
        "bootstrap.servers": bootstrap, "broker.address.family": "v4",
        "group.id": group, "client.id": name, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50, "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 5000, "socket.timeout.ms": 20000,
        "error_cb": lambda err, name=name: errors.append((time.monotonic(), name, str(err))),
    }


class GoodGroup:
    """Two KIP-848 consumers and two classic consumers on GOOD_TOPIC, polled by one thread
    (confluent-kafka consumers are used from that thread only)."""

    def __init__(self, bootstrap, n848=2, nclassic=2):
        self.bootstrap = bootstrap
        self.n848, self.nclassic = n848, nclassic
        self.events = []             # (monotonic, consumer, "assign"|"revoke"|"lost", [p])
        self.errors = []             # (monotonic, consumer, error text) from error_cb
        self.owned = {}              # consumer -> frozenset of partitions (poll thread)
        self.groups = {}             # consumer -> group id
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._fail = None
        self._t = threading.Thread(target=self._run, daemon=True, name="good-group")
        self._base = None

    def _make(self):
        from confluent_kafka import Consumer
        consumers = []
        for i in range(self.n848 + self.nclassic):
            kip848 = i < self.n848
            group = GROUP_848 if kip848 else GROUP_CLASSIC
            name = "%s-%d" % (group, i)
            conf = _consumer_config(self.bootstrap, group, name, self.errors)
            if kip848:
                conf.update({"group.protocol": "consumer", "max.poll.interval.ms": 60000})
            else:
                conf.update({"session.timeout.ms": CLASSIC_SESSION_MS,
                             "heartbeat.interval.ms": 500, "max.poll.interval.ms": 60000,
                             "partition.assignment.strategy": "range"})
            c = Consumer(conf)
            c.subscribe([GOOD_TOPIC], **self._callbacks(name))
            self.groups[name] = group
            consumers.append((name, c))
        return consumers

    def _callbacks(self, name):
        def rec(kind):
            def cb(consumer, partitions):
                self.events.append((time.monotonic(), name, kind,
                                    sorted(p.partition for p in partitions)))
            return cb
        return {"on_assign": rec("assign"), "on_revoke": rec("revoke"), "on_lost": rec("lost")}

    def _run(self):
        try:
            consumers = self._make()
        except Exception as e:          # reported by start()
            self._fail = e
            self._ready.set()
            return
        self._ready.set()
        try:
            last = 0.0
            while not self._stop.is_set():
                for _, c in consumers:
                    c.poll(0.02)
                now = time.monotonic()
                if now - last >= 0.1:
                    last = now
                    for name, c in consumers:
                        self.owned[name] = frozenset(tp.partition for tp in c.assignment())
        finally:
            for _, c in consumers:
                try:
                    c.close()
                except Exception:       # closing against a stopped node: nothing to save
                    pass

    def start(self):
        self._t.start()
        self._ready.wait(30)
        if self._fail is not None:
            raise self._fail
        return self

    def close(self):
        self._stop.set()
        self._t.join(30)

    # -- assertions
    def _balanced(self):
        for group in (GROUP_848, GROUP_CLASSIC):
            names = [n for n, g in self.groups.items() if g == group]
            owned = [self.owned.get(n, frozenset()) for n in names]
            if sorted(p for o in owned for p in o) != list(range(GOOD_PARTITIONS)):
                return False
            if not all(owned):
                return False
        return True

    def wait_stable(self, host, port, timeout=60.0, hold=1.5):
        """Both groups own every partition exactly once, every consumer holds some, the
        server's views are Stable, and that holds for `hold` seconds; then the baseline."""
        deadline = time.monotonic() + timeout
        since, last = None, None
        while time.monotonic() < deadline:
            snap = self._snapshot(host, port) if self._balanced() else None
            ok = snap is not None and snap["848_state"] == "Stable" \
                and snap["classic_state"] == "Stable"
            now = time.monotonic()
            if not ok or snap != last:
                since, last = (now if ok else None), snap
            elif now - since >= hold:
                self._base = (len(self.events), dict(self.owned), snap)
                return snap
            time.sleep(0.1)
        raise AssertionError("the good group did not settle within %.0f s: owned %s, events "
                             "%s, errors %s" % (timeout, self.owned, self.events[-10:],
                                                self.errors[-10:]))

    def _snapshot(self, host, port):
        try:
            g = describe_848(host, port)
            c = describe_classic(host, port)
        except (OSError, ConnectionError):
            return None
        return {"848_state": g.group_state, "848_epoch": g.group_epoch,
                "848_members": sorted((m.member_id, m.member_epoch,
                                       tuple(sorted(p for tp in m.assignment.topic_partitions
                                                    for p in tp.partitions)))
                                      for m in g.members),
                "classic_state": c.group_state,
                "classic_members": sorted(m.member_id for m in c.members)}

    def undisturbed(self, host, port) -> list:
        """What changed since the baseline (empty list: nothing)."""
        assert self._base is not None, "wait_stable() first"
        n, owned, snap = self._base
        problems = []
        if len(self.events) != n:
            problems.append("rebalance callbacks after the baseline: %s" % self.events[n:])
        if dict(self.owned) != owned:
            problems.append("assignment changed: %s -> %s" % (owned, dict(self.owned)))
        now = self._snapshot(host, port)
        if now != snap:
            problems.append("server view changed: %s -> %s" % (snap, now))
        return problems


# ---------------------------------------------------------------------------------- loads
class LoadProc:
    """One hostile load (hostile_loads.py CASE) in a child process. Its stdout is one JSON
    object a line: {"ready": ...} once it is under way, {"done": ...} with its summary."""

    def __init__(self, case, host, port, **params):
        self.case = case
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([package_root(), TESTS, HERE]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                               else []))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "hostile_loads.py"), case, host, str(port),
             json.dumps(params)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, start_new_session=True)
        self.ready = None
        self.done = None

    def _line(self, timeout):
        import select
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def wait_ready(self, timeout=60.0):
        msg = self._line(timeout)
        if msg is None or "ready" not in msg:
            self.kill()
            raise AssertionError("load %s did not start: %r\n%s"
                                 % (self.case, msg, self.proc.stderr.read().decode()[-4000:]))
        self.ready = msg["ready"]
        return self.ready

    def stop(self, timeout=120.0) -> dict:
        """Tell the load to stop (a line on stdin), return its summary."""
        try:
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        msg = self._line(timeout)
        if msg is None or "done" not in msg:
            self.kill()
            raise AssertionError("load %s gave no summary: %r\n%s"
                                 % (self.case, msg, self.proc.stderr.read().decode()[-4000:]))
        self.proc.wait(30)
        self.done = msg["done"]
        return self.done

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()
        return False


# ---------------------------------------------------------------------------------- a case
class Case:
    """Run a hostile load against a node whose good group is settled, with the probe and the
    RSS sampler running: `with Case(node, group) as case: ... case.load(...)`. After the
    block, `case.result` has the probe summary, RSS baseline and peak, and what disturbed
    the good group."""

    def __init__(self, node, group, settle_after=2.0):
        self.node, self.group = node, group
        self.settle_after = settle_after
        self.probe = Probe(node.host, node.port)
        self.rss = RssSampler(node.pid)
        self.result = {}

    def __enter__(self):
        self.rss_before = self.node.rss_bytes()
        self.rss.start()
        self.probe.start()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            # Let heartbeats and session timers run on after the load: a member that missed
            # its session during it is expired by now.
            time.sleep(self.settle_after)
        self.probe.stop()
        self.rss.stop()
        self.result = {"probe": self.probe.summary(), "failures": self.probe.failures(),
                       "rss_before": self.rss_before, "rss_peak": self.rss.peak,
                       "disturbed": self.group.undisturbed(self.node.host, self.node.port)
                       if exc[0] is None else None}
        return False

    def check(self, rss_growth_bound):
        """The assertions every case shares: every probe answered within PROBE_BOUND_S, the
        good group undisturbed, RSS growth under `rss_growth_bound` bytes."""
        r = self.result
        assert r["probe"]["n"] > 0, "no probe ran"
        assert not r["failures"], "probes not answered within %.1f s: %s (summary %s)" % (
            PROBE_BOUND_S, r["failures"][:10], r["probe"])
        assert not r["disturbed"], "the good group was disturbed: %s" % r["disturbed"]
        growth = r["rss_peak"] - r["rss_before"]
        assert growth < rss_growth_bound, (
            "RSS grew by %.0f MiB (from %.0f MiB), over the %.0f MiB bound"
            % (growth / MIB, r["rss_before"] / MIB, rss_growth_bound / MIB))
        print("probe: %s; RSS %.0f -> peak %.0f MiB" % (
            {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r["probe"].items()},
            r["rss_before"] / MIB, r["rss_peak"] / MIB))
