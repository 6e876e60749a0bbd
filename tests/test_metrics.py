"""`serve --metrics-port` (server/metrics.py, server/http.py): /metrics scraped while a KIP-848
group and a classic group of real clients (confluent-kafka) form and rebalance, with the
gauges and counters checked exactly (groups by type and state, members, rebalances by reason,
requests by api and error); /healthz and /readyz (and readiness false while a shard is not
loaded, in process and in cluster mode); the rebalance reasons the runtime hook derives for
every trigger; and bad HTTP input (garbage, huge heads, slowloris, too many connections)
answered with an error or a close, never a hang or a crash."""
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.runtime import RuntimeConfig, ShardSet
from groupcoord.runtime.shard_state import ShardState
from groupcoord.server import main as S
from groupcoord.server.http import HttpResponse, HttpServer
from groupcoord.server.metrics import (API_NAMES, Metrics, item_error, readiness,
                                       rebalances_in, serve_http)
from pg_server import pg_db, pg_server  # noqa: F401 (fixtures)
from serve_proc import package_root, serve, wait_until  # noqa: F401 (fixture)

BOUND_S = 60.0          # bound on every wait for a group to settle (no timing is asserted)


# --------------------------------------------------------------------------- helpers
def scrape(url: str) -> dict:
    """/metrics parsed by prometheus-client's own parser -> {(sample name, labels): value}."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def series(samples: dict, name: str) -> dict:
    """{labels tuple: value} of one sample name, zeros left out."""
    return {k[1]: v for k, v in samples.items() if k[0] == name and v}


def get(url: str):
    """-> (status, body) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def metrics_url(srv) -> str:
    found = wait_until(lambda: re.search(r"metrics on http://([\d.]+):(\d+)/metrics",
                                         srv.stderr_text()), 20, what="the metrics log line")
    return "http://%s:%s" % found.groups()


# --------------------------------------------------------------------------- real clients
def _consumer(bootstrap, group, name, extra):
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group,
            "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50, "fetch.wait.max.ms": 100, "socket.timeout.ms": 20000}
    conf.update(extra)
    return Consumer(conf)


KIP848 = {"group.protocol": "consumer", "max.poll.interval.ms": 30000}
CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
           "max.poll.interval.ms": 30000, "partition.assignment.strategy": "range"}


def poll_until(consumers, pred, what):
    deadline = time.monotonic() + BOUND_S
    while True:
        for c in consumers:
            msg = c.poll(0.02)
            assert msg is None or msg.error() is None or msg.error().code() == -191, msg.error()
        if pred():
            return
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (BOUND_S, what))


