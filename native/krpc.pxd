# cython: language_level=3
# KRPC primitive readers and writers, inlined into every codec module that cimports them.
#
# Wire layout (all integers big-endian, as Kafka's protocol guide defines them):
#   int8/16/32/64, uint16/32    fixed width, two's complement
#   float64                     IEEE 754 binary64
#   bool                        int8, non-zero = true
#   uuid                        16 raw bytes
#   unsigned varint             7 bits per byte, low group first, high bit = more (<= 5 bytes)
#   varint / varlong            zigzag-encoded signed, then as unsigned varint (<= 5 / 10 bytes)
#   string                      int16 length, then UTF-8 (-1 = null where nullable)
#   compact string              unsigned varint (length + 1), then UTF-8 (0 = null)
#   bytes                       int32 length, then raw (-1 = null where nullable)
#   compact bytes               unsigned varint (length + 1), then raw (0 = null)
#   array                       int32 count, then elements (-1 = null where nullable)
#   compact array               unsigned varint (count + 1), then elements (0 = null)
#   tagged fields               unsigned varint count, then per field: uvarint tag,
#                               uvarint size, size bytes of value
#
# Invariant every reader relies on: r.pos <= r.end, and no byte at or past r.end is touched.
# Every length read from the wire is checked against the bytes that remain before it is used
# to allocate or to advance, so a lying length can never cause an over-read or a large
# allocation. The bytes themselves (fixed-width ints, varints) are read and written by
# wire.pxd, shared with the record log; here its failures become exceptions.
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8


from cpython.ref cimport PyObject
from cpython.object cimport PyTypeObject
from libc.string cimport memset

from groupcoord._native.wire cimport (VARINT_SHORT, VARINT_LONG, be_u16, be_u32, be64,
                                      get_uvarint, put16, put32, put64, put_uvarint,
                                      unzigzag32, unzigzag64, zigzag32, zigzag64)


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyList_New(Py_ssize_t n)
    void PyList_SET_ITEM(object lst, Py_ssize_t i, object o)   # steals a reference
    void Py_INCREF(object o)
    void PyObject_GC_UnTrack(void* o)
    void* PyObject_Malloc(size_t n)
    object PyObject_Init(PyObject* op, PyTypeObject* tp)   # returns op, refcount 1
    bint PyUnicode_CheckExact(object o)
    bint PyBytes_CheckExact(object o)
    char* PyBytes_AS_STRING(object o)
    Py_ssize_t PyBytes_GET_SIZE(object o)
    bint PyLong_Check(object o)
    bint PyIndex_Check(object o)
    object PyNumber_Index(object o)


# Absolute cap on any array's element count, on top of the remaining-bytes bound.
cdef enum:
    MAX_ARRAY = 1 << 26


cdef struct Reader:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end
    Py_ssize_t base        # offset of buf[0] in the caller's frame, for error messages
    const char* field      # what is being decoded right now, for error messages


cdef struct Writer:
    unsigned char* buf
    Py_ssize_t len
    Py_ssize_t cap
    const char* field      # what is being encoded right now, for error messages


# Cold paths, implemented once in krpc.pyx.
cdef int raise_truncated(Reader* r, Py_ssize_t need) except -1
cdef int raise_invalid(Reader* r, str what) except -1
cdef object raise_bad_utf8(Reader* r, Py_ssize_t start)
cdef int raise_encode(Writer* w, str what) except -1
cdef int writer_grow(Writer* w, Py_ssize_t extra) except -1
cdef int writer_init(Writer* w, Py_ssize_t cap) except -1
cdef void writer_free(Writer* w) noexcept
cdef bytes writer_bytes(Writer* w)
cdef int write_bytes_obj(Writer* w, object v, bint compact, bint nullable) except -1
cdef int reader_from_object(Reader* r, object data, Py_buffer* view) except -1  # 1 = view taken
cdef int raise_too_many(Reader* r, Py_ssize_t n) except -1
cdef object cached_str(Reader* r, Py_ssize_t n)
cdef object cached_uuid(const unsigned char* p)
cdef Py_ssize_t slot_offset(object cls, str name) except -1
cdef Py_ssize_t fast_alloc_size(object cls) except -2
cdef object unsupported_request(int api_key, int version, int32_t corr)


