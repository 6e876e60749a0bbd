"""Request decoding is as tolerant as Kafka's (issue 17): for every request API and version we
serve, bytes after the last field the version defines are read past (and counted in
header.trailing_bytes), unknown tagged fields are skipped at the top level, in nested structs
and in the request header, and a truncated body is still a DecodeError. Then the client this
was found with: librdkafka's list_topics against `groupcoord serve`.

The bytes with unknown tags are built by an encoder written here from the schemas (not by our
codec, which cannot write a tag it does not know); it is checked to agree byte for byte with
the codec on the messages without injected tags.
"""
import json
import random
import re
import struct
import subprocess
import sys
import textwrap

import pytest

import groupcoord.protocol as P
import fuzz_codec as F
from serve_proc import serve  # noqa: F401  (fixture)

M = P.messages
SPECS = F.SPECS
REQUESTS = [(s.name, v) for s in sorted(SPECS.values(), key=lambda s: s.name)
            if s.type == "request" for v in s.versions]
FLEX_REQUESTS = [(n, v) for n, v in REQUESTS if SPECS[n].flexible(v)]
# What trails: one byte, librdkafka's three (see test_librdkafka_metadata_v13_all_topics),
# bytes that look like lengths and counts, and a long run.
EXTRAS = [b"\x00", b"\x01\x00\x00", b"\xff" * 7, b"\x80" * 5, bytes(range(256)) * 2]
_ids = [("%s-v%d" % c) for c in REQUESTS]
_flex_ids = [("%s-v%d" % c) for c in FLEX_REQUESTS]


# ------------------------------------------------------------------ an independent encoder

def _uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_FMT = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H",
        "uint32": ">I", "float64": ">d", "bool": ">?"}


def _scalar(t, x, flex, nullable):
    if t in _FMT:
        return struct.pack(_FMT[t], x)
    if t == "uuid":
        assert len(x) == 16
        return bytes(x)
    if x is None:
        assert nullable
        return b"\x00" if flex else (b"\xff\xff" if t == "string" else b"\xff\xff\xff\xff")
    raw = x.encode() if t == "string" else bytes(x)
    if flex:
        return _uvarint(len(raw) + 1) + raw
    return struct.pack(">h" if t == "string" else ">i", len(raw)) + raw


def _is_default(f, x):
    d = F._default(f)
    return x == d


class Wire:
    """Kafka's encoding of a message, with `inject(depth)` -> [(tag, payload)] unknown tagged
    fields added to every struct's tag section in flexible versions. `injected` counts the
    struct levels (0 = top) that received some."""

    def __init__(self, inject=None):
        self.inject = inject
        self.injected = []

    def field(self, f, x, v, flex, depth):
        nullable = f.nullable(v)
        if f.is_array:
            if x is None:
                assert nullable
                return b"\x00" if flex else b"\xff\xff\xff\xff"
            out = _uvarint(len(x) + 1) if flex else struct.pack(">i", len(x))
            for e in x:
                out += (self.struct(f.struct.fields, e, v, flex, depth + 1) if f.is_struct
                        else _scalar(f.elem_type, e, flex, False))
            return out
        if f.is_struct:
            if nullable:
                if x is None:
                    return b"\xff"
                return b"\x01" + self.struct(f.struct.fields, x, v, flex, depth + 1)
            return self.struct(f.struct.fields, x, v, flex, depth + 1)
        return _scalar(f.type, x, flex, nullable)

    def struct(self, fields, m, v, flex, depth=0):
        out = b""
        tagged = []
        for f in fields:
            if not f.present(v):
                continue
            x = getattr(m, f.py_name)
            if f.tagged(v):
                if not _is_default(f, x):
                    tagged.append((f.tag, self.field(f, x, v, flex, depth)))
                continue
            out += self.field(f, x, v, flex, depth)
        if flex:
            known = {f.tag for f in fields if f.tagged(v)}
            extra = self.inject(depth, known) if self.inject else []
            if extra:
                self.injected.append(depth)
            tags = sorted(tagged + extra)
            out += _uvarint(len(tags))
            for tag, payload in tags:
                out += _uvarint(tag) + _uvarint(len(payload)) + payload
        return out

    def message(self, m, v):
        spec = SPECS[type(m).__name__]
        return self.struct(spec.fields, m, v, spec.flexible(v))


