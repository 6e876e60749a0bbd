"""RecordBatch v2 codec (native/recordbatch.pyx): round trips, the pure-Python reference,
kafka-python parity in both directions, and every-byte truncation / corruption."""
import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

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
    assert rb.py_decode(b) == (got, end)


def test_native_and_python_encoders_write_the_same_bytes():
    for seed in range(5):
        recs = sample(seed, 20)
        assert rb.encode_batch(recs, seed * 7, TS + seed) == rb.py_encode_batch(recs, seed * 7,
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
    assert rb.py_decode(buf)[0] == want
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
                rb.py_decode(bytes(bad))


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
