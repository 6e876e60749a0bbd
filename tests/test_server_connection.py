"""Connection-layer behaviour against the coordinator TEST DOUBLE (tests/server_double.py),
where the tests need to control the coordinator: a slow one (ordering, back-pressure), one
that fails (internal errors are answered, not hung)."""
import asyncio

import pytest

import groupcoord.protocol as P
from server_client import WireClient
from server_double import ShardSetDouble
from server_fixtures import LOOPS, TOPICS, WriteCounter, run_on, serving

M = P.messages


@pytest.fixture(params=LOOPS)
def loop_kind(request):
    return request.param


def hb(i):
    return M.HeartbeatRequest(group_id="g%d" % i, generation_id=1, member_id="m")


def test_slow_coordinator_keeps_request_order_with_node_apis(loop_kind):
    shards = ShardSetDouble(TOPICS)
    shards.delay = 0.2

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            corrs = c.send_many([(hb(0), 4), (M.ApiVersionsRequest(), 3), (hb(1), 4),
                                 (M.MetadataRequest(topics=None), 12)])
            got = [await c.recv() for _ in corrs]
            assert [g[0] for g in got] == corrs
            assert [type(b).__name__ for _, b in got] == [
                "HeartbeatResponse", "ApiVersionsResponse", "HeartbeatResponse",
                "MetadataResponse"]
            await c.close()
    run_on(loop_kind, go)


def test_back_pressure_pauses_reading_and_loses_nothing(loop_kind):
    shards = ShardSetDouble(TOPICS)
    shards.delay = 0.05

    async def go():
        async with serving(shards, max_in_flight_per_connection=8) as srv:
            c = await WireClient.connect(*srv.address)
            await c.call(M.ApiVersionsRequest(), 3)
            (conn,) = srv.connections
            paused = []

            async def watch():
                while True:
                    paused.append(conn._reading_paused)
                    await asyncio.sleep(0.005)
            w = asyncio.get_running_loop().create_task(watch())
            corrs = []
            for i in range(60):                      # many small writes
                corrs += c.send_many([(hb(i), 4)])
                await asyncio.sleep(0)
            got = [await c.recv() for _ in corrs]
            w.cancel()
            assert [g[0] for g in got] == corrs
            assert any(paused) and not conn._reading_paused
            await c.close()
    run_on(loop_kind, go)


def test_group_responses_completing_together_share_a_write(loop_kind):
    shards = ShardSetDouble(TOPICS)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            await c.call(M.ApiVersionsRequest(), 3)
            (conn,) = srv.connections
            counter = conn.transport = WriteCounter(conn.transport)
            corrs = c.send_many([(hb(i), 4) for i in range(50)])
            got = [await c.recv() for _ in corrs]
            assert [g[0] for g in got] == corrs
            assert counter.writes <= 2
            await c.close()
    run_on(loop_kind, go)


class FailingDouble(ShardSetDouble):
    async def submit(self, request, version, client_id="", client_host=""):
        raise RuntimeError("boom")


def test_a_failing_submit_is_answered_unknown_server_error(loop_kind, caplog):
    shards = FailingDouble(TOPICS)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            assert (await c.call(hb(0), 4)).error_code == -1
            # OffsetCommit has no top-level error code: the connection is closed instead
            c.send(M.OffsetCommitRequest(group_id="g", topics=[]), 8)
            assert await c.closed(3.0)
            await c.close()
    run_on(loop_kind, go)
    assert any("boom" in (r.exc_text or "") or r.exc_info for r in caplog.records)
