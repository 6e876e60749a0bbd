# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Kafka RecordBatch v2 (magic 2): encode, validate and decode, for the durable record log.
#
# Layout (integers big-endian unless varint):
#   batch   = baseOffset int64 | batchLength int32 (bytes after this field)
#             | partitionLeaderEpoch int32 | magic int8 (= 2)
#             | crc uint32 (CRC32C of every byte from attributes to the end of the batch)
#             | attributes int16 (bits 0-2 compression: only 0 = none is accepted)
#             | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
#             | producerId int64 (-1) | producerEpoch int16 (-1) | baseSequence int32 (-1)
#             | recordCount int32 | records
#   record  = length varint (bytes after this field) | attributes int8
#             | timestampDelta varlong | offsetDelta varint
#             | keyLength varint (-1 = null) | key | valueLength varint (-1 = null: tombstone)
#             | value | headerCount varint | headers
#   header  = keyLength varint (>= 0) | key | valueLength varint (-1 = null) | value
#   varint / varlong: zigzag-encoded signed 32 / 64-bit, 7 bits a byte, low group first,
#   high bit = more; at most 5 / 10 bytes.
#
# Every length read from the buffer is checked against the bytes that remain (of the buffer,
# of the batch, of the record) before it is used to advance or to allocate: a lying length is
# a CorruptBatchError, never an over-read or a large allocation. A batch whose declared
# length runs past the end of the buffer is a TruncatedBatchError (a torn tail when it is the
# last thing in a file). CRC32C is computed by the `crc32c` package, one call per batch.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_Append
from cpython.ref cimport Py_INCREF
from cpython.long cimport PyLong_FromLongLong

from crc32c import crc32c as _crc32c


cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    Py_ssize_t PyBytes_GET_SIZE(object o)


class CorruptBatchError(ValueError):
    """Bytes that are not a valid RecordBatch v2. ``path`` is the file (None for a buffer),
    ``position`` the byte position of the batch in it, ``reason`` what is wrong."""

    def __init__(self, path, position, reason):
        super().__init__("%s: corrupt record batch at position %d: %s"
                         % (path if path is not None else "<buffer>", position, reason))
        self.path = path
        self.position = position
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.path, self.position, self.reason))


class TruncatedBatchError(CorruptBatchError):
    """The buffer ends inside a batch (its header, or before its declared length)."""


BATCH_OVERHEAD = 61          # header bytes of a batch (baseOffset .. recordCount)
LENGTH_OVERHEAD = 12         # baseOffset + batchLength: bytes not counted in batchLength
MIN_RECORD_SIZE = 7          # length, attributes, 3 deltas/lengths, headerCount: 1 byte each
MAX_BATCH_BYTES = 1 << 30    # a batchLength above this is corrupt whatever the buffer holds

cdef enum:
    _OVERHEAD = 61
    _LOG_OVERHEAD = 12
    _CRC_FROM = 21           # attributes start: baseOffset 8 + length 4 + epoch 4 + magic 1 + crc 4
    _MIN_BODY = 49           # batchLength of a batch with no records
    _MAX_BATCH = 1 << 30
    _MIN_REC_BODY = 6        # a record's length field counts at least 6 bytes


# ---------------------------------------------------------------- cursor (hot, no exceptions)

cdef struct Cur:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end
    const char* err          # set when a read fails; the caller turns it into an exception


cdef inline int64_t be64(const unsigned char* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v

cdef inline int32_t be32(const unsigned char* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])

cdef inline int16_t be16(const unsigned char* p) noexcept:
    return <int16_t>((p[0] << 8) | p[1])

cdef inline void put64(unsigned char* p, int64_t v) noexcept:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(u >> (56 - 8 * i))

cdef inline void put32(unsigned char* p, int32_t v) noexcept:
    cdef uint32_t u = <uint32_t>v
    p[0] = <unsigned char>(u >> 24)
    p[1] = <unsigned char>(u >> 16)
    p[2] = <unsigned char>(u >> 8)
    p[3] = <unsigned char>u

