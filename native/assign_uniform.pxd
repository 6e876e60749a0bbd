# Declarations of assign_uniform's C cores, so other native modules (assign_many) can call
# them per group without going through Python objects. Signatures must match the .pyx.
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef int _uniform(int32_t n_topics, int32_t n_members, const int32_t* ppt, const int64_t* base,
                  const int64_t* sptr, const int32_t* subs, int64_t n_subs, const int32_t* cur,
                  int32_t* out, bint force_heterogeneous) noexcept nogil
cdef int _range(int32_t n_topics, int32_t n_members, const int32_t* ppt, const int64_t* base,
                const int64_t* sptr, const int32_t* subs, int64_t n_subs,
                const uint8_t* static_member, int32_t* out) noexcept nogil
