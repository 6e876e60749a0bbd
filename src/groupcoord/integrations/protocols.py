"""The consumer-protocol conventions of each assignor name, and the group leader's step, over
plain member records: what the kafka-python and aiokafka adapters share
(groupcoord.integrations.kafka_python / .aiokafka, docs/embedding.md). No client library is
imported here; the kernels are groupcoord.assign.classic's.

Wire formats (JoinGroup member metadata = ConsumerProtocolSubscription, SyncGroup member
assignment = ConsumerProtocolAssignment; both ``int16 version | body``):

  name                subscription we send       its user data                   our leader reads
  range, roundrobin   v0: topics                 empty                           topics
  sticky (eager)      v0: topics                 StickyAssignorUserData v1:      topics, user data
                                                 previous assignment, int32
                                                 generation (KIP-54 / KIP-341)
  cooperative-sticky  v3: topics, owned          int32 generation (Kafka's       owned partitions;
                      partitions, GenerationId   CooperativeStickyAssignor user  GenerationId (v2+),
                                                 data v0)                        else 4 bytes of
                                                                                 user data, else
                                                                                 unknown
  groupcoord-optimal  v3: topics, owned          StickyAssignorUserData v1       topics, user data
                      partitions (none if        (held or previous assignment,   (nothing else)
                      eager), GenerationId (-1   epoch) + int8 flags, bit 0 =
                      if the client does not     "I still hold them"
                      know it)                   (cooperative member)

  Assignments: v0 (v1 for cooperative-sticky, as kafka-python's own), partitions ascending per
  topic, topics sorted. Their user data: empty, except sticky and groupcoord-optimal, whose
  leader writes the int32 epoch = 1 + the highest generation any member reported. A client
  that does not tell its assignor the generation (aiokafka) reports that epoch back.

Why groupcoord-optimal keeps everything in the user data: aiokafka's leader decodes member
metadata with its v0 struct (topics, user data) and drops owned partitions and GenerationId,
so a format read from those two fields alone lets aiokafka (eager) and kafka-python
(cooperative) members share one group under that name. The flag tells the leader which
claims are still held: moving a held partition waits one round (KIP-429), moving a partition
an eager member already revoked does not.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

import numpy as np

from groupcoord._native.codec import get_data_codec
from groupcoord.assign import classic
from groupcoord.assign.consumer import topic_base
from groupcoord.protocol.messages import (StickyAssignorUserData,
                                          StickyAssignorUserDataTopicPartitions)

__all__ = [
    "paused_gc",
    "RANGE", "ROUNDROBIN", "STICKY", "COOPERATIVE_STICKY", "OPTIMAL", "PROTOCOLS",
    "COOPERATIVE", "MemberMeta", "Subscription", "Plan", "leader_assign", "subscription",
    "encode_user_data", "decode_user_data", "epoch_of",
]

RANGE, ROUNDROBIN, STICKY = "range", "roundrobin", "sticky"
COOPERATIVE_STICKY, OPTIMAL = "cooperative-sticky", "groupcoord-optimal"
PROTOCOLS = (RANGE, ROUNDROBIN, STICKY, COOPERATIVE_STICKY, OPTIMAL)
COOPERATIVE = frozenset({COOPERATIVE_STICKY, OPTIMAL})   # may withhold a moved partition
HOLDING = 1                         # groupcoord-optimal user data flags, bit 0
_UNKNOWN = -2                       # a generation nobody reported (below Kafka's -1)
_UD0 = get_data_codec("StickyAssignorUserData", 0)
_UD1 = get_data_codec("StickyAssignorUserData", 1)


class MemberMeta(NamedTuple):
    """One JoinGroup member's decoded subscription, whatever client decoded it."""
    member_id: str
    instance_id: Optional[str]      # group.instance.id (static member), None if dynamic
    topics: Sequence[str]
    user_data: Optional[bytes]
    owned: Sequence[tuple]          # (topic, partitions) of the v1+ OwnedPartitions field
    generation: int                 # the v2+ GenerationId field, -1 when absent
    version: int                    # the subscription's version on the wire


class Subscription(NamedTuple):
    """What a member sends for a protocol name (``subscription``); adapters wrap it in their
    client's class."""
    version: int
    topics: list
    user_data: bytes
    owned: list                     # [(topic, [partitions])]
    generation: int                 # GenerationId (v2+)


