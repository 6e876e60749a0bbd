# cython: language_level=3
# Kafka RecordBatch v2 (magic 2): the one native cursor over batches and their records, shared
# by the log's codec (recordbatch.pyx: encode, scan, decode) and the shard loader
# (recordload.pyx). Inline helpers; the few cold or Python-calling pieces (ByteView, crc_ok,
# raise_corrupt) are implemented in recordbatch.pyx.
#
# Layout (integers big-endian unless varint; offsets from the start of the batch):
#   batch   = baseOffset int64 @0 | batchLength int32 @8 (bytes after this field)
#             | partitionLeaderEpoch int32 @12 | magic int8 @16 (= 2)
#             | crc uint32 @17 (CRC32C of every byte from attributes to the end of the batch)
#             | attributes int16 @21 (bits 0-2 compression: only 0 = none is accepted)
#             | lastOffsetDelta int32 @23 | baseTimestamp int64 @27 | maxTimestamp int64 @35
#             | producerId int64 @43 (-1) | producerEpoch int16 @51 (-1)
#             | baseSequence int32 @53 (-1) | recordCount int32 @57 | records @61
#   record  = length varint (bytes after this field) | attributes int8
#             | timestampDelta varlong | offsetDelta varint
#             | keyLength varint (-1 = null) | key | valueLength varint (-1 = null: tombstone)
#             | value | headerCount varint | headers
#   header  = keyLength varint (>= 0) | key | valueLength varint (-1 = null) | value
#   varint / varlong: wire.pxd.
#
# Every length read from the buffer is checked against the bytes that remain (of the buffer,
# of the batch, of the record) before it is used to advance or to allocate: a lying length is
# "corrupt" (-1, with a reason), never an over-read. A batch whose declared length runs past
# the end of the buffer is "truncated" (1): a torn tail when it is the last thing in a file,
# or a read that must go on. The walk itself reports a reason instead of raising;
# next_batch turns a bad batch into CorruptBatchError / TruncatedBatchError (raise_corrupt).
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t

from groupcoord._native.wire cimport (VARINT_OK, VARINT_SHORT, be16, be32, be64, get_uvarint,
                                      put16, put32, put64, unzigzag32, unzigzag64)


cdef enum:
    AT_LENGTH = 8
    AT_LEADER_EPOCH = 12
    AT_MAGIC = 16
    AT_CRC = 17
    AT_ATTRIBUTES = 21          # also where the CRC'd bytes start
    AT_LAST_OFFSET_DELTA = 23
    AT_BASE_TIMESTAMP = 27
    AT_MAX_TIMESTAMP = 35
    AT_PRODUCER_ID = 43
    AT_PRODUCER_EPOCH = 51
    AT_BASE_SEQUENCE = 53
    AT_RECORD_COUNT = 57
    HEADER_SIZE = 61            # the records start here
    LOG_OVERHEAD = 12           # baseOffset + batchLength: bytes batchLength does not count
    MIN_BATCH_LENGTH = 49       # batchLength of a batch with no records
    MAX_BATCH_LENGTH = 1 << 30  # a batchLength above this is corrupt whatever the buffer holds
    MIN_RECORD_LENGTH = 6       # attributes, 3 deltas/lengths, headerCount: a byte each ...
    SMALLEST_RECORD = 7         # ... plus the record's own length varint


cdef struct Batch:
    Py_ssize_t pos              # where the batch starts in the buffer
    Py_ssize_t end              # where it ends (pos + LOG_OVERHEAD + length): the next batch
    int64_t base_offset
    int32_t length              # batchLength
    int32_t leader_epoch
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int32_t count


cdef struct Cursor:
    # Walks the records of one batch (first_record, then next_record count times).
    const unsigned char* buf
    Py_ssize_t pos              # the next record
    Py_ssize_t end              # the end of the batch
    int32_t last_delta          # the batch's lastOffsetDelta
    int32_t prev_delta          # offsetDelta of the record before (-1: none yet)
    const char* err             # why next_record failed
    # the record next_record has just read
    int64_t timestamp_delta
    int32_t offset_delta
    Py_ssize_t key_at
    int32_t key_len             # -1: null key
    Py_ssize_t value_at
    int32_t value_len           # -1: null value (a tombstone)


cdef class ByteView:
    # A read-only buffer over any bytes-like object, released on collection.
    cdef Py_buffer view
    cdef bint held
    cdef object mv              # the same bytes as a memoryview, for crc32c
    cdef const unsigned char* buf
    cdef Py_ssize_t len


