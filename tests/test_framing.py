"""FrameSplitter: a TCP byte stream in, complete frame payloads out.

Randomised tests are deterministic (derandomize=True) unless GROUPCOORD_TEST_SEED is set.
"""
import os
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, seed, settings
import hypothesis.strategies as st

import groupcoord.protocol as P

_ENV_SEED = os.environ.get("GROUPCOORD_TEST_SEED")
FUZZ = settings(max_examples=300, deadline=None, derandomize=_ENV_SEED is None, database=None,
                print_blob=True, suppress_health_check=[HealthCheck.too_slow])


def seeded(f):
    return seed(int(_ENV_SEED))(f) if _ENV_SEED else f


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def size(n: int) -> bytes:
    return struct.pack(">i", n)


AS_TYPES = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview,
            "memoryview-slice": lambda b: memoryview(b"\xee" + b + b"\xee")[1:-1]}


# ------------------------------------------------------------------ random chunking

@FUZZ
@seeded
@given(payloads=st.lists(st.binary(max_size=300) | st.sampled_from([b"", b"\x00\x00\x00\x00"]),
                         max_size=20),
       cuts=st.lists(st.integers(0, 8000), max_size=40),
       kinds=st.lists(st.sampled_from(sorted(AS_TYPES)), min_size=1, max_size=8))
def test_random_chunking_returns_exactly_the_frames(payloads, cuts, kinds):
    stream = b"".join(frame(p) for p in payloads)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    sp = P.FrameSplitter(max_frame_bytes=max((len(p) for p in payloads), default=0))
    got = []
    fed = 0
    consumed = 0
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        chunk = AS_TYPES[kinds[i % len(kinds)]](stream[a:b])
        out = sp.feed(chunk)
        assert all(type(f) is bytes for f in out)
        got.extend(out)
        fed += b - a
        consumed += sum(4 + len(f) for f in out)
        assert sp.pending == fed - consumed
    assert got == payloads
    assert sp.pending == 0
    assert sp.frames_split == len(payloads)


@FUZZ
@seeded
@given(payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=10))
def test_byte_at_a_time(payloads):
    stream = b"".join(frame(p) for p in payloads)
    sp = P.FrameSplitter()
    got = []
    for i in range(len(stream)):
        got.extend(sp.feed(stream[i:i + 1]))
    assert got == payloads and sp.pending == 0


# ------------------------------------------------------------------ fixed cases

def test_many_frames_in_one_chunk():
    payloads = [bytes([i % 256]) * (i % 7) for i in range(10000)]
    stream = b"".join(frame(p) for p in payloads)
    sp = P.FrameSplitter()
    assert sp.feed(stream) == payloads
    assert sp.pending == 0 and sp.frames_split == 10000
    # Many frames plus a partial one, then the rest.
    sp = P.FrameSplitter()
    assert sp.feed(stream + frame(b"tail")[:6]) == payloads
    assert sp.pending == 6
    assert sp.feed(b"il") == [b"tail"]
    assert sp.pending == 0


def test_many_frames_in_one_chunk_after_a_partial_frame():
    sp = P.FrameSplitter()
    assert sp.feed(frame(b"first")[:3]) == []
    rest = frame(b"first")[3:] + frame(b"") + frame(b"x" * 1000) + frame(b"z")
    assert sp.feed(rest) == [b"first", b"", b"x" * 1000, b"z"]
    assert sp.pending == 0


def test_zero_length_frame():
    sp = P.FrameSplitter()
    assert sp.feed(size(0)) == [b""]
    assert sp.pending == 0
    assert sp.feed(size(0) * 3) == [b"", b"", b""]
    assert sp.feed(b"\x00\x00") == []
    assert sp.pending == 2
    assert sp.feed(b"\x00\x00") == [b""]
    assert sp.frames_split == 5
    # max_frame_bytes=0 allows only empty frames.
    sp = P.FrameSplitter(max_frame_bytes=0)
    assert sp.feed(size(0)) == [b""]
    with pytest.raises(P.FrameTooLargeError):
        sp.feed(size(1))


def test_empty_feed():
    sp = P.FrameSplitter()
    assert sp.feed(b"") == [] and sp.pending == 0
    sp.feed(b"\x00\x00")
    assert sp.feed(b"") == [] and sp.pending == 2
    assert sp.feed(bytearray()) == [] and sp.feed(memoryview(b"")) == []
    assert sp.pending == 2


def test_pending_tracks_buffered_bytes():
    sp = P.FrameSplitter()
    assert sp.pending == 0
    assert sp.feed(b"\x00\x00") == [] and sp.pending == 2
    assert sp.feed(b"\x00\x0a") == [] and sp.pending == 4
    assert sp.feed(b"01234") == [] and sp.pending == 9
    assert sp.feed(b"56789" + b"\x00") == [b"0123456789"] and sp.pending == 1
    assert sp.feed(b"\x00\x00\x01" + b"Z" + b"\x00\x00\x00") == [b"Z"] and sp.pending == 3
    assert sp.feed(b"\x00") == [b""] and sp.pending == 0


