"""A plain numpy API for tools that are not Kafka clients (schedulers, stream processors):
assign work units to members, diff two assignments, validate one (docs/embedding.md).

Built on groupcoord.assign (docs/assign.md), whose data model it keeps: members are indices
``0..M-1`` in tie-break order, units are ``topic_base[t] + partition`` (a "topic" is any pool
of interchangeable units: a queue, a shard range, a connector), an assignment is an int32
owner array (``owner[unit] = member``, -1 = nobody), subscriptions are CSR (member ``m`` may
take units of topics ``topics[indptr[m]:indptr[m + 1]]``).

    assign(strategy, partitions_per_topic, subscriptions, current=None) -> Assignment
    diff(current, target, n_members)  -> groupcoord.assign.Diff (revoke / assign per member)
    validate(owner, n_members, ...)   -> Check (unassigned, foreign owners, unsubscribed)
    csr(rows)                         -> (indptr, values) from per-member lists

Copies: inputs are never written. An input already of the kernel's dtype (int32 for owner
arrays, partition counts and topic lists; int64 for indptr) and C-contiguous is used as is;
any other (a list, an int64 owner array, a strided slice) is converted, i.e. copied, once per
call. Results are new arrays, never views of the inputs, with two exceptions said where they
occur: ``Assignment.final is Assignment.owner`` when nothing is withheld, and ``Diff.current``
is the caller's ``current`` array when it needed no conversion.
"""
from __future__ import annotations

from itertools import chain
from typing import NamedTuple, Sequence

import numpy as np

from groupcoord.assign import classic, consumer, kernels
from groupcoord.assign.consumer import topic_base
from groupcoord.assign.kernels import Diff

__all__ = ["STRATEGIES", "Assignment", "Check", "assign", "diff", "validate", "csr",
           "topic_base", "Diff"]

STRATEGIES = ("range", "roundrobin", "uniform", "sticky", "cooperative-sticky")


class Assignment(NamedTuple):
    """``owner``: what to hand out now (int32 per unit, -1 = nobody this round). ``final``:
    the assignment the strategy aims at; the same array as ``owner`` except for
    cooperative-sticky, which withholds a unit changing owner until its current owner has
    released it (call ``assign`` again with that release in ``current``)."""
    owner: np.ndarray
    final: np.ndarray

    @property
    def withheld(self) -> np.ndarray:
        """Units that change owner after this round (their current owners release them)."""
        if self.final is self.owner:
            return np.zeros(0, np.int64)
        return np.flatnonzero((self.owner < 0) & (self.final >= 0))


class Check(NamedTuple):
    """``validate``'s findings, each an int64 array of unit numbers, plus units per member."""
    unassigned: np.ndarray          # required units with owner -1
    not_member: np.ndarray          # units whose owner is not in 0..n_members-1 (nor -1)
    not_subscribed: np.ndarray      # units whose owner does not subscribe their topic
    counts: np.ndarray              # int64 (n_members,): units each member owns

    @property
    def ok(self) -> bool:
        return not (self.unassigned.size or self.not_member.size or self.not_subscribed.size)

    @property
    def spread(self) -> int:
        """Most minus fewest units per member (0 or 1 is balanced for equal subscriptions)."""
        return int(self.counts.max() - self.counts.min()) if self.counts.size else 0


def csr(rows: Sequence[Sequence[int]], dtype=np.int32) -> tuple:
    """Per-member lists -> ``(indptr int64 (M + 1,), values)``: member ``m``'s entries are
    ``values[indptr[m]:indptr[m + 1]]``. Always builds new arrays."""
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    values = np.fromiter(chain.from_iterable(rows), dtype, count=int(indptr[-1]))
    return indptr, values


def _subscriptions(subscriptions) -> tuple:
    """A tuple ``(indptr, topics)`` is CSR, used as is; a list is one topic list per member."""
    if isinstance(subscriptions, tuple):
        if len(subscriptions) != 2:
            raise ValueError("subscriptions: a (indptr, topics) tuple, or a list of lists")
        return subscriptions
    return csr(subscriptions)


