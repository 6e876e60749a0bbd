# cython: language_level=3, boundscheck=False, wraparound=False
"""Kernels of the client-side (classic group leader) assignors: range, roundrobin and the
sticky family (eager sticky, cooperative-sticky) with KIP-341's generation marker.

Data model (docs/assign.md): members are dense indices 0..M-1 in tie-break order, topics
dense indices 0..T-1 (sorted topic names), unit = topic_base[t] + partition, an assignment is
an owner array (int32, -1 = unassigned). Subscriptions and owned units are CSR (int64 indptr,
int32 values). The Python API with input validation is groupcoord.assign.classic; these
functions trust their callers for shapes (indptr monotone, lengths), and check value ranges.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport qsort

cnp.import_array()

cdef int64_t INF = 1 << 62


# ----------------------------------------------------------------------------- helpers

cdef tuple _topic_members(const int32_t[::1] ppt, const int64_t[::1] sip,
                          const int32_t[::1] subs):
    """Subscriptions turned around: topic t's subscribers are members[indptr[t]:indptr[t+1]],
    ascending, each once (a member listing a topic twice counts once). Topics with zero
    partitions get no subscribers (nothing to assign). Raises on a topic index out of range."""
    cdef Py_ssize_t T = ppt.shape[0], M = sip.shape[0] - 1
    cdef Py_ssize_t m, t
    cdef int64_t i
    t_indptr = np.zeros(T + 1, np.int64)
    seen_arr = np.full(T, -1, np.int32)
    cdef int64_t[::1] ti = t_indptr
    cdef int32_t[::1] seen = seen_arr
    for m in range(M):
        for i in range(sip[m], sip[m + 1]):
            t = subs[i]
            if t < 0 or t >= T:
                raise ValueError("subscription of member %d names topic %d, outside 0..%d"
                                 % (m, t, T - 1))
            if seen[t] == m or ppt[t] == 0:
                continue
            seen[t] = m
            ti[t + 1] += 1
    for t in range(T):
        ti[t + 1] += ti[t]
    members_arr = np.empty(ti[T], np.int32)
    fill_arr = t_indptr[:T].copy()
    cdef int32_t[::1] tm = members_arr
    cdef int64_t[::1] fill = fill_arr
    seen_arr.fill(-1)
    for m in range(M):                      # members ascending -> each topic's list sorted
        for i in range(sip[m], sip[m + 1]):
            t = subs[i]
            if seen[t] == m or ppt[t] == 0:
                continue
            seen[t] = m
            tm[fill[t]] = <int32_t>m
            fill[t] += 1
    return t_indptr, members_arr


# ----------------------------------------------------------------------------- range

def range_assign(const int32_t[::1] ppt, const int64_t[::1] tbase,
                 const int64_t[::1] sip, const int32_t[::1] subs):
    """Kafka's RangeAssignor: per topic, its subscribers in member order split the
    partitions in consecutive ranges; the first P % k subscribers get one extra."""
    cdef Py_ssize_t T = ppt.shape[0]
    cdef int64_t N = tbase[T]
    owner_arr = np.full(N, -1, np.int32)
    cdef int32_t[::1] owner = owner_arr
    t_indptr, t_members = _topic_members(ppt, sip, subs)
    cdef const int64_t[::1] ti = t_indptr
    cdef const int32_t[::1] tm = t_members
    cdef Py_ssize_t t
    cdef int64_t k, per, extra, i, j, pos, length
    cdef int32_t m
    with nogil:
        for t in range(T):
            k = ti[t + 1] - ti[t]
            if k == 0:
                continue
            per = ppt[t] // k
            extra = ppt[t] % k
            pos = tbase[t]
            for i in range(k):
                m = tm[ti[t] + i]
                length = per + (1 if i < extra else 0)
                for j in range(pos, pos + length):
                    owner[j] = m
                pos += length
    return owner_arr


# ----------------------------------------------------------------------------- roundrobin

def roundrobin(const int32_t[::1] ppt, const int64_t[::1] tbase,
               const int64_t[::1] sip, const int32_t[::1] subs):
    """Kafka's RoundRobinAssignor: all partitions in (topic, partition) order, one cursor
    cycling over all members, skipping members not subscribed to the partition's topic."""
    cdef Py_ssize_t T = ppt.shape[0], M = sip.shape[0] - 1
    cdef int64_t N = tbase[T]
    owner_arr = np.full(N, -1, np.int32)
    cdef int32_t[::1] owner = owner_arr
    t_indptr, t_members = _topic_members(ppt, sip, subs)
    cdef const int64_t[::1] ti = t_indptr
    cdef const int32_t[::1] tm = t_members
    cdef Py_ssize_t t
    cdef int64_t k, lo, hi, mid, j, p, cursor = 0
    cdef int32_t m = 0
    with nogil:
        for t in range(T):
            k = ti[t + 1] - ti[t]
            if k == 0:
                continue
            # First subscriber at or after the cursor (cyclically). Within one topic the
            # skipping cursor then simply walks this topic's sorted subscriber list.
            lo = ti[t]
            hi = ti[t + 1]
            while lo < hi:
                mid = (lo + hi) >> 1
                if tm[mid] < cursor:
                    lo = mid + 1
                else:
                    hi = mid
            j = lo - ti[t]
            if j == k:
                j = 0
            for p in range(ppt[t]):
                m = tm[ti[t] + j]
                owner[tbase[t] + p] = m
                j += 1
                if j == k:
                    j = 0
            cursor = m + 1
            if cursor == M:
                cursor = 0
    return owner_arr


