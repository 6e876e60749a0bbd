"""A simple, obviously correct pure-Python model of the owner-array kernels, used only as an
oracle for the property tests (the product has one implementation: the native kernels)."""


def members(owner, n_members):
    out = [[] for _ in range(n_members)]
    for u, m in enumerate(owner):
        if m >= 0:
            out[m].append(u)
    return out


def diff(current, target, n_members):
    kept = [0] * n_members
    revoke = [[] for _ in range(n_members)]
    assign = [[] for _ in range(n_members)]
    for u, (c, t) in enumerate(zip(current, target)):
        if c == t and c >= 0:
            kept[c] += 1
        if c != t and c >= 0:
            revoke[c].append(u)
        if c != t and t >= 0:
            assign[t].append(u)
    return kept, revoke, assign


def validate(lists, n_units, alive=None, required=None):
    """-> (owner, list of (kind, unit, member, other)), one entry per violation"""
    owner = [-1] * n_units
    found = []
    for m, units in enumerate(lists):
        if alive is not None and not alive[m] and units:
            found.append(("NOT_MEMBER", -1, m, -1))
        for u in units:
            if not 0 <= u < n_units:
                found.append(("OUT_OF_RANGE", u, m, -1))
            elif owner[u] != -1:
                found.append(("DUPLICATE", u, m, owner[u]))
            else:
                owner[u] = m
    for u in range(n_units):
        if owner[u] == -1 and (required is None or required[u]):
            found.append(("UNASSIGNED", u, -1, -1))
    return owner, found


def reconcile(owned, target, owner_now, m):
    """One member's next assignment and state (KIP-848 revoke-before-assign)."""
    owned, target = set(owned), set(target)
    if owned - target:
        return sorted(owned & target), "UNREVOKED"
    nxt = sorted(u for u in target if owner_now[u] in (-1, m))
    return nxt, ("UNRELEASED" if len(nxt) < len(target) else "STABLE")
