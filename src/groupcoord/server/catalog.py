"""The topic catalog's stores and the cluster id.

A single node (a file store) keeps its files in the data directory (CatalogStore and
``load_or_create_cluster_id``); a cluster (a PostgreSQL store) shares one catalog through the
database (PgCatalogStore, below the file layout) and takes its cluster id from the store.

<data-dir>/topics.json   {"version": 1, "topics": [{"name": "orders", "partitions": 6}, ...],
                          "given": [{"name": "orders", "partitions": 6}, ...]}
<data-dir>/cluster-id    one line, a Kafka-style cluster id (22 chars of url-safe base64)

Both are written atomically (write a temporary file, fsync it, rename it over the old one,
fsync the directory), so a crash leaves either the old or the new file, never a torn one.
Topic ids are not stored: ``topic_id_for(name)`` derives the same stable id every time.

At start the topics given on the command line (--topic NAME:PARTITIONS, --topics-file) are
merged into the stored catalog: new names are added, a larger partition count is an increase
(allowed, as kafka-topics --alter), a smaller one is refused with a clear error because
partitions can never be removed (committed offsets and assignments refer to them). "given"
records the specs of the last start: a spec given again unchanged is not applied again, so a
client's CreatePartitions or DeleteTopics since then stands when the node restarts with the
same command line (a topic given as orders:6 and raised to 9 by a client is no "decrease",
one deleted by a client is not created again). Files without "given" read as given nothing.

While serving, clients change the catalog with CreateTopics (server.py), CreatePartitions and
DeleteTopics (``create_partitions`` / ``delete_topics`` below), one change at a time (the
server's catalog lock): plan (node.py, pure), write topics.json atomically, then install the
catalog on the shards (``ShardSet.set_topics``), and only then answer. A change acknowledged is
in the file, so it survives a crash; a change whose write failed is answered
KAFKA_STORAGE_ERROR and changed nothing. A deleted topic leaves the file; its id is derived
from its name, so a topic created again under the name gets the same id (Kafka would give
it a new one): what groups held of it was revoked and its committed offsets were deleted
when it was deleted (groups/shard.py ``on_catalog_change``).

Cluster mode: the catalog is the row of groupcoord_catalog (storage/pg_schema.py, version 2):
``body`` is the JSON above, ``version`` grows by one at every change. A node saves a change
only if the row is still at the version it last read (compare-and-set); a save that lost the
race (another node changed the catalog meanwhile) installs the newer catalog, plans the
client's request again against it and retries, so two nodes creating two topics at once
both succeed, and two creating the same one get one success and one TOPIC_ALREADY_EXISTS
(``store_change``). At start the node merges its --topic/--topics-file into the shared
catalog by the rules above (``PgCatalogStore.merge``); "given" is then the union of what
every node's last start gave (newest count per name), so a node restarting with its
unchanged flags never undoes a client's change made through another node. Other nodes'
changes reach a running node through ``follow_store`` (server/cluster_mode.py calls it every
refresh period).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import uuid
from typing import Iterable, Optional

import msgspec

from groupcoord.groups.limits import validate_topic_name
from groupcoord.groups.topics import Topic, TopicCatalog, topic_id_for
from groupcoord.protocol.api_keys import CREATE_PARTITIONS, DELETE_TOPICS
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.server.topic_admin import (MAX_PARTITIONS, check_catalog_limits,
                                           plan_create_partitions, plan_delete_topics,
                                           timed_out_response)

__all__ = ["TopicSpec", "CatalogError", "CatalogStore", "PgCatalogStore", "parse_topic_arg",
           "load_topics_file", "merge_topics", "load_or_create_cluster_id", "atomic_write",
           "create_partitions", "delete_topics", "store_change", "follow_store"]

log = logging.getLogger("groupcoord.server")

TOPICS_FILE = "topics.json"
CLUSTER_ID_FILE = "cluster-id"
# A shared catalog: attempts of one change that keep losing the compare-and-set (other nodes
# changing the catalog all the time) before it is answered as failed, and the bound on each
# store call (the catalog lock is held meanwhile).
SAVE_ATTEMPTS = 8
STORE_CALL_TIMEOUT_S = 10.0


class CatalogError(ValueError):
    """A topic specification or stored catalog that cannot be used (a startup error)."""


class TopicSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    partitions: int


class _TopicsFile(msgspec.Struct):
    version: int = 1
    topics: list[TopicSpec] = msgspec.field(default_factory=list)
    given: list[TopicSpec] = msgspec.field(default_factory=list)


def _check_spec(spec: TopicSpec, where: str) -> TopicSpec:
    bad = validate_topic_name(spec.name)
    if bad:
        raise CatalogError("%s: %s" % (where, bad))
    if not 1 <= spec.partitions <= MAX_PARTITIONS:
        raise CatalogError("%s: topic %r: partitions must be 1..%d, not %d"
                           % (where, spec.name, MAX_PARTITIONS, spec.partitions))
    return spec


def parse_topic_arg(text: str) -> TopicSpec:
    """'orders:6' -> TopicSpec('orders', 6)."""
    name, sep, parts = text.rpartition(":")
    if not sep:
        raise CatalogError("--topic %r: expected NAME:PARTITIONS" % text)
    try:
        n = int(parts)
    except ValueError:
        raise CatalogError("--topic %r: partitions %r is not an integer" % (text, parts)) \
            from None
    return _check_spec(TopicSpec(name, n), "--topic %s" % text)


def load_topics_file(path: str) -> list:
    """A JSON file [{"name": "orders", "partitions": 6}, ...] -> [TopicSpec]."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise CatalogError("--topics-file %s: %s" % (path, e.strerror or e)) from None
    try:
        specs = msgspec.json.decode(data, type=list[TopicSpec])
    except msgspec.DecodeError as e:
        raise CatalogError("--topics-file %s: %s (expected [{\"name\": ..., \"partitions\": "
                           "...}, ...])" % (path, e)) from None
    return [_check_spec(s, "--topics-file %s" % path) for s in specs]


