"""Batches of generated groups -> the many-groups assignment API (groupcoord.assign.many).

A *universe* batch numbers every member and unit of every group that exists before or after
its churn event (gen.Group); a :class:`StateBatch` is the view of one phase of the event
(which members are present, which unit sizes apply) in the dense numbering the assignors
take, with the maps between the two. Building it is per group (each group has its own
shapes); the assignors and metrics then run once over the whole batch.
"""
from __future__ import annotations

import time

import numpy as np

from groupcoord.assign import many as B


CONNECT_ASSIGNORS = ("eager", "incremental-cooperative")
CONSUMER_ASSIGNORS = ("uniform", "range", "cooperative-sticky")
ASSIGNORS = CONNECT_ASSIGNORS + CONSUMER_ASSIGNORS


def offsets(sizes) -> np.ndarray:
    return B.offsets(sizes)


def _rows(indptr: np.ndarray, rows: np.ndarray):
    """Vectorised row selection of a CSR: (indptr of the selected rows, flat indices)."""
    lens = (indptr[1:] - indptr[:-1])[rows]
    ip = offsets(lens)
    idx = np.repeat(indptr[rows] - ip[:-1], lens) + np.arange(ip[-1], dtype=np.int64)
    return ip, idx


class Universe:
    """Global numbering of a batch of groups (one view): universe members and units."""

    def __init__(self, groups: list):
        self.groups = groups
        self.view = groups[0].view if groups else "connect"
        self.G = len(groups)
        self.member_off = offsets([g.n_universe for g in groups])
        self.unit_off = offsets([g.n_units_universe for g in groups])
        self.phase = (np.concatenate([g.phase for g in groups]) if groups
                      else np.empty(0))
        # units that must run after the event (exist in the final sizes)
        parts = []
        for g in groups:
            # universe block b has max(before, after) slots; slot i runs after the event
            # iff i < size_after[b]
            full = np.maximum(g.size_before, g.size_after)
            if np.array_equal(full, g.size_after):
                parts.append(np.ones(int(full.sum()), dtype=np.uint8))
                continue
            base = offsets(full)
            within = np.arange(base[-1]) - np.repeat(base[:-1], full)
            parts.append((within < np.repeat(g.size_after, full)).astype(np.uint8))
        self.counts = np.concatenate(parts) if parts else np.empty(0, np.uint8)
        self.group_of_unit = np.repeat(np.arange(self.G), np.diff(self.unit_off))
        self.group_of_member = np.repeat(np.arange(self.G), np.diff(self.member_off))

    def n_units(self) -> int:
        return int(self.unit_off[-1])


