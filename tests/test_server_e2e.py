"""The server over real sockets on 127.0.0.1, with the real runtime ShardSet, on uvloop and
on the stock asyncio loop: ordering under pipelining, coalescing, the node APIs on the wire,
held Fetch, CreateTopics persistence, connection limit, idle reaping, graceful shutdown."""
import asyncio
import logging
import time

import pytest

import groupcoord.protocol as P
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import topic_id_for
from groupcoord.server import topic_admin as T
from groupcoord.server.catalog import CatalogStore
from server_client import WireClient
from waiting import until
from server_fixtures import (LOOPS, WriteCounter, join_request, make_shards, run_on,
                             serving)

M = P.messages


@pytest.fixture(params=LOOPS)
def loop_kind(request):
    return request.param


def fetch_req(topic="orders", wait=400, parts=(0,)):
    return M.FetchRequest(max_wait_ms=wait, min_bytes=1, topics=[M.FetchRequestFetchTopic(
        topic=topic, partitions=[M.FetchRequestFetchPartition(partition=p) for p in parts])])


# ---------------------------------------------------------------------- ordering
def test_held_join_holds_later_responses_of_its_connection_only(loop_kind, tmp_path):
    delay_ms = 700
    shards = make_shards("real", tmp_path, shard_config=ShardConfig(
        group_initial_rebalance_delay_ms=delay_ms))

    async def go():
        async with serving(shards) as srv:
            a = await WireClient.connect(*srv.address)
            b = await WireClient.connect(*srv.address)
            first = await a.call(join_request(), 5)
            assert first.error_code == 79          # MEMBER_ID_REQUIRED
            mid = first.member_id
            t0 = time.monotonic()
            cj = a.send(join_request(member_id=mid), 5)      # parked at the join barrier
            ch = a.send(M.HeartbeatRequest(group_id="g", generation_id=0, member_id=mid), 4)
            cm = a.send(M.MetadataRequest(topics=None), 12)
            # another connection is served while the join is held
            meta = await b.call(M.MetadataRequest(topics=None), 12, timeout=2)
            assert time.monotonic() - t0 < delay_ms / 1000.0
            assert [t.name for t in meta.topics] == ["orders", "payments"]
            got = [await a.recv() for _ in range(3)]
            elapsed = time.monotonic() - t0
            assert [c for c, _ in got] == [cj, ch, cm]
            join, hb, _ = (body for _, body in got)
            assert join.error_code == 0 and join.member_id == mid and join.leader == mid
            assert isinstance(hb, M.HeartbeatResponse)
            assert elapsed >= delay_ms / 1000.0 * 0.9
            await a.close()
            await b.close()
    run_on(loop_kind, go)