def merge_topics(stored: TopicCatalog, given: Iterable,
                 previous: Optional[dict] = None, where: str = "the data directory") -> tuple:
    """-> (catalog, changed). Raises CatalogError for a partition decrease or a topic given
    twice with different counts. previous: name -> partitions given at the last start; a
    spec given again unchanged is skipped when the stored topic is gone or has at least
    that many partitions (a client deleted or raised it since). where: the stored catalog's
    place, for the error message."""
    wanted: dict = {}
    for s in given:
        if s.name in wanted and wanted[s.name] != s.partitions:
            raise CatalogError("topic %r given twice, with %d and %d partitions"
                               % (s.name, wanted[s.name], s.partitions))
        wanted[s.name] = s.partitions
    cur = {t.name: t for t in stored.by_name.values()}
    changed = False
    for name, parts in wanted.items():
        t = cur.get(name)
        if (previous or {}).get(name) == parts and (t is None or t.partitions >= parts):
            if t is None:
                log.info("topic %r (given as %s:%d at the last start too) was deleted by a "
                         "client since; not created again (give another partition count to "
                         "create it)", name, name, parts)
            continue
        if t is not None and parts < t.partitions:
            raise CatalogError(
                "topic %r has %d partitions in %s and %d were given: partitions cannot be "
                "removed (give %d or more%s)"
                % (name, t.partitions, where, parts, t.partitions,
                   ", or use a new data directory" if where == "the data directory" else ""))
        if t is None or parts > t.partitions:
            cur[name] = Topic(name, topic_id_for(name), parts)
            changed = True
    return TopicCatalog(cur.values()), changed


