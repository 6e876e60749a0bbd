"""Bad input: the decoder raises a typed error naming what was wrong and where; it never
crashes, never loops, never allocates from an unchecked length. Also the encoder's
EncodeError cases.

Randomised tests are deterministic by default (hypothesis derandomize=True, and a fixed
seed for the plain random sweeps). To explore other inputs, set GROUPCOORD_TEST_SEED=N:
hypothesis then runs with @seed(N) and the sweeps with random.Random(N). The long-running
fuzzer is tests/fuzz_codec.py.
"""
import decimal
import functools
import os
import random
import struct
import time
import tracemalloc

import msgspec
import pytest
from hypothesis import HealthCheck, given, seed, settings
import hypothesis.strategies as st

import groupcoord.protocol as P
from groupcoord._native.krpc import MAX_ARRAY_ELEMENTS
from groupcoord.codegen.schema import elem_min_size
import fuzz_codec as F
from schema_strategies import SPECS, all_message_versions, message_strategy

M = P.messages
_ENV_SEED = os.environ.get("GROUPCOORD_TEST_SEED")
SEED = int(_ENV_SEED) if _ENV_SEED else 20240611

CASES = all_message_versions()
API_CASES = [(n, v) for n, v in CASES if SPECS[n].type in ("request", "response")]
REQUEST_CASES = [(n, v) for n, v in CASES if SPECS[n].type == "request"]
FLEX_CASES = [(n, v) for n, v in CASES if SPECS[n].flexible(v)]
_ids = functools.partial(map, lambda c: "%s-v%d" % c)

FUZZ = settings(max_examples=250, deadline=None, derandomize=_ENV_SEED is None,
                database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def seeded(f):
    """@seed(GROUPCOORD_TEST_SEED) when the variable is set (else derandomized)."""
    return seed(SEED)(f) if _ENV_SEED else f


# ------------------------------------------------------------------ wire building helpers

def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def s16(s):
    """Non-compact string (None = null)."""
    if s is None:
        return i16(-1)
    b = s.encode() if isinstance(s, str) else s
    return i16(len(b)) + b


def cs(s):
    """Compact string / bytes (None = null)."""
    if s is None:
        return b"\x00"
    b = s.encode() if isinstance(s, str) else s
    return uvarint(len(b) + 1) + b


def b32(b):
    return i32(len(b)) + b


def tags(*fields):
    """A tagged-fields section: [(tag, payload bytes)]."""
    out = uvarint(len(fields))
    for tag, payload in fields:
        out += uvarint(tag) + uvarint(len(payload)) + payload
    return out


def req_header(api_key, version, corr=0x01020304, client_id="cli", header_tags=None):
    h = i16(api_key) + i16(version) + i32(corr) + s16(client_id)
    if header_tags is not None:
        h += header_tags
    return h


def decode_fails(exc, cls, data, v):
    with pytest.raises(exc) as ei:
        P.decode(cls, data, v)
    return ei.value


def assert_names(e, field, data, offset=None):
    assert isinstance(e, P.DecodeError)
    assert e.field == field, e
    assert isinstance(e.offset, int) and 0 <= e.offset <= len(data), e
    if offset is not None:
        assert e.offset == offset, e
    assert field in str(e)


class _Peak:
    """Peak Python-heap allocation (tracemalloc) and wall time inside the block."""

    def __enter__(self):
        tracemalloc.start()
        tracemalloc.reset_peak()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return False


MIB = 1 << 20


# ------------------------------------------------------------------ deterministic samples

def _samples(name, v, n=3):
    """The default message and n random valid messages of (name, v), deterministic."""
    rng = random.Random("%d/%s/%d" % (SEED, name, v))
    return [getattr(M, name)()] + [F.random_message(rng, name, v) for _ in range(n)]


# ------------------------------------------------------------------ truncation

def _check_truncated(e, data_len):
    assert isinstance(e, (P.TruncatedError, P.TooManyElementsError)), repr(e)
    assert isinstance(e.field, str) and e.field and e.field != "<message>", repr(e)
    assert isinstance(e.offset, int) and 0 <= e.offset <= data_len, repr(e)


@pytest.mark.parametrize("name,version", API_CASES, ids=list(_ids(API_CASES)))
def test_every_prefix_of_a_body_is_rejected(name, version):
    cls = getattr(M, name)
    for msg in _samples(name, version):
        body = P.encode(msg, version)
        for k in range(len(body)):
            data = body[:k]
            try:
                P.decode(cls, data, version)
            except P.DecodeError as e:
                _check_truncated(e, k)
            else:
                pytest.fail("prefix %d/%d of %s decoded: %s" % (k, len(body), name, data.hex()))


@pytest.mark.parametrize("name,version", REQUEST_CASES, ids=list(_ids(REQUEST_CASES)))
def test_every_prefix_of_a_request_frame_is_rejected(name, version):
    for i, msg in enumerate(_samples(name, version, 1)):
        frame = P.encode_request_frame(msg, version, 0x0A0B0C0D, "client" if i else None)[4:]
        full_header, _ = P.decode_request_frame(frame)
        for k in range(len(frame)):
            try:
                P.decode_request_frame(frame[:k])
            except P.DecodeError as e:
                _check_truncated(e, k)
                if e.field.startswith("RequestHeader."):
                    assert e.header is None
                else:
                    assert e.header == full_header
            else:
                pytest.fail("prefix %d/%d decoded: %s" % (k, len(frame), frame[:k].hex()))


def test_truncation_names_the_field_and_offset():
    body = s16("group") + i32(7) + s16("member")
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, body[:-2], 0)
    assert_names(e, "HeartbeatRequest.member_id", body[:-2], offset=2 + 5 + 4 + 2)
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, body[:8], 0)
    assert_names(e, "HeartbeatRequest.generation_id", body[:8], offset=7)
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, b"\x00", 0)
    assert_names(e, "HeartbeatRequest.group_id", b"\x00", offset=0)
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, b"", 0)
    assert_names(e, "HeartbeatRequest.group_id", b"", offset=0)


