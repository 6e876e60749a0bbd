"""`groupcoord serve --store / --node-id / --lease-ms` (server/main.py,
server/cluster_mode.py): how the flags resolve, which mistakes are refused and with which
exit status, the store connection's retries (a fake attempt, a fake sleep) and the cluster
view before and after its ClusterNode is set. In process: no store, no socket."""
import argparse
import asyncio
import logging

import asyncpg
import pytest

from groupcoord.server import cluster_mode as C
from groupcoord.server import main as S
from groupcoord.server.startup import StartupError
from groupcoord.storage.pg_schema import SchemaError


def parse(*argv):
    p = argparse.ArgumentParser(prog="groupcoord")
    sub = p.add_subparsers(dest="command")
    S.add_serve_parser(sub)
    return p.parse_args(["serve", *argv])


def resolved(*argv):
    args = parse(*argv)
    S._check_args(args)
    return args


def run_error(capsys, *argv) -> tuple:
    """-> (exit status, the one stderr line) of a serve that stops before any loop runs."""
    status = S.run(parse(*argv))
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.startswith("groupcoord serve: error:")]
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return status, lines[0]


PG = "postgresql://gc@db.example:5432/groupcoord"


# ---------------------------------------------------------------------- resolution
def test_a_file_store_by_default_by_store_and_by_data_dir_alias():
    a = resolved()
    assert (a.store_kind, a.data_dir, a.dsn) == ("file", C.DEFAULT_DATA_DIR, None)
    assert resolved("--data-dir", "/d1").data_dir == "/d1"
    a = resolved("--store", "file:/d2")
    assert (a.store_kind, a.data_dir) == ("file", "/d2")
    assert resolved("--store", "file:rel/dir").data_dir == "rel/dir"


def test_a_postgresql_store_with_its_defaults_and_overrides():
    a = resolved("--store", PG, "--node-id", "3")
    assert (a.store_kind, a.dsn, a.data_dir) == ("postgresql", PG, None)
    assert (a.node_id, a.lease_ms) == (3, 10_000)
    a = resolved("--store", "postgres://gc@h/db", "--node-id", "7", "--lease-ms", "1000")
    assert (a.store_kind, a.node_id, a.lease_ms) == ("postgresql", 7, 1000)
    C.check_cluster_args(a)         # nothing to object to


def test_the_per_node_catalog_dir_is_gone(capsys):
    """--catalog-dir (each node's catalog before it moved into the store) is no longer a
    flag: argparse refuses it (exit 2) instead of a node ignoring it."""
    with pytest.raises(SystemExit) as e:
        parse("--store", PG, "--node-id", "1", "--catalog-dir", "/c")
    assert e.value.code == 2
    assert "unrecognized arguments: --catalog-dir" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (("--store", "file:/a", "--data-dir", "/b"), "not both"),
    (("--store", "file:"), "needs a directory"),
    (("--data-dir", ""), "needs a directory"),
    (("--store", "mysql://u@h/db"), "expected file:DIR or postgresql://"),
    (("--store", "postgresql:db"), "expected file:DIR or postgresql://"),
    (("--store", "/just/a/path"), "expected file:DIR or postgresql://"),
    (("--store", PG, "--node-id", "0"), "--node-id must be a positive integer"),
    (("--store", PG, "--node-id", "-4"), "--node-id must be a positive integer"),
    (("--store", PG, "--node-id", "1", "--lease-ms", "999"), "--lease-ms must be at least 1000"),
    (("--node-id", "1",), "--node-id: cluster mode only"),
    (("--data-dir", "/d", "--lease-ms", "5000"), "--lease-ms: cluster mode only"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, says):
    status, line = run_error(capsys, *argv)
    assert status == 2 and says in line, line


def test_a_password_in_a_refused_store_is_not_printed(capsys):
    status, line = run_error(capsys, "--store", "mysql://u:sekrit@h/db")
    assert status == 2 and "sekrit" not in line and "***" in line


@pytest.mark.parametrize("argv, says", [
    (("--store", PG), "--node-id is required with a postgresql store"),
    (("--store", "postgresql://gc@h:abc/db", "--node-id", "1"), "bad --store DSN"),
    (("--store", "postgresql://gc@h:70000/db", "--node-id", "1"), "bad --store DSN"),
    (("--store", "postgresql://gc@[::1/db", "--node-id", "1"), "bad --store DSN"),
])
def test_startup_errors_exit_1_before_any_connection(capsys, argv, says):
    status, line = run_error(capsys, *argv)
    assert status == 1 and says in line, line


