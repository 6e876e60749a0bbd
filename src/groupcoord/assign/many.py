"""Many groups at once: the assignors and owner-array kernels over thousands of groups per
call, the loop over groups in C (native/assign_many.pyx). For schedulers and simulators that
assign many small groups (spark_bench is one user).

Layout (docs/assign.md, "Many groups at once"): the groups are concatenated; *offsets* say
where each group's slice starts. Group ``g`` owns

* units ``unit_off[g]:unit_off[g+1]`` of every per-unit array (owner, current, target...),
* members ``member_off[g]:member_off[g+1]`` of every per-member array,
* topics ``topic_off[g]:topic_off[g+1]`` of ``partitions_per_topic`` (consumer groups),
* connectors ``conn_off[g]:conn_off[g+1]`` of ``task_count`` (connect groups).

Values stay **local** to their group: owner arrays hold member indices ``0..n_members(g)-1``
(-1 unassigned), subscriptions hold topic indices ``0..n_topics(g)-1``. So a group's slices
are exactly the arguments of the per-group API, and the results equal the per-group API's
(tests/test_assign_many.py checks that on seeded random inputs). Subscriptions are one CSR over
all members: global member ``member_off[g] + m`` subscribes
``subs[sub_indptr[member_off[g] + m]:sub_indptr[member_off[g] + m + 1]]``.

Unit offsets are derived: :func:`consumer_unit_off` (partitions per group) and
:func:`connect_unit_off` (``task_count + 1`` per connector, see groupcoord.assign.connect).

Inputs are converted with ``np.ascontiguousarray`` (no copy when already contiguous and of
the kernel's dtype) and never written; results are new arrays. Offsets that decrease or do
not span their arrays, and arrays whose lengths disagree, raise ValueError.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from groupcoord._native import assign_many as _m
from groupcoord.assign import kernels as _kernels

__all__ = [
    "consumer_unit_off", "connect_unit_off", "offsets",
    "uniform_many", "range_many", "cooperative_sticky_many", "eager_many",
    "incremental_cooperative_many", "IcaMany",
    "members_csr_many", "assignment_metrics", "Metrics", "diff_counts_many", "validate_many",
    "validate_lists", "reconcile_round_many", "owned_twice_many",
]

_EMPTY_U8 = np.empty(0, dtype=np.uint8)


def _i32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int32)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _u8(a) -> np.ndarray:
    if a is None:
        return _EMPTY_U8
    return np.ascontiguousarray(a, dtype=bool).view(np.uint8)


def offsets(sizes) -> np.ndarray:
    """``concat([0], cumsum(sizes))`` as int64: offsets of consecutive slices."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 1:
        raise ValueError("sizes must be one-dimensional, got shape %s" % (sizes.shape,))
    if sizes.size and sizes.min() < 0:
        raise ValueError("sizes[%d] = %d is negative"
                         % (int(np.argmin(sizes)), int(sizes.min())))
    out = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def consumer_unit_off(partitions_per_topic, topic_off) -> np.ndarray:
    """unit_off of consumer groups: group g has ``sum(partitions_per_topic[topic_off[g]:
    topic_off[g+1]])`` units."""
    return _m.consumer_units(_i32(partitions_per_topic), _i64(topic_off))


def connect_unit_off(task_count, conn_off) -> np.ndarray:
    """unit_off of connect groups: ``task_count + 1`` units per connector."""
    return _m.connect_units(_i64(task_count), _i64(conn_off))


# ------------------------------------------------------------------------------ assignors

def uniform_many(partitions_per_topic, topic_off, sub_indptr, subs, member_off, current
                 ) -> np.ndarray:
    """KIP-848 ``uniform`` (groupcoord.assign.uniform) on every group. ``current``: each
    group's previous target (local member indices; values outside the group's members count
    as unassigned). Returns the owner arrays, concatenated (int32[total units])."""
    ppt = _i32(partitions_per_topic)
    toff = _i64(topic_off)
    n = int(consumer_unit_off(ppt, toff)[-1])
    out = np.empty(n, dtype=np.int32)
    _m.uniform_many(ppt, toff, _i64(sub_indptr), _i32(subs), _i64(member_off), _i32(current),
                    out)
    return out