# ---------------------------------------------------------------- reading

cdef inline int check_array_count(Reader* r, Py_ssize_t n, Py_ssize_t min_elem) except -1:
    if min_elem < 1:
        min_elem = 1
    if n > MAX_ARRAY or n > (r.end - r.pos) // min_elem:
        raise_too_many(r, n)
    return 0

cdef inline object new_list(Py_ssize_t n):
    # A list of n NULL slots, to be filled with set_item. Decoded messages are trees, so their
    # lists are taken out of the cyclic GC (see set_item / finish_list).
    return PyList_New(n)

cdef inline void set_item(object lst, Py_ssize_t i, object o) noexcept:
    Py_INCREF(o)
    PyList_SET_ITEM(lst, i, o)

cdef inline object new_struct(object cls, Py_ssize_t size):
    # Fast path invariant (checked once per class by fast_alloc_size): a gc=False msgspec
    # Struct is a plain non-GC object of tp_basicsize bytes whose slots are all object
    # pointers, allocated with PyObject_Malloc and freed by its own tp_dealloc; zeroed slots
    # are "unset" and every one is then filled with set_field.
    cdef PyObject* o = <PyObject*>PyObject_Malloc(size)
    if o == NULL:
        raise MemoryError()
    memset(o, 0, size)
    return PyObject_Init(o, <PyTypeObject*>cls)

cdef inline void set_field(object obj, Py_ssize_t off, object v) noexcept:
    Py_INCREF(v)
    (<PyObject**>((<char*><PyObject*>obj) + off))[0] = <PyObject*>v

cdef inline object finish_list(object lst):
    # Invariant: a decoded list holds only values the decoder made (ints, str, bytes, or
    # Structs, which are gc=False), so it cannot be part of a reference cycle unless the user
    # builds one; untracking it keeps large decodes from driving GC collections.
    PyObject_GC_UnTrack(<void*>lst)
    return lst

cdef inline int need(Reader* r, Py_ssize_t n) except -1:
    if r.end - r.pos < n:
        raise_truncated(r, n)
    return 0

cdef inline const unsigned char* take(Reader* r, Py_ssize_t n) except NULL:
    # The next n (>= 1) bytes of the input, checked to be there, and consumed.
    need(r, n)
    r.pos += n
    return r.buf + r.pos - n

cdef inline int8_t read_int8(Reader* r) except? -1:
    need(r, 1)
    cdef int8_t v = <int8_t>r.buf[r.pos]
    r.pos += 1
    return v

cdef inline bint read_bool(Reader* r) except? -1:
    need(r, 1)
    cdef bint v = r.buf[r.pos] != 0
    r.pos += 1
    return v

cdef inline uint16_t read_uint16(Reader* r) except? 0xFFFF:
    return be_u16(take(r, 2))

cdef inline int16_t read_int16(Reader* r) except? -1:
    return <int16_t>read_uint16(r)

cdef inline uint32_t read_uint32(Reader* r) except? 0xFFFFFFFF:
    return be_u32(take(r, 4))

cdef inline int32_t read_int32(Reader* r) except? -1:
    return <int32_t>read_uint32(r)

cdef inline int64_t read_int64(Reader* r) except? -1:
    return be64(take(r, 8))

cdef inline double read_float64(Reader* r) except? -1:
    cdef uint64_t bits = <uint64_t>read_int64(r)
    cdef double d
    memcpy(&d, &bits, 8)
    return d

