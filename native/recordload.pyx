# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Shard loading hot loops: walk a segment's RecordBatch v2 batches in place, mark the last
# record of each key, and decode + replay records straight from the segment bytes.
#
# Layout walked (as native/recordbatch.pyx writes it; integers big-endian unless varint):
#   batch  = baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
#            | crc uint32 (CRC32C of attributes .. end) | attributes int16 (no compression)
#            | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
#            | producerId int64 | producerEpoch int16 | baseSequence int32
#            | recordCount int32 | records                          (61 header bytes)
#   record = length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
#            | keyLength varint (-1 null) | key | valueLength varint (-1 tombstone) | value
#            | headerCount varint | headers (keyLength varint, key, valueLength varint, value)
#   coordinator key   = int16 record type | key fields      (coordinator/records.py)
#   coordinator value = int16 value version | value fields
#
# Every batch is checked as recordbatch.decode checks it (header, CRC32C, every record length
# and varint, offset deltas increasing) before any of its records is used; a bad batch raises
# recordbatch.CorruptBatchError naming the file and position, as Log.read would.
#
# Records are decoded with the generated codecs' C decoders (codec.DataCodec.dec) over the
# bytes of the segment, without a bytes object per field or record. Anything the fast path
# does not take exactly as coordinator/records.decode_record does (an unknown type, a value
# version below the lowest, trailing key bytes, any decode error, a type without a replayer)
# is handed to the caller's `slow(key, value)`, which runs the reference path and so raises
# the reference error.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_Resize, PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcmp, memcpy, memset

cdef extern from "stdlib.h":
    int posix_memalign(void** p, size_t alignment, size_t size) nogil
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

from groupcoord._native.krpc cimport Reader
from groupcoord._native.codec cimport DataCodec

from crc32c import crc32c as _crc32c
from groupcoord._native.recordbatch import CorruptBatchError, TruncatedBatchError


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* tp, Py_ssize_t nitems)


cdef enum:
    _OVERHEAD = 61
    _LOG_OVERHEAD = 12
    _CRC_FROM = 21
    _MIN_BODY = 49
    _MAX_BATCH = 1 << 30
    _MIN_REC_BODY = 6
    _TYPES = 128            # record types 0..127 get a fast-path slot; others go slow
    _MAX_VERSIONS = 16


# ---------------------------------------------------------------- byte readers (no exceptions)

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

cdef inline int uvar(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, int max_bytes,
                     uint64_t* out) noexcept:
    # Unsigned varint of at most max_bytes bytes; -1 if it runs past end or is too long.
    cdef uint64_t u = 0
    cdef int shift = 0, n = 0
    cdef unsigned char c
    while True:
        if pos[0] >= end or n == max_bytes:
            return -1
        c = b[pos[0]]
        pos[0] += 1
        n += 1
        u |= <uint64_t>(c & 0x7F) << shift
        if not (c & 0x80):
            break
        shift += 7
    if max_bytes == 5 and u > 0xFFFFFFFFu:
        return -1
    out[0] = u
    return 0

cdef inline int varint(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end,
                       int32_t* out) noexcept:
    cdef uint64_t u
    if uvar(b, pos, end, 5, &u) < 0:
        return -1
    out[0] = <int32_t>((<uint32_t>u >> 1) ^ (0u - (<uint32_t>u & 1)))
    return 0

cdef inline int varlong(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end) noexcept:
    # The timestamp delta: validated, not used.
    cdef uint64_t u
    cdef Py_ssize_t start = pos[0]
    if uvar(b, pos, end, 10, &u) < 0:
        return -1
    if pos[0] - start == 10 and (b[pos[0] - 1] & 0xFE):
        return -1
    return 0

cdef inline int length(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, bint nullable,
                       int32_t* out) noexcept:
    if varint(b, pos, end, out) < 0:
        return -1
    if out[0] < 0:
        return 0 if (out[0] == -1 and nullable) else -1
    return 0 if out[0] <= end - pos[0] else -1


# ---------------------------------------------------------------- batch / record walk

cdef struct Walk:
    const unsigned char* buf
    Py_ssize_t pos          # next batch
    Py_ssize_t end
    # current batch
    int64_t base
    int32_t lod
    int32_t count
    int32_t done            # records of the batch walked so far
    int32_t prev_delta
    Py_ssize_t rpos         # next record
    Py_ssize_t bend         # end of the batch
    # current record
    int64_t offset
    Py_ssize_t key_at
    int32_t key_len
    Py_ssize_t val_at
    int32_t val_len