class Plan(NamedTuple):
    """The leader's answer: per member (in the order given), its partitions as sorted
    ``(topic, [partitions ascending])`` runs, plus the assignment's version and user data."""
    member_ids: list
    runs: list
    version: int
    user_data: bytes


@contextmanager
def paused_gc():
    """The cyclic garbage collector paused for a leader step. The step allocates ~10^4-10^5
    small acyclic objects (lists, tuples, numpy arrays: reference counting frees them), enough
    to trigger a full collection over every object of the client's process in most calls
    (measured: 59 ms median with the collector on, 17 ms paused, for 10k partitions x 1k
    members, docs/embedding.md).
    Restores the collector only if it was on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ----------------------------------------------------------------------------- user data

def encode_user_data(runs: Iterable[tuple], generation: int) -> bytes:
    """StickyAssignorUserData v1 (Kafka's sticky user data: previous assignment and the
    generation it was received in, KIP-341) of ``(topic, partitions)`` runs."""
    return _UD1.encode(StickyAssignorUserData(
        previous_assignment=[StickyAssignorUserDataTopicPartitions(topic=t, partitions=list(p))
                             for t, p in runs],
        generation=int(generation)))


def _decode_at(data, start: int) -> tuple:
    # KIP-341: read as v1 (with the generation); bytes that end after the assignment are v0
    try:
        ud, end = _UD1.decode_from(data, start)
        gen, flags = ud.generation, (data[end] if len(data) > end else None)
    except ValueError:
        ud, _ = _UD0.decode_from(data, start)
        gen, flags = -1, None
    return [(tp.topic, tp.partitions) for tp in ud.previous_assignment], gen, flags


def decode_user_data(data) -> tuple:
    """StickyAssignorUserData bytes -> ``(runs, generation, flags)``. v0 (no generation) reads
    as generation -1; ``flags`` is the byte after a v1 body (groupcoord-optimal), else None.
    kafka-python's own sticky assignor (3.0.12) puts an int16 version before the body, which
    Kafka's format does not have: read too, when the bytes are not Kafka's format. Bytes
    that are neither (Kafka ignores them) -> ``([], -1, None)``."""
    if not data:
        return [], -1, None
    try:
        return _decode_at(data, 0)
    except ValueError:
        pass
    if len(data) >= 2 and data[0] == 0 and data[1] in (0, 1):
        try:
            runs, gen, _ = _decode_at(data, 2)
            return runs, gen, None
        except ValueError:
            pass
    return [], -1, None


def epoch_of(assignment_user_data) -> Optional[int]:
    """The epoch our sticky / groupcoord-optimal leaders write in the assignment user data,
    or None (another leader, or none written)."""
    if assignment_user_data is None or len(assignment_user_data) != 4:
        return None
    return int.from_bytes(bytes(assignment_user_data), "big", signed=True)


# ----------------------------------------------------------------------------- member side

def subscription(protocol: str, topics: Iterable[str], held: Optional[Sequence[tuple]],
                 generation: int, *, holding: bool = True,
                 generation_id: int = -1) -> Subscription:
    """The subscription a member sends for ``protocol``. ``held``: its last assignment as
    ``(topic, partitions)`` runs, None before its first one; ``generation``: the generation
    (for groupcoord-optimal: the epoch) it was received in, what our leaders compare;
    ``holding``: whether the member still holds it while joining (cooperative clients) or
    revoked it (eager ones); ``generation_id``: groupcoord-optimal's GenerationId field, the
    coordinator's generation the member last synced (-1 unknown). That field means exactly
    that (KIP-792), and groupcoord's coordinator reads it: a JoinGroup whose GenerationId is
    below the member's synced generation is a stale retry there (groups/classic/handlers.py,
    answered REBALANCE_IN_PROGRESS), so an epoch in it would keep a member out."""
    topics = sorted(set(topics))
    if protocol in (RANGE, ROUNDROBIN):
        return Subscription(0, topics, b"", [], -1)
    if protocol == STICKY:
        ud = b"" if held is None else encode_user_data(held, generation)
        return Subscription(0, topics, ud, [], -1)
    if protocol == COOPERATIVE_STICKY:
        return Subscription(3, topics, int(generation).to_bytes(4, "big", signed=True),
                            list(held or ()), int(generation))
    if protocol == OPTIMAL:
        ud = encode_user_data(held or (), generation) + bytes([HOLDING if holding else 0])
        return Subscription(3, topics, ud, list(held or ()) if holding else [],
                            int(generation_id))
    raise ValueError("unknown protocol %r (known: %s)" % (protocol, ", ".join(PROTOCOLS)))


# ----------------------------------------------------------------------------- leader side

class _Topics:
    """Subscribed topics with metadata, in sorted order: unit = base[t] + rank of the
    partition id (ids are 0..n-1 in practice; others are mapped through ``ids``)."""

    def __init__(self, names: list, parts: list):
        self.names = names
        self.index = {t: i for i, t in enumerate(names)}
        counts = []
        self.ids = []                         # None: partition ids are 0..n-1
        for s in parts:
            n = len(s)
            counts.append(n)
            if n and (min(s) != 0 or max(s) != n - 1):
                self.ids.append(np.array(sorted(s), np.int64))
            else:
                self.ids.append(None)
        self.ppt = np.array(counts, np.int32)
        self.base = topic_base(self.ppt)


def _topics(keys: Iterable[tuple],
            partitions_for_topic: Callable[[str], Optional[Iterable[int]]]) -> _Topics:
    """``keys``: the distinct topic lists of the members (usually one)."""
    names, parts = [], []
    for t in sorted(set().union(*keys)):
        s = partitions_for_topic(t)
        if s is None:                       # no metadata: skipped, as Kafka's assignors do
            continue
        names.append(t)
        parts.append(s if isinstance(s, (set, frozenset)) else set(s))
    return _Topics(names, parts)


def _subscriptions(distinct: Sequence[tuple], key_ids: Sequence[int], tp: _Topics):
    """Members' topic lists (``distinct[key_ids[m]]``) -> CSR of topic indices."""
    conv = [np.array(sorted({tp.index[t] for t in key if t in tp.index}), np.int32)
            for key in distinct]
    rows = [conv[k] for k in key_ids]
    sip = np.zeros(len(key_ids) + 1, np.int64)
    np.cumsum([r.shape[0] for r in rows], out=sip[1:])
    subs = np.concatenate(rows) if rows else np.zeros(0, np.int32)
    return sip, subs


