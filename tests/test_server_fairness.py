"""Fair, bounded request processing (docs/server.md, "Flow control and fairness"): a
connection takes frames only while it has room and at most a turn's worth per loop turn;
Metadata answers come from cached bytes built a slice per turn; the request bytes held across
connections are capped (queued.max.request.bytes). Raw sockets against an in-process Server
over the test double, on uvloop and on the stock asyncio loop.

Every test asserts behaviour (answers, their order, the server's own counters); the probe
latencies are printed (pytest -s) for docs/benchmarks-server.md, never asserted."""
import asyncio
import functools
import logging
import random
import statistics
import struct
import time

import pytest

import groupcoord.protocol as P
from groupcoord.groups.topics import Topic, TopicCatalog, topic_id_for
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server import node as N
from groupcoord.server.flow import LOG_INTERVAL, SMALL_FRAME_BYTES, RequestBytesPool
from groupcoord.server.metadata_cache import (INLINE_PARTITIONS, MetadataCache,
                                              response_frame)
from server_client import WireClient
from server_double import ShardSetDouble
from server_fixtures import LOOPS, make_shards, run_on, serving
from waiting import until

M = P.messages
READ_MAX = 256 << 10          # the most either loop reads from a socket at once


@pytest.fixture(params=LOOPS)
def loop_kind(request):
    return request.param


def catalog(n_topics, partitions, big=0):
    ts = [Topic("t%05d" % i, topic_id_for("t%05d" % i), partitions) for i in range(n_topics)]
    if big:
        ts.append(Topic("huge", topic_id_for("huge"), big))
    return TopicCatalog(ts)


class Node:
    """node.metadata's view with a catalog that can change (as CreateTopics does)."""

    def __init__(self, cat):
        self.cat = cat
        self.state = N.NodeState("node.example", 9092, "cluster-x", lambda: self.cat, {})


def _requests(version, cat, rnd):
    """All-topics and named requests (known, unknown, repeated, by id) at one version."""
    names = [t.name for t in cat]
    out = []
    for auth in (False, True):
        for cluster in (False, True):
            out.append(M.MetadataRequest(topics=None if version else [],
                                         include_topic_authorized_operations=auth,
                                         include_cluster_authorized_operations=cluster))
            want = [M.MetadataRequestTopic(name=rnd.choice(names + ["nope", "zz.unknown"]))
                    for _ in range(rnd.randrange(1, 12))]
            want.append(M.MetadataRequestTopic(name=want[0].name))          # a repeat
            if version >= 10:
                want.append(M.MetadataRequestTopic(
                    name=None, topic_id=cat.by_name[rnd.choice(names)].topic_id))
                want.append(M.MetadataRequestTopic(name=None, topic_id=b"\x07" * 16))
            out.append(M.MetadataRequest(topics=want, include_topic_authorized_operations=auth,
                                         include_cluster_authorized_operations=cluster))
    # More names than are answered inline: a job, a slice of the names per loop turn.
    many = [M.MetadataRequestTopic(name=rnd.choice(names) if rnd.random() < 0.7
                                   else "u%d" % rnd.randrange(400)) for _ in range(700)]
    out.append(M.MetadataRequest(topics=many))
    return out


async def _answer(cache, req, version, corr):
    res = cache.answer(req, version)
    if isinstance(res, asyncio.Future):
        res = await res
    return b"".join(response_frame(res, version, corr))


# ---------------------------------------------------------------------- Metadata cache
@pytest.mark.parametrize("shape", ["small", "big"])
def test_cached_metadata_is_byte_for_byte_node_metadata_at_every_version(shape):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    if shape == "small":      # answered inline; topics of 0..70 partitions (both encoders)
        cat = TopicCatalog(Topic("s%d" % i, topic_id_for("s%d" % i), rnd.choice([0, 1, 3, 64,
                                                                                   65, 70]))
                           for i in range(12))
    else:                     # built as a job; one topic from the template, in 2 blocks
        cat = catalog(300, 20, big=70_000)
    node = Node(cat)

    async def go():
        cache = MetadataCache(node.state, asyncio.get_running_loop())
        corr = 0
        for version in range(0, 14):
            for req in _requests(version, cat, rnd):
                corr += 1
                got = await _answer(cache, req, version, corr)
                want = P.encode_response_frame(N.metadata(req, version, node.state), version,
                                               corr)
                assert got == want, (version, req)
    asyncio.run(go())


