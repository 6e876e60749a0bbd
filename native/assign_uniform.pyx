# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True
"""KIP-848 server-side consumer assignors, ``uniform`` and ``range``, over owner arrays.

Data model (docs/assign.md): members are dense indices in tie-break order, a unit is
``topic_base[t] + partition``, an assignment is an int32 owner array (-1 = unassigned).
The Python API with the full contract is ``groupcoord.assign.consumer``; this module holds the
kernels. Every kernel reads its inputs through const pointers (inputs are never written) and
runs without the GIL.

uniform, homogeneous (all members subscribe the same topics, ignoring topics with 0 partitions)
  one pool of N units over M members: quota q = N // M, the N % M "+1" slots go to the members
  holding the most still-valid units (ties: lower index). Retain current units up to quota, in
  unit order; hand the rest out, in unit order, to members under quota in member order.

uniform, heterogeneous
  topics with identical subscriber sets form a *class* (one pool). Classes are processed most
  constrained first (fewest subscribers, then lowest topic index). The plan is a count per
  (class, subscriber), built from what members hold now:
  1. cap: nobody keeps more than the largest load of a from-scratch greedy (fill the least
     loaded subscriber, classes in order): that greedy is feasible, so the most balanced
     assignment's largest load is no higher. Over-cap members keep their most constrained
     classes first.
  2. the units not kept water-fill onto each class's least-loaded subscribers (ties: more units
     of the class held now, then lower index).
  3. refine to the most balanced load vector the subscriptions allow: move one planned unit
     along a path member -class-> member ... whenever the path's ends differ by >= 2 (no such
     path left <=> the vector is dec-min, Frank & Murota). Done level by level from the top,
     each level as a unit-capacity max-flow (Dinic: BFS layers, then a blocking flow), so the
     shortest paths (fewest units moved) are used. Givers: fewest held units first.
  4. realise: per (class, subscriber) keep current units up to the planned count, hand the
     rest out to subscribers under plan. A balanced, valid assignment is a fixed point.

range
  per topic, its subscribers (static members first, then by index) take contiguous partition
  ranges; the first P % S of them one extra partition. ``current`` is not used.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort
from libc.string cimport memcmp, memcpy

cnp.import_array()

cdef extern from "limits.h":
    int INT32_MAX "INT_MAX"

cdef enum:
    RC_OK = 0
    RC_NOMEM = 1
    RC_INDPTR = 2
    RC_TOPIC = 3
    RC_PARTITIONS = 4
    RC_TOO_MANY_UNITS = 5

cdef enum:
    ARENA_SLOTS = 48


# ------------------------------------------------------------------------------ helpers

cdef struct Arena:
    # every scratch buffer of one call, freed together (no early-return leaks)
    void* p[ARENA_SLOTS]
    int n


cdef void* _alloc(Arena* a, size_t nbytes, bint zero) noexcept nogil:
    cdef void* ptr
    if a.n >= ARENA_SLOTS:
        return NULL
    if nbytes == 0:
        nbytes = 8
    ptr = calloc(nbytes, 1) if zero else malloc(nbytes)
    if ptr != NULL:
        a.p[a.n] = ptr
        a.n += 1
    return ptr


cdef void _free_all(Arena* a) noexcept nogil:
    cdef int i
    for i in range(a.n):
        free(a.p[i])
    a.n = 0


cdef inline bint _member(int32_t o, int32_t n_members) noexcept nogil:
    # one unsigned compare: -1 (unassigned) and stale indices >= n_members are "no owner"
    return <uint32_t>o < <uint32_t>n_members


cdef int _bases(int32_t n_topics, const int32_t* ppt, int64_t* base) noexcept nogil:
    cdef int32_t t
    base[0] = 0
    for t in range(n_topics):
        if ppt[t] < 0:
            return RC_PARTITIONS
        base[t + 1] = base[t] + ppt[t]
    if base[n_topics] > INT32_MAX:
        return RC_TOO_MANY_UNITS
    return RC_OK


cdef int _check_subscriptions(int32_t n_members, int32_t n_topics, const int64_t* sptr,
                              const int32_t* subs, int64_t n_subs) noexcept nogil:
    cdef int32_t m
    cdef int64_t e
    if sptr[0] != 0 or sptr[n_members] != n_subs:
        return RC_INDPTR
    for m in range(n_members):
        if sptr[m + 1] < sptr[m]:
            return RC_INDPTR
    for e in range(n_subs):
        if <uint32_t>subs[e] >= <uint32_t>n_topics:
            return RC_TOPIC
    return RC_OK


cdef int _transpose(Arena* ar, int32_t n_members, int32_t n_topics, const int64_t* sptr,
                    const int32_t* subs, int64_t** tptr_out, int32_t** tsub_out) noexcept nogil:
    """topic -> subscribers CSR; each list ascending and duplicate-free."""
    cdef int64_t* tptr = <int64_t*>_alloc(ar, (n_topics + 1) * sizeof(int64_t), True)
    cdef int32_t* seen = <int32_t*>_alloc(ar, n_topics * sizeof(int32_t), False)
    cdef int64_t* fill = <int64_t*>_alloc(ar, (n_topics + 1) * sizeof(int64_t), False)
    cdef int32_t* tsub
    cdef int32_t m, t
    cdef int64_t e
    if tptr == NULL or seen == NULL or fill == NULL:
        return RC_NOMEM
    for t in range(n_topics):
        seen[t] = -1
    for m in range(n_members):
        for e in range(sptr[m], sptr[m + 1]):
            t = subs[e]
            if seen[t] != m:           # a topic listed twice by one member counts once
                seen[t] = m
                tptr[t + 1] += 1
    for t in range(n_topics):
        tptr[t + 1] += tptr[t]
        fill[t] = tptr[t]
        seen[t] = -1
    tsub = <int32_t*>_alloc(ar, tptr[n_topics] * sizeof(int32_t), False)
    if tsub == NULL:
        return RC_NOMEM
    for m in range(n_members):         # members ascending -> every list comes out sorted
        for e in range(sptr[m], sptr[m + 1]):
            t = subs[e]
            if seen[t] != m:
                seen[t] = m
                tsub[fill[t]] = m
                fill[t] += 1
    tptr_out[0] = tptr
    tsub_out[0] = tsub
    return RC_OK


# ------------------------------------------------------------------------------ uniform

cdef int _is_homogeneous(Arena* ar, int32_t n_members, int32_t n_topics, const int32_t* ppt,
                         const int64_t* sptr, const int32_t* subs, uint8_t** in0_out,
                         bint* homogeneous) noexcept nogil:
    """Same topic *set* for every member (topics with 0 partitions ignored). in0 = member 0's."""
    cdef uint8_t* in0 = <uint8_t*>_alloc(ar, n_topics, True)
    cdef int32_t* seen = <int32_t*>_alloc(ar, n_topics * sizeof(int32_t), False)
    cdef int64_t d0 = 0, cnt, e, len0, lenm
    cdef int32_t m, t
    if in0 == NULL or seen == NULL:
        return RC_NOMEM
    in0_out[0] = in0
    homogeneous[0] = True
    for e in range(sptr[0], sptr[1]):
        t = subs[e]
        if ppt[t] > 0 and not in0[t]:
            in0[t] = 1
            d0 += 1
    for t in range(n_topics):
        seen[t] = -1
    len0 = sptr[1] - sptr[0]
    for m in range(1, n_members):
        lenm = sptr[m + 1] - sptr[m]
        # fast path: byte-identical list (callers usually build them from one sorted list)
        if lenm == len0 and (len0 == 0 or memcmp(&subs[sptr[m]], &subs[sptr[0]],
                                                 <size_t>len0 * sizeof(int32_t)) == 0):
            continue
        cnt = 0
        for e in range(sptr[m], sptr[m + 1]):
            t = subs[e]
            if ppt[t] == 0:
                continue
            if not in0[t]:
                homogeneous[0] = False
                return RC_OK
            if seen[t] != m:
                seen[t] = m
                cnt += 1
        if cnt != d0:
            homogeneous[0] = False
            return RC_OK
    return RC_OK


