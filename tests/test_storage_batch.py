"""RecordBatch v2 codec (native/recordbatch.pyx): round trips, kafka-python parity in both
directions, every-byte truncation / corruption, and the native cursor (native/recordbatch.pxd)
against the pure-Python oracle (tests/batch_oracle.py) on random batches: same bytes written,
same records and header fields read, and the same verdict -- valid, truncated or corrupt, at
the same position -- on damaged bytes, for the log's decoder and for the shard loader's walk
(recordload.mark_last), which share the cursor. The random tests are seeded and print their
seed (BATCH_ORACLE_SEED=n adds one)."""
import os
import random
import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

import batch_oracle as oracle
import groupcoord.protocol  # noqa: F401  (loads _native.codec, which recordload needs, first)
from groupcoord._native.recordload import KeyIndex, mark_last
from groupcoord.storage import batch as rb

TS = 1_700_000_000_123


def sample(seed=1, n=50):
    r = random.Random(seed)
    out = []
    for i in range(n):
        key = bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 5, 63, 64, 200])))
        value = None if r.random() < 0.2 else bytes(r.getrandbits(8) for _ in range(
            r.choice([0, 1, 20, 127, 128, 16383, 16384])))
        out.append((key, value))
    return out


def kafka_python_read(buf):
    mr = MemoryRecords(buf)
    got = []
    while mr.has_next():
        b = mr.next_batch()
        assert b.validate_crc()
        assert b.magic == 2 and b.compression_type == 0
        got.extend((r.offset, r.timestamp, r.key, r.value) for r in b)
    return got


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_round_trip_null_values_empty_keys(seed):
    recs = sample(seed)
    b = rb.encode_batch(recs, 1000, TS)
    got, end = rb.decode(b)
    assert end == len(b)
    assert got == [(1000 + i, k, v) for i, (k, v) in enumerate(recs)]
    assert oracle.decode(b) == (got, end)


def test_native_and_python_encoders_write_the_same_bytes():
    for seed in range(5):
        recs = sample(seed, 20)
        assert rb.encode_batch(recs, seed * 7, TS + seed) == oracle.encode_batch(recs, seed * 7,
                                                                                 TS + seed)


def test_large_values_and_null_keys():
    big = bytes(range(256)) * 8192            # 2 MiB
    recs = [(b"k", big), (None, b"v"), (b"", b""), (b"t", None), (None, None)]
    b = rb.encode_batch(recs, 0, TS)
    got, _ = rb.decode(b)
    assert got == [(i, k, v) for i, (k, v) in enumerate(recs)]
    (info,), stop, reason, truncated = rb.scan(b)[0], *rb.scan(b)[1:]
    assert info[:4] == (0, 0, 4, 5) and stop == len(b) and reason is None


def test_header_fields():
    b = rb.encode_batch([(b"a", b"1"), (b"b", b"2")], 42, TS, leader_epoch=7)
    (base, length, epoch, magic, crc, attrs, lod, bts, mts, pid, pep, bseq,
     count) = struct.unpack_from(">qiibIhiqqqhii", b)
    assert (base, length, epoch, magic, attrs, lod, bts, mts, pid, pep, bseq, count) == (
        42, len(b) - 12, 7, 2, 0, 1, TS, TS, -1, -1, -1, 2)
    import crc32c
    assert crc == crc32c.crc32c(b[21:])


def test_empty_batch_is_refused_and_bad_types_raise():
    with pytest.raises(ValueError):
        rb.encode_batch([], 0, TS)
    with pytest.raises(TypeError):
        rb.encode_batch([("str", b"v")], 0, TS)
    with pytest.raises(TypeError):
        rb.encode_batch([(b"k", bytearray(b"v"))], 0, TS)


def test_kafka_python_reads_our_bytes():
    buf = b"".join(rb.encode_batch(sample(s, 30), s * 30, TS + s) for s in range(4))
    got = kafka_python_read(buf)
    want = [(s * 30 + i, TS + s, k, v) for s in range(4) for i, (k, v) in
            enumerate(sample(s, 30))]
    assert got == want


def test_we_read_kafka_python_bytes():
    parts = []
    want = []
    for s in range(3):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 24)
        for i, (k, v) in enumerate(sample(s, 25)):
            headers = [("h", b"x")] if i % 7 == 3 else []
            builder.append(i, TS + i, k, v, headers)
            want.append((i, k, v))
        parts.append(bytes(builder.build()))
    buf = b"".join(parts)
    assert rb.decode(buf)[0] == want
    assert oracle.decode(buf)[0] == want
    batches = rb.decode_batches(buf)
    assert [b[2] for b in batches] == [TS + 24] * 3        # maxTimestamp
    assert [r[1] for r in batches[0][5]] == list(range(25))  # timestamp deltas


