"""Read-only views of the groups a node holds, for the web view (server/web.py) and its JSON
API, and a bounded history of each group's recent rebalances for the timeline.

    page = await list_groups(shards, type_="consumer", q="ord", after="", limit=100)
    view = group_detail(shards, "orders", history, page=0, limit=100)   # None: no such group
    history = GroupHistory()
    for rt in shards.shards: rt.history = history       # the runtime calls history.note

Everything here runs on the event loop and only reads the groups (a modern group's cached
reconciled count may be filled, which no reader can tell: modern/group.py). Costs are bounded
for nodes with 10k groups and groups with 10k members:

* the list is computed from each group's O(1) fields (type, state as ``state_of`` derives it,
  epoch, member count) over every group, giving the loop back every LIST_CHUNK groups; only
  the rows of the page (``limit``, at most MAX_LIMIT, after the ``after`` cursor in group id
  order) get their assignor, which can cost O(members);
* a group page shows one page of its members (sorted by member id) and caps each member's
  partition text at MAX_TEXT characters;
* the history keeps at most MAX_GROUPS groups (least recently changed dropped first), per
  group the last MAX_EVENTS lifecycle events and MAX_SAMPLES samples of who held what, and
  samples a group only while it has at most MAX_DRAWN members.

History. The runtime hands every Result's lifecycle events (groups/lifecycle.py) to
``GroupHistory.note`` once the Result is applied (runtime/write_path.py ``history``): the
events are kept with the wall-clock time they were written, and each group they name is
sampled as it now is: per member, the units it owns and those pending revocation (consumer
and connect groups), or its last assignment (classic groups of the consumer protocol).
A sample equal to the previous one is not kept. Members' reconciliation steps between two
events (a KIP-848 member acknowledging a revocation) write no event: a page or the API
looking at the group samples it too (``observe``), so its timeline ends with what members
hold at that moment. Nothing is kept across
restarts: events are never replayed (groups/lifecycle.py), so the history starts when the
node starts, or loads the shard.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import OrderedDict, deque
from typing import Callable, Iterable, Optional

from groupcoord.groups import lifecycle as lc
from groupcoord.groups.classic.group import ClassicGroup
from groupcoord.groups.connect.group import NO_TARGET, ConnectGroup
from groupcoord.groups.connect.selection import select_assignor
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.modern.group import ModernGroup
from groupcoord.groups.modern.reconcile import EMPTY_SET, STABLE, UNRELEASED, UNREVOKED
from groupcoord.protocol import embedded
from groupcoord.runtime.lifecycle_log import render
from groupcoord.runtime.shard_state import ShardState

__all__ = ["list_groups", "group_detail", "find_group", "state_of", "epoch_of",
           "GroupHistory", "partitions_text", "ranges", "TYPES", "STATES",
           "DEFAULT_LIMIT", "MAX_LIMIT", "MAX_TEXT"]

log = logging.getLogger("groupcoord.web")

TYPES = ("classic", "consumer", "connect")
STATES = {"classic": ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable"),
          "consumer": ("Empty", "Assigning", "Reconciling", "Stable"),
          "connect": ("Empty", "Assigning", "Reconciling", "Stable")}

DEFAULT_LIMIT = 100         # rows of a page (groups, or a group's members)
MAX_LIMIT = 1000
LIST_CHUNK = 2000           # groups looked at between two yields to the loop
MAX_TEXT = 300              # characters of one member's partition text

MAX_GROUPS = 500            # groups with a history
MAX_EVENTS = 64             # per group
MAX_SAMPLES = 24            # per group
MAX_DRAWN = 32              # members a sample records; a larger group is not sampled
MAX_ROWS = 40               # timeline rows (members) drawn
SHOWN_EVENTS = 25           # events a group page lists

_MEMBER_STATES = {STABLE: "STABLE", UNREVOKED: "UNREVOKED", UNRELEASED: "UNRELEASED"}


# --------------------------------------------------------------------------- units as text
def ranges(nums: Iterable[int]) -> str:
    """Sorted ints as ranges: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    out = []
    start = prev = None
    for n in nums:
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        start = prev = n
    if start is not None:
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
    return ",".join(out)


