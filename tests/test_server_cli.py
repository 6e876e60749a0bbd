"""`groupcoord serve` as a subprocess: the listening line, SIGTERM -> graceful exit 0, the
topic catalog persisted across restarts, clear startup errors."""
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

import groupcoord
import groupcoord.protocol as P
from server_client import WireClient

M = P.messages
LISTEN = re.compile(r"^groupcoord: listening on (\S+):(\d+) \((\d+) shards loaded from (.*)\)$")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Serve:
    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "groupcoord.cli", "serve", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
            start_new_session=True)

    def listening(self, timeout=60):
        import select
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert r, "no listening line within %ss" % timeout
        line = self.proc.stdout.readline().rstrip("\n")
        m = LISTEN.match(line)
        assert m, "unexpected first stdout line %r; stderr:\n%s" % (line, self.stop()[1])
        return m

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err, out


def _ask(host, port, *calls):
    async def go():
        c = await WireClient.connect(host, int(port))
        out = [await c.call(req, v) for req, v in calls]
        await c.close()
        return out
    return asyncio.run(asyncio.wait_for(go(), 20))


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_serve_prints_listening_line_and_exits_0_on_sigterm(tmp_path, loop):
    data = str(tmp_path / "data")
    s = Serve("--port", "0", "--data-dir", data, "--shards", "3", "--topic", "orders:3",
              "--fsync", "unsafe-no-fsync", "--loop", loop)
    try:
        m = s.listening()
        host, port, shards, d = m.groups()
        assert host == "127.0.0.1" and int(port) > 0 and shards == "3" and d == data
        (meta,) = _ask(host, port, (M.MetadataRequest(topics=None), 12))
        assert [(t.name, len(t.partitions)) for t in meta.topics] == [("orders", 3)]
        assert meta.brokers[0].port == int(port)
    finally:
        rc, err, out = s.stop()
    assert rc == 0, err
    assert out == ""                       # exactly one stdout line (read above)
    assert "shutting down" in err and "server stopped" in err


def test_created_topics_and_cluster_id_survive_a_restart(tmp_path):
    data = str(tmp_path / "data")
    args = ("--port", "0", "--data-dir", data, "--shards", "2", "--fsync", "unsafe-no-fsync",
            "--advertised-host", "coord.example", "--allow-create-topics")
    s = Serve(*args)
    try:
        host, port = s.listening().groups()[:2]
        ct, meta = _ask(host, port, (M.CreateTopicsRequest(topics=[
            M.CreateTopicsRequestCreatableTopic(name="made", num_partitions=5,
                                                replication_factor=-1)]), 7),
            (M.MetadataRequest(topics=None), 12))
        assert ct.topics[0].error_code == 0
        assert meta.brokers[0].host == "coord.example"
        cid = meta.cluster_id
    finally:
        assert s.stop()[0] == 0
    s = Serve(*args, "--topic", "made:6")           # and grow it from the command line
    try:
        host, port = s.listening().groups()[:2]
        (meta,) = _ask(host, port, (M.MetadataRequest(topics=None), 12))
        assert [(t.name, len(t.partitions)) for t in meta.topics] == [("made", 6)]
        assert meta.cluster_id == cid
    finally:
        assert s.stop()[0] == 0


def test_startup_errors_are_one_clear_line(tmp_path):
    data = str(tmp_path / "data")
    s = Serve("--port", "0", "--data-dir", data, "--shards", "1", "--topic", "t:4")
    s.listening()
    assert s.stop()[0] == 0
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--port", "0",
                        "--data-dir", data, "--shards", "1", "--topic", "t:2"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert "partitions cannot be removed" in r.stderr
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--topic", "bad"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 2 and "NAME:PARTITIONS" in r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--port",
                            str(port), "--data-dir", data, "--shards", "1"],
                           capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 1 and "cannot listen" in r.stderr


def test_serve_help_explains_each_option():
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--help"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 0
    for opt in ("--host", "--port", "--advertised-host", "--data-dir", "--topic ",
                "--topics-file", "--shards", "--max-frame-bytes", "--max-connections",
                "--connections-max-idle-ms", "--fsync", "--group-config", "--loop",
                "--log-level"):
        assert opt in r.stdout, opt


def test_group_config_takes_kafka_setting_names():
    from groupcoord.server.catalog import CatalogError
    from groupcoord.server.main import parse_group_config
    cfg = parse_group_config(["group.initial.rebalance.delay.ms=0",
                              "group.consumer.heartbeat.interval.ms = 750",
                              "group.consumer.assignors=range,uniform",
                              "connect_session_timeout_ms=9000"])
    assert cfg.group_initial_rebalance_delay_ms == 0
    assert cfg.consumer_heartbeat_interval_ms == 750
    assert cfg.consumer_assignors == ("range", "uniform")
    assert cfg.connect_session_timeout_ms == 9000
    assert cfg.group_max_session_timeout_ms == 1_800_000          # untouched default
    with pytest.raises(CatalogError, match="NAME=VALUE"):
        parse_group_config(["group.no.such.setting=1"])
    with pytest.raises(CatalogError, match="not an integer"):
        parse_group_config(["group.max.size=lots"])
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--group-config",
                        "nonsense"], capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 2 and "--group-config" in r.stderr
