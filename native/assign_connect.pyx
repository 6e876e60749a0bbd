# cython: language_level=3, boundscheck=False, wraparound=False
# Kafka Connect's two assignors over owner arrays (docs/assign.md, "connect" units).
#
# Units: connector c owns base[c] .. base[c+1]-1; base[c] is the connector instance, base[c]+1+t
# is task t. Every loop below walks connectors in index order and their blocks in unit order,
# so "ascending unit index" is the only order we ever produce or consume (pools, held lists).
#
# The Python API (validation, state, time) is groupcoord.assign.connect; these kernels trust
# their inputs' shapes (the API checks them) but re-check owner values, which are cheap to scan.
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memset
import numpy as np

ctypedef int32_t i32
ctypedef int64_t i64
ctypedef uint8_t u8


@cython.cdivision(True)
def eager_kernel(const i64[::1] base, i32 n_workers, i32[::1] owner):
    """Connect's eager assignor: one circular iterator over the workers, first every connector
    (index order), then every task (connector order, task order). owner must be n_units long."""
    cdef Py_ssize_t n_conn = base.shape[0] - 1
    if n_workers <= 0:
        owner[:] = -1
        return
    with nogil:
        _eager(&base[0], n_conn, n_workers, &owner[0] if owner.shape[0] > 0 else NULL)


@cython.cdivision(True)
cdef void _eager(const int64_t* base, Py_ssize_t n_conn, int32_t n_workers,
                 int32_t* owner) noexcept nogil:
    # The C core of eager_kernel (also called per group by assign_many); n_workers > 0.
    cdef Py_ssize_t c
    cdef i64 u, start
    cdef i32 w
    for c in range(n_conn):
        owner[base[c]] = <i32>(c % n_workers)
    # The iterator continues after the last connector: task number k (global, in unit
    # order, connectors skipped) goes to (n_conn + k) % n_workers. Walk it incrementally
    # instead of dividing per unit.
    w = <i32>(n_conn % n_workers)
    for c in range(n_conn):
        start = base[c] + 1
        for u in range(start, base[c + 1]):
            owner[u] = w
            w += 1
            if w == n_workers:
                w = 0


def remap_kernel(const i32[::1] prev_owner, const i32[::1] prev_to_new, i32[::1] out,
                 u8[::1] joined):
    """out[u] = prev_to_new[prev_owner[u]] (-2 where that is < 0: the owner departed), -1 where
    prev_owner is -1. joined[w] is set to 1 for every new index not reached by prev_to_new
    (callers pass it all ones). Returns the number of units whose owner departed, or -1 - u
    for the first unit with an owner outside the previous members."""
    cdef Py_ssize_t n = prev_owner.shape[0], n_prev = prev_to_new.shape[0]
    cdef Py_ssize_t n_new = joined.shape[0], u, p
    cdef i64 departed = 0, bad = -1
    cdef i32 v, m
    with nogil:
        for p in range(n_prev):
            m = prev_to_new[p]
            if 0 <= m < n_new:
                joined[m] = 0
        for u in range(n):
            v = prev_owner[u]
            if v < 0:
                out[u] = -1
            elif v >= n_prev:
                bad = u
                break
            else:
                m = prev_to_new[v]
                if m < 0:
                    out[u] = -2
                    departed += 1
                else:
                    out[u] = m
    if bad >= 0:
        return -1 - bad
    return departed


# ----------------------------------------------------------------------- water filling
cdef inline Py_ssize_t _merge(const i32* a, Py_ssize_t na, const i32* b, Py_ssize_t nb,
                              i32* out) noexcept nogil:
    # Merge two ascending runs into out (out holds na + nb); returns na + nb. On ties the
    # element of `a` goes first.
    cdef Py_ssize_t x = 0, y = 0, k = 0
    while x < na and y < nb:
        if b[y] < a[x]:
            out[k] = b[y]
            y += 1
        else:
            out[k] = a[x]
            x += 1
        k += 1
    while x < na:
        out[k] = a[x]
        x += 1
        k += 1
    while y < nb:
        out[k] = b[y]
        y += 1
        k += 1
    return k


cdef void _radix_by_count(i32* ws, Py_ssize_t n, const i32* cnt, i32* tmp,
                          Py_ssize_t* hist) noexcept nogil:
    # Stable LSD radix sort (2 x 16 bits) of worker ids ws[0:n] by cnt[w] (>= 0); ws is in
    # index order on entry, so equal counts stay in index order. hist: 65536 slots.
    cdef Py_ssize_t i, s, total
    cdef uint32_t key
    cdef int shift, sh
    for sh in range(2):
        shift = 16 * sh
        memset(hist, 0, 65536 * sizeof(Py_ssize_t))
        for i in range(n):
            key = (<uint32_t>cnt[ws[i]] >> shift) & 0xFFFF
            hist[key] += 1
        if hist[0] == n:
            continue      # every key is 0 in this digit: already sorted by it
        total = 0
        for i in range(65536):
            s = hist[i]
            hist[i] = total
            total += s
        for i in range(n):
            key = (<uint32_t>cnt[ws[i]] >> shift) & 0xFFFF
            tmp[hist[key]] = ws[i]
            hist[key] += 1
        for i in range(n):
            ws[i] = tmp[i]