cdef int _homogeneous(Arena* ar, int32_t n_topics, int32_t n_members, const int32_t* ppt,
                      const int64_t* base, const uint8_t* insub, const int32_t* cur,
                      int32_t* out) noexcept nogil:
    cdef int32_t* rem = <int32_t*>_alloc(ar, n_members * sizeof(int32_t), True)
    cdef int32_t* hist
    cdef int32_t* free_units
    cdef int64_t n_pool = 0, total_held = 0, u, nf = 0, f, acc, q, r
    cdef int32_t t, m, o, maxh = 0, hs, neq, mf
    if rem == NULL:
        return RC_NOMEM
    # pass 1: pool size, and rem[m] = units m currently holds in the pool
    for t in range(n_topics):
        if insub[t]:
            n_pool += ppt[t]
            for u in range(base[t], base[t + 1]):
                o = cur[u]
                if _member(o, n_members):
                    rem[o] += 1
        else:
            for u in range(base[t], base[t + 1]):
                out[u] = -1                   # nobody subscribes: stays unassigned
    q = n_pool // n_members
    r = n_pool % n_members
    for m in range(n_members):
        total_held += rem[m]
        if rem[m] > maxh:
            maxh = rem[m]
    # quota: q, plus one for the r members holding the most (ties: lower index). Found by a
    # threshold on a histogram of holdings (no sort): hs = holding level where the r-th slot
    # falls, neq = how many members at exactly hs still get it.
    hs = maxh + 1
    neq = 0
    if r > 0:
        hist = <int32_t*>_alloc(ar, (maxh + 1) * sizeof(int32_t), True)
        if hist == NULL:
            return RC_NOMEM
        for m in range(n_members):
            hist[rem[m]] += 1
        acc = 0
        hs = maxh
        while acc + hist[hs] < r:             # terminates: sum(hist) = n_members > r
            acc += hist[hs]
            hs -= 1
        neq = <int32_t>(r - acc)
    for m in range(n_members):
        if rem[m] > hs:
            rem[m] = <int32_t>(q + 1)
        elif rem[m] == hs and neq > 0:
            rem[m] = <int32_t>(q + 1)
            neq -= 1
        else:
            rem[m] = <int32_t>q
    # rem[m] is now the quota; it counts down as units are placed
    if total_held == 0:
        # nothing to retain (FULL assignment): contiguous fill in unit order, no free list
        mf = 0
        for t in range(n_topics):
            if insub[t]:
                for u in range(base[t], base[t + 1]):
                    while rem[mf] == 0:       # sum(quota) == n_pool: never runs off the end
                        mf += 1
                    out[u] = mf
                    rem[mf] -= 1
        return RC_OK
    free_units = <int32_t*>_alloc(ar, n_pool * sizeof(int32_t), False)
    if free_units == NULL:
        return RC_NOMEM
    # pass 2: retain up to quota in unit order, collect the rest
    for t in range(n_topics):
        if insub[t]:
            for u in range(base[t], base[t + 1]):
                o = cur[u]
                if _member(o, n_members) and rem[o] > 0:
                    out[u] = o
                    rem[o] -= 1
                else:
                    free_units[nf] = <int32_t>u
                    nf += 1
    # pass 3: free units, in unit order, to members under quota in member order
    # (free units == sum of the quota left, since sum(quota) == n_pool: mf stays < n_members)
    mf = 0
    for f in range(nf):
        while rem[mf] == 0:
            mf += 1
        out[free_units[f]] = mf
        rem[mf] -= 1
    return RC_OK


cdef struct TopicKey:
    int64_t cnt          # number of subscribers
    uint64_t h           # hash of the subscriber list
    int32_t t


cdef struct ClassKey:
    int64_t cnt
    int32_t mint         # lowest topic index of the class
    int32_t g            # group index (into the TopicKey runs)


cdef int _cmp_topickey(const void* pa, const void* pb) noexcept nogil:
    cdef const TopicKey* a = <const TopicKey*>pa
    cdef const TopicKey* b = <const TopicKey*>pb
    if a.cnt != b.cnt:
        return -1 if a.cnt < b.cnt else 1
    if a.h != b.h:
        return -1 if a.h < b.h else 1
    return -1 if a.t < b.t else (1 if a.t > b.t else 0)


