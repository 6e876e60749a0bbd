"""A large OffsetCommit read without decoding it (native/commit_scan.pyx) and refused whole from
its shape (offsets.commit_shape_error): the scan reads what decode_request_frame reads and
refuses what it refuses, with the same error; the error frame is byte for byte what
encode_response_frame writes for the same answer; the shape check decides as the normal
handler would, the group's error first. The server-level cases are in
tests/test_server_fairness.py."""
import asyncio
import random

import pytest

import groupcoord.protocol as P
from groupcoord._native.commit_scan import (VERSIONS, offset_commit_error_frame,
                                            scan_offset_commit)
from groupcoord.groups import limits, offsets
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.shard import error_response
from groupcoord.protocol.error_codes import ErrorCode as E
from test_coord_offsets import classic_member, consumer_member

M = P.messages
CFG = ShardConfig(group_initial_rebalance_delay_ms=0)
ALL = list(range(VERSIONS[0], VERSIONS[1] + 1))
CODES = [0, 28, 25, -1, 22, 32767, -32768]


def test_the_scan_reads_every_version_the_codec_serves():
    assert P.supported_versions()[8] == VERSIONS


# ---------------------------------------------------------------------------- requests
NAMES = ["t", "orders", "é-topic", "日本", "x" * 300, "", "a.b_c-d", "\U0001f600"]
METADATA = [None, "", "m", "ünïcode", "\U0001f600" * 3, "z" * 70, "q" * 5000]


def random_request(rnd, version, max_topics=5, max_parts=6):
    topics = []
    for _ in range(rnd.randrange(max_topics + 1)):
        parts = [M.OffsetCommitRequestPartition(
            partition_index=rnd.choice([0, 1, 7, -1, 2**31 - 1, -2**31]),
            committed_offset=rnd.choice([0, -1, 2**63 - 1, 12345]),
            committed_leader_epoch=rnd.choice([-1, 0, 9]) if version >= 6 else -1,
            committed_metadata=rnd.choice(METADATA))
            for _ in range(rnd.randrange(max_parts + 1))]
        topics.append(M.OffsetCommitRequestTopic(name=rnd.choice(NAMES), partitions=parts))
    return M.OffsetCommitRequest(
        group_id=rnd.choice(["g", "", "grüppe", "g" * 100]),
        generation_id_or_member_epoch=rnd.choice([-1, 0, 5, 2**31 - 1]),
        member_id=rnd.choice(["", "member-1", "m" * 80]),
        group_instance_id=rnd.choice([None, "", "inst"]) if version >= 7 else None,
        retention_time_ms=rnd.choice([-1, 0, 86_400_000]) if version <= 4 else -1,
        topics=topics)


def frame_of(req, version, corr=7, client_id="scan-test"):
    return P.encode_request_frame(req, version, corr, client_id)[4:]


def scanned_as(header, req):
    """What scan_offset_commit must return for a frame decoded as (header, req)."""
    return (header, req.group_id, req.generation_id_or_member_epoch, req.member_id,
            req.group_instance_id, req.retention_time_ms,
            [(t.name, len(t.partitions),
              sum(len(p.committed_metadata.encode()) for p in t.partitions
                  if p.committed_metadata)) for t in req.topics])


def outcome(fn, frame):
    try:
        return "ok", fn(frame)
    except Exception as e:  # the exception's type and every attribute the server reads
        return (type(e), str(e), getattr(e, "field", None), getattr(e, "offset", None),
                getattr(e, "header", None), getattr(e, "api_key", None),
                getattr(e, "api_version", None), getattr(e, "correlation_id", None))


def expected(frame, code):
    """decode_request_frame's outcome, as scan and error frame must give it."""
    got = outcome(P.decode_request_frame, frame)
    if got[0] != "ok":
        return got, got
    header, req = got[1]
    want = P.encode_response_frame(error_response(req, header.api_version, code),
                                   header.api_version, header.correlation_id)
    return ("ok", scanned_as(header, req)), ("ok", want)