# ----------------------------------------------------------------------------- sticky

cdef int64_t _deal(int32_t[::1] final, const uint8_t[::1] mask, bint use_mask,
                   int64_t lo, int64_t hi, int32_t* live, int64_t* need,
                   int64_t n_live) noexcept nogil:
    """Deal the free units (final == -1, and mask == 1 if use_mask) of [lo, hi) round-robin
    to the members live[i], each until need[i] is met. Passes over the live list compact it
    in place, so the cost is O(units dealt + range scanned). Returns the number of unmet
    needs left (0 unless the caller's bookkeeping is wrong)."""
    cdef int64_t u = lo, i, w, left = 0
    while n_live > 0:
        w = 0
        for i in range(n_live):
            while u < hi and (final[u] != -1 or (use_mask and mask[u] == 0)):
                u += 1
            if u >= hi:
                for w in range(i, n_live):
                    left += need[w]
                return left
            final[u] = live[i]
            u += 1
            need[i] -= 1
            if need[i] > 0:
                live[w] = live[i]
                need[w] = need[i]
                w += 1
        n_live = w
    return 0


cdef int32_t _resolve_claims(int32_t[::1] claim, const int64_t[::1] oip,
                             const int32_t[::1] owned, const int32_t[::1] gen,
                             int64_t N) except? -3:
    """KIP-341: only the claims of members reporting the group's highest generation count
    (older ones are stale: ignored). Among those, a unit claimed by two members is marked
    -2 (conflict: nobody keeps it). Returns the highest generation."""
    cdef Py_ssize_t M = gen.shape[0], m
    cdef int64_t i
    cdef int32_t g = gen[0], u, c             # caller guarantees M >= 1
    for m in range(M):
        if gen[m] > g:
            g = gen[m]
    for m in range(M):
        if gen[m] != g:
            continue
        for i in range(oip[m], oip[m + 1]):
            u = owned[i]
            if u < 0 or u >= N:
                raise ValueError("member %d claims unit %d, outside 0..%d" % (m, u, N - 1))
            c = claim[u]
            if c == -1:
                claim[u] = <int32_t>m
            elif c >= 0 and c != m:          # same member twice is one claim
                claim[u] = -2
    return g


cdef void _stale_claims(int32_t[::1] stale, const int32_t[::1] claim,
                        const int64_t[::1] oip, const int32_t[::1] owned,
                        const int32_t[::1] gen, int32_t g, int64_t N) noexcept nogil:
    """Claims of members reporting an older generation, on units no current-generation
    member claims: stale[u] = the claimant, -2 for several, -1 none. KIP-341 ignores them
    for stickiness; cooperative mode still withholds such a unit from anyone else (below)."""
    cdef Py_ssize_t M = gen.shape[0], m
    cdef int64_t i
    cdef int32_t u, c
    for m in range(M):
        if gen[m] == g:
            continue
        for i in range(oip[m], oip[m + 1]):
            u = owned[i]
            if u < 0 or u >= N or claim[u] != -1:
                continue                      # out of range: ignored like the claim itself
            c = stale[u]
            if c == -1:
                stale[u] = <int32_t>m
            elif c >= 0 and c != m:
                stale[u] = -2


cdef void _withhold(int32_t[::1] target, const int32_t[::1] final,
                    const int32_t[::1] claim, const int32_t[::1] stale,
                    int64_t N) noexcept nogil:
    """KIP-429: a unit whose final owner is not its (sole, current-generation) claimant is
    withheld this round: its claimant(s) revoke it first, a follow-up rebalance gives it.
    So is a unit only an older-generation member claims, when it goes to anyone else: that
    member may well still run it (its JoinGroup answer was lost, so it reports the
    generation before; docs/decisions.md), and nobody may start it before it revoked it."""
    cdef int64_t u
    cdef int32_t c
    for u in range(N):
        target[u] = final[u]
        if final[u] >= 0:
            c = claim[u]
            if c == -1:
                c = stale[u]
            if c == -2 or (c >= 0 and c != final[u]):
                target[u] = -1


cdef inline int32_t _parked(Py_ssize_t m) noexcept nogil:
    # Marks a unit member m keeps while its claims are trimmed (-1 and -2 are taken), so a
    # later duplicate entry in its list does not count the unit twice.
    return -(<int32_t>m + 3)


cdef inline void _unpark(int32_t* final, const int32_t* claims, int64_t n,
                         Py_ssize_t m) noexcept nogil:
    # After the trim: member m's parked units (among its n claims) are m's again.
    cdef int64_t i
    for i in range(n):
        if final[claims[i]] == _parked(m):
            final[claims[i]] = <int32_t>m


