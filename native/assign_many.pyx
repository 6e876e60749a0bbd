# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True
"""The assignors and owner-array kernels over many groups per call (groupcoord.assign.many).

Layout (docs/assign.md, "Many groups at once"): the groups are concatenated. Group g owns
  * units     unit_off[g] .. unit_off[g+1]-1 of every per-unit array (owner, current, ...),
  * members   member_off[g] .. member_off[g+1]-1 of every per-member array,
  * topics    topic_off[g] .. (consumer groups: partitions_per_topic),
  * connectors conn_off[g] .. (connect groups: task_count).
Values inside those arrays stay LOCAL to the group: owner values are member indices
0..n_members(g)-1, subscriptions hold topic indices 0..n_topics(g)-1, so a group's slice is
exactly what the per-group API takes. Subscriptions are one CSR over all members: member
member_off[g] + m subscribes subs[sub_indptr[member_off[g] + m] : ...+1].

Every loop over groups is here, in C; uniform, range, connect eager and incremental-
cooperative call the per-group C cores of assign_uniform / assign_connect (cimported through
their .pxd) without the GIL. Classic cooperative-sticky is the exception: its kernel
(assign_classic.sticky) allocates numpy workspaces and raises from inside, so each group goes
through that entry point from this compiled loop.

Bounds checks are off, so every entry point checks its offsets and lengths first and raises
ValueError (never reads out of bounds on bad input).
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport malloc, free

from groupcoord._native.assign_uniform cimport _uniform, _range
from groupcoord._native.assign_connect cimport IcaWork, _eager, _ica, ica_workspace
from groupcoord._native import assign_classic as _classic

ctypedef int32_t i32
ctypedef int64_t i64
ctypedef uint8_t u8

cdef extern from "math.h":
    double INFINITY


cdef _check_offsets(const i64[::1] off, Py_ssize_t G, Py_ssize_t n, str name):
    # off: G + 1 entries, from 0, never decreasing, ending at n (n < 0: any end -- member_off,
    # whose end is the member count the per-member arrays are then checked against).
    if G < 0:
        raise ValueError("%s must have at least one entry (0)" % name)
    if off.shape[0] != G + 1:
        raise ValueError("%s must have %d entries, got %d" % (name, G + 1, off.shape[0]))
    if off[0] != 0 or (n >= 0 and off[G] != n):
        raise ValueError("%s must start at 0 and end at %d, got %d..%d"
                         % (name, n if n >= 0 else off[G], off[0], off[G]))
    cdef Py_ssize_t g
    for g in range(G):
        if off[g + 1] < off[g]:
            raise ValueError("%s decreases at entry %d (%d -> %d)"
                             % (name, g + 1, off[g], off[g + 1]))


cdef _check_lengths(Py_ssize_t n, str per, dict lengths):
    # Arrays that must have one entry per unit / member / group of the call.
    for name, k in lengths.items():
        if k != n:
            raise ValueError("%s must have one entry %s (%d), got %d" % (name, per, n, k))


ctypedef fused count_t:
    i32
    i64


cdef object _unit_off(const count_t[::1] count, const i64[::1] off, i64 extra, str count_name,
                      str off_name):
    # unit_off (int64[G+1]) of groups owning items off[g]..off[g+1]-1, item c holding
    # count[c] + extra units (a topic its partitions; a connector itself and its tasks).
    cdef Py_ssize_t G = off.shape[0] - 1, g
    cdef i64 c
    _check_offsets(off, G, count.shape[0], off_name)
    for c in range(count.shape[0]):
        if count[c] < 0:
            raise ValueError("%s[%d] = %d is negative" % (count_name, c, count[c]))
    uo = np.zeros(G + 1, dtype=np.int64)
    cdef i64[::1] u = uo
    with nogil:
        for g in range(G):
            u[g + 1] = u[g]
            for c in range(off[g], off[g + 1]):
                u[g + 1] += count[c] + extra
    return uo


cdef _raise_rc(int rc, Py_ssize_t g):
    # assign_uniform's return codes (RC_* in assign_uniform.pyx)
    msgs = {1: "out of memory", 2: "bad subscriptions indptr", 3: "topic index out of range",
            4: "negative partition count", 5: "more than 2**31 - 1 units"}
    raise ValueError("group %d: %s" % (g, msgs.get(rc, "error %d" % rc)))


# ------------------------------------------------------------------------------ consumer

def consumer_units(const i32[::1] partitions_per_topic, const i64[::1] topic_off):
    """unit_off (int64[G+1]) of consumer groups: group g has sum(ppt[topic_off[g]:...]) units."""
    return _unit_off(partitions_per_topic, topic_off, 0, "partitions_per_topic", "topic_off")


cdef object _consumer_layout(const i32[::1] ppt, const i64[::1] topic_off,
                             const i64[::1] sub_indptr, const i32[::1] subs,
                             const i64[::1] member_off):
    # Checks the offsets every consumer-group entry point takes; -> unit_off.
    cdef Py_ssize_t G = topic_off.shape[0] - 1
    _check_offsets(topic_off, G, ppt.shape[0], "topic_off")
    _check_offsets(member_off, G, -1, "member_off")
    _check_offsets(sub_indptr, member_off[G], subs.shape[0], "sub_indptr")
    return consumer_units(ppt, topic_off)


cdef object _consumer_many(const i32[::1] ppt, const i64[::1] topic_off,
                           const i64[::1] sub_indptr, const i32[::1] subs,
                           const i64[::1] member_off, const i32[::1] current, i32[::1] out,
                           int which):
    # which: 0 uniform, 1 range
    cdef Py_ssize_t G = topic_off.shape[0] - 1, g
    uo = _consumer_layout(ppt, topic_off, sub_indptr, subs, member_off)
    cdef i64[::1] unit_off = uo
    if out.shape[0] != unit_off[G]:
        raise ValueError("out has %d units, the groups %d" % (out.shape[0], unit_off[G]))
    if which == 0 and current.shape[0] != unit_off[G]:
        raise ValueError("current has %d units, the groups %d"
                         % (current.shape[0], unit_off[G]))
    # Largest group, for the scratch buffers (local topic bases and subscription indptr).
    cdef i64 max_t = 0, max_m = 0
    for g in range(G):
        max_t = max(max_t, topic_off[g + 1] - topic_off[g])
        max_m = max(max_m, member_off[g + 1] - member_off[g])
    cdef i64* base = <i64*>malloc((max_t + 1) * sizeof(i64))
    cdef i64* sptr = <i64*>malloc((max_m + 1) * sizeof(i64))
    if base == NULL or sptr == NULL:
        free(base)
        free(sptr)
        raise MemoryError()
    cdef int rc = 0
    cdef Py_ssize_t bad = -1
    cdef i32 T, M
    cdef i64 t, m, s0, ub
    cdef const i32* pp
    cdef const i32* cp
    cdef const i32* sp
    cdef i32* op
    with nogil:
        for g in range(G):
            T = <i32>(topic_off[g + 1] - topic_off[g])
            M = <i32>(member_off[g + 1] - member_off[g])
            pp = &ppt[topic_off[g]] if T > 0 else NULL
            base[0] = 0
            for t in range(T):
                base[t + 1] = base[t] + pp[t]
            s0 = sub_indptr[member_off[g]]
            for m in range(M + 1):
                sptr[m] = sub_indptr[member_off[g] + m] - s0
            ub = unit_off[g]
            sp = &subs[s0] if sptr[M] > 0 else NULL
            op = &out[ub] if unit_off[g + 1] > ub else NULL
            if which == 0:
                cp = &current[ub] if unit_off[g + 1] > ub else NULL
                rc = _uniform(T, M, pp, base, sptr, sp, sptr[M], cp, op, False)
            else:
                rc = _range(T, M, pp, base, sptr, sp, sptr[M], NULL, op)
            if rc != 0:
                bad = g
                break
    free(base)
    free(sptr)
    if bad >= 0:
        _raise_rc(rc, bad)
    return uo


def uniform_many(const i32[::1] partitions_per_topic, const i64[::1] topic_off,
                 const i64[::1] sub_indptr, const i32[::1] subs, const i64[::1] member_off,
                 const i32[::1] current, i32[::1] out):
    """The uniform assignor over every group; out (int32[total units]) gets each group's owner
    array (local member indices). Returns unit_off."""
    return _consumer_many(partitions_per_topic, topic_off, sub_indptr, subs, member_off,
                          current, out, 0)


def range_many(const i32[::1] partitions_per_topic, const i64[::1] topic_off,
               const i64[::1] sub_indptr, const i32[::1] subs, const i64[::1] member_off,
               i32[::1] out):
    """The range assignor (no static members) over every group. Returns unit_off."""
    return _consumer_many(partitions_per_topic, topic_off, sub_indptr, subs, member_off,
                          None, out, 1)


def cooperative_sticky_many(const i32[::1] partitions_per_topic, const i64[::1] topic_off,
                            const i64[::1] sub_indptr, const i32[::1] subs,
                            const i64[::1] member_off, const i32[::1] current,
                            i32[::1] target, i32[::1] final):
    """Classic cooperative-sticky (every member reports its units of `current` as owned, all at
    the same generation) over every group: target (moved units withheld, -1) and final (the
    balanced goal), local member indices. The loop is here; each group goes through
    assign_classic.sticky (it allocates its numpy workspaces per call). Returns unit_off."""
    cdef Py_ssize_t G = topic_off.shape[0] - 1, g
    uo = _consumer_layout(partitions_per_topic, topic_off, sub_indptr, subs, member_off)
    cdef i64[::1] unit_off = uo
    if current.shape[0] != unit_off[G] or target.shape[0] != unit_off[G] or \
            final.shape[0] != unit_off[G]:
        raise ValueError("current/target/final must have %d units" % unit_off[G])
    # Owned CSR of every group at once (counting sort by global member), units local.
    cdef Py_ssize_t n_m = member_off[G]
    oip_a = np.zeros(n_m + 1, dtype=np.int64)
    own_a = np.empty(unit_off[G], dtype=np.int32)
    cdef i64[::1] oip = oip_a
    cdef i32[::1] own = own_a
    _csr_by_owner(current, unit_off, member_off, oip, own, True)
    ppt_np = np.asarray(partitions_per_topic)
    subs_np = np.asarray(subs)
    sip_np = np.asarray(sub_indptr)
    own_np = own_a
    tgt_np = np.asarray(target)
    fin_np = np.asarray(final)
    sticky = _classic.sticky
    cdef i64 m0, m1, t0, t1, u0, u1
    for g in range(G):
        t0, t1 = topic_off[g], topic_off[g + 1]
        m0, m1 = member_off[g], member_off[g + 1]
        u0, u1 = unit_off[g], unit_off[g + 1]
        ppt_g = ppt_np[t0:t1]
        tbase = np.zeros(t1 - t0 + 1, dtype=np.int64)
        np.cumsum(ppt_g, out=tbase[1:])
        sip_g = sip_np[m0:m1 + 1] - sip_np[m0]
        subs_g = subs_np[sip_np[m0]:sip_np[m1]]
        oip_g = oip_a[m0:m1 + 1] - oip_a[m0]
        own_g = own_np[oip_a[m0]:oip_a[m1]]
        gen = np.zeros(m1 - m0, dtype=np.int32)
        t_g, f_g, _ = sticky(ppt_g, tbase, sip_g, subs_g, oip_g, own_g, gen, True, False)
        tgt_np[u0:u1] = t_g
        fin_np[u0:u1] = f_g
    return uo


# ------------------------------------------------------------------------------ connect

def connect_units(const i64[::1] task_count, const i64[::1] conn_off):
    """unit_off (int64[G+1]) of connect groups: sum(task_count + 1) over each group's
    connectors."""
    return _unit_off(task_count, conn_off, 1, "task_count", "conn_off")


def eager_many(const i64[::1] task_count, const i64[::1] conn_off, const i32[::1] n_workers,
               i32[::1] out):
    """Connect's eager assignor over every group (n_workers[g] workers). Returns unit_off."""
    cdef Py_ssize_t G = conn_off.shape[0] - 1, g
    uo = connect_units(task_count, conn_off)
    if n_workers.shape[0] != G:
        raise ValueError("n_workers must have one entry per group")
    cdef i64[::1] unit_off = uo
    if out.shape[0] != unit_off[G]:
        raise ValueError("out has %d units, the groups %d" % (out.shape[0], unit_off[G]))
    cdef i64 max_c = 0, c, C, u
    for g in range(G):
        max_c = max(max_c, conn_off[g + 1] - conn_off[g])
    cdef i64* base = <i64*>malloc((max_c + 1) * sizeof(i64))
    if base == NULL:
        raise MemoryError()
    with nogil:
        for g in range(G):
            C = conn_off[g + 1] - conn_off[g]
            if n_workers[g] <= 0:
                for u in range(unit_off[g], unit_off[g + 1]):
                    out[u] = -1
                continue
            base[0] = 0
            for c in range(C):
                base[c + 1] = base[c] + task_count[conn_off[g] + c] + 1
            if C > 0:
                _eager(base, C, n_workers[g], &out[unit_off[g]])
    free(base)
    return uo


