"""`groupcoord serve --store file:DIR --processes N`: every core of one machine as N node
processes under one supervisor (issue 19, point 4; docs/cluster.md, "One machine, every
core").

Layout (N processes, S shards, ports P..P+N-1):

  supervisor   the process the operator starts. It merges --topic/--topics-file into
               DIR/topics.json and creates DIR/cluster-id once, picks the ports (with --port
               0: N consecutive free ones), then starts child i = 1..N as
                   python -m groupcoord.cli serve --store file:DIR --port P+i-1
                          --processes N --process-node i  [every other option as given]
               and prints one line when all N listen:
                   groupcoord: listening on HOST:P (S shards loaded from DIR; N processes
                   on ports P-P+N-1)
               A child that exits is started again (one log line each way; the pause grows
               from RESTART_FIRST_S to RESTART_MAX_S while it keeps dying within
               STABLE_AFTER_S). SIGTERM/SIGINT: SIGTERM to every child by its PID, SIGKILL
               to those still running after STOP_TIMEOUT_S, exit status 0.
  child i      node id i: owns the shards s with s mod N == i - 1 (``owner_of``) and loads
               only those (ShardSet.start(shards=...)) from their own directories
               DIR/__consumer_offsets-s, which no other child opens. It reads the catalog
               without merging anything (the supervisor did) and answers as one node of a
               fixed cluster (``StaticClusterView``): Metadata lists the N nodes,
               FindCoordinator names a group's owner, a group request for a shard it does
               not own gets NOT_COORDINATOR (an unloaded shard's answer). A restarted child
               replays its shards' logs, as any restart does. If the supervisor dies, the
               kernel sends the child SIGTERM (PR_SET_PDEATHSIG, Linux).

The topic catalog is fixed for the run: each child keeps its own copy in memory, so the
catalog admin APIs (--allow-create-topics, --allow-delete-topics) are refused with
--processes (a change that reached one child would be unknown to the others).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import socket
import sys
import time
from typing import Optional

from groupcoord.server.catalog import CatalogError

__all__ = ["StaticClusterView", "owner_of", "check_process_args", "child_argv",
           "follow_supervisor", "Supervisor", "SUPERVISOR_PID_ENV"]

log = logging.getLogger("groupcoord.serve")

# The child's listening line (server/main.py prints it).
LISTEN_RE = re.compile(r"^groupcoord: listening on (\S+):(\d+) \((\d+) shards? loaded from")
SUPERVISOR_PID_ENV = "GROUPCOORD_SUPERVISOR_PID"
START_TIMEOUT_S = 120.0     # a child's start: its shards' logs replayed, its socket bound
STOP_TIMEOUT_S = 20.0       # SIGTERM to exit, before SIGKILL
RESTART_FIRST_S = 0.2       # pause before restarting a child that died...
RESTART_MAX_S = 10.0        # ... doubled while it keeps dying, up to this
STABLE_AFTER_S = 30.0       # a child up this long starts over from RESTART_FIRST_S
PORT_TRIES = 50             # --port 0: attempts at finding N consecutive free ports
# Options of the supervisor alone: each child gets its own --store/--port/--process-node.
_SUPERVISOR_ONLY = frozenset(("help", "port", "processes", "process_node", "topic",
                              "topics_file", "store", "data_dir"))


def owner_of(shard: int, processes: int) -> int:
    """The node id (1..processes) of the process that owns ``shard``."""
    return shard % processes + 1


class StaticClusterView:
    """The cluster view (server/node.py NodeState.cluster) of one child: N nodes on
    consecutive ports of one host, shard s owned by node s mod N + 1, node 1 the
    controller. Nothing moves, so every answer is a function of the arguments."""
    __slots__ = ("node_id", "shard_count", "processes", "host", "base_port")

    def __init__(self, node_id: int, processes: int, shard_count: int, host: str,
                 base_port: int):
        self.node_id = node_id
        self.processes = processes
        self.shard_count = shard_count
        self.host = host
        self.base_port = base_port

    def owned(self) -> list:
        return [s for s in range(self.shard_count)
                if owner_of(s, self.processes) == self.node_id]

    def brokers(self) -> list:
        return [(k + 1, self.host, self.base_port + k) for k in range(self.processes)]

    def owner(self, shard: int) -> Optional[int]:
        return owner_of(shard, self.processes)

    def controller_id(self) -> int:
        return 1

    @classmethod
    def of(cls, args) -> "StaticClusterView":
        """The view of the child started with ``args`` (--port is its own, P+i-1). The
        host is what server.py advertises: --advertised-host, else --host (a wildcard
        address as the socket names it)."""
        host = args.advertised_host or args.host or "0.0.0.0"
        return cls(args.process_node, args.processes, args.shards, host,
                   args.port - (args.process_node - 1))


def check_process_args(args) -> None:
    """CatalogError (exit 2) for a --processes that cannot run."""
    n = args.processes
    if n < 1:
        raise CatalogError("--processes must be at least 1")
    if args.process_node is not None and not 1 <= args.process_node <= n:
        raise CatalogError("--process-node must be 1..--processes")
    if n == 1:
        return
    if args.store_kind != "file":
        raise CatalogError("--processes: a file store only; with a postgresql store start "
                           "one serve per --node-id (each uses a core)")
    if args.allow_create_topics or args.allow_delete_topics:
        raise CatalogError("--processes: the topic catalog is fixed for the run (each "
                           "process holds a copy), so --allow-create-topics and "
                           "--allow-delete-topics are refused; give the topics with "
                           "--topic/--topics-file")
    if args.port and args.port + n - 1 > 65535:
        raise CatalogError("--processes %d from --port %d: ports up to %d, above 65535"
                           % (n, args.port, args.port + n - 1))
    if n > args.shards:
        raise CatalogError("--processes %d is more than the %d shards: a process would own "
                           "none" % (n, args.shards))


def child_argv(parser: argparse.ArgumentParser, args) -> list:
    """The options every child gets as the supervisor got them (those with a value other
    than their default), without the supervisor's own (_SUPERVISOR_ONLY)."""
    out = []
    for a in parser._actions:
        if not a.option_strings or a.dest in _SUPERVISOR_ONLY or a.default == argparse.SUPPRESS:
            continue
        value = getattr(args, a.dest, a.default)
        if value == a.default:
            continue
        flag = max(a.option_strings, key=len)
        if a.nargs == 0:                    # store_true
            out.append(flag)
        elif isinstance(a, argparse._AppendAction):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


