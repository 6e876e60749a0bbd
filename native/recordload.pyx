# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Shard loading hot loops: walk a segment's RecordBatch v2 batches in place, mark the last
# record of each key, and decode + replay records straight from the segment bytes.
#
# The batches are walked with recordbatch.pxd's cursor, the one the log's own decode uses:
# every batch is checked whole (header, CRC32C, every record) before any of its records is
# used, and a bad batch raises recordbatch.CorruptBatchError naming the file, position and
# reason, as Log.read would. A coordinator record's key is an int16 record type then the key
# fields, its value an int16 value version then the value fields (groups/records.py).
#
# Records are decoded with the generated codecs' C decoders (codec.DataCodec.dec) over the
# bytes of the segment, without a bytes object per field or record. Anything the fast path
# does not take exactly as coordinator/records.decode_record does (an unknown type, a value
# version below the lowest, trailing key bytes, any decode error, a type without a replayer)
# is handed to the caller's `slow(key, value)`, which runs the reference path and so raises
# the reference error.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from cpython.bytes cimport PyBytes_FromStringAndSize
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
from groupcoord._native.wire cimport be16
from groupcoord._native.recordbatch cimport (Batch, ByteView, Cursor, clamp_end, first_record,
                                             next_batch, next_record)


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* tp, Py_ssize_t nitems)


cdef enum:
    _TYPES = 128            # record types 0..127 get a fast-path slot; others go slow
    _MAX_VERSIONS = 16


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
    cdef ByteView v = ByteView(data)
    end = clamp_end(v, end)
    cdef Batch h
    cdef Cursor c
    cdef Py_ssize_t pos = 0, idx = first, batches = 0, i, n
    cdef char* flags
    cdef Py_ssize_t cap = PyByteArray_GET_SIZE(keep)
    cdef uint64_t* hashes = NULL
    cdef Py_ssize_t* keys = NULL            # key position, key length (-1 = null), tombstone
    cdef Py_ssize_t hcap = 0
    flags = PyByteArray_AS_STRING(keep)
    try:
        while pos < end:
            if next_batch(v, pos, end, &h, path, base, partial):
                break
            pos = h.end
            batches += 1
            n = h.count
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
            first_record(&c, v.buf, &h)
            for i in range(n):
                next_record(&c)
                keys[3 * i] = c.key_at
                keys[3 * i + 1] = c.key_len
                keys[3 * i + 2] = c.value_len < 0
                if c.key_len >= 0:
                    hashes[i] = hash_bytes(v.buf + c.key_at, c.key_len)
                    index.prefetch(hashes[i])
            for i in range(n):
                if keys[3 * i + 1] >= 0:
                    index.put(hashes[i], v.buf + keys[3 * i], keys[3 * i + 1], idx,
                              keys[3 * i + 2], flags)
                else:
                    flags[idx] = 1
                idx += 1
    finally:
        free(hashes)
        free(keys)
    return idx - first, batches, pos


# ---------------------------------------------------------------- pass 2: decode + replay

cdef class Plan:
    """How to decode each record type natively: the key codec, the lowest value version and
    the value codecs by version (groups/records.py's table), and the record class."""
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
    cdef ByteView v = ByteView(data)
    end = clamp_end(v, end)
    cdef Batch h
    cdef Cursor c
    cdef Py_ssize_t pos = 0, idx = first, done = 0, batches = 0
    cdef int32_t i
    cdef const char* flags = NULL
    cdef Py_ssize_t nflags = 0
    cdef object rec
    if keep is not None:
        nflags = PyByteArray_GET_SIZE(keep)
        flags = PyByteArray_AS_STRING(keep)
    while pos < end:
        if next_batch(v, pos, end, &h, path, base, partial):
            break
        pos = h.end
        batches += 1
        first_record(&c, v.buf, &h)
        for i in range(h.count):
            next_record(&c)
            idx += 1
            if flags != NULL:
                if idx - 1 >= nflags:
                    raise ValueError("the segment has more records than mark_last saw")
                if not flags[idx - 1]:
                    continue
            done += 1
            rec = fast_decode(plan, v.buf, c.key_at, c.key_len, c.value_at, c.value_len)
            if rec is not None:
                replay(rec)
            else:
                slow(None if c.key_len < 0 else
                     PyBytes_FromStringAndSize(<const char*>(v.buf + c.key_at), c.key_len),
                     None if c.value_len < 0 else
                     PyBytes_FromStringAndSize(<const char*>(v.buf + c.value_at), c.value_len))
    return idx - first, done, batches, pos
