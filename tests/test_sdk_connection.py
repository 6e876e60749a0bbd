"""The SDK's connection layer (src/groupcoord/client/connection.py): version negotiation,
pipelining, timeouts, closed connections and find_coordinator's retries, against a real
`groupcoord serve` and, where a misbehaving peer is needed, a scripted fake node on loopback
(built on our own codec)."""
import asyncio
import time

import pytest

from groupcoord.client import (Backoff, ConnectionClosed, Connection, CoordinatorNotFound,
                               RequestTimeout, UnsupportedApi, find_coordinator)
from groupcoord.protocol import (ApiVersionsRequest, ApiVersionsResponse,
                                 ApiVersionsResponseApiVersion, ConnectGroupDescribeRequest,
                                 FindCoordinatorRequest, FindCoordinatorResponse,
                                 FindCoordinatorResponseCoordinator, FrameSplitter,
                                 decode_request_frame, encode_response_frame, supported_versions)
from groupcoord.protocol.error_codes import ErrorCode as E

from serve_proc import serve  # noqa: F401  (fixture)
from waiting import until


def run(coro, timeout=20):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


class FakeNode:
    """A loopback node answering with `script(header, request) -> (response, version,
    delay_s)` or None (no answer). ApiVersions answers come from `api_versions`."""

    def __init__(self, script=None, api_versions=None):
        self.script = script
        self.api_versions = api_versions or self.modern
        self.seen = []
        self.server = None
        self.port = None

    @staticmethod
    def modern(header, req):
        keys = [ApiVersionsResponseApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in supported_versions().items()]
        return ApiVersionsResponse(api_keys=keys), header.api_version

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        split = FrameSplitter()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for frame in split.feed(data):
                    header, req = decode_request_frame(frame)
                    self.seen.append((header.api_key, header.api_version, req))
                    if header.api_key == 18:
                        resp, v = self.api_versions(header, req)
                        delay = 0
                    else:
                        ans = self.script(header, req)
                        if ans is None:
                            continue
                        if ans == "close":
                            writer.close()
                            return
                        resp, v, delay = ans
                    asyncio.get_running_loop().call_later(
                        delay, self._write, writer, encode_response_frame(
                            resp, v, header.correlation_id))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _write(writer, frame):
        if not writer.is_closing():
            writer.write(frame)


# ------------------------------------------------------------------------------ versions
def test_version_negotiation_against_serve(serve):
    srv = serve()

    async def go():
        conn = await Connection.open(srv.host, srv.port, client_id="t", timeout_s=10)
        ours = supported_versions()
        assert conn.api_versions_version == 3
        assert conn.server_versions, "the server advertised nothing"
        for key, (lo, hi) in conn.server_versions.items():
            if key in ours and min(hi, ours[key][1]) >= max(lo, ours[key][0]):
                assert conn.version(key) == min(hi, ours[key][1])
        assert conn.version(10000) == 0 and conn.version(10) == 6
        with pytest.raises(KeyError):
            conn.version(32000)
        with pytest.raises(UnsupportedApi):
            conn.version(32000)
        await conn.close()
        assert conn.closed
    run(go())


def test_api_versions_falls_back_to_v0():
    def old_server(header, req):
        keys = [ApiVersionsResponseApiVersion(api_key=18, min_version=0, max_version=2),
                ApiVersionsResponseApiVersion(api_key=10, min_version=0, max_version=2)]
        if header.api_version > 2:   # what Kafka does: a v0 body with error 35
            return ApiVersionsResponse(error_code=E.UNSUPPORTED_VERSION, api_keys=keys), 0
        return ApiVersionsResponse(api_keys=keys), header.api_version

    async def go():
        async with FakeNode(api_versions=old_server) as node:
            conn = await Connection.open("127.0.0.1", node.port, timeout_s=5)
            assert [(k, v) for k, v, _ in node.seen] == [(18, 3), (18, 0)]
            assert conn.versions == {18: 2, 10: 2}
            await conn.close()
    run(go())


# ------------------------------------------------------------------------------ pipelining
def test_pipelined_requests_are_matched_by_correlation_id(serve):
    srv = serve()

    async def go():
        conn = await Connection.open(srv.host, srv.port)
        n = 300
        resps = await asyncio.gather(*(conn.request(
            ConnectGroupDescribeRequest(group_ids=["g-%d" % i])) for i in range(n)))
        assert [r.groups[0].group_id for r in resps] == ["g-%d" % i for i in range(n)]
        assert conn.in_flight == 0
        await conn.close()
    run(go())


def test_out_of_order_responses_are_matched():
    # The fake answers the first request last: only correlation ids can pair them up.
    def script(header, req):
        delay = 0.3 if req.key == "first" else 0.0
        return FindCoordinatorResponse(host=req.key, port=1), 3, delay

    async def go():
        async with FakeNode(script) as node:
            conn = await Connection.open("127.0.0.1", node.port)
            keys = ["first", "second", "third"]
            resps = await asyncio.gather(*(conn.request(FindCoordinatorRequest(key=k), version=3)
                                           for k in keys))
            assert [r.host for r in resps] == keys
            await conn.close()
    run(go())