cdef int _cmp_classkey(const void* pa, const void* pb) noexcept nogil:
    cdef const ClassKey* a = <const ClassKey*>pa
    cdef const ClassKey* b = <const ClassKey*>pb
    if a.cnt != b.cnt:
        return -1 if a.cnt < b.cnt else 1
    return -1 if a.mint < b.mint else (1 if a.mint > b.mint else 0)


cdef inline int64_t _need(const int32_t* ms, int64_t S, const int32_t* load,
                          int64_t lam) noexcept nogil:
    # units needed to lift every subscriber to level lam
    cdef int64_t j, s = 0, l
    for j in range(S):
        l = load[ms[j]]
        if l < lam:
            s += lam - l
    return s


cdef void _waterfill(const int32_t* ms, int64_t S, int64_t P, int32_t* load,
                     const int32_t* hold_c, int32_t* hist, int32_t maxhold,
                     int32_t* x_c) noexcept nogil:
    """Add P units onto the least-loaded of the S members ms (== P one-by-one greedy steps):
    everyone below a level lam is lifted to lam, the P - need(lam) left over go to members at
    lam holding the most units of the class now (hold_c), then lower index. x_c += added."""
    cdef int64_t lo = INT32_MAX, hi = 0, mid, lam, r, acc, l, x, j
    cdef int32_t hs, neq
    if P <= 0:
        return
    for j in range(S):
        l = load[ms[j]]
        if l < lo:
            lo = l
        if l > hi:
            hi = l
    hi += (P + S - 1) // S                   # need(hi) >= S * ceil(P / S) >= P
    while lo < hi:                            # largest lam with need(lam) <= P
        mid = lo + (hi - lo + 1) // 2
        if _need(ms, S, load, mid) <= P:
            lo = mid
        else:
            hi = mid - 1
    lam = lo
    r = P - _need(ms, S, load, lam)           # < #(members at level <= lam)
    hs = maxhold + 1
    neq = 0
    if r > 0:
        # threshold on a histogram of holdings instead of a sort: members holding more than hs
        # get one, and neq of those holding exactly hs (lowest indices first)
        for j in range(S):
            if load[ms[j]] <= lam:
                hist[hold_c[j]] += 1
        acc = 0
        hs = maxhold
        while acc + hist[hs] < r:
            acc += hist[hs]
            hs -= 1
        neq = <int32_t>(r - acc)
        for j in range(S):
            hist[hold_c[j]] = 0
    for j in range(S):
        l = load[ms[j]]
        x = lam - l if l < lam else 0
        if r > 0 and l <= lam:
            if hold_c[j] > hs:
                x += 1
            elif hold_c[j] == hs and neq > 0:
                x += 1
                neq -= 1
        load[ms[j]] = <int32_t>(l + x)
        if x_c != NULL:
            x_c[j] += <int32_t>x


cdef inline void _mark_class(int32_t* stamp, int32_t* pos, const int32_t* ms, int64_t S,
                             int32_t c) noexcept nogil:
    # stamp[m] == c marks "m subscribes class c" while class c is scanned, pos[m] is m's index
    # in the class's subscriber list ms. Classes are scanned in order, so a stale stamp is < c.
    cdef int32_t j
    for j in range(S):
        stamp[ms[j]] = c
        pos[ms[j]] = j


cdef inline int32_t _slot_in_class(int32_t o, int32_t M, const int32_t* stamp,
                                   const int32_t* pos, int32_t c) noexcept nogil:
    # Owner o's index among the subscribers of class c (marked by _mark_class), or -1 when o
    # is not a member or does not subscribe the class.
    if _member(o, M) and stamp[o] == c:
        return pos[o]
    return -1