@pytest.mark.e2e
def test_metrics_of_a_kip848_and_a_classic_group_forming_and_rebalancing(serve):  # noqa: F811
    pytest.importorskip("confluent_kafka")
    srv = serve(topics={"mt": 6}, shards=4, extra_args=["--metrics-port", "0"])
    url = metrics_url(srv)
    before = scrape(url)
    assert value(before, "groupcoord_shards_loaded") == 4
    assert value(before, "groupcoord_shards_owned") == 4
    assert value(before, "groupcoord_shard_load_seconds_count") == 4
    for t in ("classic", "consumer", "connect"):
        assert value(before, "groupcoord_group_members", type=t) == 0
        assert value(before, "groupcoord_groups", type=t, state="Stable") == 0
    assert not series(before, "groupcoord_rebalances_total")
    assert value(before, "process_resident_memory_bytes") > 0      # the process collector
    assert value(before, "process_cpu_seconds_total") > 0

    live = []

    def owned(cs):
        # every partition held exactly once among these consumers
        parts = sorted(tp.partition for c in cs for tp in c.assignment())
        return parts == list(range(6)) and all(c.assignment() for c in cs)

    def settled(kind_counts):
        """The node says so too: each group Stable with its member count."""
        s = scrape(url)
        return all(value(s, "groupcoord_groups", type=t, state="Stable") == 1
                   and value(s, "groupcoord_group_members", type=t) == n
                   for t, n in kind_counts.items())

    try:
        # One member of each group, then a second one: every group rebalances once per join.
        k1 = _consumer(srv.bootstrap, "mt-848", "k1", KIP848)
        c1 = _consumer(srv.bootstrap, "mt-classic", "c1", CLASSIC)
        for c in (k1, c1):
            c.subscribe(["mt"])
            live.append(c)
        poll_until(live, lambda: owned([k1]) and owned([c1])
                   and settled({"consumer": 1, "classic": 1}), "one member each, stable")
        s = scrape(url)
        assert series(s, "groupcoord_rebalances_total") == {
            (("reason", "join"), ("type", "classic")): 1,
            (("reason", "join"), ("type", "consumer")): 1}

        k2 = _consumer(srv.bootstrap, "mt-848", "k2", KIP848)
        c2 = _consumer(srv.bootstrap, "mt-classic", "c2", CLASSIC)
        for c in (k2, c2):
            c.subscribe(["mt"])
            live.append(c)
        poll_until(live, lambda: owned([k1, k2]) and owned([c1, c2])
                   and settled({"consumer": 2, "classic": 2}), "two members each, stable")
        s = scrape(url)
        assert series(s, "groupcoord_rebalances_total") == {
            (("reason", "join"), ("type", "classic")): 2,
            (("reason", "join"), ("type", "consumer")): 2}
        assert value(s, "groupcoord_groups", type="consumer", state="Stable") == 1
        assert value(s, "groupcoord_groups", type="classic", state="Stable") == 1
        assert sum(series(s, "groupcoord_groups").values()) == 2
        assert value(s, "groupcoord_group_members", type="consumer") == 2
        assert value(s, "groupcoord_group_members", type="classic") == 2
        assert value(s, "groupcoord_connections") >= 4

        # Each group loses a member (LeaveGroup / a leave heartbeat): one rebalance each.
        for c in (k2, c2):
            live.remove(c)
            c.close()
        poll_until(live, lambda: owned([k1]) and owned([c1])
                   and settled({"consumer": 1, "classic": 1}), "back to one member each")
        s = scrape(url)
        assert series(s, "groupcoord_rebalances_total") == {
            (("reason", "join"), ("type", "classic")): 2,
            (("reason", "join"), ("type", "consumer")): 2,
            (("reason", "leave"), ("type", "classic")): 1,
            (("reason", "leave"), ("type", "consumer")): 1}

        # Requests by api and error: what these clients must have sent, answered.
        req = series(s, "groupcoord_requests_total")
        by = {}
        for labels, n in req.items():
            d = dict(labels)
            by[(d["api"], d["error"])] = n
        assert by[("ConsumerGroupHeartbeat", "NONE")] >= 4     # 2 joins, 1 leave, steady ones
        assert by[("JoinGroup", "MEMBER_ID_REQUIRED")] == 2    # each classic member once (v4+)
        assert by[("JoinGroup", "NONE")] >= 3                  # c1; c1 again and c2; c1 again
        assert by[("SyncGroup", "NONE")] >= 3
        assert by[("LeaveGroup", "NONE")] == 1
        assert by[("Heartbeat", "NONE")] >= 1
        for api in ("ApiVersions", "Metadata", "FindCoordinator"):
            assert by[(api, "NONE")] >= 1
        assert all(api in API_NAMES.values() for api, _ in by)
        # The latency histogram counts the same requests, per api.
        for api in {a for a, _ in by}:
            assert value(s, "groupcoord_request_latency_seconds_count", api=api) == sum(
                n for (a, _), n in by.items() if a == api)
            assert value(s, "groupcoord_request_latency_seconds_bucket", api=api, le="+Inf") \
                == value(s, "groupcoord_request_latency_seconds_count", api=api)
        # Group commits happened (joins write records), each with at least one record.
        commits = value(s, "groupcoord_log_append_latency_seconds_count")
        assert commits >= 1
        assert value(s, "groupcoord_log_flush_records_count") == commits
        assert value(s, "groupcoord_log_flush_records_sum") >= commits
        assert value(s, "groupcoord_event_loop_lag_seconds_count") >= 1
    finally:
        for c in live:
            c.close()

    status, body = get(url + "/readyz")
    assert (status, body) == (200, b"ok\n")
    status, body = get(url + "/healthz.json")
    d = json.loads(body)
    assert status == 200 and d["healthy"] is True
    assert d["listeners"] == [{"protocol": "PLAINTEXT", "address": srv.bootstrap}]