# Implemented in recordbatch.pyx.
cdef bint crc_ok(ByteView v, Batch* h) except -1
cdef int raise_corrupt(object path, Py_ssize_t position, const char* reason,
                       bint truncated) except -1


cdef inline Py_ssize_t clamp_end(ByteView v, Py_ssize_t end) noexcept:
    # end < 0 (or past the buffer) means the end of the buffer.
    return v.len if (end < 0 or end > v.len) else end


# ---------------------------------------------------------------- batch header

cdef inline int read_header(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end,
                            Batch* h, const char** err) noexcept:
    # 0 = a complete batch at pos with a plausible header; 1 = the buffer ends inside it
    # (truncated); -1 = corrupt (err says why). Does not check the CRC or the records.
    cdef Py_ssize_t avail = end - pos
    if avail < LOG_OVERHEAD:
        err[0] = "the buffer ends inside the batch's offset/length"
        return 1
    h.pos = pos
    h.base_offset = be64(buf + pos)
    h.length = be32(buf + pos + AT_LENGTH)
    if h.length < MIN_BATCH_LENGTH or h.length > MAX_BATCH_LENGTH:
        err[0] = "batchLength out of range"
        return -1
    if avail < HEADER_SIZE:
        err[0] = "the buffer ends inside the batch header"
        return 1
    if <int8_t>buf[pos + AT_MAGIC] != 2:
        err[0] = "magic is not 2"
        return -1
    if h.length > avail - LOG_OVERHEAD:
        err[0] = "the buffer ends before the batch's declared length"
        return 1
    h.end = pos + LOG_OVERHEAD + h.length
    h.leader_epoch = be32(buf + pos + AT_LEADER_EPOCH)
    h.attributes = be16(buf + pos + AT_ATTRIBUTES)
    h.last_offset_delta = be32(buf + pos + AT_LAST_OFFSET_DELTA)
    h.base_timestamp = be64(buf + pos + AT_BASE_TIMESTAMP)
    h.max_timestamp = be64(buf + pos + AT_MAX_TIMESTAMP)
    h.count = be32(buf + pos + AT_RECORD_COUNT)
    if h.attributes & 0x07:
        err[0] = "compressed batches are not supported"
        return -1
    if h.count < 0 or h.count > (h.length - MIN_BATCH_LENGTH) // SMALLEST_RECORD:
        err[0] = "recordCount does not fit in the batch"
        return -1
    if h.last_offset_delta < 0 or (h.count > 0 and h.last_offset_delta < h.count - 1):
        err[0] = "lastOffsetDelta is inconsistent with recordCount"
        return -1
    return 0


cdef inline void write_header(unsigned char* p, int64_t base_offset, int32_t length,
                              int32_t leader_epoch, int32_t last_offset_delta,
                              int64_t base_timestamp, int64_t max_timestamp,
                              int32_t count) noexcept:
    # Everything but the CRC (written last, over the finished batch). No producer (id,
    # epoch, sequence -1), attributes 0: no compression, CreateTime, not transactional.
    put64(p, base_offset)
    put32(p + AT_LENGTH, <uint32_t>length)
    put32(p + AT_LEADER_EPOCH, <uint32_t>leader_epoch)
    p[AT_MAGIC] = 2
    put32(p + AT_CRC, 0)
    put16(p + AT_ATTRIBUTES, 0)
    put32(p + AT_LAST_OFFSET_DELTA, <uint32_t>last_offset_delta)
    put64(p + AT_BASE_TIMESTAMP, base_timestamp)
    put64(p + AT_MAX_TIMESTAMP, max_timestamp)
    put64(p + AT_PRODUCER_ID, -1)
    put16(p + AT_PRODUCER_EPOCH, 0xFFFF)
    put32(p + AT_BASE_SEQUENCE, 0xFFFFFFFF)
    put32(p + AT_RECORD_COUNT, <uint32_t>count)


# ---------------------------------------------------------------- records

cdef inline int _varint(Cursor* c, Py_ssize_t* p, Py_ssize_t end, int bits,
                        int64_t* out) noexcept:
    # A zigzag varint (bits 32) or varlong (bits 64) ending before `end`.
    cdef uint64_t u
    cdef int rc = get_uvarint(c.buf, p, end, bits, &u)
    if rc != VARINT_OK:
        c.err = ("varint runs past the end of its record" if rc == VARINT_SHORT
                 else "varint longer than 32 bits" if bits == 32
                 else "varlong longer than 64 bits")
        return -1
    out[0] = unzigzag32(<uint32_t>u) if bits == 32 else unzigzag64(u)
    return 0