def unknown_tags(depth, known):
    # Tags no version of this struct knows: one right above the known ones (or 0), one far.
    lo = max(known, default=-1) + 1
    return [(lo, b"\x07\xff\x80" + bytes([depth])), (lo + 1000 + depth, b"")]


def has_nested_struct(name, v):
    return any(f.is_struct and f.present(v) for f in SPECS[name].fields)


# ------------------------------------------------------------------ samples

def samples(name, v):
    """The default message, random ones, and (where the version has a nested struct) at
    least one whose nested structs are populated. Deterministic."""
    rng = random.Random("tolerance/%s/%d" % (name, v))
    out = [getattr(M, name)()] + [F.random_message(rng, name, v) for _ in range(4)]
    if has_nested_struct(name, v):
        for _ in range(200):
            m = F.random_message(rng, name, v)
            w = Wire(lambda d, k: [(999, b"")] if d > 0 else [])
            w.message(m, v)
            if w.injected or not SPECS[name].flexible(v):
                out.append(m)
                break
    return out


def frame_of(msg, v, corr=77, client="tolerance"):
    return P.encode_request_frame(msg, v, corr, client)[4:]


# ------------------------------------------------------------------ the matrix

@pytest.mark.parametrize("name,version", REQUESTS, ids=_ids)
def test_independent_encoder_agrees_with_the_codec(name, version):
    for m in samples(name, version):
        assert Wire().message(m, version) == P.encode(m, version)


@pytest.mark.parametrize("name,version", REQUESTS, ids=_ids)
def test_trailing_bytes_are_ignored(name, version):
    cls = getattr(M, name)
    for m in samples(name, version):
        body = P.encode(m, version)
        frame = frame_of(m, version)
        header = P.decode_request_frame(frame)[0]
        assert type(header) is P.RequestHeader and header.trailing_bytes == 0
        for extra in EXTRAS:
            assert P.decode(cls, body + extra, version) == m
            header, got = P.decode_request_frame(frame + extra)
            assert got == m
            assert header == P.TrailingRequestHeader(SPECS[name].api_key, version, 77,
                                                     "tolerance", trailing_bytes=len(extra))


@pytest.mark.parametrize("name,version", FLEX_REQUESTS, ids=_flex_ids)
def test_unknown_tagged_fields_are_skipped_at_every_level(name, version):
    cls = getattr(M, name)
    nested = False
    for m in samples(name, version):
        w = Wire(unknown_tags)
        data = w.message(m, version)
        assert 0 in w.injected
        nested = nested or any(d > 0 for d in w.injected)
        assert P.decode(cls, data, version) == m
        plain = P.encode(m, version)
        frame = frame_of(m, version)
        header, got = P.decode_request_frame(frame[:len(frame) - len(plain)] + data)
        assert got == m and header.trailing_bytes == 0
    assert nested == has_nested_struct(name, version)


def _with_header_tags(frame, client, tags):
    # Flexible header: api key, version, correlation id, int16 client id, then the tag count
    # (0 from our encoder), which is replaced by `tags`.
    at = 8 + 2 + len(client.encode())
    assert frame[at:at + 1] == b"\x00"
    return frame[:at] + tags + frame[at + 1:]


HEADER_TAGS = [_uvarint(1) + _uvarint(0) + _uvarint(3) + b"abc",              # tag 0 (unknown)
               _uvarint(2) + _uvarint(5) + _uvarint(0) + _uvarint(70000) + _uvarint(2) + b"zz"]


@pytest.mark.parametrize("name,version", FLEX_REQUESTS, ids=_flex_ids)
def test_unknown_tagged_fields_in_the_request_header_are_skipped(name, version):
    for m in samples(name, version)[:2]:
        frame = frame_of(m, version)
        for tags in HEADER_TAGS:
            header, got = P.decode_request_frame(_with_header_tags(frame, "tolerance", tags))
            assert got == m
            assert header == P.RequestHeader(SPECS[name].api_key, version, 77, "tolerance")
        # All at once: header tags, body tags at every level, trailing bytes.
        plain = P.encode(m, version)
        data = Wire(unknown_tags).message(m, version) + b"\x01\x00\x00"
        mixed = _with_header_tags(frame[:len(frame) - len(plain)] + data, "tolerance",
                                  HEADER_TAGS[1])
        header, got = P.decode_request_frame(mixed)
        assert got == m and header.trailing_bytes == 3