def ica_many(const i64[::1] task_count, const i64[::1] conn_off, const i32[::1] current,
             const i32[::1] n_workers, const u8[::1] hold, const u8[::1] lost_in,
             const u8[::1] cand, const i64[::1] member_off, i32[::1] out):
    """Connect's incremental cooperative assignor (KIP-415) over every group.

    current: previous target per unit (local worker indices, -2 departed, -1 unassigned);
    hold[g]: hold lost work of group g (the scheduled delay is running); lost_in: per-unit mask
    of units held by the previous state (or empty); cand: per-member (member_off layout) mask
    of the workers that may take lost work (or empty: Connect's rule, workers owning nothing).
    Writes out; returns (unit_off, moved int64[G], held int64[G]). One workspace, sized for
    the largest group, serves every group (assign_connect._ica, no GIL)."""
    cdef Py_ssize_t G = conn_off.shape[0] - 1, g
    uo = connect_units(task_count, conn_off)
    if n_workers.shape[0] != G or hold.shape[0] != G:
        raise ValueError("n_workers and hold must have one entry per group")
    cdef i64[::1] unit_off = uo
    if out.shape[0] != unit_off[G] or current.shape[0] != unit_off[G]:
        raise ValueError("current/out must have %d units" % unit_off[G])
    if lost_in.shape[0] not in (0, unit_off[G]):
        raise ValueError("lost_in must be empty or have one entry per unit")
    cdef bint has_cand = cand.shape[0] != 0
    if has_cand:
        _check_offsets(member_off, G, cand.shape[0], "member_off")
        for g in range(G):
            if member_off[g + 1] - member_off[g] != max(n_workers[g], 0):
                raise ValueError("group %d: cand has %d entries for %d workers"
                                 % (g, member_off[g + 1] - member_off[g], n_workers[g]))
    cdef i64 max_w = 0, max_c = 0, max_t = 0, nc
    for g in range(G):
        nc = conn_off[g + 1] - conn_off[g]
        max_w = max(max_w, n_workers[g])
        max_c = max(max_c, nc)
        max_t = max(max_t, unit_off[g + 1] - unit_off[g] - nc)
    moved_a = np.zeros(G, dtype=np.int64)
    held_a = np.zeros(G, dtype=np.int64)
    cdef i64[::1] moved = moved_a, held = held_a
    cdef IcaWork w
    keep = ica_workspace(&w, <i32>max_w, max_c, max_t)
    held_buf = np.empty(max_c + max_t + 1, dtype=np.int32)
    cdef i32[::1] hb = held_buf
    cdef i64* base = <i64*>malloc((max_c + 1) * sizeof(i64))
    if base == NULL:
        raise MemoryError()
    cdef Py_ssize_t bad = -1, bad_g = -1, n_held, c
    cdef i64 mv, nl, u0
    cdef i32 W
    with nogil:
        for g in range(G):
            nc = conn_off[g + 1] - conn_off[g]
            u0 = unit_off[g]
            base[0] = 0
            for c in range(nc):
                base[c + 1] = base[c] + task_count[conn_off[g] + c] + 1
            W = n_workers[g] if n_workers[g] > 0 else 0
            bad = _ica(base, nc, &current[u0] if base[nc] else NULL,
                       &lost_in[u0] if lost_in.shape[0] and base[nc] else NULL,
                       &cand[member_off[g]] if has_cand and W > 0 else NULL, W,
                       hold[g] != 0, &out[u0] if base[nc] else NULL, &w, &hb[0],
                       &n_held, &mv, &nl)
            if bad >= 0:
                bad_g = g
                break
            moved[g] = mv
            held[g] = n_held
    free(base)
    del keep
    if bad_g >= 0:
        raise ValueError("group %d: current[%d] = %d is not -2, -1 or a worker index < %d"
                         % (bad_g, bad, current[unit_off[bad_g] + bad], n_workers[bad_g]))
    return uo, moved_a, held_a