# ------------------------------------------------------------------------------ timeouts
def test_request_timeout_keeps_the_connection_usable():
    def script(header, req):
        return FindCoordinatorResponse(host=req.key), 3, (0.6 if req.key == "slow" else 0.0)

    async def go():
        async with FakeNode(script) as node:
            conn = await Connection.open("127.0.0.1", node.port)
            t = time.monotonic()
            with pytest.raises(RequestTimeout):
                await conn.request(FindCoordinatorRequest(key="slow"), version=3, timeout_s=0.2)
            assert 0.15 < time.monotonic() - t < 0.5
            r = await conn.request(FindCoordinatorRequest(key="quick"), version=3, timeout_s=2)
            assert r.host == "quick"
            # the late answer arrives and is dropped
            await until(lambda: conn.late_responses_dropped, 5, "the late answer")
            assert conn.late_responses_dropped == 1 and not conn.closed
            await conn.close()
    run(go())


def test_closed_connection_fails_pending_and_later_requests():
    async def go():
        async with FakeNode(lambda h, r: "close" if r.key == "bye" else None) as node:
            conn = await Connection.open("127.0.0.1", node.port)
            hang = asyncio.ensure_future(conn.request(FindCoordinatorRequest(key="x"), version=3))
            await until(lambda: any(k == 10 for k, _, _ in node.seen), 5, "the node to get x")
            with pytest.raises(ConnectionClosed):
                await conn.request(FindCoordinatorRequest(key="bye"), version=3, timeout_s=5)
            with pytest.raises(ConnectionClosed):
                await hang
            with pytest.raises(ConnectionClosed):
                await conn.request(FindCoordinatorRequest(key="x"), version=3)
    run(go())


def test_connect_refused_is_connection_closed():
    async def go():
        async with FakeNode() as node:
            port = node.port
        with pytest.raises(ConnectionClosed):
            await Connection.open("127.0.0.1", port, timeout_s=2)
    run(go())


# ------------------------------------------------------------------------------ find_coordinator
def test_find_coordinator_against_serve(serve):
    srv = serve()

    async def go():
        coord = await find_coordinator([(srv.host, srv.port)], "g", client_id="t")
        assert (coord.host, coord.port) == (srv.host, srv.port) and not coord.closed
        r = await coord.request(ConnectGroupDescribeRequest(group_ids=["g"]))
        assert r.groups[0].group_id == "g"
        await coord.close()
    run(go())


def test_find_coordinator_retries_then_follows_the_answer():
    answers = [E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, 0]

    async def go():
        async with FakeNode(lambda h, r: None) as target:
            def script(header, req):
                code = answers.pop(0)
                c = FindCoordinatorResponseCoordinator(
                    key=req.coordinator_keys[0], error_code=code, host="127.0.0.1",
                    port=target.port if code == 0 else -1)
                return FindCoordinatorResponse(coordinators=[c]), header.api_version, 0
            async with FakeNode(script) as boot:
                t = time.monotonic()
                conn = await find_coordinator("127.0.0.1:%d" % boot.port, "g",
                                              backoff=Backoff(0.05, 0.2, seed=7), timeout_s=10)
                took = time.monotonic() - t
                assert answers == []
                assert conn.port == target.port
                assert [k for k, _, _ in boot.seen] == [18, 10] * 4   # a new connection per try
                assert all(v == 6 for k, v, _ in boot.seen if k == 10)
                assert 0.1 < took < 3.0, took     # three backoffs of ~0.05, 0.1, 0.2 s
                await conn.close()
    run(go())


def test_find_coordinator_gives_up_at_its_deadline():
    async def go():
        async with FakeNode() as node:
            port = node.port          # closed again: nothing listens there
        t = time.monotonic()
        with pytest.raises(CoordinatorNotFound) as ei:
            await find_coordinator([("127.0.0.1", port)], "g", timeout_s=0.5,
                                   backoff=Backoff(0.05, 0.1, seed=1))
        assert 0.4 < time.monotonic() - t < 2.0
        assert isinstance(ei.value.last, ConnectionClosed)

    run(go())


def test_find_coordinator_non_retriable_error_is_raised_at_once():
    def script(header, req):
        c = FindCoordinatorResponseCoordinator(key="g", error_code=E.INVALID_REQUEST, port=-1)
        return FindCoordinatorResponse(coordinators=[c]), header.api_version, 0

    async def go():
        async with FakeNode(script) as node:
            with pytest.raises(CoordinatorNotFound, match="INVALID_REQUEST"):
                await find_coordinator([("127.0.0.1", node.port)], "g", timeout_s=5)
            assert [k for k, _, _ in node.seen] == [18, 10]
    run(go())


# ------------------------------------------------------------------------------ backoff
def test_backoff_is_seeded_capped_and_resets():
    seed = 12345
    print("backoff seed", seed)
    a, b = Backoff(0.1, 1.0, 2.0, 0.2, seed=seed), Backoff(0.1, 1.0, 2.0, 0.2, seed=seed)
    da = [a.next_delay() for _ in range(8)]
    assert da == [b.next_delay() for _ in range(8)]
    for n, d in enumerate(da):
        base = min(1.0, 0.1 * 2 ** n)
        assert base * 0.8 <= d <= min(1.0, base * 1.2)
    assert da[-1] <= 1.0 and da[-1] >= 0.8
    a.reset()
    assert 0.08 <= a.next_delay() <= 0.12
    with pytest.raises(ValueError):
        Backoff(0.0)