# ------------------------------------------------------------------ random input

def _body_case(data, cases=CASES):
    return data.draw(st.sampled_from(cases), label="case")


@functools.lru_cache(maxsize=None)
def _msg_strategy(name, v):
    return message_strategy(name, v)


MUTATION = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "overwrite", "interesting", "truncate"]),
    st.integers(0, 1 << 16),                   # position (mod len + 1)
    st.integers(0, 7),                          # bit
    st.sampled_from([0xFF, 0x80, 0x7F, 0x00]),  # pattern byte
    st.integers(1, 6),                          # run length
    st.sampled_from(F.INTERESTING))


def apply_mutations(data: bytes, muts) -> bytes:
    b = bytearray(data)
    for op, pos, bit, pat, n, val in muts:
        pos %= len(b) + 1
        if op == "flip" and pos < len(b):
            b[pos] ^= 1 << bit
        elif op == "insert":
            b[pos:pos] = bytes([pat]) * n
        elif op == "delete":
            del b[pos:pos + n]
        elif op == "overwrite":
            b[pos:pos + n] = bytes([pat]) * n
        elif op == "interesting":
            b[pos:pos + len(val)] = val
        elif op == "truncate":
            del b[pos:]
    return bytes(b)


def _check(target, data):
    try:
        return F.check(target, data)
    except F.FuzzFailure as e:
        raise AssertionError("%s\n  input: %s\n  replay: PYTHONPATH=src python "
                             "tests/fuzz_codec.py --replay %s %s"
                             % (e, data.hex(), target, data.hex())) from e


@FUZZ
@seeded
@given(data=st.data(), raw=st.binary(max_size=300))
def test_random_bytes_as_a_body_of_any_codec(data, raw):
    name, v = _body_case(data)
    _check("body:%s:%d" % (name, v), raw)


@FUZZ
@seeded
@given(raw=st.binary(max_size=300))
def test_random_bytes_as_a_request_frame(raw):
    _check("request-frame", raw)


@FUZZ
@seeded
@given(data=st.data(), raw=st.binary(max_size=300))
def test_random_body_after_a_valid_request_header(data, raw):
    name, v = _body_case(data, REQUEST_CASES)
    key = SPECS[name].api_key
    hdr = req_header(key, v, client_id=data.draw(st.sampled_from([None, "", "c"])),
                     header_tags=b"\x00" if SPECS[name].flexible(v) else None)
    _check("request-frame", hdr + raw)


@FUZZ
@seeded
@given(data=st.data(), muts=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_bodies_of_every_codec(data, muts):
    name, v = _body_case(data)
    msg = data.draw(_msg_strategy(name, v), label="message")
    _check("body:%s:%d" % (name, v), apply_mutations(P.encode(msg, v), muts))


@FUZZ
@seeded
@given(data=st.data(), muts=st.lists(MUTATION, min_size=1, max_size=4),
       corr=st.integers(-(1 << 31), (1 << 31) - 1), client=st.none() | st.text(max_size=8))
def test_mutated_request_frames(data, muts, corr, client):
    name, v = _body_case(data, REQUEST_CASES)
    msg = data.draw(_msg_strategy(name, v), label="message")
    frame = P.encode_request_frame(msg, v, corr, client)[4:]
    _check("request-frame", apply_mutations(frame, muts))


def test_seeded_mutation_sweep_over_every_codec():
    """Every codec (request, response, data; body and frame form) gets mutated inputs."""
    rng = random.Random(SEED)
    outcomes = {}
    for name, v in CASES:
        for frame in (False, True):
            target = F.target_of(name, v, frame)
            valid = [F.encode_for(target, F.random_message(rng, name, v), v, rng)
                     for _ in range(3)]
            for _ in range(60):
                data = F.mutate(rng, rng.choice(valid), rng.choice(valid))
                res = _check(target, data)
                outcomes[res] = outcomes.get(res, 0) + 1
    # The sweep must exercise both sides: accepted inputs and every kind of rejection.
    for kind in ("ok", "DecodeError", "TruncatedError", "TooManyElementsError",
                 "InvalidUtf8Error"):
        assert outcomes.get(kind, 0) > 0, outcomes


# ------------------------------------------------------------------ lying lengths

def test_string_length_30000_with_3_bytes_remaining():
    data = i16(30000) + b"abc"
    with _Peak() as p:
        e = decode_fails(P.TruncatedError, M.HeartbeatRequest, data, 0)
    assert_names(e, "HeartbeatRequest.group_id", data, offset=2)
    assert p.peak < MIB
    flex = uvarint(30001) + b"abc"
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, flex, 4)
    assert_names(e, "HeartbeatRequest.group_id", flex)


