"""Client-side assignors of classic groups: what the elected leader member runs between
JoinGroup and SyncGroup (Kafka's ``range``, ``roundrobin``, ``sticky`` and
``cooperative-sticky``), over integer arrays (docs/assign.md). The kernels are in
native/assign_classic.pyx; this module validates inputs and converts to and from the embedded
ConsumerProtocol formats.

Array inputs (members are indices 0..M-1 in tie-break order, topics 0..T-1 in sorted name
order, ``unit = topic_base[t] + partition`` with ``topic_base = concat([0],
cumsum(partitions_per_topic))``):

* ``partitions_per_topic``  int (T,)     partition count of each topic
* ``subs_indptr``, ``subs``  CSR          member m subscribes to ``subs[subs_indptr[m]:
  subs_indptr[m+1]]`` (topic indices; duplicates count once, order irrelevant)
* ``owned_indptr``, ``owned`` CSR         units member m claims it owns (sticky flavours)
* ``generation``            int (M,)      each member's reported generation, -1 = unknown

Decisions (Kafka's semantics where it has them; see also tests/test_assign_classic.py):

* **KIP-341 claims** follow Kafka's AbstractStickyAssignor: only members reporting the
  highest generation in the group have their claims honoured; claims of members reporting an
  older generation (or -1 while someone reports a real one) do not count for stickiness -- the
  unit is treated as unowned. In cooperative mode such a unit, when no current-generation
  member claims it and it goes to someone other than its stale claimant, is still *withheld*
  for one round (Kafka's leader gives it out at once): a member whose last JoinGroup answer was
  lost reports the generation before and may still run it (found by the simulation,
  docs/simulation.md finding 3). A unit claimed by two members of the highest generation is a
  conflict: neither keeps it, it is reassigned like a free unit, and in cooperative mode it is
  withheld for one round (counted as moved), so both claimants revoke it first.
* **Claims of units the claimant is not subscribed to** (its subscription changed) are not
  kept; if someone else gets the unit, it is withheld this round like any other move.
* **Balance.** Homogeneous subscriptions (every member with a non-empty subscription has the
  same topic set): counts are ``base`` or ``base + 1``, and the number of moved units is the
  minimum possible (the ``+1`` slots go first to members already owning more than ``base``, in
  member order). Heterogeneous: counts are *decreasingly minimal* -- no chain of moves along
  subscriptions can take a unit from a member holding k units to one holding k - 2 or fewer
  (Kafka's own balance criterion, extended to chains: the lexicographic optimum), reached by
  max-flows over (member, topic) counts; then the moves are made minimal among those
  balanced assignments by cancelling negative cycles of the residual graph (min-cost-flow
  optimality; the tests check both against an exact min-cost-flow oracle).
* **Which units stay, which free units go where**: a member keeping fewer units than it
  claimed keeps its first claims in the order it listed them (per topic in the heterogeneous
  case); free units are dealt round-robin (ascending unit order) to the members still short,
  in member order. Everything is deterministic for a given input.
* **Cooperative withholding (KIP-429)**: ``target_owner`` is ``final_owner`` with every unit
  whose final owner differs from its valid claimant (or that was in conflict) set to -1; units
  that nobody validly claimed are given immediately.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from groupcoord._native import assign_classic as _k
from groupcoord.protocol import embedded
from groupcoord.protocol.messages import (ConsumerProtocolAssignment,
                                          ConsumerProtocolAssignmentTopicPartition,
                                          ConsumerProtocolSubscription)

__all__ = [
    "range_assign", "roundrobin", "cooperative_sticky", "sticky_assign", "StickyResult",
    "topic_base", "ClassicInputs", "build_inputs", "decode_members", "member_order",
    "to_assignments", "assign", "ASSIGNORS",
]

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
_I32_MAX = np.iinfo(np.int32).max


class StickyResult(NamedTuple):
    """``target_owner``: the assignment to send this round (moved units withheld, -1).
    ``final_owner``: the balanced goal the follow-up rebalance reaches."""
    target_owner: np.ndarray
    final_owner: np.ndarray

    @property
    def withheld(self) -> np.ndarray:
        """Units moving to a new owner after this round (their claimants revoke them now)."""
        return np.flatnonzero((self.target_owner == -1) & (self.final_owner >= 0)).astype(
            np.int32)


# ----------------------------------------------------------------------------- validation

def _int_array(a, name: str, dtype, *, lo: Optional[int] = None) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError("%s must be one-dimensional, got shape %s" % (name, arr.shape))
    if arr.size == 0:
        return np.zeros(0, dtype)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "b" or not np.all(np.equal(np.mod(arr, 1), 0)):
            raise TypeError("%s must hold integers, got dtype %s" % (name, arr.dtype))
    info = np.iinfo(dtype)
    mn, mx = arr.min(), arr.max()
    if mn < (info.min if lo is None else lo) or mx > info.max:
        raise ValueError("%s holds %s, outside %s..%d"
                         % (name, mn if mn < (info.min if lo is None else lo) else mx,
                            info.min if lo is None else lo, info.max))
    return np.ascontiguousarray(arr, dtype=dtype)


def _csr(indptr, values, n_rows: int, name: str):
    ip = _int_array(indptr, name + "_indptr", np.int64, lo=0)
    vals = _int_array(values, name, np.int32)
    if ip.shape[0] != n_rows + 1:
        raise ValueError("%s_indptr must have %d entries (members + 1), got %d"
                         % (name, n_rows + 1, ip.shape[0]))
    if ip[0] != 0 or ip[-1] != vals.shape[0] or (n_rows and np.any(np.diff(ip) < 0)):
        raise ValueError("%s_indptr must start at 0, never decrease and end at len(%s) = %d"
                         % (name, name, vals.shape[0]))
    return ip, vals


# topic_base (unit of (t, p) is base[t] + p) is the consumer assignors' one, re-exported.
from groupcoord.assign.consumer import topic_base  # noqa: E402


def _prep(partitions_per_topic, subs_indptr, subs):
    ppt = _int_array(partitions_per_topic, "partitions_per_topic", np.int32, lo=0)
    base = topic_base(ppt)
    if base[-1] > _I32_MAX:
        raise ValueError("%d units do not fit int32 unit indices" % base[-1])
    sip = _int_array(subs_indptr, "subs_indptr", np.int64, lo=0)
    if sip.shape[0] < 1:
        raise ValueError("subs_indptr must have n_members + 1 >= 1 entries")
    sip, sv = _csr(sip, subs, sip.shape[0] - 1, "subs")
    return ppt, base, sip, sv


# ----------------------------------------------------------------------------- assignors

def range_assign(partitions_per_topic, subs_indptr, subs) -> np.ndarray:
    """Kafka's RangeAssignor. For each topic, its subscribers in member order each get a
    consecutive range of ``P // k`` partitions, the first ``P % k`` of them one more.

    Returns ``owner`` int32 ``(n_units,)``; units of topics nobody subscribes to are -1."""
    ppt, base, sip, sv = _prep(partitions_per_topic, subs_indptr, subs)
    return _k.range_assign(ppt, base, sip, sv)


def roundrobin(partitions_per_topic, subs_indptr, subs) -> np.ndarray:
    """Kafka's RoundRobinAssignor. All partitions in (topic index, partition) order; one
    cursor cycles over all members in order and, for each partition, advances to the next
    member subscribed to its topic. Returns ``owner`` int32 ``(n_units,)``."""
    ppt, base, sip, sv = _prep(partitions_per_topic, subs_indptr, subs)
    return _k.roundrobin(ppt, base, sip, sv)


def _sticky(partitions_per_topic, subs_indptr, subs, owned_indptr, owned, generation,
            cooperative: bool, force_general: bool):
    ppt, base, sip, sv = _prep(partitions_per_topic, subs_indptr, subs)
    n = sip.shape[0] - 1
    oip, ov = _csr(owned_indptr, owned, n, "owned")
    if ov.size and (ov.min() < 0 or ov.max() >= base[-1]):
        raise ValueError("owned holds unit %d, outside 0..%d"
                         % (ov.min() if ov.min() < 0 else ov.max(), base[-1] - 1))
    gen = _int_array(generation, "generation", np.int32)
    if gen.shape[0] != n:
        raise ValueError("generation must have one entry per member (%d), got %d"
                         % (n, gen.shape[0]))
    return _k.sticky(ppt, base, sip, sv, oip, ov, gen, cooperative, force_general)


def cooperative_sticky(partitions_per_topic, subs_indptr, subs, owned_indptr, owned,
                       generation, *, _force_general: bool = False) -> StickyResult:
    """Kafka's CooperativeStickyAssignor (KIP-429) with KIP-341 claim resolution.

    ``owned_indptr``/``owned``: the units each member claims (its ``owned_partitions``);
    ``generation``: each member's reported generation (-1 unknown). Claims are resolved
    (module docstring: highest generation only, same-generation duplicates dropped), the
    assignment is made balanced and sticky (``final_owner``), and the units that change owner
    are withheld from ``target_owner`` for this round.

    Returns ``StickyResult(target_owner, final_owner)`` (a named 2-tuple, int32 owner arrays).
    ``_force_general`` runs the heterogeneous algorithm on any input (testing only)."""
    target, final, _ = _sticky(partitions_per_topic, subs_indptr, subs, owned_indptr, owned,
                               generation, True, _force_general)
    return StickyResult(target, final)


def sticky_assign(partitions_per_topic, subs_indptr, subs, owned_indptr, owned,
                  generation) -> np.ndarray:
    """Kafka's eager StickyAssignor (KIP-54, with KIP-341's generation in its user data):
    the same balanced, sticky goal as ``cooperative_sticky``'s ``final_owner``, given at
    once (eager members revoke everything before joining). Returns ``owner``."""
    return _sticky(partitions_per_topic, subs_indptr, subs, owned_indptr, owned, generation,
                   False, False)[1]


# ----------------------------------------------------------------------------- protocol glue

class ClassicInputs(NamedTuple):
    """Arrays for the assignors, built from the members' subscriptions (``build_inputs``)."""
    topics: list                    # sorted topic names; topic index = position
    partitions_per_topic: np.ndarray  # int32 (T,)
    topic_base: np.ndarray          # int64 (T + 1,)
    subs_indptr: np.ndarray         # int64 (M + 1,)
    subs: np.ndarray                # int32
    owned_indptr: np.ndarray        # int64 (M + 1,)
    owned: np.ndarray               # int32 units
    generation: np.ndarray          # int32 (M,)


