"""Who computes a connect group's next target: the assignor all workers share and the worker
whose version range of it covers every other worker's (ChooseWorker;
docs/coordinator-connect.md)."""
from __future__ import annotations

from typing import Optional

from collections import Counter
from groupcoord.groups.result import TimerKey, Volatile
from groupcoord.groups.timers import CONNECT_ASSIGNMENT as ASSIGNMENT

__all__ = ["select_assignor", "choose_worker", "check_assignors", "ChooseWorker", "Members",
           "signature"]


class ChooseWorker(Volatile, frozen=True, gc=False):
    """The worker asked to compute the next target (None: no computation in flight)."""
    group_id: str
    member_id: Optional[str]


def signature(meta) -> tuple:
    """A worker's assignor signature: (name, min, max) of each client assignor, in order."""
    return tuple((a.name, a.minimum_version, a.maximum_version) for a in meta.client_assignors)


class Members(dict):
    """member id -> ConnectWorkerGroupMemberMetadataValue, counting each distinct assignor
    signature as it changes, so that assignor and worker selection cost O(distinct
    signatures) per heartbeat instead of O(workers) (a join storm of n workers would
    otherwise be O(n^2)). Workers of one cluster usually share one signature."""
    __slots__ = ("sigs",)

    def __init__(self, items=()):
        super().__init__()
        self.sigs: Counter = Counter()
        for k, v in dict(items).items():
            self[k] = v

    def __setitem__(self, k, v):
        old = self.get(k)
        if old is not None:
            self._drop(old)
        super().__setitem__(k, v)
        self.sigs[signature(v)] += 1

    def __delitem__(self, k):
        self._drop(self[k])
        super().__delitem__(k)

    def pop(self, k, *default):
        if k in self:
            v = self[k]
            del self[k]
            return v
        if default:
            return default[0]
        raise KeyError(k)

    def _drop(self, meta):
        sig = signature(meta)
        n = self.sigs[sig] - 1
        if n:
            self.sigs[sig] = n
        else:
            del self.sigs[sig]

    def copy(self) -> "Members":
        c = Members.__new__(Members)
        dict.update(c, self)
        c.sigs = Counter(self.sigs)
        return c

    def without(self, mid) -> "Members":
        c = self.copy()
        c.pop(mid, None)
        return c


def signatures(members: dict) -> Counter:
    got = getattr(members, "sigs", None)
    return got if got is not None else Counter(signature(v) for v in members.values())


def select_assignor(members: dict) -> tuple:
    """(assignor name, None) or (None, why). The candidates are the assignors every worker
    lists. Each worker votes for the first candidate in its own list (its precedence order);
    the most votes wins; a tie goes to the tied candidate listed first by the worker with the
    lowest member id. Counted over distinct signatures (see Members)."""
    members = new_protocol_workers(members)
    if not members:
        return None, None
    sigs = signatures(members)
    common = set.intersection(*({a[0] for a in sig} for sig in sigs))
    if not common:
        lists = {mid: [a.name for a in meta.client_assignors] for mid, meta in members.items()}
        return None, "no assignor is supported by every worker (%s)" % ", ".join(
            "%s: %s" % (mid, lists[mid]) for mid in sorted(lists))
    votes: Counter = Counter()
    for sig, cnt in sigs.items():
        votes[next(a[0] for a in sig if a[0] in common)] += cnt
    best = max(votes.values())
    tied = [n for n, v in votes.items() if v == best]
    if len(tied) == 1:
        return tied[0], None
    lowest = members[min(members)]
    return next(a.name for a in lowest.client_assignors if votes.get(a.name) == best), None


def new_protocol_workers(members: dict) -> dict:
    """The workers that speak ConnectGroupHeartbeat. Classic workers of a migrating group
    (connect/classic_members.py) list no assignor (a new-protocol worker always lists one) and never
    compute the assignment: they cannot call PrepareAssignment."""
    if () not in signatures(members):
        return members
    return {k: v for k, v in members.items() if v.classic_member_metadata is None}


def range_of(sig: tuple, name: str):
    for a in sig:
        if a[0] == name:
            return a[1], a[2]
    return None


def ranges(members: dict, name: str) -> dict:
    out = {}
    for mid, meta in members.items():
        r = range_of(signature(meta), name)
        if r is not None:
            out[mid] = r
    return out


def fmt_ranges(ranges: dict) -> str:
    return ", ".join("%s [%d-%d]" % (mid, lo, hi) for mid, (lo, hi) in sorted(ranges.items()))


def _bounds(members: dict, name: str) -> tuple:
    """(lowest minimum, highest maximum) of ``name``'s version ranges over the workers."""
    rs = [r for r in (range_of(sig, name) for sig in signatures(members)) if r is not None]
    return min(r[0] for r in rs), max(r[1] for r in rs)


def _covers(meta, name: str, lo: int, hi: int) -> bool:
    r = range_of(signature(meta), name)
    return r is not None and r[0] <= lo and r[1] >= hi


def _covering(members: dict, name: str) -> list:
    """Workers whose range of ``name`` covers every other worker's range (sorted ids)."""
    lo, hi = _bounds(members, name)
    return sorted(mid for mid, meta in members.items() if _covers(meta, name, lo, hi))


def choose_worker(g, members: dict, epoch: int, target_epoch: int, now_ms: int,
            exclude: Optional[str] = None, computing: Optional[str] = "") -> tuple:
    """Who computes the next target after a change: -> (events, timers, fatal message).

    ``computing`` overrides the group's worker in flight ("" = use it); ``exclude`` is a
    worker that timed out or left (avoided when another one qualifies)."""
    if computing == "":
        computing = g.computing
    gid = g.group_id
    timer = TimerKey(ASSIGNMENT, gid)
    if epoch <= target_epoch or not new_protocol_workers(members):
        if computing is not None:
            return (ChooseWorker(group_id=gid, member_id=None),), ((timer, None),), None
        return (), (), None
    name, why = select_assignor(members)
    if name is not None and computing is not None and computing != exclude \
            and computing in members \
            and _covers(members[computing], name, *_bounds(members, name)):
        return (), (), None        # the worker in flight still covers everyone: keep it
    cover = _covering(members, name) if name is not None else []
    if not cover:
        if why is None:
            why = ("no worker supports every other worker's version range of assignor %s: %s"
                   % (name, fmt_ranges(ranges(members, name))))
        events = (ChooseWorker(group_id=gid, member_id=None),) if computing is not None else ()
        return events, ((timer, None),), why
    pick = [w for w in cover if w != exclude] or cover
    chosen = g.leader if g.leader in pick else pick[0]
    deadline = now_ms + members[chosen].rebalance_timeout_ms
    return (ChooseWorker(group_id=gid, member_id=chosen),), ((timer, deadline),), None


def check_assignors(members: dict) -> Optional[str]:
    """UNSUPPORTED_ASSIGNOR message when the workers share no assignor or the selected one's
    version ranges do not overlap."""
    name, why = select_assignor(members)
    if why:
        return why
    rs = [r for r in (range_of(sig, name) for sig in signatures(members)) if r is not None]
    if max(r[0] for r in rs) > min(r[1] for r in rs):
        return "the version ranges of assignor %s do not overlap: %s" % (
            name, fmt_ranges(ranges(members, name)))
    return None