# ------------------------------------------------------------------------------ metrics

cdef void _csr_by_owner(const i32[::1] owner, const i64[::1] unit_off,
                        const i64[::1] member_off, i64[::1] indptr, i32[::1] units,
                        bint local) noexcept nogil:
    # Counting sort of every group's units by (global) owner; units ascending per member,
    # written as local (unit - unit_off[g]) or global unit numbers. Owners outside
    # 0..n_members(g)-1 are skipped.
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g, m, n_m = member_off[G]
    cdef i64 u, M, gm
    cdef i32 o
    for m in range(n_m + 1):
        indptr[m] = 0
    for g in range(G):
        M = member_off[g + 1] - member_off[g]
        for u in range(unit_off[g], unit_off[g + 1]):
            o = owner[u]
            if 0 <= o < M:
                indptr[member_off[g] + o + 1] += 1
    for m in range(n_m):
        indptr[m + 1] += indptr[m]
    # fill with a running cursor kept in the indptr itself (shifted back afterwards)
    for g in range(G):
        M = member_off[g + 1] - member_off[g]
        for u in range(unit_off[g], unit_off[g + 1]):
            o = owner[u]
            if 0 <= o < M:
                gm = member_off[g] + o
                units[indptr[gm]] = <i32>(u - unit_off[g] if local else u)
                indptr[gm] += 1
    for m in range(n_m, 0, -1):
        indptr[m] = indptr[m - 1]
    indptr[0] = 0