# --------------------------------------------------------------------------- rebalance reasons
def _hb(member_id="", epoch=0, topics=None, group="g"):
    return m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30000,
        subscribed_topic_names=topics, topic_partitions=[] if epoch == 0 else None)


@pytest.mark.unit
def test_rebalance_reasons_from_the_runtime_hook(tmp_path):
    """Each trigger, through the real runtime (ShardSet, its hook before apply) with a clock
    of our own: joins, a subscription change, a leave, a session expiry, a catalog change; a
    classic group's join, a known member's rejoin, a leave; commits count nothing."""
    now = [1_000_000]
    cfg = ShardConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0)
    topics = TopicCatalog.of(a=4, b=2)
    shards = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=1, fsync="unsafe-no-fsync",
                                    shard_config=cfg), topics=topics, clock=lambda: now[0])
    metrics = Metrics(shards, process_collectors=False)
    metrics.watch_shards()
    recount = Metrics(shards, process_collectors=False)     # not watching: counts afresh

    def same_gauges():
        # the kept-between-scrapes group counts equal a count from scratch
        got = _group_gauges(metrics)
        assert got == _group_gauges(recount)
        return got

    async def go():
        await shards.start()
        ask = shards.submit
        assert same_gauges()[("groupcoord_group_members", (("type", "consumer"),))] == 0
        # Session expiry: a lone member stops; the clock passes its deadline, the timer fires.
        await ask(_hb(topics=["a"], group="lone"), 0)
        assert metrics.rebalances == {("consumer", "join"): 1}
        now[0] += 10 * 60_000
        shards.shards[0]._on_timer()
        assert metrics.rebalances == {("consumer", "join"): 1,
                                      ("consumer", "session_timeout"): 1}
        same_gauges()
        metrics.rebalances.clear()
        r1 = await ask(_hb(topics=["a"]), 0)
        r2 = await ask(_hb(topics=["a"]), 0)
        assert metrics.rebalances == {("consumer", "join"): 2}
        assert same_gauges()[("groupcoord_group_members", (("type", "consumer"),))] == 2
        await ask(_hb(r1.member_id, r1.member_epoch, topics=["a", "b"]), 0)
        assert metrics.rebalances[("consumer", "subscription_change")] == 1
        await ask(_hb(r2.member_id, -1), 0)
        assert metrics.rebalances[("consumer", "leave")] == 1
        assert same_gauges()[("groupcoord_group_members", (("type", "consumer"),))] == 1
        # Catalog change: topic a grows; the group subscribed to it gets a new epoch.
        await shards.set_topics(TopicCatalog.of(a=6, b=2))
        assert metrics.rebalances[("consumer", "metadata_change")] == 1
        same_gauges()

        # classic: JoinGroup v5 (MEMBER_ID_REQUIRED first), then the known member rejoins.
        def join(mid="", protocols=(("range", b"x"),)):
            return m.JoinGroupRequest(
                group_id="cg", session_timeout_ms=30000, rebalance_timeout_ms=30000,
                member_id=mid, protocol_type="consumer",
                protocols=[m.JoinGroupRequestProtocol(name=n, metadata=md)
                           for n, md in protocols])
        first = await ask(join(), 5)
        assert first.error_code == 79                  # MEMBER_ID_REQUIRED: no rebalance yet
        assert ("classic", "join") not in metrics.rebalances
        joined = await ask(join(first.member_id), 5)
        assert joined.error_code == 0 and metrics.rebalances[("classic", "join")] == 1
        g = same_gauges()
        assert g[("groupcoord_group_members", (("type", "classic"),))] == 1
        assert g[("groupcoord_groups", (("state", "CompletingRebalance"), ("type", "classic")))] \
            == 1
        await ask(m.SyncGroupRequest(group_id="cg", generation_id=joined.generation_id,
                                     member_id=joined.member_id, assignments=[]), 3)
        await ask(join(joined.member_id, (("range", b"changed"),)), 5)
        assert metrics.rebalances[("classic", "subscription_change")] == 1
        await ask(m.LeaveGroupRequest(group_id="cg", member_id=joined.member_id), 1)
        assert metrics.rebalances[("classic", "leave")] == 1
        assert same_gauges()[("groupcoord_group_members", (("type", "classic"),))] == 0
        before = dict(metrics.rebalances)
        await ask(m.OffsetCommitRequest(group_id="cg", generation_id_or_member_epoch=-1,
                                        topics=[m.OffsetCommitRequestTopic(
                                            name="a", partitions=[m.OffsetCommitRequestPartition(
                                                partition_index=0, committed_offset=5)])]), 2)
        assert metrics.rebalances == before
        same_gauges()
        await ask(m.DeleteGroupsRequest(groups_names=["cg", "lone"]), 2)
        g = same_gauges()
        assert sum(v for k, v in g.items() if k[0] == "groupcoord_groups") == 1   # "g" is left
        # group commits and the shard's load went through the other hooks
        assert metrics.append.counts and sum(metrics.append.counts) >= 1
        assert sum(metrics.flush_records.counts) == sum(metrics.append.counts)
        assert sum(metrics.shard_load.counts) == 1
        await shards.close()
    asyncio.run(go())