cdef int _heterogeneous(Arena* ar, int32_t n_topics, int32_t n_members, const int32_t* ppt,
                        const int64_t* base, const int64_t* sptr, const int32_t* subs,
                        const int32_t* cur, int32_t* out) noexcept nogil:
    cdef int64_t* tptr = NULL
    cdef int32_t* tsub = NULL
    cdef int rc = _transpose(ar, n_members, n_topics, sptr, subs, &tptr, &tsub)
    if rc != RC_OK:
        return rc
    cdef int32_t M = n_members
    cdef int32_t t, m, o, g, c, K, nact = 0, rep, i, j, maxhold = 0, cap
    cdef int64_t S, u, e, P, nf, f, take
    cdef uint64_t h
    cdef const int32_t* ms
    cdef int32_t* hold_c
    cdef int32_t* x_c
    cdef int32_t* kept_c

    # ---- classes: topics (with partitions and subscribers) grouped by identical subscriber list
    cdef TopicKey* keys = <TopicKey*>_alloc(ar, n_topics * sizeof(TopicKey), False)
    if keys == NULL:
        return RC_NOMEM
    for t in range(n_topics):
        S = tptr[t + 1] - tptr[t]
        if ppt[t] == 0:
            continue
        if S == 0:
            for u in range(base[t], base[t + 1]):
                out[u] = -1                   # nobody subscribes: stays unassigned
            continue
        h = 14695981039346656037ULL
        for e in range(tptr[t], tptr[t + 1]):
            h = (h ^ <uint64_t>tsub[e]) * 1099511628211ULL
            h ^= h >> 29
        keys[nact].cnt = S
        keys[nact].h = h
        keys[nact].t = t
        nact += 1
    if nact == 0:
        return RC_OK
    qsort(keys, nact, sizeof(TopicKey), _cmp_topickey)
    cdef int32_t* gstart = <int32_t*>_alloc(ar, nact * sizeof(int32_t), False)
    cdef int32_t* glen = <int32_t*>_alloc(ar, nact * sizeof(int32_t), False)
    if gstart == NULL or glen == NULL:
        return RC_NOMEM
    K = 0
    for i in range(nact):
        t = keys[i].t
        if K > 0:
            rep = keys[gstart[K - 1]].t
            # equal hash is only a hint: the lists themselves must match
            if (keys[i].cnt == keys[gstart[K - 1]].cnt and keys[i].h == keys[gstart[K - 1]].h
                    and memcmp(&tsub[tptr[t]], &tsub[tptr[rep]],
                               <size_t>keys[i].cnt * sizeof(int32_t)) == 0):
                glen[K - 1] += 1
                continue
        gstart[K] = i
        glen[K] = 1
        K += 1
    # processing order: most constrained (fewest subscribers) first, then lowest topic index
    cdef ClassKey* order = <ClassKey*>_alloc(ar, K * sizeof(ClassKey), False)
    cdef int64_t* coff = <int64_t*>_alloc(ar, (K + 1) * sizeof(int64_t), False)
    cdef int64_t* cP = <int64_t*>_alloc(ar, K * sizeof(int64_t), False)
    cdef const int32_t** cms = <const int32_t**>_alloc(ar, K * sizeof(int32_t*), False)
    if order == NULL or coff == NULL or cP == NULL or cms == NULL:
        return RC_NOMEM
    for g in range(K):
        order[g].cnt = keys[gstart[g]].cnt
        order[g].mint = keys[gstart[g]].t     # runs are sorted by topic: first is lowest
        order[g].g = g
    qsort(order, K, sizeof(ClassKey), _cmp_classkey)
    coff[0] = 0
    cdef int64_t n_pool = 0
    for c in range(K):
        g = order[c].g
        coff[c + 1] = coff[c] + order[c].cnt
        cms[c] = &tsub[tptr[keys[gstart[g]].t]]
        P = 0
        for i in range(glen[g]):
            P += ppt[keys[gstart[g] + i].t]
        cP[c] = P
        n_pool += P
    cdef int64_t sumS = coff[K]

    cdef int32_t* hold = <int32_t*>_alloc(ar, sumS * sizeof(int32_t), True)
    cdef int32_t* xplan = <int32_t*>_alloc(ar, sumS * sizeof(int32_t), False)
    cdef int32_t* kept = <int32_t*>_alloc(ar, sumS * sizeof(int32_t), True)
    cdef int32_t* stamp = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* pos = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* load = <int32_t*>_alloc(ar, M * sizeof(int32_t), True)
    cdef int32_t* held = <int32_t*>_alloc(ar, M * sizeof(int32_t), True)
    cdef int32_t* free_units = <int32_t*>_alloc(ar, n_pool * sizeof(int32_t), False)
    if (hold == NULL or xplan == NULL or kept == NULL or stamp == NULL or pos == NULL
            or load == NULL or held == NULL or free_units == NULL):
        return RC_NOMEM

    # ---- holdings: hold[coff[c] + j] = units of class c owned now by its j-th subscriber.
    for m in range(M):
        stamp[m] = -1
    for c in range(K):
        g = order[c].g
        ms = cms[c]
        S = order[c].cnt
        _mark_class(stamp, pos, ms, S, c)
        hold_c = &hold[coff[c]]
        for i in range(glen[g]):
            t = keys[gstart[g] + i].t
            for u in range(base[t], base[t + 1]):
                j = _slot_in_class(cur[u], M, stamp, pos, c)
                if j >= 0:
                    hold_c[j] += 1
        for j in range(S):
            held[ms[j]] += hold_c[j]
    for e in range(sumS):
        if hold[e] > maxhold:
            maxhold = hold[e]
    cdef int32_t* hist = <int32_t*>_alloc(ar, (maxhold + 1) * sizeof(int32_t), True)
    if hist == NULL:
        return RC_NOMEM

    # ---- 1. cap: the greedy from scratch is one feasible assignment, so its largest load is
    # >= the smallest possible largest load; nobody keeps more than that. Over-cap members
    # keep their most constrained classes. (Only a shortcut for step 3: it never removes what
    # a most-balanced assignment could keep.)
    for c in range(K):
        _waterfill(cms[c], order[c].cnt, cP[c], load, &hold[coff[c]], hist, maxhold, NULL)
    cap = 0
    for m in range(M):
        if load[m] > cap:
            cap = load[m]
        load[m] = 0
    for c in range(K):
        ms = cms[c]
        S = order[c].cnt
        hold_c = &hold[coff[c]]
        x_c = &xplan[coff[c]]
        P = cP[c]
        for j in range(S):
            take = hold_c[j]
            if take > cap - load[ms[j]]:
                take = cap - load[ms[j]]
            x_c[j] = <int32_t>take
            load[ms[j]] += <int32_t>take
            P -= take
        cP[c] = P                             # now: units of the class not yet planned
    # ---- 2. plan the rest: unplaced units of each class onto its least-loaded subscribers
    for c in range(K):
        _waterfill(cms[c], order[c].cnt, cP[c], load, &hold[coff[c]], hist, maxhold,
                   &xplan[coff[c]])
    # ---- 3. refine the plan to the most balanced (dec-min) load vector
    rc = _refine(ar, M, K, order, cms, coff, xplan, load, held)
    if rc != RC_OK:
        return rc

    # ---- 4. realise the plan: per (class, subscriber) keep current units up to the planned
    # count (unit order), then hand the rest out in unit order to subscribers under plan in
    # member order. sum(plan of class) == units of class, so the fill never runs off the end.
    for m in range(M):
        stamp[m] = -1
    for c in range(K):
        g = order[c].g
        ms = cms[c]
        x_c = &xplan[coff[c]]
        kept_c = &kept[coff[c]]
        _mark_class(stamp, pos, ms, order[c].cnt, c)
        nf = 0
        for i in range(glen[g]):
            t = keys[gstart[g] + i].t
            for u in range(base[t], base[t + 1]):
                j = _slot_in_class(cur[u], M, stamp, pos, c)
                if j >= 0 and kept_c[j] < x_c[j]:
                    out[u] = cur[u]
                    kept_c[j] += 1
                else:
                    free_units[nf] = <int32_t>u
                    nf += 1
        j = 0
        for f in range(nf):
            while kept_c[j] >= x_c[j]:
                j += 1
            out[free_units[f]] = ms[j]
            kept_c[j] += 1
    return RC_OK