cdef inline void put16(unsigned char* p, int16_t v) noexcept:
    p[0] = <unsigned char>((<uint32_t><uint16_t>v) >> 8)
    p[1] = <unsigned char>v

cdef inline int rd_varlong(Cur* c, int64_t* out) noexcept:
    # Zigzag varlong, at most 10 bytes (the 10th may carry only the top bit).
    cdef uint64_t u = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if c.pos >= c.end:
            c.err = "varint runs past the end of its record"
            return -1
        b = c.buf[c.pos]
        c.pos += 1
        if shift == 63 and (b & 0xFE):
            c.err = "varlong longer than 64 bits"
            return -1
        u |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            out[0] = <int64_t>((u >> 1) ^ (0u - (u & 1)))
            return 0
        shift += 7

cdef inline int rd_varint(Cur* c, int32_t* out) noexcept:
    # Zigzag varint, at most 5 bytes (the 5th may carry only the top 4 bits).
    cdef uint32_t u = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if c.pos >= c.end:
            c.err = "varint runs past the end of its record"
            return -1
        b = c.buf[c.pos]
        c.pos += 1
        if shift == 28 and (b & 0xF0):
            c.err = "varint longer than 32 bits"
            return -1
        u |= <uint32_t>(b & 0x7F) << shift
        if not (b & 0x80):
            out[0] = <int32_t>((u >> 1) ^ (0u - (u & 1)))
            return 0
        shift += 7

cdef inline int rd_len(Cur* c, int32_t* out, bint nullable) noexcept:
    # A varint length: -1 (null) where nullable, else 0 .. bytes that remain.
    if rd_varint(c, out) < 0:
        return -1
    if out[0] < 0:
        if out[0] == -1 and nullable:
            return 0
        c.err = "negative length"
        return -1
    if out[0] > c.end - c.pos:
        c.err = "length runs past the end of its record"
        return -1
    return 0

cdef inline int sz_uvar(uint64_t u) noexcept:
    cdef int n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n

cdef inline int sz_varint(int32_t v) noexcept:
    return sz_uvar((<uint32_t>v << 1) ^ <uint32_t>(v >> 31))

cdef inline int sz_varlong(int64_t v) noexcept:
    return sz_uvar((<uint64_t>v << 1) ^ <uint64_t>(v >> 63))

cdef inline unsigned char* wr_uvar(unsigned char* p, uint64_t u) noexcept:
    while u >= 0x80:
        p[0] = <unsigned char>((u & 0x7F) | 0x80)
        p += 1
        u >>= 7
    p[0] = <unsigned char>u
    return p + 1

cdef inline unsigned char* wr_varint(unsigned char* p, int32_t v) noexcept:
    return wr_uvar(p, (<uint32_t>v << 1) ^ <uint32_t>(v >> 31))