def test_pipelined_responses_are_coalesced_into_fewer_writes(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            await c.call(M.ApiVersionsRequest(), 3)
            (conn,) = srv.connections
            counter = conn.transport = WriteCounter(conn.transport)
            # 20 node-API requests in one TCP write: one response write
            corrs = c.send_many([(M.MetadataRequest(topics=None), 12)] * 10
                                + [(M.FindCoordinatorRequest(coordinator_keys=["g"]), 4)] * 10)
            got = [await c.recv() for _ in corrs]
            assert [g[0] for g in got] == corrs
            assert counter.writes == 1
            # 20 group requests (tasks): ordered, in fewer writes than responses
            counter.writes = 0
            corrs = c.send_many([(M.HeartbeatRequest(group_id="g%d" % i, generation_id=1,
                                                     member_id="m"), 4) for i in range(20)])
            got = [await c.recv() for _ in corrs]
            assert [g[0] for g in got] == corrs
            assert all(b.error_code == 25 for _, b in got)      # UNKNOWN_MEMBER_ID
            assert counter.writes < 20
            await c.close()
    run_on(loop_kind, go)


# ---------------------------------------------------------------------- node APIs
def test_api_versions_header_v0_and_unsupported_version(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            for v in (0, 3, 4):
                corr = c.send(M.ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"), v)
                raw = await c.recv_frame()
                c.pending.pop(corr)
                # header v0: the correlation id is followed directly by the error code
                assert raw[:4] == corr.to_bytes(4, "big") and raw[4:6] == b"\0\0"
                body = P.decode(M.ApiVersionsResponse, raw[4:], v)
                keys = {k.api_key for k in body.api_keys}
                assert {0, 1, 2, 3, 10, 11, 12, 13, 14, 18, 19, 68, 10000} <= keys
            # a version from the future: v0 body, error 35, our ranges; connection stays open
            from server_fixtures import raw_frame
            c.send_raw(raw_frame(18, 9, 77))
            raw = await c.recv_frame()
            corr, body = P.decode_response_frame(raw, 18, 0)
            assert corr == 77 and body.error_code == 35
            assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in body.api_keys}
            assert (await c.call(M.ApiVersionsRequest(), 0)).error_code == 0
            await c.close()
    run_on(loop_kind, go)


def test_metadata_find_coordinator_list_offsets_produce_on_the_wire(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            host, port = srv.address
            c = await WireClient.connect(host, port)
            tid = topic_id_for("orders")
            meta = await c.call(M.MetadataRequest(topics=[
                M.MetadataRequestTopic(name="orders"), M.MetadataRequestTopic(name="ghost"),
                M.MetadataRequestTopic(topic_id=tid, name=None),
                M.MetadataRequestTopic(topic_id=b"\x05" * 16, name=None)]), 12)
            assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [(0, host, port)]
            assert [(t.name, t.error_code) for t in meta.topics] == [
                ("orders", 0), ("ghost", 3), ("orders", 0), (None, 100)]
            assert meta.topics[0].topic_id == tid and len(meta.topics[2].partitions) == 3
            assert meta.cluster_id and meta.controller_id == 0
            fc = await c.call(M.FindCoordinatorRequest(coordinator_keys=["a", "b"]), 6)
            assert [(x.key, x.node_id, x.port, x.error_code) for x in fc.coordinators] == [
                ("a", 0, port, 0), ("b", 0, port, 0)]
            fc0 = await c.call(M.FindCoordinatorRequest(key="a"), 0)
            assert (fc0.error_code, fc0.node_id, fc0.host, fc0.port) == (0, 0, host, port)
            lo = await c.call(M.ListOffsetsRequest(topics=[M.ListOffsetsRequestListOffsetsTopic(
                name="orders", partitions=[M.ListOffsetsRequestListOffsetsPartition(
                    partition_index=1, timestamp=-1)])]), 7)
            assert lo.topics[0].partitions[0].offset == 0
            pr = await c.call(M.ProduceRequest(acks=1, topic_data=[
                M.ProduceRequestTopicProduceData(name="orders", partition_data=[
                    M.ProduceRequestPartitionProduceData(index=0, records=b"")])]), 9)
            p0 = pr.responses[0].partition_responses[0]
            assert p0.error_code == 42 and "stores no messages" in p0.error_message
            # acks=0: no response; the next request's response comes next
            c.writer.write(P.encode_request_frame(M.ProduceRequest(acks=0), 9, 999))
            assert (await c.call(M.ApiVersionsRequest(), 3)).error_code == 0
            await c.close()
    run_on(loop_kind, go)


def test_fetch_is_held_for_max_wait_while_other_connections_are_served(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            a = await WireClient.connect(*srv.address)
            b = await WireClient.connect(*srv.address)
            t0 = time.monotonic()
            cf = a.send(fetch_req(wait=800), 12)
            cv = a.send(M.ApiVersionsRequest(), 3)          # queued behind the fetch
            for _ in range(3):
                assert (await b.call(M.MetadataRequest(topics=None), 12, timeout=1)).topics
            assert time.monotonic() - t0 < 0.7
            corr, fetch = await a.recv()
            waited = time.monotonic() - t0
            assert corr == cf and 0.75 <= waited < 4
            p = fetch.responses[0].partitions[0]
            assert p.error_code == 0 and p.records == b""
            assert (await a.recv())[0] == cv
            # unknown topic: answered at once; by topic id (v13+) too
            t0 = time.monotonic()
            bad = await a.call(fetch_req("ghost", wait=5000), 12)
            assert bad.responses[0].partitions[0].error_code == 3
            by_id = M.FetchRequest(max_wait_ms=5000, min_bytes=1, topics=[
                M.FetchRequestFetchTopic(topic_id=b"\x09" * 16,
                                         partitions=[M.FetchRequestFetchPartition(partition=0)])])
            bad = await a.call(by_id, 16)
            assert bad.responses[0].partitions[0].error_code == 100
            assert time.monotonic() - t0 < 1.0
            await a.close()
            await b.close()
    run_on(loop_kind, go)


def test_create_topics_then_metadata_and_it_survives_a_restart(loop_kind, tmp_path):
    async def go():
        store = CatalogStore(str(tmp_path))
        shards = make_shards("real", tmp_path, topics=store.load())
        async with serving(shards, store=store, data_dir=str(tmp_path),
                           catalog_limits=T.CatalogLimits(allow_create_topics=True)) as srv:
            c = await WireClient.connect(*srv.address)
            req = M.CreateTopicsRequest(topics=[
                M.CreateTopicsRequestCreatableTopic(name="fresh", num_partitions=4,
                                                    replication_factor=1),
                M.CreateTopicsRequestCreatableTopic(name="fresh2", num_partitions=0,
                                                    replication_factor=1)])
            resp = await c.call(req, 7)
            assert [(t.name, t.error_code) for t in resp.topics] == [("fresh", 0), ("fresh2", 37)]
            assert resp.topics[0].topic_id == topic_id_for("fresh")
            again = await c.call(req, 7)
            assert again.topics[0].error_code == 36
            meta = await c.call(M.MetadataRequest(topics=None), 12)
            assert {t.name: len(t.partitions) for t in meta.topics} == {"fresh": 4}
            assert shards.topics.by_name["fresh"].partitions == 4
            cluster_id = meta.cluster_id
            await c.close()
        # restart: a new ShardSet + server on the same data dir
        store2 = CatalogStore(str(tmp_path))
        shards2 = make_shards("real", tmp_path, topics=store2.load())
        async with serving(shards2, store=store2, data_dir=str(tmp_path)) as srv:
            c = await WireClient.connect(*srv.address)
            meta = await c.call(M.MetadataRequest(topics=None), 12)
            assert {t.name: len(t.partitions) for t in meta.topics} == {"fresh": 4}
            assert meta.cluster_id == cluster_id
            await c.close()
    run_on(loop_kind, go)


# ---------------------------------------------------------------------- limits
def test_connection_limit(loop_kind, tmp_path, caplog):
    shards = make_shards("real", tmp_path)
    caplog.set_level(logging.WARNING, logger="groupcoord.server")

    async def go():
        async with serving(shards, max_connections=3) as srv:
            live = [await WireClient.connect(*srv.address) for _ in range(3)]
            for c in live:
                assert (await c.call(M.ApiVersionsRequest(), 3)).error_code == 0
            extra = [await WireClient.connect(*srv.address) for _ in range(20)]
            for c in extra:
                assert await c.closed(2.0)
            assert len(srv.connections) == 3
            assert (await live[0].call(M.MetadataRequest(topics=None), 12)).brokers
            await live[2].close()
            await until(lambda: len(srv.connections) < 3, 5, "the server to see the close")
            late = await WireClient.connect(*srv.address)      # room again
            assert (await late.call(M.ApiVersionsRequest(), 3)).error_code == 0
            for c in live[:2] + [late] + extra:
                await c.close()
    run_on(loop_kind, go)
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert 1 <= len(lines) <= 3       # rate-limited: not one line per refused connection
    assert "127.0.0.1:" in lines[0].getMessage()


def test_idle_connections_are_reaped_but_not_those_waiting(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards, connections_max_idle_ms=300) as srv:
            idle = await WireClient.connect(*srv.address)
            busy = await WireClient.connect(*srv.address)
            await idle.call(M.ApiVersionsRequest(), 3)
            corr = busy.send(fetch_req(wait=900), 12)        # in flight longer than idle max
            assert await idle.closed(3.0)
            c, _ = await busy.recv(3.0)
            assert c == corr
            await busy.close()
    run_on(loop_kind, go)


def test_graceful_shutdown_answers_parked_requests_then_closes(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path, shard_config=ShardConfig(
        group_initial_rebalance_delay_ms=60_000))

    async def go():
        async with serving(shards, shutdown_grace_ms=300) as srv:
            c = await WireClient.connect(*srv.address)
            mid = (await c.call(join_request(), 5)).member_id
            cj = c.send(join_request(member_id=mid), 5)        # parked for a minute
            cf = c.send(fetch_req(wait=60_000), 12)             # held for a minute
            await until(lambda: sum(x.in_flight() for x in srv.connections) == 2, 5,
                        "both requests to be held")
            t0 = time.monotonic()
            await srv.shutdown()
            assert time.monotonic() - t0 < 5
            got = []
            while True:
                try:
                    got.append(await c.recv(2.0))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
            assert [g[0] for g in got] == [cj, cf]
            assert got[0][1].error_code != 0               # the runtime's answer on close
            assert got[1][1].responses[0].partitions[0].error_code == 0
            await c.close()
    run_on(loop_kind, go)