cdef int walk_record(Walk* w) noexcept:
    # Parses the record at w.rpos into w.key_* / w.val_*; -1 if malformed.
    cdef const unsigned char* b = w.buf
    cdef Py_ssize_t p = w.rpos, rend
    cdef int32_t rlen, od, hcount, n, i
    if varint(b, &p, w.bend, &rlen) < 0 or rlen < _MIN_REC_BODY or rlen > w.bend - p:
        return -1
    rend = p + rlen
    p += 1                                              # attributes
    if varlong(b, &p, rend) < 0 or varint(b, &p, rend, &od) < 0:
        return -1
    if od <= w.prev_delta or od > w.lod:
        return -1
    w.prev_delta = od
    if length(b, &p, rend, True, &w.key_len) < 0:
        return -1
    w.key_at = p
    if w.key_len > 0:
        p += w.key_len
    if length(b, &p, rend, True, &w.val_len) < 0:
        return -1
    w.val_at = p
    if w.val_len > 0:
        p += w.val_len
    if varint(b, &p, rend, &hcount) < 0 or hcount < 0 or hcount > rend - p:
        return -1
    for i in range(hcount):
        if length(b, &p, rend, False, &n) < 0:
            return -1
        p += n
        if length(b, &p, rend, True, &n) < 0:
            return -1
        if n > 0:
            p += n
    if p != rend:
        return -1
    w.offset = w.base + od
    w.rpos = p
    return 0


cdef int check_batch(Walk* w, object mv, object path, Py_ssize_t base,
                     bint partial) except -1:
    # Validates the whole batch at w.pos (so nothing of a corrupt batch is ever applied) and
    # positions w on its first record. 1 (nothing done) when ``partial`` and the buffer ends
    # inside the batch: the caller reads on from there. ``base``: file position of buf[0].
    cdef const unsigned char* b = w.buf
    cdef Py_ssize_t pos = w.pos, avail = w.end - w.pos
    cdef int32_t blen, i
    cdef int16_t attrs
    if avail < _OVERHEAD:
        if partial:
            return 1
        raise TruncatedBatchError(path, base + pos, "the segment ends inside a batch header")
    blen = be32(b + pos + 8)
    if blen < _MIN_BODY or blen > _MAX_BATCH or <int8_t>b[pos + 16] != 2:
        raise CorruptBatchError(path, base + pos, "bad batchLength or magic")
    if blen > avail - _LOG_OVERHEAD:
        if partial:
            return 1
        raise TruncatedBatchError(path, base + pos,
                                  "the segment ends before the batch's length")
    attrs = be16(b + pos + 21)
    w.base = be64(b + pos)
    w.lod = be32(b + pos + 23)
    w.count = be32(b + pos + 57)
    if attrs & 0x07:
        raise CorruptBatchError(path, base + pos, "compressed batches are not supported")
    if w.count < 0 or w.count > (blen - _MIN_BODY) // 7 or w.lod < 0 \
            or (w.count > 0 and w.lod < w.count - 1):
        raise CorruptBatchError(path, base + pos, "recordCount / lastOffsetDelta inconsistent")
    if <uint32_t>be32(b + pos + 17) != <uint32_t>_crc32c(mv[pos + _CRC_FROM:
                                                            pos + _LOG_OVERHEAD + blen]):
        raise CorruptBatchError(path, base + pos, "CRC32C mismatch")
    w.bend = pos + _LOG_OVERHEAD + blen
    w.rpos = pos + _OVERHEAD
    w.prev_delta = -1
    for i in range(w.count):
        if walk_record(w) < 0:
            raise CorruptBatchError(path, base + pos, "malformed record %d" % i)
    if w.rpos != w.bend:
        raise CorruptBatchError(path, base + pos, "bytes left after recordCount records")
    w.rpos = pos + _OVERHEAD               # walk again, for real
    w.prev_delta = -1
    w.done = 0
    return 0


cdef class _Buf:
    # A read-only buffer over a bytes-like object, released on collection.
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


cdef inline void walk_init(Walk* w, _Buf v, Py_ssize_t end) noexcept:
    w.buf = <const unsigned char*>v.view.buf
    w.pos = 0
    w.end = v.view.len if (end < 0 or end > v.view.len) else end
    w.count = 0
    w.done = 0


# ---------------------------------------------------------------- pass 1: last record per key

cdef enum:
    _INLINE = 32            # keys up to this many bytes live in their slot (one cache line)

