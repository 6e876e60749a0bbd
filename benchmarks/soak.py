"""Soak test: `groupcoord serve` under churning members, SIGKILLed and restarted periodically.

    PYTHONPATH=src python benchmarks/soak.py --minutes 10
    PYTHONPATH=src python benchmarks/soak.py --minutes 2 --kill-every 15 --consumers 30 \
        --workers 8 --classic 8 --churn-every 2

What runs: one `groupcoord serve` child on a fixed port and data directory; KIP-848 consumer
members (`ConsumerMember`), Connect workers (`ConnectWorker`, one of them chosen to compute
each assignment) and classic members (`ClassicMember`, cooperative-sticky) of the member SDK,
each group in this process; every --churn-every seconds a random member is stopped (gracefully
or killed without a word) and a new one started; every --kill-every seconds the server is
SIGKILLed and restarted on the same data directory. Progress is printed every few seconds.

What it reports: heartbeats served (answered heartbeats counted by the members), rebalances
completed (assignment callbacks), errors by type (member errors and request failures seen by
the SDK's loggers), server kills, and invariant violations:
  * exclusive: a unit (partition, connector, task) assigned by callback to a member while
    another running member of the group still holds it (members that were killed no longer
    count; graceful stops revoke first);
  * the server failing to come back on its data directory.
Exit status 1 when any invariant was violated. Not a test (no timed assertions): a tool to
run for minutes or hours. The deterministic counterpart is `python -m tests.simulation`.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from groupcoord.client import ClassicMember, ConsumerMember
from groupcoord.client.connect_worker import ConnectWorker

LISTEN_RE = re.compile(r"groupcoord: listening on (\S+):(\d+)")


class Server:
    def __init__(self, data_dir: str, port: int, shards: int, topics: dict):
        self.data_dir, self.port, self.shards, self.topics = data_dir, port, shards, topics
        self.proc = None
        self.kills = 0
        self.start_failures = 0

    def start(self, timeout_s: float = 60.0) -> None:
        cmd = [sys.executable, "-m", "groupcoord.cli", "serve", "--port", str(self.port),
               "--data-dir", self.data_dir, "--shards", str(self.shards),
               "--log-level", "WARNING",
               "--group-config", "consumer_session_timeout_ms=10000",
               "--group-config", "connect_session_timeout_ms=10000",
               "--group-config", "group_initial_rebalance_delay_ms=0"]
        for t, n in self.topics.items():
            cmd += ["--topic", "%s:%d" % (t, n)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if LISTEN_RE.search(line):
                return
        self.start_failures += 1
        raise RuntimeError("groupcoord serve did not start on %s" % self.data_dir)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Tracker:
    """Members' own views (from their callbacks) and the exclusivity invariant."""

    def __init__(self):
        self.holders: dict = {}          # (group, unit) -> member key
        self.violations: list = []
        self.rebalances = 0

    def listener(self, group: str, key: str, kind: str):
        tr = self

        def take(units):
            tr.rebalances += 1
            for u in units:
                other = tr.holders.get((group, u))
                if other is not None and other != key:
                    tr.violations.append("exclusive: group %s unit %r held by %s and given to %s"
                                         % (group, u, other, key))
                tr.holders[(group, u)] = key

        def drop(units):
            for u in units:
                if tr.holders.get((group, u)) == key:
                    del tr.holders[(group, u)]

        if kind == "connect":
            class L:
                def on_assigned(self, connectors, tasks):
                    take([(c, -1) for c in connectors] + [tuple(t) for t in tasks])

                def on_revoked(self, connectors, tasks):
                    drop([(c, -1) for c in connectors] + [tuple(t) for t in tasks])
        else:
            class L:
                def on_partitions_assigned(self, partitions):
                    take([tuple(p) for p in partitions])

                def on_partitions_revoked(self, partitions):
                    drop([tuple(p) for p in partitions])

                def on_partitions_lost(self, partitions):
                    drop([tuple(p) for p in partitions])
        return L()

    def forget(self, key: str) -> None:
        """A killed member runs nothing any more."""
        for k in [k for k, v in self.holders.items() if v == key]:
            del self.holders[k]


