"""Kafka Connect's assignors, eager and incremental cooperative (KIP-415), as pure functions over
owner arrays (docs/assign.md). The loops are in native/assign_connect.pyx.

Units: connector ``c`` owns the block ``base[c] .. base[c] + task_count[c]``: ``base[c]`` is the
connector instance (Connect's task -1), ``base[c] + 1 + t`` is task ``t``, and
``base = connect_units(task_count) = concat([0], cumsum(task_count + 1))``.

Workers are indices ``0..n_workers-1`` in tie-break order (sorted by worker id, as Connect
sorts them); connectors are indices in the order Connect iterates them (sorted by name).

How the coordinator says which workers departed
-----------------------------------------------
``incremental_cooperative`` takes ``current``, the previous target assignment re-expressed in the
*current* member indices, with two negative codes:

* ``-2`` (:data:`LOST`): the unit's owner in the previous target is no longer a member;
* ``-1`` (:data:`UNASSIGNED`): the previous target left it unassigned. It is still lost when the
  previous :class:`IcaState` lists it (work held for a departed worker); otherwise it is new.

:func:`remap_previous` builds exactly that from the stored previous target (owner array in the
previous member indices) and ``prev_to_new`` (each previous member's current index, or -1 if it
left), and also returns the ``joined`` mask (current members that were not in the previous
target): the candidates that may take lost work before the delay expires.

State and time
--------------
:class:`IcaState` is the assignor state stored with the target (DESIGN/decisions:
InstallAssignment ``AssignorState``): the deadline of the pending delayed rebalance, in
coordinator time, and the lost units still held. Its units are in the numbering of the
``task_count`` of the call that produced it; if the connector configuration changes, carry the
held units across by name (:func:`units_to_wire` / :func:`wire_to_units`).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Sequence

import msgspec
import numpy as np

from groupcoord._native.assign_connect import (eager_kernel, ica_kernel,  # noqa: F401
                                               remap_kernel)

__all__ = [
    "LOST", "UNASSIGNED", "connect_units", "eager", "incremental_cooperative", "IcaState",
    "IcaResult", "Remapped", "remap_previous", "WorkerAssignment", "to_wire", "from_wire",
    "units_to_wire", "wire_to_units",
]

UNASSIGNED = -1
LOST = -2

_EMPTY_I32 = np.empty(0, dtype=np.int32)
_EMPTY_I32.flags.writeable = False
_EMPTY_U8 = np.empty(0, dtype=np.uint8)


# ------------------------------------------------------------------------------ units
def _task_count(task_count) -> np.ndarray:
    tc = np.ascontiguousarray(task_count, dtype=np.int64)
    if tc.ndim != 1:
        raise ValueError("task_count must be one-dimensional")
    if tc.size and tc.min() < 0:
        raise ValueError("task counts must be >= 0")
    return tc


def connect_units(task_count) -> np.ndarray:
    """``base`` (int64, ``n_connectors + 1``): connector ``c`` owns units
    ``base[c] .. base[c+1]-1``, ``base[c]`` being the connector instance and ``base[c]+1+t``
    task ``t``; ``base[-1]`` is the number of units (must fit int32)."""
    tc = _task_count(task_count)
    base = np.zeros(tc.size + 1, dtype=np.int64)
    np.cumsum(tc + 1, out=base[1:])
    if base[-1] > np.iinfo(np.int32).max:
        raise ValueError("too many units for int32 indices: %d" % base[-1])
    return base


# ------------------------------------------------------------------------------ eager
def eager(n_workers: int, task_count) -> np.ndarray:
    """Connect's eager assignor (the classic, pre-KIP-415 one).

    One circular iterator over the workers in index order: every connector in index order
    takes the next worker, then every task (connectors in index order, tasks in id order)
    takes the next worker, continuing where the connectors stopped. So connector ``c`` goes
    to ``c % n_workers`` and the ``k``-th task overall to ``(n_connectors + k) % n_workers``.

    Returns ``owner`` int32 ``(n_units,)``; all -1 when there is no worker.
    """
    n_workers = _n_workers(n_workers)
    base = connect_units(task_count)
    owner = np.empty(int(base[-1]), dtype=np.int32)
    eager_kernel(base, n_workers, owner)
    return owner


# ------------------------------------------------------------------------ incremental coop
@dataclass(frozen=True, eq=False)
class IcaState:
    """State of the incremental cooperative assignor between two targets.

    ``deadline_ms``: coordinator time at which held lost work is released (-1: no delayed
    rebalance pending). ``lost``: int32 units, ascending, held unassigned for their departed
    owner until then (empty when nothing is held).
    """
    deadline_ms: int = -1
    lost: np.ndarray = field(default_factory=lambda: _EMPTY_I32)

    _HEADER = struct.Struct("<qI")

    def __eq__(self, other):
        if not isinstance(other, IcaState):
            return NotImplemented
        return (self.deadline_ms == other.deadline_ms
                and np.array_equal(self.lost, other.lost))

    __hash__ = None

    def to_bytes(self) -> bytes:
        """Opaque encoding for InstallAssignment's ``AssignorState``: int64 deadline, uint32
        count, then the units as little-endian int32."""
        lost = np.ascontiguousarray(self.lost, dtype="<i4")
        return self._HEADER.pack(int(self.deadline_ms), lost.size) + lost.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "IcaState":
        """Inverse of :meth:`to_bytes`; empty bytes (no stored state) give ``IcaState()``."""
        if not data:
            return cls()
        h = cls._HEADER
        if len(data) < h.size:
            raise ValueError("IcaState: truncated header")
        deadline, n = h.unpack_from(data)
        if len(data) != h.size + 4 * n:
            raise ValueError("IcaState: %d bytes for %d units" % (len(data), n))
        lost = np.frombuffer(data, dtype="<i4", count=n, offset=h.size).astype(np.int32)
        if n and (lost.min() < 0 or np.any(np.diff(lost) <= 0)):
            raise ValueError("IcaState: lost units must be ascending, unique and >= 0")
        lost.flags.writeable = False
        return cls(int(deadline), lost)


class IcaResult(NamedTuple):
    """``owner``: the new target (int32 ``(n_units,)``, -1 = unassigned: held lost units, or
    everything when there is no worker). ``next_state``: store it with the target and pass it
    to the next call. ``rebalance_delay_ms``: the coordinator must run a new assignment after
    this many ms (>= 1), or -1 for no delayed rebalance. ``moved``: units revoked from a live
    owner for balance (the stickiness cost)."""
    owner: np.ndarray
    next_state: IcaState
    rebalance_delay_ms: int
    moved: int


def _n_workers(n_workers) -> int:
    n = int(n_workers)
    if n < 0 or n > np.iinfo(np.int32).max:
        raise ValueError("n_workers out of range: %d" % n)
    return n


def incremental_cooperative(task_count, current, n_workers: int, now_ms: int, delay_ms: int,
                            state: Optional[IcaState] = None, joined=None) -> IcaResult:
    """Connect's incremental cooperative assignor (KIP-415) as a declarative target.

    Arguments:
      task_count: int[n_connectors] tasks per connector (defines the units, see module doc).
      current: int32[n_units], the previous target in current worker indices: ``>= 0`` owner,
        ``-1`` unassigned, ``-2`` owner departed (see the module doc, :func:`remap_previous`).
      n_workers: current group size (indices in tie-break order).
      now_ms: coordinator time. delay_ms: ``scheduled.rebalance.max.delay.ms``.
      state: the previous call's ``next_state`` (None: no state).
      joined: optional bool[n_workers], the workers that joined since the previous target (the
        candidates for lost work). Default: the workers that own nothing in ``current``
        (Connect's candidate rule).

    Semantics:
      * Sticky: a unit keeps its live owner unless balance needs it elsewhere.
      * Connectors and tasks are balanced separately by count: with ``N`` units of a kind
        (held lost ones included) each worker ends with ``N // n_workers`` or one more; the
        "one more" slots go first to workers already above the floor (fewest moves, lowest
        index first). Only surplus above a worker's quota is revoked (its highest units).
      * Lost units (``-2``, or ``-1`` listed in ``state.lost``) are held unassigned while the
        delay runs: the first loss sets the deadline ``now_ms + delay_ms`` (an already pending
        deadline is kept, capped at ``now_ms + delay_ms``), and the result asks for a rebalance
        after the remaining time. Candidates (``joined``) take lost work at once, up to their
        quota. Once ``now_ms >= deadline`` (or ``delay_ms <= 0``), lost units are new work.
      * New, released and revoked units go one at a time to the least loaded worker of their
        kind (ties: lowest index), in ascending unit order: from empty this is round robin.
      * Deterministic: the same arguments give the same result.
    """
    n_workers = _n_workers(n_workers)
    base = connect_units(task_count)
    n_units = int(base[-1])
    cur = np.ascontiguousarray(current, dtype=np.int32)
    if cur.shape != (n_units,):
        raise ValueError("current has shape %s, expected (%d,)" % (cur.shape, n_units))
    now_ms = int(now_ms)
    delay_ms = int(delay_ms)

    lost_in = _EMPTY_U8
    pending = -1
    if state is not None:
        pending = int(state.deadline_ms)
        if len(state.lost):
            lost_units = np.asarray(state.lost)
            if lost_units.min() < 0 or lost_units.max() >= n_units:
                raise ValueError("state.lost holds units outside 0..%d" % (n_units - 1))
            lost_in = np.zeros(n_units, dtype=np.uint8)
            lost_in[lost_units] = 1
    deadline = now_ms + delay_ms
    if pending >= 0 and pending < deadline:
        deadline = pending
    hold = delay_ms > 0 and now_ms < deadline

    if joined is None:
        cand = _EMPTY_U8                 # the kernel derives it: workers owning nothing
    else:
        cand = np.ascontiguousarray(joined, dtype=np.uint8)
        if cand.shape != (n_workers,):
            raise ValueError("joined must have shape (%d,)" % n_workers)

    owner = np.empty(n_units, dtype=np.int32)
    held, moved, _n_lost = ica_kernel(base, cur, n_workers, lost_in, cand, hold, owner)
    if len(held):
        held.flags.writeable = False
        return IcaResult(owner, IcaState(deadline, held), deadline - now_ms, int(moved))
    return IcaResult(owner, IcaState(), -1, int(moved))


class Remapped(NamedTuple):
    """``current``: owner array in current member indices (-2 = owner departed). ``joined``:
    bool[n_workers], members that were not in the previous target. ``departed``: how many
    units had a departed owner."""
    current: np.ndarray
    joined: np.ndarray
    departed: int


def remap_previous(prev_owner, prev_to_new, n_workers: int) -> Remapped:
    """Re-express the previous target (``prev_owner``, in the previous target's member
    indices) in the current member indices: ``prev_to_new[p]`` is the current index of the
    previous member ``p``, or -1 if it left. Units of departed members become -2 (lost)."""
    n_workers = _n_workers(n_workers)
    prev = np.ascontiguousarray(prev_owner, dtype=np.int32)
    p2n = np.ascontiguousarray(prev_to_new, dtype=np.int32)
    if prev.ndim != 1 or p2n.ndim != 1:
        raise ValueError("prev_owner and prev_to_new must be one-dimensional")
    if p2n.size and p2n.max() >= n_workers:
        raise ValueError("prev_to_new maps to an index >= n_workers")
    live = p2n[p2n >= 0]
    if np.unique(live).size != live.size:
        raise ValueError("prev_to_new maps two previous members to one current member")
    out = np.empty(prev.size, dtype=np.int32)
    joined = np.ones(n_workers, dtype=np.uint8)
    departed = remap_kernel(prev, p2n, out, joined)
    if departed < 0:
        u = -1 - departed
        raise ValueError("prev_owner[%d] = %d is not a previous member index < %d"
                         % (u, prev[u], p2n.size))
    return Remapped(out, joined.view(np.bool_), int(departed))


# --------------------------------------------------------------------------- wire shape
class WorkerAssignment(msgspec.Struct, frozen=True, gc=False):
    """One worker's connectors and tasks in the wire's grouping (DESIGN.md "Connect group
    specifics"): ``connectors``: connector indices ascending; ``tasks``: ``(connector, [task
    ids ascending])`` for each connector with tasks here, connectors ascending. The caller maps
    connector indices to names."""
    connectors: list[int] = []
    tasks: list[tuple[int, list[int]]] = []


def units_to_wire(units, task_count) -> WorkerAssignment:
    """A set of units (any order, no repeats) in the wire shape."""
    base = connect_units(task_count)
    u = np.sort(np.asarray(units, dtype=np.int64))
    if u.size and (u[0] < 0 or u[-1] >= base[-1]):
        raise ValueError("unit outside 0..%d" % (base[-1] - 1))
    conn = np.searchsorted(base, u, side="right") - 1
    is_conn = u == base[conn]
    connectors = conn[is_conn].astype(np.int32).tolist()
    tu = u[~is_conn]
    tc = conn[~is_conn]
    tid = (tu - base[tc] - 1).tolist()
    tasks: list[tuple[int, list[int]]] = []
    if tu.size:
        cuts = np.flatnonzero(np.diff(tc)) + 1
        starts = [0] + cuts.tolist()
        ends = cuts.tolist() + [tu.size]
        tcl = tc.tolist()
        tasks = [(tcl[s], tid[s:e]) for s, e in zip(starts, ends)]
    return WorkerAssignment(connectors, tasks)


def wire_to_units(assignment: WorkerAssignment, task_count) -> np.ndarray:
    """The units (int32, in the order given) of one worker's wire-shaped assignment. Raises
    ValueError on an unknown connector or task id."""
    base = connect_units(task_count)
    n_conn = base.size - 1
    conns = np.asarray(assignment.connectors, dtype=np.int64)
    if conns.size and (conns.min() < 0 or conns.max() >= n_conn):
        raise ValueError("connector index outside 0..%d" % (n_conn - 1))
    parts = [base[conns]]
    for c, ids in assignment.tasks:
        if not 0 <= c < n_conn:
            raise ValueError("connector index %d outside 0..%d" % (c, n_conn - 1))
        t = np.asarray(ids, dtype=np.int64)
        if t.size and (t.min() < 0 or t.max() >= base[c + 1] - base[c] - 1):
            raise ValueError("task id outside 0..%d for connector %d"
                             % (base[c + 1] - base[c] - 2, c))
        parts.append(base[c] + 1 + t)
    return np.concatenate(parts).astype(np.int32)


def to_wire(owner, task_count, n_workers: int) -> list[WorkerAssignment]:
    """Per worker (index order), its units of ``owner`` in the wire shape."""
    base = connect_units(task_count)
    own = np.asarray(owner, dtype=np.int32)
    if own.shape != (int(base[-1]),):
        raise ValueError("owner has shape %s, expected (%d,)" % (own.shape, base[-1]))
    n_workers = _n_workers(n_workers)
    if own.size and own.max() >= n_workers:
        raise ValueError("owner holds a worker index >= n_workers")
    order = np.argsort(own, kind="stable")            # units ascending within each owner
    bounds = np.searchsorted(own[order], np.arange(n_workers + 1), side="left")
    return [units_to_wire(order[bounds[w]:bounds[w + 1]], task_count)
            for w in range(n_workers)]


def from_wire(assignments: Sequence[WorkerAssignment], task_count) -> np.ndarray:
    """Owner array from per-worker wire-shaped assignments (worker = position). Units nobody
    lists are -1. Raises ValueError when a unit is listed twice or is unknown."""
    base = connect_units(task_count)
    owner = np.full(int(base[-1]), -1, dtype=np.int32)
    for w, a in enumerate(assignments):
        units = wire_to_units(a, task_count)
        if np.unique(units).size != units.size or np.any(owner[units] >= 0):
            raise ValueError("worker %d lists a connector/task that is already assigned" % w)
        owner[units] = w
    return owner