def check(frame, code=28):
    want_scan, want_frame = expected(frame, code)
    assert outcome(scan_offset_commit, frame) == want_scan
    assert outcome(lambda f: offset_commit_error_frame(f, code), frame) == want_frame
    return want_scan[0] == "ok"


@pytest.mark.parametrize("version", ALL)
def test_scan_and_error_frame_equal_the_codec_at_every_version(version):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    for i in range(150):
        frame = frame_of(random_request(rnd, version), version, corr=rnd.randrange(-5, 1 << 31),
                         client_id=rnd.choice(["c", "", None, "ü" * 3]))
        assert check(frame, CODES[i % len(CODES)])


@pytest.mark.parametrize("version", ALL)
def test_a_request_without_topics_and_topics_without_partitions(version):
    for topics in ([], [M.OffsetCommitRequestTopic(name="a", partitions=[])] * 3):
        frame = frame_of(M.OffsetCommitRequest(group_id="g", topics=topics), version)
        assert check(frame, 15)


def test_bytes_after_the_last_field_are_ignored_and_counted_as_the_decoder_does():
    for version in ALL:
        frame = frame_of(random_request(random.Random(version), version), version)
        for extra in (b"\x00", b"\xff" * 9):
            assert check(frame + extra)
            header = scan_offset_commit(frame + extra)[0]
            assert header.trailing_bytes == len(extra)


@pytest.mark.parametrize("version", ALL)
def test_malformed_frames_are_refused_with_the_decoders_error(version):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    refused = 0
    for _ in range(40):
        frame = frame_of(random_request(rnd, version, max_topics=3, max_parts=3), version)
        # Every truncation, then random damage: overwritten, inserted and deleted bytes.
        for cut in range(len(frame)):
            refused += not check(frame[:cut])
        for _ in range(60):
            b = bytearray(frame)
            at = rnd.randrange(8, len(b))       # the api key and version stay
            kind = rnd.randrange(3)
            if kind == 0:
                b[at] = rnd.choice([0x00, 0x7f, 0x80, 0xff, rnd.randrange(256)])
            elif kind == 1:
                b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4)))
            else:
                del b[at:at + rnd.randrange(1, 4)]
            refused += not check(bytes(b))
    assert refused > 0


def test_lying_counts_and_lengths_are_refused_before_any_work():
    for version in ALL:
        flex = version >= 8
        req = M.OffsetCommitRequest(group_id="g", topics=[M.OffsetCommitRequestTopic(
            name="t", partitions=[M.OffsetCommitRequestPartition(committed_metadata="abc")])])
        frame = frame_of(req, version)
        # the partitions count (right after the topic name "t"), claiming 2**31 - 2
        at = frame.index(b"\x02t" if flex else b"\x00\x01t") + (2 if flex else 3)
        huge = b"\xff\xff\xff\xff\x07" if flex else b"\x7f\xff\xff\xfe"
        old = 1 if flex else 4
        bad = frame[:at] + huge + frame[at + old:]
        assert not check(bad)
        assert outcome(scan_offset_commit, bad)[0] is P.TooManyElementsError
        # a negative string length where null is not allowed (the topic name)
        if not flex:
            at = frame.index(b"\x00\x01t")
            assert not check(frame[:at] + b"\xff\xfe" + frame[at + 2:])


def test_utf8_is_checked_exactly_as_the_decoder_checks_it():
    # Every 1- and 2-byte sequence and a spread of 3- and 4-byte ones, in a topic name and
    # in the metadata (which the scan validates without making a str).
    rnd = random.Random(5)
    seqs = [bytes([a]) for a in range(256)]
    seqs += [bytes([a, b]) for a in range(0x80, 0x100) for b in range(0, 0x100, 3)]
    seqs += [bytes([a, b, c]) for a in range(0xE0, 0xF0) for b in range(0x70, 0xD0, 7)
             for c in (0x7F, 0x80, 0xBF, 0xC0)]
    seqs += [bytes([a, rnd.choice([0x80, 0x8F, 0x90, 0xBF, 0xC0]), rnd.choice([0x80, 0xC0]),
                    rnd.choice([0x80, 0xBF, 0x7F])]) for a in range(0xF0, 0x100) for _ in range(12)]
    seqs += [b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xbf",
             b"\xc0\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80"]
    accepted = 0
    for version in (7, 8):
        req = M.OffsetCommitRequest(group_id="g", topics=[M.OffsetCommitRequestTopic(
            name="NNNN", partitions=[M.OffsetCommitRequestPartition(committed_metadata="MMMM")])])
        frame = frame_of(req, version)
        for placeholder in (b"NNNN", b"MMMM"):
            at = frame.index(placeholder)
            for s in seqs:
                v = (s + b"aaaa")[:4]
                accepted += check(frame[:at] + v + frame[at + 4:])
    assert accepted > 0


