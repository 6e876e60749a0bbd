"""The node's shards: N of them, each a ShardRuntime with its own log, and the routing of
group requests to them.

    shards = ShardSet(RuntimeConfig(data_dir=..., shards=50), topics=TopicCatalog(...))
    await shards.start()                      # load every shard
    response = await shards.submit(request, version, client_id, client_host)
    await shards.close()

A group lives on shard ``shard_of(group_id)``: the group id's Java ``String.hashCode``, made
non-negative as Kafka does, modulo the number of shards — the same arithmetic Kafka uses to
pick a group's __consumer_offsets partition, so with the same count a group lands on the
same numbered shard. Shard n keeps its log in ``<data_dir>/__consumer_offsets-<n>``.

Requests naming one group go to its shard. Requests naming several (DescribeGroups,
ConsumerGroupDescribe, ConnectGroupDescribe, OffsetFetch v8+, DeleteGroups, and
DescribeConfigs / IncrementalAlterConfigs by resource name) are split by shard, run
concurrently, and their answers merged in the order the groups were asked; ListGroups asks
every shard.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import msgspec

from groupcoord.groups.errors import error_response
from groupcoord.groups.shard import on_catalog_change
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import api_keys as K
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.shard_runtime import ShardRuntime, ShardState, wall_clock_ms
from groupcoord.runtime.stores import FileStore

__all__ = ["ShardSet", "ShardLoadError", "shard_for", "java_string_hash", "GROUP_APIS"]

log = logging.getLogger("groupcoord.runtime")

# api keys routed to the shards: those naming one group, and those split by group (or, for
# ListGroups, asked of every shard). tests/test_coord_registry.py: exactly registry.py's keys.
SINGLE_GROUP_APIS = (K.OFFSET_COMMIT, K.JOIN_GROUP, K.HEARTBEAT, K.LEAVE_GROUP, K.SYNC_GROUP,
                     K.OFFSET_DELETE, K.CONSUMER_GROUP_HEARTBEAT, K.CONNECT_GROUP_HEARTBEAT,
                     K.CONNECT_GROUP_PREPARE_ASSIGNMENT, K.CONNECT_GROUP_INSTALL_ASSIGNMENT)
MULTI_GROUP_APIS = (K.OFFSET_FETCH, K.DESCRIBE_GROUPS, K.LIST_GROUPS, K.DESCRIBE_CONFIGS,
                    K.DELETE_GROUPS, K.INCREMENTAL_ALTER_CONFIGS, K.CONSUMER_GROUP_DESCRIBE,
                    K.CONNECT_GROUP_DESCRIBE)
GROUP_APIS = frozenset(SINGLE_GROUP_APIS + MULTI_GROUP_APIS)
_SINGLE = frozenset(SINGLE_GROUP_APIS)


class ShardLoadError(RuntimeError):
    """A shard could not load for a reason other than a corrupt log (which only fails that
    shard): the node does not start."""


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit signed wrap-around)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def _hash_cached(group_id: str) -> int:
    return java_string_hash(group_id)


def shard_for(group_id: str, shards: int) -> int:
    h = _hash_cached(group_id)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0.
    return (0 if h == -(1 << 31) else abs(h)) % shards


class ShardSet:
    def __init__(self, config: Optional[RuntimeConfig] = None,
                 topics: Optional[TopicCatalog] = None, *,
                 clock: Callable[[], int] = wall_clock_ms, store=None,
                 on_fenced: Optional[Callable[[int, int], None]] = None,
                 lease_check: Optional[Callable[[int], bool]] = None):
        # store: runtime.stores.FileStore (default: config.data_dir) or PgStore (cluster
        # mode: shards load when the lease glue says, load_shard(index, epoch)).
        # on_fenced(index, epoch): a shard's write was refused, its lease is gone (unloaded).
        # lease_check(index): may the node answer the shard's requests at this instant
        # (cluster mode; checked per request, see ShardRuntime.submit_nowait).
        self.config = config or RuntimeConfig()
        self.store = store if store is not None else FileStore(self.config.data_dir)
        self._lease_check = lease_check
        self.topics = topics if topics is not None else TopicCatalog()
        self.clock = clock
        self._io_pool = ThreadPoolExecutor(max(1, self.config.io_threads),
                                           thread_name_prefix="groupcoord-io")
        self._cpu_pool = ThreadPoolExecutor(max(1, self.config.assignor_threads),
                                            thread_name_prefix="groupcoord-assign")
        n = self.config.shards
        self.shards = [ShardRuntime(i, self.shard_dir(i), self.config, self.topics,
                                    clock=clock, io_pool=self._io_pool,
                                    cpu_pool=self._cpu_pool, store=self.store,
                                    on_fenced=on_fenced, lease_check=lease_check)
                       for i in range(n)]
        self._n = n
        self._routes = {k: self._single for k in SINGLE_GROUP_APIS}
        self._routes.update({
            K.OFFSET_FETCH: self._offset_fetch,
            K.LIST_GROUPS: self._list_groups,
            K.DESCRIBE_GROUPS: functools.partial(self._describe, "groups"),
            K.CONSUMER_GROUP_DESCRIBE: functools.partial(self._describe, "group_ids"),
            K.CONNECT_GROUP_DESCRIBE: functools.partial(self._describe, "group_ids"),
            K.DELETE_GROUPS: self._delete_groups,
            K.DESCRIBE_CONFIGS: functools.partial(self._configs, "results"),
            K.INCREMENTAL_ALTER_CONFIGS: functools.partial(self._configs, "responses")})

    def shard_dir(self, index: int) -> str:
        return self.store.where(index)

    def shard_of(self, group_id: str) -> int:
        return shard_for(group_id, self._n)

    @staticmethod
    def serves(api_key: int) -> bool:
        return api_key in GROUP_APIS

    # ------------------------------------------------------------------ lifecycle
    async def start(self, shards=None) -> None:
        """Load the given shards (default: all) concurrently; returns when each is ACTIVE or,
        if its log is corrupt, FAILED (``failed_shards()``: its groups get
        COORDINATOR_NOT_AVAILABLE, the other shards serve; the shard logged one line). Any
        other load error (an OSError, a bug) raises ShardLoadError naming the shard."""
        if self.store.kind == "file":
            os.makedirs(self.config.data_dir, exist_ok=True)
        t0 = time.perf_counter()
        todo = [self.shards[i] for i in (range(self._n) if shards is None else shards)]
        results = await asyncio.gather(*(s.load() for s in todo), return_exceptions=True)
        errors = [(s, r) for s, r in zip(todo, results)
                  if isinstance(r, BaseException) and s.corrupt is None]
        if errors:
            s, exc = errors[0]
            await self.close()
            raise ShardLoadError("shard %d (%s) failed to load: %s"
                                 % (s.index, s.directory, exc)) from exc
        failed = [s for s in todo if s.corrupt is not None]
        records = sum(getattr(s.load_stats, "records_read", 0) for s in todo
                      if s.corrupt is None)
        log.info("loaded %d shard(s) from %s: %d records in %.2f s", len(todo) - len(failed),
                 self.store, records, time.perf_counter() - t0)
        if failed:
            log.error("%d of %d shard(s) not serving, their logs are corrupt (each named "
                      "above): %s; `groupcoord log verify %s` lists every problem",
                      len(failed), len(todo), ", ".join(str(s.index) for s in failed),
                      self.config.data_dir)

    async def load_shard(self, index: int, epoch: int = 0) -> None:
        """Load one shard (cluster mode: as the lease holder at ``epoch``; LeaseLostError
        when the store says the lease is not ours)."""
        rt = self.shards[index]
        rt.epoch = epoch
        await rt.load()

    async def unload_shard(self, index: int) -> None:
        """Stop serving one shard: pending writes finished, waiting requests answered,
        the log closed; its requests get NOT_COORDINATOR from now on."""
        await self.shards[index].close()

    def loaded(self, index: int) -> bool:
        return self.shards[index].state is ShardState.ACTIVE

    async def set_topics(self, catalog: TopicCatalog) -> None:
        """Install a new topic catalog on every shard: consumer groups whose subscribed
        topics changed bump their epoch (``Shard.update_topics``); on each live shard,
        classic groups subscribed to a changed topic rebalance and a deleted topic's
        committed offsets are deleted (``shard.on_catalog_change``). A shard not live now
        does only the first, when it loads: Kafka's offsets cleanup is as best-effort."""
        old, self.topics = self.topics, catalog
        for s in self.shards:
            s.set_topics(catalog)
            if s.state is ShardState.ACTIVE:
                now = s.clock()
                for result in on_catalog_change(s.shard, old, catalog, now):
                    if s.state is not ShardState.ACTIVE:    # a failed write failed it
                        break
                    # As ShardRuntime.set_topics applies update_topics' Result.
                    s._process(result, now, event="topic change")

    async def flush(self) -> None:
        await asyncio.gather(*(s.flush() for s in self.shards))

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.shards), return_exceptions=True)
        self._io_pool.shutdown(wait=True)
        self._cpu_pool.shutdown(wait=True)

    # ------------------------------------------------------------------ requests
    async def submit(self, request, version: int, client_id: str = "",
                     client_host: str = ""):
        route = self._routes.get(request.API_KEY)
        if route is None:
            return error_response(request, version, ErrorCode.UNSUPPORTED_VERSION,
                                  "not a group API")
        return await route(request, version, client_id, client_host)

    def submit_nowait(self, request, version: int, client_id: str = "",
                      client_host: str = ""):
        """-> the response at once when nothing needs waiting for, else an asyncio.Future
        of it (no coroutine or task per request on the hot path: a heartbeat that writes
        nothing is answered synchronously)."""
        key = request.API_KEY
        if key in _SINGLE:
            shard = self.shards[shard_for(request.group_id, self._n)]
            return shard.submit_nowait(request, version, client_id, client_host)
        return asyncio.ensure_future(self.submit(request, version, client_id, client_host))

    async def _single(self, request, version, client_id, client_host):
        shard = self.shards[shard_for(request.group_id, self._n)]
        return await shard.submit(request, version, client_id, client_host)

    async def _fan_out(self, parts: dict, version, client_id, client_host) -> list:
        """parts: shard index -> sub-request; -> responses in shard index order."""
        order = sorted(parts)
        return await asyncio.gather(*(self.shards[i].submit(parts[i], version, client_id,
                                                            client_host) for i in order))

    def _split(self, items, key=None) -> dict:
        """shard index -> the items on it, in request order: group ids, or entries whose
        ``key(entry)`` is the group id (or config resource name) that places them."""
        by: dict = {}
        for it in items:
            by.setdefault(shard_for(it if key is None else key(it), self._n), []).append(it)
        return by

    async def _run_split(self, req, field: str, version, client_id, client_host, key=None):
        """``req`` split by shard on its list ``field``; the parts run concurrently ->
        their responses in shard index order."""
        parts = {i: msgspec.structs.replace(req, **{field: items})
                 for i, items in self._split(getattr(req, field), key).items()}
        return await self._fan_out(parts, version, client_id, client_host)

    async def _describe(self, field: str, req, version, client_id, client_host):
        """DescribeGroups (field "groups") and Consumer/ConnectGroupDescribe ("group_ids")."""
        names = getattr(req, field)
        resps = await self._run_split(req, field, version, client_id, client_host)
        return msgspec.structs.replace(resps[0] if resps else _empty(req, version),
                                       groups=_in_order(names, resps))

    async def _delete_groups(self, req, version, client_id, client_host):
        resps = await self._run_split(req, "groups_names", version, client_id, client_host)
        return msgspec.structs.replace(resps[0] if resps else _empty(req, version),
                                       results=_in_order(req.groups_names, resps, "results"))

    async def _configs(self, field: str, req, version, client_id, client_host):
        """DescribeConfigs / IncrementalAlterConfigs: each resource goes to the shard of its
        name (a GROUP resource's is its group's; the others are refused wherever they go)."""
        resps = await self._run_split(req, "resources", version, client_id, client_host,
                                      key=lambda r: r.resource_name)
        found: dict = {}
        for resp in resps:
            for r in getattr(resp, field):
                found.setdefault((r.resource_type, r.resource_name), []).append(r)
        out = [found[(r.resource_type, r.resource_name)].pop(0) for r in req.resources]
        return msgspec.structs.replace(resps[0] if resps else _empty(req, version),
                                       **{field: out})

    async def _list_groups(self, req, version, client_id, client_host):
        # As a Kafka broker lists the groups of the coordinators it leads: a shard this node
        # does not hold (unloaded: another node's, cluster mode or --processes; or its lease
        # is past its deadline) is left out, not an error. Loading or failed shards still
        # say so (COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE).
        lc = self._lease_check
        held = [i for i, s in enumerate(self.shards)
                if s.state is not ShardState.UNLOADED and (lc is None or lc(i))]
        if not held:
            return _empty(req, version)
        resps = await self._fan_out({i: req for i in held}, version, client_id, client_host)
        groups, code = [], 0
        for r in resps:
            groups.extend(r.groups or ())
            code = code or r.error_code
        return msgspec.structs.replace(resps[0], error_code=code, groups=groups)

    async def _offset_fetch(self, req, version, client_id, client_host):
        if req.groups is None or version < 8:
            shard = self.shards[shard_for(req.group_id, self._n)]
            return await shard.submit(req, version, client_id, client_host)
        resps = await self._run_split(req, "groups", version, client_id, client_host,
                                      key=lambda g: g.group_id)
        return msgspec.structs.replace(resps[0] if resps else _empty(req, version),
                                       groups=_in_order([g.group_id for g in req.groups],
                                                        resps))

    # ------------------------------------------------------------------ inspection
    def states(self) -> dict:
        return {s.index: s.state for s in self.shards}

    def active(self) -> bool:
        return all(s.state is ShardState.ACTIVE for s in self.shards)

    def failed_shards(self) -> dict:
        """index -> the corruption that keeps that shard FAILED (see ``start``)."""
        return {s.index: s.corrupt for s in self.shards if s.corrupt is not None}


def _in_order(names, resps, field: str = "groups") -> list:
    """The per-group entries of the shards' responses, in the order the groups were asked."""
    found: dict = {}
    for r in resps:
        for g in getattr(r, field) or ():
            found.setdefault(g.group_id, []).append(g)
    out = []
    for n in names:
        lst = found.get(n)
        if lst:
            out.append(lst.pop(0))
    return out


def _empty(req, version):
    return error_response(req, version, ErrorCode.NONE)