cdef struct Slot:           # 64 bytes
    uint64_t hash           # 0 = empty (real hashes are forced non-zero)
    int64_t last            # load index of the key's latest record so far
    int64_t last_value      # load index of its latest non-tombstone record, or -1
    uint32_t key_len
    uint32_t key_at         # in the arena, for a key longer than _INLINE
    unsigned char inl[_INLINE]


cdef extern from *:
    """
    #define RL_PREFETCH(p) __builtin_prefetch((const void*)(p), 1, 1)
    """
    void RL_PREFETCH(const void* p) noexcept nogil


cdef inline uint64_t hash_bytes(const unsigned char* p, Py_ssize_t n) noexcept:
    # 64-bit multiply-xorshift over 8-byte words; only needs to spread keys over the table.
    cdef uint64_t h = 0x9E3779B97F4A7C15u ^ <uint64_t>n, x
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        memcpy(&x, p + i, 8)
        h = (h ^ x) * 0xFF51AFD7ED558CCDu
        h ^= h >> 32
        i += 8
    x = 0
    if i < n:
        memcpy(&x, p + i, n - i)
    h = (h ^ x) * 0xC4CEB9FE1A85EC53u
    h ^= h >> 29
    return h if h != 0 else 1


cdef class KeyIndex:
    """key bytes -> load index of the key's latest record: an open-addressing table (linear
    probing) of cache-line slots holding short keys inline; longer keys are copied into an
    arena (segment buffers do not outlive their chunk)."""
    cdef Slot* slots
    cdef Py_ssize_t cap             # a power of two
    cdef Py_ssize_t used
    cdef unsigned char* arena
    cdef Py_ssize_t arena_len
    cdef Py_ssize_t arena_cap

    def __cinit__(self):
        self.cap = 1 << 12
        self.slots = new_slots(self.cap)
        self.arena_cap = 1 << 12
        self.arena = <unsigned char*>malloc(self.arena_cap)
        if self.slots == NULL or self.arena == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.slots)
        free(self.arena)

    def __len__(self):
        return self.used

    @property
    def nbytes(self):
        return self.cap * sizeof(Slot) + self.arena_cap

    cdef int grow(self) except -1:
        cdef Py_ssize_t ncap = self.cap * 2, i, j
        cdef Slot* ns = new_slots(ncap)
        for i in range(self.cap):
            if self.slots[i].hash != 0:
                j = <Py_ssize_t>(self.slots[i].hash & <uint64_t>(ncap - 1))
                while ns[j].hash != 0:
                    j = (j + 1) & (ncap - 1)
                ns[j] = self.slots[i]
        free(self.slots)
        self.slots = ns
        self.cap = ncap
        return 0

    cdef inline void prefetch(self, uint64_t h) noexcept:
        RL_PREFETCH(&self.slots[<Py_ssize_t>(h & <uint64_t>(self.cap - 1))])

    cdef int put(self, uint64_t h, const unsigned char* key, Py_ssize_t n, int64_t idx,
                 bint tombstone, char* flags) except -1:
        # Makes record idx the key's latest and updates the keep flags: a key keeps its
        # latest record and, when that is a tombstone, also its latest value before it
        # (whose replay may have had effects beyond its key: an offset commit creates its
        # group, which the tombstone does not undo).
        cdef Py_ssize_t j = <Py_ssize_t>(h & <uint64_t>(self.cap - 1))
        cdef Slot* s
        cdef const unsigned char* stored
        cdef unsigned char* na
        flags[idx] = 1
        while True:
            s = &self.slots[j]
            if s.hash == 0:
                break
            if s.hash == h and s.key_len == n:
                stored = &s.inl[0] if n <= _INLINE else self.arena + s.key_at
                if memcmp(stored, key, n) == 0:
                    if s.last != s.last_value:
                        flags[s.last] = 0               # an earlier tombstone
                    if not tombstone and s.last_value >= 0:
                        flags[s.last_value] = 0
                    s.last = idx
                    if not tombstone:
                        s.last_value = idx
                    return 0
            j = (j + 1) & (self.cap - 1)
        if n <= _INLINE:
            memcpy(&s.inl[0], key, n)
        else:
            if self.arena_len + n > 0xFFFFFFFF:
                raise MemoryError("more than 4 GiB of long keys")
            if self.arena_len + n > self.arena_cap:
                while self.arena_len + n > self.arena_cap:
                    self.arena_cap *= 2
                na = <unsigned char*>realloc(self.arena, self.arena_cap)
                if na == NULL:
                    raise MemoryError()
                self.arena = na
            memcpy(self.arena + self.arena_len, key, n)
            s.key_at = <uint32_t>self.arena_len
            self.arena_len += n
        s.hash = h
        s.key_len = <uint32_t>n
        s.last = idx
        s.last_value = -1 if tombstone else idx
        self.used += 1
        if self.used * 2 > self.cap:
            self.grow()
        return 0