def test_help_explains_each_cluster_flag_and_the_shared_catalog():
    text = " ".join(S.add_serve_parser(argparse.ArgumentParser().add_subparsers())
                    .format_help().split())
    for flag in ("--store STORE", "--data-dir DIR", "--node-id N", "--lease-ms MS"):
        assert flag in text, flag
    assert "file:DIR" in text and "postgresql://USER[:PASSWORD]@HOST:PORT/DB" in text
    assert "refused with a file store" in text
    assert "default 10000, at least 1000" in text
    # One catalog for the cluster, in the store: no per-node catalog directory to give.
    assert "the one catalog every node shares through the store" in text
    assert "--catalog-dir" not in text


# ---------------------------------------------------------------------- store connection
class Attempts:
    """attempt(dsn, shards) failing with the given exceptions in turn, then answering."""

    def __init__(self, *failures):
        self.failures = list(failures)
        self.calls = []

    async def __call__(self, dsn, shards):
        self.calls.append((dsn, shards))
        if self.failures:
            raise self.failures.pop(0)
        return "pool", "cluster-id"


def open_store(attempt, **kw):
    slept = []

    async def sleep(s):
        slept.append(s)

    async def go():
        return await C.open_store(PG.replace("gc@", "gc:pw@"), 5, attempt=attempt,
                                  sleep=sleep, **kw)
    return asyncio.run(go()), slept


def test_an_unreachable_store_is_retried_with_doubling_pauses_each_logged(caplog):
    attempt = Attempts(ConnectionRefusedError(111, "Connection refused"),
                       asyncio.TimeoutError(), asyncpg.CannotConnectNowError("starting up"))
    with caplog.at_level(logging.WARNING, logger="groupcoord.serve"):
        result, slept = open_store(attempt)
    assert result == ("pool", "cluster-id") and len(attempt.calls) == 4
    assert attempt.calls[0][1] == 5
    assert slept == [0.5, 1.0, 2.0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and "attempt 1 of 5" in warnings[0]
    assert "no answer" in warnings[1] and "pw@" not in " ".join(warnings)


def test_a_store_unreachable_at_every_attempt_is_one_startup_error():
    attempt = Attempts(*[OSError(113, "No route to host")] * 5)
    with pytest.raises(StartupError) as e:
        open_store(attempt, attempts=3, first_backoff_s=0.1)
    assert len(attempt.calls) == 3
    assert "cannot reach the store" in str(e.value) and "(3 attempts)" in str(e.value)
    assert "No route to host" in str(e.value) and ":pw@" not in str(e.value)


@pytest.mark.parametrize("exc, says", [
    (asyncpg.InvalidPasswordError("password authentication failed"), "cannot use the store"),
    (asyncpg.InvalidCatalogNameError('database "x" does not exist'), "cannot use the store"),
    (ValueError("invalid literal for int()"), "bad --store DSN"),
    (OverflowError("port must be 0-65535"), "bad --store DSN"),
    (SchemaError("the cluster's store has 50 shards"), "has 50 shards"),
])
def test_what_no_retry_mends_fails_at_once(exc, says):
    attempt = Attempts(exc)
    with pytest.raises(StartupError, match=says):
        open_store(attempt)
    assert len(attempt.calls) == 1


def test_the_cluster_id_is_kafka_shaped_and_the_same_for_the_same_store():
    a = C.store_cluster_id(16384, 24601)
    assert len(a) == 22 and a == C.store_cluster_id(16384, 24601)
    assert a != C.store_cluster_id(16384, 24602) and a != C.store_cluster_id(16385, 24601)
    assert set(a) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


# ---------------------------------------------------------------------- cluster view
class FakeNode:
    def __init__(self):
        self.fences = []

    def brokers(self):
        return [(2, "b", 9102), (5, "e", 9105)]

    def owner(self, shard):
        return {0: 5}.get(shard)

    def controller_id(self):
        return 2

    def fenced(self, shard, epoch):
        self.fences.append((shard, epoch))


def test_the_view_before_its_node_knows_only_this_node_then_forwards():
    v = C.ClusterView(5, 50)
    assert (v.brokers(), v.owner(0), v.controller_id()) == ([], None, 5)
    v.fenced(0, 3)                  # no node yet: nothing to tell
    node = v.node = FakeNode()
    assert v.brokers() == [(2, "b", 9102), (5, "e", 9105)]
    assert (v.owner(0), v.owner(1), v.controller_id()) == (5, None, 2)
    v.fenced(7, 4)
    assert node.fences == [(7, 4)]