def test_a_catalog_change_invalidates_the_cached_answers():
    node = Node(catalog(3, 2))

    async def go():
        cache = MetadataCache(node.state, asyncio.get_running_loop())
        req = M.MetadataRequest(topics=None)
        first = await _answer(cache, req, 12, 1)
        assert await _answer(cache, req, 12, 1) == first
        node.cat = node.cat.with_topics(Topic("new", topic_id_for("new"), 4))
        again = await _answer(cache, req, 12, 1)
        assert again != first
        assert again == P.encode_response_frame(N.metadata(req, 12, node.state), 12, 1)
        _, body = P.decode_response_frame(again[4:], 3, 12)
        assert "new" in [t.name for t in body.topics]
    asyncio.run(go())


def test_a_big_catalog_is_built_over_many_loop_turns_and_once(loop_kind):
    # 2M partitions (the default --max-partitions): the build must not hold the loop.
    node = Node(catalog(2000, 500, big=1_000_000))
    assert sum(t.partitions for t in node.cat) > INLINE_PARTITIONS

    async def go():
        loop = asyncio.get_running_loop()
        # step_seconds=0: one unit of build work per loop turn, so what is asserted below does
        # not depend on how fast this machine builds (the default is 2 ms of work per turn).
        cache = MetadataCache(node.state, loop, step_seconds=0.0)
        runs = 0
        real_run = cache._run

        def counted_run():
            nonlocal runs
            runs += 1
            real_run()
        cache._run = counted_run
        turns = 0
        done = False

        async def ticker():
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)
        t = loop.create_task(ticker())
        req = M.MetadataRequest(topics=None)
        futs = [cache.answer(req, 12) for _ in range(5)]     # one build for all five
        assert all(isinstance(f, asyncio.Future) for f in futs)
        bodies = [await f for f in futs]
        done = True
        await t
        # The build took many loop turns, and the other task ran between them.
        assert runs > 20, runs
        assert turns >= runs - 1, (turns, runs)
        assert len({id(b[1]) for b in bodies}) == 1          # the same cached bytes
        assert not isinstance(cache.answer(req, 12), asyncio.Future)   # cached now
        _, body = P.decode_response_frame(b"".join(response_frame(bodies[0], 12, 9))[4:], 3,
                                          12)
        assert sum(len(x.partitions) for x in body.topics) == 2_000_000
        huge = [x for x in body.topics if x.name == "huge"][0]
        assert [p.partition_index for p in huge.partitions[-3:]] == [999_997, 999_998,
                                                                      999_999]
    run_on(loop_kind, go, timeout=120)


# ---------------------------------------------------------------------- request memory pool
class _Waiter:
    peer = "test"

    def __init__(self):
        self.grants = 0

    def granted(self):
        self.grants += 1


def test_pool_grants_first_come_first_served_and_an_oversize_frame_alone():
    loop = asyncio.new_event_loop()
    try:
        pool = RequestBytesPool(100, loop)
        a, b, c, d = _Waiter(), _Waiter(), _Waiter(), _Waiter()
        assert pool.acquire(a, 60)
        assert not pool.acquire(b, 50)           # would go over the cap: waits
        assert not pool.acquire(c, 10)           # fits, but must not overtake b
        assert not pool.acquire(d, 500)          # bigger than the cap: alone, in turn
        pool.cancel(c)                           # c's connection closed while waiting
        pool.release(60)
        assert (b.grants, c.grants, d.grants, pool.reserved) == (1, 0, 0, 50)
        pool.release(50)
        assert (d.grants, pool.reserved) == (1, 500)
        pool.release(500)
        assert pool.reserved == 0 and pool.waiting == 0
    finally:
        loop.close()


# ---------------------------------------------------------------------- on the wire
def _metadata_frame(corr: int) -> bytes:
    return P.encode_request_frame(M.MetadataRequest(topics=None), 12, corr, "hog")