cdef int _refine(Arena* ar, int32_t M, int32_t K, const ClassKey* order,
                 const int32_t** cms, const int64_t* coff, int32_t* xplan, int32_t* load,
                 const int32_t* held) noexcept nogil:
    """Move planned units along member -class-> member paths until no path joins a member at
    level L to one at level <= L - 2 (Frank & Murota: then the load vector is dec-min, i.e. the
    most balanced one).

    Level by level from the top: sources = live members at lmax (each may give one unit),
    targets = live members at <= lmax - 2. Dinic rounds (BFS layers, blocking flow along
    layer + 1 arcs with current-arc pointers) move units along shortest paths. A member on a
    path gives one planned unit of the class it is left by and gets one of the class it is
    reached by, so only the two ends change load. When no target is reachable, everything
    reached from the top level is final: that set is closed under reachability (its members'
    plans no longer change), so it is peeled off and the next level starts.
    Givers are tried in (held ascending, index descending) order, so the +1 levels stay with
    the members holding the most (the homogeneous rule)."""
    cdef int64_t sumS = coff[K]
    cdef int32_t* mptr = <int32_t*>_alloc(ar, (M + 1) * sizeof(int32_t), True)
    cdef int32_t* mfill = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* adj_c = <int32_t*>_alloc(ar, sumS * sizeof(int32_t), False)
    cdef int32_t* adj_j = <int32_t*>_alloc(ar, sumS * sizeof(int32_t), False)
    cdef uint8_t* alive = <uint8_t*>_alloc(ar, M, True)
    cdef int32_t* vm = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* vc = <int32_t*>_alloc(ar, K * sizeof(int32_t), False)
    cdef int32_t* queue = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* give = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)   # giver order
    if (mptr == NULL or mfill == NULL or adj_c == NULL or adj_j == NULL or alive == NULL
            or vm == NULL or vc == NULL or queue == NULL or give == NULL):
        return RC_NOMEM
    cdef int32_t c, m, v, j, a, lmax, qh, qt, n_alive = 0, maxheld = 0, i
    cdef int64_t S, e
    cdef const int32_t* ms
    # member -> (class, position in class) adjacency
    for c in range(K):
        ms = cms[c]
        for j in range(order[c].cnt):
            mptr[ms[j] + 1] += 1
    for m in range(M):
        mptr[m + 1] += mptr[m]
        mfill[m] = mptr[m]
        vm[m] = -1
        if mptr[m + 1] > mptr[m]:
            alive[m] = 1
            n_alive += 1
        if held[m] > maxheld:
            maxheld = held[m]
    for c in range(K):
        vc[c] = -1
        ms = cms[c]
        for j in range(order[c].cnt):
            m = ms[j]
            adj_c[mfill[m]] = c
            adj_j[mfill[m]] = j
            mfill[m] += 1
    # giver order by a counting sort on held (ascending), index descending within a level
    cdef int32_t* cnt = <int32_t*>_alloc(ar, (maxheld + 2) * sizeof(int32_t), True)
    if cnt == NULL:
        return RC_NOMEM
    for m in range(M):
        cnt[held[m] + 1] += 1
    for v in range(maxheld + 1):
        cnt[v + 1] += cnt[v]
    m = M - 1
    while m >= 0:
        give[cnt[held[m]]] = m
        cnt[held[m]] += 1
        m -= 1
    cdef int32_t* src = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)
    cdef int32_t* mp = <int32_t*>_alloc(ar, M * sizeof(int32_t), False)     # current arcs
    cdef int32_t* cp = <int32_t*>_alloc(ar, K * sizeof(int32_t), False)
    cdef int32_t* stk_m = <int32_t*>_alloc(ar, (M + 1) * sizeof(int32_t), False)
    cdef int32_t* stk_c = <int32_t*>_alloc(ar, (M + 1) * sizeof(int32_t), False)
    cdef int32_t* stk_jg = <int32_t*>_alloc(ar, (M + 1) * sizeof(int32_t), False)
    cdef int32_t* stk_jr = <int32_t*>_alloc(ar, (M + 1) * sizeof(int32_t), False)
    if (src == NULL or mp == NULL or cp == NULL or stk_m == NULL or stk_c == NULL
            or stk_jg == NULL or stk_jr == NULL):
        return RC_NOMEM
    cdef int32_t nsrc, si, s, tlayer, depth, da, ev
    cdef bint found, advanced
    # dist = vm (member BFS layer, -1 unreached/dead), cl = vc (layer a class was entered at)
    cdef int32_t* dist = vm
    cdef int32_t* cl = vc
    while n_alive > 0:
        # level phase: sources = live members at the top level lmax, in giver order;
        # targets = live members at <= lmax - 2. Each source can give one unit (to lmax - 1).
        lmax = -1
        for m in range(M):
            if alive[m] and load[m] > lmax:
                lmax = load[m]
        nsrc = 0
        for v in range(M):
            m = give[v]
            if alive[m] and load[m] == lmax:
                src[nsrc] = m
                nsrc += 1
        while True:
            # ---- BFS layers from the remaining sources (Dinic): member -> class needs a
            # planned unit of the class (x > 0), class -> any live subscriber
            for m in range(M):
                dist[m] = -1
            for c in range(K):
                cl[c] = -1
            qt = 0
            for si in range(nsrc):
                a = src[si]
                if load[a] == lmax:
                    dist[a] = 0
                    queue[qt] = a
                    qt += 1
            if qt == 0:
                break                          # every source gave: next level
            qh = 0
            tlayer = INT32_MAX
            found = False
            while qh < qt:
                a = queue[qh]
                qh += 1
                da = dist[a]
                if da >= tlayer or (da > 0 and load[a] <= lmax - 2):
                    continue                   # beyond the nearest targets / a target
                for e in range(mptr[a], mptr[a + 1]):
                    c = adj_c[e]
                    if cl[c] >= 0 or xplan[coff[c] + adj_j[e]] == 0:
                        continue
                    cl[c] = da
                    ms = cms[c]
                    S = order[c].cnt
                    for j in range(S):
                        v = ms[j]
                        if dist[v] >= 0 or not alive[v]:
                            continue
                        dist[v] = da + 1
                        queue[qt] = v
                        qt += 1
                        if load[v] <= lmax - 2 and da + 1 < tlayer:
                            tlayer = da + 1
                            found = True
            if not found:
                # nothing at <= lmax - 2 is reachable from the top level: all reached members
                # are final (the set is closed under reachability). Peel; next level.
                for qh in range(qt):
                    alive[queue[qh]] = 0
                n_alive -= qt
                break
            # ---- blocking flow: sources in giver order, one unit each, along layer + 1 arcs
            for m in range(M):
                mp[m] = mptr[m]
            for c in range(K):
                cp[c] = 0
            for si in range(nsrc):
                s = src[si]
                if load[s] != lmax or dist[s] != 0:
                    continue
                depth = 0
                stk_m[0] = s
                while depth >= 0:
                    a = stk_m[depth]
                    if depth > 0 and load[a] <= lmax - 2:
                        # reached a target: shift one unit along the stack
                        for i in range(1, depth + 1):
                            c = stk_c[i]
                            xplan[coff[c] + stk_jg[i]] -= 1
                            xplan[coff[c] + stk_jr[i]] += 1
                        load[a] += 1
                        load[s] -= 1
                        break
                    advanced = False
                    da = dist[a]
                    while mp[a] < mptr[a + 1]:
                        ev = mp[a]
                        c = adj_c[ev]
                        if cl[c] == da and xplan[coff[c] + adj_j[ev]] > 0:
                            ms = cms[c]
                            S = order[c].cnt
                            while cp[c] < S:
                                v = ms[cp[c]]
                                if dist[v] == da + 1:
                                    depth += 1
                                    stk_m[depth] = v
                                    stk_c[depth] = c
                                    stk_jg[depth] = adj_j[ev]
                                    stk_jr[depth] = cp[c]
                                    advanced = True
                                    break
                                cp[c] += 1
                            if advanced:
                                break
                        mp[a] += 1
                    if not advanced:
                        dist[a] = -1           # dead end for the rest of this round
                        depth -= 1
    return RC_OK


