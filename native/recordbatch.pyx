# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Kafka RecordBatch v2 (magic 2): encode, validate and decode, for the durable record log.
# The layout, and the cursor that reads it (shared with the shard loader, recordload.pyx), are
# in recordbatch.pxd; varints in wire.pxd. CRC32C is computed by the `crc32c` package, one call
# per batch.
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_Append
from cpython.ref cimport Py_INCREF
from cpython.long cimport PyLong_FromLongLong

from groupcoord._native.wire cimport put32, put_uvarint, uvarint_size, zigzag32, zigzag64

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


BATCH_OVERHEAD = HEADER_SIZE            # header bytes of a batch (baseOffset .. recordCount)
LENGTH_OVERHEAD = LOG_OVERHEAD          # baseOffset + batchLength: not counted in batchLength
MIN_RECORD_SIZE = SMALLEST_RECORD       # length, attributes, 3 deltas/lengths, headerCount
MAX_BATCH_BYTES = MAX_BATCH_LENGTH      # a batchLength above this is corrupt


# ---------------------------------------------------------------- shared with recordload.pyx

cdef class ByteView:
    def __cinit__(self, object data):
        PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        self.held = True
        self.mv = memoryview(data).cast("B")
        self.buf = <const unsigned char*>self.view.buf
        self.len = self.view.len

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef bint crc_ok(ByteView v, Batch* h) except -1:
    cdef uint32_t got = _crc32c(v.mv[h.pos + AT_ATTRIBUTES: h.end])
    return <uint32_t>be32(v.buf + h.pos + AT_CRC) == got


cdef int raise_corrupt(object path, Py_ssize_t position, const char* reason,
                       bint truncated) except -1:
    if truncated:
        raise TruncatedBatchError(path, position, reason.decode())
    raise CorruptBatchError(path, position, reason.decode())


# ---------------------------------------------------------------- validation and decoding