@cython.cdivision(True)
cdef Py_ssize_t _water_fill(const i32* pool, Py_ssize_t n_pool, i32* cnt, const u8* elig,
                            i32 n_workers, i64 q, i64* extras, i32* owner,
                            i32* ws, i32* act, i32* act2, i32* tmp,
                            Py_ssize_t* hist) noexcept nogil:
    # Hands pool[0:n_pool] (ascending units) one by one to the least loaded eligible worker
    # (ties: lowest index), never above q, or q+1 while *extras > 0 (each q -> q+1 step uses
    # one extra). Equivalent to repeatedly taking the min (cnt, index) from a heap; done here in
    # rounds: at load level L every worker with cnt <= L receives one unit in index order.
    # Returns how many pool units were placed (a prefix of the pool).
    cdef Py_ssize_t n = 0, i = 0, j, a, b, k, n_act = 0, n_new, pos = 0, rounds, span
    cdef i64 level, nxt
    cdef i32 w
    cdef i32* swap
    if n_pool == 0 or n_workers == 0:
        return 0
    for w in range(n_workers):
        if (elig == NULL or elig[w]) and (cnt[w] < q or (cnt[w] == q and extras[0] > 0)):
            ws[n] = w
            n += 1
    if n == 0:
        return 0
    _radix_by_count(ws, n, cnt, tmp, hist)
    level = cnt[ws[0]]
    while pos < n_pool:
        # Newcomers at this level (ws[i:j], index order) merge into the active list.
        j = i
        while j < n and cnt[ws[j]] == level:
            j += 1
        n_new = j - i
        if n_new:
            k = _merge(act, n_act, ws + i, j - i, act2)
            swap = act
            act = act2
            act2 = swap
            n_act = k
            i = j
        if level < q:
            # No newcomer before level nxt: run up to (nxt - level) full rounds at once.
            nxt = cnt[ws[i]] if i < n else q
            if nxt > q:
                nxt = q
            span = <Py_ssize_t>(nxt - level)
            rounds = (n_pool - pos) // n_act
            if rounds > span:
                rounds = span
            for k in range(rounds):
                for a in range(n_act):
                    owner[pool[pos]] = act[a]
                    pos += 1
            for a in range(n_act):
                cnt[act[a]] += <i32>rounds
            level += rounds
            if rounds < span:
                # The pool ends inside this level: a partial round in index order.
                for a in range(n_act):
                    if pos == n_pool:
                        break
                    owner[pool[pos]] = act[a]
                    cnt[act[a]] += 1
                    pos += 1
                break
        else:
            # level == q: only the floating extras remain (q -> q+1, lowest index first).
            for a in range(n_act):
                if pos == n_pool or extras[0] == 0:
                    break
                owner[pool[pos]] = act[a]
                cnt[act[a]] += 1
                extras[0] -= 1
                pos += 1
            break
    return pos


@cython.cdivision(True)
def ica_kernel(const i64[::1] base, const i32[::1] current, i32 n_workers,
               const u8[::1] lost_in, const u8[::1] cand, bint hold, i32[::1] owner):
    """Incremental cooperative target (see groupcoord.assign.connect.incremental_cooperative).

    current: -2 lost (owner departed), -1 unassigned (lost if lost_in[u], else new), >= 0 owner.
    lost_in: per-unit mask of units held lost by the previous state (or empty: none).
    cand: per-worker mask of candidates for lost work, or empty: the workers that own nothing
    in current (Connect's rule).
    hold: keep lost units unassigned (except what candidates take); else they are new work.
    Writes owner; returns (held units int32 ascending, moved, n_lost) where moved counts kept
    owners revoked for balance. Raises ValueError on an owner outside -2..n_workers-1.
    """
    cdef Py_ssize_t n_units = current.shape[0], n_conn = base.shape[0] - 1, bad
    if cand.shape[0] != 0 and cand.shape[0] != n_workers:
        raise ValueError("cand must have n_workers entries")
    cdef i32 W = n_workers if n_workers > 0 else 0
    cdef IcaWork w
    arrays = ica_workspace(&w, W, n_conn, n_units - n_conn)
    held_arr = np.empty(n_units, dtype=np.int32)
    cdef i32[::1] held = held_arr
    cdef Py_ssize_t n_held = 0
    cdef i64 moved = 0, n_lost = 0
    with nogil:
        bad = _ica(&base[0], n_conn, &current[0] if n_units else NULL,
                   &lost_in[0] if lost_in.shape[0] else NULL,
                   &cand[0] if cand.shape[0] else NULL, W, hold,
                   &owner[0] if n_units else NULL, &w, &held[0] if n_units else NULL,
                   &n_held, &moved, &n_lost)
    del arrays
    if bad >= 0:
        raise ValueError("current[%d] = %d is not -2, -1 or a worker index < %d"
                         % (bad, current[bad], W))
    return held_arr[:n_held].copy(), moved, n_lost