def _join_v0(protocols_part):
    return s16("g") + i32(30000) + s16("m") + s16("consumer") + protocols_part


def _join_v6(protocols_part):
    return cs("g") + i32(30000) + i32(60000) + cs("m") + cs(None) + cs("consumer") + protocols_part


def test_bytes_length_2_31_minus_1():
    data = _join_v0(i32(1) + s16("range") + i32(2**31 - 1) + b"xyz")
    with _Peak() as p:
        e = decode_fails(P.TruncatedError, M.JoinGroupRequest, data, 0)
    assert_names(e, "JoinGroupRequestProtocol.metadata", data)
    assert p.peak < MIB and p.seconds < 0.5


def test_compact_bytes_length_2_32_minus_2():
    data = _join_v6(uvarint(2) + cs("range") + uvarint(2**32 - 1) + b"xyz")
    with _Peak() as p:
        e = decode_fails(P.TruncatedError, M.JoinGroupRequest, data, 6)
    assert_names(e, "JoinGroupRequestProtocol.metadata", data)
    assert p.peak < MIB and p.seconds < 0.5


@pytest.mark.parametrize("count", [2**31 - 1, 2**30, 2**26 + 1, 1000])
def test_array_count_that_cannot_fit(count):
    data = _join_v0(i32(count) + s16("range") + b32(b"md"))
    with _Peak() as p:
        e = decode_fails(P.TooManyElementsError, M.JoinGroupRequest, data, 0)
    assert_names(e, "JoinGroupRequest.protocols", data)
    assert p.peak < MIB and p.seconds < 0.5


@pytest.mark.parametrize("count", [2**32 - 2, 2**31, 2**26 + 1, 1000])
def test_compact_array_count_that_cannot_fit(count):
    data = _join_v6(uvarint(count + 1) + cs("range") + cs(b"md") + b"\x00" + b"\x00")
    with _Peak() as p:
        e = decode_fails(P.TooManyElementsError, M.JoinGroupRequest, data, 6)
    assert_names(e, "JoinGroupRequest.protocols", data)
    assert p.peak < MIB and p.seconds < 0.5


def test_array_count_times_min_element_size_boundary():
    # []string v0: min element = 2 bytes (empty string); 3 fit in 6 bytes, 4 do not.
    ok = i32(3) + s16("") * 3
    assert P.decode(M.DescribeGroupsRequest, ok, 0).groups == ["", "", ""]
    e = decode_fails(P.TooManyElementsError, M.DescribeGroupsRequest, i32(4) + s16("") * 3, 0)
    assert_names(e, "DescribeGroupsRequest.groups", ok, offset=4)
    # []struct{string, bytes} v0: min element = 2 + 4 = 6 bytes.
    elem = s16("") + b32(b"")
    assert len(P.decode(M.JoinGroupRequest, _join_v0(i32(2) + elem * 2), 0).protocols) == 2
    bad = _join_v0(i32(3) + elem * 2)
    e = decode_fails(P.TooManyElementsError, M.JoinGroupRequest, bad, 0)
    assert_names(e, "JoinGroupRequest.protocols", bad)
    # Array inside a struct inside an array: []int32 (4 bytes each).
    sub_ok = i32(1) + s16("t") + i32(2) + i32(0) + i32(1)
    sub_bad = i32(1) + s16("t") + i32(3) + i32(0) + i32(1)
    assert P.decode(M.ConsumerProtocolSubscription, i32(0) + b32(b"") + sub_ok, 1)
    e = decode_fails(P.TooManyElementsError, M.ConsumerProtocolSubscription,
                     i32(0) + b32(b"") + sub_bad, 1)
    assert e.field == "ConsumerProtocolSubscriptionTopicPartition.partitions"


def test_array_count_above_the_absolute_cap_even_if_the_bytes_are_there():
    # Compact []string v5: min element = 1 byte, so the remaining-bytes bound alone would
    # admit MAX_ARRAY_ELEMENTS + 1 empty strings; the absolute cap must not.
    n = MAX_ARRAY_ELEMENTS + 1
    data = uvarint(n + 1) + b"\x01" * n + b"\x00" + b"\x00"
    with _Peak() as p:
        e = decode_fails(P.TooManyElementsError, M.DescribeGroupsRequest, data, 5)
    assert_names(e, "DescribeGroupsRequest.groups", data, offset=len(uvarint(n + 1)))
    assert p.peak < MIB and p.seconds < 0.5


@pytest.mark.parametrize("name,version", [c for c in CASES if SPECS[c[0]].type != "data"],
                         ids=list(_ids([c for c in CASES if SPECS[c[0]].type != "data"])))
