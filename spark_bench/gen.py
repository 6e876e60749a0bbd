"""Synthetic clusters, generated from (seed, group id) alone.

The driver only plans group *sizes* (``plan_groups``: a few integers per group, drawn from
the seed); everything inside a group -- connectors and their task counts, topics and their
partition counts, subscriptions, heartbeat phases, which members join or leave -- is drawn in
the executor by ``make_group`` from ``np.random.SeedSequence([seed, group_id, view])``, so a
group is the same whatever partition or machine generates it, and nothing big is shipped.

A group is described over a *universe*: every member present before or after the churn
event (sorted by member id: universe index order IS the assignors' tie-break order) and every
unit block (connector or topic) present before or after. ``Group`` holds, per block, its
size before and after (connect: tasks + 1 units, 0 when the connector is absent; consumer:
partitions), and per member the masks of who is present in each phase of the event.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SIZE_DISTS = ("fixed", "uniform", "zipf")
SUBSCRIPTIONS = ("homogeneous", "disjoint", "nested")
CONNECT_EVENTS = ("join-one", "join-many", "leave-one", "leave-many", "bounce-within",
                  "bounce-beyond", "connectors-added", "connectors-removed")
CONSUMER_EVENTS = ("join-one", "join-many", "leave-one", "leave-many", "partitions-added")
ALL_EVENTS = tuple(dict.fromkeys(CONNECT_EVENTS + CONSUMER_EVENTS))
VIEWS = ("connect", "consumer")
_VIEW_ID = {"connect": 1, "consumer": 2}


@dataclass(frozen=True)
class GenConfig:
    """Everything that shapes a group besides its size (the CLI's generation options)."""
    seed: int = 0
    task_dist: str = "fixed"            # tasks per connector
    tasks_per_connector: float = 10.0
    partition_dist: str = "fixed"       # how a consumer group's partitions spread over topics
    topics: int = 8                     # topics per consumer group (all of its partitions)
    zipf_a: float = 2.0
    subscriptions: str = "homogeneous"
    sub_classes: int = 4                # disjoint / nested: how many subscription classes
    churn_fraction: float = 0.1         # "many": this fraction of members / blocks (>= 2)
    heartbeat_ms: float = 3000.0        # KIP-848 / Connect heartbeat interval


@dataclass
class Group:
    group_id: int
    view: str                       # "connect" or "consumer"
    event: str
    size_before: np.ndarray         # int64[B] units per block before (connect: tasks + 1)
    size_after: np.ndarray          # int64[B] after
    present: list                   # bool[n_universe] per phase: [before, after, (return)]
    sub_indptr: np.ndarray = None   # consumer: int64[n_universe + 1] over universe members
    subs: np.ndarray = None         # consumer: int32 topic indices
    phase: np.ndarray = None        # float64[n_universe] heartbeat phase within the interval
    extra: dict = field(default_factory=dict)

    @property
    def n_universe(self) -> int:
        return int(self.present[0].size)

    @property
    def n_units_universe(self) -> int:
        return int(np.maximum(self.size_before, self.size_after).sum())


# ------------------------------------------------------------------------------ sizes

def draw_sizes(rng: np.random.Generator, dist: str, n: int, mean: float, cap: int
               ) -> np.ndarray:
    """n positive sizes with the given mean: fixed (all equal), uniform on [1, 2 mean - 1],
    or Zipf (exponent zipf_a set by the caller through ``mean``'s distribution: heavy tail,
    scaled to the mean). Capped at ``cap``."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    mean = max(float(mean), 1.0)
    if dist == "fixed":
        s = np.full(n, int(round(mean)), dtype=np.int64)
    elif dist == "uniform":
        hi = max(int(round(2 * mean - 1)), 1)
        s = rng.integers(1, hi + 1, size=n, dtype=np.int64)
    elif dist.startswith("zipf"):
        a = float(dist.split(":")[1]) if ":" in dist else 2.0
        raw = rng.zipf(a, size=n).astype(np.float64)
        raw = np.minimum(raw, cap)
        s = np.maximum(1, np.round(raw * (mean / raw.mean()))).astype(np.int64)
    else:
        raise ValueError("unknown distribution %r (fixed, uniform, zipf[:a])" % dist)
    return np.minimum(s, cap)


def _dist(name: str, cfg: GenConfig) -> str:
    return "zipf:%g" % cfg.zipf_a if name == "zipf" else name


def blocks_for_total(rng: np.random.Generator, dist: str, mean: float, total: int
                     ) -> np.ndarray:
    """Block sizes (tasks per connector, partitions per topic) drawn from ``dist`` until they
    add up to ``total`` exactly (the last block is trimmed); at least one block."""
    total = max(int(total), 1)
    out = []
    left = total
    while left > 0:
        k = max(int(left / max(mean, 1.0) * 1.2) + 1, 1)
        s = draw_sizes(rng, dist, k, mean, cap=total)
        c = np.cumsum(s)
        cut = int(np.searchsorted(c, left))
        if cut < k:
            s = s[:cut + 1].copy()
            s[-1] -= c[cut] - left
            s = s[s > 0]
            out.append(s)
            break
        out.append(s)
        left -= int(c[-1])
    return np.concatenate(out).astype(np.int64)


def split_total(rng: np.random.Generator, dist: str, n: int, total: int) -> np.ndarray:
    """``n`` block sizes (>= 1) drawn from ``dist`` and scaled to add up to ``total``
    (partitions of a consumer group's topics: few topics, many partitions each)."""
    n = max(min(int(n), int(total)), 1)
    s = draw_sizes(rng, dist, n, max(total / n, 1.0), cap=max(int(total), 1)).astype(float)
    s = np.maximum(np.floor(s * (total / s.sum())), 1).astype(np.int64)
    diff = int(total) - int(s.sum())
    order = np.argsort(-s, kind="stable")          # adjust the largest blocks first
    i = 0
    while diff != 0:
        j = order[i % n]
        step = 1 if diff > 0 else -1
        if s[j] + step >= 1:
            s[j] += step
            diff -= step
        i += 1
    return s


# ------------------------------------------------------------------------------ plan

def plan_groups(seed: int, groups: int, workers: int, tasks: int, size_dist: str = "fixed",
                giant: bool = True, zipf_a: float = 2.0, min_workers: int = 1):
    """The driver's plan: (group_id, n_workers, n_tasks) rows. ``groups`` regular groups share
    ``workers`` and ``tasks`` (sizes from ``size_dist``, tasks proportional to workers), plus,
    with ``giant``, one group holding ``workers`` x ``tasks`` by itself (the last group id).
    Deterministic in the seed."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x91A4]))
    rows = []
    if groups > 0:
        mean = workers / groups
        dist = "zipf:%g" % zipf_a if size_dist == "zipf" else size_dist
        w = draw_sizes(rng, dist, groups, mean, cap=max(workers, 1))
        w = np.maximum(w, min_workers)
        ratio = tasks / max(workers, 1)
        t = np.maximum(np.round(w * ratio).astype(np.int64), 1)
        rows = [(g, int(w[g]), int(t[g])) for g in range(groups)]
    if giant:
        rows.append((groups, int(workers), int(tasks)))
    return rows


def bucket_of(n_workers) -> np.ndarray:
    """Group-size bucket label by decade of workers: '1-9', '10-99', ..., '1M+'."""
    n = np.maximum(np.asarray(n_workers, dtype=np.int64), 1)
    d = np.floor(np.log10(n)).astype(np.int64)
    labels = ["1-9", "10-99", "100-999", "1k-9k", "10k-99k", "100k-999k", "1M+"]
    return np.array([labels[min(int(x), 6)] for x in np.atleast_1d(d)])


BUCKET_ORDER = ["1-9", "10-99", "100-999", "1k-9k", "10k-99k", "100k-999k", "1M+"]


def event_for(view: str, group_id: int, events) -> str:
    """The churn event a group gets in a view: the applicable events cycle over group ids."""
    ok = [e for e in events if e in (CONNECT_EVENTS if view == "connect" else CONSUMER_EVENTS)]
    if not ok:
        raise ValueError("no %s event among %s" % (view, list(events)))
    return ok[group_id % len(ok)]


# ------------------------------------------------------------------------------ group

def _rng(seed: int, group_id: int, view: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(group_id),
                                                         _VIEW_ID[view]]))


def _many(n: int, frac: float) -> int:
    return int(min(max(2, round(n * frac)), max(n - 1, 1)))


def make_group(cfg: GenConfig, group_id: int, n_workers: int, n_tasks: int, view: str,
               event: str) -> Group:
    """One group, drawn from (cfg.seed, group_id, view) only."""
    rng = _rng(cfg.seed, group_id, view)
    n_workers = max(int(n_workers), 1)
    # Membership. The universe holds the members before the event plus any joiners; joiners
    # take random places in the id order (their ids sort anywhere).
    n_join = {"join-one": 1, "join-many": _many(n_workers, cfg.churn_fraction)}.get(event, 0)
    n_u = n_workers + n_join
    before = np.ones(n_u, dtype=bool)
    if n_join:
        before[rng.choice(n_u, size=n_join, replace=False)] = False
    after = before.copy()
    present = [before, after]
    if event in ("join-one", "join-many"):
        after[:] = True
    elif event in ("leave-one", "leave-many", "bounce-within", "bounce-beyond"):
        n_leave = _many(n_workers, cfg.churn_fraction) if event == "leave-many" else 1
        n_leave = min(n_leave, n_workers - 1) if n_workers > 1 else 0
        if n_leave:
            after[rng.choice(n_u, size=n_leave, replace=False)] = False
        if event.startswith("bounce"):
            present.append(before.copy())        # the worker comes back
    # Units
    if view == "connect":
        tc = blocks_for_total(rng, _dist(cfg.task_dist, cfg), cfg.tasks_per_connector,
                              n_tasks)
        size = tc + 1
        sb, sa = size.copy(), size.copy()
        if event == "connectors-added":
            k = _many(size.size, cfg.churn_fraction) if size.size > 1 else 1
            add = blocks_for_total(rng, _dist(cfg.task_dist, cfg), cfg.tasks_per_connector,
                                   max(int(tc.mean() * k), 1))[:k] + 1
            sb = np.concatenate([sb, np.zeros(add.size, np.int64)])
            sa = np.concatenate([sa, add])
        elif event == "connectors-removed" and size.size > 1:
            k = min(_many(size.size, cfg.churn_fraction), size.size - 1)
            sa[rng.choice(size.size, size=k, replace=False)] = 0
        g = Group(group_id, view, event, sb, sa, present)
    else:
        ppt = split_total(rng, _dist(cfg.partition_dist, cfg), min(cfg.topics, n_tasks),
                          n_tasks)
        sb, sa = ppt.copy(), ppt.copy()
        if event == "partitions-added":
            k = _many(ppt.size, cfg.churn_fraction) if ppt.size > 1 else 1
            grow = rng.choice(ppt.size, size=k, replace=False)
            sa[grow] += np.maximum(ppt[grow] // 2, 1)     # +50% partitions on k topics
        g = Group(group_id, view, event, sb, sa, present)
        g.sub_indptr, g.subs = _subscriptions(cfg, rng, n_u, ppt.size)
    g.phase = rng.random(n_u) * cfg.heartbeat_ms / 1000.0
    return g


def _subscriptions(cfg: GenConfig, rng, n_members: int, n_topics: int):
    """CSR of topic indices per universe member. homogeneous: everyone subscribes every topic.
    disjoint: topics are cut into k classes, member m subscribes class m % k. nested: class j
    is the first (j + 1) / k of the topics (each class contains the smaller ones)."""
    k = max(1, min(cfg.sub_classes, n_topics, n_members))
    if cfg.subscriptions == "homogeneous" or k == 1:
        cls_topics = [np.arange(n_topics, dtype=np.int32)]
    elif cfg.subscriptions == "disjoint":
        cuts = np.linspace(0, n_topics, k + 1).astype(np.int64)
        cls_topics = [np.arange(cuts[j], cuts[j + 1], dtype=np.int32) for j in range(k)]
    elif cfg.subscriptions == "nested":
        cuts = np.linspace(0, n_topics, k + 1).astype(np.int64)
        cls_topics = [np.arange(0, cuts[j + 1], dtype=np.int32) for j in range(k)]
    else:
        raise ValueError("unknown subscription pattern %r" % cfg.subscriptions)
    cls = np.arange(n_members) % len(cls_topics)
    lens = np.array([c.size for c in cls_topics], dtype=np.int64)[cls]
    indptr = np.zeros(n_members + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    if len(cls_topics) == 1:
        subs = np.tile(cls_topics[0], n_members)
    else:
        subs = np.concatenate([cls_topics[c] for c in cls]) if n_members else \
            np.empty(0, np.int32)
    return indptr, subs.astype(np.int32)


def digest(g: Group) -> str:
    """A stable fingerprint of everything generated for a group (reproducibility tests)."""
    import hashlib
    h = hashlib.sha256()
    h.update(("%d|%s|%s" % (g.group_id, g.view, g.event)).encode())
    for a in (g.size_before, g.size_after, *g.present, g.phase):
        h.update(np.ascontiguousarray(a).tobytes())
    if g.subs is not None:
        h.update(g.sub_indptr.tobytes())
        h.update(g.subs.tobytes())
    return h.hexdigest()[:16]