def atomic_write(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class CatalogStore:
    """<data-dir>/topics.json. ``given``: the command line's specs recorded with the catalog
    (name -> partitions), read by ``load`` and kept by every ``save``."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, TOPICS_FILE)
        self.given: dict = {}

    def load(self) -> TopicCatalog:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return TopicCatalog()
        try:
            f = msgspec.json.decode(data, type=_TopicsFile)
            cat = TopicCatalog((_check_spec(s, self.path).name, s.partitions)
                               for s in f.topics)
        except (msgspec.DecodeError, ValueError) as e:
            raise CatalogError("%s is not a valid topic catalog: %s" % (self.path, e)) from None
        self.given = {s.name: s.partitions for s in f.given}
        return cat

    def save(self, catalog: TopicCatalog, given: Optional[dict] = None) -> None:
        """Write the catalog (and ``given``, when not None, as the new recorded specs)."""
        os.makedirs(self.data_dir, exist_ok=True)
        if given is not None:
            self.given = dict(given)
        body = _TopicsFile(topics=[TopicSpec(t.name, t.partitions) for t in catalog],
                           given=[TopicSpec(n, p) for n, p in sorted(self.given.items())])
        atomic_write(self.path, msgspec.json.format(msgspec.json.encode(body), indent=2) + b"\n")


def _body(catalog: TopicCatalog, given: dict) -> bytes:
    f = _TopicsFile(topics=[TopicSpec(t.name, t.partitions) for t in catalog],
                    given=[TopicSpec(n, p) for n, p in sorted(given.items())])
    return msgspec.json.format(msgspec.json.encode(f), indent=2) + b"\n"


class PgCatalogStore:
    """The cluster's catalog in groupcoord_catalog (one row). ``version``, ``catalog`` and
    ``given``: as this node last read or wrote them, always of one version together."""
    shared = True

    _READ = "SELECT version, body FROM groupcoord_catalog WHERE id = 1"
    _VERSION = "SELECT version FROM groupcoord_catalog WHERE id = 1"
    _CAS = ("UPDATE groupcoord_catalog SET version = version + 1, body = $2"
            " WHERE id = 1 AND version = $1 RETURNING version")

    def __init__(self, pool, name: str = "the store"):
        self.pool = pool                # asyncpg Pool (or Connection): fetchrow/fetchval
        self.name = name                # for error messages: the redacted DSN
        self.version = -1               # nothing read yet
        self.catalog = TopicCatalog()
        self.given: dict = {}

    async def _call(self, method: str, *args):
        return await asyncio.wait_for(getattr(self.pool, method)(*args), STORE_CALL_TIMEOUT_S)

    async def current_version(self) -> int:
        return await self._call("fetchval", self._VERSION)

    async def read(self) -> tuple:
        """-> (version, catalog, given) as stored now; CatalogError when the body is not a
        catalog (or the schema's row is missing)."""
        row = await self._call("fetchrow", self._READ)
        if row is None:
            raise CatalogError("%s has no topic catalog row (groupcoord_catalog)" % self.name)
        where = "the topic catalog in %s" % self.name
        try:
            f = msgspec.json.decode(row["body"], type=_TopicsFile)
            cat = TopicCatalog((_check_spec(s, where).name, s.partitions) for s in f.topics)
        except (msgspec.DecodeError, ValueError) as e:
            raise CatalogError("%s is not valid: %s" % (where, e)) from None
        return row["version"], cat, {s.name: s.partitions for s in f.given}

    async def load(self) -> TopicCatalog:
        self.version, self.catalog, self.given = await self.read()
        return self.catalog

    async def save(self, catalog: TopicCatalog, given: Optional[dict] = None) -> bool:
        """Store the catalog if the row is still at ``self.version`` -> True (and the store's
        fields follow); False: another node changed it first (nothing written; ``load`` and
        plan again)."""
        given = dict(self.given if given is None else given)
        version = await self._call("fetchval", self._CAS, self.version, _body(catalog, given))
        if version is None:
            return False
        self.version, self.catalog, self.given = version, catalog, given
        return True

    async def merge(self, specs, limits=None) -> TopicCatalog:
        """Merge the topics given at start into the shared catalog (``merge_topics``: add,
        grow, never shrink -> CatalogError; over ``limits`` -> CatalogError) and record them
        in "given" (the union with the other nodes' specs). -> the catalog now stored."""
        for _ in range(SAVE_ATTEMPTS):
            stored = await self.load()
            catalog, changed = merge_topics(stored, specs, self.given,
                                            "the cluster's catalog (%s)" % self.name)
            if limits is not None:
                over = check_catalog_limits(catalog, limits)
                if over:
                    raise CatalogError(over + " (raise the limit or give fewer topics)")
            given = dict(self.given)
            given.update((s.name, s.partitions) for s in specs)
            if not changed and given == self.given:
                return catalog
            if await self.save(catalog, given):
                return catalog
        raise CatalogError("the topic catalog in %s kept changing under %d attempts to merge "
                           "the topics given; try again" % (self.name, SAVE_ATTEMPTS))


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_cluster_id(data_dir: Optional[str]) -> str:
    """The cluster id stored in the data directory, created on first start (Kafka's format:
    a random UUID in url-safe base64 without padding)."""
    if data_dir is None:
        return new_cluster_id()
    path = os.path.join(data_dir, CLUSTER_ID_FILE)
    try:
        with open(path, encoding="ascii") as fh:
            cid = fh.read().strip()
        if cid:
            return cid
    except FileNotFoundError:
        pass
    cid = new_cluster_id()
    os.makedirs(data_dir, exist_ok=True)
    atomic_write(path, cid.encode() + b"\n")
    return cid


# ---------------------------------------------------------------------- changes by clients
async def create_partitions(server, req, version: int, arrived: float):
    """CreatePartitions (37) on the running server (``arrived``: loop time the request was
    taken, for its TimeoutMs)."""

    def done(resp, new):
        log.info("topic partitions raised: %s", ", ".join(
            "%s to %d" % (r.name, new.by_name[r.name].partitions)
            for r in resp.results if r.error_code == 0))

    return await _change(server, CREATE_PARTITIONS, req, version, arrived,
                         plan_create_partitions, "results", done)


async def delete_topics(server, req, version: int, arrived: float):
    """DeleteTopics (20) on the running server."""

    def done(resp, new):
        log.info("topic(s) deleted: %s", ", ".join(
            str(r.name) for r in resp.responses if r.error_code == 0))

    return await _change(server, DELETE_TOPICS, req, version, arrived,
                         plan_delete_topics, "responses", done)


async def _change(server, api_key: int, req, version: int, arrived: float, plan,
                  results: str, done):
    """One catalog change: wait for the catalog lock (at most TimeoutMs from ``arrived``:
    REQUEST_TIMED_OUT otherwise, nothing changed), plan against the current catalog,
    persist, install, answer. ``results``: the response's field of per-topic results."""
    lock = server._topics_lock          # shared with Server.create_topics
    if lock.locked():
        left = arrived + max(0, req.timeout_ms) / 1000.0 - server.loop.time()
        try:
            await asyncio.wait_for(lock.acquire(), max(0.0, left))
        except asyncio.TimeoutError:
            return timed_out_response(api_key, req, version)
    else:
        await lock.acquire()            # free: taken without waiting
    try:
        resp, new, error = await store_change(
            server, lambda cat: plan(req, version, cat, server.config.catalog_limits))
        if error is not None:
            # Nothing changed: each topic the plan accepted is answered so.
            for r in getattr(resp, results):
                if r.error_code == 0:
                    r.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                    r.error_message = "cannot persist the topic catalog: %s" % error
            return resp
        if new is not None:
            done(resp, new)
        return resp
    finally:
        lock.release()


async def store_change(server, plan) -> tuple:
    """One client change of the catalog, under the server's catalog lock: ``plan(catalog)``
    -> (response, new catalog or None) against the server's catalog; store the new one and
    install it (``ShardSet.set_topics``). -> (response, new, error): error None and new
    installed, or new None (the plan changed nothing), or error (str: why the write failed;
    nothing changed). A shared store (cluster mode) whose catalog another node changed since
    this one read it: install that newer catalog and plan again (the response is the last
    plan's). A store call whose outcome is unknown (the connection dropped after the UPDATE
    committed) is answered as failed although the change may be stored; the next check
    (``follow_store``) installs it, and the client's retry then sees it done."""
    store = server.store
    for _ in range(SAVE_ATTEMPTS):
        resp, new = plan(server.shards.topics)
        if new is None:
            return resp, None, None
        if store is None:
            break
        if not getattr(store, "shared", False):
            try:
                await server.loop.run_in_executor(None, store.save, new)
            except OSError as e:
                log.error("cannot persist the topic catalog: %s", e)
                return resp, None, str(e)
            break
        try:
            if await store.save(new):
                break
            log.info("the shared topic catalog changed since version %d (another node); "
                     "planning the change again against the newer one", store.version)
            await _install(server, await store.load())
        except CatalogError as e:
            log.error("cannot persist the topic catalog: %s", e)
            return resp, None, str(e)
        except Exception as e:      # asyncpg, OS and timeout errors: the store failed
            log.error("cannot persist the topic catalog in %s: %s", store.name, e)
            return resp, None, "%s: %s" % (store.name, str(e).strip() or type(e).__name__)
    else:
        log.error("cannot persist the topic catalog: it kept changing under %d attempts",
                  SAVE_ATTEMPTS)
        return resp, None, ("the shared topic catalog kept changing under %d attempts; try "
                            "again" % SAVE_ATTEMPTS)
    await server.shards.set_topics(new)
    return resp, new, None


async def _install(server, catalog: TopicCatalog) -> None:
    if catalog is not server.shards.topics:
        await server.shards.set_topics(catalog)


async def follow_store(server) -> bool:
    """Install the shared catalog if another node changed it since this node read it (the
    version moved), as a local change is installed (under the catalog lock). -> whether a
    newer catalog was installed. Store failures raise (the caller logs and retries)."""
    store = server.store
    if await store.current_version() == store.version:
        return False
    async with server._topics_lock:
        version, old = store.version, server.shards.topics
        catalog = await store.load()
        if store.version == version:        # a local change got there first
            return False
        await _install(server, catalog)
    added = [t for t in catalog if old.get(t.name) is None]
    grown = [t for t in catalog if old.get(t.name) is not None
             and old.get(t.name).partitions != t.partitions]
    gone = [t.name for t in old if catalog.get(t.name) is None]
    log.info("topic catalog version %d from the store (changed by another node): %d "
             "topic(s)%s%s%s", store.version, len(catalog),
             "; created " + ", ".join("%s (%d)" % (t.name, t.partitions) for t in added)
             if added else "",
             "; partitions raised " + ", ".join("%s to %d" % (t.name, t.partitions)
                                                 for t in grown) if grown else "",
             "; deleted " + ", ".join(gone) if gone else "")
    return True
