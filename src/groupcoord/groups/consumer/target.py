"""Where a consumer group's target assignment comes from: the group's server-side assignor
(assign/consumer.py) over the members' resolved subscriptions, run inline or, for a large
group, off the event loop (AssignorJob, install_offloaded); KIP-1263 assignment intervals
(ensure_target, the assignment timer); catalog changes (on_topics_changed).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from groupcoord.assign import consumer as assignors
from groupcoord.groups.consumer.group import (ConsumerGroup, _assignment_key,
                                              _preferred_assignor, _regex_topics)
from groupcoord.groups.consumer.tx import ConsumerTx
from groupcoord.groups.lifecycle import ASSIGNMENT_COMPUTED, Event
from groupcoord.groups.records import Record
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.protocol import messages as m

__all__ = ["AssignorJob", "compute_target", "ensure_target", "install_offloaded",
           "on_topics_changed"]


def compute_target(tx: ConsumerTx) -> None:
    """The target assignment for the current group epoch, with the group's assignor;
    records only the members whose target changed, then the target epoch."""
    mids = tx.member_ids()
    metas = [tx.meta(x) for x in mids]
    subs, topics = _resolve_subscriptions(metas, tx.shard.topics)
    catalog = tx.shard.topics
    tids = [catalog.by_name[n].topic_id for n in topics]
    ppt = np.array([catalog.by_name[n].partitions for n in topics], dtype=np.int32)
    base = assignors.topic_base(ppt).tolist()
    assignor_names = tx.shard.config.consumer_assignors
    name = _preferred_assignor(metas, tuple(assignor_names), assignor_names[0])
    gix = np.array([tx.topic_index(t) for t in tids], dtype=np.int64)
    current, dropped = _current_owners(tx, mids, gix, ppt, base)
    if mids:
        job = AssignorJob(tx.group_id, tx.epoch, name, ppt, _csr(subs, topics),
                          current, _static_flags(name, metas))
        owners = _owners(tx, job)
        if owners is None:
            return                     # offloaded: the target stays behind meanwhile
    else:
        owners = current
    # Delta: only members that gained or lost a unit get a new target (and a record).
    moved = owners != current
    n_moved = int(np.count_nonzero(moved))
    tx.moved += n_moved
    tx.note(Event(kind=ASSIGNMENT_COMPUTED, group=tx.group_id, type="consumer", epoch=tx.epoch,
                  members=len(mids), units_moved=n_moved, unit="partitions", assignor=name))
    changed = np.union1d(owners[moved], current[moved])
    changed = changed[changed >= 0].tolist() + dropped
    for i, mid in enumerate(mids):
        if tx.target(mid) is None:
            changed.append(i)          # a member with no target yet gets one, even empty
    if changed:
        n_units = int(base[-1])
        ti = np.repeat(np.arange(len(tids)), ppt)
        keys = (gix[ti] << 32) | (np.arange(n_units, dtype=np.int64)
                                 - np.asarray(base[:-1], dtype=np.int64)[ti])
        order = np.argsort(owners, kind="stable")
        bounds = np.searchsorted(owners[order], np.arange(len(mids) + 1))
        for i in sorted(set(changed)):
            new = frozenset(keys[order[bounds[i]:bounds[i + 1]]].tolist())
            if tx.target(mids[i]) != new:
                tx.put_target(mids[i], new)
    tx.records.append(Record(
        m.ConsumerGroupTargetAssignmentMetadataKey(tx.group_id),
        m.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=tx.epoch)))
    tx.target_epoch = tx.epoch
    interval = tx.shard.config.consumer_assignment_interval_ms
    if interval > 0:
        tx.timers.append((_assignment_key(tx.group_id), tx.now + interval))


def _owners(tx: ConsumerTx, job: "AssignorJob") -> Optional[np.ndarray]:
    """Run the assignor inline, use the result computed off the loop for exactly these
    inputs, or (a large run) hand the job to the runtime and return None."""
    if tx.precomputed is not None:
        done, owners = tx.precomputed
        if job.same_inputs(done):
            return owners
    limit = tx.shard.config.consumer_assignor_offload_partitions
    if limit and len(job.current) >= limit:
        tx.offload.append(job)
        return None
    return job.run()


def _current_owners(tx: ConsumerTx, mids, gix, ppt, base) -> tuple:
    """(owners, dropped): the previous target as an owner array in this computation's indices (members in
    id order, topics by name; ``gix``: the group's unit index of each topic);
    partitions that no longer exist are dropped. Vectorised: one pass in C over the
    members' unit sets."""
    n_units = int(base[-1])
    current = np.full(n_units, -1, dtype=np.int32)
    units, who = [], []
    for i, mid in enumerate(mids):
        t = tx.target(mid)
        if t:
            units.append(np.fromiter(t, dtype=np.int64, count=len(t)))
            who.append(np.full(len(t), i, dtype=np.int32))
    if not units:
        return current, []
    if not len(gix):
        return current, sorted({int(x[0]) for x in who})
    u = np.concatenate(units)
    w = np.concatenate(who)
    lut = np.full(int(max(gix.max(), (u >> 32).max())) + 1, -1, dtype=np.int64)
    lut[gix] = np.arange(len(gix))
    ti = lut[u >> 32]
    p = u & 0xFFFFFFFF
    ok = ti >= 0
    ok[ok] &= p[ok] < np.asarray(ppt, dtype=np.int64)[ti[ok]]
    current[np.asarray(base, dtype=np.int64)[ti[ok]] + p[ok]] = w[ok]
    # Members that held units which no longer exist must get a new target even when the
    # assignor leaves everything else in place.
    return current, np.unique(w[~ok]).tolist()