def _claims(protocol: str, members: Sequence[MemberMeta], tp: _Topics):
    """-> (owned_indptr, owned units, generation per member, held-unit mask or None). Claims
    keep the order each member listed them (a member keeping fewer keeps its first ones);
    claims of topics or partitions that do not exist are dropped, as Kafka drops them."""
    n = len(members)
    gen = np.full(n, -1, np.int32)
    holding = np.ones(n, bool)
    claims = []                              # per member: its (topic, partitions) runs
    for i, m in enumerate(members):
        if protocol == STICKY:
            runs, g, _ = decode_user_data(m.user_data)
        elif protocol == OPTIMAL:
            runs, g, flags = decode_user_data(m.user_data)
            holding[i] = flags is None or bool(flags & HOLDING)
        else:                                # cooperative-sticky
            runs = m.owned
            if m.version >= 2:
                g = m.generation
            elif m.user_data is not None and len(m.user_data) >= 4:
                g = int.from_bytes(bytes(m.user_data[:4]), "big", signed=True)
            else:
                # No generation at all (kafka-python's own cooperative-sticky sends v1, empty
                # user data): its claims count as current; a partition two current members
                # claim is revoked by both, so this cannot hand out a held partition.
                g = _UNKNOWN
        gen[i] = g
        claims.append(runs)
    if n and gen.min() == _UNKNOWN:
        gen[gen == _UNKNOWN] = max(int(gen.max()), -1)
    index = tp.index
    runs = [(t, p) for rs in claims for t, p in rs]  # (member, topic) runs, member order
    e_len = np.fromiter((len(p) for _, p in runs), np.int64, count=len(runs))
    t_of = np.repeat(np.fromiter((index.get(t, -1) for t, _ in runs), np.int64,
                                 count=len(runs)), e_len)
    m_of = np.repeat(np.repeat(np.arange(n, dtype=np.int64), [len(rs) for rs in claims]),
                     e_len)
    flat = [x for _, p in runs for x in p]
    part = np.array(flat, np.int64)
    ok = t_of >= 0
    t_ok = np.where(ok, t_of, 0)
    for t, ids in enumerate(tp.ids):         # partition ids other than 0..n-1: their ranks
        if ids is not None:
            sel = np.flatnonzero(t_of == t)
            r = np.minimum(np.searchsorted(ids, part[sel]), ids.shape[0] - 1)
            part[sel] = np.where(ids[r] == part[sel], r, -1)
    if tp.ppt.size:
        ok &= (part >= 0) & (part < tp.ppt[t_ok])
    units = (tp.base[t_ok] + part)[ok].astype(np.int32)
    m_of = m_of[ok]
    oip = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(m_of, minlength=n), out=oip[1:])
    mask = None
    if protocol == OPTIMAL:
        mask = np.zeros(int(tp.base[-1]), bool)
        mask[units[holding[m_of]]] = True
    return oip, units, gen, mask