@pytest.mark.unit
def test_group_counts_in_slices_stay_exact_while_groups_change(tmp_path):
    """/metrics counts groups in slices, giving the loop back in between: groups that join,
    leave or appear meanwhile are noted by the hook and counted at the next pass, so the
    gauges always end equal to a count from scratch."""
    cfg = ShardConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0)
    shards = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=3, fsync="unsafe-no-fsync",
                                    shard_config=cfg), topics=TopicCatalog.of(a=4))
    metrics = Metrics(shards, process_collectors=False)
    metrics.watch_shards()
    recount = Metrics(shards, process_collectors=False)

    async def go():
        await shards.start()
        first = [await shards.submit(_hb(topics=["a"], group="s%02d" % i), 0)
                 for i in range(30)]
        await metrics.count_groups_async(chunk=4)
        assert _group_gauges(metrics) == _group_gauges(recount)
        metrics._group_cache.clear()                 # everything to count again, in slices

        async def churn():
            for i in range(30, 40):                  # new groups while the count runs
                await shards.submit(_hb(topics=["a"], group="s%02d" % i), 0)
            for i, r in enumerate(first[:10]):       # members leaving theirs
                await shards.submit(_hb(r.member_id, -1, group="s%02d" % i), 0)
        counting = asyncio.ensure_future(metrics.count_groups_async(chunk=2))
        await churn()
        await counting
        got = _group_gauges(metrics)
        assert got == _group_gauges(recount)
        assert got[("groupcoord_group_members", (("type", "consumer"),))] == 30
        assert got[("groupcoord_groups", (("state", "Empty"), ("type", "consumer")))] == 10
        assert b"groupcoord_groups" in await metrics.exposition_async()
        await shards.close()
    asyncio.run(go())