def decode_members(metadata: Sequence[bytes]) -> tuple:
    """JoinGroup member metadata bytes -> ``(subscriptions, versions)`` (lists, same order)."""
    subs, versions = [], []
    for raw in metadata:
        v, s = embedded.decode_subscription(raw)
        subs.append(s)
        versions.append(v)
    return subs, versions


def member_order(member_ids: Sequence[str],
                 group_instance_ids: Optional[Sequence[Optional[str]]] = None) -> list:
    """Kafka's member order for range/roundrobin (KIP-345): static members (with a group
    instance id) first, by instance id, then dynamic members by member id. Returns the
    positions of ``member_ids`` in that order (member index i = ``member_ids[order[i]]``).
    Without instance ids this is plain member-id order."""
    if group_instance_ids is None:
        group_instance_ids = [None] * len(member_ids)
    return sorted(range(len(member_ids)),
                  key=lambda i: ((0, group_instance_ids[i], member_ids[i])
                                 if group_instance_ids[i] is not None
                                 else (1, "", member_ids[i])))


def _generation(sub: ConsumerProtocolSubscription, flavour: str,
                version: Optional[int]) -> tuple:
    """-> (generation, [(topic, partitions)...] claimed) for one member."""
    if flavour == "sticky":
        if not sub.user_data:
            return -1, []
        try:
            _, ud = embedded.decode_sticky_user_data(sub.user_data)
        except ValueError:                  # Kafka ignores undecodable user data
            return -1, []
        return ud.generation, [(tp.topic, tp.partitions) for tp in ud.previous_assignment]
    gen = sub.generation_id
    ud = sub.user_data
    # Subscriptions before v2 have no GenerationId: Kafka's cooperative-sticky then put the
    # generation in the user data as one int32. Without the version, a -1 generation_id and
    # exactly 4 bytes of user data is read that way.
    if version is not None:
        legacy = version < 2 and ud is not None and len(ud) >= 4
    else:
        legacy = gen == -1 and ud is not None and len(ud) == 4
    if legacy:
        gen = int.from_bytes(bytes(ud[:4]), "big", signed=True)
    return gen, [(tp.topic, tp.partitions) for tp in sub.owned_partitions]


