"""Interning: per-group tables mapping member ids, connector names and topic names to dense
int32 indices and back (docs/assign.md)."""
from __future__ import annotations

import numpy as np


class Interner:
    """Dense, stable indices for strings. Removed names free their index; a later add reuses
    the lowest free index, so live indices stay below len(names) and never move."""

    __slots__ = ("_index", "_names", "_free")

    def __init__(self, names=()):
        self._index: dict = {}
        self._names: list = []
        self._free: list = []
        for n in names:
            self.add(n)

    def add(self, name: str) -> int:
        i = self._index.get(name)
        if i is not None:
            return i
        if self._free:
            self._free.sort(reverse=True)
            i = self._free.pop()
            self._names[i] = name
        else:
            i = len(self._names)
            self._names.append(name)
        self._index[name] = i
        return i

    def remove(self, name: str) -> int:
        i = self._index.pop(name)
        self._names[i] = None
        self._free.append(i)
        return i

    def get(self, name: str, default: int = -1) -> int:
        return self._index.get(name, default)

    def __getitem__(self, name: str) -> int:
        return self._index[name]

    def name(self, i: int):
        return self._names[i]

    def __contains__(self, name) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self._index)

    @property
    def capacity(self) -> int:
        """One past the highest index ever handed out (size of per-member arrays)."""
        return len(self._names)

    def alive(self) -> np.ndarray:
        """bool[capacity]: which indices are in use."""
        return np.array([n is not None for n in self._names], dtype=bool)

    def sorted_indices(self) -> np.ndarray:
        """Live indices ordered by name (the assignors' tie-break order)."""
        return np.array([self._index[n] for n in sorted(self._index)], dtype=np.int32)


def blocks(sizes) -> np.ndarray:
    """base[i] of consecutive blocks of the given sizes: concat([0], cumsum(sizes))."""
    sizes = np.asarray(sizes, dtype=np.int64)
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def remap_blocks(old_sizes, new_sizes, old_owner) -> np.ndarray:
    """Carry an owner array across a change of block sizes (partitions added to topics, tasks
    added to or removed from connectors, blocks appended): unit (b, i) keeps its owner when
    block b still has index i; new units are -1. Blocks are matched by position; pass 0 for a
    removed block's new size (its units are dropped)."""
    old_sizes = np.asarray(old_sizes, dtype=np.int64)
    new_sizes = np.asarray(new_sizes, dtype=np.int64)
    if len(new_sizes) < len(old_sizes):
        raise ValueError("blocks can only be appended; give removed blocks size 0")
    ob, nb = blocks(old_sizes), blocks(new_sizes)
    out = np.full(nb[-1], -1, dtype=np.int32)
    old_owner = np.asarray(old_owner, dtype=np.int32)
    for b in range(len(old_sizes)):
        k = min(old_sizes[b], new_sizes[b])
        out[nb[b]:nb[b] + k] = old_owner[ob[b]:ob[b] + k]
    return out


def split_blocks(units, base) -> list:
    """Group ascending unit numbers by block: [(block, offsets within the block)], blocks in
    ascending order, only non-empty ones. With consumer units (base = topic_base) this is a
    member's [(topic index, partitions)]; with connect units (base = connect_units) offset 0
    is the connector instance and offset 1 + t is task t."""
    units = np.asarray(units, dtype=np.int64)
    base = np.asarray(base, dtype=np.int64)
    if units.size == 0:
        return []
    if units[0] < 0 or units[-1] >= base[-1] or np.any(units[1:] < units[:-1]):
        raise ValueError("units must be ascending and within 0..%d" % (base[-1] - 1))
    block = np.searchsorted(base, units, side="right") - 1
    cuts = np.flatnonzero(np.diff(block)) + 1
    return [(int(block[s]), (units[s:e] - base[block[s]]).astype(np.int32))
            for s, e in zip(np.r_[0, cuts], np.r_[cuts, units.size])]