class StateBatch:
    """One phase of every group in the dense numbering of the assignors.

    members: present members in universe (= id) order; units: blocks present with their
    sizes before (``sizes="before"``) or after the event. ``a2u``: universe-global unit of each
    dense unit; ``m2u``: universe-LOCAL member of each dense member; ``u2m``: dense local index
    of each universe-global member, -1 if absent."""

    def __init__(self, uni: Universe, phase: int, sizes: str):
        groups = uni.groups
        self.uni = uni
        self.view = uni.view
        dense = [np.flatnonzero(g.present[min(phase, len(g.present) - 1)]) for g in groups]
        self.n_members = np.array([d.size for d in dense], dtype=np.int64)
        self.member_off = offsets(self.n_members)
        self.m2u = (np.concatenate(dense).astype(np.int32) if groups
                    else np.empty(0, np.int32))
        self.u2m = np.full(int(uni.member_off[-1]), -1, dtype=np.int32)
        for g, d in enumerate(dense):
            self.u2m[uni.member_off[g] + d] = np.arange(d.size, dtype=np.int32)
        a2u, blocks, subs_ip, subs = [], [], [], []
        identity = True
        for g, grp in enumerate(groups):
            s = grp.size_before if sizes == "before" else grp.size_after
            full = np.maximum(grp.size_before, grp.size_after)
            keep = np.flatnonzero(s > 0) if self.view == "connect" else np.arange(s.size)
            lens = s[keep]
            if identity and np.array_equal(s, full):
                a2u.append(None)            # same units as the universe: no gather needed
            else:
                identity = False
                ub = offsets(full)
                ip = offsets(lens)
                a2u.append(np.repeat(ub[keep] - ip[:-1], lens) + np.arange(ip[-1])
                           + uni.unit_off[g])
            blocks.append(lens)
            if self.view == "consumer":
                rip, idx = _rows(grp.sub_indptr, dense[g])
                subs_ip.append(np.diff(rip))
                subs.append(grp.subs[idx])
        if identity:
            self.a2u = None
        else:
            self.a2u = np.concatenate([
                np.arange(uni.unit_off[g], uni.unit_off[g + 1]) if a is None else a
                for g, a in enumerate(a2u)]).astype(np.int64) if groups else \
                np.empty(0, np.int64)
        self.block_off = offsets([b.size for b in blocks])
        sizes_flat = np.concatenate(blocks) if groups else np.empty(0, np.int64)
        if self.view == "connect":
            self.task_count = (sizes_flat - 1).astype(np.int64)
            self.unit_off = B.connect_unit_off(self.task_count, self.block_off)
            # kind: 0 connector instance (first unit of each block), 1 task
            kind = np.ones(int(self.unit_off[-1]), dtype=np.uint8)
            kind[offsets(sizes_flat)[:-1]] = 0
            self.kind = kind
        else:
            self.ppt = sizes_flat.astype(np.int32)
            self.unit_off = B.consumer_unit_off(self.ppt, self.block_off)
            self.sub_indptr = offsets(np.concatenate(subs_ip) if groups else [])
            self.subs = (np.concatenate(subs).astype(np.int32) if groups
                         else np.empty(0, np.int32))
            self.kind = None
        # Lookup tables for the member maps, one block per group with a leading slot for
        # owner -1: d2u[dpad[u] + owner] is the universe member of a dense owner (-1 stays
        # -1), u2d[upad[u] + owner_u] the dense member of a universe owner (-2: gone).
        G = uni.G
        per_unit = np.diff(self.unit_off)
        d2u = np.full(int(self.member_off[-1]) + G, -1, dtype=np.int32)
        u2d = np.full(int(uni.member_off[-1]) + G, -1, dtype=np.int32)
        for g in range(G):
            d0 = int(self.member_off[g]) + g
            d2u[d0 + 1:d0 + 1 + self.n_members[g]] = self.m2u[self.member_off[g]:
                                                              self.member_off[g + 1]]
            u0 = int(uni.member_off[g]) + g
            blk = self.u2m[uni.member_off[g]:uni.member_off[g + 1]]
            u2d[u0 + 1:u0 + 1 + blk.size] = np.where(blk < 0, -2, blk)
        self._d2u, self._u2d = d2u, u2d
        gidx = np.arange(G, dtype=np.int64)
        self._dpad = np.repeat((self.member_off[:-1] + gidx + 1).astype(np.int32), per_unit)
        self._upad = np.repeat((uni.member_off[:-1] + gidx + 1).astype(np.int32), per_unit)

    # --------------------------------------------------------------- universe <-> dense
    def to_universe(self, owner: np.ndarray, out: np.ndarray = None) -> np.ndarray:
        """Dense owner arrays -> universe owner array (universe-local members, -1)."""
        if out is None:
            out = np.full(self.uni.n_units(), -1, dtype=np.int32)
        vals = self._d2u[self._dpad + owner]
        if self.a2u is None:
            out[:] = vals
        else:
            out[self.a2u] = vals
        return out

    def gather(self, per_unit_u: np.ndarray) -> np.ndarray:
        """A per-universe-unit array restricted to this state's units (dense order)."""
        return per_unit_u if self.a2u is None else per_unit_u[self.a2u]

    def from_universe(self, owner_u: np.ndarray) -> np.ndarray:
        """Universe owner array -> dense current (-1 none, -2 owner no longer present)."""
        o = owner_u if self.a2u is None else owner_u[self.a2u]
        return self._u2d[self._upad + o]


class Timer:
    """Accumulates the wall time spent inside the batched kernels."""

    def __init__(self):
        self.s = 0.0

    def __call__(self, fn, *a, **kw):
        t = time.perf_counter()
        r = fn(*a, **kw)
        self.s += time.perf_counter() - t
        return r


def run_assignor(name: str, sb: StateBatch, current: np.ndarray, timer: Timer,
                 hold: bool = False, lost=None):
    """Run one assignor over the whole batch. Returns (owner, final): final is the balanced
    goal (cooperative-sticky withholds moved units from owner for one round; the others
    return owner twice)."""
    if name == "eager":
        o = timer(B.eager_many, sb.task_count, sb.block_off, sb.n_members)
        return o, o
    if name == "incremental-cooperative":
        r = timer(B.incremental_cooperative_many, sb.task_count, sb.block_off, current,
                  sb.n_members, np.full(sb.uni.G, hold), lost)
        return r.owner, r.owner
    if name == "uniform":
        o = timer(B.uniform_many, sb.ppt, sb.block_off, sb.sub_indptr, sb.subs,
                  sb.member_off, current)
        return o, o
    if name == "range":
        o = timer(B.range_many, sb.ppt, sb.block_off, sb.sub_indptr, sb.subs, sb.member_off)
        return o, o
    if name == "cooperative-sticky":
        return timer(B.cooperative_sticky_many, sb.ppt, sb.block_off, sb.sub_indptr, sb.subs,
                     sb.member_off, current)
    raise ValueError("unknown assignor %r" % name)