def build_inputs(subscriptions: Sequence[ConsumerProtocolSubscription],
                 partitions: Mapping[str, int], *, flavour: str = "cooperative-sticky",
                 versions: Optional[Sequence[int]] = None) -> ClassicInputs:
    """Members' subscriptions (in member order) and the cluster's partition counts -> arrays.

    ``topics`` = sorted names subscribed by someone and present in ``partitions`` (a topic
    without metadata is skipped, as Kafka does). Owned partitions come from ``owned_partitions``
    and the generation from ``generation_id`` for ``cooperative-sticky`` (pre-v2 subscriptions:
    a 4-byte user data generation, pass ``versions`` to be exact), from the KIP-341 user data
    (``embedded.decode_sticky_user_data``) for eager ``sticky``; ``range``/``roundrobin`` carry
    no claims. Claims of unknown topics or partitions are dropped."""
    if flavour not in ASSIGNORS:
        raise ValueError("unknown assignor %r (known: %s)" % (flavour, ", ".join(ASSIGNORS)))
    names = sorted({t for s in subscriptions for t in s.topics if t in partitions})
    index = {t: i for i, t in enumerate(names)}
    ppt = np.array([partitions[t] for t in names], dtype=np.int32)
    base = topic_base(ppt)
    m = len(subscriptions)
    sub_lists = [[index[t] for t in s.topics if t in index] for s in subscriptions]
    sip = np.zeros(m + 1, np.int64)
    np.cumsum([len(x) for x in sub_lists], out=sip[1:])
    sv = np.fromiter((t for x in sub_lists for t in x), np.int32, count=int(sip[-1]))
    oip = np.zeros(m + 1, np.int64)
    gen = np.full(m, -1, np.int32)
    units = []
    if flavour in ("sticky", "cooperative-sticky"):
        counts = ppt.tolist()
        starts = base.tolist()
        for i, s in enumerate(subscriptions):
            g, claims = _generation(s, flavour, None if versions is None else versions[i])
            gen[i] = g
            for topic, parts in claims:
                t = index.get(topic)
                if t is None:
                    continue
                b, n = starts[t], counts[t]
                units.extend([b + p for p in parts if 0 <= p < n])
            oip[i + 1] = len(units)
    owned = np.array(units, dtype=np.int32)
    return ClassicInputs(names, ppt, base, sip, sv, oip, owned, gen)