class ErrorCounter(logging.Handler):
    """Counts the SDK's log lines about failed requests and errors, by their first words."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.counts: collections.Counter = collections.Counter()

    def emit(self, record):
        msg = record.getMessage()
        m = re.search(r"(failed|timed out|error|Error|NOT_COORDINATOR|COORDINATOR_\w+|"
                      r"FENCED_\w+|UNKNOWN_MEMBER_ID|ConnectionClosed|RequestTimeout)", msg)
        if m and record.levelno >= logging.INFO:
            self.counts[m.group(1)] += 1


async def soak(a) -> int:
    rng = random.Random(a.seed)
    data_dir = a.data_dir or tempfile.mkdtemp(prefix="groupcoord-soak-")
    port = a.port or _free_port()
    topics = {"soak": a.partitions}
    server = Server(data_dir, port, a.shards, topics)
    server.start()
    bootstrap = "127.0.0.1:%d" % port
    tracker = Tracker()
    errors = ErrorCounter()
    logging.getLogger("groupcoord.client").addHandler(errors)
    logging.getLogger("groupcoord.client").setLevel(logging.INFO)
    members: dict = {}
    seq = [0]
    retired = [0]                 # heartbeats of members already replaced

    def new(kind: str):
        seq[0] += 1
        key = "%s-%d" % (kind, seq[0])
        if kind == "consumer":
            x = ConsumerMember(bootstrap, "soak-consumer", topics=["soak"],
                               listener=tracker.listener("soak-consumer", key, kind))
        elif kind == "connect":
            x = ConnectWorker(bootstrap, "soak-connect", worker_url="http://" + key,
                              connectors={"c%d" % i: 4 for i in range(a.connectors)},
                              listener=tracker.listener("soak-connect", key, kind),
                              session_timeout_ms=10_000, request_timeout_s=5.0)
        else:
            x = ClassicMember(bootstrap, "soak-classic", topics=["soak"],
                              assignors=["cooperative-sticky"],
                              listener=tracker.listener("soak-classic", key, kind),
                              session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
        members[key] = (kind, x)
        return key, x

    async def start(kind):
        key, x = new(kind)
        try:
            await x.start()
        except Exception as e:
            errors.counts["start: %s" % type(e).__name__] += 1

    kinds = ["consumer"] * a.consumers + ["connect"] * a.workers + ["classic"] * a.classic
    await asyncio.gather(*(start(k) for k in kinds))
    t0 = time.monotonic()
    end = t0 + a.minutes * 60
    next_kill = t0 + a.kill_every
    next_churn = t0 + a.churn_every
    next_report = t0 + 5
    while time.monotonic() < end:
        await asyncio.sleep(0.2)
        now = time.monotonic()
        if now >= next_kill:
            next_kill = now + a.kill_every
            server.kill()
            await asyncio.sleep(rng.uniform(0.0, 2.0))
            try:
                await asyncio.get_running_loop().run_in_executor(None, server.start)
            except RuntimeError as e:
                tracker.violations.append("server did not restart: %s" % e)
                break
        if now >= next_churn and members:
            next_churn = now + a.churn_every
            key = rng.choice(sorted(members))
            kind, x = members.pop(key)
            retired[0] += getattr(x, "heartbeats", 0)
            if rng.random() < 0.5:
                try:
                    if kind == "connect":
                        await asyncio.wait_for(x.stop(), 15)
                    else:
                        await asyncio.wait_for(x.close(), 15)
                except Exception as e:
                    errors.counts["stop: %s" % type(e).__name__] += 1
            else:
                await (x.kill() if hasattr(x, "kill") else x.close(leave=False))
            tracker.forget(key)
            asyncio.ensure_future(start(kind))
        if now >= next_report:
            next_report = now + 5
            print("[%5.0fs] members %d, heartbeats %d, rebalances %d, kills %d, errors %d, "
                  "violations %d" % (now - t0, len(members), retired[0] + _heartbeats(members),
                                     tracker.rebalances, server.kills,
                                     sum(errors.counts.values()), len(tracker.violations)),
                  flush=True)
    hb = retired[0] + _heartbeats(members)
    for kind, x in list(members.values()):
        try:
            if kind == "connect":
                await asyncio.wait_for(x.stop(), 10)
            else:
                await asyncio.wait_for(x.close(), 10)
        except Exception:
            pass
    server.stop()
    print("\nsoak: %.1f min, server killed %d times" % ((time.monotonic() - t0) / 60,
                                                       server.kills))
    print("heartbeats served (answered, counted by the members): %d" % hb)
    print("rebalances completed (assignment callbacks): %d" % tracker.rebalances)
    print("errors by type: %s" % (dict(errors.counts.most_common()) or "none"))
    print("invariant violations: %d" % len(tracker.violations))
    for v in tracker.violations[:20]:
        print("  " + v)
    if not a.data_dir and not a.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 1 if tracker.violations else 0


def _heartbeats(members) -> int:
    return sum(getattr(x, "heartbeats", 0) for _k, x in members.values())


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=5.0, help="how long (default 5)")
    p.add_argument("--kill-every", type=float, default=20.0,
                   help="SIGKILL + restart the server every N seconds (default 20)")
    p.add_argument("--churn-every", type=float, default=3.0,
                   help="replace a random member every N seconds (default 3)")
    p.add_argument("--consumers", type=int, default=12, help="KIP-848 members (default 12)")
    p.add_argument("--workers", type=int, default=4, help="connect workers (default 4)")
    p.add_argument("--classic", type=int, default=4, help="classic members (default 4)")
    p.add_argument("--partitions", type=int, default=24, help="partitions of topic 'soak'")
    p.add_argument("--connectors", type=int, default=3, help="connectors (4 tasks each)")
    p.add_argument("--shards", type=int, default=4, help="server shards (default 4)")
    p.add_argument("--data-dir", help="data directory (default: a fresh temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--seed", type=int, default=1, help="seed of the churn choices")
    a = p.parse_args(argv)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return asyncio.run(soak(a))


if __name__ == "__main__":
    sys.exit(main())