cdef inline uint64_t _read_uvar(Reader* r, int bits) except? 0xFFFFFFFFFFFFFFFF:
    # wire.pxd's varint reader, with its failures raised as this Reader's errors.
    cdef uint64_t v = 0
    cdef int rc = get_uvarint(r.buf, &r.pos, r.end, bits, &v)
    if rc == VARINT_SHORT:
        raise_truncated(r, 1)
    elif rc == VARINT_LONG:
        raise_invalid(r, "unsigned varint longer than 32 bits" if bits == 32
                      else "unsigned varlong longer than 64 bits")
    return v

cdef inline uint32_t read_uvarint(Reader* r) except? 0xFFFFFFFF:
    return <uint32_t>_read_uvar(r, 32)

cdef inline uint64_t read_uvarlong(Reader* r) except? 0xFFFFFFFFFFFFFFFF:
    return _read_uvar(r, 64)

cdef inline int32_t read_varint(Reader* r) except? -1:
    return unzigzag32(<uint32_t>_read_uvar(r, 32))

cdef inline int64_t read_varlong(Reader* r) except? -1:
    return unzigzag64(_read_uvar(r, 64))

cdef inline bytes read_raw(Reader* r, Py_ssize_t n):
    need(r, n)
    cdef bytes out = PyBytes_FromStringAndSize(<const char*>(r.buf + r.pos), n)
    r.pos += n
    return out

cdef inline object read_uuid(Reader* r):
    need(r, 16)
    cdef object u = cached_uuid(r.buf + r.pos)
    r.pos += 16
    return u

cdef inline object _utf8(Reader* r, Py_ssize_t n):
    need(r, n)
    if n <= 64:
        return cached_str(r, n)     # group/member/topic names repeat request after request
    cdef Py_ssize_t start = r.pos
    cdef object s
    try:
        s = PyUnicode_DecodeUTF8(<const char*>(r.buf + start), n, NULL)
    except UnicodeDecodeError:
        return raise_bad_utf8(r, start)
    r.pos += n
    return s

cdef inline Py_ssize_t _length(Reader* r, int32_t n, bint nullable) except -2:
    # A classic (int16/int32) string/bytes length: -1 = null where nullable, else >= 0.
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise_invalid(r, "length %d" % n)
    return n

cdef inline Py_ssize_t _compact_length(Reader* r, bint nullable) except -2:
    # A compact length, uvarint(length + 1): 0 = null where nullable. Checked against the bytes
    # that remain here, before the caller touches them.
    cdef uint32_t n = read_uvarint(r)
    if n == 0:
        if nullable:
            return -1
        raise_invalid(r, "null in a non-nullable field")
    if n - 1 > <uint32_t>(r.end - r.pos):
        raise_truncated(r, n - 1)
    return <Py_ssize_t>(n - 1)

cdef inline object read_string(Reader* r, bint nullable):
    cdef Py_ssize_t n = _length(r, read_int16(r), nullable)
    return None if n < 0 else _utf8(r, n)

cdef inline object read_compact_string(Reader* r, bint nullable):
    cdef Py_ssize_t n = _compact_length(r, nullable)
    return None if n < 0 else _utf8(r, n)

cdef inline object read_bytes(Reader* r, bint nullable):
    cdef Py_ssize_t n = _length(r, read_int32(r), nullable)
    return None if n < 0 else read_raw(r, n)

cdef inline object read_compact_bytes(Reader* r, bint nullable):
    cdef Py_ssize_t n = _compact_length(r, nullable)
    return None if n < 0 else read_raw(r, n)

cdef inline Py_ssize_t read_array_len(Reader* r, bint nullable, Py_ssize_t min_elem) except -2:
    # Returns the element count, or -1 for a null array. The count is bounded by the bytes
    # that remain (count * smallest element size), so a huge count cannot drive allocation.
    cdef int32_t n = read_int32(r)
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise_invalid(r, "array length %d" % n)
    check_array_count(r, n, min_elem)
    return n