cdef int _uniform(int32_t n_topics, int32_t n_members, const int32_t* ppt, const int64_t* base,
                  const int64_t* sptr, const int32_t* subs, int64_t n_subs, const int32_t* cur,
                  int32_t* out, bint force_heterogeneous) noexcept nogil:
    cdef Arena ar
    cdef uint8_t* in0 = NULL
    cdef bint homogeneous = False
    cdef int64_t u
    cdef int rc = _check_subscriptions(n_members, n_topics, sptr, subs, n_subs)
    if rc != RC_OK:
        return rc
    if n_members == 0:
        for u in range(base[n_topics]):
            out[u] = -1
        return RC_OK
    ar.n = 0
    rc = _is_homogeneous(&ar, n_members, n_topics, ppt, sptr, subs, &in0, &homogeneous)
    if rc == RC_OK:
        if homogeneous and not force_heterogeneous:
            rc = _homogeneous(&ar, n_topics, n_members, ppt, base, in0, cur, out)
        else:
            rc = _heterogeneous(&ar, n_topics, n_members, ppt, base, sptr, subs, cur, out)
    _free_all(&ar)
    return rc


# ------------------------------------------------------------------------------ range

# The loops below move whole 16-byte blocks through memcpy of a constant size: compilers turn
# each into one vector load or store (SSE2 / NEON) even at -O2, where GCC would leave the plain
# element-by-element loops scalar.

cdef inline void _fill(int32_t* out, int64_t n, int32_t v) noexcept nogil:
    cdef int32_t p[4]
    cdef int64_t i = 0
    if n < 4:
        while i < n:
            out[i] = v
            i += 1
        return
    p[0] = v
    p[1] = v
    p[2] = v
    p[3] = v
    while i + 4 <= n:
        memcpy(&out[i], p, 16)
        i += 4
    memcpy(&out[n - 4], p, 16)          # the tail, overlapping the last full block


cdef inline void _iota(int32_t* out, int32_t v, int64_t n) noexcept nogil:
    # out[j] = v + j
    cdef int32_t p[4]
    cdef int64_t i = 0
    p[0] = v
    p[1] = v + 1
    p[2] = v + 2
    p[3] = v + 3
    while i + 4 <= n:
        memcpy(&out[i], p, 16)
        p[0] += 4
        p[1] += 4
        p[2] += 4
        p[3] += 4
        i += 4
    while i < n:
        out[i] = <int32_t>(v + i)
        i += 1


cdef inline int64_t _deal(int32_t* out, int32_t m, int64_t count, int64_t width) noexcept nogil:
    # members m, m+1, ... (count of them) take width consecutive units each
    cdef int32_t p[4]
    cdef int64_t j, i
    if count <= 0:
        return 0
    if width == 1:                      # one each (more members than partitions)
        _iota(out, m, count)
        return count
    for j in range(count - 1):
        # whole 16-byte stores; up to 3 values spill into the next member's units, which
        # that member rewrites next
        p[0] = <int32_t>(m + j)
        p[1] = p[0]
        p[2] = p[0]
        p[3] = p[0]
        i = 0
        while i < width:
            memcpy(&out[j * width + i], p, 16)
            i += 4
    _fill(&out[(count - 1) * width], width, <int32_t>(m + count - 1))   # the last ends exactly
    return count * width


cdef enum:
    RANGE_BLOCK = 1024                  # most rows compared by one memcmp while finding runs


cdef inline bint _repeats(const int32_t* subs, const int64_t* sptr, int32_t a, int32_t b,
                          int64_t n0) noexcept nogil:
    # rows a..b-1 (n0 entries each, like row a - 1) each equal the row before them
    return n0 == 0 or memcmp(&subs[sptr[a]], &subs[sptr[a] - n0],
                             <size_t>((b - a) * n0) * sizeof(int32_t)) == 0


