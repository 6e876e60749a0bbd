"""KIP-848 server-side consumer assignors: ``uniform`` and ``range`` (Kafka 4.x behaviour).

Numpy in, numpy out (docs/assign.md). Members are dense indices ``0..n_members-1`` already in
tie-break order (Kafka sorts members by id; the caller interns them in that order), topics are
dense indices ``0..n_topics-1``, and a unit is ``topic_base[t] + partition``. Subscriptions are
CSR: member ``m`` subscribes ``subscriptions[indptr[m]:indptr[m+1]]`` (any order; duplicates
count once). Assignments are int32 owner arrays, ``-1`` = unassigned. Inputs are never
modified; every call returns a new array. Results are a deterministic function of the inputs.

The work happens in native/assign_uniform.pyx (Cython, no GIL held); this module only checks
and converts arguments.
"""
from __future__ import annotations

import numpy as np

from groupcoord._native import assign_uniform as _k

__all__ = ["topic_base", "uniform", "range_"]


def _as(a, dtype, name: str) -> np.ndarray:
    """1-D contiguous array of ``dtype``; no copy when it already is one. Refuses values that
    would change in the conversion (e.g. int64 topic ids beyond int32)."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError("%s must be 1-D, got shape %s" % (name, arr.shape))
    if arr.dtype == dtype and arr.flags.c_contiguous:
        return arr
    if arr.size and arr.dtype.kind not in "iub":
        raise TypeError("%s must hold integers, got %s" % (name, arr.dtype))
    out = np.ascontiguousarray(arr, dtype=dtype)
    if arr.size and arr.dtype != dtype and not np.array_equal(out, arr):
        raise ValueError("%s does not fit %s" % (name, np.dtype(dtype).name))
    return out


def _args(partitions_per_topic, subscriptions_indptr, subscriptions):
    return (_as(partitions_per_topic, np.int32, "partitions_per_topic"),
            _as(subscriptions_indptr, np.int64, "subscriptions_indptr"),
            _as(subscriptions, np.int32, "subscriptions"))


def topic_base(partitions_per_topic) -> np.ndarray:
    """First unit of every topic: ``int64[n_topics + 1] = concat([0], cumsum(partitions))``.

    Unit ``topic_base[t] + p`` is partition ``p`` of topic ``t``; ``topic_base[-1]`` is the
    number of units. Raises ValueError on a negative partition count or > 2**31 - 1 units.
    """
    return _k.topic_base(_as(partitions_per_topic, np.int32, "partitions_per_topic"))


def uniform(partitions_per_topic, subscriptions_indptr, subscriptions, current=None
            ) -> np.ndarray:
    """Kafka's ``uniform`` server-side assignor: balanced and sticky. Returns int32[n_units].

    Args:
        partitions_per_topic: int32[n_topics], partitions of each topic.
        subscriptions_indptr: int64[n_members + 1], CSR row pointers of the subscriptions.
        subscriptions: int32[...], topic indices; member m subscribes
            ``subscriptions[indptr[m]:indptr[m+1]]``.
        current: int32[n_units] owner array, the previous target assignment (None = nothing
            assigned yet). Units whose owner no longer subscribes their topic, and owners
            outside ``0..n_members-1``, count as unassigned.

    Homogeneous subscriptions (every member subscribes the same topics; topics with no
    partitions do not count) pool all subscribed units: every member gets ``N // M`` or
    ``N // M + 1``; the ``N % M`` extra slots go to the members that currently hold the most
    units (ties: lower index). Each member keeps its current units up to its quota (lowest
    units first); the unassigned and reclaimed units go, in unit order, to members under quota
    in member order. So only units that must move, move: one member joining a balanced group
    moves exactly the minimum, one leaving moves only the leaver's units.

    Heterogeneous subscriptions: each topic's partitions go only to its subscribers. The
    per-member loads are the most balanced the subscriptions allow (no chain of moves along
    shared subscriptions can narrow a gap of 2 or more); they are planned by a greedy that
    fills the least-loaded subscriber, topics with the fewest subscribers first, and then
    refined. A unit stays with its owner while the owner still subscribes its topic and is
    within its planned load.

    Units of topics nobody subscribes are -1.
    """
    ppt, indptr, subs = _args(partitions_per_topic, subscriptions_indptr, subscriptions)
    if current is None:
        n_units = int(ppt.sum(dtype=np.int64))
        cur = np.full(n_units, -1, dtype=np.int32)
    else:
        cur = _as(current, np.int32, "current")
    return _k.uniform(ppt, indptr, subs, cur)


def range_(partitions_per_topic, subscriptions_indptr, subscriptions, current=None,
           static_member=None) -> np.ndarray:
    """Kafka's ``range`` assignor, per topic. Returns int32[n_units].

    For each topic, its subscribers are ordered static members first, then the others, each
    group by member index (the caller's id order); the topic's partitions are cut into
    contiguous ranges in that order, the first ``P % S`` subscribers getting one extra. Topics
    with the same partition count and the same subscribers therefore line up partition by
    partition (co-partitioning, for joins). Topics nobody subscribes are -1.

    Args:
        partitions_per_topic, subscriptions_indptr, subscriptions: as for ``uniform``.
        current: accepted for signature symmetry with ``uniform`` (checked for length only):
            the ranges are a function of the subscriptions alone, so a group whose membership
            does not change keeps exactly the same assignment.
        static_member: bool[n_members] (members with a group.instance.id) or None.
    """
    # Arrays already in the kernel's form go straight in (no copy, no Python-level checks:
    # the per-call overhead is most of the time for small groups); anything else is
    # converted here first.
    out = _k.range_(partitions_per_topic, subscriptions_indptr, subscriptions, static_member,
                    current)
    if out is not None:
        return out
    ppt, indptr, subs = (np.require(a, requirements="CA") for a in
                         _args(partitions_per_topic, subscriptions_indptr, subscriptions))
    cur = None if current is None else np.asarray(current)
    st = None
    if static_member is not None:
        st = np.asarray(static_member)
        if st.ndim != 1:
            raise ValueError("static_member must be 1-D")
        st = np.ascontiguousarray(st != 0, dtype=np.uint8)
    return _k.range_(ppt, indptr, subs, st, cur)