def _cap(parts: list, count: int, noun: str) -> str:
    """Join ``parts`` ("topic 0-3") with "; ", cut at MAX_TEXT characters."""
    text = "; ".join(parts)
    if len(text) <= MAX_TEXT:
        return text
    cut = text.rfind("; ", 0, MAX_TEXT)
    return text[:cut if cut > 0 else MAX_TEXT] + " ... (%d %s in all)" % (count, noun)


def partitions_text(pairs: Iterable[tuple]) -> tuple:
    """(topic name, partition) pairs -> ("orders 0-2; pay 1", count)."""
    by: dict = {}
    n = 0
    for t, p in pairs:
        by.setdefault(t, []).append(p)
        n += 1
    return _cap(["%s %s" % (t, ranges(sorted(ps))) for t, ps in sorted(by.items())], n,
                "partitions"), n


def _connect_text(g: ConnectGroup, units) -> tuple:
    conns, tasks = g.wire(units)
    parts = ["%s (connector)" % c for c in conns]
    parts += ["%s tasks %s" % (c, ranges(ids)) for c, ids in tasks]
    return _cap(parts, len(units), "connectors and tasks"), len(units)


def _consumer_texter(g: ConsumerGroup, catalog):
    """units -> (text, count), naming topics by the catalog, else by the group's metadata
    (looked up per topic: the catalog may hold many more topics than the group uses)."""
    by_id = catalog.by_id if catalog is not None else {}
    meta: dict = {}

    def name(tid) -> str:
        t = by_id.get(tid)
        if t is not None:
            return t.name
        if not meta:
            meta.update((i, n) for n, (i, _) in g.topic_meta.items())
        return meta.get(tid) or "(topic %s)" % _hex(tid)

    def text(units) -> tuple:
        if not units:
            return "", 0
        return partitions_text((name(tid), p) for tid, p in g.external(units))
    return text


def _hex(b) -> str:
    try:
        return bytes(b).hex()[:12]
    except Exception:
        return "?"


def _classic_assignment(g: ClassicGroup, data: bytes) -> tuple:
    """A classic member's assignment bytes -> (text, count); consumer protocol only."""
    if not data:
        return "", 0
    if g.protocol_type() != "consumer":
        return "(%d bytes of %s assignment)" % (len(data), g.protocol_type() or "?"), 0
    try:
        _, a = embedded.decode_assignment(data)
        return partitions_text((tp.topic, p) for tp in a.assigned_partitions
                               for p in tp.partitions)
    except Exception:
        return "(undecodable, %d bytes)" % len(data), 0


def _classic_subscription(g: ClassicGroup, metadata: bytes) -> tuple:
    """-> (subscribed topics text, owned partitions text) from a consumer-protocol member's
    JoinGroup metadata (owned partitions: cooperative assignors, v1+)."""
    if g.protocol_type() != "consumer" or not metadata:
        return "", ""
    try:
        _, s = embedded.decode_subscription(metadata)
    except Exception:
        return "(undecodable)", ""
    owned, _ = partitions_text((tp.topic, p) for tp in s.owned_partitions
                               for p in tp.partitions)
    return _cap(sorted(s.topics), len(s.topics), "topics"), owned


# --------------------------------------------------------------------------- groups
def state_of(g) -> str:
    """The group's state name (what ``state_name`` answers) in O(1) for modern groups."""
    if isinstance(g, ModernGroup):
        if not g.members:
            return "Empty"
        if g.epoch > g.target_epoch:
            return "Assigning"
        return "Stable" if g.is_stable() else "Reconciling"
    return g.state_name()


def epoch_of(g) -> int:
    """The group epoch, or a classic group's generation."""
    return g.generation if isinstance(g, ClassicGroup) else g.epoch


def assignor_of(g) -> str:
    """The assignor the group uses: a consumer group's preferred server assignor, a connect
    group's selected one, a classic group's protocol (once chosen). O(members)."""
    if isinstance(g, ConsumerGroup):
        return g.preferred_assignor()
    if isinstance(g, ConnectGroup):
        return g.assignor_name or (select_assignor(g.members)[0] or "")
    return getattr(g, "protocol", None) or ""


def _active(shards):
    for rt in shards.shards:
        if rt.state is ShardState.ACTIVE and rt.shard is not None:
            yield rt