def test_versions_and_api_keys_outside_the_scan():
    req = M.OffsetCommitRequest(group_id="g")
    frame = frame_of(req, 8, corr=99)
    for version in (0, 1, 10, -1):
        bad = frame[:2] + version.to_bytes(2, "big", signed=True) + frame[4:]
        got = outcome(scan_offset_commit, bad)
        assert got == outcome(P.decode_request_frame, bad)
        assert got[0] is P.UnsupportedVersionError and got[-1] == 99
    other = frame_of(M.OffsetFetchRequest(group_id="g"), 7)
    with pytest.raises(ValueError, match="not OffsetCommit"):
        scan_offset_commit(other)
    with pytest.raises(ValueError, match="not OffsetCommit"):
        offset_commit_error_frame(other, 28)
    with pytest.raises(ValueError):
        offset_commit_error_frame(frame, 1 << 15)


def test_a_million_partitions_scan_to_one_topic_and_every_partition_is_answered():
    n = 1_000_000
    for version in (7, 8):
        req = M.OffsetCommitRequest(group_id="big", topics=[M.OffsetCommitRequestTopic(
            name="good", partitions=[M.OffsetCommitRequestPartition(partition_index=i,
                                                                    committed_offset=i)
                                     for i in range(n)])])
        frame = frame_of(req, version)
        header, *fields = scan_offset_commit(frame)
        assert header.api_version == version
        assert fields == ["big", -1, "", None, -1, [("good", n, 0)]]
        out = offset_commit_error_frame(frame, 28)
        corr, resp = P.decode_response_frame(out[4:], 8, version)
        assert corr == 7 and [t.name for t in resp.topics] == ["good"]
        parts = resp.topics[0].partitions
        assert len(parts) == n
        assert all(p.partition_index == i and p.error_code == 28 for i, p in enumerate(parts))


# ------------------------------------------------------------------- the shape check
def shape_of(req, version=8):
    frame = frame_of(req, version)
    return offsets.commit_shape(*scan_offset_commit(frame)[1:])


def big_commit(group="g", gen=-1, member="", instance=None, n=100_000, topics=1, name="t"):
    return M.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member,
        group_instance_id=instance,
        topics=[M.OffsetCommitRequestTopic(name="%s%d" % (name, k), partitions=[
            M.OffsetCommitRequestPartition(partition_index=i, committed_offset=1)
            for i in range(n)]) for k in range(topics)])


def shape_answer(h, shape, version=8):
    return offsets.shape_code(h.send(shape, version))


def test_a_simple_commit_too_large_is_refused_whole_and_writes_nothing(coord):
    h = coord(config=CFG)
    before = h.shard.snapshot(durable=False)
    assert shape_answer(h, shape_of(big_commit(n=100_000))) == E.INVALID_COMMIT_OFFSET_SIZE
    assert h.log == [] and h.shard.snapshot(durable=False) == before
    assert "g" not in h.shard.groups


def test_a_commit_within_the_bound_goes_the_normal_way(coord):
    h = coord(config=CFG)
    assert shape_answer(h, shape_of(big_commit(n=10))) == 0
    assert h.log == []                          # the shape wrote nothing: it is decoded next