def range_many(partitions_per_topic, topic_off, sub_indptr, subs, member_off) -> np.ndarray:
    """KIP-848 ``range`` (groupcoord.assign.range_, no static members) on every group."""
    ppt = _i32(partitions_per_topic)
    toff = _i64(topic_off)
    n = int(consumer_unit_off(ppt, toff)[-1])
    out = np.empty(n, dtype=np.int32)
    _m.range_many(ppt, toff, _i64(sub_indptr), _i32(subs), _i64(member_off), out)
    return out


def cooperative_sticky_many(partitions_per_topic, topic_off, sub_indptr, subs, member_off,
                            current):
    """Classic ``cooperative-sticky`` (groupcoord.assign.cooperative_sticky) on every group,
    every member claiming its units of ``current`` at one common generation. Returns
    ``(target, final)``: this round's assignment (moved units withheld) and the balanced goal.

    The per-group work goes through assign_classic's kernel entry point (it allocates its
    numpy workspaces per call): one compiled loop over the groups, not one C core."""
    ppt = _i32(partitions_per_topic)
    toff = _i64(topic_off)
    n = int(consumer_unit_off(ppt, toff)[-1])
    target = np.empty(n, dtype=np.int32)
    final = np.empty(n, dtype=np.int32)
    _m.cooperative_sticky_many(ppt, toff, _i64(sub_indptr), _i32(subs), _i64(member_off),
                               _i32(current), target, final)
    return target, final


def eager_many(task_count, conn_off, n_workers) -> np.ndarray:
    """Connect ``eager`` (groupcoord.assign.eager) on every group; n_workers: int[G]."""
    tc = _i64(task_count)
    coff = _i64(conn_off)
    n = int(connect_unit_off(tc, coff)[-1])
    out = np.empty(n, dtype=np.int32)
    _m.eager_many(tc, coff, _i32(n_workers), out)
    return out


class IcaMany(NamedTuple):
    """``owner``: the new targets (held lost units -1); ``moved``/``held``: int64[G], units
    revoked from a live owner for balance, and lost units held for the scheduled delay."""
    owner: np.ndarray
    moved: np.ndarray
    held: np.ndarray


def incremental_cooperative_many(task_count, conn_off, current, n_workers, hold,
                                 lost=None, candidates=None, member_off=None) -> IcaMany:
    """Connect ``incremental-cooperative`` (KIP-415, groupcoord.assign.incremental_cooperative)
    on every group.

    current: previous targets in the current worker indices (-2: owner departed, -1:
    unassigned). hold: bool[G], the scheduled delay is still running for the group (its lost
    units are held). lost: bool per unit, units held by the previous state (None: none).
    candidates: bool per member (member_off layout), the workers that may take lost work
    (None: Connect's rule, the workers owning nothing in current)."""
    tc = _i64(task_count)
    coff = _i64(conn_off)
    n = int(connect_unit_off(tc, coff)[-1])
    out = np.empty(n, dtype=np.int32)
    moff = _i64(member_off) if member_off is not None else np.zeros(1, np.int64)
    _, moved, held = _m.ica_many(tc, coff, _i32(current), _i32(n_workers), _u8(hold),
                                 _u8(lost), _u8(candidates), moff, out)
    return IcaMany(out, moved, held)


# ------------------------------------------------------------------------------ metrics

def members_csr_many(owner, unit_off, member_off, *, local_units: bool = True):
    """Per-member unit lists of every group (groupcoord.assign.members_csr for every group):
    ``(indptr int64[total members + 1], units int32)`` with global member numbers and units
    local to their group (or global with local_units=False)."""
    return _m.members_csr_many(_i32(owner), _i64(unit_off), _i64(member_off), local_units)