cdef int64_t _homogeneous(const int32_t[::1] ppt, const int64_t[::1] tbase,
                          const uint8_t[::1] common, const uint8_t[::1] active,
                          const int64_t[::1] oip, const int32_t[::1] owned,
                          const int32_t[::1] gen, int32_t g,
                          const int32_t[::1] claim, int32_t[::1] final) except -1:
    """All active members subscribe to the same topics: quotas base / base + 1 and the
    optimum in moves (the +1 slots go first to members owning more than base)."""
    cdef Py_ssize_t T = ppt.shape[0], M = active.shape[0], m, t
    cdef int64_t N = tbase[T], n_sub = 0, A = 0, base, extra, i, u, kept, n_live = 0
    mask_arr = np.zeros(N, np.uint8)
    cdef uint8_t[::1] mask = mask_arr
    o_arr = np.zeros(M, np.int64)
    q_arr = np.zeros(M, np.int64)
    live_arr = np.empty(M, np.int32)
    need_arr = np.empty(M, np.int64)
    cdef int64_t[::1] o = o_arr, q = q_arr, need = need_arr
    cdef int32_t[::1] live = live_arr
    for t in range(T):
        if common[t]:
            n_sub += ppt[t]
            mask[tbase[t]:tbase[t + 1]] = 1
    for m in range(M):
        A += active[m]
    if A == 0 or n_sub == 0:
        return 0
    with nogil:
        # Count each active member's valid claims (claim[u] == m implies gen[m] == g). final
        # marks the first occurrence so a unit listed twice counts once.
        for m in range(M):
            if not active[m] or gen[m] != g:
                continue
            for i in range(oip[m], oip[m + 1]):
                u = owned[i]
                if claim[u] == m and mask[u] and final[u] == -1:
                    final[u] = <int32_t>m
                    o[m] += 1
        base = n_sub // A
        extra = n_sub % A
        for m in range(M):                  # +1 slots: owners above base first (saves moves)
            if active[m]:
                q[m] = base
                if extra > 0 and o[m] > base:
                    q[m] = base + 1
                    extra -= 1
        for m in range(M):                  # then the lowest member indices
            if extra == 0:
                break
            if active[m] and q[m] == base:
                q[m] = base + 1
                extra -= 1
        # Trim members over quota: keep their first q[m] claims (list order). Kept units are
        # parked at -(m + 3) so a later duplicate entry does not count them twice.
        for m in range(M):
            if o[m] <= q[m]:
                continue
            kept = 0
            for i in range(oip[m], oip[m + 1]):
                u = owned[i]
                if final[u] == m:
                    if kept < q[m]:
                        final[u] = _parked(m)
                        kept += 1
                    else:
                        final[u] = -1
            _unpark(&final[0], &owned[oip[m]], oip[m + 1] - oip[m], m)
            o[m] = q[m]
        for m in range(M):
            if active[m] and q[m] > o[m]:
                live[n_live] = <int32_t>m
                need[n_live] = q[m] - o[m]
                n_live += 1
        if _deal(final, mask, True, 0, N, &live[0], &need[0], n_live) != 0:
            with gil:
                raise RuntimeError("assign_classic: free units do not match quotas")
    return 0


cdef int _cmp_i64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0], y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef int64_t _maxflow(int64_t[::1] c, int64_t[::1] x, const int64_t[::1] o,
                      const uint8_t[::1] frozen,
                      int64_t[::1] sup, int64_t[::1] dem,
                      const int32_t[::1] e_member, const int32_t[::1] e_topic,
                      const int64_t[::1] ti, const int64_t[::1] mi, const int32_t[::1] me,
                      int32_t[::1] level, int64_t[::1] it, int32_t[::1] q,
                      int32_t[::1] path, int32_t[::1] pe) noexcept nogil:
    """Dinic's max-flow moving units from members with sup > 0 to members with dem > 0.
    The residual graph is the assignment itself: member u -> topic t while u holds units of
    t (capacity x), topic t -> member v for every unfrozen subscriber v (unbounded; its
    reverse is v's new x). Returns the number of units moved; c, x, sup, dem are updated.
    Stickiness hint: a member's arcs are tried twice, first only where it holds units it
    did not own (x > o, capacity x - o), then any; so fresh units move first."""
    cdef int64_t M = c.shape[0], T = ti.shape[0] - 1, V = M + T
    cdef int64_t head, tail, total = 0, j, k, delta, n, s, capv
    cdef int32_t u, t, e, v
    cdef bint found, advanced
    while True:
        # -- BFS levels from all sources; sinks are not expanded
        for n in range(V):
            level[n] = -1
        head = 0
        tail = 0
        for n in range(M):
            if sup[n] > 0:
                level[n] = 0
                q[tail] = <int32_t>n
                tail += 1
        found = False
        while head < tail:
            n = q[head]
            head += 1
            if n < M:
                if dem[n] > 0:
                    found = True
                    continue
                for j in range(mi[n], mi[n + 1]):
                    e = me[j]
                    if x[e] > 0 and level[M + e_topic[e]] < 0:
                        level[M + e_topic[e]] = level[n] + 1
                        q[tail] = <int32_t>(M + e_topic[e])
                        tail += 1
            else:
                for j in range(ti[n - M], ti[n - M + 1]):
                    v = e_member[j]
                    if not frozen[v] and level[v] < 0:
                        level[v] = level[n] + 1
                        q[tail] = v
                        tail += 1
        if not found:
            return total
        for n in range(M):
            it[n] = 2 * mi[n]          # virtual arc list: [fresh pass | any pass]
        for n in range(T):
            it[M + n] = ti[n]
        # -- blocking flow: DFS with current-arc pointers; a dead end gets level -1
        for s in range(M):
            while sup[s] > 0 and level[s] == 0:
                path[0] = <int32_t>s
                k = 0
                while k >= 0:
                    u = path[k]
                    if k > 0 and u < M and dem[u] > 0:
                        delta = sup[s] if sup[s] < dem[u] else dem[u]
                        for j in range(1, k + 1):           # giver arcs: odd steps
                            if path[j] >= M:
                                e = pe[j]
                                capv = x[e] - o[e] if x[e] > o[e] else x[e]
                                if capv < delta:
                                    delta = capv
                        for j in range(1, k + 1):
                            if path[j] >= M:
                                x[pe[j]] -= delta           # member path[j-1] gives
                            else:
                                x[pe[j]] += delta           # member path[j] takes
                        sup[s] -= delta
                        dem[u] -= delta
                        c[s] -= delta
                        c[u] += delta
                        total += delta
                        break
                    advanced = False
                    if u < M:
                        while it[u] < 2 * mi[u + 1]:
                            j = it[u] - 2 * mi[u]       # 0..2*deg-1
                            if j < mi[u + 1] - mi[u]:
                                e = me[mi[u] + j]
                                advanced = x[e] > o[e]
                            else:
                                e = me[j - (mi[u + 1] - mi[u]) + mi[u]]
                                advanced = x[e] > 0
                            t = e_topic[e]
                            if advanced and level[M + t] == level[u] + 1:
                                k += 1
                                path[k] = <int32_t>(M + t)
                                pe[k] = e
                                break
                            advanced = False
                            it[u] += 1
                    else:
                        while it[u] < ti[u - M + 1]:
                            j = it[u]
                            v = e_member[j]
                            if level[v] == level[u] + 1:
                                k += 1
                                path[k] = v
                                pe[k] = <int32_t>j
                                advanced = True
                                break
                            it[u] += 1
                    if not advanced:
                        level[u] = -1                       # dead end for this phase
                        k -= 1
                if k < 0:
                    break