@pytest.mark.parametrize("name,version", REQUESTS, ids=_ids)
def test_a_truncated_body_is_still_an_error(name, version):
    cls = getattr(M, name)
    for m in samples(name, version):
        body = P.encode(m, version)
        frame = frame_of(m, version)
        header = P.decode_request_frame(frame)[0]
        # (ApiVersions v0-2 and ListGroups v0-2 have empty bodies: nothing to cut.)
        for cut in sorted({1, max(1, len(body) // 2), len(body)}) if body else ():
            with pytest.raises(P.DecodeError):
                P.decode(cls, body[:len(body) - cut], version)
            with pytest.raises(P.DecodeError) as ei:
                P.decode_request_frame(frame[:len(frame) - cut])
            assert ei.value.header == header


def test_a_truncated_unknown_tag_is_still_an_error():
    # Skipping a tag trusts its size only as far as the bytes that remain.
    m = M.HeartbeatRequest(group_id="g", member_id="m")
    data = P.encode(m, 4)[:-1] + _uvarint(1) + _uvarint(9) + _uvarint(10) + b"short"
    with pytest.raises(P.TruncatedError):
        P.decode(M.HeartbeatRequest, data, 4)


def test_responses_stay_strict():
    body = P.encode(M.MetadataResponse(), 13)
    assert P.decode(M.MetadataResponse, body, 13) == M.MetadataResponse()
    with pytest.raises(P.DecodeError):
        P.decode(M.MetadataResponse, body + b"\x00", 13)


# ------------------------------------------------------------------ librdkafka's Metadata v13

# Captured from confluent-kafka 2.16.1 (librdkafka 2.16): AdminClient.list_topics(), i.e. all
# topics. Its topic array count is written into a 4-byte placeholder that is shrunk to the
# varint it needs when there are topics, but left as is for "all topics" (null): 00 00 00 00.
# The first 00 is the null array; the other three push AllowAutoTopicCreation (01),
# IncludeTopicAuthorizedOperations (00) and the tag count (00) past the end of the v13 layout.
# Kafka reads this frame exactly as we do below (docs/decisions.md).
LIBRDKAFKA_ALL_TOPICS = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")


def test_librdkafka_metadata_v13_all_topics():
    header, req = P.decode_request_frame(LIBRDKAFKA_ALL_TOPICS)
    assert header == P.TrailingRequestHeader(3, 13, 3, "rdkafka", trailing_bytes=3)
    assert req == M.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)
    assert LIBRDKAFKA_ALL_TOPICS[-3:] == b"\x01\x00\x00"


# ------------------------------------------------------------------ against the server

_LIST_TOPICS = textwrap.dedent("""
    import json, sys
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient
    bootstrap = sys.argv[1]
    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4",
              "socket.timeout.ms": 10000}
    out = {}
    admin = AdminClient(dict(common, **{"client.id": "tol-admin"}))
    out["admin_all"] = sorted(admin.list_topics(timeout=20).topics)
    md = admin.list_topics("orders", timeout=20)
    out["admin_named"] = {t: len(m.partitions) for t, m in md.topics.items()}
    consumer = Consumer(dict(common, **{"client.id": "tol-consumer", "group.id": "tol"}))
    out["consumer_all"] = sorted(consumer.list_topics(timeout=20).topics)
    md = consumer.list_topics("audit", timeout=20)
    out["consumer_named"] = {t: len(m.partitions) for t, m in md.topics.items()}
    consumer.close()
    print(json.dumps(out))
""")


@pytest.mark.e2e                  # librdkafka, a real client
def test_confluent_kafka_list_topics(serve):
    pytest.importorskip("confluent_kafka")
    srv = serve(topics={"orders": 6, "audit": 2}, log_level="DEBUG")
    run = subprocess.run([sys.executable, "-c", _LIST_TOPICS, srv.bootstrap],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"admin_all": ["audit", "orders"], "admin_named": {"orders": 6},
                   "consumer_all": ["audit", "orders"], "consumer_named": {"audit": 2}}
    # The ignored bytes are logged at DEBUG once per client id and api, however often the
    # client sends them.
    lines = [ln for ln in srv.stderr_text().splitlines() if "after its last field" in ln]
    assert sorted(re.search(r"client id '([^']*)'", ln).group(1) for ln in lines) == [
        "tol-admin", "tol-consumer"], lines
    assert all("Metadata v13" in ln and "has 3 byte(s)" in ln for ln in lines), lines
