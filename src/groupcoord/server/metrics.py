"""Metrics of a node (Prometheus, through prometheus-client) and its health endpoints, served on
``serve --metrics-port`` by http.py.

    metrics = Metrics(shards, owned=lambda: range(50))
    metrics.watch_shards()            # before shards.start(): the loads are timed too
    metrics.watch_server(server)      # before server.start(): every connection counts
    http = await serve_http(metrics, "127.0.0.1", 9404)     # /metrics /healthz /readyz
    ...
    await http.close(); metrics.stop()

Nothing here slows the request path by more than a few plain Python operations: counting is
into plain ints, dicts and lists, and a custom Collector turns them into metric families when
Prometheus scrapes (docs/operations.md, "Metrics", lists every metric):

* requests: the connection layer (stream.py) keeps, per server, a dict
  (api key << 16) + error code -> [latency bucket counts..., sum of latencies]
  (RequestStats). A request is counted when its answer is handed to the connection's output
  (the flush of its loop turn, or later behind an earlier answer still waiting): the latency
  runs from the start of the loop turn that took its frame to then; the error is the
  response's top-level error code, or, for a response that only has per-item codes
  (OffsetCommit, DescribeGroups, ...), the first non-zero one among its first items.
* group commits and shard loads: the runtime's hooks (ShardRuntime.observer) call
  ``flushed`` and ``loaded``.
* rebalances: ``result`` is the runtime's hook for every Result with records, before they are
  applied. A rebalance is counted per group whose records start one (rebalances_in): a classic
  RebalanceStarted event, or a new group epoch (ConsumerGroupMetadata /
  ConnectWorkerGroupMetadata with a value); its reason comes from what the Result answers
  (rebalance_reason: the request, or the timer that fired, and the group as it stood).
* groups, members, shards, connections: computed at scrape time from the shards' state, on
  the event loop (nothing changes meanwhile); the scrape reads, never mutates. The group
  counts are kept from one scrape to the next: only the groups that a Result with records
  was about since (every change of group state is one; the hook notes their ids) are
  counted again, or every group of a shard that reloaded or had a shard-wide change (a
  catalog change, the retention sweep), so a scrape costs what changed, not what exists;
  /metrics counts them in slices of COUNT_CHUNK groups, giving the loop back in between.
* event loop lag: a timer every LAG_PERIOD_S measures how late it fires.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from bisect import bisect_left
from typing import Callable, Iterable, Optional

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector,
                               PlatformCollector, ProcessCollector, generate_latest)
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from groupcoord.groups import timers as T
from groupcoord.groups.classic.events import RebalanceStarted
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.protocol import api_keys as K
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime.shard_state import ShardState
from groupcoord.runtime.shards import SINGLE_GROUP_APIS
from groupcoord.server.http import HttpRequest, HttpResponse, HttpServer

__all__ = ["Metrics", "RequestStats", "serve_http", "rebalances_in", "rebalance_reason",
           "readiness", "item_error", "API_NAMES", "REASONS", "LATENCY_BUCKETS"]

log = logging.getLogger("groupcoord.metrics")

# Histogram bounds (seconds unless said). Requests: a steady heartbeat is answered in tens of
# microseconds, a JoinGroup may wait at the barrier for minutes.
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
APPEND_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                  0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RECORDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)
LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_PERIOD_S = 0.25
COUNT_CHUNK = 500                   # groups counted between two yields to the loop

# api key -> Kafka's name of the API ("Heartbeat", "ConsumerGroupHeartbeat").
API_NAMES = {c.API_KEY: c.__name__[:-len("Request")] for c in vars(m).values()
             if isinstance(c, type) and getattr(c, "KIND", None) == "request"
             and hasattr(c, "API_KEY")}

# The states every group type has (a zero is exported for each, so that a dashboard sees 0
# rather than no series once the last group leaves a state).
_STATES = {"classic": ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable"),
           "consumer": ("Empty", "Assigning", "Reconciling", "Stable"),
           "connect": ("Empty", "Assigning", "Reconciling", "Stable")}

# The reasons of groupcoord_rebalances_total (docs/operations.md explains each).
_TIMER_REASONS = {
    T.CLASSIC_SESSION: "session_timeout", T.CONSUMER_SESSION: "session_timeout",
    T.CONNECT_SESSION: "session_timeout",
    T.CLASSIC_SYNC: "sync_timeout", T.CLASSIC_JOIN: "join_timeout",
    T.CONSUMER_REVOCATION: "revocation_timeout", T.CONNECT_REVOCATION: "revocation_timeout",
    T.CONNECT_ASSIGNMENT: "assignment_timeout",
    T.CONNECT_DELAYED_REBALANCE: "delayed_rebalance",
    T.CONSUMER_ASSIGNMENT: "assignment_interval",
}
REASONS = (("join", "rejoin", "leave", "subscription_change", "connectors_change",
            "metadata_change", "config_change", "assignment_unwritable")
           + tuple(sorted(set(_TIMER_REASONS.values()))) + ("other",))

# Records whose value starts a new group epoch of a modern group -> the group type.
_EPOCH_KEYS = {m.ConsumerGroupMetadataKey: "consumer", m.ConnectWorkerGroupMetadataKey: "connect"}
_NEVER_REBALANCE = frozenset((K.OFFSET_COMMIT, K.OFFSET_FETCH, K.OFFSET_DELETE,
                              K.DELETE_GROUPS))
# Requests whose Result changes the one group they name (nothing else of the shard).
_ONE_GROUP = frozenset(SINGLE_GROUP_APIS)
_ALL = object()                     # every group of the shard may have changed
_MAX_CHANGED = 4096                 # more changed groups of a shard than this: recount it all


# --------------------------------------------------------------------------- rebalances
def rebalances_in(records) -> dict:
    """group id -> group type of each group that a Result's records start a rebalance of:
    a classic RebalanceStarted (emitted only when the group was not already preparing one),
    or a new group epoch of a consumer or connect group (the records of a new epoch are what
    asks for a new target assignment). A group counts once per Result, as the type its last
    such record says (a conversion writes one of each)."""
    found: dict = {}
    for r in records:
        t = type(r)
        if t is RebalanceStarted:
            found[r.group_id] = "classic"
        elif t is Record:
            typ = _EPOCH_KEYS.get(type(r.key))
            if typ is not None and r.value is not None:
                found[r.key.group_id] = typ
    return found


def rebalance_reason(groups: dict, group_id: str, records, request=None, event=None) -> str:
    """Why a Result starts a rebalance of group_id: from the request it answers (and the group
    as it stood before it: ``groups`` is the shard's group table, not yet changed) or the
    event it handles (a TimerKey that fired; "topic change"; None with no request: the
    catalog check of a shard that has just loaded)."""
    if request is None:
        if isinstance(event, TimerKey):
            return _TIMER_REASONS.get(event.kind, "other")
        if event is None or event == "topic change":
            return "metadata_change"
        return "other"
    key = request.API_KEY
    if key == K.LEAVE_GROUP:
        return "leave"
    if key == K.INCREMENTAL_ALTER_CONFIGS:
        return "config_change"
    if key == K.SYNC_GROUP:
        return "assignment_unwritable"     # the leader's assignment record cannot be stored
    g = groups.get(group_id)
    if key in (K.CONSUMER_GROUP_HEARTBEAT, K.CONNECT_GROUP_HEARTBEAT):
        if request.member_epoch < 0:
            return "leave"
        if request.member_epoch == 0 or g is None or request.member_id not in g.members:
            return "join"
        if key == K.CONNECT_GROUP_HEARTBEAT and any(
                type(r) is Record and type(r.key) is m.ConnectWorkerGroupConnectorsTasksMetadataKey
                for r in records):
            return "connectors_change"
        return "subscription_change"
    if key == K.JOIN_GROUP:
        members = getattr(g, "members", None) or {}
        mid = request.member_id
        if mid not in members and request.group_instance_id:
            mid = getattr(g, "static_members", {}).get(request.group_instance_id, mid)
        mb = members.get(mid)
        if mb is None:
            return "join"
        old = getattr(mb, "protocols", None)
        if old is None:                     # a classic member of a consumer/connect group
            return "subscription_change"
        new = tuple((p.name, bytes(p.metadata)) for p in request.protocols)
        return "subscription_change" if new != tuple(old) else "rejoin"
    return "other"


# --------------------------------------------------------------------------- requests
def item_error(resp, depth: int = 0) -> int:
    """The first non-zero error code among the first items of a response that has no
    top-level one (OffsetCommit's partitions, DescribeGroups' groups, ...), 0 if none; at most
    32 items per list, two levels down, so a huge answer costs no more than a small one."""
    for name in getattr(type(resp), "__struct_fields__", ()):
        v = getattr(resp, name)
        if type(v) is not list or not v:
            continue
        for it in v[:32]:
            c = getattr(it, "error_code", None)
            if c is None:
                c = item_error(it, depth + 1) if depth < 1 else 0
            if c:
                return c
    return 0


class RequestStats:
    """The connections' request counts (stream.py writes them; the collector reads them):
    ``table``: (api key << 16) + (error code & 0xFFFF) -> [count per latency bucket
    (len(bounds) + 1, the last is +Inf), sum of latencies]. One int key, not a tuple, and
    plain Python on purpose: the request path does a few list and dict operations, no lock
    and no prometheus-client call."""
    __slots__ = ("table", "bounds")

    def __init__(self, bounds=LATENCY_BUCKETS):
        self.table: dict = {}
        self.bounds = tuple(bounds)

    item_error = staticmethod(item_error)


class PlainHistogram:
    """Bucket counts and a sum, observed without locks (on the loop only)."""
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1      # le: a value on a bound is in it
        self.sum += v


def _buckets(bounds, counts) -> list:
    """Prometheus' cumulative buckets from per-bucket counts."""
    out, acc = [], 0
    for b, c in zip(bounds, counts):
        acc += c
        out.append((_le(b), acc))
    acc += counts[len(bounds)]
    out.append(("+Inf", acc))
    return out


def _le(b) -> str:
    return repr(float(b))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# --------------------------------------------------------------------------- health
def readiness(states: dict, owned: Optional[Iterable[int]]) -> dict:
    """Whether every shard the node owns is loaded. states: shard index -> ShardState;
    owned: the indexes this node owns (all of them on a single node; those it holds a lease
    on in cluster mode), None while it cannot say (cluster mode before the node joined)."""
    if owned is None:
        return {"ready": False, "reason": "not a member of the cluster yet", "owned": 0,
                "loaded": 0, "not_loaded": {}}
    owned = sorted(owned)
    not_loaded = {i: states[i].value for i in owned if states.get(i) is not ShardState.ACTIVE}
    return {"ready": not not_loaded, "owned": len(owned),
            "loaded": len(owned) - len(not_loaded),
            "not_loaded": {str(i): s for i, s in not_loaded.items()},
            **({} if not not_loaded else
               {"reason": "%d owned shard(s) not loaded" % len(not_loaded)})}


# --------------------------------------------------------------------------- the metrics
class Metrics:
    """Everything /metrics shows, for one node. ``owned()``: the shard indexes the node owns
    (None: it cannot say yet); default every shard."""

    def __init__(self, shards, owned: Optional[Callable[[], Optional[Iterable[int]]]] = None,
                 process_collectors: bool = True):
        self.shards = shards
        self.owned = owned or (lambda: range(len(shards.shards)))
        self.server = None
        self.requests = RequestStats()
        self.rebalances: dict = {}          # (group type, reason) -> count
        self.append = PlainHistogram(APPEND_BUCKETS)
        self.flush_records = PlainHistogram(RECORDS_BUCKETS)
        self.shard_load = PlainHistogram(LOAD_BUCKETS)
        self.loop_lag = PlainHistogram(LAG_BUCKETS)
        self._lag_timer: Optional[asyncio.TimerHandle] = None
        self._lag_due = 0.0
        self._hook_failed = False
        # The groups gauges, kept between scrapes (_GroupCounts per shard index) and
        # brought up to date from what changed since: shard index -> the group ids a Result
        # with records was about (every change of group state is one), or _ALL.
        self._watching = False
        self._changed: dict = {}
        self._group_cache: dict = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    # ------------------------------------------------------------------ wiring
    def watch_shards(self) -> None:
        """Install the runtime hooks on every shard (before they load)."""
        for rt in self.shards.shards:
            rt.observer = self
        self._watching = True

    def watch_server(self, server) -> None:
        """Count the server's requests (before it accepts: a connection looks once)."""
        self.server = server
        server.stats = self.requests

    def start(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        """Start the event loop lag probe."""
        loop = loop or asyncio.get_running_loop()
        self._lag_due = time.perf_counter() + LAG_PERIOD_S
        self._lag_timer = loop.call_later(LAG_PERIOD_S, self._lag_tick, loop)

    def stop(self) -> None:
        if self._lag_timer is not None:
            self._lag_timer.cancel()
            self._lag_timer = None

    def _lag_tick(self, loop) -> None:
        now = time.perf_counter()
        self.loop_lag.observe(max(0.0, now - self._lag_due))
        self._lag_due = now + LAG_PERIOD_S
        self._lag_timer = loop.call_later(LAG_PERIOD_S, self._lag_tick, loop)

    # ------------------------------------------------------------------ runtime hooks
    def result(self, rt, result, request, event) -> None:
        """ShardRuntime's hook: a Result with records, before it is applied."""
        try:
            self._note_changed(rt.index, request, event)
            if request is not None and request.API_KEY in _NEVER_REBALANCE:
                return
            found = rebalances_in(result.records)
            if not found:
                return
            groups = rt.shard.groups
            for gid, typ in found.items():
                k = (typ, rebalance_reason(groups, gid, result.records, request, event))
                self.rebalances[k] = self.rebalances.get(k, 0) + 1
        except Exception:                   # a bug here must not fail the request
            if not self._hook_failed:
                self._hook_failed = True
                log.exception("metrics: the runtime hook failed (logged once)")

    def _note_changed(self, index: int, request, event) -> None:
        got = self._changed.get(index)
        if got is _ALL:
            return
        if request is not None:
            key = request.API_KEY
            gids = ((request.group_id,) if key in _ONE_GROUP
                    else request.groups_names if key == K.DELETE_GROUPS else None)
        elif isinstance(event, TimerKey) and event.group_id:
            gids = (event.group_id,)
        else:
            gids = None                     # a catalog change, the retention sweep, ...
        if gids is None or (got is not None and len(got) >= _MAX_CHANGED):
            self._changed[index] = _ALL     # (bounded while nobody scrapes)
        elif got is None:
            self._changed[index] = set(gids)
        else:
            got.update(gids)

    def flushed(self, seconds: float, records: int) -> None:
        """ShardRuntime's hook: a group commit is durable."""
        self.append.observe(seconds)
        self.flush_records.observe(records)

    def loaded(self, index: int, seconds: float) -> None:
        """ShardRuntime's hook: a shard loaded."""
        self.shard_load.observe(seconds)

    # ------------------------------------------------------------------ group counts
    def _group_work(self, rt) -> Optional[tuple]:
        """(the shard's _GroupCounts, the group ids to count again) for a serving shard;
        None (and its counts dropped) for one that is not."""
        sh = rt.shard
        if rt.state is not ShardState.ACTIVE or sh is None:
            self._group_cache.pop(rt.index, None)
            return None
        gc = self._group_cache.get(rt.index)
        what = self._changed.pop(rt.index, None)
        if gc is None or gc.shard is not sh or what is _ALL or not self._watching:
            gc = self._group_cache[rt.index] = _GroupCounts(sh)
            what = sh.groups
        return gc, list(what or ())

    def count_groups(self) -> None:
        """Bring the group counts up to date, at once."""
        for rt in self.shards.shards:
            w = self._group_work(rt)
            if w is not None:
                w[0].update(w[1])

    async def count_groups_async(self, chunk: int = COUNT_CHUNK) -> None:
        """The same, giving the loop back every ``chunk`` groups, so that counting every
        group again (after a mass rebalance, a reload) never holds it for long. A group that
        changes meanwhile is noted again by the hook and counted at the next pass."""
        done = 0
        for rt in self.shards.shards:
            w = self._group_work(rt)
            if w is None:
                continue
            gc, ids = w
            for i in range(0, len(ids), chunk):
                if done >= chunk:
                    await asyncio.sleep(0)
                    done = 0
                part = ids[i:i + chunk]
                gc.update(part)
                done += len(part)

    # ------------------------------------------------------------------ reading
    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    async def exposition_async(self) -> bytes:
        """exposition() after the groups were counted in slices (what /metrics serves)."""
        await self.count_groups_async()
        return generate_latest(self.registry)

    def readiness(self) -> dict:
        return readiness(self.shards.states(), self.owned())

    def health(self) -> dict:
        srv = self.server
        bound = [] if srv is None else [
            {"protocol": b.listener.protocol, "address": "%s:%d" % tuple(b.address[:2])}
            for b in srv.bound if b.address is not None]
        serving = bool(bound) and not getattr(srv, "stopping", True)
        return {"healthy": serving, "listeners": bound,
                "connections": 0 if srv is None else len(srv.connections),
                **({} if serving else {"reason": "stopping" if bound else "not listening"})}


class _Collector:
    """The node's own metric families, built from the plain counters at scrape time."""

    def __init__(self, metrics: Metrics):
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        mt = self.m
        yield from self._groups()
        c = CounterMetricFamily("groupcoord_rebalances",
                                "Rebalances started (classic) and new group epochs "
                                "(consumer, connect), by group type and reason",
                                labels=["type", "reason"])
        for (typ, reason), n in sorted(mt.rebalances.items()):
            c.add_metric([typ, reason], n)
        yield c
        yield from self._requests()
        yield _hist("groupcoord_log_append_latency_seconds",
                    "Group commits: from handing the records appended in one loop turn to the "
                    "log (write + fsync, or the store's transaction) to their being durable",
                    mt.append)
        yield _hist("groupcoord_log_flush_records",
                    "Group commits: records made durable by one commit", mt.flush_records)
        states = mt.shards.states()
        owned = mt.owned()
        g = GaugeMetricFamily("groupcoord_shards_loaded", "Shards loaded and serving (ACTIVE)")
        g.add_metric([], sum(1 for s in states.values() if s is ShardState.ACTIVE))
        yield g
        g = GaugeMetricFamily("groupcoord_shards_owned",
                              "Shards this node owns (every shard on a single node; those it "
                              "holds a lease on in cluster mode)")
        g.add_metric([], 0 if owned is None else len(list(owned)))
        yield g
        yield _hist("groupcoord_shard_load_seconds", "Shard loads: open, recover and replay "
                    "a shard's log", mt.shard_load)
        g = GaugeMetricFamily("groupcoord_connections", "Open client (Kafka protocol) "
                              "connections")
        g.add_metric([], 0 if mt.server is None else len(mt.server.connections))
        yield g
        yield _hist("groupcoord_event_loop_lag_seconds",
                    "How late a %g s timer of the event loop fires" % LAG_PERIOD_S, mt.loop_lag)

    def _groups(self):
        mt = self.m
        mt.count_groups()               # what changed since (little after count_groups_async)
        counts: dict = {}
        members: dict = {}
        for gc in mt._group_cache.values():
            for k, n in gc.counts.items():
                counts[k] = counts.get(k, 0) + n
            for k, n in gc.members.items():
                members[k] = members.get(k, 0) + n
        g = GaugeMetricFamily("groupcoord_groups", "Groups by type and state",
                              labels=["type", "state"])
        for typ, states in _STATES.items():
            for st in states:
                counts.setdefault((typ, st), 0)
        for (typ, st), n in sorted(counts.items()):
            g.add_metric([typ, st], n)
        yield g
        g = GaugeMetricFamily("groupcoord_group_members", "Members of the groups, by group type",
                              labels=["type"])
        for typ in _STATES:
            members.setdefault(typ, 0)
        for typ, n in sorted(members.items()):
            g.add_metric([typ], n)
        yield g

    def _requests(self):
        st = self.m.requests
        c = CounterMetricFamily("groupcoord_requests",
                                "Requests answered, by API and error (the response's top-level "
                                "error code, else the first non-zero per-item one)",
                                labels=["api", "error"])
        by_api: dict = {}
        nb = len(st.bounds) + 1
        for k, row in sorted(list(st.table.items())):
            key, code = k >> 16, k & 0xFFFF
            if code >= 0x8000:
                code -= 0x10000             # error codes are int16 (UNKNOWN_SERVER_ERROR -1)
            api = API_NAMES.get(key, "unknown")
            c.add_metric([api, _error_name(code)], sum(row[:nb]))
            acc = by_api.get(api)
            if acc is None:
                by_api[api] = list(row)
            else:
                for i, v in enumerate(row):
                    acc[i] += v
        yield c
        h = HistogramMetricFamily("groupcoord_request_latency_seconds",
                                  "From the loop turn that took a request's frame to its "
                                  "answer being ready to send, by API", labels=["api"])
        for api, row in sorted(by_api.items()):
            h.add_metric([api], _buckets(st.bounds, row[:nb]), sum_value=row[nb])
        yield h


class _GroupCounts:
    """One shard's groups by (type, state) and members by type, each group's share kept so
    that a change of some groups is counted again for those alone. Reads, never mutates."""
    __slots__ = ("shard", "of", "counts", "members")

    def __init__(self, shard):
        self.shard = shard
        self.of: dict = {}                  # group id -> ((type, state), type, members)
        self.counts: dict = {}
        self.members: dict = {}

    def update(self, group_ids) -> None:
        groups, of, counts, members = self.shard.groups, self.of, self.counts, self.members
        for gid in group_ids:
            old = of.get(gid)               # ((type, state), type, members)
            if old is not None:
                counts[old[0]] -= 1
                members[old[1]] -= old[2]
            g = groups.get(gid)
            if g is None:
                if old is not None:
                    del of[gid]
                continue
            typ = g.TYPE
            k = (typ, g.state_name())
            n = len(g.members)
            of[gid] = (k, typ, n)
            counts[k] = counts.get(k, 0) + 1
            members[typ] = members.get(typ, 0) + n


def _hist(name: str, doc: str, ph: PlainHistogram) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc)
    h.add_metric([], _buckets(ph.bounds, ph.counts), sum_value=ph.sum)
    return h


# --------------------------------------------------------------------------- HTTP
async def serve_http(metrics: Metrics, host: str, port: int) -> HttpServer:
    """The metrics port: /metrics, /healthz, /readyz and their JSON variants (/healthz.json,
    /readyz.json, or ?format=json), bound and accepting; also starts the lag probe."""
    http = HttpServer(host, port)

    async def page(req: HttpRequest) -> HttpResponse:
        return HttpResponse(200, await metrics.exposition_async(), CONTENT_TYPE_LATEST)
    http.route("/metrics", page)
    for name, fn, key in (("healthz", metrics.health, "healthy"),
                          ("readyz", metrics.readiness, "ready")):
        handler = _health_handler(fn, key)
        http.route("/" + name, handler)
        http.route("/%s.json" % name, _health_handler(fn, key, json_always=True))
    await http.start()
    metrics.start()
    return http


def _health_handler(fn, key: str, json_always: bool = False):
    def handle(req: HttpRequest) -> HttpResponse:
        d = fn()
        status = 200 if d[key] else 503
        if json_always or req.arg("format") == "json":
            return HttpResponse(status, (json.dumps(d, sort_keys=True) + "\n").encode(),
                                "application/json")
        return HttpResponse.text(status, ("ok" if d[key] else "not %s: %s"
                                          % (key, d.get("reason", ""))) + "\n")
    return handle