cdef void _balance(int64_t[::1] c, int64_t[::1] x, const int64_t[::1] o,
                   const int32_t[::1] e_member, const int32_t[::1] e_topic,
                   const int64_t[::1] ti, const int64_t[::1] mi, const int32_t[::1] me,
                   uint8_t[::1] frozen, int32_t[::1] level, int64_t[::1] it,
                   int32_t[::1] q, int32_t[::1] path, int32_t[::1] pe,
                   int64_t[::1] sup, int64_t[::1] dem, uint8_t[::1] seen) noexcept nogil:
    """Make the counts decreasingly minimal ("as balanced as subscriptions allow"): no chain
    of moves along subscriptions may take a unit from a member with count k to one with
    count <= k - 2.

    Rounds. R = the unfrozen members reachable (member -> topic it holds -> subscriber) from
    the unfrozen members at the top count cmax. If nobody in R is at <= cmax - 2, R is final:
    it is closed under moves and everyone outside it is below cmax, so no move into or out of
    it can help; freeze it. Else, with lo = floor(mean count of R), three max-flows inside R:
    (1) above lo+1 down to lo+1 into those below lo, (2) remaining above lo+1 into those at
    <= lo, (3) at >= lo+1 into those still below lo. Every unit moves from a count >= k to a
    count <= k - 2, so sum(c^2) falls and the loop ends; each round with a target moves at
    least one unit. Which units move is left to _improve (moves are made minimal there)."""
    cdef int64_t M = c.shape[0], T = ti.shape[0] - 1
    cdef int64_t cmax, head, tail, n, j, sum_r, n_r, lo, phase
    cdef int32_t v, e
    cdef bint target
    while True:
        cmax = -1
        for n in range(M):
            if not frozen[n] and c[n] > cmax:
                cmax = c[n]
        if cmax < 0:
            return
        # -- R: BFS from the top (seen: 1 member in R, 2 topic seen)
        for n in range(M + T):
            seen[n] = 0
        head = 0
        tail = 0
        for n in range(M):
            if not frozen[n] and c[n] == cmax:
                seen[n] = 1
                q[tail] = <int32_t>n
                tail += 1
        while head < tail:
            n = q[head]
            head += 1
            if n < M:
                for j in range(mi[n], mi[n + 1]):
                    e = me[j]
                    if x[e] > 0 and not seen[M + e_topic[e]]:
                        seen[M + e_topic[e]] = 1
                        q[tail] = <int32_t>(M + e_topic[e])
                        tail += 1
            else:
                for j in range(ti[n - M], ti[n - M + 1]):
                    v = e_member[j]
                    if not frozen[v] and not seen[v]:
                        seen[v] = 1
                        q[tail] = v
                        tail += 1
        target = False
        sum_r = 0
        n_r = 0
        for n in range(M):
            if seen[n]:
                n_r += 1
                sum_r += c[n]
                if c[n] <= cmax - 2:
                    target = True
        if not target:
            for n in range(M):
                if seen[n]:
                    frozen[n] = 1
            continue
        # Members outside R take no part in this round's flows.
        for n in range(M):
            if not frozen[n] and not seen[n]:
                frozen[n] = 2
        lo = sum_r // n_r
        for phase in range(3):
            for n in range(M):
                sup[n] = 0
                dem[n] = 0
                if not seen[n]:
                    continue
                if phase == 0:
                    if c[n] > lo + 1:
                        sup[n] = c[n] - lo - 1
                    elif c[n] < lo:
                        dem[n] = lo - c[n]
                elif phase == 1:
                    if c[n] > lo + 1:
                        sup[n] = c[n] - lo - 1
                    elif c[n] <= lo:
                        dem[n] = lo + 1 - c[n]
                else:
                    if c[n] > lo:
                        sup[n] = c[n] - lo
                    elif c[n] < lo:
                        dem[n] = lo - c[n]
            _maxflow(c, x, o, frozen, sup, dem, e_member, e_topic, ti, mi, me, level, it, q,
                     path, pe)
        for n in range(M):
            if frozen[n] == 2:
                frozen[n] = 0