def _group_gauges(metrics) -> dict:
    out = {}
    for fam in text_string_to_metric_families(metrics.exposition().decode()):
        for s in fam.samples:
            if s.name in ("groupcoord_groups", "groupcoord_group_members"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.unit
def test_rebalances_in_counts_each_group_once_per_result():
    from groupcoord.groups.classic.events import RebalanceStarted
    from groupcoord.groups.records import Record
    recs = [Record(m.ConsumerGroupMetadataKey("a"), m.ConsumerGroupMetadataValue(epoch=3)),
            Record(m.ConsumerGroupMemberMetadataKey("a", "m"), None),
            Record(m.ConsumerGroupMetadataKey("gone"), None),             # a deletion
            Record(m.ConnectWorkerGroupMetadataKey(group_id="k"),
                   m.ConnectWorkerGroupMetadataValue(epoch=2)),
            RebalanceStarted("c", 10, -1, 0),
            Record(m.ConsumerGroupMetadataKey("a"), m.ConsumerGroupMetadataValue(epoch=4))]
    assert rebalances_in(recs) == {"a": "consumer", "k": "connect", "c": "classic"}


@pytest.mark.unit
def test_item_errors_and_api_names():
    ok = m.OffsetCommitResponse(topics=[m.OffsetCommitResponseTopic(
        name="t", partitions=[m.OffsetCommitResponsePartition(partition_index=i)
                              for i in range(3)])])
    assert item_error(ok) == 0
    ok.topics[0].partitions[2].error_code = 22          # ILLEGAL_GENERATION
    assert item_error(ok) == 22
    assert item_error(m.DescribeGroupsResponse(groups=[
        m.DescribeGroupsResponseDescribedGroup(group_id="x", error_code=69)])) == 69
    assert API_NAMES[12] == "Heartbeat" and API_NAMES[68] == "ConsumerGroupHeartbeat"


# --------------------------------------------------------------------------- readiness
@pytest.mark.unit
def test_readiness_function():
    A, L, U, F = ShardState.ACTIVE, ShardState.LOADING, ShardState.UNLOADED, ShardState.FAILED
    assert readiness({0: A, 1: A}, range(2)) == {"ready": True, "owned": 2, "loaded": 2,
                                                 "not_loaded": {}}
    r = readiness({0: A, 1: L, 2: F}, range(3))
    assert r["ready"] is False and r["not_loaded"] == {"1": "loading", "2": "failed"}
    assert r["loaded"] == 1 and "2 owned shard(s) not loaded" in r["reason"]
    # only the owned ones matter (another node's shards are unloaded here)
    assert readiness({0: A, 1: U, 2: A}, [0, 2])["ready"] is True
    assert readiness({0: A}, [])["ready"] is True       # a node that owns nothing yet
    r = readiness({0: A}, None)                         # cluster mode before joining
    assert r["ready"] is False and "cluster" in r["reason"]


@pytest.mark.integration
def test_readyz_is_503_until_every_owned_shard_is_loaded(tmp_path):
    shards = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=3,
                                    fsync="unsafe-no-fsync"), topics=TopicCatalog())
    metrics = Metrics(shards, owned=lambda: range(3), process_collectors=False)
    metrics.watch_shards()

    async def fetch(http, path):
        r, w = await asyncio.open_connection(*http.address)
        w.write(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        data = await r.read()
        w.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    async def go():
        await shards.start([0, 1])                 # shard 2 stays unloaded
        http = await serve_http(metrics, "127.0.0.1", 0)
        try:
            status, body = await fetch(http, "/readyz")
            assert status == 503 and body.startswith(b"not ready: 1 owned shard(s)")
            status, body = await fetch(http, "/readyz?format=json")
            d = json.loads(body)
            assert status == 503 and d["not_loaded"] == {"2": "unloaded"} and d["loaded"] == 2
            status, body = await fetch(http, "/healthz")  # no server attached: not listening
            assert status == 503
            await shards.load_shard(2)
            status, body = await fetch(http, "/readyz.json")
            assert status == 200 and json.loads(body)["ready"] is True
            status, body = await fetch(http, "/metrics")
            assert status == 200 and b"groupcoord_shards_loaded 3.0" in body
        finally:
            await http.close()
            metrics.stop()
            await shards.close()
    asyncio.run(go())


@pytest.mark.integration
def test_cluster_node_is_ready_once_it_holds_and_loaded_its_shards(pg_db, tmp_path):  # noqa: F811
    port = _free_port()
    err = tmp_path / "stderr"
    p = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "serve", "--store", pg_db,
                          "--node-id", "1", "--port", "0", "--shards", "4", "--lease-ms",
                          "3000", "--topic", "t:3", "--loop", "asyncio",
                          "--metrics-port", str(port)],
                         stdout=subprocess.PIPE, stderr=open(err, "w"), text=True,
                         env={**os.environ, "PYTHONPATH": package_root()})
    try:
        line = p.stdout.readline()
        assert "listening on" in line, err.read_text()
        url = "http://127.0.0.1:%d" % port

        def ready():
            # Ready means every shard it owns is loaded: owning none yet (just joined) too;
            # alone in the cluster it soon holds all four.
            status, body = get(url + "/readyz.json")
            d = json.loads(body)
            assert (status == 200) == d["ready"]
            return d["owned"] == 4 and d["ready"] and d
        d = wait_until(ready, BOUND_S, 0.1, "the node to own and load its shards")
        assert d == {"ready": True, "owned": 4, "loaded": 4, "not_loaded": {}}
        s = scrape(url)
        assert value(s, "groupcoord_shards_owned") == 4
        assert value(s, "groupcoord_shards_loaded") == 4
        p.terminate()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------- flags