def test_min_element_sizes_are_sound(name, version):
    """count x minimum element size: the minimum must never exceed a real element's size,
    or valid messages would be rejected. Checked for every array on every path."""
    spec = SPECS[name]
    flex = spec.flexible(version)

    def default_elem(f):
        if f.is_struct:
            return getattr(M, f.struct.py_class)()
        return {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b"",
                "uuid": M.ZERO_UUID}.get(f.elem_type, 0)

    def walk(cls_name, fields, build):
        # build(value_of_this_struct) -> the whole message
        for f in fields:
            if not f.present(version) or f.tagged(version):
                continue
            if f.is_array:
                base = getattr(M, cls_name)()

                def with_list(lst, f=f, build=build, base=base):
                    return build(msgspec.structs.replace(base, **{f.py_name: lst}))
                elem = default_elem(f)
                one = P.encode(with_list([elem]), version)
                zero = P.encode(with_list([]), version)
                size = len(one) - len(zero)
                assert size >= elem_min_size(f, version, flex), (cls_name, f.name)
                if f.is_struct:
                    walk(f.struct.py_class, f.struct.fields,
                         lambda s, with_list=with_list: with_list([s]))
            elif f.is_struct and not f.nullable(version):
                base = getattr(M, cls_name)()
                walk(f.struct.py_class, f.struct.fields,
                     lambda s, f=f, base=base, build=build:
                     build(msgspec.structs.replace(base, **{f.py_name: s})))

    walk(name, spec.fields, lambda m: m)


# ------------------------------------------------------------------ negative lengths, nulls

@pytest.mark.parametrize("n", [-2, -100, -32768])
def test_negative_string_length_other_than_minus_1(n):
    # group_instance_id is nullable at v3, so -1 is valid there and anything below is not.
    head = s16("g") + i32(1) + s16("m")
    assert P.decode(M.HeartbeatRequest, head + i16(-1), 3).group_instance_id is None
    data = head + i16(n)
    e = decode_fails(P.DecodeError, M.HeartbeatRequest, data, 3)
    assert_names(e, "HeartbeatRequest.group_instance_id", data)
    assert not isinstance(e, P.TruncatedError)


@pytest.mark.parametrize("n", [-2, -1000, -(2**31)])
def test_negative_bytes_length_other_than_minus_1(n):
    # user_data is nullable bytes.
    assert P.decode(M.ConsumerProtocolSubscription, i32(0) + i32(-1), 0).user_data is None
    data = i32(0) + i32(n)
    e = decode_fails(P.DecodeError, M.ConsumerProtocolSubscription, data, 0)
    assert_names(e, "ConsumerProtocolSubscription.user_data", data)
    assert not isinstance(e, P.TruncatedError)


@pytest.mark.parametrize("n", [-2, -1000, -(2**31)])
def test_negative_array_count_other_than_minus_1(n):
    # MetadataRequest.topics is a nullable array from v1.
    assert P.decode(M.MetadataRequest, i32(-1), 1).topics is None
    data = i32(n)
    e = decode_fails(P.DecodeError, M.MetadataRequest, data, 1)
    assert_names(e, "MetadataRequest.topics", data)
    assert not isinstance(e, (P.TruncatedError, P.TooManyElementsError))


@pytest.mark.parametrize("label,cls,version,data,field", [
    ("string", M.HeartbeatRequest, 0, s16(None) + i32(1) + s16("m"), "HeartbeatRequest.group_id"),
    ("compact string", M.HeartbeatRequest, 4, cs(None) + i32(1) + cs("m") + cs(None) + b"\x00",
     "HeartbeatRequest.group_id"),
    ("bytes", M.JoinGroupRequest, 0, _join_v0(i32(1) + s16("r") + i32(-1)),
     "JoinGroupRequestProtocol.metadata"),
    ("compact bytes", M.JoinGroupRequest, 6, _join_v6(uvarint(2) + cs("r") + b"\x00" + b"\x00"
                                                      + b"\x00"),
     "JoinGroupRequestProtocol.metadata"),
    ("array", M.JoinGroupRequest, 0, _join_v0(i32(-1)), "JoinGroupRequest.protocols"),
    ("compact array", M.JoinGroupRequest, 6, _join_v6(b"\x00" + b"\x00"),
     "JoinGroupRequest.protocols"),
    ("array nullable only from v1", M.MetadataRequest, 0, i32(-1), "MetadataRequest.topics"),
    ("string nullable only from v3", M.HeartbeatRequest, 2, s16("g") + i32(1) + s16(None),
     "HeartbeatRequest.member_id"),
])
def test_null_in_a_non_nullable_field(label, cls, version, data, field):
    e = decode_fails(P.DecodeError, cls, data, version)
    assert_names(e, field, data)
    assert not isinstance(e, P.TruncatedError)


# ------------------------------------------------------------------ varints

@pytest.mark.parametrize("varint", [
    b"\x80\x80\x80\x80\x80\x00",            # 6 bytes
    b"\x81\x80\x80\x80\x80\x80\x80\x00",    # 8 bytes
    b"\xff\xff\xff\xff\x1f",                # 5 bytes but more than 32 bits
    b"\xff\xff\xff\xff\xff\x01",
])
def test_varint_longer_than_5_bytes_or_32_bits(varint):
    data = varint + b"g" * 16 + i32(1) + cs("m") + cs(None) + b"\x00"
    e = decode_fails(P.DecodeError, M.HeartbeatRequest, data, 4)
    assert_names(e, "HeartbeatRequest.group_id", data)
    assert not isinstance(e, P.TruncatedError)
    assert e.offset <= 5
    # In a compact array count and in a tagged-field count too.
    data = varint + b"\x01" * 16 + b"\x00\x00"
    e = decode_fails(P.DecodeError, M.DescribeGroupsRequest, data, 5)
    assert_names(e, "DescribeGroupsRequest.groups", data)
    data = cs("g") + i32(1) + cs("m") + cs(None) + varint + b"\x00" * 8
    e = decode_fails(P.DecodeError, M.HeartbeatRequest, data, 4)
    assert_names(e, "HeartbeatRequest.<tagged fields>", data)
    # And in the flexible request header's tagged fields.
    frame = req_header(12, 4, header_tags=varint) + b"\x00" * 8
    with pytest.raises(P.DecodeError) as ei:
        P.decode_request_frame(frame)
    assert_names(ei.value, "RequestHeader.<tagged fields>", frame)
    assert ei.value.header is None