@pytest.mark.parametrize("limit", [0, 1, 100, 1 << 20])
def test_size_above_max_raises_as_soon_as_the_size_arrives(limit):
    sp = P.FrameSplitter(max_frame_bytes=limit)
    assert sp.max_frame_bytes == limit
    hdr = size(limit + 1)
    for b in hdr[:3]:
        assert sp.feed(bytes([b])) == []        # 3 of the 4 size bytes: nothing to judge yet
    assert sp.pending == 3
    with pytest.raises(P.FrameTooLargeError) as ei:
        sp.feed(hdr[3:])                        # the 4th byte: raised before any payload
    assert (ei.value.size, ei.value.limit) == (limit + 1, limit)
    assert isinstance(ei.value, P.ProtocolError)
    # In one chunk, with no payload at all.
    with pytest.raises(P.FrameTooLargeError):
        P.FrameSplitter(max_frame_bytes=limit).feed(hdr)
    # Exactly the limit is fine: the splitter waits for the payload.
    sp = P.FrameSplitter(max_frame_bytes=limit)
    if limit:
        assert sp.feed(size(limit)) == [] and sp.pending == 4
        assert sp.feed(b"p" * limit) == [b"p" * limit] and sp.pending == 0
    else:
        assert sp.feed(size(0)) == [b""] and sp.pending == 0


def test_too_large_frame_after_valid_frames_in_the_same_stream():
    sp = P.FrameSplitter(max_frame_bytes=10)
    assert sp.feed(frame(b"ok")) == [b"ok"]
    with pytest.raises(P.FrameTooLargeError):
        sp.feed(frame(b"fine") + size(11))
    sp = P.FrameSplitter(max_frame_bytes=10)
    assert sp.feed(b"\x00\x00") == []
    with pytest.raises(P.FrameTooLargeError):
        sp.feed(b"\x00\x02ab" + size(2**31 - 1) + b"abc")


@pytest.mark.parametrize("n", [-1, -2, -(2**31), -(2**31) + 1])
def test_negative_size(n):
    with pytest.raises(P.FrameTooLargeError) as ei:
        P.FrameSplitter().feed(size(n))
    assert ei.value.size == n
    sp = P.FrameSplitter()
    sp.feed(size(n)[:1])
    with pytest.raises(P.FrameTooLargeError):
        sp.feed(size(n)[1:] + b"payload")


def test_default_limit_and_huge_sizes_do_not_allocate():
    assert P.DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    sp = P.FrameSplitter()
    assert sp.max_frame_bytes == P.DEFAULT_MAX_FRAME_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(P.FrameTooLargeError):
            P.FrameSplitter().feed(size(P.DEFAULT_MAX_FRAME_BYTES + 1))
        with pytest.raises(P.FrameTooLargeError):
            P.FrameSplitter().feed(size(2**31 - 1) + b"abc")
        # A size within the limit buffers only what arrived, not the declared size.
        sp = P.FrameSplitter()
        assert sp.feed(size(P.DEFAULT_MAX_FRAME_BYTES) + b"abc") == []
        assert sp.feed(b"def") == []
        assert sp.pending == 10
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_negative_max_frame_bytes_is_rejected():
    with pytest.raises(ValueError):
        P.FrameSplitter(max_frame_bytes=-1)


@pytest.mark.parametrize("kind", sorted(AS_TYPES))
def test_buffer_inputs(kind):
    stream = frame(b"hello") + frame(b"") + frame(b"world!")
    as_type = AS_TYPES[kind]
    sp = P.FrameSplitter()
    assert sp.feed(as_type(stream)) == [b"hello", b"", b"world!"]
    sp = P.FrameSplitter()
    assert sp.feed(as_type(stream[:7])) == []
    assert sp.feed(as_type(stream[7:15])) == [b"hello", b""]
    assert sp.feed(as_type(stream[15:])) == [b"world!"]
    assert sp.pending == 0


def test_input_buffers_are_copied_not_kept():
    # A partial frame fed from a mutable buffer must survive the caller reusing the buffer
    # (as a socket recv_into loop does).
    buf = bytearray(frame(b"abcdef")[:7])
    sp = P.FrameSplitter()
    assert sp.feed(buf) == []
    buf[:] = b"\xff" * len(buf)
    mv_src = bytearray(b"def")
    out = sp.feed(memoryview(mv_src))
    mv_src[:] = b"XXX"
    assert out == [b"abcdef"]
    # And frames returned from a mutable buffer are independent copies.
    buf = bytearray(frame(b"xyz"))
    out = sp.feed(buf)
    buf[4:] = b"000"
    assert out == [b"xyz"]


def test_non_buffer_input_is_a_type_error():
    sp = P.FrameSplitter()
    with pytest.raises(TypeError):
        sp.feed("text")
    with pytest.raises(TypeError):
        sp.feed(None)


def test_frames_round_trip_through_the_request_decoder():
    msgs = [P.messages.HeartbeatRequest(group_id="g%d" % i, generation_id=i, member_id="m")
            for i in range(50)]
    stream = b"".join(P.encode_request_frame(m, 4, i, "c") for i, m in enumerate(msgs))
    sp = P.FrameSplitter()
    frames = []
    for i in range(0, len(stream), 13):
        frames.extend(sp.feed(stream[i:i + 13]))
    decoded = [P.decode_request_frame(f) for f in frames]
    assert [h.correlation_id for h, _ in decoded] == list(range(50))
    assert [b for _, b in decoded] == msgs