cdef inline int _length(Cursor* c, Py_ssize_t* p, Py_ssize_t end, bint nullable,
                        int32_t* out) noexcept:
    # A varint length: -1 (null) where nullable, else 0 .. bytes that remain.
    cdef int64_t n
    if _varint(c, p, end, 32, &n) < 0:
        return -1
    out[0] = <int32_t>n
    if n < 0:
        if n == -1 and nullable:
            return 0
        c.err = "negative length"
        return -1
    if n > end - p[0]:
        c.err = "length runs past the end of its record"
        return -1
    return 0


cdef inline void first_record(Cursor* c, const unsigned char* buf, Batch* h) noexcept:
    c.buf = buf
    c.pos = h.pos + HEADER_SIZE
    c.end = h.end
    c.last_delta = h.last_offset_delta
    c.prev_delta = -1
    c.err = NULL


cdef inline int next_record(Cursor* c) noexcept:
    # Validates the record at c.pos and reports its fields; leaves c.pos after it. -1 with
    # c.err on a malformed record (c.pos is then meaningless).
    cdef Py_ssize_t p = c.pos, rend
    cdef int64_t rlen, od, hcount, i
    cdef int32_t n
    if _varint(c, &p, c.end, 32, &rlen) < 0:
        return -1
    if rlen < MIN_RECORD_LENGTH or rlen > c.end - p:
        c.err = "record length out of range"
        return -1
    rend = p + rlen
    p += 1                                              # record attributes (unused)
    if _varint(c, &p, rend, 64, &c.timestamp_delta) < 0 or _varint(c, &p, rend, 32, &od) < 0:
        return -1
    if od <= c.prev_delta or od > c.last_delta:
        c.err = "offsetDelta out of order or past lastOffsetDelta"
        return -1
    c.offset_delta = c.prev_delta = <int32_t>od
    if _length(c, &p, rend, True, &c.key_len) < 0:
        return -1
    c.key_at = p
    if c.key_len > 0:
        p += c.key_len
    if _length(c, &p, rend, True, &c.value_len) < 0:
        return -1
    c.value_at = p
    if c.value_len > 0:
        p += c.value_len
    if _varint(c, &p, rend, 32, &hcount) < 0:
        return -1
    if hcount < 0 or hcount > rend - p:
        c.err = "headerCount out of range"
        return -1
    for i in range(hcount):
        if _length(c, &p, rend, False, &n) < 0:
            return -1
        p += n
        if _length(c, &p, rend, True, &n) < 0:
            return -1
        if n > 0:
            p += n
    if p != rend:
        c.err = "record length disagrees with its fields"
        return -1
    c.pos = p
    return 0


cdef inline int check_records(const unsigned char* buf, Batch* h, const char** err) noexcept:
    # 0 when the batch holds exactly recordCount well-formed records; -1 with err otherwise.
    cdef Cursor c
    cdef int32_t i
    first_record(&c, buf, h)
    for i in range(h.count):
        if next_record(&c) < 0:
            err[0] = c.err
            return -1
    if c.pos != c.end:
        err[0] = "bytes left in the batch after recordCount records"
        return -1
    return 0


# ---------------------------------------------------------------- whole batch

cdef inline int check_body(ByteView v, Batch* h, const char** err) except -2:
    # After read_header: the CRC, then every record. 0 = valid; -1 = corrupt (err).
    if not crc_ok(v, h):
        err[0] = "CRC32C mismatch"
        return -1
    return check_records(v.buf, h, err)


cdef inline int check_batch(ByteView v, Py_ssize_t pos, Py_ssize_t end, Batch* h,
                            const char** err) except -2:
    # The batch at pos, validated whole (header, CRC, every record) so that nothing of a bad
    # batch is ever used: 0 = valid (h describes it); 1 = truncated; -1 = corrupt (err).
    cdef int rc = read_header(v.buf, pos, end, h, err)
    if rc != 0:
        return rc
    return check_body(v, h, err)


cdef inline int next_batch(ByteView v, Py_ssize_t pos, Py_ssize_t end, Batch* h, object path,
                           Py_ssize_t base, bint partial) except -1:
    # check_batch, with a bad batch raised as CorruptBatchError(path, base + pos, reason)
    # (``base``: the file position of the buffer's first byte). 0 = valid; 1 (nothing done)
    # when ``partial`` and the buffer ends inside the batch: the caller reads on from there.
    cdef const char* err = NULL
    cdef int rc = check_batch(v, pos, end, h, &err)
    if rc == 1 and partial:
        return 1
    if rc != 0:
        raise_corrupt(path, base + pos, err, rc == 1)
    return 0