def find_group(shards, group_id: str) -> tuple:
    """-> (shard runtime, group), or (None, None) when no loaded shard of this node has it."""
    shard_of = getattr(shards, "shard_of", None)
    rts = [shards.shards[shard_of(group_id)]] if shard_of is not None else shards.shards
    for rt in rts:
        if rt.state is ShardState.ACTIVE and rt.shard is not None:
            g = rt.shard.groups.get(group_id)
            if g is not None:
                return rt, g
    return None, None


async def list_groups(shards, *, type_: Optional[str] = None, state: Optional[str] = None,
                      q: str = "", after: str = "", limit: int = DEFAULT_LIMIT,
                      visible: Optional[Callable[[str], bool]] = None,
                      chunk: int = LIST_CHUNK) -> dict:
    """The groups of every loaded shard matching the filters (type, state, ``q`` a
    case-insensitive substring of the id; ``visible(group id)``: the caller may see it), in
    group id order, the first ``limit`` after the id ``after``:

        {"groups": [row, ...], "matched": N, "total": N, "next_after": id or None,
         "counts": {type: {state: n}}, "limit": limit}

    counts and total cover every visible group, matched those that pass the filters."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    ql = q.lower()
    counts: dict = {t: {s: 0 for s in STATES[t]} for t in TYPES}
    total = matched = 0
    page: list = []             # a heap of the smallest ids seen so far: (-id, ...) max-heap
    seen = 0
    for rt in list(_active(shards)):
        items = list(rt.shard.groups.items())
        for gid, g in items:
            seen += 1
            if seen % chunk == 0:
                await asyncio.sleep(0)
            if visible is not None and not visible(gid):
                continue
            typ = g.TYPE
            st = state_of(g)
            total += 1
            by = counts.setdefault(typ, {})
            by[st] = by.get(st, 0) + 1
            if (type_ and typ != type_) or (state and st != state) \
                    or (ql and ql not in gid.lower()):
                continue
            matched += 1
            if gid <= after:
                continue
            entry = (_Desc(gid), rt.index, g, st)
            if len(page) <= limit:
                heapq.heappush(page, entry)
            elif gid < page[0][0].s:
                heapq.heapreplace(page, entry)
    page.sort(key=lambda e: e[0].s)
    more = len(page) > limit
    page = page[:limit]
    rows = [{"group_id": e[0].s, "type": e[2].TYPE, "state": e[3], "epoch": epoch_of(e[2]),
             "members": len(e[2].members), "assignor": assignor_of(e[2]), "shard": e[1]}
            for e in page]
    return {"groups": rows, "matched": matched, "total": total, "counts": counts,
            "next_after": rows[-1]["group_id"] if more and rows else None, "limit": limit}


class _Desc:
    """A string ordered backwards (heapq is a min-heap; the page keeps the smallest ids)."""
    __slots__ = ("s",)

    def __init__(self, s: str):
        self.s = s

    def __lt__(self, other: "_Desc") -> bool:
        return self.s > other.s


# --------------------------------------------------------------------------- one group
def group_detail(shards, group_id: str, history: Optional["GroupHistory"] = None, *,
                 page: int = 0, limit: int = DEFAULT_LIMIT) -> Optional[dict]:
    """A group as its page shows it (None: not on this node):

        {"group": {...summary}, "members": [member, ...] (one page), "members_total": n,
         "page": p, "pages": n, "limit": l, "events": [...], "timeline": {...}}"""
    rt, g = find_group(shards, group_id)
    if g is None:
        return None
    limit = max(1, min(int(limit), MAX_LIMIT))
    catalog = rt.shard.topics
    ids = sorted(g.members)
    pages = max(1, -(-len(ids) // limit))
    page = max(0, min(int(page), pages - 1))
    shown = ids[page * limit:(page + 1) * limit]
    if isinstance(g, ConsumerGroup):
        members = [_consumer_member(g, mid, _consumer_texter(g, catalog)) for mid in shown]
    elif isinstance(g, ConnectGroup):
        members = [_connect_member(g, mid) for mid in shown]
    else:
        members = [_classic_member(g, mid) for mid in shown]
    summary = {"group_id": group_id, "type": g.TYPE, "state": state_of(g),
               "epoch": epoch_of(g), "members": len(ids), "assignor": assignor_of(g),
               "shard": rt.index}
    if isinstance(g, ModernGroup):
        summary["assignment_epoch"] = g.target_epoch
    if isinstance(g, ClassicGroup):
        summary["protocol_type"] = g.protocol_type()
        summary["leader"] = g.leader
    if isinstance(g, ConsumerGroup):
        summary["topics"] = sorted(g.topic_meta)
    if isinstance(g, ConnectGroup):
        summary["connectors"] = len(g.connectors)
    out = {"group": summary, "members": members, "members_total": len(ids), "page": page,
           "pages": pages, "limit": limit, "events": [], "timeline": None}
    if history is not None:
        tr = history.observe(group_id, g, catalog)
        out["events"] = [_event_view(t, ev) for t, ev in list(tr.events)[-SHOWN_EVENTS:][::-1]]
        out["timeline"] = history.timeline(group_id)
    return out


def _event_view(t_ms: int, ev: lc.Event) -> dict:
    return {"t_ms": t_ms, "kind": ev.kind, "member": ev.member, "epoch": ev.epoch,
            "reason": ev.reason, "text": render(ev)}


def _consumer_member(g: ConsumerGroup, mid: str, text) -> dict:
    mem = g.members[mid]
    meta, a = mem.meta, mem.a
    target = g.targets.get(mid, EMPTY_SET)
    owns, n_owns = text(a.assigned)
    pending, n_pending = text(a.pending_revocation)
    tgt, n_target = text(target)
    awaiting, n_awaiting = text(target - a.held) if target else ("", 0)
    sub = ", ".join(meta.subscribed_topic_names)
    if meta.subscribed_topic_regex:
        sub = (sub + ", " if sub else "") + "regex " + meta.subscribed_topic_regex
    return {"member_id": mid, "instance_id": meta.instance_id, "client_id": meta.client_id,
            "client_host": meta.client_host, "rack_id": meta.rack_id,
            "protocol": "classic" if meta.classic_member_metadata is not None else "consumer",
            "epoch": a.epoch, "state": _MEMBER_STATES.get(a.state, str(a.state)),
            "owns": owns, "owns_count": n_owns, "pending_revocation": pending,
            "pending_count": n_pending, "target": tgt, "target_count": n_target,
            "awaiting": awaiting, "awaiting_count": n_awaiting,
            "subscription": _cap([sub], 1, "topics") if sub else ""}


def _connect_member(g: ConnectGroup, mid: str) -> dict:
    meta = g.members[mid]
    a = g.current.get(mid)
    assigned = a.assigned if a is not None else EMPTY_SET
    pend = a.pending_revocation if a is not None else EMPTY_SET
    target = g.target.get(mid, NO_TARGET).units
    owns, n_owns = _connect_text(g, assigned)
    pending, n_pending = _connect_text(g, pend)
    tgt, n_target = _connect_text(g, target)
    awaiting, n_awaiting = _connect_text(g, target - assigned - pend)
    return {"member_id": mid, "instance_id": meta.instance_id, "client_id": meta.client_id,
            "client_host": meta.client_host, "worker_url": getattr(meta, "worker_url", ""),
            "protocol": ("classic" if getattr(meta, "classic_member_metadata", None) is not None
                         else "connect"),
            "epoch": a.epoch if a is not None else -1,
            "state": _MEMBER_STATES.get(a.state, str(a.state)) if a is not None else "",
            "owns": owns, "owns_count": n_owns, "pending_revocation": pending,
            "pending_count": n_pending, "target": tgt, "target_count": n_target,
            "awaiting": awaiting, "awaiting_count": n_awaiting, "subscription": ""}


def _classic_member(g: ClassicGroup, mid: str) -> dict:
    mb = g.members[mid]
    owns, n_owns = _classic_assignment(g, mb.assignment)
    topics, reported = _classic_subscription(g, mb.metadata(g.protocol))
    return {"member_id": mid, "instance_id": mb.instance_id, "client_id": mb.client_id,
            "client_host": mb.client_host, "protocol": "classic",
            "leader": mid == g.leader, "epoch": g.generation, "state": "",
            "owns": owns, "owns_count": n_owns, "reported_owned": reported,
            "pending_revocation": "", "pending_count": 0, "target": "", "target_count": 0,
            "awaiting": "", "awaiting_count": 0, "subscription": topics}


# --------------------------------------------------------------------------- history
class _Track:
    """One group's history: events (t_ms, Event) and samples (t_ms, epoch, holdings), where
    holdings maps member id -> (owns text, pending text), or is None when the group had more
    than MAX_DRAWN members; ``labels`` member id -> its client id (for the timeline rows)."""
    __slots__ = ("type", "events", "samples", "labels", "cache")

    def __init__(self, typ: str):
        self.type = typ
        self.events: deque = deque(maxlen=MAX_EVENTS)
        self.samples: deque = deque(maxlen=MAX_SAMPLES)
        self.labels: dict = {}
        self.cache: dict = {}       # member id -> (assignment object, (text, pending text))


class GroupHistory:
    """The recent history of the groups of one node (module docstring): ``note`` is the
    runtime's hook, ``timeline`` what a group page draws."""

    def __init__(self, clock: Callable[[], float] = time.time, max_groups: int = MAX_GROUPS):
        self.clock = clock
        self.max_groups = max_groups
        self._groups: OrderedDict = OrderedDict()       # group id -> _Track, LRU order
        self._failed = False

    def __len__(self) -> int:
        return len(self._groups)

    def get(self, group_id: str) -> Optional[_Track]:
        return self._groups.get(group_id)

    # ------------------------------------------------------------------ the runtime's hook
    def note(self, rt, events) -> None:
        """A Result's lifecycle events, after it was applied to ``rt.shard``."""
        try:
            t = int(self.clock() * 1000)
            touched: dict = {}
            for ev in events:
                tr = self._track(ev.group, ev.type)
                tr.events.append((t, ev))
                touched[ev.group] = tr
            shard = rt.shard
            for gid, tr in touched.items():
                g = shard.groups.get(gid) if shard is not None else None
                self._sample(tr, g, t, shard.topics if shard is not None else None)
        except Exception:               # never fail the write path that called
            if not self._failed:
                self._failed = True
                log.exception("web view: the history hook failed (logged once)")

    def _track(self, gid: str, typ: str) -> _Track:
        tr = self._groups.get(gid)
        if tr is None:
            tr = self._groups[gid] = _Track(typ)
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(gid)
            tr.type = typ
        return tr

    def _sample(self, tr: _Track, g, t: int, catalog) -> None:
        if g is None:
            holdings, epoch = {}, -1
        else:
            holdings, epoch = self.holdings(tr, g, catalog), epoch_of(g)
        if tr.samples:
            last = tr.samples[-1]
            if last[2] == holdings:
                return
        tr.samples.append((t, epoch, holdings))

    def holdings(self, tr: Optional[_Track], g, catalog) -> Optional[dict]:
        """member id -> (owns text, pending text) as the group stands; None above MAX_DRAWN
        members. Texts are reused from the track's cache while an assignment is unchanged."""
        if len(g.members) > MAX_DRAWN:
            return None
        cache = tr.cache if tr is not None else {}
        out = {}
        if isinstance(g, ClassicGroup):
            for mid, mb in g.members.items():
                got = cache.get(mid)
                if got is None or got[0] is not mb.assignment:
                    got = cache[mid] = (mb.assignment,
                                        (_classic_assignment(g, mb.assignment)[0], ""))
                out[mid] = got[1]
                if tr is not None:
                    tr.labels[mid] = mb.client_id
        else:
            text = (_consumer_texter(g, catalog) if isinstance(g, ConsumerGroup)
                    else (lambda units, g=g: _connect_text(g, units)))
            for mid in g.members:
                a = g.assignment_of(mid)
                if a is None:
                    continue
                got = cache.get(mid)
                if got is None or got[0] is not a:
                    got = cache[mid] = (a, (text(a.assigned)[0],
                                            text(a.pending_revocation)[0]))
                out[mid] = got[1]
                if tr is not None:
                    meta = g.members[mid]
                    tr.labels[mid] = getattr(getattr(meta, "meta", meta), "client_id", "")
        if tr is not None:
            for mid in [m for m in cache if m not in g.members]:
                del cache[mid]
            if len(tr.labels) > 4 * MAX_ROWS:
                keep = set(g.members)
                for s in tr.samples:
                    if s[2]:
                        keep.update(s[2])
                for mid in [m for m in tr.labels if m not in keep]:
                    del tr.labels[mid]
        return out

    # ------------------------------------------------------------------ the picture's data
    def observe(self, group_id: str, g, catalog) -> _Track:
        """Sample the group as it is now (a page or the API looks at it), so that the
        timeline ends with what members hold now even when no event said it (a member's
        reconciliation step). A group without a history gets one, as the least recently
        changed (the first dropped)."""
        tr = self._groups.get(group_id)
        if tr is None:
            while len(self._groups) >= self.max_groups:
                self._groups.popitem(last=False)
            tr = self._groups[group_id] = _Track(g.TYPE)
            self._groups.move_to_end(group_id, last=False)
        self._sample(tr, g, int(self.clock() * 1000), catalog)
        return tr

    def timeline(self, group_id: str) -> Optional[dict]:
        """What the timeline draws, from the samples and events kept (None: no history):

            {"t0": ms, "t1": ms, "rows": [{"member", "label", "present",
               "bars": [{"t0", "t1", "owns", "pending", "open"}],
               "marks": [{"t", "kind", "reason"}]}],
             "rebalances": [{"t", "kind", "epoch", "reason", "member"}],
             "undrawn": [{"t0", "t1"}], "hidden_rows": n}

        t0 and t1 are a little before the first and after the last sample or event; a bar
        of the last sample is "open"
        (still held: it runs on past t1). "undrawn": spans where the group had more than
        MAX_DRAWN members (not sampled)."""
        tr = self._groups.get(group_id)
        if tr is None:
            return None
        points = [(s[0], s[2]) for s in tr.samples]
        events = list(tr.events)
        times = [t for t, _ in points] + [t for t, _ in events]
        if not times:
            return None
        first, last = min(times), max(times)
        pad = max(1000, (last - first) // 12)
        t0, t1 = first - pad, last + pad
        now = points[-1][1] if points else None
        order: list = []
        seen: set = set()
        for _, h in points:
            for mid in (h or ()):
                if mid not in seen:
                    seen.add(mid)
                    order.append(mid)
        hidden = max(0, len(order) - MAX_ROWS)
        if hidden:
            # the members of now first, then the most recently seen others
            cur = [mid for mid in order if now and mid in now]
            gone = [mid for mid in order if not (now and mid in now)]
            order = (cur + gone[::-1])[:MAX_ROWS]
        member_marks: dict = {}
        for t, ev in events:
            if ev.member and ev.kind in (lc.MEMBER_JOINED, lc.MEMBER_LEFT, lc.MEMBER_EXPIRED,
                                         lc.MEMBER_FENCED, lc.STATIC_REPLACED):
                member_marks.setdefault(ev.member, []).append(
                    {"t": t, "kind": ev.kind, "reason": ev.reason})
        rows = []
        for mid in order:
            bars: list = []
            cur = None
            for t, h in points:
                v = h.get(mid) if h is not None else None
                if cur is not None and v == cur[2]:
                    continue
                if cur is not None:
                    bars.append({"t0": cur[0], "t1": t, "owns": cur[2][0],
                                 "pending": cur[2][1], "open": False})
                cur = None if v is None else (t, None, v)
            if cur is not None:
                bars.append({"t0": cur[0], "t1": t1, "owns": cur[2][0], "pending": cur[2][1],
                             "open": True})
            rows.append({"member": mid, "label": tr.labels.get(mid, ""),
                         "present": bool(now and mid in now), "bars": bars,
                         "marks": member_marks.get(mid, [])})
        undrawn = []
        for i, (t, h) in enumerate(points):
            if h is None:
                undrawn.append({"t0": t, "t1": points[i + 1][0] if i + 1 < len(points) else t1})
        rebalances = [{"t": t, "kind": ev.kind, "epoch": ev.epoch, "reason": ev.reason,
                       "member": ev.member}
                      for t, ev in events if ev.kind in (lc.REBALANCE_STARTED,
                                                         lc.REBALANCE_COMPLETED,
                                                         lc.ASSIGNMENT_COMPUTED)]
        return {"t0": t0, "t1": t1, "rows": rows, "rebalances": rebalances,
                "undrawn": undrawn, "hidden_rows": hidden}