def scan(object data, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Validate batches from ``pos`` (header, CRC, every record) without decoding them.

    -> (batches, stop, reason, truncated): ``batches`` lists (position, base_offset,
    last_offset_delta, record_count, max_timestamp, size) of each valid batch; ``stop`` is
    where the first invalid batch starts (``end`` when all were valid); ``reason`` is None or
    why the batch at ``stop`` is invalid; ``truncated`` is True when the buffer ends inside it
    (as opposed to bytes that are wrong).
    """
    cdef ByteView v = ByteView(data)
    end = clamp_end(v, end)
    cdef Batch h
    cdef const char* err = NULL
    cdef int rc
    cdef list out = []
    while pos < end:
        rc = check_batch(v, pos, end, &h, &err)
        if rc != 0:
            return out, pos, err.decode(), rc == 1
        out.append((pos, h.base_offset, h.last_offset_delta, h.count, h.max_timestamp,
                    h.end - pos))
        pos = h.end
    return out, pos, None, False


def find_valid_batch(object data, Py_ssize_t start, Py_ssize_t end=-1,
                     int64_t min_offset=0):
    """The position of the first fully valid batch (CRC and records) at or after ``start``
    whose base offset is >= ``min_offset``, or -1. Used by recovery to tell a corrupt tail
    (nothing valid follows) from corruption in the middle of a log."""
    cdef ByteView v = ByteView(data)
    end = clamp_end(v, end)
    cdef Batch h
    cdef const char* err = NULL
    cdef Py_ssize_t pos = start
    while pos + HEADER_SIZE <= end:
        if v.buf[pos + AT_MAGIC] == 2 and read_header(v.buf, pos, end, &h, &err) == 0 \
                and h.base_offset >= min_offset and check_body(v, &h, &err) == 0:
            return pos
        pos += 1
    return -1


cdef inline object _bytes_at(const unsigned char* buf, Py_ssize_t at, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>(buf + at), n)


cdef object _decode(object data, Py_ssize_t pos, Py_ssize_t end, object path,
                    Py_ssize_t position_base, bint partial, int64_t min_offset, bint batches):
    # decode (batches False) and decode_batches (True): one loop, two output shapes.
    cdef ByteView v = ByteView(data)
    end = clamp_end(v, end)
    cdef Batch h
    cdef Cursor c
    cdef int32_t i
    cdef list out = []
    cdef list recs
    cdef tuple t
    cdef object o
    while pos < end:
        if next_batch(v, pos, end, &h, path, position_base, partial):
            break
        first_record(&c, v.buf, &h)
        recs = [] if batches else out
        for i in range(h.count):
            next_record(&c)
            if batches:
                recs.append((c.offset_delta, c.timestamp_delta,
                             _bytes_at(v.buf, c.key_at, c.key_len),
                             _bytes_at(v.buf, c.value_at, c.value_len)))
                continue
            if h.base_offset + c.offset_delta < min_offset:
                continue
            t = PyTuple_New(3)
            o = PyLong_FromLongLong(h.base_offset + c.offset_delta)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 0, o)
            o = _bytes_at(v.buf, c.key_at, c.key_len)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 1, o)
            o = _bytes_at(v.buf, c.value_at, c.value_len)
            Py_INCREF(o)
            PyTuple_SET_ITEM(t, 2, o)
            PyList_Append(out, t)
        if batches:
            out.append((h.base_offset, h.base_timestamp, h.max_timestamp, h.last_offset_delta,
                        h.leader_epoch, recs))
        pos = h.end
    return out, pos


def decode(object data, Py_ssize_t pos=0, Py_ssize_t end=-1, object path=None,
           Py_ssize_t position_base=0, bint partial=False, int64_t min_offset=-1):
    """Decode every batch in data[pos:end] -> (records, next_pos): ``records`` is a list of
    (offset, key, value) tuples (value None = tombstone) with offset >= ``min_offset``.

    Every batch is validated (header, CRC, records) before any of its records is returned.
    A corrupt batch raises CorruptBatchError(path, position_base + its position, reason). With
    ``partial`` a batch cut short by ``end`` stops the decode (next_pos = its position);
    without, it raises TruncatedBatchError.
    """
    return _decode(data, pos, end, path, position_base, partial, min_offset, False)


def decode_batches(object data, Py_ssize_t pos=0, Py_ssize_t end=-1, object path=None,
                   Py_ssize_t position_base=0):
    """Decode every batch in data[pos:end] with its header fields -> list of (base_offset,
    base_timestamp, max_timestamp, last_offset_delta, leader_epoch, records) where records
    lists (offset_delta, timestamp_delta, key, value). Errors as decode() (not partial)."""
    return _decode(data, pos, end, path, position_base, False, -1, True)[0]


# ---------------------------------------------------------------- encoding

cdef inline Py_ssize_t _blob_len(object b, const char* what) except -2:
    if b is None:
        return -1
    if not PyBytes_CheckExact(b):
        raise TypeError("record %s must be bytes or None, got %s"
                        % (what.decode(), type(b).__name__))
    return PyBytes_GET_SIZE(b)


cdef inline Py_ssize_t _record_length(int64_t td, int32_t od, Py_ssize_t kl,
                                      Py_ssize_t vl) noexcept:
    # A record's length field: attributes, the deltas, key, value and headerCount (0).
    return (1 + uvarint_size(zigzag64(td)) + uvarint_size(zigzag32(od))
            + uvarint_size(zigzag32(<int32_t>kl)) + (kl if kl > 0 else 0)
            + uvarint_size(zigzag32(<int32_t>vl)) + (vl if vl > 0 else 0) + 1)


cdef bytes _encode(int64_t base_offset, int64_t base_ts, int64_t max_ts,
                   int32_t last_offset_delta, int32_t leader_epoch, list recs, bint explicit):
    # recs: (key, value) [explicit=False: offset delta = index, timestamp delta 0]
    #    or (offset_delta, timestamp_delta, key, value) [explicit=True]
    cdef Py_ssize_t n = len(recs), i, total = HEADER_SIZE, kl, vl, body
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
        body = _record_length(td, od, kl, vl)
        total += uvarint_size(zigzag32(<int32_t>body)) + body
        if total - LOG_OVERHEAD > MAX_BATCH_LENGTH:
            raise ValueError("batch larger than %d bytes" % MAX_BATCH_LENGTH)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(out)
    write_header(p, base_offset, <int32_t>(total - LOG_OVERHEAD), leader_epoch,
                 last_offset_delta, base_ts, max_ts, <int32_t>n)
    cdef unsigned char* q = p + HEADER_SIZE
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
        q = put_uvarint(q, zigzag32(<int32_t>_record_length(td, od, kl, vl)))
        q[0] = 0                                       # attributes
        q = put_uvarint(q + 1, zigzag64(td))
        q = put_uvarint(q, zigzag32(od))
        q = put_uvarint(q, zigzag32(<int32_t>kl))
        if kl > 0:
            memcpy(q, PyBytes_AS_STRING(key), kl)
            q += kl
        q = put_uvarint(q, zigzag32(<int32_t>vl))
        if vl > 0:
            memcpy(q, PyBytes_AS_STRING(val), vl)
            q += vl
        q[0] = 0                                       # headerCount
        q += 1
    if q != p + total:
        raise AssertionError("record batch size computation is wrong")
    put32(p + AT_CRC, <uint32_t>_crc32c(memoryview(out)[AT_ATTRIBUTES:]))
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