def test_largest_5_byte_varint_is_a_length_not_a_format_error():
    data = b"\xff\xff\xff\xff\x0f" + b"abc"     # 2^32 - 1 -> length 2^32 - 2
    e = decode_fails(P.TruncatedError, M.HeartbeatRequest, data, 4)
    assert_names(e, "HeartbeatRequest.group_id", data)


def test_unterminated_varint_is_truncated():
    for data in (b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"):
        e = decode_fails(P.TruncatedError, M.HeartbeatRequest, data, 4)
        assert_names(e, "HeartbeatRequest.group_id", data, offset=len(data))


# ------------------------------------------------------------------ UTF-8

BAD_UTF8 = [b"\xff", b"abc\x80", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80",
            b"ok\xf8\x88\x80\x80\x80"]


@pytest.mark.parametrize("bad", BAD_UTF8, ids=[b.hex() for b in BAD_UTF8])
def test_invalid_utf8_names_the_field(bad):
    data = s16("g") + i32(1) + s16(bad)
    e = decode_fails(P.InvalidUtf8Error, M.HeartbeatRequest, data, 0)
    assert_names(e, "HeartbeatRequest.member_id", data, offset=2 + 1 + 4 + 2)
    data = cs("g") + i32(1) + cs(bad) + cs(None) + b"\x00"
    e = decode_fails(P.InvalidUtf8Error, M.HeartbeatRequest, data, 4)
    assert_names(e, "HeartbeatRequest.member_id", data, offset=2 + 4 + 1)
    data = _join_v0(i32(1) + s16(bad) + b32(b""))
    e = decode_fails(P.InvalidUtf8Error, M.JoinGroupRequest, data, 0)
    assert_names(e, "JoinGroupRequestProtocol.name", data, offset=len(_join_v0(i32(1))) + 2)
    data = i32(2) + s16("ok") + s16(bad)                       # element of a []string
    e = decode_fails(P.InvalidUtf8Error, M.DescribeGroupsRequest, data, 0)
    assert_names(e, "DescribeGroupsRequest.groups", data, offset=4 + 4 + 2)
    frame = req_header(12, 0, client_id=bad) + s16("g") + i32(1) + s16("m")
    with pytest.raises(P.InvalidUtf8Error) as ei:
        P.decode_request_frame(frame)
    assert_names(ei.value, "RequestHeader.client_id", frame, offset=10)
    assert ei.value.header is None


def test_valid_multibyte_utf8_decodes():
    s = "\u00e9\u4e2d\U0001f600"
    assert P.decode(M.HeartbeatRequest, s16("g") + i32(1) + s16(s), 0).member_id == s


# ------------------------------------------------------------------ unsupported api / version

def _unsupported_pairs():
    sv = P.supported_versions()
    pairs = [(9999, 0), (32767, 0), (-1, 0), (-32768, 0), (127, 0), (128, 0), (5, 0)]
    for key in (0, 12, 18, 68):
        lo, hi = sv[key]
        pairs += [(key, hi + 1), (key, 32767), (key, -1)]
        if lo > 0:
            pairs.append((key, lo - 1))
    return pairs


@pytest.mark.parametrize("api_key,version", _unsupported_pairs())
def test_unknown_api_key_or_version(api_key, version):
    for body in (b"", s16("g") + i32(1) + s16("m"), b"\xff" * 40):
        frame = i16(api_key) + i16(version) + i32(-559038737) + body
        with pytest.raises(P.UnsupportedVersionError) as ei:
            P.decode_request_frame(frame)
        e = ei.value
        assert not isinstance(e, P.DecodeError)
        assert (e.api_key, e.api_version, e.correlation_id) == (api_key, version, -559038737)
    with pytest.raises(P.UnsupportedVersionError) as ei:
        P.get_codec(api_key, version)
    assert (ei.value.api_key, ei.value.api_version) == (api_key, version)


def test_header_truncated_before_the_correlation_id():
    for frame in (b"", i16(9999), i16(9999) + i16(0) + b"\x00\x00"):
        with pytest.raises(P.TruncatedError) as ei:
            P.decode_request_frame(frame)
        assert ei.value.field.startswith("RequestHeader.")
        assert ei.value.header is None


# ------------------------------------------------------------------ tagged fields

UNKNOWN_TAGS = [(50, b""), (51, b"x"), (1000, b"\xff" * 200), (2**31, b"\x80\x80\x80"),
                (2**32 - 1, b"\x00")]


@pytest.mark.parametrize("name,version", FLEX_CASES, ids=list(_ids(FLEX_CASES)))
def test_unknown_tagged_fields_are_skipped(name, version):
    cls = getattr(M, name)
    known = {f.py_name: F._default(f) for f in SPECS[name].fields if f.tagged(version)}
    for msg in _samples(name, version, 2):
        # With no top-level tagged field set, the body ends in its tag count: one 0 byte.
        msg = msgspec.structs.replace(msg, **known)
        body = P.encode(msg, version)
        assert body[-1:] == b"\x00"
        data = body[:-1] + tags(*UNKNOWN_TAGS)
        assert P.decode(cls, data, version) == msg


def test_unknown_tagged_fields_in_nested_structs_and_next_to_known_ones():
    elem = cs("range") + cs(b"md") + tags((7, b"abc"), (300, b""))
    data = _join_v6(uvarint(2) + elem) + tags((9, b"\x00\x01"))
    m = P.decode(M.JoinGroupRequest, data, 6)
    assert m.protocols == [M.JoinGroupRequestProtocol(name="range", metadata=b"md")]
    assert m.group_id == "g" and m.protocol_type == "consumer"
    base = P.encode(M.ApiVersionsResponse(), 3)[:-1]
    data = base + tags((1, i64(42)), (3, b"\x01"), (77, b"junk"))
    m = P.decode(M.ApiVersionsResponse, data, 3)
    assert m.finalized_features_epoch == 42 and m.zk_migration_ready is True


def test_unknown_tagged_fields_in_the_flexible_request_header():
    body = cs("g") + i32(5) + cs("m") + cs(None) + b"\x00"
    for htags in (tags(*UNKNOWN_TAGS), tags((0, b"client-tag")), tags()):
        frame = req_header(12, 4, corr=99, client_id="cli", header_tags=htags) + body
        header, msg = P.decode_request_frame(frame)
        assert header == P.RequestHeader(12, 4, 99, "cli")
        assert msg == M.HeartbeatRequest(group_id="g", generation_id=5, member_id="m")


def test_header_tag_size_that_overruns_the_frame():
    frame = req_header(12, 4, header_tags=uvarint(1) + uvarint(0) + uvarint(1000) + b"ab")
    with pytest.raises(P.TruncatedError) as ei:
        P.decode_request_frame(frame)
    assert_names(ei.value, "RequestHeader.<tagged fields>", frame)


def test_known_tagged_field_whose_size_overruns_the_message():
    base = P.encode(M.ApiVersionsResponse(), 3)
    assert base[-1:] == b"\x00"
    base = base[:-1]
    # The declared size is larger than what remains.
    data = base + uvarint(1) + uvarint(1) + uvarint(100) + i64(1)
    e = decode_fails(P.TruncatedError, M.ApiVersionsResponse, data, 3)
    assert_names(e, "ApiVersionsResponse.<tagged fields>", data)
    # The declared size fits, but the value inside needs more than the declared size.
    data = base + uvarint(1) + uvarint(1) + uvarint(4) + i64(1)
    e = decode_fails(P.TruncatedError, M.ApiVersionsResponse, data, 3)
    assert_names(e, "ApiVersionsResponse.finalized_features_epoch", data)
    assert e.offset <= len(base) + 3 + 4
    data = base + uvarint(1) + uvarint(3) + uvarint(0)
    e = decode_fails(P.TruncatedError, M.ApiVersionsResponse, data, 3)
    assert_names(e, "ApiVersionsResponse.zk_migration_ready", data)
    # An array inside a tagged field counts against the tagged field's size, not the body.
    data = base + uvarint(1) + uvarint(0) + uvarint(2) + uvarint(3) + b"\x01" + b"\x00" * 30
    e = decode_fails(P.DecodeError, M.ApiVersionsResponse, data, 3)
    assert isinstance(e, (P.TooManyElementsError, P.TruncatedError))
    assert e.field.startswith("ApiVersionsResponse")
    # In a request: FetchRequest v12 cluster_id (tag 0) string longer than its tag.
    fbase = P.encode(M.FetchRequest(), 12)[:-1]
    data = fbase + uvarint(1) + uvarint(0) + uvarint(3) + cs("cluster-1")
    e = decode_fails(P.TruncatedError, M.FetchRequest, data, 12)
    assert_names(e, "FetchRequest.cluster_id", data)
    data = fbase + uvarint(1) + uvarint(0) + uvarint(len(cs("c1"))) + cs("c1")
    assert P.decode(M.FetchRequest, data, 12).cluster_id == "c1"


def test_huge_tag_count_terminates():
    base = P.encode(M.HeartbeatRequest(group_id="g", member_id="m"), 4)[:-1]
    for tail in (uvarint(2**32 - 1), uvarint(2**32 - 1) + b"\x01\x00" * 100,
                 uvarint(1) + uvarint(5) + uvarint(2**32 - 1)):
        data = base + tail
        with _Peak() as p:
            e = decode_fails(P.TruncatedError, M.HeartbeatRequest, data, 4)
        assert_names(e, "HeartbeatRequest.<tagged fields>", data)
        assert p.seconds < 0.5 and p.peak < MIB


# ------------------------------------------------------------------ trailing bytes

@pytest.mark.parametrize("name,version", API_CASES, ids=list(_ids(API_CASES)))
def test_trailing_bytes_after_a_complete_body(name, version):
    # Requests: read as Kafka reads them, the fields the version has, the rest ignored
    # (tests/test_codec_tolerance.py has the full matrix). Responses stay strict.
    cls = getattr(M, name)
    for msg in _samples(name, version, 1):
        body = P.encode(msg, version)
        for extra in (b"\x00", b"\xff" * 7):
            if SPECS[name].type == "request":
                assert P.decode(cls, body + extra, version) == msg
                continue
            e = decode_fails(P.DecodeError, cls, body + extra, version)
            assert e.offset == len(body) and e.field == "<end of message>", e
            assert "trailing" in str(e)


def test_trailing_bytes_after_a_request_frame_are_counted_in_the_header():
    msg = M.HeartbeatRequest(group_id="g", member_id="m")
    frame = P.encode_request_frame(msg, 4, 5, "c")
    assert P.decode_request_frame(frame[4:]) == (P.RequestHeader(12, 4, 5, "c"), msg)
    header, body = P.decode_request_frame(frame[4:] + b"\x00\x01\x02")
    assert header == P.TrailingRequestHeader(12, 4, 5, "c", trailing_bytes=3) and body == msg
    assert isinstance(header, P.RequestHeader)


def test_trailing_bytes_after_a_response_frame_are_rejected():
    frame = P.encode_response_frame(M.HeartbeatResponse(), 4, 5)
    assert P.decode_response_frame(frame[4:], 12, 4) == (5, M.HeartbeatResponse())
    with pytest.raises(P.DecodeError) as ei:
        P.decode_response_frame(frame[4:] + b"\x00", 12, 4)
    assert ei.value.offset == len(frame) - 4 and "trailing" in str(ei.value)


def test_body_decode_error_in_a_frame_carries_the_header():
    frame = req_header(12, 3, corr=42, client_id="c") + s16("g") + i32(1) + s16(b"\xff")
    with pytest.raises(P.InvalidUtf8Error) as ei:
        P.decode_request_frame(frame)
    assert ei.value.header == P.RequestHeader(12, 3, 42, "c")
    assert ei.value.field == "HeartbeatRequest.member_id"
    assert ei.value.offset == len(req_header(12, 3, client_id="c")) + 3 + 4 + 2


def test_decoders_accept_bytearray_and_memoryview():
    body = P.encode(M.HeartbeatRequest(group_id="g", member_id="m"), 4)
    for data in (bytearray(body), memoryview(body), memoryview(b"xx" + body)[2:]):
        assert P.decode(M.HeartbeatRequest, data, 4).group_id == "g"
    with pytest.raises(P.TruncatedError):
        P.decode(M.HeartbeatRequest, memoryview(body)[:-1], 4)


# ------------------------------------------------------------------ EncodeError

HB = M.HeartbeatRequest


def _hb(**kw):
    base = dict(group_id="g", generation_id=1, member_id="m")
    base.update(kw)
    return HB(**base)


def _join(**kw):
    base = dict(group_id="g", member_id="m", protocol_type="consumer",
                protocols=[M.JoinGroupRequestProtocol(name="range", metadata=b"md")])
    base.update(kw)
    return M.JoinGroupRequest(**base)


def _proto(**kw):
    return _join(protocols=[M.JoinGroupRequestProtocol(**dict(dict(name="r", metadata=b""),
                                                              **kw))])


ENCODE_ERRORS = [
    # wrong Python type in a field
    ("str in int32", _hb(generation_id="1"), 0, "HeartbeatRequest.generation_id"),
    ("None in int32", _hb(generation_id=None), 0, "HeartbeatRequest.generation_id"),
    ("int in string", _hb(group_id=5), 0, "HeartbeatRequest.group_id"),
    ("bytes in string", _hb(member_id=b"m"), 4, "HeartbeatRequest.member_id"),
    ("str in bytes", _proto(metadata="md"), 0, "JoinGroupRequestProtocol.metadata"),
    ("int in bytes", _proto(metadata=5), 6, "JoinGroupRequestProtocol.metadata"),
    ("int as array", _join(protocols=5), 0, "JoinGroupRequest.protocols"),
    ("int as array element", _join(protocols=[5]), 0, "JoinGroupRequest.protocols"),
    ("int in []string", M.DescribeGroupsRequest(groups=[1]), 0, "DescribeGroupsRequest.groups"),
    ("bytearray uuid", M.MetadataRequest(topics=[M.MetadataRequestTopic(
        topic_id=bytearray(16))]), 10, "MetadataRequestTopic.topic_id"),
    ("short uuid", M.MetadataRequest(topics=[M.MetadataRequestTopic(topic_id=b"x" * 15)]), 10,
     "MetadataRequestTopic.topic_id"),
    # int out of range
    ("int32 overflow", _hb(generation_id=2**31), 0, "HeartbeatRequest.generation_id"),
    ("int32 underflow", _hb(generation_id=-(2**31) - 1), 0, "HeartbeatRequest.generation_id"),
    ("int16 overflow", M.HeartbeatResponse(error_code=2**15), 0, "HeartbeatResponse.error_code"),
    ("int64 overflow", M.ListOffsetsRequest(topics=[M.ListOffsetsRequestListOffsetsTopic(
        name="t", partitions=[M.ListOffsetsRequestListOffsetsPartition(timestamp=2**63)])]), 1,
     "ListOffsetsRequestListOffsetsPartition.timestamp"),
    ("int8 out of range", M.FindCoordinatorRequest(key="k", key_type=128), 1,
     "FindCoordinatorRequest.key_type"),
    # None in a non-nullable field
    ("None string", _hb(group_id=None), 0, "HeartbeatRequest.group_id"),
    ("None compact string", _hb(member_id=None), 4, "HeartbeatRequest.member_id"),
    ("None array", _join(protocols=None), 6, "JoinGroupRequest.protocols"),
    ("None bytes", _proto(metadata=None), 0, "JoinGroupRequestProtocol.metadata"),
    ("None in non-nullable next to a nullable",
     _hb(member_id=None, group_instance_id=None), 3, "HeartbeatRequest.member_id"),
    # non-default value in a field the version lacks (and the field is not ignorable)
    ("absent field", _hb(group_instance_id="i"), 2, "HeartbeatRequest.group_instance_id"),
    ("absent field nested", M.OffsetCommitRequest(group_id="g", member_id="m", topics=[
        M.OffsetCommitRequestTopic(name="t", partitions=[
            M.OffsetCommitRequestPartition(commit_timestamp=5)])]), 2,
     "OffsetCommitRequestPartition.commit_timestamp"),
    # string longer than the int16 limit in a non-flexible string
    ("long string", _hb(group_id="x" * 32768), 0, "HeartbeatRequest.group_id"),
    ("long multibyte string", _hb(member_id="\u00e9" * 16384), 3, "HeartbeatRequest.member_id"),
    ("long string in []string", M.DescribeGroupsRequest(groups=["a", "b" * 40000]), 4,
     "DescribeGroupsRequest.groups"),
    ("surrogate", _hb(group_id="\ud800"), 4, "HeartbeatRequest.group_id"),
]


@pytest.mark.parametrize("label,msg,version,field", ENCODE_ERRORS,
                         ids=[c[0] for c in ENCODE_ERRORS])
def test_encode_errors(label, msg, version, field):
    with pytest.raises(P.EncodeError) as ei:
        P.encode(msg, version)
    if field is not None:
        assert ei.value.field == field, ei.value
        assert field in str(ei.value)
    # The same through the frame encoder.
    if SPECS[type(msg).__name__].type == "request":
        with pytest.raises(P.EncodeError):
            P.encode_request_frame(msg, version, 1, "c")


def test_absent_ignorable_field_is_dropped_not_an_error():
    # rebalance_timeout_ms is ignorable and absent at v0: dropped silently.
    default = M.JoinGroupRequest().rebalance_timeout_ms
    body = P.encode(_join(rebalance_timeout_ms=default + 5), 0)
    assert body == P.encode(_join(rebalance_timeout_ms=default), 0)
    assert P.decode(M.JoinGroupRequest, body, 0).rebalance_timeout_ms == default


def test_long_string_is_fine_in_a_flexible_version():
    body = P.encode(_hb(group_id="x" * 40000), 4)
    assert P.decode(HB, body, 4).group_id == "x" * 40000


def test_wrong_message_type_for_the_codec():
    with pytest.raises(P.EncodeError):
        P.get_codec(12, 0).encode_request(_join())
    with pytest.raises(P.EncodeError):
        P.get_codec(12, 0).encode_response(_hb())
    with pytest.raises(P.EncodeError):
        P.encode_request_frame(object(), 0, 1)
    with pytest.raises(P.EncodeError):
        P.encode(object(), 0)


# Known codec bugs (these tests fail until fixed; see the report that added them).

@pytest.mark.parametrize("value", [1.5, -0.5, decimal.Decimal("2.7")], ids=repr)
def test_non_integer_number_in_an_int_field_is_an_encode_error(value):
    # BUG: Cython's C-integer conversion falls back to nb_int (__int__), so a float or
    # Decimal in an int field is silently truncated (1.5 -> 1, Decimal("2.7") -> 2).
    with pytest.raises(P.EncodeError) as ei:
        P.encode(_hb(generation_id=value), 0)
    assert ei.value.field == "HeartbeatRequest.generation_id"


@pytest.mark.parametrize("value", [None, "false", b""], ids=repr)
def test_non_bool_in_a_bool_field_is_an_encode_error(value):
    # BUG: write_bool encodes the truthiness of any object: None (a non-nullable field)
    # silently becomes false, and the string "false" becomes true.
    with pytest.raises(P.EncodeError) as ei:
        P.encode(M.DescribeGroupsRequest(groups=[], include_authorized_operations=value), 3)
    assert ei.value.field == "DescribeGroupsRequest.include_authorized_operations"


def test_non_contiguous_buffer_in_a_bytes_field_is_an_encode_error():
    # BUG: write_bytes_obj only catches TypeError from PyObject_GetBuffer; a strided
    # memoryview raises BufferError, which escapes as a non-ProtocolError.
    with pytest.raises(P.EncodeError) as ei:
        P.encode(_proto(metadata=memoryview(b"abcdef")[::2]), 0)
    assert ei.value.field == "JoinGroupRequestProtocol.metadata"


def test_unencodable_client_id_is_an_encode_error():
    # BUG: encode_request_frame writes client_id outside _encode_into, so a lone surrogate
    # raises UnicodeEncodeError instead of EncodeError (an int client_id is an EncodeError).
    with pytest.raises(P.EncodeError) as ei:
        P.encode_request_frame(_hb(), 0, 1, client_id="\ud800")
    assert ei.value.field == "RequestHeader.client_id"