cdef object ica_workspace(IcaWork* w, i32 n_workers, Py_ssize_t n_conn, Py_ssize_t n_tasks):
    """Fill w with numpy-backed buffers for _ica on groups of up to n_workers workers,
    n_conn connectors and n_tasks tasks; returns the arrays (keep them alive while w is
    used)."""
    cdef Py_ssize_t W1 = n_workers + 1
    ints = np.empty(8 * W1 + 2 * (n_conn + n_tasks) + 2, dtype=np.int32)
    hist = np.empty(65536, dtype=np.intp)
    der = np.empty(W1, dtype=np.uint8)
    cdef i32[::1] iv = ints
    cdef Py_ssize_t[::1] hv = hist
    cdef u8[::1] dv = der
    cdef i32* p = &iv[0]
    w.cnt_c = p
    w.cnt_t = p + W1
    w.cap_c = p + 2 * W1
    w.cap_t = p + 3 * W1
    w.ws = p + 4 * W1
    w.act = p + 5 * W1
    w.act2 = p + 6 * W1
    w.tmp = p + 7 * W1
    p = p + 8 * W1
    w.pool_c = p
    w.lost_c = p + n_conn
    w.pool_t = p + 2 * n_conn
    w.lost_t = p + 2 * n_conn + n_tasks
    w.hist = &hv[0]
    w.derived = &dv[0]
    return (ints, hist, der)


cdef inline bint _is_lost(Py_ssize_t u, i32 v, const uint8_t* lost_in) noexcept nogil:
    # Unit u, owner v < 0, is lost work: its worker departed (-2) or lost_in marks it.
    return v == -2 or (lost_in != NULL and lost_in[u] != 0)


cdef inline i64 _caps(const i32* cnt, i32* cap, i32 W, i64 q, i64* extra) noexcept nogil:
    # One kind's quotas (connectors or tasks): q each, q + 1 for the first *extra workers
    # owning more than q. Returns the units owned over the cap (the moves it forces).
    cdef i32 w
    cdef i64 moved = 0
    for w in range(W):
        cap[w] = <i32>q
        if cnt[w] > q and extra[0] > 0:
            cap[w] = <i32>(q + 1)
            extra[0] -= 1
        if cnt[w] > cap[w]:
            moved += cnt[w] - cap[w]
    return moved


cdef inline void _keep_or_release(Py_ssize_t u, const int32_t* current, const uint8_t* lost_in,
                                  bint hold, int32_t* owner, i32* cnt, const i32* cap,
                                  i32* lost, Py_ssize_t* n_lost, i32* pool,
                                  Py_ssize_t* n_pool) noexcept nogil:
    # Pass B for unit u of one kind: its owner keeps it while under its cap (cnt counts the
    # kept ones); otherwise it is appended to lost (lost work, held) or to pool.
    cdef i32 v = current[u]
    if v >= 0 and cnt[v] < cap[v]:
        owner[u] = v
        cnt[v] += 1
        return
    owner[u] = -1
    if v < 0 and hold and _is_lost(u, v, lost_in):
        lost[n_lost[0]] = <i32>u
        n_lost[0] += 1
    else:
        pool[n_pool[0]] = <i32>u
        n_pool[0] += 1


