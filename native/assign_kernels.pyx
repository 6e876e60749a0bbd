# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Owner-array kernels: CSR views, diff, validation and KIP-848 reconciliation.
#
# Data model (docs/assign.md): owner[unit] = member index or -1, int32; per-member lists are
# CSR (indptr int64[n_members + 1], units int32), each member's units ascending.
# Many groups at once: renumber units and members of many groups into one global range (unit and
# member offsets per group); every kernel here is then one call over all groups.
import numpy as np
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef enum:
    ST_STABLE = 0
    ST_UNREVOKED = 1
    ST_UNRELEASED = 2
    V_UNASSIGNED = 0        # violation kinds of validate()
    V_DUPLICATE = 1
    V_OUT_OF_RANGE = 2
    V_NOT_MEMBER = 3

STABLE, UNREVOKED, UNRELEASED = ST_STABLE, ST_UNREVOKED, ST_UNRELEASED
UNASSIGNED, DUPLICATE, OUT_OF_RANGE, NOT_MEMBER = (V_UNASSIGNED, V_DUPLICATE, V_OUT_OF_RANGE,
                                                   V_NOT_MEMBER)


cdef int _check_owners(const int32_t[::1] owner, Py_ssize_t n_members) except -1:
    cdef Py_ssize_t u, n = owner.shape[0], bad = -1
    with nogil:
        for u in range(n):
            if owner[u] < -1 or owner[u] >= n_members:
                bad = u
                break
    if bad >= 0:
        raise ValueError("owner[%d] = %d is neither -1 nor a member index < %d"
                         % (bad, owner[bad], n_members))
    return 0


def members_csr(const int32_t[::1] owner not None, Py_ssize_t n_members):
    """Per-member unit lists of an owner array: (indptr int64[n_members+1], units int32),
    each member's units ascending (a stable counting sort, O(units + members))."""
    _check_owners(owner, n_members)
    cdef Py_ssize_t n = owner.shape[0], u, m
    indptr_a = np.zeros(n_members + 1, dtype=np.int64)
    cdef int64_t[::1] ip = indptr_a
    with nogil:
        for u in range(n):
            if owner[u] >= 0:
                ip[owner[u] + 1] += 1
        for m in range(n_members):
            ip[m + 1] += ip[m]
    units_a = np.empty(ip[n_members], dtype=np.int32)
    cdef int32_t[::1] out = units_a
    cursor_a = indptr_a[:-1].copy()
    cdef int64_t[::1] cur = cursor_a
    with nogil:
        for u in range(n):
            m = owner[u]
            if m >= 0:
                out[cur[m]] = <int32_t>u
                cur[m] += 1
    return indptr_a, units_a


def diff(const int32_t[::1] current not None, const int32_t[::1] target not None,
         Py_ssize_t n_members):
    """Per member: units to revoke (current owner m, target not m) and units to assign
    (target m, current not m), as two CSRs: (revoke_indptr, revoke_units, assign_indptr,
    assign_units). Unchanged units are only compared, never counted: per-member kept counts
    are derived on demand by the Python wrapper, so the pass over unchanged units is a pure
    sequential read."""
    if current.shape[0] != target.shape[0]:
        raise ValueError("current and target have %d and %d units"
                         % (current.shape[0], target.shape[0]))
    cdef Py_ssize_t n = current.shape[0], u, m
    cdef int64_t k = 0, j
    cdef int32_t c, t
    cdef bint bad = False
    rip_a = np.zeros(n_members + 1, dtype=np.int64)
    aip_a = np.zeros(n_members + 1, dtype=np.int64)
    changed_a = np.empty(n, dtype=np.int32)     # touched only up to the number changed
    cdef int64_t[::1] rip = rip_a, aip = aip_a
    cdef int32_t[::1] changed = changed_a
    with nogil:
        # Pass 1 (sequential over both arrays): count, and remember the changed units so the
        # fill pass visits only those.
        for u in range(n):
            c = current[u]
            t = target[u]
            # One unsigned compare checks -1 <= x < n_members (x + 1 as unsigned).
            if <size_t>(c + 1) > <size_t>n_members or <size_t>(t + 1) > <size_t>n_members:
                bad = True
                break
            if c != t:
                changed[k] = <int32_t>u
                k += 1
                if c >= 0:
                    rip[c + 1] += 1
                if t >= 0:
                    aip[t + 1] += 1
        if not bad:
            for m in range(n_members):
                rip[m + 1] += rip[m]
                aip[m + 1] += aip[m]
    if bad:
        _check_owners(current, n_members)
        _check_owners(target, n_members)
    rev_a = np.empty(rip[n_members], dtype=np.int32)
    asg_a = np.empty(aip[n_members], dtype=np.int32)
    rcur_a = rip_a[:-1].copy()
    acur_a = aip_a[:-1].copy()
    cdef int32_t[::1] rev = rev_a, asg = asg_a
    cdef int64_t[::1] rcur = rcur_a, acur = acur_a
    with nogil:
        for j in range(k):          # ascending units, so each member's lists stay sorted
            u = changed[j]
            c = current[u]
            t = target[u]
            if c >= 0:
                rev[rcur[c]] = <int32_t>u
                rcur[c] += 1
            if t >= 0:
                asg[acur[t]] = <int32_t>u
                acur[t] += 1
    return rip_a, rev_a, aip_a, asg_a