cdef int _range(int32_t n_topics, int32_t n_members, const int32_t* ppt, const int64_t* base,
                const int64_t* sptr, const int32_t* subs, int64_t n_subs,
                const uint8_t* static_member, int32_t* out) noexcept nogil:
    # Member m's rank among topic t's subscribers is the number of earlier subscribers (statics
    # first); rank k takes partitions [k*q + min(k, r), +q + (k < r)). So no topic -> members
    # table is needed: count subscribers per topic, then let every member write its own
    # ranges. Consecutive members with byte-identical rows (a homogeneous group is one such
    # run; Kafka's bucketed groups are five) are handled as one run: one memcmp pass over the
    # subscriptions, then per run one read of its row and sequential writes of the output.
    cdef int32_t T = n_topics, M = n_members
    cdef int32_t t, m, m0, m1, g, nr = 0, L, ls, hi, mid
    cdef int64_t e, n0, P, S, q, r, k, pos, nn
    cdef int32_t c
    cdef int64_t lastP, lastS, lastk, lastpos = 0, lastn = 0
    cdef int32_t* seen
    cdef int32_t* cnt
    cdef int32_t* cst
    cdef int32_t* nxt
    cdef int32_t* nst
    cdef int32_t* runs
    cdef void* block
    if sptr[0] != 0 or sptr[M] != n_subs:
        return RC_INDPTR
    for m in range(M):
        if sptr[m + 1] < sptr[m]:
            return RC_INDPTR
    # seen, cnt, cst, nxt, nst: T each; runs: M + 1
    block = malloc((5 * <size_t>T + <size_t>M + 1) * sizeof(int32_t))
    if block == NULL:
        return RC_NOMEM
    seen = <int32_t*>block
    cnt = seen + T
    cst = cnt + T
    nxt = cst + T
    nst = nxt + T
    runs = nst + T
    m = 0
    while m < M:                                    # runs of identical rows
        runs[nr] = m
        nr += 1
        n0 = sptr[m + 1] - sptr[m]
        m += 1
        c = 8
        while m < M:
            # the next rows with n0 entries each (at most c): they all repeat row m - 1 (so
            # the run's first row) iff the block from row m - 1 on has period n0, which one
            # memcmp of the block against itself shifted by a row tells. Blocks double while
            # they match (a homogeneous group is a handful of memcmp calls), and a block that
            # does not is bisected down to its first differing row.
            hi = m
            while hi - m < c and hi < M and sptr[hi + 1] - sptr[hi] == n0:
                hi += 1
            if hi == m:
                break
            if _repeats(subs, sptr, m, hi, n0):
                m = hi
                c = c * 2 if c < RANGE_BLOCK else c
                continue
            while hi - m > 1:                       # rows before m repeat; one in [m, hi) not
                mid = m + (hi - m) // 2
                if _repeats(subs, sptr, m, mid, n0):
                    m = mid
                else:
                    hi = mid
            break
    runs[nr] = M
    for t in range(T):
        seen[t] = -1
        cnt[t] = 0
        cst[t] = 0
        nxt[t] = 0
        nst[t] = 0
    for g in range(nr):                             # subscribers (and statics) per topic
        m0 = runs[g]
        L = runs[g + 1] - m0
        ls = 0
        if static_member != NULL:
            for m in range(m0, m0 + L):
                ls += static_member[m] != 0
        for e in range(sptr[m0], sptr[m0 + 1]):
            t = subs[e]
            if <uint32_t>t >= <uint32_t>T:          # identical rows are valid with their run's
                free(block)
                return RC_TOPIC
            if seen[t] != g:                        # a topic listed twice counts once
                seen[t] = g
                cnt[t] += L
                cst[t] += ls
    for t in range(T):
        if cnt[t] == 0:
            _fill(&out[base[t]], ppt[t], -1)
        seen[t] = -1
    for g in range(nr):
        m0 = runs[g]
        m1 = runs[g + 1]
        lastP = lastS = lastk = -1
        for e in range(sptr[m0], sptr[m0 + 1]):
            t = subs[e]
            if seen[t] == g:
                continue
            seen[t] = g
            P = ppt[t]
            S = cnt[t]
            q = P // S
            r = P % S
            if static_member == NULL:
                # the run's members hold consecutive ranks: one contiguous stretch of the
                # topic; its first nn members (ranks below r) take q + 1 units, the rest q
                k = nxt[t]
                L = m1 - m0
                nxt[t] += L
                pos = base[t] + k * q + (k if k < r else r)
                if P == lastP and S == lastS and k == lastk:
                    # same stretch as the run's previous topic (co-partitioned topics, so
                    # every topic of a homogeneous group with equal partition counts): copy it
                    memcpy(&out[pos], &out[lastpos], <size_t>lastn * sizeof(int32_t))
                    continue
                nn = r - k
                nn = 0 if nn < 0 else (L if nn > L else nn)
                lastn = _deal(&out[pos], m0, nn, q + 1)
                if q > 0:
                    lastn += _deal(&out[pos + lastn], m0 + <int32_t>nn, L - nn, q)
                lastP, lastS, lastk, lastpos = P, S, k, pos
            else:
                for m in range(m0, m1):
                    if static_member[m] != 0:
                        k = nst[t]
                        nst[t] += 1
                    else:
                        k = cst[t] + nxt[t]
                        nxt[t] += 1
                    _fill(&out[base[t] + k * q + (k if k < r else r)], q + (k < r), m)
    free(block)
    return RC_OK


# ------------------------------------------------------------------------------ Python entry

cdef _raise(int rc):
    if rc == RC_OK:
        return
    if rc == RC_NOMEM:
        raise MemoryError("assign_uniform: out of memory")
    if rc == RC_INDPTR:
        raise ValueError("subscriptions_indptr must start at 0, be non-decreasing and end at "
                         "len(subscriptions)")
    if rc == RC_TOPIC:
        raise ValueError("subscriptions holds a topic index outside [0, n_topics)")
    if rc == RC_PARTITIONS:
        raise ValueError("partitions_per_topic holds a negative count")
    if rc == RC_TOO_MANY_UNITS:
        raise ValueError("more than 2**31 - 1 units (partitions) in total")
    raise RuntimeError("assign_uniform: error %d" % rc)


cdef object _base_array(const int32_t[::1] ppt):
    cdef int32_t T = <int32_t>ppt.shape[0]
    base = np.empty(T + 1, dtype=np.int64)
    cdef int64_t[::1] bv = base
    cdef int rc
    with nogil:
        rc = _bases(T, &ppt[0] if T > 0 else NULL, &bv[0])
    _raise(rc)
    return base


def topic_base(const int32_t[::1] partitions_per_topic):
    """int64[n_topics + 1]: first unit of each topic; the last entry is the unit count."""
    return _base_array(partitions_per_topic)


cdef int32_t _n_members(const int64_t[::1] subscriptions_indptr) except -1:
    if subscriptions_indptr.shape[0] < 1:
        raise ValueError("subscriptions_indptr needs n_members + 1 >= 1 entries")
    if subscriptions_indptr.shape[0] - 1 > INT32_MAX:
        raise ValueError("too many members")
    return <int32_t>(subscriptions_indptr.shape[0] - 1)


