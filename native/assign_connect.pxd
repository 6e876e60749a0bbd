# Declarations of assign_connect's C cores for other native modules (assign_many).
# Signatures must match the .pyx.
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef void _eager(const int64_t* base, Py_ssize_t n_conn, int32_t n_workers,
                 int32_t* owner) noexcept nogil

# Workspace of _ica, filled by ica_workspace for groups up to a given size; one workspace
# serves any number of calls (assign_many reuses it for every group of a call).
ctypedef struct IcaWork:
    int32_t* cnt_c      # per worker (+1): connectors owned, then kept
    int32_t* cnt_t      # per worker (+1): tasks owned, then kept
    int32_t* cap_c      # per worker: connector quota
    int32_t* cap_t      # per worker: task quota
    int32_t* pool_c     # connectors to hand out (new, revoked, released), ascending
    int32_t* pool_t     # tasks to hand out, ascending
    int32_t* lost_c     # connectors of departed workers held during the delay
    int32_t* lost_t     # tasks of departed workers held during the delay
    int32_t* ws         # water-fill scratch (per worker)
    int32_t* act
    int32_t* act2
    int32_t* tmp
    Py_ssize_t* hist    # 65536 radix buckets
    uint8_t* derived    # per worker: Connect's candidate rule (owns nothing)

cdef object ica_workspace(IcaWork* w, int32_t n_workers, Py_ssize_t n_conn,
                          Py_ssize_t n_tasks)
cdef Py_ssize_t _ica(const int64_t* base, Py_ssize_t n_conn, const int32_t* current,
                     const uint8_t* lost_in, const uint8_t* cand, int32_t W, bint hold,
                     int32_t* owner, IcaWork* wk, int32_t* held, Py_ssize_t* n_held,
                     int64_t* moved_out, int64_t* n_lost_out) noexcept nogil