def _resolve_subscriptions(metas, catalog) -> tuple:
    """Per member, the catalog topics it subscribes (names that exist + regex matches); and
    the union of them, sorted by name."""
    cache: dict = {}
    subs = []
    every: set = set()
    for meta in metas:
        s = {n for n in meta.subscribed_topic_names if n in catalog.by_name}
        rx = meta.subscribed_topic_regex
        if rx:
            got = cache.get(rx)
            if got is None:
                got = cache[rx] = _regex_topics(rx, catalog)
            s |= got
        subs.append(s)
        every |= s
    return subs, sorted(every)


def _csr(subs, topics) -> tuple:
    """Subscriptions as CSR (indptr, topic indices) over the sorted topic list."""
    dense = {n: i for i, n in enumerate(topics)}
    indptr = np.zeros(len(subs) + 1, dtype=np.int64)
    flat: list = []
    for i, s in enumerate(subs):
        flat.extend(sorted(dense[n] for n in s))
        indptr[i + 1] = len(flat)
    return indptr, np.array(flat, dtype=np.int32)


def _static_flags(name: str, metas):
    if name != "range":
        return None
    return np.array([x.instance_id is not None for x in metas], dtype=bool)


class AssignorJob:
    """One server-side assignor run: its inputs (plain numpy arrays, owned by the job) and
    the group epoch they belong to. ``run()`` touches nothing else, so the runtime may call
    it in a worker thread (the native assignors release the GIL)."""
    __slots__ = ("group_id", "epoch", "name", "ppt", "indptr", "subs", "current", "static")

    def __init__(self, group_id, epoch, name, ppt, csr, current, static):
        self.group_id = group_id
        self.epoch = epoch
        self.name = name
        self.ppt = ppt
        self.indptr, self.subs = csr
        self.current = current
        self.static = static

    def run(self) -> np.ndarray:
        if self.name == "range":
            return assignors.range_(self.ppt, self.indptr, self.subs, self.current,
                                    static_member=self.static)
        return assignors.uniform(self.ppt, self.indptr, self.subs, self.current)

    def same_inputs(self, other: "AssignorJob") -> bool:
        eq = np.array_equal
        return (self.group_id == other.group_id and self.epoch == other.epoch
                and self.name == other.name and eq(self.ppt, other.ppt)
                and eq(self.indptr, other.indptr) and eq(self.subs, other.subs)
                and eq(self.current, other.current)
                and (self.static is None) == (other.static is None)
                and (self.static is None or eq(self.static, other.static)))

    def __repr__(self):
        return "AssignorJob(%s, epoch %d, %s, %d partitions, %d members)" % (
            self.group_id, self.epoch, self.name, len(self.current), len(self.indptr) - 1)


def install_offloaded(shard, job: AssignorJob, owners, now_ms: int) -> Result:
    """Pure: the records of the target computed off the loop by ``job`` — or nothing when
    the group moved on meanwhile (another epoch, other members or subscriptions: the run
    for the new epoch was requested by the heartbeat that moved it)."""
    g = shard.groups.get(job.group_id)
    if not isinstance(g, ConsumerGroup) or g.epoch != job.epoch or g.target_epoch >= g.epoch:
        return EMPTY
    tx = ConsumerTx(shard, job.group_id, g, now_ms)
    tx.precomputed = (job, owners)
    compute_target(tx)
    if tx.target_epoch != tx.epoch:     # inputs differ from the job's: drop the result
        return EMPTY
    return tx.result(None)


def ensure_target(tx: ConsumerTx) -> None:
    """Compute the target assignment when the group epoch moved past it — unless the
    assignment interval since the last run is still running (KIP-1263 batching): then the
    target stays behind (members reconcile towards the previous one) and the group's
    assignment timer computes it once for every bump of the interval."""
    if tx.epoch <= tx.target_epoch:
        return
    if tx.shard.config.consumer_assignment_interval_ms > 0:
        due = tx.shard.timers.get(_assignment_key(tx.group_id))
        if due is not None and due > tx.now:
            return
    compute_target(tx)


def _assignment_due(shard, key: TimerKey, now_ms: int) -> Result:
    """The assignment interval ended: compute the target if bumps left it behind."""
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ConsumerGroup) or not g.members or g.epoch <= g.target_epoch:
        return EMPTY
    tx = ConsumerTx(shard, key.group_id, g, now_ms)
    compute_target(tx)
    return tx.result(None)


def on_topics_changed(shard, now_ms: int) -> Result:
    """The catalog changed: bump the epoch of every consumer group whose subscribed topics'
    metadata (ids, partition counts, regex matches) changed."""
    records: list = []
    events: list = []
    for gid in sorted(shard.groups):
        g = shard.groups[gid]
        if isinstance(g, ConsumerGroup) and g.members:
            tx = ConsumerTx(shard, gid, g, now_ms)
            if tx.refresh_subscriptions():
                res = tx.result()
                records.extend(res.records)
                events.extend(res.events)
    return Result(None, tuple(records), events=tuple(events)) if records else EMPTY