cdef inline Py_ssize_t read_compact_array_len(Reader* r, bint nullable,
                                              Py_ssize_t min_elem) except -2:
    cdef uint32_t n = read_uvarint(r)
    if n == 0:
        if nullable:
            return -1
        raise_invalid(r, "null compact array in a non-nullable field")
    check_array_count(r, <Py_ssize_t>(n - 1), min_elem)
    return <Py_ssize_t>(n - 1)

cdef inline Py_ssize_t read_tag_size(Reader* r) except -1:
    cdef uint32_t size = read_uvarint(r)
    if size > <uint32_t>(r.end - r.pos):
        raise_truncated(r, size)
    return size

cdef inline int skip_tagged_fields(Reader* r) except -1:
    cdef uint32_t count = read_uvarint(r)
    cdef uint32_t i
    for i in range(count):
        read_uvarint(r)
        r.pos += read_tag_size(r)
    return 0

cdef inline int read_request_ids(Reader* r, int16_t* api_key, int16_t* version,
                                 int32_t* corr) except -1:
    # The start of every request header: api_key, api_version, correlation_id. The caller
    # decides from them whether it reads this request (else raise unsupported_request).
    r.field = b"RequestHeader.api_key"
    api_key[0] = read_int16(r)
    r.field = b"RequestHeader.api_version"
    version[0] = read_int16(r)
    r.field = b"RequestHeader.correlation_id"
    corr[0] = read_int32(r)
    return 0

cdef inline object read_client_id(Reader* r, bint flexible):
    # The rest of the request header: client_id, an int16-length string even in header v2
    # (flexible api versions), then header v2's tagged fields.
    r.field = b"RequestHeader.client_id"
    client_id = read_string(r, 1)
    if flexible:
        r.field = b"RequestHeader.<tagged fields>"
        skip_tagged_fields(r)
    return client_id


# ---------------------------------------------------------------- writing

cdef inline object get_slot(Writer* w, object m, Py_ssize_t off):
    # Fast path invariant: msgspec Struct fields are member slots at fixed offsets; the
    # encoder checked type(m) against the class the offsets were read from (slot_offset).
    cdef PyObject* p = (<PyObject**>((<char*><PyObject*>m) + off))[0]
    if p == NULL:
        raise_encode(w, "field is unset")
    return <object>p

cdef inline int check_struct(Writer* w, object m, object cls) except -1:
    if type(m) is not cls and not isinstance(m, cls):
        raise_encode(w, "expected %s, got %s" % (cls.__name__, type(m).__name__))
    return 0

cdef inline int ensure(Writer* w, Py_ssize_t n) except -1:
    if w.cap - w.len < n:
        writer_grow(w, n)
    return 0

cdef inline unsigned char* reserve(Writer* w, Py_ssize_t n) except NULL:
    # The next n bytes of the output, for the caller to fill.
    ensure(w, n)
    w.len += n
    return w.buf + w.len - n

cdef inline int write_int8(Writer* w, int8_t v) except -1:
    reserve(w, 1)[0] = <unsigned char>v
    return 0

cdef inline object as_int(Writer* w, object v):
    # Integer fields take int (bool included: it is an int) or anything with __index__
    # (numpy integers). Floats, Decimals and strings are refused rather than truncated.
    if PyLong_Check(v):
        return v
    if PyIndex_Check(v):
        return PyNumber_Index(v)
    raise_encode(w, "expected int, got %s" % type(v).__name__)

cdef inline int write_bool(Writer* w, object v) except -1:
    if v is True:
        return write_int8(w, 1)
    if v is False:
        return write_int8(w, 0)
    if PyLong_Check(v) and (v == 0 or v == 1):
        return write_int8(w, 1 if v else 0)
    raise_encode(w, "expected bool, got %r" % (v,))
    return -1

cdef inline int write_uint16(Writer* w, uint16_t v) except -1:
    put16(reserve(w, 2), v)
    return 0