def test_every_truncation_is_a_truncated_error_or_a_partial_stop():
    a = rb.encode_batch(sample(4, 5), 0, TS)
    b = rb.encode_batch(sample(5, 5), 5, TS)
    buf = a + b
    for cut in range(len(a) + 1, len(buf)):
        with pytest.raises(rb.TruncatedBatchError) as ei:
            rb.decode(buf[:cut])
        assert ei.value.position == len(a)
        recs, nxt = rb.decode(buf[:cut], partial=True)
        assert nxt == len(a) and len(recs) == 5
        infos, stop, reason, truncated = rb.scan(buf[:cut])
        assert len(infos) == 1 and stop == len(a) and truncated


def test_every_bit_flip_in_the_crc_region_or_length_is_detected():
    b = rb.encode_batch(sample(6, 4), 0, TS)
    for i in list(range(8, 12)) + list(range(16, len(b))):
        for bit in (0, 3, 7):
            bad = bytearray(b)
            bad[i] ^= 1 << bit
            with pytest.raises(rb.CorruptBatchError) as ei:
                rb.decode(bytes(bad), path="seg.log")
            assert ei.value.path == "seg.log" and ei.value.position == 0
            assert rb.scan(bytes(bad))[2] is not None
            with pytest.raises(rb.CorruptBatchError):
                oracle.decode(bytes(bad))


def test_lying_lengths_never_allocate():
    # A record count / length claiming far more than the buffer holds, with a matching CRC.
    import crc32c
    b = bytearray(rb.encode_batch([(b"k", b"v")], 0, TS))
    struct.pack_into(">i", b, 57, 0x7FFFFFFF)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    with pytest.raises(rb.CorruptBatchError, match="recordCount"):
        rb.decode(bytes(b))
    b = bytearray(rb.encode_batch([(b"k", b"v")], 0, TS))
    b[61] = 0xFE                                           # record length varint: 127
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    with pytest.raises(rb.CorruptBatchError, match="record length"):
        rb.decode(bytes(b))
    big = struct.pack(">qi", 0, 0x7FFFFFF0) + bytes(60)
    with pytest.raises(rb.CorruptBatchError, match="batchLength"):
        rb.decode(big)


def test_find_valid_batch_and_min_offset():
    a = rb.encode_batch([(b"k", b"v")] * 3, 0, TS)
    b = rb.encode_batch([(b"k", b"w")] * 3, 3, TS)
    junk = b"\x00\x02" * 40
    buf = a + junk + b
    assert rb.find_valid_batch(buf, 1) == len(a) + len(junk)
    assert rb.find_valid_batch(buf, 1, -1, 4) == -1
    assert rb.decode(a + b, min_offset=4)[0] == [(4, b"k", b"w"), (5, b"k", b"w")]


def test_explicit_encode_keeps_gaps_and_last_offset_delta():
    b = rb.encode_batch_explicit([(1, 5, b"a", b"1"), (4, 9, b"b", None)], 10, TS, TS + 9, 6)
    assert rb.decode(b)[0] == [(11, b"a", b"1"), (14, b"b", None)]
    assert rb.scan(b)[0][0][1:5] == (10, 6, 2, TS + 9)
    assert [(r.offset, r.timestamp) for r in MemoryRecords(b).next_batch()] == [
        (11, TS + 5), (14, TS + 9)]
    with pytest.raises(ValueError):
        rb.encode_batch_explicit([(4, 0, b"a", b"1"), (4, 0, b"b", b"2")], 0, TS, TS, 6)


# ---------------------------------------------------------------- native vs the oracle
SEEDS = list(range(6)) + ([int(os.environ["BATCH_ORACLE_SEED"])]
                          if os.environ.get("BATCH_ORACLE_SEED") else [])


def blob(r, nullable=True):
    if nullable and r.random() < 0.15:
        return None
    return r.randbytes(r.choice([0, 0, 1, 3, 17, 63, 64, 127, 128, 300, 16384]))


