"""A pure-Python Kafka RecordBatch v2 reader and writer: the oracle the native codec
(native/recordbatch.pxd, .pyx) is tested against. Written from the format, not from the
native code: plain struct unpacking, and varints read as "at most N bytes, value below 2**bits"
rather than by the native byte rules.

Layout (big-endian unless varint; offsets from the start of the batch):
  batch  = baseOffset int64 @0 | batchLength int32 @8 (bytes after it) | leaderEpoch int32 @12
           | magic int8 @16 (2) | crc uint32 @17 (CRC32C of bytes 21 .. end)
           | attributes int16 @21 | lastOffsetDelta int32 @23 | baseTimestamp int64 @27
           | maxTimestamp int64 @35 | producerId int64 @43 | producerEpoch int16 @51
           | baseSequence int32 @53 | recordCount int32 @57 | records @61
  record = length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
           | keyLength varint (-1 null) | key | valueLength varint (-1 null) | value
           | headerCount varint | headers (keyLength varint >= 0, key, valueLength varint, value)
  varint / varlong = zigzag signed 32 / 64-bit as an unsigned varint of at most 5 / 10 bytes

What the native codec accepts, and so what this oracle accepts: magic 2, no compression,
batchLength in [49, 2**30], recordCount that fits the batch (7 bytes a record at least),
lastOffsetDelta >= recordCount - 1, offset deltas increasing up to lastOffsetDelta, every
length within its record, records filling the batch exactly, and the CRC.
"""
from __future__ import annotations

import struct
from typing import Optional

from crc32c import crc32c

from groupcoord.storage.batch import CorruptBatchError, TruncatedBatchError

HEADER = struct.Struct(">qiibIhiqqqhii")     # baseOffset .. recordCount
HEADER_SIZE = HEADER.size                     # 61
LOG_OVERHEAD = 12                             # baseOffset + batchLength
MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD       # batchLength of an empty batch
MAX_LENGTH = 1 << 30
assert HEADER_SIZE == 61


# ---------------------------------------------------------------- writing
def _varint(v: int, out: bytearray, bits: int = 32, pad: int = 0) -> None:
    # ``pad`` extra bytes make a longer, non-canonical encoding of the same value (valid
    # while the whole stays within 5 / 10 bytes).
    u = ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    if pad:
        out += bytes([u | 0x80] + [0x80] * (pad - 1) + [0])
    else:
        out.append(u)