def assign(strategy: str, partitions_per_topic, subscriptions, current=None, *,
           generation=None) -> Assignment:
    """Assign every unit of the subscribed topics to the members.

    Args:
        strategy: ``range``, ``roundrobin`` (Kafka's classic rules, not sticky), ``uniform``
            (KIP-848's server-side assignor: balanced, sticky), ``sticky`` (Kafka's sticky:
            the most balanced assignment the subscriptions allow, with the fewest moves from
            ``current``) or ``cooperative-sticky`` (the same goal, reached in two rounds: a
            unit changing owner is withheld this round).
        partitions_per_topic: units of each topic, int (T,).
        subscriptions: ``(indptr, topics)`` CSR, or a list of per-member topic lists.
        current: the assignment in force (owner array) or None; owners outside
            ``0..M-1`` count as nobody (a member that left). range / roundrobin ignore it.
        generation: sticky / cooperative-sticky only: per member, the generation its part of
            ``current`` dates from (KIP-341: only the highest counts); None = all current.

    Returns an ``Assignment(owner, final)``.
    """
    sip, subs = _subscriptions(subscriptions)
    sip = np.asarray(sip)
    n_members = sip.shape[0] - 1
    if strategy == "range":
        owner = classic.range_assign(partitions_per_topic, sip, subs)
        return Assignment(owner, owner)
    if strategy == "roundrobin":
        owner = classic.roundrobin(partitions_per_topic, sip, subs)
        return Assignment(owner, owner)
    if strategy == "uniform":
        owner = consumer.uniform(partitions_per_topic, sip, subs, current)
        return Assignment(owner, owner)
    if strategy not in ("sticky", "cooperative-sticky"):
        raise ValueError("unknown strategy %r (known: %s)" % (strategy, ", ".join(STRATEGIES)))
    if current is None:
        oip, owned = np.zeros(n_members + 1, np.int64), np.zeros(0, np.int32)
    else:
        cur = np.asarray(current)
        gone = (cur < -1) | (cur >= n_members)
        if gone.any():
            cur = np.where(gone, -1, cur)
        oip, owned = kernels.members_csr(cur, n_members)
    gen = np.zeros(n_members, np.int32) if generation is None else generation
    if strategy == "sticky":
        owner = classic.sticky_assign(partitions_per_topic, sip, subs, oip, owned, gen)
        return Assignment(owner, owner)
    res = classic.cooperative_sticky(partitions_per_topic, sip, subs, oip, owned, gen)
    return Assignment(res.target_owner, res.final_owner)


def diff(current, target, n_members: int) -> Diff:
    """Per member, the units to release (``revoke(m)``) and to take (``assign(m)``) to go from
    ``current`` to ``target``; ``kept`` counts on demand. groupcoord.assign.kernels.diff:
    int32 contiguous inputs are not copied and ``Diff.current`` is ``current`` itself (do not
    change it before reading ``kept``)."""
    return kernels.diff(current, target, n_members)


def validate(owner, n_members: int, *, partitions_per_topic=None, subscriptions=None,
             required=None) -> Check:
    """Check an owner array: every required unit (``required`` bool per unit; None = all)
    has an owner, every owner is a member, and (given ``partitions_per_topic`` and
    ``subscriptions``) every owner subscribes its unit's topic. Reads ``owner`` in place."""
    o = np.asarray(owner)
    if o.ndim != 1 or (o.size and o.dtype.kind not in "iu"):
        raise ValueError("owner must be a one-dimensional integer array")
    missing = o == -1
    if required is not None:
        missing &= np.asarray(required, bool)
    member = (o >= 0) & (o < n_members)
    counts = np.bincount(o[member], minlength=n_members).astype(np.int64)
    not_subscribed = np.zeros(0, np.int64)
    if subscriptions is not None:
        if partitions_per_topic is None:
            raise ValueError("checking subscriptions needs partitions_per_topic")
        sip, subs = _subscriptions(subscriptions)
        ppt = np.asarray(partitions_per_topic, np.int64)
        if int(ppt.sum()) != o.shape[0]:
            raise ValueError("owner has %d units, partitions_per_topic sums to %d"
                             % (o.shape[0], int(ppt.sum())))
        n_topics = ppt.shape[0]
        topic = np.repeat(np.arange(n_topics, dtype=np.int64), ppt)
        allowed = np.unique(np.repeat(np.arange(n_members, dtype=np.int64), np.diff(sip))
                            * n_topics + np.asarray(subs, np.int64))
        units = np.flatnonzero(member)
        pairs = o[units].astype(np.int64) * n_topics + topic[units]
        not_subscribed = units[~np.isin(pairs, allowed, assume_unique=False)]
    return Check(np.flatnonzero(missing), np.flatnonzero(~member & (o != -1)),
                 not_subscribed, counts)