def to_assignments(owner, topics: Sequence[str], base, n_members: int, *,
                   user_data: Optional[bytes] = None) -> list:
    """Owner array -> one ``ConsumerProtocolAssignment`` per member (member order), topics in
    sorted order, partitions ascending. Encode each with ``embedded.encode_assignment``."""
    owner = np.asarray(owner, dtype=np.int32)
    base = np.asarray(base, dtype=np.int64)
    order = np.argsort(owner, kind="stable")            # units ascending within a member
    units = order[int(np.count_nonzero(owner < 0)):]
    per_member = [[] for _ in range(n_members)]
    if units.size:
        mem = owner[units]
        top = np.searchsorted(base, units, side="right") - 1
        part = (units - base[top]).tolist()
        cut = np.flatnonzero((np.diff(mem) != 0) | (np.diff(top) != 0)) + 1
        starts = [0] + cut.tolist()
        ends = cut.tolist() + [int(units.size)]
        mem_l = mem[starts].tolist()
        top_l = top[starts].tolist()
        for m, t, a, b in zip(mem_l, top_l, starts, ends):      # one run per (member, topic)
            per_member[m].append(ConsumerProtocolAssignmentTopicPartition(
                topic=topics[t], partitions=part[a:b]))
    return [ConsumerProtocolAssignment(assigned_partitions=tps, user_data=user_data)
            for tps in per_member]


def assign(protocol: str, subscriptions: Sequence[ConsumerProtocolSubscription],
           partitions: Mapping[str, int], *,
           versions: Optional[Sequence[int]] = None) -> list:
    """The leader's whole step: subscriptions in member order -> one
    ``ConsumerProtocolAssignment`` per member. ``protocol`` is the group protocol name
    (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``); for cooperative-sticky the
    assignments are this round's (moved partitions withheld)."""
    inp = build_inputs(subscriptions, partitions, flavour=protocol, versions=versions)
    if protocol == "range":
        owner = range_assign(inp.partitions_per_topic, inp.subs_indptr, inp.subs)
    elif protocol == "roundrobin":
        owner = roundrobin(inp.partitions_per_topic, inp.subs_indptr, inp.subs)
    elif protocol == "sticky":
        owner = sticky_assign(inp.partitions_per_topic, inp.subs_indptr, inp.subs,
                              inp.owned_indptr, inp.owned, inp.generation)
    else:
        owner = cooperative_sticky(inp.partitions_per_topic, inp.subs_indptr, inp.subs,
                                   inp.owned_indptr, inp.owned, inp.generation).target_owner
    return to_assignments(owner, inp.topics, inp.topic_base, len(subscriptions))