cdef Slot* new_slots(Py_ssize_t n) except NULL:
    # Zeroed and cache-line aligned, so that a probe touches one line.
    cdef void* p = NULL
    if posix_memalign(&p, 64, n * sizeof(Slot)) != 0:
        raise MemoryError()
    memset(p, 0, n * sizeof(Slot))
    return <Slot*>p


def mark_last(object data, Py_ssize_t end, KeyIndex index, bytearray keep, Py_ssize_t first,
              object path=None, Py_ssize_t base=0, bint partial=False):
    """Walk the batches of data[:end] (a segment); its records get the load indexes first,
    first + 1, ... and keep[index] says whether to replay it: set for a key's latest record
    (and, while that is a tombstone, for its latest value; see KeyIndex.put), cleared for
    the records they supersede (``index`` holds each key's latest records so far).
    Null-key records are always kept (compaction keeps them too). ``base``: the file position
    of data[0], for errors; ``partial``: data may end inside a batch (stop there).
    -> (records, batches, bytes consumed: whole batches)."""
    cdef _Buf v = _Buf(data)
    cdef Walk w
    walk_init(&w, v, end)
    cdef Py_ssize_t idx = first, batches = 0, i, n
    cdef char* flags
    cdef Py_ssize_t cap = PyByteArray_GET_SIZE(keep)
    cdef uint64_t* hashes = NULL
    cdef Py_ssize_t* keys = NULL            # key position, key length (-1 = null), tombstone
    cdef Py_ssize_t hcap = 0
    flags = PyByteArray_AS_STRING(keep)
    try:
        while w.pos < w.end:
            if check_batch(&w, v.mv, path, base, partial):
                break
            w.pos = w.bend
            batches += 1
            n = w.count
            if idx + n > cap:              # grow geometrically; the caller trims
                cap = max(2 * cap, idx + n, 1024)
                PyByteArray_Resize(keep, cap)
                flags = PyByteArray_AS_STRING(keep)
            if n > hcap:
                hcap = max(n, 2 * hcap)
                free(hashes)
                free(keys)
                hashes = <uint64_t*>malloc(hcap * sizeof(uint64_t))
                keys = <Py_ssize_t*>malloc(3 * hcap * sizeof(Py_ssize_t))
                if hashes == NULL or keys == NULL:
                    raise MemoryError()
            # Hash the batch's keys and prefetch their slots first, so that the table's
            # cache misses overlap instead of coming one after the other.
            for i in range(n):
                walk_record(&w)
                keys[3 * i] = w.key_at
                keys[3 * i + 1] = w.key_len
                keys[3 * i + 2] = w.val_len < 0
                if w.key_len >= 0:
                    hashes[i] = hash_bytes(w.buf + w.key_at, w.key_len)
                    index.prefetch(hashes[i])
            for i in range(n):
                if keys[3 * i + 1] >= 0:
                    index.put(hashes[i], w.buf + keys[3 * i], keys[3 * i + 1], idx,
                              keys[3 * i + 2], flags)
                else:
                    flags[idx] = 1
                idx += 1
            w.done = n
    finally:
        free(hashes)
        free(keys)
    return idx - first, batches, w.pos


# ---------------------------------------------------------------- pass 2: decode + replay

cdef class Plan:
    """How to decode each record type natively: the key codec, the lowest value version and
    the value codecs by version (coordinator/records.py's table), and the record class."""
    cdef PyObject* key_codec[_TYPES]       # borrowed from self._refs; NULL = slow path
    cdef int lo[_TYPES]
    cdef int nver[_TYPES]
    cdef PyObject* val_codec[_TYPES][_MAX_VERSIONS]
    cdef list _refs
    cdef object record_cls
    cdef public object types                # the record type numbers on the fast path

    def __init__(self, dict table, object record_cls):
        """table: {type number: (key DataCodec, lowest value version, [value DataCodec by
        version])}; record_cls: a 2-field tuple subclass (records.Record)."""
        cdef int t, i
        if not (isinstance(record_cls, type) and issubclass(record_cls, tuple)
                and len(getattr(record_cls, "_fields", ())) == 2
                and record_cls.__itemsize__ == tuple.__itemsize__
                and record_cls.__dictoffset__ == 0):
            raise TypeError("record_cls must be a 2-field NamedTuple")
        self.record_cls = record_cls
        self._refs = []
        for t in range(_TYPES):
            self.key_codec[t] = NULL
            self.nver[t] = 0
        fast = []
        for t, (kc, lo, vcs) in table.items():
            if not (0 <= t < _TYPES) or len(vcs) > _MAX_VERSIONS or len(vcs) == 0:
                continue
            if not isinstance(kc, DataCodec) or not all(isinstance(c, DataCodec) for c in vcs):
                continue
            self._refs.append(kc)
            self._refs.extend(vcs)
            self.key_codec[t] = <PyObject*>kc
            self.lo[t] = lo
            self.nver[t] = len(vcs)
            for i in range(len(vcs)):
                self.val_codec[t][i] = <PyObject*>vcs[i]
            fast.append(t)
        self.types = tuple(sorted(fast))