cdef int64_t _find_cycle(const int32_t[::1] par, int32_t[::1] stamp, int64_t V) noexcept nogil:
    """A node on a cycle of the parent graph, or -1. With fixed arc costs such a cycle is a
    negative cycle (Bellman-Ford's invariant); after a cancellation changed some costs it
    may be stale, so the caller re-checks its cost before cancelling it."""
    cdef int64_t s, v
    for s in range(V):
        stamp[s] = 0
    for s in range(V):
        if stamp[s]:
            continue
        v = s
        while v >= 0 and stamp[v] == 0:
            stamp[v] = <int32_t>(s + 1)
            v = par[v]
        if v >= 0 and stamp[v] == s + 1:
            return v
    return -1


cdef int64_t _improve(int64_t[::1] c, int64_t[::1] x, const int64_t[::1] o,
                      const int32_t[::1] e_member, const int32_t[::1] e_topic,
                      const int64_t[::1] ti, const int64_t[::1] mi,
                      const int32_t[::1] me) except -1:
    """Fewest moves among the balanced assignments: cancel negative cycles of the residual
    graph until none is left (min-cost flow optimality), keeping the multiset of counts.

    Nodes: members, topics, and one level node Z_i per count lv[i] such that lv[i] + 1 is
    also a count. Arcs (cost = change in moved units, for one unit):
      member u -> topic t  u gives a unit of t: 0 if it holds more of t than it owned
                           (a fresh unit), else 1 (it loses one of its own);
      topic t -> member v  v takes a unit of t: -1 if it holds fewer than it owned
                           (it gets one of its own back), else 0;
      member b -> Z_i      b (at count lv[i]) ends one unit up;
      Z_i -> member a      a (at count lv[i] + 1) ends one unit down.
    A cycle changes counts only by Z hops, each swapping a k and a k + 1: the multiset, so
    the balance, is unchanged (and so is the set of levels: a hop swaps two members'
    levels). Search: SPFA from all-zero labels, checking the parent graph for a cycle every
    V relaxations; a negative cycle found is cancelled in place, its nodes and the level
    nodes are queued again (every arc whose cost changed leaves one of them) and the search
    goes on. It ends when the queue is empty: every arc then satisfies its label inequality,
    so no negative cycle is left. With nothing to improve this is one quick pass."""
    cdef Py_ssize_t M = c.shape[0], T = ti.shape[0] - 1
    cdef int64_t L, V
    has = np.diff(np.asarray(mi)) > 0
    cv = np.asarray(c)
    lv = np.unique(cv[has])
    L = lv.shape[0]
    li_arr = np.full(M, -1, np.int64)
    li_arr[has] = np.searchsorted(lv, cv[has])
    up_arr = np.zeros(max(L, 1), np.uint8)              # Z_i exists: level lv[i] + 1 present
    if L > 1:
        up_arr[:L - 1] = (np.diff(lv) == 1)
    by_lvl = np.argsort(li_arr, kind="stable").astype(np.int32)
    pos_arr = np.empty(M, np.int64)
    pos_arr[by_lvl] = np.arange(M)
    lvl_ptr = np.searchsorted(li_arr[by_lvl], np.arange(L + 1)).astype(np.int64)
    V = M + T + L
    dist_arr = np.zeros(V, np.int64)
    par_arr = np.full(V, -1, np.int32)
    arc_arr = np.full(V, -1, np.int32)
    inq_arr = np.zeros(V, np.uint8)
    q_arr = np.empty(V + 1, np.int32)
    stamp_arr = np.empty(V, np.int32)
    cyc_arr = np.empty(V + 1, np.int32)
    cdef int64_t[::1] li = li_arr, pos = pos_arr, lp = lvl_ptr, dist = dist_arr
    cdef uint8_t[::1] up = up_arr, inq = inq_arr
    cdef int32_t[::1] by = by_lvl, par = par_arr, arc = arc_arr, q = q_arr, stamp = stamp_arr
    cdef int32_t[::1] cyc = cyc_arr
    cdef int64_t r
    with nogil:
        r = _spfa_cancel(c, x, o, e_member, e_topic, ti, mi, me, li, up, by, pos, lp, dist,
                         par, arc, inq, q, stamp, cyc, M, T, L)
    return r


cdef inline void _push(int64_t n, uint8_t[::1] inq, int32_t[::1] q, int64_t* tail,
                       int64_t cap_q) noexcept nogil:
    if not inq[n]:
        inq[n] = 1
        q[tail[0]] = <int32_t>n
        tail[0] += 1
        if tail[0] == cap_q:
            tail[0] = 0