def follow_supervisor() -> None:
    """In a child: be sent SIGTERM when the supervisor dies (Linux), and exit now if it
    already has (the child was re-parented before it could ask)."""
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)         # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # pragma: no cover - not Linux
        return
    if expected and os.getppid() != int(expected):
        log.error("the supervisor (pid %s) is gone; exiting", expected)
        sys.exit(1)


def _free_ports(host: str, n: int) -> int:
    """A port P with P..P+n-1 free on host now (bound and released: another program may
    still take one before a child binds it; the child then fails and is restarted)."""
    for _ in range(PORT_TRIES):
        socks = []
        try:
            first = socket.socket()
            socks.append(first)
            first.bind((host, 0))
            base = first.getsockname()[1]
            if base + n - 1 > 65535:
                continue
            for k in range(1, n):
                s = socket.socket()
                socks.append(s)
                s.bind((host, base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError("no %d consecutive free ports on %s after %d tries" % (n, host, PORT_TRIES))


class _Child:
    """One node slot of the supervisor: its process now and its restart pause."""

    def __init__(self, node_id: int, port: int):
        self.node_id = node_id
        self.port = port
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.listening: Optional[asyncio.Future] = None    # -> (host, port, shards)
        self.started_at = 0.0
        self.pause = RESTART_FIRST_S
        self.starts = 0


class Supervisor:
    """Runs N children (module docstring) until SIGTERM/SIGINT. ``run`` -> exit status."""

    def __init__(self, args, argv: list, *, python: str = sys.executable):
        self.args = args
        self.n = args.processes
        self.argv = argv            # child_argv(...): the options every child gets
        self.python = python
        self.children: list = []
        self.stop: Optional[asyncio.Event] = None

    def run(self) -> int:
        return asyncio.run(self._main())

    def _command(self, c: _Child) -> list:
        return [self.python, "-m", "groupcoord.cli", "serve", "--store",
                "file:" + self.args.data_dir, "--port", str(c.port), "--processes",
                str(self.n), "--process-node", str(c.node_id)] + self.argv

    async def _spawn(self, c: _Child) -> None:
        env = dict(os.environ, **{SUPERVISOR_PID_ENV: str(os.getpid())})
        c.proc = await asyncio.create_subprocess_exec(
            *self._command(c), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, env=env)   # stderr: the supervisor's
        c.listening = asyncio.get_running_loop().create_future()
        c.started_at = time.monotonic()
        c.starts += 1
        asyncio.ensure_future(self._read_stdout(c, c.proc, c.listening))

    @staticmethod
    async def _read_stdout(c: _Child, proc, listening: asyncio.Future) -> None:
        # Read to the end, so that a child never blocks on a full pipe.
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                break
            m = LISTEN_RE.match(raw.decode("utf-8", "replace"))
            if m and not listening.done():
                listening.set_result((m.group(1), int(m.group(2)), int(m.group(3))))
        if not listening.done():
            listening.set_result(None)          # exited (or closed stdout) first

    async def _started(self, c: _Child) -> Optional[tuple]:
        """Wait for c's listening line -> (host, port, shards), None if it exited or did
        not listen within START_TIMEOUT_S (then it is killed)."""
        try:
            got = await asyncio.wait_for(asyncio.shield(c.listening), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            got = None
        if got is None and c.proc.returncode is None:
            log.error("node %d (pid %d) did not listen within %.0f s: killing it",
                      c.node_id, c.proc.pid, START_TIMEOUT_S)
            c.proc.kill()
        if got is None:
            await c.proc.wait()
        return got

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        a = self.args
        try:
            base = a.port or _free_ports(a.host or "0.0.0.0", self.n)
        except OSError as e:
            print("groupcoord serve: error: %s" % e, file=sys.stderr, flush=True)
            return 1
        self.children = [_Child(i, base + i - 1) for i in range(1, self.n + 1)]
        log.info("supervisor (pid %d): %d node processes on ports %d-%d over %s",
                 os.getpid(), self.n, base, base + self.n - 1, a.data_dir)
        for c in self.children:
            await self._spawn(c)
        waits = asyncio.gather(*(self._started(c) for c in self.children))
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait([waits, stopping], return_when=asyncio.FIRST_COMPLETED)
        if self.stop.is_set():
            await self._stop_all()
            waits.cancel()
            stopping.cancel()
            return 0
        results = waits.result()
        failed = [c for c, r in zip(self.children, results) if r is None]
        if failed:
            await self._stop_all()
            stopping.cancel()
            c = failed[0]
            print("groupcoord serve: error: node %d (port %d) exited with status %s before "
                  "listening (its error is above)" % (c.node_id, c.port, c.proc.returncode),
                  file=sys.stderr, flush=True)
            return 1
        for c, (host, port, shards) in zip(self.children, results):
            log.info("node %d (pid %d) listening on %s:%d with %d shards", c.node_id,
                     c.proc.pid, host, port, shards)
        host = results[0][0]
        sys.stdout.write("groupcoord: listening on %s:%d (%d shards loaded from %s; %d "
                         "processes on ports %d-%d)\n"
                         % (host, base, sum(r[2] for r in results), a.data_dir, self.n, base,
                            base + self.n - 1))
        sys.stdout.flush()
        watchers = [asyncio.ensure_future(self._watch(c)) for c in self.children]
        await stopping
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await self._stop_all()
        return 0

    async def _watch(self, c: _Child) -> None:
        """Restart c whenever it exits, until the supervisor stops (cancels this)."""
        while True:
            status = await c.proc.wait()
            up = time.monotonic() - c.started_at
            if up >= STABLE_AFTER_S:
                c.pause = RESTART_FIRST_S
            log.error("node %d (pid %d) exited with status %s after %.1f s; restarting it "
                      "in %.1f s", c.node_id, c.proc.pid, _status(status), up, c.pause)
            await asyncio.sleep(c.pause)
            c.pause = min(RESTART_MAX_S, c.pause * 2)
            await self._spawn(c)
            got = await self._started(c)
            if got is not None:
                log.warning("node %d restarted (pid %d, start %d): listening on %s:%d with "
                            "%d shards reloaded from their logs", c.node_id, c.proc.pid,
                            c.starts, got[0], got[1], got[2])

    async def _stop_all(self) -> None:
        """SIGTERM every running child by PID; SIGKILL those not gone in STOP_TIMEOUT_S."""
        running = [c for c in self.children
                   if c.proc is not None and c.proc.returncode is None]
        for c in running:
            try:
                c.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for c in running:
            try:
                await asyncio.wait_for(c.proc.wait(), STOP_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("node %d (pid %d) still running %.0f s after SIGTERM: killing it",
                            c.node_id, c.proc.pid, STOP_TIMEOUT_S)
                c.proc.kill()
                await c.proc.wait()
        if running:
            log.info("stopped %d node process(es): %s", len(running), ", ".join(
                "node %d (pid %d) %s" % (c.node_id, c.proc.pid, _status(c.proc.returncode))
                for c in running))


def _status(code: Optional[int]) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return "signal %d" % -code
    return str(code)
