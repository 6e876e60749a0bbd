# cython: language_level=3
# Cold paths of the KRPC primitives (errors, buffer growth) and the codec exception types.
# The hot paths are the inline functions in krpc.pxd.
from libc.stdlib cimport malloc, realloc, free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_XDECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy
from libc.stdint cimport uint32_t, uint64_t


class ProtocolError(Exception):
    """Base class of every error raised by the KRPC codec."""


class DecodeError(ProtocolError, ValueError):
    """Bytes that are not a valid encoding of the message being decoded.

    ``field`` names what was being decoded and ``offset`` is the byte offset (from the start
    of the buffer handed to the decoder) where the problem was found.
    """

    def __init__(self, message, field=None, offset=None):
        super().__init__(message)
        self.field = field
        self.offset = offset


class TruncatedError(DecodeError):
    """The buffer ends before the value being read (or a length field points past its end)."""


class InvalidUtf8Error(DecodeError):
    """A string field holds bytes that are not valid UTF-8."""


class TooManyElementsError(DecodeError):
    """An array count cannot fit in the bytes that remain, or exceeds the absolute cap."""


class UnsupportedVersionError(ProtocolError):
    """An api key / version pair this node does not speak."""

    def __init__(self, message, api_key=None, api_version=None):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version


class FrameTooLargeError(ProtocolError):
    """A size prefix larger than the configured maximum frame size (or negative)."""

    def __init__(self, message, size=None, limit=None):
        super().__init__(message)
        self.size = size
        self.limit = limit


class EncodeError(ProtocolError, ValueError):
    """A message that cannot be encoded at the requested version (wrong type, out of range
    value, a non-default value in a field the version does not have)."""

    def __init__(self, message, field=None):
        super().__init__(message)
        self.field = field


MAX_ARRAY_ELEMENTS = MAX_ARRAY


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

cdef int _T_OBJECT = 6, _T_OBJECT_EX = 16
cdef object _member_descriptor = type(type.__dict__["__dictoffset__"])


cdef Py_ssize_t slot_offset(object cls, str name) except -1:
    """Byte offset of field `name` in instances of msgspec Struct `cls` (a member slot)."""
    d = cls.__dict__.get(name)
    if type(d) is not _member_descriptor:
        raise TypeError("%s.%s is not a member slot; the codec needs msgspec Structs"
                        % (cls.__name__, name))
    cdef PyMemberDef* md = (<PyMemberDescrObject*><PyObject*>d).d_member
    if md.type != _T_OBJECT_EX and md.type != _T_OBJECT:
        raise TypeError("%s.%s is not an object slot" % (cls.__name__, name))
    return md.offset


cdef inline str _field(const char* f):
    return (<bytes>f).decode() if f != NULL else "<message>"


cdef int raise_truncated(Reader* r, Py_ssize_t need) except -1:
    raise TruncatedError(
        "truncated: %s needs %d byte(s) at offset %d but only %d remain"
        % (_field(r.field), need, r.base + r.pos, r.end - r.pos),
        _field(r.field), r.base + r.pos)


cdef int raise_invalid(Reader* r, str what) except -1:
    raise DecodeError("invalid %s at offset %d: %s" % (_field(r.field), r.base + r.pos, what),
                      _field(r.field), r.base + r.pos)


cdef object raise_bad_utf8(Reader* r, Py_ssize_t start):
    raise InvalidUtf8Error("invalid UTF-8 in %s at offset %d" % (_field(r.field), r.base + start),
                           _field(r.field), r.base + start)


cdef object unsupported_request(int api_key, int version, int32_t corr):
    # The error for a request header naming an api this reader does not read; it carries the
    # correlation id so that the caller can still answer.
    e = UnsupportedVersionError("unsupported api key %d version %d" % (api_key, version),
                                api_key, version)
    e.correlation_id = corr
    return e


# Direct-mapped caches of recently decoded short strings and UUIDs. Decoding the same group
# id, member id or topic id again returns the cached (immutable) object instead of a new one.
# Entries are owned references; a collision simply replaces the entry.
cdef enum:
    CACHE_SLOTS = 2048
cdef PyObject* _str_cache[2048]
cdef PyObject* _uuid_cache[2048]


cdef inline uint32_t _slot_hash(const unsigned char* p, Py_ssize_t n) noexcept:
    # O(1) in the length: mixes the length with the first and last 8 bytes (a slot is only a
    # hint; memcmp decides). Strings shorter than 8 bytes are hashed byte by byte.
    cdef uint64_t a, b, h
    cdef Py_ssize_t i
    if n >= 8:
        memcpy(&a, p, 8)
        memcpy(&b, p + n - 8, 8)
        h = (a * 0x9E3779B97F4A7C15u) ^ (b * 0xC2B2AE3D27D4EB4Fu) ^ <uint64_t>n
        return <uint32_t>(h ^ (h >> 29) ^ (h >> 41))
    h = <uint64_t>n
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001B3u
    return <uint32_t>(h ^ (h >> 32))


cdef inline object _store(PyObject** slot, object value):
    Py_XDECREF(slot[0])
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    return value


