# cython: language_level=3, boundscheck=False, wraparound=False
# OffsetCommit (api key 8) read and answered straight from its request frame, for a commit too
# large to be decoded into message objects (docs/server.md, "Bounds"): a million partitions
# become a million Python objects in decode_request_frame, and as many again in the handler
# and the response. Here the frame is walked once in C: ``scan_offset_commit`` keeps O(topics)
# objects, ``offset_commit_error_frame`` writes the answer that gives every partition one
# error code.
#
# Request frame, without its size prefix (as decode_request_frame takes it; versions 2-9,
# flexible from 8: compact strings and arrays, tagged fields where marked):
#   int16 api_key (8) | int16 api_version | int32 correlation_id
#   | client_id: int16-length nullable string (never compact) | tagged fields (v8+)
#   | group_id: string | generation_id_or_member_epoch: int32 | member_id: string
#   | group_instance_id: nullable string (v7+) | retention_time_ms: int64 (v2-4)
#   | topics: array of
#       name: string
#       | partitions: array of
#           partition_index: int32 | committed_offset: int64
#           | committed_leader_epoch: int32 (v6+) | committed_metadata: nullable string
#           | tagged fields (v8+)
#       | tagged fields (v8+)
#   | tagged fields (v8+)
# Response frame (as encode_response_frame writes it):
#   int32 size | int32 correlation_id | tagged fields (v8+)
#   | throttle_time_ms: int32 (v3+) | topics: array of
#       name: string | partitions: array of partition_index: int32 | error_code: int16
#       | tagged fields (v8+) (partition) ... | tagged fields (v8+) (topic)
#   | tagged fields (v8+)
#
# Both functions check the bytes exactly as decode_request_frame does (same reads in the same
# order, same element-size bounds on array counts, strict UTF-8 in every string, bytes after
# the last field ignored), so a frame one of them refuses is refused by decode_request_frame
# with the same error, and the other way round.
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t
from cpython.buffer cimport PyBuffer_Release
from groupcoord._native.krpc cimport (Reader, Writer, need, read_int16, read_int32, read_int64,
                                      read_string, read_compact_string, read_array_len,
                                      read_compact_array_len, read_request_ids,
                                      read_client_id, unsupported_request,
                                      skip_tagged_fields, raise_bad_utf8,
                                      reader_from_object, writer_init, writer_free,
                                      writer_bytes, ensure, write_int16, write_int32,
                                      write_uvarint, write_raw, put_int32_at, _length,
                                      _compact_length, _utf8)
from groupcoord._native.krpc import DecodeError, UnsupportedVersionError
import groupcoord.protocol.messages as _m

cdef object C_RequestHeader = _m.RequestHeader
cdef object C_TrailingRequestHeader = _m.TrailingRequestHeader

OFFSET_COMMIT = 8
# The versions this module reads; tests/test_commit_scan.py checks they are the codec's.
VERSIONS = (2, 9)
cdef int MIN_VERSION = 2, MAX_VERSION = 9, FIRST_FLEXIBLE = 8


cdef inline int _check_utf8(Reader* r, Py_ssize_t n) except -1:
    # Well-formed UTF-8 (Unicode table 3-7), which is exactly what CPython's strict decoder
    # accepts: no overlong forms, no surrogates, nothing above U+10FFFF. Validates without
    # making a str (metadata is only counted). The caller checked that n bytes remain.
    cdef const unsigned char* p = r.buf + r.pos
    cdef Py_ssize_t i = 0
    cdef unsigned char c, lo, hi
    cdef int k, extra
    while i < n:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        lo, hi = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            extra = 1
        elif 0xE0 <= c <= 0xEF:
            extra = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            extra = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            raise_bad_utf8(r, r.pos)
            return -1
        if n - i <= extra or not (lo <= p[i + 1] <= hi):
            raise_bad_utf8(r, r.pos)
        for k in range(2, extra + 1):
            if (p[i + k] & 0xC0) != 0x80:
                raise_bad_utf8(r, r.pos)
        i += extra + 1
    r.pos += n
    return 0


