"""RecordBatch v2 codec: the native implementation (native/recordbatch.pyx, layout comment
there) and a pure-Python reference of the same functions, used as the benchmark baseline and
as a second implementation in tests.

    encode_batch([(key, value | None)], base_offset, timestamp_ms) -> bytes
    decode(buf) -> ([(offset, key, value)], next_pos)     # CRC and every length verified
    scan(buf) -> (batch infos, stop, reason, truncated)   # validation without decoding
"""
from __future__ import annotations

import struct
from typing import Optional

from crc32c import crc32c

from groupcoord._native.recordbatch import (BATCH_OVERHEAD, LENGTH_OVERHEAD, MAX_BATCH_BYTES,
                                            CorruptBatchError, TruncatedBatchError, decode,
                                            decode_batches, encode_batch,
                                            encode_batch_explicit, find_valid_batch, scan)

__all__ = ["CorruptBatchError", "TruncatedBatchError", "encode_batch", "encode_batch_explicit",
           "decode", "decode_batches", "scan", "find_valid_batch", "py_encode_batch",
           "py_decode", "BATCH_OVERHEAD", "LENGTH_OVERHEAD", "MAX_BATCH_BYTES"]

_HEADER = struct.Struct(">qiibIhiqqqhii")     # baseOffset .. recordCount (61 bytes)


# ---------------------------------------------------------------- pure-Python reference
def _zz_varint(v: int, out: bytearray) -> None:
    u = (v << 1) ^ (v >> 63)
    u &= 0xFFFFFFFFFFFFFFFF
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def py_encode_batch(records: list, base_offset: int, timestamp: int,
                    leader_epoch: int = -1) -> bytes:
    """Pure-Python encode_batch (same bytes)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = bytearray(b"\x00")                 # attributes
        _zz_varint(0, rec)                       # timestampDelta
        _zz_varint(i, rec)                       # offsetDelta
        for blob in (key, value):
            if blob is None:
                _zz_varint(-1, rec)
            else:
                _zz_varint(len(blob), rec)
                rec += blob
        rec.append(0)                            # headerCount
        _zz_varint(len(rec), body)
        body += rec
    header = _HEADER.pack(base_offset, BATCH_OVERHEAD - LENGTH_OVERHEAD + len(body),
                          leader_epoch, 2, 0, 0, len(records) - 1, timestamp, timestamp,
                          -1, -1, -1, len(records))
    out = bytearray(header) + body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def _read_varint(buf, pos: int, end: int, bits: int):
    u = shift = 0
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= bits + 7:
            raise ValueError("varint too long")
    return (u >> 1) ^ -(u & 1), pos


def py_decode(buf, pos: int = 0, end: Optional[int] = None, path=None) -> tuple:
    """Pure-Python decode (not partial, min_offset -1): -> ([(offset, key, value)], end)."""
    end = len(buf) if end is None else end
    mv = memoryview(buf)
    out = []
    rv = _read_varint
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise TruncatedBatchError(path, pos, "the buffer ends inside the batch header")
        (base, length, _epoch, magic, crc, attrs, lod, _bts, _mts, _pid, _pep, _bseq,
         count) = _HEADER.unpack_from(buf, pos)
        if length < BATCH_OVERHEAD - LENGTH_OVERHEAD or length > MAX_BATCH_BYTES:
            raise CorruptBatchError(path, pos, "batchLength out of range")
        if magic != 2:
            raise CorruptBatchError(path, pos, "magic is not 2")
        bend = pos + LENGTH_OVERHEAD + length
        if bend > end:
            raise TruncatedBatchError(path, pos, "the buffer ends before the batch's length")
        if crc32c(mv[pos + 21:bend]) != crc:
            raise CorruptBatchError(path, pos, "CRC32C mismatch")
        if attrs & 7:
            raise CorruptBatchError(path, pos, "compressed batches are not supported")
        p = pos + BATCH_OVERHEAD
        try:
            for _ in range(count):
                rlen, p = rv(buf, p, bend, 32)
                rend = p + rlen
                if rlen < 6 or rend > bend:
                    raise ValueError("record length out of range")
                p += 1
                _td, p = rv(buf, p, rend, 64)
                od, p = rv(buf, p, rend, 32)
                kl, p = rv(buf, p, rend, 32)
                if kl < -1 or p + kl > rend:
                    raise ValueError("key length out of range")
                key = None if kl < 0 else bytes(mv[p:p + kl])
                p += max(kl, 0)
                vl, p = rv(buf, p, rend, 32)
                if vl < -1 or p + vl > rend:
                    raise ValueError("value length out of range")
                value = None if vl < 0 else bytes(mv[p:p + vl])
                p += max(vl, 0)
                hc, p = rv(buf, p, rend, 32)
                for _ in range(hc):
                    hk, p = rv(buf, p, rend, 32)
                    p += hk
                    hv, p = rv(buf, p, rend, 32)
                    p += max(hv, 0)
                if p != rend:
                    raise ValueError("record length disagrees with its fields")
                out.append((base + od, key, value))
        except ValueError as exc:
            raise CorruptBatchError(path, pos, str(exc)) from None
        if p != bend:
            raise CorruptBatchError(path, pos, "bytes left after recordCount records")
        pos = bend
    return out, pos