def random_records(r, headers):
    n = r.randint(1, 12)
    ods = sorted(r.sample(range(n + r.randint(0, 20)), n))
    recs = []
    for od in ods:
        td = r.choice([0, 1, -1, r.randint(-2**31, 2**31), r.randint(-2**63, 2**63 - 1)])
        hs = [(blob(r, False), blob(r)) for _ in range(r.randint(0, 3))] if headers else []
        recs.append((od, td, blob(r), blob(r), hs))
    return recs, ods[-1] + r.randint(0, 5)


def random_batch(r, headers=True, pad=False):
    recs, lod = random_records(r, headers)
    base = r.choice([0, r.randint(0, 2**62)])
    bts = r.randint(0, 2**45)
    args = (base, bts, bts + r.randint(0, 10**6), lod, r.randint(-1, 2**31 - 1))
    if pad:
        return oracle.encode(recs, *args, pad=lambda: r.choice([0, 0, 0, 1, 4, 5, 9])), recs
    return oracle.encode(recs, *args), recs


def verdict(fn, buf):
    """("ok", result) or (error class name, batch position)."""
    try:
        return ("ok", fn(buf))
    except rb.CorruptBatchError as exc:
        return (type(exc).__name__, exc.position)


def native_walk(buf):
    # The loader's pass over the same bytes: records and batches it counted.
    got, batches, used = mark_last(buf, len(buf), KeyIndex(), bytearray(), 0, "seg", 0, False)
    return got, batches, used


@pytest.mark.parametrize("seed", SEEDS)
def test_native_writes_the_oracles_bytes(seed):
    print("seed", seed)
    r = random.Random(seed)
    for _ in range(50):
        recs, lod = random_records(r, headers=False)
        base, bts, epoch = r.randint(0, 2**62), r.randint(0, 2**45), r.randint(-1, 99)
        mts = bts + r.randint(0, 1000)
        want = oracle.encode(recs, base, bts, mts, lod, epoch)
        assert rb.encode_batch_explicit([x[:4] for x in recs], base, bts, mts, lod,
                                        epoch) == want
        plain = [(k, v) for _od, _td, k, v, _h in recs]
        assert rb.encode_batch(plain, base, bts, epoch) == oracle.encode_batch(plain, base, bts,
                                                                               epoch)


@pytest.mark.parametrize("seed", SEEDS)
def test_native_reads_what_the_oracle_reads(seed):
    print("seed", seed)
    r = random.Random(seed)
    for _ in range(20):
        parts = [random_batch(r, headers=r.random() < 0.7, pad=r.random() < 0.5)[0]
                 for _ in range(r.randint(1, 5))]
        buf = b"".join(parts)
        want = verdict(oracle.decode_batches, buf)
        assert verdict(rb.decode_batches, buf) == want
        assert verdict(rb.decode, buf) == verdict(oracle.decode, buf)
        if want[0] == "ok":              # (over-long padding makes some batches corrupt)
            n = sum(len(b[5]) for b in want[1])
            assert native_walk(buf) == (n, len(parts), len(buf))
            infos, stop, reason, _t = rb.scan(buf)
            assert (len(infos), stop, reason) == (len(parts), len(buf), None)


def damage(r, buf):
    """One random kind of damage; the CRC is made to match again for record-level damage so
    that the record checks, not the CRC, must catch it."""
    b = bytearray(buf)
    kind = r.randrange(5)
    if kind == 0:                                    # a bit anywhere
        i = r.randrange(len(b))
        b[i] ^= 1 << r.randrange(8)
    elif kind == 1:                                  # a cut anywhere
        del b[r.randrange(len(b)):]
    elif kind == 2:                                  # a header field, CRC fixed
        at = r.choice([8, 16, 21, 23, 57])
        size = {8: 4, 16: 1, 21: 2, 23: 4, 57: 4}[at]
        b[at:at + size] = r.choice([r.randbytes(size), r.randrange(4).to_bytes(size, "big")])
    else:                                            # record bytes, CRC fixed
        for _ in range(r.randint(1, 3)):
            if len(b) > 61:
                i = r.randrange(61, len(b))
                b[i] = r.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, r.randrange(256)])
    if kind >= 2 and len(b) >= 61:
        length = struct.unpack_from(">i", b, 8)[0]
        end = 12 + length
        if 49 <= length and end <= len(b):
            struct.pack_into(">I", b, 17, crc32c(bytes(b[21:end])))
    return bytes(b)


