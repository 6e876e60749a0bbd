"""Run `groupcoord serve` as a subprocess for the real-client tests (tests/test_clients_*.py).

    with ServeProc(tmp_path, topics={"t6": 6}) as srv:
        srv.host, srv.port, srv.proc, srv.data_dir
        srv.restart(kill9=True)      # same data dir, same port

The child gets PYTHONPATH = the directory holding the imported `groupcoord` package (src/ in a
checkout, site-packages when installed), so it runs the very code the tests import. Start-up
waits for the one "listening on" line on stdout, bounded; on failure the error carries the
child's stderr. Teardown always stops the child: SIGTERM, then SIGKILL after a bound.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import groupcoord

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
LISTEN_RE = re.compile(
    r"^groupcoord: listening on (\S+):(\d+) \((\d+) shards? loaded from (.*)\)\s*$")


def package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))


class ServeError(RuntimeError):
    pass


class ServeProc:
    """One `groupcoord serve` child process. host/port/proc/data_dir are set once started."""

    def __init__(self, data_dir, topics=None, shards=None, log_level=None, extra_args=(),
                 host="127.0.0.1", port=0, start_timeout=START_TIMEOUT_S, loop=None):
        self.data_dir = str(data_dir)
        self.loop = loop                # "uvloop" / "asyncio" (--loop); None: serve's default
        self.topics = dict(topics or {})
        self.shards = shards
        self.log_level = log_level or os.environ.get("GROUPCOORD_TEST_LOG_LEVEL")
        self.extra_args = list(extra_args)
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.proc = None
        self.listening = False
        self.starts = 0
        self._stderr_file = None
        self.stderr_path = None
        self._stdout_lines = []
        self._stdout_thread = None

    # -- lifecycle -------------------------------------------------------------------------
    def _argv(self):
        argv = [sys.executable, "-m", "groupcoord.cli", "serve",
                "--host", self.host, "--port", str(self.port), "--data-dir", self.data_dir]
        for name, parts in self.topics.items():
            argv += ["--topic", "%s:%d" % (name, parts)]
        if self.shards is not None:
            argv += ["--shards", str(self.shards)]
        if self.log_level:
            argv += ["--log-level", self.log_level]
        if self.loop:
            argv += ["--loop", self.loop]
        # Faster groups than Kafka's defaults (classic groups form after 3 s, KIP-848 members
        # heartbeat every 5 s), so that the client tests converge in a few seconds.
        argv += ["--group-config", "group.initial.rebalance.delay.ms=300",
                 "--group-config", "group.consumer.heartbeat.interval.ms=1000"]
        return argv + self.extra_args

    def _env(self):
        env = dict(os.environ)
        root = package_root()
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = root if not old else root + os.pathsep + old
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self):
        if self.proc is not None and self.proc.poll() is None:
            raise ServeError("already running")
        os.makedirs(self.data_dir, exist_ok=True)
        self.starts += 1
        # stderr goes to a file (never a pipe nobody drains): shown on failure.
        fd, self.stderr_path = tempfile.mkstemp(prefix="groupcoord-serve-%d-" % self.starts,
                                                suffix=".stderr")
        self._stderr_file = os.fdopen(fd, "w+b")
        self._stdout_lines = []
        self.listening = False
        self.proc = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._stderr_file,
                                     env=self._env(), start_new_session=True)
        ready = threading.Event()
        match = {}

        def pump(proc=self.proc, lines=self._stdout_lines):
            # Read stdout to its end so the child never blocks on a full pipe.
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                lines.append(line)
                m = LISTEN_RE.match(line)
                if m and not ready.is_set():
                    match["m"] = m
                    ready.set()
            proc.stdout.close()
            ready.set()

        self._stdout_thread = threading.Thread(target=pump, daemon=True, name="serve-stdout")
        self._stdout_thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not ready.wait(0.05):
            if time.monotonic() > deadline:
                self.stop()
                raise ServeError("groupcoord serve did not print its listening line within "
                                 "%.0f s\n%s" % (self.start_timeout, self.describe()))
        if "m" not in match:
            self.proc.wait(STOP_TIMEOUT_S)
            raise ServeError("groupcoord serve exited (rc=%s) before listening\n%s"
                             % (self.proc.returncode, self.describe()))
        m = match["m"]
        self.host, self.port = m.group(1), int(m.group(2))
        self.listening = True
        return self

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
        self._join_io()
        return p.returncode

    def kill9(self):
        p = self.proc
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(STOP_TIMEOUT_S)
        self._join_io()
        return p.returncode if p is not None else None

    def restart(self, kill9=True):
        """Stop (kill -9 by default, else SIGTERM) and start again on the same data dir and
        port. Binding the same port can briefly fail right after the kill: retried, bounded."""
        if kill9:
            self.kill9()
        else:
            self.stop()
        port = self.port
        deadline = time.monotonic() + 20.0
        while True:
            try:
                return self.start()
            except ServeError:
                if time.monotonic() > deadline or _port_free(self.host, port):
                    raise
                time.sleep(0.2)

    def _join_io(self):
        if self._stdout_thread is not None:
            self._stdout_thread.join(5.0)
            self._stdout_thread = None

    # -- diagnostics -----------------------------------------------------------------------
    def stderr_text(self, limit=20000):
        if self.stderr_path is None:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def describe(self):
        return ("argv: %s\nstdout:\n%s\nstderr:\n%s"
                % (" ".join(self._argv()), "\n".join(self._stdout_lines), self.stderr_text()))

    @property
    def bootstrap(self):
        return "%s:%d" % (self.host, self.port)

    def close(self):
        try:
            self.stop()
        finally:
            if self._stderr_file is not None:
                self._stderr_file.close()
                self._stderr_file = None
            if self.stderr_path and not os.environ.get("GROUPCOORD_TEST_KEEP_LOGS"):
                try:
                    os.unlink(self.stderr_path)
                except OSError:
                    pass

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __iter__(self):  # host, port, proc, data_dir = srv
        return iter((self.host, self.port, self.proc, self.data_dir))


def _port_free(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Poll pred() until truthy or the bounded timeout passes; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


# -- a minimal blocking client on our own codec (for ConsumerGroupDescribe etc.) --------------
class RawClient:
    """One blocking TCP connection speaking our codec. Used by tests to look at server state
    (ConsumerGroupDescribe) the way an admin tool would."""

    def __init__(self, host, port, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0

    def call(self, request, version):
        from groupcoord.protocol import encode_request_frame, decode_response_frame
        self.corr += 1
        self.sock.sendall(encode_request_frame(request, version, self.corr, "groupcoord-tests"))
        size = int.from_bytes(self._read(4), "big", signed=True)
        corr, body = decode_response_frame(self._read(size), type(request).API_KEY, version)
        assert corr == self.corr, (corr, self.corr)
        return body

    def _read(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def describe_consumer_group(host, port, group_id, timeout=10.0):
    """ConsumerGroupDescribe v0 -> the described group (retries COORDINATOR_LOAD_IN_PROGRESS
    and connection refusals within `timeout`)."""
    from groupcoord.protocol import ConsumerGroupDescribeRequest
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with RawClient(host, port) as c:
                resp = c.call(ConsumerGroupDescribeRequest(group_ids=[group_id]), 0)
            g = resp.groups[0]
            if g.error_code in (14, 15):  # load in progress / not available: retry
                last = g
                time.sleep(0.1)
                continue
            return g
        except OSError as e:
            last = e
            time.sleep(0.1)
    raise AssertionError("ConsumerGroupDescribe of %r failed: %r" % (group_id, last))


# -- pytest fixture ----------------------------------------------------------------------------
try:
    import pytest
except ImportError:  # pragma: no cover - the helper is usable without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def serve(tmp_path, event_loop_policy):
        """Factory: serve(topics={"t": 6}, **kw) -> a started ServeProc (iterable as
        (host, port, proc, data_dir)). Every process started is stopped at teardown. In a
        test run on both loops (tests/conftest.py) the child runs on the test's loop."""
        made = []

        def start(topics=None, **kw):
            kw.setdefault("loop", event_loop_policy)
            s = ServeProc(tmp_path / ("groupcoord-data-%d" % len(made)), topics=topics, **kw)
            made.append(s)
            return s.start()

        yield start
        # SIGTERM must be a graceful exit 0 (the CLI contract): checked for every process
        # that got to listening and is still running at teardown.
        problems = []
        for s in made:
            running = s.proc is not None and s.proc.poll() is None and s.listening
            rc = s.stop()
            if running and rc != 0:
                problems.append("exit status %s after SIGTERM\n%s" % (rc, s.describe()))
            s.close()
        if problems:
            pytest.fail("groupcoord serve did not shut down gracefully:\n" + "\n".join(problems))