cdef int64_t _spfa_cancel(int64_t[::1] c, int64_t[::1] x, const int64_t[::1] o,
                          const int32_t[::1] e_member, const int32_t[::1] e_topic,
                          const int64_t[::1] ti, const int64_t[::1] mi, const int32_t[::1] me,
                          int64_t[::1] li, const uint8_t[::1] up, int32_t[::1] by,
                          int64_t[::1] pos, const int64_t[::1] lp,
                          int64_t[::1] dist, int32_t[::1] par, int32_t[::1] arc,
                          uint8_t[::1] inq, int32_t[::1] q, int32_t[::1] stamp,
                          int32_t[::1] cyc, int64_t M, int64_t T, int64_t L) noexcept nogil:
    """SPFA (FIFO Bellman-Ford) with in-place negative cycle cancelling (see _improve).
    Returns the number of cycles cancelled."""
    cdef int64_t V = M + T + L, head = 0, tail = 0, relax = 0, n, n2, p, j, w, nd, zi
    cdef int64_t cap_q = V + 1, cancelled = 0, k, nc, cost, cap, kk
    cdef int32_t e, a, b
    cdef bint ok
    for n in range(V):                 # all labels 0: a virtual source reaches every node
        _push(n, inq, q, &tail, cap_q)
    while head != tail:
        n = q[head]
        head += 1
        if head == cap_q:
            head = 0
        inq[n] = 0
        if n < M:
            for j in range(mi[n], mi[n + 1]):
                e = me[j]
                if x[e] <= 0:
                    continue
                w = 0 if x[e] > o[e] else 1
                n2 = M + e_topic[e]
                nd = dist[n] + w
                if nd < dist[n2]:
                    dist[n2] = nd
                    par[n2] = <int32_t>n
                    arc[n2] = e
                    relax += 1
                    _push(n2, inq, q, &tail, cap_q)
            zi = li[n]
            if zi >= 0 and up[zi] and dist[n] < dist[M + T + zi]:
                n2 = M + T + zi
                dist[n2] = dist[n]
                par[n2] = <int32_t>n
                relax += 1
                _push(n2, inq, q, &tail, cap_q)
        elif n < M + T:
            for j in range(ti[n - M], ti[n - M + 1]):
                w = -1 if x[j] < o[j] else 0
                n2 = e_member[j]
                nd = dist[n] + w
                if nd < dist[n2]:
                    dist[n2] = nd
                    par[n2] = <int32_t>n
                    arc[n2] = <int32_t>j
                    relax += 1
                    _push(n2, inq, q, &tail, cap_q)
        else:
            zi = n - M - T
            if up[zi]:
                for j in range(lp[zi + 1], lp[zi + 2]):          # members one level up
                    n2 = by[j]
                    if dist[n] < dist[n2]:
                        dist[n2] = dist[n]
                        par[n2] = <int32_t>n
                        arc[n2] = -1
                        relax += 1
                        _push(n2, inq, q, &tail, cap_q)
        if relax < V:
            continue
        relax = 0
        n2 = _find_cycle(par, stamp, V)
        if n2 < 0:
            continue
        # -- the cycle (cyc[0] = n2, then parents), its cost and capacity under current x
        nc = 0
        p = n2
        while True:
            cyc[nc] = <int32_t>p
            nc += 1
            p = par[p]
            if p == n2:
                break
        cost = 0
        cap = INF
        ok = True
        for k in range(nc):
            n = cyc[k]                    # arc par[n] -> n
            p = par[n]
            if p < M and M <= n < M + T:                          # give
                e = arc[n]
                if x[e] > o[e]:
                    kk = x[e] - o[e]
                else:
                    cost += 1
                    kk = x[e]
            elif M <= p < M + T and n < M:                        # take
                e = arc[n]
                if x[e] < o[e]:
                    cost -= 1
                    kk = o[e] - x[e]
                else:
                    kk = INF
            elif p < M:                                           # b -> Z_i: b at lv[i]
                kk = 1
                if li[p] != n - M - T:
                    ok = False
            else:                                                 # Z_i -> a at lv[i] + 1
                kk = 1
                if li[n] != p - M - T + 1:
                    ok = False
            if kk < cap:
                cap = kk
        if ok and cost < 0 and cap > 0:
            for k in range(nc):
                n = cyc[k]
                p = par[n]
                if p < M and M <= n < M + T:
                    x[arc[n]] -= cap
                elif M <= p < M + T and n < M:
                    x[arc[n]] += cap
                elif p < M:                                       # b one level up
                    c[p] += 1
                else:                                             # a one level down
                    c[n] -= 1
            for k in range(nc):                                   # swap the hop's levels
                n = cyc[k]
                p = par[n]
                if p >= M + T and n < M:                          # b -> Z -> a
                    a = <int32_t>n
                    b = par[p]
                    li[a] -= 1
                    li[b] += 1
                    j = pos[a]
                    by[j] = b
                    by[pos[b]] = a
                    pos[a] = pos[b]
                    pos[b] = j
            cancelled += 1
        # break the parent cycle (stale or cancelled) and look at its nodes again
        for k in range(nc):
            par[cyc[k]] = -1
            _push(cyc[k], inq, q, &tail, cap_q)
        for zi in range(L):
            _push(M + T + zi, inq, q, &tail, cap_q)
    return cancelled


