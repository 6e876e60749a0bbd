"""Owner-array kernels (docs/assign.md): CSR views, diff, validation, KIP-848 reconciliation.

Thin typed wrappers over groupcoord._native.assign_kernels; all work is O(units + members).
Many groups at once: renumber the units and members of many groups into one global range
(`concat_groups`), call a kernel once, and split the result with the offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from enum import IntEnum

import numpy as np

from groupcoord._native import assign_kernels as _k


class MemberState(IntEnum):
    """Reconciliation state of a member (KIP-848)."""
    STABLE = _k.STABLE
    UNREVOKED = _k.UNREVOKED      # must revoke units before it may receive new ones
    UNRELEASED = _k.UNRELEASED    # at the target epoch, waiting for others to release units


class ViolationKind(IntEnum):
    UNASSIGNED = _k.UNASSIGNED
    DUPLICATE = _k.DUPLICATE
    OUT_OF_RANGE = _k.OUT_OF_RANGE
    NOT_MEMBER = _k.NOT_MEMBER


@dataclass(frozen=True)
class Violation:
    kind: ViolationKind
    unit: int          # -1 when the violation is about a member
    member: int        # -1 when the violation is about a unit
    other: int = -1    # DUPLICATE: the member that already held the unit

    def __str__(self) -> str:
        k = self.kind
        if k is ViolationKind.UNASSIGNED:
            return "unit %d is not assigned" % self.unit
        if k is ViolationKind.DUPLICATE:
            return "unit %d is assigned to members %d and %d" % (self.unit, self.other,
                                                                 self.member)
        if k is ViolationKind.OUT_OF_RANGE:
            return "member %d is assigned unit %d, which does not exist" % (self.member,
                                                                            self.unit)
        return "member %d is assigned units but is not a member" % self.member


@dataclass(frozen=True)
class Validation:
    owner: np.ndarray          # the assignment as an owner array (first claim wins), or None
    counts: dict               # ViolationKind -> number of violations of that kind
    violations: list           # the first max_violations Violations

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())


@dataclass(frozen=True)
class Diff:
    revoke_indptr: np.ndarray
    revoke_units: np.ndarray
    assign_indptr: np.ndarray
    assign_units: np.ndarray
    current: np.ndarray = field(repr=False)
    n_members: int = 0

    @cached_property
    def kept(self) -> np.ndarray:
        """int64[n_members]: units in both the current and the target assignment of each
        member (derived on first use: current count minus revoked count)."""
        c = self.current
        held = np.bincount(c[c >= 0], minlength=self.n_members).astype(np.int64)
        return held - np.diff(self.revoke_indptr)

    def revoke(self, m: int) -> np.ndarray:
        return self.revoke_units[self.revoke_indptr[m]:self.revoke_indptr[m + 1]]

    def assign(self, m: int) -> np.ndarray:
        return self.assign_units[self.assign_indptr[m]:self.assign_indptr[m + 1]]


@dataclass(frozen=True)
class Reconciliation:
    indptr: np.ndarray          # next assignment of every member, CSR
    units: np.ndarray
    state: np.ndarray           # int8[n_members] of MemberState
    withheld: np.ndarray        # int64[n_members]: target units still held by others

    def next(self, m: int) -> np.ndarray:
        return self.units[self.indptr[m]:self.indptr[m + 1]]


def _i32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int32)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _u8(a):
    return None if a is None else np.ascontiguousarray(a, dtype=bool).view(np.uint8)


def members_csr(owner, n_members: int):
    """(indptr int64[n_members+1], units int32): each member's units, ascending."""
    return _k.members_csr(_i32(owner), n_members)


def owner_from_csr(indptr, units, n_units: int) -> np.ndarray:
    """The owner array of per-member lists; ValueError on a duplicate or out-of-range unit."""
    v = validate(indptr, units, n_units, require_all=False)
    if not v.ok:
        raise ValueError("; ".join(str(x) for x in v.violations[:5]))
    return v.owner


def diff(current, target, n_members: int) -> Diff:
    """Per member: units to revoke, units to assign (CSR), and `kept` counts on demand."""
    current = _i32(current)
    return Diff(*_k.diff(current, _i32(target), n_members), current=current,
                n_members=n_members)


def validate(indptr, units, n_units: int, alive=None, required=None, *,
             require_all: bool = True, max_violations: int = 100,
             want_owner: bool = True) -> Validation:
    """The seed's "Assignment Validation": every unit (or every `required` unit) assigned,
    assigned once, to a live member (`alive` mask), and every unit in range. The owner array
    (first claim wins) is built unless want_owner=False (then Validation.owner is None)."""
    if required is None and not require_all:
        required = np.zeros(n_units, dtype=bool)
    owner, counts, rows = _k.validate(_i64(indptr), _i32(units), n_units, _u8(alive),
                                      _u8(required), max_violations, want_owner)
    viol = [Violation(ViolationKind(int(r[0])), int(r[1]), int(r[2]), int(r[3]))
            for r in rows]
    return Validation(owner, {k: int(counts[k]) for k in ViolationKind}, viol)


def reconcile(owned_indptr, owned, target_indptr, target, owner_now) -> Reconciliation:
    """KIP-848's revoke-before-assign step for every member (see the kernel's docstring)."""
    return Reconciliation(*_k.reconcile(_i64(owned_indptr), _i32(owned), _i64(target_indptr),
                                        _i32(target), _i32(owner_now)))


def globalize(owner, unit_offsets, member_offsets) -> np.ndarray:
    """Segmented owner arrays of many groups (group g's units are
    owner[unit_offsets[g]:unit_offsets[g+1]], its members 0..member_offsets[g+1] -
    member_offsets[g] - 1) -> one owner array over global member numbers, for the many-groups use
    of every kernel. Vectorised: no per-group Python work."""
    owner = _i32(owner)
    uoff = _i64(unit_offsets)
    moff = _i64(member_offsets)
    if len(uoff) != len(moff) or uoff[0] != 0 or uoff[-1] != len(owner):
        raise ValueError("unit_offsets must span owner and match member_offsets in length")
    shift = np.repeat(moff[:-1], np.diff(uoff)).astype(np.int32)
    return np.where(owner >= 0, owner + shift, -1).astype(np.int32)


def localize(owner, unit_offsets, member_offsets) -> np.ndarray:
    """The inverse of globalize: global member numbers back to per-group member indices."""
    owner = _i32(owner)
    uoff = _i64(unit_offsets)
    shift = np.repeat(_i64(member_offsets)[:-1], np.diff(uoff)).astype(np.int32)
    return np.where(owner >= 0, owner - shift, -1).astype(np.int32)


def concat_groups(owners, member_counts):
    """Many groups' owner arrays (a list) -> (global_owner, unit_offsets int64[g+1],
    member_offsets int64[g+1]) for one kernel call over all groups."""
    owners = [_i32(o) for o in owners]
    uoff = np.zeros(len(owners) + 1, dtype=np.int64)
    uoff[1:] = np.cumsum([len(o) for o in owners])
    moff = np.zeros(len(owners) + 1, dtype=np.int64)
    moff[1:] = np.cumsum(member_counts)
    flat = np.concatenate(owners) if owners else np.empty(0, np.int32)
    return globalize(flat, uoff, moff), uoff, moff