cdef inline Py_ssize_t _str_len(Reader* r, bint flexible, bint nullable) except -2:
    # The length prefix of a (compact) string; afterwards its n bytes are known to remain.
    cdef Py_ssize_t n
    if flexible:
        return _compact_length(r, nullable)
    n = _length(r, read_int16(r), nullable)
    if n > 0:
        need(r, n)
    return n


cdef object _header(Reader* r):
    # As decode_request_frame reads it; raises UnsupportedVersionError (with the correlation
    # id) for a version this module does not read.
    cdef int16_t api_key, version
    cdef int32_t corr
    read_request_ids(r, &api_key, &version, &corr)
    if api_key != OFFSET_COMMIT:
        raise ValueError("api key %d is not OffsetCommit (%d)" % (api_key, OFFSET_COMMIT))
    if version < MIN_VERSION or version > MAX_VERSION:
        raise unsupported_request(api_key, version, corr)
    client_id = read_client_id(r, version >= FIRST_FLEXIBLE)
    return C_RequestHeader(api_key, version, corr, client_id)


cdef object _walk(Reader* r, int version, Writer* w, int16_t code):
    """The body after the header. w NULL: -> the scan's fields (group_id, generation or
    epoch, member_id, group_instance_id, retention_time_ms, [(topic name, partition count,
    metadata bytes)]). w set: writes the response body giving every partition ``code``."""
    cdef bint flex = version >= FIRST_FLEXIBLE
    cdef bint epoch = version >= 6
    cdef Py_ssize_t part_min = 18 if (flex or epoch) else 14
    cdef Py_ssize_t n_topics, n_parts, i, j, n, start
    cdef int64_t meta
    cdef int32_t gen, index
    cdef unsigned char* out
    cdef int64_t retention = -1
    cdef list topics = None
    group_id = member_id = instance_id = name = None
    r.field = b"OffsetCommitRequest.group_id"
    group_id = read_compact_string(r, 0) if flex else read_string(r, 0)
    r.field = b"OffsetCommitRequest.generation_id_or_member_epoch"
    gen = read_int32(r)
    r.field = b"OffsetCommitRequest.member_id"
    member_id = read_compact_string(r, 0) if flex else read_string(r, 0)
    if version >= 7:
        r.field = b"OffsetCommitRequest.group_instance_id"
        instance_id = read_compact_string(r, 1) if flex else read_string(r, 1)
    if version <= 4:
        r.field = b"OffsetCommitRequest.retention_time_ms"
        retention = read_int64(r)
    r.field = b"OffsetCommitRequest.topics"
    n_topics = read_compact_array_len(r, 0, 3) if flex else read_array_len(r, 0, 6)
    if w == NULL:
        topics = []
    else:
        if version >= 3:
            write_int32(w, 0)                       # throttle_time_ms
        if flex:
            write_uvarint(w, <uint32_t>(n_topics + 1))
        else:
            write_int32(w, <int32_t>n_topics)
    for i in range(n_topics):
        r.field = b"OffsetCommitRequestTopic.name"
        if w == NULL:
            name = read_compact_string(r, 0) if flex else read_string(r, 0)
        else:
            # Copied as it came: the decoded name would be encoded back to the same bytes.
            n = _str_len(r, flex, 0)
            start = r.pos
            _check_utf8(r, n)
            if flex:
                write_uvarint(w, <uint32_t>(n + 1))
            else:
                write_int16(w, <int16_t>n)
            write_raw(w, <const char*>(r.buf + start), n)
        r.field = b"OffsetCommitRequestTopic.partitions"
        n_parts = (read_compact_array_len(r, 0, part_min) if flex
                   else read_array_len(r, 0, part_min))
        if w != NULL:
            if flex:
                write_uvarint(w, <uint32_t>(n_parts + 1))
            else:
                write_int32(w, <int32_t>n_parts)
        meta = 0
        for j in range(n_parts):
            r.field = b"OffsetCommitRequestPartition.partition_index"
            index = read_int32(r)
            r.field = b"OffsetCommitRequestPartition.committed_offset"
            need(r, 8)
            r.pos += 8
            if epoch:
                r.field = b"OffsetCommitRequestPartition.committed_leader_epoch"
                need(r, 4)
                r.pos += 4
            r.field = b"OffsetCommitRequestPartition.committed_metadata"
            n = _str_len(r, flex, 1)
            if n > 0:
                _check_utf8(r, n)
                meta += n
            if flex:
                r.field = b"OffsetCommitRequestPartition.<tagged fields>"
                skip_tagged_fields(r)
            if w != NULL:
                # partition_index, error_code, (v8+) no tagged fields: 6 or 7 bytes
                ensure(w, 7)
                out = w.buf + w.len
                out[0] = <unsigned char>(<uint32_t>index >> 24)
                out[1] = <unsigned char>(<uint32_t>index >> 16)
                out[2] = <unsigned char>(<uint32_t>index >> 8)
                out[3] = <unsigned char>index
                out[4] = <unsigned char>(<uint16_t>code >> 8)
                out[5] = <unsigned char>code
                out[6] = 0
                w.len += 7 if flex else 6
        if flex:
            r.field = b"OffsetCommitRequestTopic.<tagged fields>"
            skip_tagged_fields(r)
            if w != NULL:
                write_uvarint(w, 0)
        if w == NULL:
            topics.append((name, n_parts, meta))
    if flex:
        r.field = b"OffsetCommitRequest.<tagged fields>"
        skip_tagged_fields(r)
        if w != NULL:
            write_uvarint(w, 0)
    # Bytes after the last field are left alone, as decode_request_frame leaves them (it
    # counts them in header.trailing_bytes; so does the scan).
    if w != NULL:
        return None
    return (group_id, gen, member_id, instance_id, retention, topics)


