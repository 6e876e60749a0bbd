"""Bad input at the socket (DESIGN.md "Bad input"): each case closes or answers that one
connection, logs ONE warning naming the peer and the problem, and another live connection
(with a group in it) carries on. Runs on uvloop and on the stock asyncio loop."""
import asyncio
import logging
import os
import random
import struct

import pytest

import groupcoord.protocol as P
from server_client import WireClient
from server_fixtures import LOOPS, join_request, make_shards, raw_frame, run_on, serving
from waiting import until

M = P.messages


@pytest.fixture(params=LOOPS)
def loop_kind(request):
    return request.param


def _garbage_http():
    return b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def _garbage_random():
    # a plausible size prefix followed by random bytes (api key 0x7f7f: unknown)
    rnd = random.Random(7)
    body = bytes(rnd.randrange(256) for _ in range(60))
    return struct.pack(">i", 64) + b"\x7f\x7f\x00\x00" + body


def _oversized():
    return struct.pack(">i", 4096) + b"\0" * 100          # max_frame_bytes is 1024 here


def _huge_length():
    return struct.pack(">i", 0x7FFFFFF0)                   # never allocated


def _negative_length():
    return struct.pack(">i", -5) + b"abcd"


def _unknown_key():
    return raw_frame(999, 0, 5)


def _unsupported_version():
    return raw_frame(12, 42, 5, b"\0\0")                    # Heartbeat v42


def _undecodable_header():
    return struct.pack(">i", 3) + b"\x00\x0c\x00"          # 3 bytes: no api version


def _malformed_offset_commit():
    # OffsetCommit v2 has no top-level error code: cannot be answered -> closed
    return raw_frame(8, 2, 5, b"\x00\x05gr")


CLOSING_CASES = {
    "http": (_garbage_http, "frame size"),
    "random": (_garbage_random, "unknown api key"),
    "oversized": (_oversized, "max frame bytes"),
    "huge-length": (_huge_length, "max frame bytes"),
    "negative-length": (_negative_length, "outside"),
    "unknown-key": (_unknown_key, "unknown api key 999"),
    "unsupported-version": (_unsupported_version, "version 42 is not supported"),
    "undecodable-header": (_undecodable_header, "malformed request header"),
    "malformed-no-error-field": (_malformed_offset_commit, "malformed api key 8"),
}


async def _live_pair(srv):
    """A live connection that is a member of a group (joined) to check it carries on."""
    live = await WireClient.connect(*srv.address)
    mid = (await live.call(join_request(group="live"), 5)).member_id
    join = await live.call(join_request(group="live", member_id=mid), 5)
    assert join.error_code == 0
    return live, mid, join.generation_id


async def _still_fine(live, mid, gen):
    hb = await live.call(M.HeartbeatRequest(group_id="live", generation_id=gen, member_id=mid), 4)
    assert hb.error_code in (0, 27)       # NONE (or REBALANCE_IN_PROGRESS before SyncGroup)
    assert (await live.call(M.MetadataRequest(topics=None), 12)).brokers


def _warnings(caplog):
    return [r for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "groupcoord.server"]


@pytest.mark.parametrize("case", sorted(CLOSING_CASES))
def test_bad_input_closes_that_connection_only(case, loop_kind, tmp_path, caplog):
    make, what = CLOSING_CASES[case]
    caplog.set_level(logging.INFO, logger="groupcoord.server")
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards, max_frame_bytes=1024) as srv:
            live, mid, gen = await _live_pair(srv)
            bad = await WireClient.connect(*srv.address)
            bad.send_raw(make())
            assert await bad.closed(3.0), "the server did not close the connection"
            await bad.close()
            await _still_fine(live, mid, gen)
            await live.close()
            return bad.writer.get_extra_info("sockname")
    sockname = run_on(loop_kind, go)
    w = _warnings(caplog)
    assert len(w) == 1, [r.getMessage() for r in w]
    msg = w[0].getMessage()
    assert what in msg and ("127.0.0.1:%d" % sockname[1]) in msg


def test_truncated_frame_then_close(loop_kind, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.server")
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            live, mid, gen = await _live_pair(srv)
            bad = await WireClient.connect(*srv.address)
            frame = P.encode_request_frame(M.ApiVersionsRequest(), 3, 1)
            bad.send_raw(frame[:-3])
            await bad.writer.drain()
            await until(lambda: any(c._splitter.pending for c in srv.connections), 5,
                        "the server to hold the partial frame")
            await bad.close()
            for _ in range(100):
                if _warnings(caplog):
                    break
                await asyncio.sleep(0.02)
            await _still_fine(live, mid, gen)
            await live.close()
    run_on(loop_kind, go)
    w = _warnings(caplog)
    assert len(w) == 1 and "incomplete frame" in w[0].getMessage()


def test_malformed_body_with_readable_header_is_answered_invalid_request(loop_kind, tmp_path,
                                                                          caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.server")
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            # JoinGroup v5 whose group id string claims 200 bytes that are not there
            c.send_raw(raw_frame(11, 5, 41, b"\x00\xc8abc"))
            raw = await c.recv_frame()
            corr, body = P.decode_response_frame(raw, 11, 5)
            assert corr == 41 and body.error_code == 42
            # invalid UTF-8 in a Heartbeat's group id: answered too
            c.send_raw(raw_frame(12, 3, 42, b"\x00\x02\xff\xfe"))
            corr, body = P.decode_response_frame(await c.recv_frame(), 12, 3)
            assert corr == 42 and body.error_code == 42
            # the connection is still usable
            assert (await c.call(M.ApiVersionsRequest(), 3)).error_code == 0
            await c.close()
    run_on(loop_kind, go)
    assert len(_warnings(caplog)) == 2


def test_a_lying_array_length_allocates_nothing(loop_kind, tmp_path):
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            # DescribeGroups v0: groups array count 2^31-1 in a 4-byte body
            c.send_raw(raw_frame(15, 0, 9, b"\x7f\xff\xff\xff"))
            assert await c.closed(3.0)                # no top-level error code in v0
            await c.close()
    run_on(loop_kind, go)


def test_connection_flood_keeps_groups_alive(loop_kind, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.server")
    shards = make_shards("real", tmp_path)

    async def go():
        async with serving(shards, max_connections=40) as srv:
            live, mid, gen = await _live_pair(srv)

            async def one():
                try:
                    r, w = await asyncio.open_connection(*srv.address)
                except OSError:
                    return
                w.write(os.urandom(16))
                try:
                    await asyncio.wait_for(r.read(), 3.0)
                except (OSError, asyncio.TimeoutError):
                    pass
                w.close()

            await asyncio.gather(*(one() for _ in range(200)))
            await _still_fine(live, mid, gen)
            await live.close()
    run_on(loop_kind, go, timeout=60)