def test_the_group_check_comes_before_the_size_bound(coord):
    h = coord(config=CFG)
    member, gen = classic_member(h, "cls")
    big = dict(n=50_000)
    assert shape_answer(h, shape_of(big_commit("cls", gen + 1, member, **big), 7)) == \
        E.ILLEGAL_GENERATION
    assert shape_answer(h, shape_of(big_commit("cls", gen, "stranger", **big), 7)) == \
        E.UNKNOWN_MEMBER_ID
    assert shape_answer(h, shape_of(big_commit("cls", gen, member, **big), 7)) == \
        E.INVALID_COMMIT_OFFSET_SIZE
    epoch = consumer_member(h, "cg", "m1")
    assert shape_answer(h, shape_of(big_commit("cg", epoch + 1, "m1", **big), 9), 9) == \
        E.STALE_MEMBER_EPOCH
    assert shape_answer(h, shape_of(big_commit("cg", epoch, "m1", **big), 8), 8) == \
        E.UNSUPPORTED_VERSION
    # a group that does not exist, membership claimed
    assert shape_answer(h, shape_of(big_commit("nope", 3, "m", **big), 8), 8) == \
        E.ILLEGAL_GENERATION
    assert shape_answer(h, shape_of(big_commit("nope", 3, "m", **big), 9), 9) == \
        E.GROUP_ID_NOT_FOUND
    assert shape_answer(h, shape_of(big_commit("", **big))) == E.INVALID_GROUP_ID


def test_the_shape_decides_as_the_handler_does_for_every_size(coord):
    # Around the bound, with one topic: the shape refuses exactly when the handler refuses
    # by the same lower bound before any per-partition work (then every partition gets 28).
    cfg = ShardConfig(group_initial_rebalance_delay_ms=0, message_max_bytes=20_000)
    h = coord(config=cfg)
    per = limits.RECORD_OVERHEAD_MIN + offsets._KEY_FIXED + len("g") + len("t0") + \
        offsets._VALUE_MIN
    edge = (cfg.message_max_bytes - limits.BATCH_OVERHEAD) // per
    for n in (edge - 1, edge, edge + 1, edge + 2):
        req = big_commit(n=n)
        code = shape_answer(h, shape_of(req))
        assert code == (E.INVALID_COMMIT_OFFSET_SIZE if n > edge else 0), n
        assert offsets._commit_too_large(req, cfg.message_max_bytes) == bool(code)


def test_a_million_empty_topics_are_bounded_too(coord):
    h = coord(config=CFG)
    req = M.OffsetCommitRequest(group_id="g", topics=[
        M.OffsetCommitRequestTopic(name="t%d" % i, partitions=[]) for i in range(100_000)])
    assert shape_answer(h, shape_of(req)) == E.INVALID_COMMIT_OFFSET_SIZE
    none = M.OffsetCommitRequest(group_id="g", topics=[])
    assert shape_answer(h, shape_of(none)) == 0


def test_limits_check_request_still_bounds_the_group_id(coord):
    h = coord(config=CFG)
    long_id = "g" * (CFG.name_max_bytes + 1)
    assert shape_answer(h, shape_of(big_commit(long_id, n=10))) == E.INVALID_GROUP_ID


def test_every_answer_the_runtime_gives_a_shape_carries_its_code():
    shape = shape_of(big_commit(n=10))
    for code in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.UNKNOWN_SERVER_ERROR):
        assert offsets.shape_code(error_response(shape, 8, code)) == code


def test_a_shape_through_the_runtime_coordinator(tmp_path):
    from groupcoord.runtime import RuntimeConfig, ShardSet

    async def go():
        coord = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=3,
                                       fsync="unsafe-no-fsync", shard_config=CFG))
        shape = shape_of(big_commit(n=100_000))
        # not loaded yet: the runtime answers the shape itself, with its state's error
        assert offsets.shape_code(coord.submit_nowait(shape, 8)) == E.NOT_COORDINATOR
        await coord.start()
        try:
            res = coord.submit_nowait(shape, 8)
            if isinstance(res, asyncio.Future):
                res = await res
            assert offsets.shape_code(res) == E.INVALID_COMMIT_OFFSET_SIZE
            assert all(s.log.next_offset == 0 for s in coord.shards)   # nothing written
        finally:
            await coord.close()
    asyncio.run(go())