cdef struct KernelArgs:
    # The inputs every kernel takes, as raw pointers (NULL for an empty array).
    int32_t T
    int32_t M
    int64_t N
    int64_t E
    const int32_t* ppt
    const int64_t* base
    const int64_t* sptr
    const int32_t* subs
    int32_t* out


cdef tuple _kernel_args(const int32_t[::1] ppt, const int64_t[::1] sptr,
                        const int32_t[::1] subs, KernelArgs* a):
    # Checks uniform's inputs and fills a (range_ reads its arrays itself). Returns (base, out):
    # the arrays behind a.base and a.out, which the caller keeps alive while the kernel runs.
    a.T = <int32_t>ppt.shape[0]
    a.M = _n_members(sptr)
    base = _base_array(ppt)
    cdef const int64_t[::1] bv = base
    a.N = bv[a.T]
    out = np.empty(a.N, dtype=np.int32)
    cdef int32_t[::1] ov = out
    a.E = subs.shape[0]
    a.ppt = &ppt[0] if a.T > 0 else NULL
    a.base = &bv[0]
    a.sptr = &sptr[0]
    a.subs = &subs[0] if a.E > 0 else NULL
    a.out = &ov[0] if a.N > 0 else NULL
    return base, out


def uniform(const int32_t[::1] partitions_per_topic, const int64_t[::1] subscriptions_indptr,
            const int32_t[::1] subscriptions, const int32_t[::1] current,
            bint force_heterogeneous=False):
    """Kernel of groupcoord.assign.consumer.uniform (arguments already int32/int64, contiguous).

    force_heterogeneous runs the general path on homogeneous input too (tests: both paths must
    agree there)."""
    cdef KernelArgs a
    base, out = _kernel_args(partitions_per_topic, subscriptions_indptr, subscriptions, &a)
    if current.shape[0] != a.N:
        raise ValueError("current has %d units, partitions_per_topic sums to %d"
                         % (current.shape[0], a.N))
    cdef const int32_t* cp = &current[0] if a.N > 0 else NULL
    cdef int rc
    with nogil:
        rc = _uniform(a.T, a.M, a.ppt, a.base, a.sptr, a.subs, a.E, cp, a.out,
                      force_heterogeneous)
    _raise(rc)
    return out


cdef inline bint _ready(object a, int typenum):
    # a 1-D, C-contiguous, aligned, native-order array of typenum's kind and size: usable as is
    if not cnp.PyArray_Check(a):
        return False
    cdef cnp.ndarray arr = <cnp.ndarray>a
    return (cnp.PyArray_NDIM(arr) == 1 and cnp.PyArray_ISCARRAY_RO(arr)
            and cnp.PyArray_ISNOTSWAPPED(arr)
            and cnp.PyArray_EquivTypenums(cnp.PyArray_TYPE(arr), typenum))


def range_(partitions_per_topic, subscriptions_indptr, subscriptions, static_member=None,
           current=None):
    """Kernel of groupcoord.assign.consumer.range_. Takes the arrays without a copy when they
    are already 1-D, C-contiguous int32 / int64 / int32 (static_member: bool or uint8 of
    length n_members, or None); returns None when one is not, for the caller to convert and
    call again. current (an array, or None) is only checked for its length."""
    if not (_ready(partitions_per_topic, cnp.NPY_INT32)
            and _ready(subscriptions_indptr, cnp.NPY_INT64)
            and _ready(subscriptions, cnp.NPY_INT32)
            and (static_member is None or _ready(static_member, cnp.NPY_UINT8)
                 or _ready(static_member, cnp.NPY_BOOL))
            and (current is None or cnp.PyArray_Check(current))):
        return None
    cdef cnp.ndarray ppt = <cnp.ndarray>partitions_per_topic
    cdef cnp.ndarray sip = <cnp.ndarray>subscriptions_indptr
    cdef cnp.ndarray sub = <cnp.ndarray>subscriptions
    cdef int32_t T = <int32_t>cnp.PyArray_DIM(ppt, 0)
    cdef int64_t E = cnp.PyArray_DIM(sub, 0)
    if cnp.PyArray_DIM(sip, 0) < 1:
        raise ValueError("subscriptions_indptr needs n_members + 1 >= 1 entries")
    if cnp.PyArray_DIM(sip, 0) - 1 > INT32_MAX:
        raise ValueError("too many members")
    cdef int32_t M = <int32_t>(cnp.PyArray_DIM(sip, 0) - 1)
    cdef const uint8_t* stp = NULL
    if static_member is not None:
        if cnp.PyArray_DIM(<cnp.ndarray>static_member, 0) != M:
            raise ValueError("static_member has %d entries for %d members"
                             % (cnp.PyArray_DIM(<cnp.ndarray>static_member, 0), M))
        stp = <const uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>static_member)
    cdef int64_t base_small[65]
    cdef int64_t* base = base_small
    if T >= 65:
        base = <int64_t*>malloc((T + 1) * sizeof(int64_t))
        if base == NULL:
            raise MemoryError("assign_uniform: out of memory")
    cdef const int32_t* pp = <const int32_t*>cnp.PyArray_DATA(ppt)
    cdef const int64_t* sp = <const int64_t*>cnp.PyArray_DATA(sip)
    cdef const int32_t* su = <const int32_t*>cnp.PyArray_DATA(sub)
    cdef int32_t* op
    cdef int64_t N
    cdef cnp.npy_intp dims[1]
    cdef int rc
    try:
        rc = _bases(T, pp, base)
        _raise(rc)
        N = base[T]
        if current is not None and (cnp.PyArray_NDIM(<cnp.ndarray>current) != 1
                                    or cnp.PyArray_DIM(<cnp.ndarray>current, 0) != N):
            raise ValueError("current must have shape (%d,), got %s" % (N, current.shape))
        dims[0] = <cnp.npy_intp>N
        out = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT32, 0)
        op = <int32_t*>cnp.PyArray_DATA(<cnp.ndarray>out)
        if N + E > 65536:
            with nogil:
                rc = _range(T, M, pp, base, sp, su, E, stp, op)
        else:       # a small group takes a few us: releasing the GIL would cost more than that
            rc = _range(T, M, pp, base, sp, su, E, stp, op)
        _raise(rc)
        return out
    finally:
        if base != base_small:
            free(base)