cdef inline void _report(int64_t[:, ::1] viol, int64_t* k, int64_t[::1] counts, int kind,
                         int64_t unit, int64_t member) noexcept nogil:
    # Count every violation; keep the first viol.shape[0] rows (other member filled later).
    counts[kind] += 1
    if k[0] < viol.shape[0]:
        viol[k[0], 0] = kind
        viol[k[0], 1] = unit
        viol[k[0], 2] = member
        k[0] += 1


def validate(const int64_t[::1] indptr not None, const int32_t[::1] units not None,
             Py_ssize_t n_units, const uint8_t[::1] alive=None,
             const uint8_t[::1] required=None, Py_ssize_t max_violations=100,
             bint want_owner=True):
    """Check an installed assignment (per-member CSR) against the seed's invariants: every
    required unit assigned, no unit assigned twice, every owner a live member, every unit in
    range. Returns (owner int32[n_units], counts int64[4], violations int64[k, 4]) where a
    violation row is (kind, unit, member, other member or -1) and counts[kind] counts every
    violation of that kind (only the first max_violations rows are kept). Duplicates are found
    with a bitset of the units seen (n_units / 8 bytes, cache-resident); the owner array is
    only written when want_owner (else None is returned for it), and the first claim of a
    duplicated unit's other member is then looked up in a second, rare pass."""
    cdef Py_ssize_t n_members = indptr.shape[0] - 1, m, u
    cdef int64_t i, k = 0
    cdef int32_t x
    if n_members < 0:
        raise ValueError("indptr must have at least one element")
    if alive is not None and alive.shape[0] != n_members:
        raise ValueError("alive has %d entries for %d members" % (alive.shape[0], n_members))
    if required is not None and required.shape[0] != n_units:
        raise ValueError("required has %d entries for %d units" % (required.shape[0], n_units))
    if indptr[0] != 0 or indptr[n_members] != units.shape[0]:
        raise ValueError("indptr does not span units")
    for m in range(n_members):
        if indptr[m + 1] < indptr[m]:
            raise ValueError("indptr decreases at member %d" % m)
    owner_a = np.full(n_units if want_owner else 0, -1, dtype=np.int32)
    seen_a = np.zeros((n_units + 63) // 64, dtype=np.uint64)
    counts_a = np.zeros(4, dtype=np.int64)
    viol_a = np.full((max_violations, 4), -1, dtype=np.int64)
    cdef int32_t[::1] owner = owner_a
    cdef uint64_t[::1] seen = seen_a
    cdef uint64_t bit
    cdef int64_t[::1] counts = counts_a
    cdef int64_t[:, ::1] viol = viol_a
    cdef bint has_alive = alive is not None, has_required = required is not None
    with nogil:
        for m in range(n_members):
            if has_alive and not alive[m] and indptr[m + 1] > indptr[m]:
                _report(viol, &k, counts, V_NOT_MEMBER, -1, m)
            for i in range(indptr[m], indptr[m + 1]):
                x = units[i]
                if x < 0 or x >= n_units:
                    _report(viol, &k, counts, V_OUT_OF_RANGE, x, m)
                else:
                    bit = (<uint64_t>1) << (x & 63)
                    if seen[x >> 6] & bit:
                        _report(viol, &k, counts, V_DUPLICATE, x, m)
                    else:
                        seen[x >> 6] |= bit
                        if want_owner:
                            owner[x] = <int32_t>m
        for u in range(n_units):
            if not (seen[u >> 6] & ((<uint64_t>1) << (u & 63))) and (
                    not has_required or required[u]):
                _report(viol, &k, counts, V_UNASSIGNED, u, -1)
    if counts[V_DUPLICATE]:
        _first_claims(indptr, units, n_units, viol_a[:k])
    return (owner_a if want_owner else None), counts_a, viol_a[:k].copy()


cdef void _first_claims(const int64_t[::1] indptr, const int32_t[::1] units, Py_ssize_t n_units,
                        int64_t[:, ::1] viol):
    # Rare path: fill in, for each reported duplicate, the member that claimed the unit first.
    cdef dict first = {}
    cdef Py_ssize_t m, r
    cdef int64_t i
    cdef set wanted = {viol[r, 1] for r in range(viol.shape[0]) if viol[r, 0] == V_DUPLICATE}
    for m in range(indptr.shape[0] - 1):
        for i in range(indptr[m], indptr[m + 1]):
            if units[i] in wanted and units[i] not in first:
                first[units[i]] = m
    for r in range(viol.shape[0]):
        if viol[r, 0] == V_DUPLICATE:
            viol[r, 3] = first[viol[r, 1]]


def reconcile(const int64_t[::1] owned_indptr not None, const int32_t[::1] owned not None,
              const int64_t[::1] target_indptr not None, const int32_t[::1] target not None,
              const int32_t[::1] owner_now not None):
    """KIP-848 revoke-before-assign reconciliation for every member at once.

    owned: what each member holds now (CSR, ascending); target: its target assignment (CSR,
    ascending); owner_now[unit]: the member whose CURRENT assignment holds the unit, -1 none.
    For each member m:
      - units owned but not in the target must be revoked first: the next assignment is
        owned & target and the state UNREVOKED (the epoch does not advance);
      - otherwise the next assignment is the target minus units still held by another member
        (owner_now not in {-1, m}); state UNRELEASED if any were withheld, else STABLE.
    Returns (next_indptr, next_units, state int8[n_members], withheld int64[n_members])."""
    cdef Py_ssize_t n_members = owned_indptr.shape[0] - 1, m
    if target_indptr.shape[0] - 1 != n_members:
        raise ValueError("owned and target describe %d and %d members"
                         % (n_members, target_indptr.shape[0] - 1))
    cdef Py_ssize_t n_units = owner_now.shape[0]
    cdef int64_t i, j, ie, je, o = 0, cap = owned.shape[0] + target.shape[0]
    cdef int32_t a, b, x
    cdef bint revoke
    nip_a = np.zeros(n_members + 1, dtype=np.int64)
    out_a = np.empty(cap, dtype=np.int32)
    state_a = np.zeros(n_members, dtype=np.int8)
    wh_a = np.zeros(n_members, dtype=np.int64)
    cdef int64_t[::1] nip = nip_a, wh = wh_a
    cdef int32_t[::1] out = out_a
    cdef signed char[::1] state = state_a
    for i in range(target.shape[0]):
        if target[i] < 0 or target[i] >= n_units:
            raise ValueError("target unit %d out of range" % target[i])
    with nogil:
        for m in range(n_members):
            i, ie = owned_indptr[m], owned_indptr[m + 1]
            j, je = target_indptr[m], target_indptr[m + 1]
            # Is any owned unit missing from the target? (sorted merge)
            revoke = False
            while i < ie:
                a = owned[i]
                while j < je and target[j] < a:
                    j += 1
                if j >= je or target[j] != a:
                    revoke = True
                    break
                i += 1
            i, j = owned_indptr[m], target_indptr[m]
            if revoke:
                state[m] = ST_UNREVOKED
                while i < ie and j < je:          # owned & target
                    a = owned[i]
                    b = target[j]
                    if a == b:
                        out[o] = a
                        o += 1
                        i += 1
                        j += 1
                    elif a < b:
                        i += 1
                    else:
                        j += 1
            else:
                for j in range(target_indptr[m], je):
                    x = target[j]
                    if owner_now[x] != -1 and owner_now[x] != m:
                        wh[m] += 1                # still held elsewhere: not yet released
                    else:
                        out[o] = x
                        o += 1
                state[m] = ST_UNRELEASED if wh[m] > 0 else ST_STABLE
            nip[m + 1] = o
    return nip_a, out_a[:o].copy(), state_a, wh_a