async def _probe(srv, n: int) -> list:
    """ApiVersions + FindCoordinator on a fresh connection, n times; latencies in s."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = await WireClient.connect(*srv.address)
        assert (await c.call(M.ApiVersionsRequest(), 3, timeout=20)).error_code == 0
        fc = await c.call(M.FindCoordinatorRequest(coordinator_keys=["g"]), 4, timeout=20)
        assert fc.coordinators[0].error_code == 0
        out.append(time.perf_counter() - t0)
        await c.close()
    return out


def _report(what, lat):
    lat = sorted(lat)
    print("%s: n=%d p50 %.1f ms p99 %.1f ms max %.1f ms" % (
        what, len(lat), 1000 * statistics.median(lat),
        1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1000 * lat[-1]))


@pytest.mark.parametrize("reads", [False, True], ids=["reads-later", "reads"])
def test_a_metadata_pipelining_hog_stays_bounded_and_the_probe_is_answered(loop_kind, reads):
    # Metadata(all) answers of ~52 KB to 23-byte requests, as in issue 16.
    shards = ShardSetDouble(catalog(1, 1700))
    n_req = 10_000
    bound = 256 << 10

    async def go():
        async with serving(shards, max_queued_response_bytes=bound,
                           write_buffer_high=64 << 10) as srv:
            baseline = await _probe(srv, 20)
            # A small stream limit: once 128 KiB are unread the hog's socket stops reading.
            r, w = await asyncio.open_connection(*srv.address, limit=64 << 10)
            w.write(b"".join(_metadata_frame(i) for i in range(n_req)))
            while not srv.connections or not any(c.in_flight() for c in srv.connections):
                await asyncio.sleep(0.001)
            (hog,) = [c for c in srv.connections if c.in_flight()]
            worst = {"responses": 0, "frames": 0, "in_flight": 0}
            sampling = True

            async def sample():
                while sampling:
                    if not hog.closing:
                        worst["responses"] = max(worst["responses"], hog.queued_response_bytes
                                                 + hog.transport.get_write_buffer_size())
                        worst["frames"] = max(worst["frames"], hog._frames_bytes)
                        worst["in_flight"] = max(worst["in_flight"], len(hog._queue))
                    await asyncio.sleep(0)
            loop = asyncio.get_running_loop()
            s = loop.create_task(sample())
            corrs = []

            async def read_all():
                while len(corrs) < n_req:
                    size = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 30))[0]
                    frame = await r.readexactly(size)
                    corrs.append(struct.unpack(">i", frame[:4])[0])
            reader = loop.create_task(read_all()) if reads else None
            if reads:                   # under way: the hog is being answered
                await until(lambda: corrs, 30, "the hog's first answers")
            else:                       # its unread answers fill the transport: stuck
                await until(lambda: hog.closing or hog._writing_paused
                            or hog.queued_response_bytes
                            + hog.transport.get_write_buffer_size() >= bound, 30,
                            "the hog to be stuck on its unread answers")
            loaded = await _probe(srv, 20)
            if reads:
                assert 0 < len(corrs) < n_req        # the probe ran during the hog's burst
            else:
                # Stuck on its unread answers, far from done; it reads from now on.
                assert hog.in_flight() > n_req // 2
                reader = loop.create_task(read_all())
            await reader
            assert corrs == list(range(n_req))       # every one, in order
            assert hog.in_flight() == 0
            sampling = False
            await s
            w.close()
            one = len(b"".join(response_frame(srv.metadata_cache.answer(
                M.MetadataRequest(topics=None), 12), 12, 0)))
            assert worst["responses"] <= bound + one, worst
            assert worst["frames"] <= READ_MAX, worst
            _report("%s probe, idle node" % loop_kind, baseline)
            _report("%s probe, Metadata hog (%s)" % (loop_kind, "reads" if reads
                                                     else "never reads"), loaded)
    run_on(loop_kind, go, timeout=120)


def test_one_connection_takes_a_bounded_number_of_frames_per_turn(loop_kind):
    shards = ShardSetDouble(catalog(1, 3))
    per_turn = 16

    async def go():
        async with serving(shards, requests_per_turn=per_turn) as srv:
            loop = asyncio.get_running_loop()
            turn = 0
            ticking = True

            def tick():
                nonlocal turn
                turn += 1
                if ticking:
                    loop.call_soon(tick)
            loop.call_soon(tick)
            hog = await WireClient.connect(*srv.address)
            await hog.call(M.ApiVersionsRequest(), 3)
            (conn,) = srv.connections
            seen = []                          # (loop turn, connection) of every frame taken

            def spy(c):
                for key in (N.API_VERSIONS, N.FIND_COORDINATOR):
                    def handle(req, header, real=c._dispatch[key]):
                        seen.append((turn, c))
                        real(req, header)
                    c._dispatch[key] = handle
            spy(conn)
            n = 5000
            corrs = hog.send_many([(M.ApiVersionsRequest(), 3)] * n)
            await hog.recv()
            probe = await WireClient.connect(*srv.address)
            spy([c for c in srv.connections if c is not conn][0])
            assert (await probe.call(M.FindCoordinatorRequest(coordinator_keys=["g"]),
                                     4)).coordinators[0].error_code == 0
            got = [corrs[0]] + [(await hog.recv())[0] for _ in corrs[1:]]
            ticking = False
            assert got == corrs
            per = {}
            for t, c in seen:
                if c is conn:
                    per[t] = per.get(t, 0) + 1
            assert max(per.values()) <= per_turn
            probe_turn = [t for t, c in seen if c is not conn][0]
            assert probe_turn < max(per)       # answered while the hog still had frames
            await probe.close()
            await hog.close()
    run_on(loop_kind, go, timeout=60)


def _partial(total: int, sent: int, corr: int) -> tuple:
    """A valid Metadata v1 request frame of about `total` bytes (many topic names): its
    first `sent` bytes and the rest."""
    names = []
    size = 0
    while size < total - 64:
        names.append(M.MetadataRequestTopic(name="x%07d" % len(names)))
        size += 10
    frame = P.encode_request_frame(M.MetadataRequest(topics=names), 1, corr, "big")
    return frame[:sent], frame[sent:]


def test_partial_frames_are_capped_across_connections_and_released_on_close(loop_kind,
                                                                             caplog):
    cap = 4 << 20
    frame_bytes = 1 << 20
    n_hogs = 10

    async def go():
        async with serving(ShardSetDouble(catalog(1, 3)), queued_max_request_bytes=cap,
                           max_frame_bytes=8 << 20) as srv:
            pool = srv.request_pool
            hogs = []
            rests = []
            for i in range(n_hogs):
                r, w = await asyncio.open_connection(*srv.address)
                head, rest = _partial(frame_bytes, frame_bytes // 2, 1)
                w.write(head)
                hogs.append((r, w))
                rests.append(rest)
            worst = 0
            deadline = time.monotonic() + 10
            # Wait until every hog's first half is in, or held back by the cap.
            while time.monotonic() < deadline:
                worst = max(worst, pool.buffered)
                conns = list(srv.connections)
                if (len(conns) == n_hogs and pool.waiting
                        and all(c.throttled or c._splitter.pending >= frame_bytes // 2
                                for c in conns)):
                    break
                await asyncio.sleep(0.005)
            conns = list(srv.connections)
            throttled = [c for c in conns if c.throttled]
            assert throttled and pool.reserved <= cap
            for c in throttled:                     # not read past what showed the frame
                assert c._splitter.pending <= READ_MAX
            assert worst <= cap + n_hogs * (READ_MAX + SMALL_FRAME_BYTES)
            # A well-behaved client is not starved by the big half-sent frames.
            lat = await _probe(srv, 5)
            _report("%s probe, %d half-sent 1 MiB frames over a %d MiB cap"
                    % (loop_kind, n_hogs, cap >> 20), lat)
            # Each hog finishing its frame lets the next one in: all answered, no deadlock.
            for (r, w), rest in zip(hogs, rests):
                w.write(rest)
            for r, w in hogs:
                size = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 20))[0]
                corr, body = P.decode_response_frame(await r.readexactly(size), 3, 1)
                assert corr == 1 and len(body.topics) > 1000
                worst = max(worst, pool.buffered)
            assert worst <= cap + n_hogs * (READ_MAX + SMALL_FRAME_BYTES)
            # Half-sent again, then the hogs go away: every byte and reservation released.
            for (r, w), rest in zip(hogs, rests):
                w.write(_partial(frame_bytes, frame_bytes // 2, 2)[0])
            await until(lambda: pool.buffered > 0, 10, "the half-sent frames to be buffered")
            for r, w in hogs:
                w.close()
            deadline = time.monotonic() + 10
            while srv.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert (pool.buffered, pool.reserved, pool.waiting) == (0, 0, 0)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="groupcoord.server"):
        run_on(loop_kind, go, timeout=90)
    lines = [r for r in caplog.records if "queued max request bytes" in r.getMessage()]
    # Once per interval, not once per wait (there were several).
    assert 1 <= len(lines) <= 1 + (time.monotonic() - t0) // LOG_INTERVAL, lines


def test_metadata_for_a_big_catalog_on_the_wire_leaves_the_probe_answered(loop_kind):
    # A Metadata(all) flood (8 requests per write, as in issue 16) over 1M partitions.
    shards = ShardSetDouble(catalog(1000, 1000))

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            for _ in range(3):
                c.send_many([(M.MetadataRequest(topics=None), 12)] * 8)
            lat = await _probe(srv, 10)
            _report("%s probe, Metadata(all) floods over 1M partitions" % loop_kind, lat)
            for _ in range(24):
                _, body = await c.recv(timeout=60)
                assert len(body.topics) == 1000
            await c.close()
    run_on(loop_kind, go, timeout=120)


# ---------------------------------------------------------- OffsetCommit over message.max.bytes
@functools.lru_cache(maxsize=None)
def _commit_frame(n: int, version: int, corr: int, group="hostile", member="", epoch=-1,
                  metadata=None) -> bytes:
    """An OffsetCommit frame (with its size prefix) of n partitions of one topic."""
    parts = [M.OffsetCommitRequestPartition(partition_index=i, committed_offset=i,
                                            committed_metadata=metadata) for i in range(n)]
    req = M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch,
                                member_id=member,
                                topics=[M.OffsetCommitRequestTopic(name="good",
                                                                   partitions=parts)])
    return P.encode_request_frame(req, version, corr, "big-commit")


def _send_commit(c, frame: bytes, version: int) -> None:
    corr = struct.unpack(">i", frame[8:12])[0]
    c.pending[corr] = (8, version)
    c.send_raw(frame)


def _codes(resp) -> list:
    return [(t.name, p.partition_index, p.error_code) for t in resp.topics
            for p in t.partitions]


@pytest.fixture
def decoded(monkeypatch):
    """Sizes of the frames the server decoded into messages."""
    from groupcoord.server import connection
    sizes = []
    real = connection.decode_request_frame

    def spy(frame):
        sizes.append(len(frame))
        return real(frame)
    monkeypatch.setattr(connection, "decode_request_frame", spy)
    return sizes


@pytest.mark.parametrize("kind", ["double", "real"])
def test_a_million_partition_commit_is_refused_whole_without_being_decoded(kind, tmp_path,
                                                                            decoded, loop_kind):
    shards = make_shards(kind, tmp_path)
    n = 1_000_000
    frames = {v: _commit_frame(n, v, 100 + v) for v in (7, 8)}

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            for version, frame in frames.items():
                # pipelined behind it: answered after it, in request order
                _send_commit(c, frame, version)
                after = c.send(M.ApiVersionsRequest(), 3)
                corr, resp = await c.recv(timeout=60)
                assert corr == 100 + version
                assert _codes(resp) == [("good", i, E.INVALID_COMMIT_OFFSET_SIZE)
                                        for i in range(n)]
                corr, resp = await c.recv()
                assert corr == after and resp.error_code == 0
            # nothing was written: the group has no offset
            fetch = await c.call(M.OffsetFetchRequest(groups=[M.OffsetFetchRequestGroup(
                group_id="hostile", topics=[M.OffsetFetchRequestTopics(
                    name="good", partition_indexes=[0, n - 1])])]), 8)
            assert [p.committed_offset for p in fetch.groups[0].topics[0].partitions] == \
                [-1, -1]
            await c.close()
    run_on(loop_kind, go, timeout=120)
    assert max(decoded) < 1 << 20          # the big frames were never decoded


@pytest.mark.parametrize("kind", ["double", "real"])
def test_a_big_commit_of_a_member_the_group_refuses_gets_the_groups_error(kind, tmp_path,
                                                                           decoded, loop_kind):
    shards = make_shards(kind, tmp_path)
    n = 100_000                            # a 1.8 MB frame: over message.max.bytes

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            hb = await c.call(M.ConsumerGroupHeartbeatRequest(
                group_id="cg", member_id="m1", member_epoch=0, rebalance_timeout_ms=10_000,
                subscribed_topic_names=["orders"], topic_partitions=[]), 0)
            assert hb.error_code == 0 and hb.member_epoch > 0
            cases = [("m1", hb.member_epoch + 1, E.STALE_MEMBER_EPOCH),      # fenced epoch
                     ("stranger", hb.member_epoch, E.UNKNOWN_MEMBER_ID),
                     ("m1", hb.member_epoch, E.INVALID_COMMIT_OFFSET_SIZE)]
            for i, (member, epoch, code) in enumerate(cases):
                _send_commit(c, _commit_frame(n, 9, 300 + i, "cg", member, epoch), 9)
                corr, resp = await c.recv(timeout=60)
                assert corr == 300 + i
                assert _codes(resp) == [("good", p, code) for p in range(n)], member
            await c.close()
    run_on(loop_kind, go, timeout=120)
    assert max(decoded) < 1 << 20


def test_a_big_frame_whose_commit_fits_is_decoded_and_committed_as_usual(tmp_path, decoded,
                                                                          loop_kind):
    # 2 MB of metadata over offset.metadata.max.bytes: a frame over message.max.bytes whose
    # records fit; the per-partition answers only the handler gives.
    shards = ShardSetDouble(catalog(1, 3))
    big = "m" * 200_000

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            req = M.OffsetCommitRequest(group_id="fits", topics=[M.OffsetCommitRequestTopic(
                name="good", partitions=[M.OffsetCommitRequestPartition(
                    partition_index=i, committed_offset=10 + i,
                    committed_metadata=big if i % 2 else "ok") for i in range(20)])])
            resp = await c.call(req, 8)
            assert _codes(resp) == [("good", i, E.OFFSET_METADATA_TOO_LARGE if i % 2 else 0)
                                    for i in range(20)]
            fetch = await c.call(M.OffsetFetchRequest(groups=[M.OffsetFetchRequestGroup(
                group_id="fits", topics=[M.OffsetFetchRequestTopics(
                    name="good", partition_indexes=[0, 1, 2])])]), 8)
            assert [p.committed_offset for p in fetch.groups[0].topics[0].partitions] == \
                [10, -1, 12]
            await c.close()
    run_on(loop_kind, go, timeout=60)
    assert max(decoded) > 2_000_000        # scanned first, then decoded


def test_a_malformed_big_commit_closes_the_connection_as_a_decoded_one_would(decoded,
                                                                              loop_kind):
    shards = ShardSetDouble(catalog(1, 3))
    frame = bytearray(_commit_frame(100_000, 8, 5, metadata="ok"))
    at = len(frame) - 4                    # the last partition's metadata: "ok" -> "o\xff"
    assert frame[at - 1:at + 1] == b"ok"
    frame[at] = 0xFF

    async def go():
        async with serving(shards) as srv:
            c = await WireClient.connect(*srv.address)
            first = c.send(M.ApiVersionsRequest(), 3)
            c.send_raw(bytes(frame))
            assert (await c.recv())[0] == first
            assert await c.closed()
    run_on(loop_kind, go, timeout=60)
    assert max(decoded) < 1 << 20