def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.unit
def test_metrics_port_out_of_range_is_a_usage_error(capsys):
    import argparse
    p = argparse.ArgumentParser()
    S.add_serve_parser(p.add_subparsers(dest="command"))
    assert S.run(p.parse_args(["serve", "--metrics-port", "70000"])) == 2
    assert "--metrics-port must be 0..65535" in capsys.readouterr().err


@pytest.mark.integration
def test_metrics_port_in_use_is_a_startup_error(serve):  # noqa: F811
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with pytest.raises(Exception) as e:
            serve(extra_args=["--metrics-port", str(busy.getsockname()[1])])
        assert "cannot listen on the metrics port" in str(e.value)
        assert "exited (rc=1)" in str(e.value)
    finally:
        busy.close()


# --------------------------------------------------------------------------- HTTP input
class _Http:
    """An HttpServer on a free port with a few routes (an async context manager)."""

    def __init__(self, **kw):
        self.kw = kw

    async def __aenter__(self):
        self.http = HttpServer("127.0.0.1", 0, **self.kw)
        self.http.route("/hello", lambda req: HttpResponse.text(200, "hello %s\n"
                                                                % req.arg("who", "you")))

        async def later(req):
            await asyncio.sleep(0)
            return HttpResponse(200, b"<p>" + req.path.encode() + b"</p>", "text/html")
        self.http.route("/groups/", later, prefix=True)

        def boom(req):
            raise RuntimeError("a bug")
        self.http.route("/boom", boom)
        await self.http.start()
        return self.http

    async def __aexit__(self, *exc):
        await self.http.close()


async def _exchange(address, data: bytes, pause: float = 0.0, eof: bool = True) -> bytes:
    """Send data (byte by byte with a pause between, if given) while reading to EOF (bounded);
    eof: half-close once everything is sent."""
    r, w = await asyncio.open_connection(*address)
    reading = asyncio.ensure_future(asyncio.wait_for(r.read(), 20))
    try:
        try:
            for i in range(len(data)) if pause else ():
                if reading.done():
                    break                       # answered (and closed) before the end
                w.write(data[i:i + 1])
                await asyncio.sleep(pause)
            if not pause:
                w.write(data)
            if eof and not reading.done():
                w.write_eof()
        except ConnectionError:
            pass
        try:
            return await reading
        except ConnectionResetError:
            return b""                          # closed at once (a reset): nothing said
    finally:
        w.close()


def _status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.1 ") else -1