def bent_batch(r):
    """A batch written faithfully from values that break one rule of the format: offset
    deltas not increasing or past lastOffsetDelta, a null header key, bytes after a record's
    fields or after the last record."""
    recs, lod = random_records(r, headers=True)
    recs = [list(x) for x in recs]
    kind = r.randrange(5)
    junk = b""
    if kind == 0 and len(recs) > 1:
        i = r.randrange(len(recs) - 1)
        recs[i + 1][0] = recs[i][0] - r.randint(0, 1)
    elif kind == 1:
        recs[-1][0] = lod + r.randint(1, 3)
    elif kind == 2:
        recs[r.randrange(len(recs))][4].append((None, b"x"))
    elif kind == 3:
        junk = r.randbytes(r.randint(1, 3))
    b = bytearray(oracle.encode([tuple(x) for x in recs], 0, 0, 0, lod, junk=junk))
    if kind == 4:
        b += r.randbytes(r.randint(1, 8))
        struct.pack_into(">i", b, 8, len(b) - 12)
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


@pytest.mark.parametrize("seed", SEEDS)
def test_same_verdict_on_damaged_batches(seed):
    print("seed", seed)
    r = random.Random(seed)
    seen = set()
    for _ in range(400):
        first, _recs = random_batch(r, headers=r.random() < 0.5)
        bad = damage(r, first) if r.random() < 0.7 else bent_batch(r)
        buf = bad + random_batch(r)[0] if r.random() < 0.3 else bad
        want = verdict(oracle.decode_batches, buf)
        got = verdict(rb.decode_batches, buf)
        assert got == want, (seed, buf.hex())
        seen.add(want[0])
        walk = verdict(native_walk, buf)
        if want[0] == "ok":
            assert walk[0] == "ok"
        else:
            assert walk == want
            infos, stop, reason, truncated = rb.scan(buf)
            assert (stop, reason is not None, truncated) == (
                want[1], True, want[0] == "TruncatedBatchError")
    assert seen == {"ok", "CorruptBatchError", "TruncatedBatchError"}


def test_varint_limits():
    """5 bytes for a 32-bit varint, 10 for a varlong, no bits past the width: the oracle and
    the native cursor draw the same line."""
    for pad, ok32 in ((3, True), (4, True), (5, False)):
        # offset delta 0 takes 1 byte; padded to 1 + pad bytes.
        recs = [(0, 0, b"k", b"v", [])]
        b = oracle.encode(recs, 0, 0, 0, 0, pad=iter([0, pad, 0, 0, 0, 0]).__next__)
        want = verdict(oracle.decode_batches, b)
        assert (want[0] == "ok") == ok32
        assert verdict(rb.decode_batches, b) == want
    for pad, ok64 in ((8, True), (9, True), (10, False)):
        recs = [(0, 0, b"k", b"v", [])]
        b = oracle.encode(recs, 0, 0, 0, 0, pad=iter([pad, 0, 0, 0, 0, 0]).__next__)
        want = verdict(oracle.decode_batches, b)
        assert (want[0] == "ok") == ok64
        assert verdict(rb.decode_batches, b) == want


def refit_crc(b):
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def test_varint_top_bits():
    # offsetDelta padded to 5 bytes (at 64..68): its 5th byte may carry 4 bits, no more.
    b = bytearray(oracle.encode([(0, 0, b"k", b"v", [])], 0, 0, 0, 0,
                                pad=iter([0, 4, 0, 0, 0, 0]).__next__))
    assert b[64:69] == b"\x80\x80\x80\x80\x00"
    b[68] = 0x0F                      # fits 32 bits: read, then refused as an offset delta
    assert "offsetDelta" in rb.scan(refit_crc(b))[2]
    b[68] = 0x10
    assert rb.scan(refit_crc(b))[2] == "varint longer than 32 bits"
    assert verdict(oracle.decode_batches, bytes(b)) == verdict(rb.decode_batches, bytes(b))
    # timestampDelta padded to 10 bytes (at 63..72): its 10th byte may carry 1 bit.
    b = bytearray(oracle.encode([(0, 0, b"k", b"v", [])], 0, 0, 0, 0,
                                pad=iter([9, 0, 0, 0, 0, 0]).__next__))
    b[72] = 0x01
    want = verdict(oracle.decode_batches, refit_crc(b))
    assert want[0] == "ok" and want[1][0][5][0][1] == 2**62     # zigzag of bit 63 alone
    assert verdict(rb.decode_batches, bytes(b)) == want
    b[72] = 0x02
    assert rb.scan(refit_crc(b))[2] == "varlong longer than 64 bits"
    assert verdict(oracle.decode_batches, bytes(b)) == verdict(rb.decode_batches, bytes(b))