cdef inline unsigned char* wr_varlong(unsigned char* p, int64_t v) noexcept:
    return wr_uvar(p, (<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


# ---------------------------------------------------------------- batch validation

cdef struct Header:
    int64_t base_offset
    int32_t length          # batchLength
    int32_t leader_epoch
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int32_t count


cdef int check_header(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, Header* h,
                      const char** err) noexcept:
    # 0 = a complete batch at pos with a plausible header; 1 = the buffer ends inside it
    # (truncated); -1 = corrupt (err says why). Does not check the CRC or the records.
    cdef Py_ssize_t avail = end - pos
    if avail < _LOG_OVERHEAD:
        err[0] = "the buffer ends inside the batch's offset/length"
        return 1
    h.base_offset = be64(buf + pos)
    h.length = be32(buf + pos + 8)
    if h.length < _MIN_BODY or h.length > _MAX_BATCH:
        err[0] = "batchLength out of range"
        return -1
    if avail < _OVERHEAD:
        err[0] = "the buffer ends inside the batch header"
        return 1
    if <int8_t>buf[pos + 16] != 2:
        err[0] = "magic is not 2"
        return -1
    if h.length > avail - _LOG_OVERHEAD:
        err[0] = "the buffer ends before the batch's declared length"
        return 1
    h.leader_epoch = be32(buf + pos + 12)
    h.attributes = be16(buf + pos + 21)
    h.last_offset_delta = be32(buf + pos + 23)
    h.base_timestamp = be64(buf + pos + 27)
    h.max_timestamp = be64(buf + pos + 35)
    h.count = be32(buf + pos + 57)
    if h.attributes & 0x07:
        err[0] = "compressed batches are not supported"
        return -1
    if h.count < 0 or h.count > (h.length - _MIN_BODY) // 7:
        err[0] = "recordCount does not fit in the batch"
        return -1
    if h.last_offset_delta < 0 or (h.count > 0 and h.last_offset_delta < h.count - 1):
        err[0] = "lastOffsetDelta is inconsistent with recordCount"
        return -1
    return 0


cdef inline bint crc_ok(object mv, const unsigned char* buf, Py_ssize_t pos, Header* h):
    cdef uint32_t stored = <uint32_t>be32(buf + pos + 17)
    cdef uint32_t got = _crc32c(mv[pos + _CRC_FROM: pos + _LOG_OVERHEAD + h.length])
    return stored == got


cdef int walk_record(Cur* c, int32_t* prev_delta, int32_t last_delta, int64_t* ts_delta,
                     int32_t* off_delta, Py_ssize_t* key_at, int32_t* key_len,
                     Py_ssize_t* val_at, int32_t* val_len) noexcept:
    # Validates one record at c.pos (c.end = end of its batch) and reports where its key and
    # value are; leaves c.pos after the record. -1 with c.err on a malformed record.
    cdef int32_t rlen, hcount, n, i
    cdef Py_ssize_t batch_end = c.end
    if rd_varint(c, &rlen) < 0:
        return -1
    if rlen < _MIN_REC_BODY or rlen > batch_end - c.pos:
        c.err = "record length out of range"
        return -1
    c.end = c.pos + rlen
    c.pos += 1                                   # record attributes (unused)
    if rd_varlong(c, ts_delta) < 0 or rd_varint(c, off_delta) < 0:
        c.end = batch_end
        return -1
    if off_delta[0] <= prev_delta[0] or off_delta[0] > last_delta:
        c.err = "offsetDelta out of order or past lastOffsetDelta"
        c.end = batch_end
        return -1
    prev_delta[0] = off_delta[0]
    if rd_len(c, key_len, True) < 0:
        c.end = batch_end
        return -1
    key_at[0] = c.pos
    if key_len[0] > 0:
        c.pos += key_len[0]
    if rd_len(c, val_len, True) < 0:
        c.end = batch_end
        return -1
    val_at[0] = c.pos
    if val_len[0] > 0:
        c.pos += val_len[0]
    if rd_varint(c, &hcount) < 0:
        c.end = batch_end
        return -1
    if hcount < 0 or hcount > c.end - c.pos:
        c.err = "headerCount out of range"
        c.end = batch_end
        return -1
    for i in range(hcount):
        if rd_len(c, &n, False) < 0:
            c.end = batch_end
            return -1
        c.pos += n
        if rd_len(c, &n, True) < 0:
            c.end = batch_end
            return -1
        if n > 0:
            c.pos += n
    if c.pos != c.end:
        c.err = "record length disagrees with its fields"
        c.end = batch_end
        return -1
    c.end = batch_end
    return 0


cdef int walk_records(const unsigned char* buf, Py_ssize_t pos, Header* h,
                      const char** err) noexcept:
    cdef Cur c
    c.buf = buf
    c.pos = pos + _OVERHEAD
    c.end = pos + _LOG_OVERHEAD + h.length
    c.err = NULL
    cdef int32_t prev = -1, od, kl, vl
    cdef int64_t td
    cdef Py_ssize_t ka, va
    cdef int32_t i
    for i in range(h.count):
        if walk_record(&c, &prev, h.last_offset_delta, &td, &od, &ka, &kl, &va, &vl) < 0:
            err[0] = c.err
            return -1
    if c.pos != c.end:
        err[0] = "bytes left in the batch after recordCount records"
        return -1
    return 0


cdef class _View:
    # A read-only buffer over any bytes-like object, released on collection.
    cdef Py_buffer view
    cdef bint held
    cdef object mv

    def __cinit__(self, object data):
        PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        self.held = True
        self.mv = memoryview(data).cast("B")

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef inline Py_ssize_t _bound(_View v, Py_ssize_t end) except -2:
    if end < 0 or end > v.view.len:
        return v.view.len
    return end


def scan(object data, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Validate batches from ``pos`` (header, CRC, every record) without decoding them.

    -> (batches, stop, reason, truncated): ``batches`` lists (position, base_offset,
    last_offset_delta, record_count, max_timestamp, size) of each valid batch; ``stop`` is
    where the first invalid batch starts (``end`` when all were valid); ``reason`` is None or
    why the batch at ``stop`` is invalid; ``truncated`` is True when the buffer ends inside it
    (as opposed to bytes that are wrong).
    """
    cdef _View v = _View(data)
    end = _bound(v, end)
    cdef const unsigned char* buf = <const unsigned char*>v.view.buf
    cdef Header h
    cdef const char* err = NULL
    cdef int rc
    cdef list out = []
    while pos < end:
        rc = check_header(buf, pos, end, &h, &err)
        if rc != 0:
            return out, pos, err.decode(), rc == 1
        if not crc_ok(v.mv, buf, pos, &h):
            return out, pos, "CRC32C mismatch", False
        if walk_records(buf, pos, &h, &err) < 0:
            return out, pos, err.decode(), False
        out.append((pos, h.base_offset, h.last_offset_delta, h.count, h.max_timestamp,
                    _LOG_OVERHEAD + h.length))
        pos += _LOG_OVERHEAD + h.length
    return out, pos, None, False


def find_valid_batch(object data, Py_ssize_t start, Py_ssize_t end=-1,
                     int64_t min_offset=0):
    """The position of the first fully valid batch (CRC and records) at or after ``start``
    whose base offset is >= ``min_offset``, or -1. Used by recovery to tell a corrupt tail
    (nothing valid follows) from corruption in the middle of a log."""
    cdef _View v = _View(data)
    end = _bound(v, end)
    cdef const unsigned char* buf = <const unsigned char*>v.view.buf
    cdef Header h
    cdef const char* err = NULL
    cdef Py_ssize_t pos = start
    while pos + _OVERHEAD <= end:
        if buf[pos + 16] == 2 and check_header(buf, pos, end, &h, &err) == 0 \
                and h.base_offset >= min_offset and crc_ok(v.mv, buf, pos, &h) \
                and walk_records(buf, pos, &h, &err) == 0:
            return pos
        pos += 1
    return -1


cdef object _raise(object path, Py_ssize_t at, str reason, bint truncated):
    if truncated:
        raise TruncatedBatchError(path, at, reason)
    raise CorruptBatchError(path, at, reason)


cdef inline object _bytes_at(const unsigned char* buf, Py_ssize_t at, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>(buf + at), n)


def decode(object data, Py_ssize_t pos=0, Py_ssize_t end=-1, object path=None,
           Py_ssize_t position_base=0, bint partial=False, int64_t min_offset=-1):
    """Decode every batch in data[pos:end] -> (records, next_pos): ``records`` is a list of
    (offset, key, value) tuples (value None = tombstone) with offset >= ``min_offset``.

    Every batch is validated (header, CRC, records) before any of its records is returned.
    A corrupt batch raises CorruptBatchError(path, position_base + its position, reason). With
    ``partial`` a batch cut short by ``end`` stops the decode (next_pos = its position);
    without, it raises TruncatedBatchError.
    """
    cdef _View v = _View(data)
    end = _bound(v, end)
    cdef const unsigned char* buf = <const unsigned char*>v.view.buf
    cdef Header h
    cdef const char* err = NULL
    cdef int rc
    cdef list out = []
    cdef Cur c
    cdef int32_t prev, od, kl, vl, i
    cdef int64_t td
    cdef Py_ssize_t ka, va
    cdef tuple t
    cdef object o
    while pos < end:
        rc = check_header(buf, pos, end, &h, &err)
        if rc == 1 and partial:
            break
        if rc != 0:
            _raise(path, position_base + pos, err.decode(), rc == 1)
        if not crc_ok(v.mv, buf, pos, &h):
            _raise(path, position_base + pos, "CRC32C mismatch", False)
        if walk_records(buf, pos, &h, &err) < 0:
            _raise(path, position_base + pos, err.decode(), False)
        c.buf = buf
        c.pos = pos + _OVERHEAD
        c.end = pos + _LOG_OVERHEAD + h.length
        c.err = NULL
        prev = -1
        for i in range(h.count):
            walk_record(&c, &prev, h.last_offset_delta, &td, &od, &ka, &kl, &va, &vl)
            if h.base_offset + od < min_offset:
                continue
            t = PyTuple_New(3)
            o = PyLong_FromLongLong(h.base_offset + od)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 0, o)
            o = _bytes_at(buf, ka, kl)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 1, o)
            o = _bytes_at(buf, va, vl)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 2, o)
            PyList_Append(out, t)
        pos += _LOG_OVERHEAD + h.length
    return out, pos


def decode_batches(object data, Py_ssize_t pos=0, Py_ssize_t end=-1, object path=None,
                   Py_ssize_t position_base=0):
    """Decode every batch in data[pos:end] with its header fields -> list of (base_offset,
    base_timestamp, max_timestamp, last_offset_delta, leader_epoch, records) where records
    lists (offset_delta, timestamp_delta, key, value). Errors as decode() (not partial)."""
    cdef _View v = _View(data)
    end = _bound(v, end)
    cdef const unsigned char* buf = <const unsigned char*>v.view.buf
    cdef Header h
    cdef const char* err = NULL
    cdef int rc
    cdef list out = []
    cdef list recs
    cdef Cur c
    cdef int32_t prev, od, kl, vl, i
    cdef int64_t td
    cdef Py_ssize_t ka, va
    while pos < end:
        rc = check_header(buf, pos, end, &h, &err)
        if rc != 0:
            _raise(path, position_base + pos, err.decode(), rc == 1)
        if not crc_ok(v.mv, buf, pos, &h):
            _raise(path, position_base + pos, "CRC32C mismatch", False)
        if walk_records(buf, pos, &h, &err) < 0:
            _raise(path, position_base + pos, err.decode(), False)
        c.buf = buf
        c.pos = pos + _OVERHEAD
        c.end = pos + _LOG_OVERHEAD + h.length
        c.err = NULL
        prev = -1
        recs = []
        for i in range(h.count):
            walk_record(&c, &prev, h.last_offset_delta, &td, &od, &ka, &kl, &va, &vl)
            recs.append((od, td, _bytes_at(buf, ka, kl), _bytes_at(buf, va, vl)))
        out.append((h.base_offset, h.base_timestamp, h.max_timestamp, h.last_offset_delta,
                    h.leader_epoch, recs))
        pos += _LOG_OVERHEAD + h.length
    return out


# ---------------------------------------------------------------- encoding

cdef inline Py_ssize_t _blob_len(object b, const char* what) except -2:
    if b is None:
        return -1
    if not PyBytes_CheckExact(b):
        raise TypeError("record %s must be bytes or None, got %s"
                        % (what.decode(), type(b).__name__))
    return PyBytes_GET_SIZE(b)


cdef bytes _encode(int64_t base_offset, int64_t base_ts, int64_t max_ts,
                   int32_t last_offset_delta, int32_t leader_epoch, list recs, bint explicit):
    # recs: (key, value) [explicit=False: offset delta = index, timestamp delta 0]
    #    or (offset_delta, timestamp_delta, key, value) [explicit=True]
    cdef Py_ssize_t n = len(recs), i, total = _OVERHEAD, kl, vl, body
    cdef int64_t td
    cdef int32_t od, prev = -1
    cdef object r, key, val
    if n > 0x7FFFFFFF // 8:
        raise ValueError("too many records for one batch")
    for i in range(n):
        r = recs[i]
        if explicit:
            od, td, key, val = r
            if od <= prev or od > last_offset_delta:
                raise ValueError("offset deltas must increase and stay <= lastOffsetDelta")
            prev = od
        else:
            key, val = r
            od = <int32_t>i
            td = 0
        kl = _blob_len(key, b"key")
        vl = _blob_len(val, b"value")
        body = (1 + sz_varlong(td) + sz_varint(od) + sz_varint(<int32_t>kl) + (kl if kl > 0 else 0)
                + sz_varint(<int32_t>vl) + (vl if vl > 0 else 0) + 1)
        total += sz_varint(<int32_t>body) + body
        if total - _LOG_OVERHEAD > _MAX_BATCH:
            raise ValueError("batch larger than %d bytes" % _MAX_BATCH)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(out)
    put64(p, base_offset)
    put32(p + 8, <int32_t>(total - _LOG_OVERHEAD))
    put32(p + 12, leader_epoch)
    p[16] = 2
    put16(p + 21, 0)                                   # attributes: no compression, CreateTime
    put32(p + 23, last_offset_delta)
    put64(p + 27, base_ts)
    put64(p + 35, max_ts)
    put64(p + 43, -1)                                  # producerId
    put16(p + 51, -1)                                  # producerEpoch
    put32(p + 53, -1)                                  # baseSequence
    put32(p + 57, <int32_t>n)
    cdef unsigned char* q = p + _OVERHEAD
    for i in range(n):
        r = recs[i]
        if explicit:
            od, td, key, val = r
        else:
            key, val = r
            od = <int32_t>i
            td = 0
        kl = -1 if key is None else PyBytes_GET_SIZE(key)
        vl = -1 if val is None else PyBytes_GET_SIZE(val)
        body = (1 + sz_varlong(td) + sz_varint(od) + sz_varint(<int32_t>kl) + (kl if kl > 0 else 0)
                + sz_varint(<int32_t>vl) + (vl if vl > 0 else 0) + 1)
        q = wr_varint(q, <int32_t>body)
        q[0] = 0
        q = wr_varlong(q + 1, td)
        q = wr_varint(q, od)
        q = wr_varint(q, <int32_t>kl)
        if kl > 0:
            memcpy(q, PyBytes_AS_STRING(key), kl)
            q += kl
        q = wr_varint(q, <int32_t>vl)
        if vl > 0:
            memcpy(q, PyBytes_AS_STRING(val), vl)
            q += vl
        q[0] = 0                                       # headerCount
        q += 1
    if q != p + total:
        raise AssertionError("record batch size computation is wrong")
    cdef uint32_t crc = _crc32c(memoryview(out)[_CRC_FROM:])
    put32(p + 17, <int32_t>crc)
    return out


def encode_batch(list records, int64_t base_offset, int64_t timestamp,
                 int32_t leader_epoch=-1):
    """[(key bytes|None, value bytes|None)] -> one RecordBatch v2 (bytes) whose records get
    offsets base_offset, base_offset + 1, ... and all carry ``timestamp`` (ms)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    return _encode(base_offset, timestamp, timestamp, <int32_t>(len(records) - 1),
                   leader_epoch, records, False)


def encode_batch_explicit(list records, int64_t base_offset, int64_t base_timestamp,
                          int64_t max_timestamp, int32_t last_offset_delta,
                          int32_t leader_epoch=-1):
    """A batch of [(offset_delta, timestamp_delta, key, value)] with the given header fields
    (the form compaction rewrites: offsets keep their gaps, lastOffsetDelta is kept)."""
    return _encode(base_offset, base_timestamp, max_timestamp, last_offset_delta,
                   leader_epoch, records, True)