def _owner(protocol: str, members: Sequence[MemberMeta], distinct: Sequence[tuple],
           key_ids: Sequence[int], tp: _Topics):
    """-> (owner array to send, each member's reported generation or None)."""
    sip, subs = _subscriptions(distinct, key_ids, tp)
    if protocol == RANGE:
        return classic.range_assign(tp.ppt, sip, subs), None
    if protocol == ROUNDROBIN:
        return classic.roundrobin(tp.ppt, sip, subs), None
    oip, owned, gen, held = _claims(protocol, members, tp)
    if protocol == STICKY:
        return classic.sticky_assign(tp.ppt, sip, subs, oip, owned, gen), gen
    res = classic.cooperative_sticky(tp.ppt, sip, subs, oip, owned, gen)
    if protocol == COOPERATIVE_STICKY:
        return res.target_owner, gen
    # groupcoord-optimal: only a partition somebody still holds waits for its revocation
    return np.where(held, res.target_owner, res.final_owner).astype(np.int32), gen


def _runs(owner: np.ndarray, tp: _Topics, n_members: int) -> list:
    """Owner array -> per member sorted ``(topic, [partition ids])`` runs."""
    order = np.argsort(owner, kind="stable")          # by member, units ascending within
    units = order[int(np.count_nonzero(owner < 0)):]
    if not units.size:
        return [[] for _ in range(n_members)]
    mem = owner[units]
    top = np.searchsorted(tp.base, units, side="right") - 1
    part = units - tp.base[top]
    for t, ids in enumerate(tp.ids):                  # partition ids other than 0..n-1
        if ids is not None:
            sel = top == t
            part[sel] = ids[part[sel]]
    first = np.flatnonzero(np.r_[True, (np.diff(mem) != 0) | (np.diff(top) != 0)])
    bounds = np.r_[first, units.size].tolist()
    plist = part.tolist()
    names = tp.names
    runs = list(zip([names[t] for t in top[first].tolist()],
                    [plist[a:b] for a, b in zip(bounds, bounds[1:])]))
    cut = np.searchsorted(mem[first], np.arange(n_members + 1)).tolist()
    return [runs[a:b] for a, b in zip(cut, cut[1:])]


def leader_assign(protocol: str, members: Sequence[MemberMeta],
                  partitions_for_topic: Callable[[str], Optional[Iterable[int]]]) -> Plan:
    """The leader's step for ``protocol``: members' subscriptions -> a Plan (one entry per
    member, in the order given). ``partitions_for_topic``: the client's cluster metadata
    (partition ids of a topic, None when unknown). Members are ordered as Kafka does
    (static members first by instance id, then by member id: classic.member_order) before
    the kernels run, so the result does not depend on the order given."""
    if protocol not in PROTOCOLS:
        raise ValueError("unknown protocol %r (known: %s)" % (protocol, ", ".join(PROTOCOLS)))
    order = classic.member_order([m.member_id for m in members],
                                 [m.instance_id for m in members])
    ordered = [members[i] for i in order]
    canon = {}                     # distinct topic lists (usually one): each hashed once
    key_ids = [canon.setdefault(tuple(m.topics), len(canon)) for m in ordered]
    distinct = list(canon)
    tp = _topics(distinct, partitions_for_topic)
    owner, gen = _owner(protocol, ordered, distinct, key_ids, tp) if ordered else (
        np.zeros(0, np.int32), None)
    runs_ordered = _runs(owner, tp, len(ordered))
    runs = [None] * len(members)
    for k, i in enumerate(order):
        runs[i] = runs_ordered[k]
    user_data = b""
    if protocol in (STICKY, OPTIMAL):
        epoch = int(gen.max()) + 1 if gen is not None and gen.size else 0
        user_data = max(epoch, 0).to_bytes(4, "big", signed=True)
    return Plan([m.member_id for m in members], runs,
                1 if protocol == COOPERATIVE_STICKY else 0, user_data)