def members_csr_many(const i32[::1] owner, const i64[::1] unit_off, const i64[::1] member_off,
                     bint local_units=True):
    """Per-member unit lists of every group at once: (indptr int64[total members + 1], units
    int32), global member numbering (member_off[g] + m), units local or global."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1
    _check_offsets(unit_off, G, owner.shape[0], "unit_off")
    _check_offsets(member_off, G, -1, "member_off")
    ip_a = np.zeros(member_off[G] + 1, dtype=np.int64)
    cdef i64[::1] ip = ip_a
    cdef Py_ssize_t n = 0, g
    cdef i64 u, M
    for g in range(G):
        M = member_off[g + 1] - member_off[g]
        for u in range(unit_off[g], unit_off[g + 1]):
            if 0 <= owner[u] < M:
                n += 1
    un_a = np.empty(n, dtype=np.int32)
    cdef i32[::1] un = un_a
    with nogil:
        _csr_by_owner(owner, unit_off, member_off, ip, un, local_units)
    return ip_a, un_a


# Columns of assignment_metrics' result (one row per group).
cdef enum:
    C_UNASSIGNED = 0    # units of the group left -1 (ICA: lost work held; else a bug)
    C_INVALID = 1       # owners outside -1..n_members-1
    C_MOVED = 2         # units whose previous live owner differs from the new owner
    C_MIN_MOVED = 3     # lower bound of moves any balanced assignment needs
    C_SPREAD = 4        # max - min units per member (per kind, the larger of the two)
    C_MAX_LOAD = 5
    C_MIN_LOAD = 6
    C_COLUMNS = 7

(M_UNASSIGNED, M_INVALID, M_MOVED, M_MIN_MOVED, M_SPREAD, M_MAX_LOAD, M_MIN_LOAD,
 M_COLUMNS) = (C_UNASSIGNED, C_INVALID, C_MOVED, C_MIN_MOVED, C_SPREAD, C_MAX_LOAD,
               C_MIN_LOAD, C_COLUMNS)


def assignment_metrics(const i32[::1] prev, const i32[::1] new, const i64[::1] unit_off,
                       const i64[::1] member_off, const u8[::1] kind):
    """Balance, stickiness and validity of every group's new assignment, int64[G, 7]
    (columns M_*). prev: the previous assignment in the new member indices (-1 none, -2 owner
    departed); kind: per unit 0/1 (connect: 0 connector instance, 1 task, balanced
    separately) or empty (one kind). Loads count every member of the group.

    min_moved: with N units of a kind over M members (quotas q = N // M, N % M of them q+1),
    a member keeping c units of that kind must give up max(0, c - quota); the +1 slots go to
    members holding more than q (each saves a move): sum(max(0, c - q)) - min(N % M, #{c > q}).
    Exact for one pool (homogeneous subscriptions, connect); a lower bound otherwise."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g
    _check_offsets(unit_off, G, new.shape[0], "unit_off")
    _check_offsets(member_off, G, -1, "member_off")
    if prev.shape[0] != new.shape[0]:
        raise ValueError("prev and new must have the same length")
    cdef bint has_kind = kind.shape[0] != 0
    if has_kind and kind.shape[0] != new.shape[0]:
        raise ValueError("kind must be empty or per unit")
    cdef Py_ssize_t j
    for j in range(kind.shape[0]):
        if kind[j] > 1:
            raise ValueError("kind[%d] = %d is not 0 or 1" % (j, kind[j]))
    res_a = np.zeros((G, C_COLUMNS), dtype=np.int64)
    cdef i64[:, ::1] res = res_a
    cdef i64 max_m = 0
    for g in range(G):
        max_m = max(max_m, member_off[g + 1] - member_off[g])
    # per member, per kind: previous count (kept owners) and new count
    cdef i64* pc = <i64*>malloc((2 * max_m + 2) * sizeof(i64))
    cdef i64* nc = <i64*>malloc((2 * max_m + 2) * sizeof(i64))
    if pc == NULL or nc == NULL:
        free(pc)
        free(nc)
        raise MemoryError()
    cdef i64 u, M, m, k, q, r, over, excess, lo, hi, spread
    cdef i64 n_k[2]
    cdef i32 p, o, kk
    with nogil:
        for g in range(G):
            M = member_off[g + 1] - member_off[g]
            for m in range(2 * M):
                pc[m] = 0
                nc[m] = 0
            n_k[0] = 0
            n_k[1] = 0
            for u in range(unit_off[g], unit_off[g + 1]):
                kk = kind[u] if has_kind else 0
                n_k[kk] += 1
                o = new[u]
                p = prev[u]
                if o == -1:
                    res[g, C_UNASSIGNED] += 1
                elif o < -1 or o >= M:
                    res[g, C_INVALID] += 1
                else:
                    nc[2 * o + kk] += 1
                if 0 <= p < M:
                    pc[2 * p + kk] += 1
                    if o != p:
                        res[g, C_MOVED] += 1
            spread = 0
            hi = 0
            lo = -1
            for k in range(2):
                if n_k[k] == 0 or M == 0:
                    continue
                q = n_k[k] // M
                r = n_k[k] % M
                excess = 0
                over = 0
                for m in range(M):
                    if pc[2 * m + k] > q:
                        excess += pc[2 * m + k] - q
                        over += 1
                res[g, C_MIN_MOVED] += excess - (r if r < over else over)
                # balance of this kind
                q = nc[k]
                r = nc[k]
                for m in range(M):
                    if nc[2 * m + k] > q:
                        q = nc[2 * m + k]
                    if nc[2 * m + k] < r:
                        r = nc[2 * m + k]
                if q - r > spread:
                    spread = q - r
            for m in range(M):
                k = nc[2 * m] + nc[2 * m + 1]
                if k > hi:
                    hi = k
                if lo < 0 or k < lo:
                    lo = k
            res[g, C_SPREAD] = spread
            res[g, C_MAX_LOAD] = hi
            res[g, C_MIN_LOAD] = lo if lo >= 0 else 0
    free(pc)
    free(nc)
    return res_a


def diff_counts_many(const i32[::1] current, const i32[::1] target, const i64[::1] unit_off):
    """Per group (int64[G, 3]): units revoked (current owner >= 0, target differs), units
    assigned (target owner >= 0, current differs) and units kept (same owner >= 0)."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g
    _check_offsets(unit_off, G, current.shape[0], "unit_off")
    if target.shape[0] != current.shape[0]:
        raise ValueError("current and target must have the same length")
    res_a = np.zeros((G, 3), dtype=np.int64)
    cdef i64[:, ::1] res = res_a
    cdef i64 u
    cdef i32 c, t
    with nogil:
        for g in range(G):
            for u in range(unit_off[g], unit_off[g + 1]):
                c = current[u]
                t = target[u]
                if c == t:
                    if c >= 0:
                        res[g, 2] += 1
                else:
                    if c >= 0:
                        res[g, 0] += 1
                    if t >= 0:
                        res[g, 1] += 1
    return res_a


def validate_many(const i32[::1] owner, const i64[::1] unit_off, const i64[::1] member_off,
                  const u8[::1] required):
    """The seed's validation per group on owner arrays (int64[G, 2]): required units left
    unassigned, and owners that are not a member of the group (out of range). Duplicates
    cannot occur in an owner array; for per-member lists use groupcoord.assign.validate on the
    globalized CSR (groupcoord.assign.many.validate_lists)."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g
    _check_offsets(unit_off, G, owner.shape[0], "unit_off")
    _check_offsets(member_off, G, -1, "member_off")
    cdef bint has_req = required.shape[0] != 0
    if has_req and required.shape[0] != owner.shape[0]:
        raise ValueError("required must be empty or per unit")
    res_a = np.zeros((G, 2), dtype=np.int64)
    cdef i64[:, ::1] res = res_a
    cdef i64 u, M
    cdef i32 o
    with nogil:
        for g in range(G):
            M = member_off[g + 1] - member_off[g]
            for u in range(unit_off[g], unit_off[g + 1]):
                o = owner[u]
                if o == -1:
                    if not has_req or required[u]:
                        res[g, 0] += 1
                elif o < -1 or o >= M:
                    res[g, 1] += 1
    return res_a


# ------------------------------------------------------------------------------ reconcile

def reconcile_round_many(const i64[::1] unit_off, const i64[::1] member_off,
                         const i32[::1] hb_order, const double[::1] phase,
                         const i64[::1] own_indptr, const i32[::1] own_units,
                         const i64[::1] tgt_indptr, const i32[::1] tgt_units,
                         const i32[::1] target, i32[::1] holder_old, i32[::1] holder_new,
                         u8[::1] told, const u8[::1] counts, double[::1] since,
                         double[::1] released_at, double[::1] acquired_at,
                         double[::1] down, i64[::1] unowned, i64[::1] max_unowned,
                         i64[::1] in_flight, double[::1] last_change, double t0,
                         bint assign_before_release=False):
    """One round of heartbeats of KIP-848's declarative reconciliation (revoke before assign)
    in every group: each member heartbeats once, at t0 + phase[m], in hb_order (global member
    numbers, each group's members contiguous and sorted by phase).

    Per unit (global): target (local member, -1 none); holder_old: the member holding it from
    before the target (-1: released / never held); holder_new: the target member once it has
    received the unit; told: its old holder was asked to revoke it (it releases it at its
    next heartbeat: the revocation is acknowledged one heartbeat later); counts: the unit's
    downtime counts (0: a removed unit, allowed to stop); since: when it last became unowned.
    own_* / tgt_*: per member (global) CSR of the units held at the start of the target
    (holder_old) and of its target units, unit numbers global.

    At member m's heartbeat the coordinator (1) takes the release of every unit m was told to
    revoke, (2) if m still holds units outside its target, tells it to revoke them and sends it
    nothing new (UNREVOKED), else (3) sends its target units that no other member still holds
    (the others stay UNRELEASED). Per group it accumulates down (unit-seconds unowned),
    unowned (running count) and max_unowned, counts in_flight (at the end of the round: units
    whose target member does not hold them yet -- being revoked, or released and not yet
    received -- and removed units not yet released) and last_change (time of the last release or
    acquisition). released_at / acquired_at record, per unit, when the old holder released it
    and when the new holder got it: the never-owned-twice check reads only those.

    assign_before_release=True is a deliberately broken reconciler (step 3 ignores other
    holders), for the tests of the check."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g, j
    cdef i64 gm, i, u, m, U
    cdef i32 lm, h
    cdef double t
    cdef bint revoking
    _check_offsets(unit_off, G, target.shape[0], "unit_off")
    _check_offsets(member_off, G, -1, "member_off")
    cdef Py_ssize_t n_m = member_off[G]
    _check_lengths(target.shape[0], "per unit", dict(
        holder_old=holder_old.shape[0], holder_new=holder_new.shape[0], told=told.shape[0],
        counts=counts.shape[0], since=since.shape[0], released_at=released_at.shape[0],
        acquired_at=acquired_at.shape[0]))
    _check_lengths(n_m, "per member", dict(hb_order=hb_order.shape[0], phase=phase.shape[0]))
    _check_lengths(G, "per group", dict(
        down=down.shape[0], unowned=unowned.shape[0], max_unowned=max_unowned.shape[0],
        in_flight=in_flight.shape[0], last_change=last_change.shape[0]))
    _check_offsets(own_indptr, n_m, own_units.shape[0], "own_indptr")
    _check_offsets(tgt_indptr, n_m, tgt_units.shape[0], "tgt_indptr")
    # Every member and unit number read below must lie in its group's range.
    for g in range(G):
        for j in range(member_off[g], member_off[g + 1]):
            gm = hb_order[j]
            if gm < member_off[g] or gm >= member_off[g + 1]:
                raise ValueError("hb_order[%d] = %d is not a member of group %d (%d..%d)"
                                 % (j, gm, g, member_off[g], member_off[g + 1] - 1))
            for i in range(own_indptr[j], own_indptr[j + 1]):
                if own_units[i] < unit_off[g] or own_units[i] >= unit_off[g + 1]:
                    raise ValueError("own_units[%d] = %d is not a unit of group %d"
                                     % (i, own_units[i], g))
            for i in range(tgt_indptr[j], tgt_indptr[j + 1]):
                if tgt_units[i] < unit_off[g] or tgt_units[i] >= unit_off[g + 1]:
                    raise ValueError("tgt_units[%d] = %d is not a unit of group %d"
                                     % (i, tgt_units[i], g))
    with nogil:
        for g in range(G):
            for j in range(member_off[g], member_off[g + 1]):
                gm = hb_order[j]
                lm = <i32>(gm - member_off[g])
                t = t0 + phase[gm]
                # (1) releases acknowledged now
                for i in range(own_indptr[gm], own_indptr[gm + 1]):
                    u = own_units[i]
                    if told[u] and holder_old[u] == lm:
                        holder_old[u] = -1
                        told[u] = 0
                        released_at[u] = t
                        last_change[g] = t
                        if holder_new[u] < 0 and counts[u]:
                            unowned[g] += 1
                            since[u] = t
                            if unowned[g] > max_unowned[g]:
                                max_unowned[g] = unowned[g]
                # (2) revoke first
                revoking = False
                for i in range(own_indptr[gm], own_indptr[gm + 1]):
                    u = own_units[i]
                    if holder_old[u] == lm and target[u] != lm:
                        told[u] = 1
                        revoking = True
                if revoking and not assign_before_release:
                    continue
                # (3) assign what is released
                for i in range(tgt_indptr[gm], tgt_indptr[gm + 1]):
                    u = tgt_units[i]
                    if holder_new[u] == lm:
                        continue
                    h = holder_old[u]
                    if h == lm:
                        # kept: the same member holds it under the new target, no gap
                        holder_old[u] = -1
                        holder_new[u] = lm
                    elif h < 0 or assign_before_release:
                        holder_new[u] = lm
                        acquired_at[u] = t
                        last_change[g] = t
                        if h < 0 and counts[u]:
                            unowned[g] -= 1
                            down[g] += t - since[u]
            U = 0
            for u in range(unit_off[g], unit_off[g + 1]):
                if target[u] >= 0 and holder_new[u] != target[u] and \
                        holder_old[u] != target[u]:
                    # moving: being revoked, or released and not yet received (a unit its
                    # target member already holds is not in flight)
                    U += 1
                elif target[u] < 0 and holder_old[u] >= 0:
                    U += 1
            in_flight[g] = U
    return None


def owned_twice_many(const i64[::1] unit_off, const i32[::1] holder_old,
                     const i32[::1] holder_new, const double[::1] released_at,
                     const double[::1] acquired_at):
    """The never-owned-twice check, per group (int64[G]): units held by two members at once,
    either now (holder_old and holder_new both set to different members) or at some time in
    the past (the new holder got the unit before the old one released it: acquired_at <
    released_at). Independent of how the reconciler decided: it reads only the member-side
    record of releases and acquisitions."""
    cdef Py_ssize_t G = unit_off.shape[0] - 1, g
    _check_offsets(unit_off, G, holder_old.shape[0], "unit_off")
    _check_lengths(holder_old.shape[0], "per unit", dict(
        holder_new=holder_new.shape[0], released_at=released_at.shape[0],
        acquired_at=acquired_at.shape[0]))
    res_a = np.zeros(G, dtype=np.int64)
    cdef i64[::1] res = res_a
    cdef i64 u
    with nogil:
        for g in range(G):
            for u in range(unit_off[g], unit_off[g + 1]):
                if holder_old[u] >= 0 and holder_new[u] >= 0 and \
                        holder_old[u] != holder_new[u]:
                    res[g] += 1
                elif acquired_at[u] == acquired_at[u] and released_at[u] == released_at[u] \
                        and acquired_at[u] < released_at[u]:
                    # both times set (not NaN) and in the wrong order
                    res[g] += 1
    return res_a