cdef inline int write_int16(Writer* w, int16_t v) except -1:
    return write_uint16(w, <uint16_t>v)

cdef inline int write_uint32(Writer* w, uint32_t v) except -1:
    put32(reserve(w, 4), v)
    return 0

cdef inline int write_int32(Writer* w, int32_t v) except -1:
    return write_uint32(w, <uint32_t>v)

cdef inline int put_int32_at(Writer* w, Py_ssize_t at, int32_t v) noexcept:
    # Backfill a length prefix reserved earlier.
    put32(w.buf + at, <uint32_t>v)
    return 0

cdef inline int write_int64(Writer* w, int64_t v) except -1:
    put64(reserve(w, 8), v)
    return 0

cdef inline int write_float64(Writer* w, double d) except -1:
    cdef int64_t bits
    memcpy(&bits, &d, 8)
    return write_int64(w, bits)

cdef inline int write_uvarint(Writer* w, uint32_t v) except -1:
    ensure(w, 5)
    w.len = put_uvarint(w.buf + w.len, v) - w.buf
    return 0

cdef inline int write_uvarlong(Writer* w, uint64_t v) except -1:
    ensure(w, 10)
    w.len = put_uvarint(w.buf + w.len, v) - w.buf
    return 0

cdef inline int write_varint(Writer* w, int32_t v) except -1:
    return write_uvarint(w, zigzag32(v))

cdef inline int write_varlong(Writer* w, int64_t v) except -1:
    return write_uvarlong(w, zigzag64(v))

cdef inline int write_raw(Writer* w, const char* p, Py_ssize_t n) except -1:
    ensure(w, n)
    memcpy(w.buf + w.len, p, n)
    w.len += n
    return 0

cdef inline int write_null(Writer* w, bint compact, bint nullable, bint wide,
                           str what) except -1:
    # None in a string (wide: bytes, array) field: refused where the field is not nullable,
    # else the null marker, uvarint 0 (compact) or length -1 (int16, wide: int32).
    if not nullable:
        raise_encode(w, "None is not allowed (%s is not nullable at this version)" % what)
    if compact:
        return write_uvarint(w, 0)
    if wide:
        return write_int32(w, -1)
    return write_int16(w, -1)

cdef inline int write_string(Writer* w, object v, bint compact, bint nullable) except -1:
    cdef Py_ssize_t n
    cdef const char* p
    if v is None:
        return write_null(w, compact, nullable, False, "field")
    if not PyUnicode_CheckExact(v) and not isinstance(v, str):
        raise_encode(w, "expected str, got %s" % type(v).__name__)
    try:
        p = PyUnicode_AsUTF8AndSize(v, &n)
    except UnicodeEncodeError:
        raise_encode(w, "string cannot be encoded as UTF-8 (lone surrogate)")
    if compact:
        write_uvarint(w, <uint32_t>(n + 1))
    else:
        if n > 32767:
            raise_encode(w, "string of %d bytes exceeds the int16 length limit" % n)
        write_int16(w, <int16_t>n)
    return write_raw(w, p, n)

cdef inline int write_uuid(Writer* w, object v) except -1:
    if PyBytes_CheckExact(v) and PyBytes_GET_SIZE(v) == 16:
        return write_raw(w, PyBytes_AS_STRING(v), 16)
    raise_encode(w, "uuid must be 16 bytes, got %r" % (v,))
    return -1

cdef inline int write_array_len(Writer* w, object v, bint compact, bint nullable) except -1:
    # Writes the count prefix of a list (or the null marker) and returns nothing else; the
    # caller iterates the elements.
    if v is None:
        return write_null(w, compact, nullable, True, "array")
    cdef Py_ssize_t n = len(v)
    if compact:
        return write_uvarint(w, <uint32_t>(n + 1))
    return write_int32(w, <int32_t>n)
