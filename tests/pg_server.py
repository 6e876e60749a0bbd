"""A private PostgreSQL server for the tests, from the machine's binaries (Debian's
postgresql-15: /usr/lib/postgresql/15/bin; `.ci/run` installs it when missing).

    server = PgServer().start()        # initdb + pg_ctl start in a temp dir, a free port
    server.dsn("groupcoord_test")      # postgresql://postgres@127.0.0.1:PORT/groupcoord_test
    server.restart()                   # same port and data (a store that goes away and back)
    server.stop()                      # by the postmaster's PID; the temp dir is removed

initdb refuses to run as root: as root every server command runs as the `postgres` user
(runuser) in a temp dir it owns; as any other user, as that user. Trust authentication, TCP
on 127.0.0.1 only, the unix socket in the temp dir (never the system's /var/run/postgresql).

Fixtures (import them into a test module: ``from pg_server import pg_dsn, pg_db  # noqa``):
  pg_server   session: the one PgServer of this pytest process (a process-wide singleton, so
              modules that import the fixture share it); stopped at session end
  pg_dsn      session: the DSN of the session database ``groupcoord_test``
  pg_db       per test: the DSN of a fresh database made from an empty template, dropped
              after the test, so tests never share rows
"""
from __future__ import annotations

import atexit
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Optional

PG_BIN = os.environ.get("GROUPCOORD_PG_BIN", "/usr/lib/postgresql/15/bin")
SESSION_DB = "groupcoord_test"
TEMPLATE_DB = "groupcoord_template"     # never connected to: CREATE DATABASE ... TEMPLATE
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, bin_dir: str = PG_BIN, settings: Optional[dict] = None):
        self.bin_dir = bin_dir
        # fsync off: the tests exercise our transactions, not the disk (a crash of the
        # machine is not among them). pg_stat_statements: tests count statements with it.
        # Everything else is PostgreSQL's default.
        self.settings = {"fsync": "off", "max_connections": "200",
                         "shared_preload_libraries": "pg_stat_statements"}
        self.settings.update(settings or {})
        self.dir: Optional[str] = None
        self.port: Optional[int] = None
        self.pid: Optional[int] = None
        self._as_pg: list = []
        self._owner = None

    # ------------------------------------------------------------------ paths and commands
    @property
    def data_dir(self) -> str:
        return os.path.join(self.dir, "data")

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, "server.log")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = self._as_pg + [os.path.join(self.bin_dir, tool), *args]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=self.dir)
        if check and out.returncode != 0:
            raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), out.returncode,
                                                        out.stdout, self._log_tail()))
        return out

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "\nserver log:\n" + f.read()[-4000:]
        except OSError:
            return ""

    def dsn(self, database: str = SESSION_DB) -> str:
        return "postgresql://postgres@127.0.0.1:%d/%s" % (self.port, database)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one SQL string through psql (no driver needed); -> its unaligned output."""
        return self._run("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                         "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                         "-d", database, "-c", sql).stdout.strip()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "PgServer":
        initdb = os.path.join(self.bin_dir, "initdb")
        if not os.path.exists(initdb):
            raise RuntimeError("%s is missing: install Debian's postgresql-15 (.ci/run does)"
                               % initdb)
        self.dir = tempfile.mkdtemp(prefix="groupcoord-pg-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as_pg = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", self.data_dir, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        for attempt in itertools.count(1):
            self.port = _free_port()
            try:
                self._start_server()
                break
            except RuntimeError:
                # Another process took the port between _free_port and the bind: try another.
                if attempt >= 5 or "could not bind" not in self._log_tail():
                    self.stop()
                    raise
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  TEMPLATE_DB)
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "-T", TEMPLATE_DB, SESSION_DB)
        return self

    def _start_server(self) -> None:
        opts = ["-p %d" % self.port, "-k %s" % self.dir, "-c listen_addresses=127.0.0.1"]
        opts += ["-c %s=%s" % kv for kv in self.settings.items()]
        self._run("pg_ctl", "start", "-D", self.data_dir, "-l", self.log_path, "-w",
                  "-t", str(int(READY_TIMEOUT_S)), "-o", " ".join(opts))
        self.pid = self._read_pid()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port),
                        check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not become ready" + self._log_tail())
            time.sleep(0.05)

    def _read_pid(self) -> int:
        with open(os.path.join(self.data_dir, "postmaster.pid")) as f:
            return int(f.readline())

    def stop_server(self) -> None:
        """Stop the postmaster (fast shutdown: SIGINT to its PID; SIGKILL if it lingers);
        the data directory stays, for restart()."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.02)

    def restart(self) -> None:
        """Stop and start again on the same port with the same data."""
        self.stop_server()
        self._start_server()

    def stop(self) -> None:
        """Stop the server and remove its directory. Idempotent."""
        self.stop_server()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _alive(pid: int) -> bool:
    # The postmaster is a grandchild (pg_ctl daemonizes it): waitpid cannot reap it; a
    # zombie would still answer kill(pid, 0), so read its state.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# -- the process-wide server and the fixtures ------------------------------------------------
_SERVER: Optional[PgServer] = None
_DB_SEQ = itertools.count(1)


def session_server() -> PgServer:
    """The one server of this process, started on first use."""
    global _SERVER
    if _SERVER is None:
        _SERVER = PgServer().start()
        atexit.register(stop_session_server)       # also after an interrupted session
    return _SERVER


def stop_session_server() -> None:
    global _SERVER
    s, _SERVER = _SERVER, None
    if s is not None:
        s.stop()


try:
    import pytest
except ImportError:  # pragma: no cover - the helper is usable without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture(scope="session")
    def pg_server():
        """The session's private PostgreSQL server (PgServer)."""
        yield session_server()
        stop_session_server()

    @pytest.fixture(scope="session")
    def pg_dsn(pg_server):
        """postgresql://postgres@127.0.0.1:PORT/groupcoord_test (shared by the session)."""
        return pg_server.dsn(SESSION_DB)

    @pytest.fixture
    def pg_db(pg_server):
        """The DSN of a database of this test's own (made from an empty template, dropped
        afterwards)."""
        name = "gc_t%d_%d" % (os.getpid(), next(_DB_SEQ))
        pg_server.psql('CREATE DATABASE "%s" TEMPLATE %s' % (name, TEMPLATE_DB))
        yield pg_server.dsn(name)
        if pg_server.pid is not None:
            pg_server.psql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
