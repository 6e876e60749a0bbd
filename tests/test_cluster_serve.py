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


def _start(dsn, node_id, tmp_path):
    p = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--store", dsn, "--node-id",
         str(node_id), "--port", "0", "--shards", str(SHARDS), "--lease-ms", "3000",
         "--topic", "t:3", "--catalog-dir", str(tmp_path / ("catalog-%d" % node_id)),
         "--loop", "asyncio"],
        stdout=subprocess.PIPE, stderr=open(tmp_path / ("stderr-%d" % node_id), "w"),
        text=True, env=_env())
    line = p.stdout.readline().rstrip("\n")
    m = LISTEN.match(line)
    assert m, "node %d: %r; stderr:\n%s" % (node_id, line, (tmp_path / (
        "stderr-%d" % node_id)).read_text())
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
                        "--catalog-dir", str(tmp_path / "cat"),
                        *[a.format(dsn=pg_db) for a in argv]],
                       capture_output=True, text=True, env=_env(), timeout=60)
    errs = [x for x in r.stderr.splitlines() if x.startswith("groupcoord serve: error:")]
    assert r.returncode == 1 and r.stdout == "" and len(errs) == 1, r.stderr
    assert says in errs[0] and "Traceback" not in r.stderr