cdef object cached_str(Reader* r, Py_ssize_t n):
    # Caller checked that n bytes remain. Only exact str objects are ever stored, and their
    # UTF-8 form is cached by CPython after the first PyUnicode_AsUTF8AndSize.
    cdef const unsigned char* p = r.buf + r.pos
    cdef PyObject** slot = &_str_cache[_slot_hash(p, n) & (CACHE_SLOTS - 1)]
    cdef Py_ssize_t clen
    cdef const char* cp
    if slot[0] != NULL:
        cp = PyUnicode_AsUTF8AndSize(<object>slot[0], &clen)
        if clen == n and memcmp(cp, p, n) == 0:
            r.pos += n
            return <object>slot[0]
    try:
        s = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return raise_bad_utf8(r, r.pos)
    r.pos += n
    return _store(slot, s)


cdef object cached_uuid(const unsigned char* p):
    cdef PyObject** slot = &_uuid_cache[_slot_hash(p, 16) & (CACHE_SLOTS - 1)]
    if slot[0] != NULL and memcmp(PyBytes_AS_STRING(<object>slot[0]), p, 16) == 0:
        return <object>slot[0]
    return _store(slot, PyBytes_FromStringAndSize(<const char*>p, 16))


cdef Py_ssize_t fast_alloc_size(object cls) except -2:
    """tp_basicsize of cls when decoders may build its instances directly (new_struct +
    set_field), else -1 (decoders then call the class). Checked by building one instance
    both ways and comparing them."""
    cdef Py_ssize_t size = cls.__basicsize__, off
    if (cls.__flags__ & (1 << 14)) or cls.__itemsize__ != 0 or cls.__dictoffset__ != 0:
        return -1                      # GC-tracked, variable-size, or with a __dict__
    fields = getattr(cls, "__struct_fields__", None)
    if fields is None:
        return -1
    try:
        ref = cls()
        obj = new_struct(cls, size)
        for name in fields:
            off = slot_offset(cls, name)
            if off < 16 or off + 8 > size:
                return -1
            set_field(obj, off, getattr(ref, name))
        if not (obj == ref and repr(obj) == repr(ref)):
            return -1
    except Exception:
        return -1
    return size


cdef int raise_too_many(Reader* r, Py_ssize_t n) except -1:
    raise TooManyElementsError(
            "array count %d in %s at offset %d: more than fit in the %d byte(s) that remain "
            "(or above the cap of %d)" % (n, _field(r.field), r.base + r.pos, r.end - r.pos,
                                          MAX_ARRAY),
            _field(r.field), r.base + r.pos)


cdef int raise_encode(Writer* w, str what) except -1:
    raise EncodeError("cannot encode %s: %s" % (_field(w.field), what), _field(w.field))


cdef int writer_init(Writer* w, Py_ssize_t cap) except -1:
    w.buf = <unsigned char*>malloc(cap)
    if w.buf == NULL:
        raise MemoryError()
    w.len = 0
    w.cap = cap
    w.field = NULL
    return 0


cdef int writer_grow(Writer* w, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = w.cap * 2
    if cap < w.len + extra:
        cap = w.len + extra + 64
    cdef unsigned char* nb = <unsigned char*>realloc(w.buf, cap)
    if nb == NULL:
        raise MemoryError()
    w.buf = nb
    w.cap = cap
    return 0


cdef void writer_free(Writer* w) noexcept:
    if w.buf != NULL:
        free(w.buf)
        w.buf = NULL


cdef bytes writer_bytes(Writer* w):
    return PyBytes_FromStringAndSize(<const char*>w.buf, w.len)


cdef int write_bytes_obj(Writer* w, object v, bint compact, bint nullable) except -1:
    cdef Py_buffer view
    if v is None:
        return write_null(w, compact, nullable, True, "field")
    if PyBytes_CheckExact(v):
        if compact:
            write_uvarint(w, <uint32_t>(PyBytes_GET_SIZE(v) + 1))
        else:
            write_int32(w, <int32_t>PyBytes_GET_SIZE(v))
        return write_raw(w, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v))
    if isinstance(v, str):
        raise_encode(w, "expected bytes, got str")
    try:
        PyObject_GetBuffer(v, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        raise_encode(w, "expected bytes (a contiguous buffer), got %s" % type(v).__name__)
    try:
        if compact:
            write_uvarint(w, <uint32_t>(view.len + 1))
        else:
            write_int32(w, <int32_t>view.len)
        write_raw(w, <const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int reader_from_object(Reader* r, object data, Py_buffer* view) except -1:
    # Points r at data's bytes. Returns 0 for exact bytes (no buffer taken), 1 when a buffer
    # view was taken, which the caller must PyBuffer_Release(view) when done.
    r.pos = 0
    r.base = 0
    r.field = NULL
    if PyBytes_CheckExact(data):
        r.buf = <const unsigned char*>PyBytes_AS_STRING(data)
        r.end = PyBytes_GET_SIZE(data)
        return 0
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    r.buf = <const unsigned char*>view.buf
    r.end = view.len
    return 1
