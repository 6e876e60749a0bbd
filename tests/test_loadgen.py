"""The load generator (benchmarks/loadgen.py) still works against a real `groupcoord serve`:
a few dozen consumer members, connect workers and classic members form their groups over the
wire and converge, every unit owned exactly once. CI's guard for the server benchmark."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

import groupcoord

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
import loadgen as L  # noqa: E402

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))


@pytest.fixture
def server(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--topic", "orders:30", "--topic", "events:18",
         "--shards", "4", "--fsync", "unsafe-no-fsync", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = p.stdout.readline()
        if "listening on" not in line:
            p.kill()
            pytest.fail("server did not start: %r %s" % (line, p.stderr.read()[-2000:]))
        host, _, port = line.split("listening on ", 1)[1].split()[0].rpartition(":")
        yield host, int(port)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _owned_once(g) -> None:
    """Every unit of the group owned by exactly one member."""
    seen = []
    for x in g.members:
        if g.kind == "connect":
            seen += [(c, -1) for c in x.owned.connectors]
            seen += [(t.connector, i) for t in x.owned.tasks for i in t.task_ids]
        else:
            seen += [(t, p) for t, ps in x.owned.items() for p in ps]
    assert len(seen) == len(set(seen)) == g.units(), (g.group, len(seen), g.units())


def test_loadgen_groups_converge_against_serve(server):
    host, port = server

    async def run():
        lg = L.LoadGen(host, port, connections=3, window=16)
        await lg.connect()
        assert lg.partitions == {"orders": 30, "events": 18}
        groups = [
            lg.consumer_group("lg-consumer", 24, ["orders", "events"], version=1),
            lg.consumer_group("lg-consumer-v0", 6, ["events"], version=0),
            lg.connect_group("lg-connect", 12, 5, 3),
            lg.classic_group("lg-classic", 12, ["orders"], heartbeat_ms=500),
        ]
        await lg.start(lg.all_members())
        await lg.wait_converged(groups, timeout=15)
        for g in groups:
            _owned_once(g)
            state = (await g.server_stable(lg.conns[0]))[0]
            assert state == "Stable", (g.group, state)
        # v0: the coordinator generated the member ids
        assert all(x.member_id for x in groups[1].members)
        # the chosen worker computed at least once over the wire
        assert groups[2].computes >= 1
        # a short flood: every heartbeat answered without error, nobody fenced
        r = await lg.measure(0.5, 0, warmup=0.1)
        assert r["heartbeats"] > 0 and r["fenced"] == 0 and not r["errors"], r
        assert all(g.converged() for g in groups)
        await lg.close()

    loop = L.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(run(), 30))
    finally:
        loop.close()