class Metrics(NamedTuple):
    """Per group (int64[G] each): see :func:`assignment_metrics`."""
    unassigned: np.ndarray
    invalid: np.ndarray
    moved: np.ndarray
    min_moved: np.ndarray
    spread: np.ndarray
    max_load: np.ndarray
    min_load: np.ndarray


def assignment_metrics(prev, new, unit_off, member_off, kind=None) -> Metrics:
    """Balance, stickiness and validity of every group's ``new`` owner array against ``prev``
    (the previous assignment in the new member indices: -1 none, -2 owner departed).

    * unassigned: units left -1; invalid: owners outside the group's members;
    * moved: units whose previous live owner is not their new owner (stickiness cost);
    * min_moved: the fewest moves a balanced assignment needs (per kind: with quotas
      ``q = N // M`` and ``N % M`` slots of ``q + 1``, ``sum(max(0, c - q)) - min(N % M,
      #{c > q})`` over the members' kept counts ``c``): exact for one pool (connect,
      homogeneous consumer subscriptions), a lower bound otherwise;
    * spread: max - min units per member of each kind (the larger); max_load, min_load.

    kind: None (one kind) or per unit 0/1 (connect: 0 connector instance, 1 task; Connect
    balances them separately)."""
    res = _m.assignment_metrics(_i32(prev), _i32(new), _i64(unit_off), _i64(member_off),
                                _EMPTY_U8 if kind is None else
                                np.ascontiguousarray(kind, dtype=np.uint8))
    return Metrics(*(res[:, i] for i in range(res.shape[1])))


def diff_counts_many(current, target, unit_off) -> np.ndarray:
    """groupcoord.assign.diff, counted per group: int64[G, 3] = (revoked, assigned, kept)."""
    return _m.diff_counts_many(_i32(current), _i32(target), _i64(unit_off))


def validate_many(owner, unit_off, member_off, required=None) -> np.ndarray:
    """The seed's validation of every group's owner array: int64[G, 2] = (required units
    unassigned, owners that are not members). ``required``: bool per unit (None: all)."""
    return _m.validate_many(_i32(owner), _i64(unit_off), _i64(member_off), _u8(required))


def validate_lists(owner, unit_off, member_off, required=None):
    """The full per-member-list validation of groupcoord.assign.validate (unassigned,
    duplicates, out of range), for all groups in ONE kernel call: the owner arrays are
    renumbered into one global member/unit range (groupcoord.assign.globalize), turned into
    per-member lists and validated. Returns the :class:`groupcoord.assign.Validation`."""
    uoff = _i64(unit_off)
    moff = _i64(member_off)
    # the same offset checks as every native entry point (globalize itself checks less)
    _m.validate_many(_i32(owner), uoff, moff, _EMPTY_U8)
    glob = _kernels.globalize(_i32(owner), uoff, moff)
    indptr, units = _kernels.members_csr(glob, int(moff[-1]))
    return _kernels.validate(indptr, units, int(uoff[-1]), required=required,
                             require_all=required is None, want_owner=False)


# ------------------------------------------------------------------------------ reconcile

def reconcile_round_many(*args, **kw):
    """One heartbeat round of KIP-848 declarative reconciliation in every group; see the
    kernel's docstring (groupcoord._native.assign_many.reconcile_round_many) and
    spark_bench.simulate, which owns the state arrays. Unlike every other call here it
    updates its state arrays (holders, told, times, per-group counters) in place, so they
    are passed through unconverted: each must already have the kernel's dtype (a mismatch
    raises ValueError, it is never silently written to a copy)."""
    return _m.reconcile_round_many(*args, **kw)


def owned_twice_many(unit_off, holder_old, holder_new, released_at, acquired_at) -> np.ndarray:
    """Never-owned-twice check per group (int64[G]): units held by two members at once now,
    or acquired by the new holder before the old one released them."""
    return _m.owned_twice_many(_i64(unit_off), _i32(holder_old), _i32(holder_new),
                               np.ascontiguousarray(released_at, dtype=np.float64),
                               np.ascontiguousarray(acquired_at, dtype=np.float64))