def encode(records: list, base_offset: int, base_timestamp: int, max_timestamp: int,
           last_offset_delta: int, leader_epoch: int = -1, pad=lambda: 0,
           junk: bytes = b"") -> bytes:
    """records: [(offset_delta, timestamp_delta, key, value, headers)], headers a list of
    (key bytes, value bytes | None) -- the native encoder never writes headers, so batches
    with them come from here (or from Kafka clients). Writes what it is given, valid or not
    (a None header key, offset deltas out of order). ``pad()``: extra bytes for each varint
    (see _varint); ``junk``: bytes put inside each record after its fields."""
    body = bytearray()
    for od, td, key, value, headers in records:
        rec = bytearray(b"\x00")                 # attributes
        _varint(td, rec, 64, pad())
        _varint(od, rec, 32, pad())
        for blob in (key, value):
            _varint(-1 if blob is None else len(blob), rec, 32, pad())
            rec += blob or b""
        _varint(len(headers), rec, 32, pad())
        for hblob in (b for h in headers for b in h):
            _varint(-1 if hblob is None else len(hblob), rec, 32, pad())
            rec += hblob or b""
        rec += junk
        _varint(len(rec), body, 32, pad())
        body += rec
    out = bytearray(HEADER.pack(base_offset, MIN_LENGTH + len(body), leader_epoch, 2, 0, 0,
                                last_offset_delta, base_timestamp, max_timestamp, -1, -1, -1,
                                len(records)))
    out += body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def encode_batch(records: list, base_offset: int, timestamp: int,
                 leader_epoch: int = -1) -> bytes:
    """The native encode_batch's form: [(key, value)], offsets and one timestamp."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    return encode([(i, 0, k, v, []) for i, (k, v) in enumerate(records)], base_offset,
                  timestamp, timestamp, len(records) - 1, leader_epoch)


# ---------------------------------------------------------------- reading
class _Bad(Exception):
    pass


def _read_varint(buf, p: int, end: int, bits: int):
    most = 5 if bits == 32 else 10
    u = n = 0
    while True:
        if p >= end:
            raise _Bad("varint runs past the end of its record")
        if n == most:
            raise _Bad("varint too long")
        b = buf[p]
        u |= (b & 0x7F) << (7 * n)
        p += 1
        n += 1
        if not b & 0x80:
            break
    if u >> bits:
        raise _Bad("varint wider than %d bits" % bits)
    return (u >> 1) ^ -(u & 1), p


def _read_length(buf, p: int, end: int, nullable: bool):
    n, p = _read_varint(buf, p, end, 32)
    if n < -1 or (n == -1 and not nullable):
        raise _Bad("negative length")
    if n > end - p:
        raise _Bad("length runs past the end of its record")
    return n, p


def _records(buf, p: int, bend: int, count: int, lod: int) -> list:
    out = []
    prev = -1
    for _ in range(count):
        rlen, p = _read_varint(buf, p, bend, 32)
        if rlen < 6 or rlen > bend - p:
            raise _Bad("record length out of range")
        rend = p + rlen
        p += 1                                   # attributes
        td, p = _read_varint(buf, p, rend, 64)
        od, p = _read_varint(buf, p, rend, 32)
        if not prev < od <= lod:
            raise _Bad("offsetDelta out of order")
        prev = od
        blobs = []
        for _ in range(2):
            n, p = _read_length(buf, p, rend, True)
            blobs.append(None if n < 0 else bytes(buf[p:p + n]))
            p += max(n, 0)
        hc, p = _read_varint(buf, p, rend, 32)
        if hc < 0 or hc > rend - p:
            raise _Bad("headerCount out of range")
        for _ in range(hc):
            n, p = _read_length(buf, p, rend, False)
            p += n
            n, p = _read_length(buf, p, rend, True)
            p += max(n, 0)
        if p != rend:
            raise _Bad("record length disagrees with its fields")
        out.append((od, td, blobs[0], blobs[1]))
    if p != bend:
        raise _Bad("bytes left after recordCount records")
    return out


def decode_batches(buf, pos: int = 0, end: Optional[int] = None, path=None) -> list:
    """As the native decode_batches: [(base_offset, base_timestamp, max_timestamp,
    last_offset_delta, leader_epoch, [(offset_delta, timestamp_delta, key, value)])]; a bad
    batch raises CorruptBatchError (TruncatedBatchError when the bytes end inside it)."""
    end = len(buf) if end is None else end
    out = []
    while pos < end:
        out.append(_batch(buf, pos, end, path))
        pos += LOG_OVERHEAD + struct.unpack_from(">i", buf, pos + 8)[0]
    return out


def _batch(buf, pos: int, end: int, path):
    avail = end - pos
    if avail < LOG_OVERHEAD:
        raise TruncatedBatchError(path, pos, "the buffer ends inside the offset/length")
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    if not MIN_LENGTH <= length <= MAX_LENGTH:
        raise CorruptBatchError(path, pos, "batchLength out of range")
    if avail < HEADER_SIZE:
        raise TruncatedBatchError(path, pos, "the buffer ends inside the batch header")
    (base, _length, epoch, magic, crc, attrs, lod, bts, mts, _pid, _pep, _bseq,
     count) = HEADER.unpack_from(buf, pos)
    if magic != 2:
        raise CorruptBatchError(path, pos, "magic is not 2")
    if LOG_OVERHEAD + length > avail:
        raise TruncatedBatchError(path, pos, "the buffer ends before the batch's length")
    if attrs & 7:
        raise CorruptBatchError(path, pos, "compressed batches are not supported")
    if count < 0 or 7 * count > length - MIN_LENGTH:
        raise CorruptBatchError(path, pos, "recordCount does not fit in the batch")
    if lod < 0 or lod < count - 1:
        raise CorruptBatchError(path, pos, "lastOffsetDelta is inconsistent with recordCount")
    bend = pos + LOG_OVERHEAD + length
    if crc32c(memoryview(buf)[pos + 21:bend]) != crc:
        raise CorruptBatchError(path, pos, "CRC32C mismatch")
    try:
        recs = _records(buf, pos + HEADER_SIZE, bend, count, lod)
    except _Bad as exc:
        raise CorruptBatchError(path, pos, str(exc)) from None
    return base, bts, mts, lod, epoch, recs


def decode(buf, pos: int = 0, end: Optional[int] = None, path=None) -> tuple:
    """As the native decode (not partial, no min_offset): ([(offset, key, value)], end)."""
    end = len(buf) if end is None else end
    out = [(b[0] + od, k, v) for b in decode_batches(buf, pos, end, path)
           for od, _td, k, v in b[5]]
    return out, max(pos, end)