def scan_offset_commit(frame):
    """Read an OffsetCommit request frame (without its size prefix) without decoding its
    partitions. -> (RequestHeader, group_id, generation_id_or_member_epoch, member_id,
    group_instance_id, retention_time_ms, topics), topics a list of (name, partition count,
    metadata bytes): the fields decode_request_frame would give (group_instance_id None
    before v7, retention_time_ms -1 after v4; bytes after the last field give a
    TrailingRequestHeader counting them, as there), the partitions only counted.

    Raises as decode_request_frame does: UnsupportedVersionError (with .correlation_id) for
    a version outside VERSIONS, DecodeError (with .header once the header is read) for
    malformed bytes; ValueError for another api key."""
    cdef Reader r
    cdef Py_buffer view
    cdef int taken = reader_from_object(&r, frame, &view)
    header = None
    try:
        header = _header(&r)
        fields = _walk(&r, header.api_version, NULL, 0)
        if r.pos != r.end:
            header = C_TrailingRequestHeader(header.api_key, header.api_version,
                                             header.correlation_id, header.client_id,
                                             r.end - r.pos)
        return (header,) + fields
    except DecodeError as e:
        e.header = header
        raise
    finally:
        if taken:
            PyBuffer_Release(&view)


def offset_commit_error_frame(frame, int code):
    """The response frame (size prefix, correlation id, header and body as
    encode_response_frame writes them) answering the OffsetCommit request ``frame`` (without
    its size prefix) with ``code`` for every partition of every topic, in request order.
    Raises as scan_offset_commit for a frame it would refuse."""
    cdef Reader r
    cdef Writer w
    cdef Py_buffer view
    if not -32768 <= code <= 32767:
        raise ValueError("error code %d is not an int16" % code)
    cdef int taken = reader_from_object(&r, frame, &view)
    header = None
    w.buf = NULL
    try:
        # A partition's answer takes at most half its request (7 bytes of 14 or more); the
        # writer grows past this for a request of topics without partitions.
        writer_init(&w, r.end // 2 + 64)
        header = _header(&r)
        write_int32(&w, 0)                          # size, backfilled
        write_int32(&w, header.correlation_id)
        if header.api_version >= FIRST_FLEXIBLE:
            write_uvarint(&w, 0)
        _walk(&r, header.api_version, &w, <int16_t>code)
        put_int32_at(&w, 0, <int32_t>(w.len - 4))
        return writer_bytes(&w)
    except DecodeError as e:
        e.header = header
        raise
    finally:
        writer_free(&w)
        if taken:
            PyBuffer_Release(&view)
