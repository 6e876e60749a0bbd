"""`groupcoord serve --store postgresql://... --node-id N` as real processes over a private
PostgreSQL (tests/pg_server.py): two nodes form one cluster; the node APIs of each list both,
agree on the controller and the cluster id, and send every group to its shard's owner;
SIGTERM hands the shards over and exits 0. The failover and client tests are elsewhere."""
import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import groupcoord.protocol as P
from groupcoord.runtime import shard_for
from pg_server import pg_db, pg_server  # noqa: F401 (fixtures)
from serve_proc import package_root
from server_client import WireClient

M = P.messages
LISTEN = re.compile(r"^groupcoord: listening on (\S+):(\d+) \((\d+) shards loaded from (.*)\)$")
SHARDS = 6
GROUPS = ["group-%d" % i for i in range(40)]
SETTLE_S = 60.0         # bound on the wait for both nodes to see each other and own shards


def _env():
    return dict(os.environ, PYTHONPATH=package_root())


def _argv(dsn, node_id):
    return [sys.executable, "-m", "groupcoord.cli", "serve", "--store", dsn, "--node-id",
            str(node_id), "--port", "0", "--shards", str(SHARDS), "--lease-ms", "3000",
            "--topic", "t:3", "--loop", "asyncio"]


def _start(dsn, node_id, tmp_path, name=None):
    err = tmp_path / ("stderr-%s" % (name or node_id))
    p = subprocess.Popen(_argv(dsn, node_id), stdout=subprocess.PIPE, stderr=open(err, "w"),
                         text=True, env=_env())
    line = p.stdout.readline().rstrip("\n")
    m = LISTEN.match(line)
    assert m, "node %d: %r; stderr:\n%s" % (node_id, line, err.read_text())
    assert "postgresql://" in m.group(4)
    return p, int(m.group(2))


def _ask(port, *calls):
    async def go():
        c = await WireClient.connect("127.0.0.1", port)
        out = [await c.call(req, v) for req, v in calls]
        await c.close()
        return out
    return asyncio.run(asyncio.wait_for(go(), 20))


def _view(port):
    meta, fc = _ask(port, (M.MetadataRequest(topics=None), 12),
                    (M.FindCoordinatorRequest(coordinator_keys=GROUPS, key_type=0), 4))
    return meta, {c.key: (c.error_code, c.node_id, c.port) for c in fc.coordinators}


def test_two_nodes_form_one_cluster_and_send_groups_to_the_owner(pg_db, tmp_path):  # noqa: F811
    procs = []
    try:
        (p1, port1), (p2, port2) = _start(pg_db, 1, tmp_path), _start(pg_db, 2, tmp_path)
        procs = [p1, p2]
        ports = {1: port1, 2: port2}
        deadline = time.monotonic() + SETTLE_S
        while True:             # until both see both nodes and each group has an owner
            views = [_view(port1), _view(port2)]
            settled = all(len(meta.brokers) == 2 and all(e == 0 for e, _, _ in fc.values())
                          for meta, fc in views) and views[0][1] == views[1][1]
            owners = {n for _, n, _ in views[0][1].values()}
            if settled and owners == {1, 2} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for meta, fc in views:
            assert [(b.node_id, b.port) for b in meta.brokers] == [(1, port1), (2, port2)]
            assert meta.controller_id == 1
            assert all(p.leader_id == 1 for t in meta.topics for p in t.partitions)
            assert all(e == 0 and port == ports[n] for e, n, port in fc.values()), fc
        assert views[0][0].cluster_id == views[1][0].cluster_id
        assert owners == {1, 2}             # the shards are spread over both nodes
        # Groups of one shard have one coordinator.
        by_shard = {}
        for g, (_, n, _) in views[0][1].items():
            by_shard.setdefault(shard_for(g, SHARDS), set()).add(n)
        assert all(len(nodes) == 1 for nodes in by_shard.values())
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(30))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append("killed")
    assert codes == [0, 0]
    for n in (1, 2):
        err = (tmp_path / ("stderr-%d" % n)).read_text()
        assert "Traceback" not in err and " ERROR " not in err, err


@pytest.mark.parametrize("argv, says", [
    (("--node-id", "1", "--store", "{dsn}?sslmode=bogus"), "bad --store DSN"),
    (("--store", "{dsn}"), "--node-id is required"),
])
def test_store_startup_errors_are_one_line_and_exit_1(pg_db, tmp_path, argv, says):  # noqa: F811
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--port", "0",
                        *[a.format(dsn=pg_db) for a in argv]],
                       capture_output=True, text=True, env=_env(), timeout=60)
    errs = [x for x in r.stderr.splitlines() if x.startswith("groupcoord serve: error:")]
    assert r.returncode == 1 and r.stdout == "" and len(errs) == 1, r.stderr
    assert says in errs[0] and "Traceback" not in r.stderr


def _stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        return "killed"


def test_a_second_node_with_a_running_node_id_exits_2(pg_db, tmp_path):  # noqa: F811
    p1, port1 = _start(pg_db, 1, tmp_path)
    try:
        r = subprocess.run(_argv(pg_db, 1), capture_output=True, text=True, env=_env(),
                           timeout=60)
        errs = [x for x in r.stderr.splitlines() if x.startswith("groupcoord serve: error:")]
        assert r.returncode == 2 and r.stdout == "" and len(errs) == 1, r.stderr
        assert "node id 1 is in use by another running node at 127.0.0.1:%d" % port1 \
            in errs[0] and "last seen" in errs[0] and "Traceback" not in r.stderr, errs[0]
        # The running node is untouched: it still lists itself at its own port and
        # coordinates every group.
        meta, fc = _view(port1)
        assert [(b.node_id, b.port) for b in meta.brokers] == [(1, port1)]
        assert p1.poll() is None
    finally:
        code = _stop(p1)
    assert code == 0
    err = (tmp_path / "stderr-1").read_text()
    assert " ERROR " not in err and "Traceback" not in err, err


def test_a_killed_node_restarts_with_its_node_id(pg_db, tmp_path):  # noqa: F811
    p1, port1 = _start(pg_db, 1, tmp_path)
    p1.kill()
    p1.wait()
    # At once: the dead node's row is still fresh; the restart waits until it is older than
    # the lease (nobody heartbeats it), then takes the id and every shard.
    p2, port2 = _start(pg_db, 1, tmp_path, name="1-again")
    try:
        deadline = time.monotonic() + SETTLE_S
        while True:
            meta, fc = _view(port2)
            if all(v == (0, 1, port2) for v in fc.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(b.node_id, b.port) for b in meta.brokers] == [(1, port2)]
        assert all(v == (0, 1, port2) for v in fc.values()), fc
        err = (tmp_path / "stderr-1-again").read_text()
        assert "waiting until it is older than the lease" in err and "taking the id" in err
    finally:
        code = _stop(p2)
    assert code == 0