cdef inline object make_record(object cls, object k, object v):
    # Record(k, v) without the NamedTuple's Python-level __new__ (a tuple subclass: the
    # generic allocator gives the right size; both slots are filled before any other call).
    cdef object r = PyType_GenericAlloc(<PyTypeObject*>cls, 2)
    Py_INCREF(k)
    PyTuple_SET_ITEM(r, 0, k)
    Py_INCREF(v)
    PyTuple_SET_ITEM(r, 1, v)
    return r


cdef object fast_decode(Plan plan, const unsigned char* b, Py_ssize_t ka, int32_t kl,
                        Py_ssize_t va, int32_t vl):
    # The Record, or None when the reference path must decide (see the module comment).
    cdef int t, ver
    cdef Reader r
    cdef DataCodec kc, vc
    cdef object k, v
    if kl < 2:
        return None
    t = be16(b + ka)
    if t < 0 or t >= _TYPES or plan.key_codec[t] == NULL:
        return None
    kc = <DataCodec>plan.key_codec[t]
    r.buf = b + ka
    r.pos = 2
    r.end = kl
    r.base = 0
    r.field = NULL
    try:
        k = kc.dec(&r)
    except Exception:
        return None
    if r.pos != r.end:                      # decode() refuses trailing key bytes
        return None
    if vl < 0:
        return make_record(plan.record_cls, k, None)
    if vl < 2:
        return None
    ver = be16(b + va)
    if ver < plan.lo[t]:
        return None
    vc = <DataCodec>plan.val_codec[t][min(ver, plan.nver[t] - 1)]
    r.buf = b + va
    r.pos = 2
    r.end = vl
    try:
        v = vc.dec(&r)                      # trailing value bytes are tolerated (newer version)
    except Exception:
        return None
    return make_record(plan.record_cls, k, v)


def replay_segment(object data, Py_ssize_t end, bytearray keep, Py_ssize_t first, Plan plan,
                   object replay, object slow, object path=None, Py_ssize_t base=0,
                   bint partial=False):
    """Walk data[:end] as mark_last did (same indexes from ``first``) and, for each record
    with keep[index] set (every record when keep is None), in log order: replay(Record) for
    a record the fast path decodes, else slow(key bytes, value bytes | None). ``base`` and
    ``partial`` as for mark_last. -> (records walked, records replayed, batches, bytes
    consumed)."""
    cdef _Buf v = _Buf(data)
    cdef Walk w
    walk_init(&w, v, end)
    cdef Py_ssize_t idx = first, done = 0, batches = 0
    cdef const char* flags = NULL
    cdef Py_ssize_t nflags = 0
    cdef object rec
    if keep is not None:
        nflags = PyByteArray_GET_SIZE(keep)
        flags = PyByteArray_AS_STRING(keep)
    while True:
        if w.done >= w.count:
            if w.pos >= w.end:
                break
            if check_batch(&w, v.mv, path, base, partial):
                break
            w.pos = w.bend
            batches += 1
            continue
        walk_record(&w)
        w.done += 1
        idx += 1
        if flags != NULL:
            if idx - 1 >= nflags:
                raise ValueError("the segment has more records than mark_last saw")
            if not flags[idx - 1]:
                continue
        done += 1
        rec = fast_decode(plan, w.buf, w.key_at, w.key_len, w.val_at, w.val_len)
        if rec is not None:
            replay(rec)
        else:
            slow(None if w.key_len < 0 else
                 PyBytes_FromStringAndSize(<const char*>(w.buf + w.key_at), w.key_len),
                 None if w.val_len < 0 else
                 PyBytes_FromStringAndSize(<const char*>(w.buf + w.val_at), w.val_len))
    return idx - first, done, batches, w.pos
