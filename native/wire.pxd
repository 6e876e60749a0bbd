# cython: language_level=3
# Kafka's primitive encodings over raw bytes, with no Python objects and no exceptions: the one
# implementation that krpc.pxd (protocol messages, which raise) and recordbatch.pxd (the record
# log, which reports a reason) build on.
#
# Layout:
#   int16/32/64         big-endian two's complement
#   unsigned varint     7 bits a byte, low group first, high bit = more; at most 5 bytes for
#                       32 bits (the 5th may carry only the top 4 bits) and 10 for 64 (the
#                       10th only the top bit)
#   varint / varlong    zigzag-encoded signed 32 / 64-bit ((v << 1) ^ (v >> 31|63)), then as
#                       an unsigned varint
#
# A reader never touches a byte at or past `end`; it advances *pos over what it consumed, on
# failure too (callers report errors at that position).
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t


cdef enum:
    VARINT_OK = 0
    VARINT_SHORT = 1         # the bytes end inside the varint
    VARINT_LONG = 2          # more bits than 32 / 64


# ---------------------------------------------------------------- fixed width

cdef inline int64_t be64(const unsigned char* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v

cdef inline uint32_t be_u32(const unsigned char* p) noexcept:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
            | <uint32_t>p[3])

cdef inline int32_t be32(const unsigned char* p) noexcept:
    return <int32_t>be_u32(p)

cdef inline uint16_t be_u16(const unsigned char* p) noexcept:
    return (<uint16_t>p[0] << 8) | p[1]

cdef inline int16_t be16(const unsigned char* p) noexcept:
    return <int16_t>be_u16(p)

cdef inline void put64(unsigned char* p, int64_t v) noexcept:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(u >> (56 - 8 * i))

cdef inline void put32(unsigned char* p, uint32_t u) noexcept:
    p[0] = <unsigned char>(u >> 24)
    p[1] = <unsigned char>(u >> 16)
    p[2] = <unsigned char>(u >> 8)
    p[3] = <unsigned char>u

cdef inline void put16(unsigned char* p, uint16_t u) noexcept:
    p[0] = <unsigned char>(u >> 8)
    p[1] = <unsigned char>u


# ---------------------------------------------------------------- varints

cdef inline int get_uvarint(const unsigned char* buf, Py_ssize_t* pos, Py_ssize_t end,
                            int bits, uint64_t* out) noexcept:
    # An unsigned varint of ``bits`` (32 or 64; a constant at every call, so the compiler
    # specializes it). The last byte allowed, at shift 28 / 63, must have no bits set beyond
    # the value's width (nor the "more" bit).
    cdef int last = 28 if bits == 32 else 63
    cdef unsigned char spare = 0xF0 if bits == 32 else 0xFE
    cdef Py_ssize_t p = pos[0]
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if p >= end:
            pos[0] = p
            return VARINT_SHORT
        b = buf[p]
        p += 1
        if shift == last and (b & spare):
            pos[0] = p
            return VARINT_LONG
        v |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            pos[0] = p
            out[0] = v
            return VARINT_OK
        shift += 7

cdef inline int32_t unzigzag32(uint32_t u) noexcept:
    return <int32_t>((u >> 1) ^ (0u - (u & 1)))

cdef inline int64_t unzigzag64(uint64_t u) noexcept:
    return <int64_t>((u >> 1) ^ (0u - (u & 1)))

cdef inline uint32_t zigzag32(int32_t v) noexcept:
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)

cdef inline uint64_t zigzag64(int64_t v) noexcept:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)

cdef inline int uvarint_size(uint64_t u) noexcept:
    cdef int n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n

cdef inline unsigned char* put_uvarint(unsigned char* p, uint64_t u) noexcept:
    # Writes uvarint_size(u) bytes at p; returns the byte after them.
    while u >= 0x80:
        p[0] = <unsigned char>((u & 0x7F) | 0x80)
        p += 1
        u >>= 7
    p[0] = <unsigned char>u
    return p + 1