@pytest.mark.integration
def test_http_serves_routes_and_refuses_bad_input():
    async def go():
        async with _Http(head_timeout_s=0.5) as http:
            a = http.address
            ok = await _exchange(a, b"GET /hello?who=ops HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _status(ok) == 200 and ok.endswith(b"\r\n\r\nhello ops\n")
            assert b"Connection: close" in ok and b"Content-Length: 10" in ok
            head = await _exchange(a, b"HEAD /hello HTTP/1.1\r\n\r\n")
            assert _status(head) == 200 and head.endswith(b"\r\n\r\n")
            assert b"Content-Length: 10" in head
            bare_lf = await _exchange(a, b"GET /groups/g%201 HTTP/1.0\nHost: x\n\n")
            assert _status(bare_lf) == 200 and bare_lf.endswith(b"<p>/groups/g 1</p>")
            assert _status(await _exchange(a, b"GET /nope HTTP/1.1\r\n\r\n")) == 404
            assert _status(await _exchange(a, b"GET /boom HTTP/1.1\r\n\r\n")) == 500
            post = await _exchange(a, b"POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            assert _status(post) == 405 and b"Allow: GET, HEAD" in post
            assert _status(await _exchange(a, b"GET /hello HTTP/2.0\r\n\r\n")) == 505
            for garbage in (b"\x00\x01\x02garbage\r\n\r\n", b"GET\r\n\r\n",
                            b"GET http://x/hello HTTP/1.1\r\n\r\n",
                            b"GET /hello HTTP/1.1\r\nno colon here\r\n\r\n",
                            b"GET /h\xffllo HTTP/1.1\r\n\r\n",
                            b"GET /hello HTTP/1.1\r\nBad Name: x\r\n\r\n"):
                assert _status(await _exchange(a, garbage)) == 400, garbage
            huge = b"GET /hello HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
            assert _status(await _exchange(a, huge)) == 431
            many = b"GET /hello HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
            assert _status(await _exchange(a, many)) == 431
            # Slowloris: the head trickles in past the bound -> 408 and closed.
            slow = await _exchange(a, b"GET /hello HTTP/1.1\r\nX-Slow: " + b"z" * 200, 0.02)
            assert _status(slow) == 408
            # ... or stops sending: the same.
            assert _status(await _exchange(a, b"GET /hello HTTP/1.1\r\n", eof=False)) == 408
            # A client that says nothing, or half a request, then leaves: nothing to answer.
            assert await _exchange(a, b"") == b""
            assert await _exchange(a, b"GET /hel") == b""
            # ... and the server still serves.
            assert _status(await _exchange(a, b"GET /hello HTTP/1.1\r\n\r\n")) == 200
    asyncio.run(go())


@pytest.mark.integration
def test_http_connection_cap_closes_the_extra_ones_and_recovers():
    async def go():
        async with _Http(max_connections=4, head_timeout_s=30) as http:
            idle = [await asyncio.open_connection(*http.address) for _ in range(4)]
            await asyncio.sleep(0.05)
            # over the cap: closed at once, with nothing said
            extra = await _exchange(http.address, b"GET /hello HTTP/1.1\r\n\r\n")
            assert extra == b""
            assert http.refused >= 1
            for _, w in idle:
                w.close()
            deadline = time.monotonic() + BOUND_S
            while True:
                resp = await _exchange(http.address, b"GET /hello HTTP/1.1\r\n\r\n")
                if _status(resp) == 200:
                    break
                assert time.monotonic() < deadline, "the cap never freed up"
                await asyncio.sleep(0.05)
    asyncio.run(go())


@pytest.mark.integration
def test_http_client_that_does_not_read_is_dropped():
    """A big answer to a client that never reads: the write bound drops the connection and
    the server goes on."""
    async def go():
        http = HttpServer("127.0.0.1", 0, write_timeout_s=0.5)
        http.route("/big", lambda req: HttpResponse(200, b"x" * (64 << 20)))
        http.route("/hello", lambda req: HttpResponse.text(200, "hi\n"))
        await http.start()
        try:
            s = socket.create_connection(http.address)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /big HTTP/1.1\r\n\r\n")
            deadline = time.monotonic() + BOUND_S
            while http._tasks:                     # the connection's task ends
                assert time.monotonic() < deadline, "a non-reading client held the server"
                await asyncio.sleep(0.05)
            s.close()
            assert _status(await _exchange(http.address, b"GET /hello HTTP/1.1\r\n\r\n")) == 200
        finally:
            await http.close()
    asyncio.run(go())