@cython.cdivision(True)
cdef Py_ssize_t _ica(const int64_t* base, Py_ssize_t n_conn, const int32_t* current,
                     const uint8_t* lost_in, const uint8_t* cand, int32_t W, bint hold,
                     int32_t* owner, IcaWork* wk, int32_t* held, Py_ssize_t* n_held,
                     int64_t* moved_out, int64_t* n_lost_out) noexcept nogil:
    # The C core of ica_kernel (also called per group by assign_many). W >= 0 workers;
    # lost_in / cand may be NULL (none / Connect's rule). wk: buffers for W workers and this
    # group's connectors and tasks (ica_workspace). Writes owner and the held units (ascending)
    # to held; returns -1, or the first unit whose owner is not -2, -1 or a worker index.
    cdef Py_ssize_t n_units = base[n_conn], c, bad = -1, u
    cdef bint has_cand = cand != NULL
    cdef i32 v, w
    cdef i64 n_tasks = n_units - n_conn
    cdef i64 q_c = 0, q_t = 0, e_c = 0, e_t = 0
    cdef Py_ssize_t n_lost_c = 0, n_lost_t = 0, moved = 0
    cdef Py_ssize_t placed_c = 0, placed_t = 0
    cdef bint lost
    cdef i32* cnt_c = wk.cnt_c
    cdef i32* cnt_t = wk.cnt_t
    cdef i32* cap_c = wk.cap_c
    cdef i32* cap_t = wk.cap_t
    cdef i32* pool_c = wk.pool_c
    cdef i32* pool_t = wk.pool_t
    cdef i32* lost_c = wk.lost_c
    cdef i32* lost_t = wk.lost_t
    if W > 0:
        memset(cnt_c, 0, W * sizeof(i32))
        memset(cnt_t, 0, W * sizeof(i32))

    # Pass A: validate owners, count what each worker owns and how much is lost.
    for c in range(n_conn):
        for u in range(base[c], base[c + 1]):
            v = current[u]
            if v >= 0:
                if v >= W:
                    bad = u
                    break
                if u == base[c]:
                    cnt_c[v] += 1
                else:
                    cnt_t[v] += 1
            elif v < -2:
                bad = u
                break
            else:
                lost = _is_lost(u, v, lost_in)
                if lost and hold:
                    if u == base[c]:
                        n_lost_c += 1
                    else:
                        n_lost_t += 1
        if bad >= 0:
            return bad
    if W > 0:
        # Quotas over ALL units (held lost included): floor, and +1 for r workers. The
        # r "+1" go first to workers that already own >= q+1 (each saves a move; which of
        # them does not change the move count, so lowest index), the rest float.
        q_c = n_conn // W
        e_c = n_conn % W
        q_t = n_tasks // W
        e_t = n_tasks % W
        moved = _caps(cnt_c, cap_c, W, q_c, &e_c) + _caps(cnt_t, cap_t, W, q_t, &e_t)

    cdef Py_ssize_t ipc = 0, ipt = 0, ilc = 0, ilt = 0
    cdef const u8* cand_p = NULL
    if hold and W > 0 and n_lost_c + n_lost_t > 0:
        # Candidates matter only when something is held.
        if has_cand:
            cand_p = cand
        else:
            for w in range(W):
                wk.derived[w] = 1 if (cnt_c[w] == 0 and cnt_t[w] == 0) else 0
            cand_p = wk.derived

    # Pass B: keep each worker's lowest units up to its cap (cnt_* counts again from 0);
    # everything else goes, in ascending unit order, to a pool: new + revoked (+ lost when
    # not held) to pool_*, held lost to lost_*.
    if W > 0:
        memset(cnt_c, 0, W * sizeof(i32))
        memset(cnt_t, 0, W * sizeof(i32))
    for c in range(n_conn):
        _keep_or_release(base[c], current, lost_in, hold, owner, cnt_c, cap_c,   # connector
                         lost_c, &ilc, pool_c, &ipc)
        for u in range(base[c] + 1, base[c + 1]):                                # tasks
            _keep_or_release(u, current, lost_in, hold, owner, cnt_t, cap_t, lost_t, &ilt,
                             pool_t, &ipt)
    if W > 0:
        # Candidates (workers that joined since the loss) take lost work up to balance.
        if cand_p != NULL:
            placed_c = _water_fill(lost_c, n_lost_c, cnt_c, cand_p, W, q_c, &e_c, owner,
                                   wk.ws, wk.act, wk.act2, wk.tmp, wk.hist)
            placed_t = _water_fill(lost_t, n_lost_t, cnt_t, cand_p, W, q_t, &e_t, owner,
                                   wk.ws, wk.act, wk.act2, wk.tmp, wk.hist)
        # New, revoked and released units: least loaded first. The caps sum to the unit
        # counts, so the pools always fit when nothing is held.
        _water_fill(pool_c, ipc, cnt_c, NULL, W, q_c, &e_c, owner, wk.ws, wk.act, wk.act2,
                    wk.tmp, wk.hist)
        _water_fill(pool_t, ipt, cnt_t, NULL, W, q_t, &e_t, owner, wk.ws, wk.act, wk.act2,
                    wk.tmp, wk.hist)
    # Held = lost units nobody took, ascending (merge of the two ascending lists; the taken
    # ones are exactly the prefixes placed_c / placed_t of each list).
    n_held[0] = _merge(lost_c + placed_c, n_lost_c - placed_c, lost_t + placed_t,
                       n_lost_t - placed_t, held)
    moved_out[0] = moved
    n_lost_out[0] = n_lost_c + n_lost_t
    return -1