cdef int64_t _general(const int32_t[::1] ppt, const int64_t[::1] tbase,
                      const int64_t[::1] sip, const int32_t[::1] subs,
                      const int64_t[::1] oip, const int32_t[::1] owned,
                      const int32_t[::1] gen, int32_t g,
                      const int32_t[::1] claim, int32_t[::1] final) except -1:
    """Heterogeneous subscriptions. Work per (member, topic) edge: o = units of the topic the
    member validly owns, x = units it will hold. Start from x = o (everything sticks), hand
    the free units of each topic to its least loaded subscribers (most constrained topics
    first), balance (_balance: max-flows), minimize moves (_improve: cycle cancelling), then
    materialize: each member keeps min(x, o) of its own units of each topic (its first
    claims), the rest of the topic's units are dealt to the members still short."""
    cdef Py_ssize_t T = ppt.shape[0], M = sip.shape[0] - 1, m, t
    cdef int64_t N = tbase[T], i, j, u, E, k, free_t, spent, lvl, add, r, r2, n_live, give
    cdef int32_t e
    t_indptr, t_members = _topic_members(ppt, sip, subs)
    cdef const int64_t[::1] ti = t_indptr
    cdef const int32_t[::1] tm = t_members
    E = ti[T]
    if E == 0:
        return 0
    # edge -> topic; member-major edge lists (topics ascending within a member)
    e_topic_arr = np.repeat(np.arange(T, dtype=np.int32), np.diff(t_indptr)).astype(np.int32)
    mi_arr = np.zeros(M + 1, np.int64)
    mi_arr[1:] = np.cumsum(np.bincount(t_members, minlength=M))
    me_arr = np.argsort(t_members, kind="stable").astype(np.int32)
    unit_topic_arr = np.repeat(np.arange(T, dtype=np.int32), ppt).astype(np.int32)
    cdef const int32_t[::1] e_topic = e_topic_arr, me = me_arr, unit_topic = unit_topic_arr
    cdef const int64_t[::1] mi = mi_arr
    o_arr = np.zeros(E, np.int64)
    kept_arr = np.zeros(E, np.int64)
    c_arr = np.zeros(M, np.int64)
    topic_edge_arr = np.full(T, -1, np.int32)
    frozen_arr = (np.diff(mi_arr) == 0).astype(np.uint8)
    cdef int64_t[::1] o = o_arr, kept = kept_arr, c = c_arr
    cdef int32_t[::1] topic_edge = topic_edge_arr
    # -- claims per edge (first occurrence of a unit only)
    for m in range(M):
        if gen[m] != g or mi[m] == mi[m + 1]:
            continue
        for j in range(mi[m], mi[m + 1]):
            topic_edge[e_topic[me[j]]] = me[j]
        for i in range(oip[m], oip[m + 1]):
            u = owned[i]
            if claim[u] == m and final[u] == -1:
                e = topic_edge[unit_topic[u]]
                if e >= 0:
                    final[u] = <int32_t>m
                    o[e] += 1
        for j in range(mi[m], mi[m + 1]):
            topic_edge[e_topic[me[j]]] = -1
    x_arr = o_arr.copy()
    cdef int64_t[::1] x = x_arr
    for e in range(E):
        c[tm[e]] += x[e]
    # -- free units: water-fill each topic's subscribers, fewest subscribers first
    deg = np.diff(t_indptr)
    order_arr = np.lexsort((np.arange(T), deg)).astype(np.int64)
    cdef const int64_t[::1] order = order_arr
    keys_arr = np.empty(max(int(deg.max()), 1), np.int64)
    cdef int64_t[::1] keys = keys_arr
    for r in range(T):
        t = order[r]
        k = ti[t + 1] - ti[t]
        if k == 0:
            continue
        free_t = ppt[t]
        for e in range(ti[t], ti[t + 1]):
            free_t -= o[e]
        if free_t == 0:
            continue
        for i in range(k):                  # (count, position): ties by member index
            keys[i] = (c[tm[ti[t] + i]] << 32) | i
        qsort(&keys[0], k, sizeof(int64_t), _cmp_i64)
        # raise the lowest j+1 members to level keys[j] while free units last
        j = 0
        spent = 0
        while j + 1 < k:
            lvl = keys[j + 1] >> 32
            if spent + (j + 1) * (lvl - (keys[j] >> 32)) > free_t:
                break
            spent += (j + 1) * (lvl - (keys[j] >> 32))
            j += 1
        lvl = keys[j] >> 32
        add = (free_t - spent) // (j + 1)
        r2 = (free_t - spent) % (j + 1)
        for i in range(j + 1):
            e = <int32_t>(ti[t] + (keys[i] & 0xFFFFFFFF))
            give = lvl + add + (1 if i < r2 else 0) - (keys[i] >> 32)
            x[e] += give
            c[tm[e]] += give
    # -- balance, then fewest moves
    level_arr = np.empty(M + T, np.int32)
    it_arr = np.empty(M + T, np.int64)
    q_arr = np.empty(M + T + 1, np.int32)
    path_arr = np.empty(M + T + 1, np.int32)
    pe_arr = np.empty(M + T + 1, np.int32)
    sup_arr = np.zeros(M, np.int64)
    dem_arr = np.zeros(M, np.int64)
    seen_arr = np.zeros(M + T, np.uint8)
    cdef uint8_t[::1] frozen = frozen_arr, seen_v = seen_arr
    cdef int32_t[::1] level_v = level_arr, q_v = q_arr, path_v = path_arr, pe_v = pe_arr
    cdef int64_t[::1] it_v = it_arr, sup_v = sup_arr, dem_v = dem_arr
    with nogil:
        _balance(c, x, o, tm, e_topic, ti, mi, me, frozen, level_v, it_v, q_v, path_v,
                 pe_v, sup_v, dem_v, seen_v)
    _improve(c, x, o, tm, e_topic, ti, mi, me)
    # -- materialize: trim members holding more of a topic than x allows
    for m in range(M):
        if gen[m] != g or mi[m] == mi[m + 1]:
            continue
        k = 0
        for j in range(mi[m], mi[m + 1]):
            e = me[j]
            if o[e] > x[e]:
                k = 1
            kept[e] = o[e] if o[e] < x[e] else x[e]
        if not k:
            continue
        for j in range(mi[m], mi[m + 1]):
            topic_edge[e_topic[me[j]]] = me[j]
            kept[me[j]] = 0
        for i in range(oip[m], oip[m + 1]):
            u = owned[i]
            if final[u] == m:
                e = topic_edge[unit_topic[u]]
                if kept[e] < x[e]:
                    kept[e] += 1
                    final[u] = _parked(m)
                else:
                    final[u] = -1
        _unpark(&final[0], &owned[oip[m]], oip[m + 1] - oip[m], m)
        for j in range(mi[m], mi[m + 1]):
            topic_edge[e_topic[me[j]]] = -1
    # -- deal each topic's remaining units to its subscribers still short
    live_arr = np.empty(max(int(deg.max()), 1), np.int32)
    need_arr = np.empty(max(int(deg.max()), 1), np.int64)
    cdef int32_t[::1] live = live_arr
    cdef int64_t[::1] need = need_arr
    cdef uint8_t[::1] no_mask = np.zeros(1, np.uint8)
    for t in range(T):
        n_live = 0
        for e in range(ti[t], ti[t + 1]):
            if x[e] > kept[e]:
                live[n_live] = tm[e]
                need[n_live] = x[e] - kept[e]
                n_live += 1
        if n_live and _deal(final, no_mask, False, tbase[t], tbase[t + 1],
                            &live[0], &need[0], n_live) != 0:
            raise RuntimeError("assign_classic: topic %d: free units do not match" % t)
    return 0


def sticky(const int32_t[::1] ppt, const int64_t[::1] tbase,
           const int64_t[::1] sip, const int32_t[::1] subs,
           const int64_t[::1] oip, const int32_t[::1] owned,
           const int32_t[::1] gen, bint cooperative, bint force_general=False):
    """Sticky assignment with KIP-341 claim resolution. Returns (target, final, homogeneous):
    final is the balanced goal; target == final with the moved units withheld (-1) when
    cooperative, else target is final itself."""
    cdef Py_ssize_t T = ppt.shape[0], M = sip.shape[0] - 1, m, t
    cdef int64_t N = tbase[T], i, k_common = -1, k
    cdef int32_t g
    final_arr = np.full(N, -1, np.int32)
    claim_arr = np.full(N, -1, np.int32)
    cdef int32_t[::1] final = final_arr, claim = claim_arr
    if M == 0:
        return final_arr, final_arr, True
    g = _resolve_claims(claim, oip, owned, gen, N)
    # Homogeneous? Every member with a (non-empty) subscription has the same topic set.
    common_arr = np.zeros(T, np.uint8)
    active_arr = np.zeros(M, np.uint8)
    seen_arr = np.full(T, -1, np.int32)
    cdef uint8_t[::1] common = common_arr, active = active_arr
    cdef int32_t[::1] seen = seen_arr
    cdef bint homogeneous = True
    for m in range(M):
        k = 0
        for i in range(sip[m], sip[m + 1]):
            t = subs[i]
            if t < 0 or t >= T:
                raise ValueError("subscription of member %d names topic %d, outside 0..%d"
                                 % (m, t, T - 1))
            if ppt[t] == 0 or seen[t] == m:
                continue
            seen[t] = m
            k += 1
            if k_common < 0:
                common[t] = 1
            elif not common[t]:
                homogeneous = False
        if k == 0:
            continue
        active[m] = 1
        if k_common < 0:
            k_common = k
        elif k != k_common:
            homogeneous = False
    if homogeneous and not force_general:
        _homogeneous(ppt, tbase, common, active, oip, owned, gen, g, claim, final)
    else:
        homogeneous = False
        _general(ppt, tbase, sip, subs, oip, owned, gen, g, claim, final)
    if not cooperative:
        return final_arr, final_arr, homogeneous
    target_arr = np.empty(N, np.int32)
    stale_arr = np.full(N, -1, np.int32)
    cdef int32_t[::1] target = target_arr, stale = stale_arr
    with nogil:
        _stale_claims(stale, claim, oip, owned, gen, g, N)
        _withhold(target, final, claim, stale, N)
    return target_arr, final_arr, homogeneous
