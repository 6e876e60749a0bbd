"""The cluster mode of `groupcoord serve` (server/main.py runs it; docs/cluster.md): the
--store / --node-id / --lease-ms arguments, the connection to the PostgreSQL store (a few
attempts with backoff, its schema migrated), the cluster id every node gives clients, the
cluster view the node APIs read (ClusterView, over cluster/node.py's ClusterNode), and the
task that installs the other nodes' changes of the shared topic catalog (CatalogFollower)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from typing import Optional
from urllib.parse import urlsplit

from groupcoord.cluster.status import DEFAULT_LEASE_MS, redact
from groupcoord.server.catalog import CatalogError, follow_store
from groupcoord.server.startup import StartupError
from groupcoord.storage.pg_schema import SCHEMA_VERSION, SchemaError, migrate

__all__ = ["resolve_store", "check_cluster_args", "ClusterView", "CatalogFollower",
           "store_cluster_id", "open_store", "first_line", "DEFAULT_DATA_DIR", "MIN_LEASE_MS",
           "STORE_CONNECT_TIMEOUT_S"]

log = logging.getLogger("groupcoord.serve")

DEFAULT_DATA_DIR = "./groupcoord-data"
MIN_LEASE_MS = 1_000
PG_SCHEMES = ("postgresql", "postgres")     # as libpq and asyncpg accept them
# Connecting to the store at startup: attempts, and the first pause between two (doubled
# after each: 0.5 + 1 + 2 + 4 s), so a store that is still starting up is waited for while
# a wrong address fails within seconds.
STORE_CONNECT_ATTEMPTS = 5
STORE_RETRY_FIRST_S = 0.5
STORE_CONNECT_TIMEOUT_S = 10.0
# Connections to the store: the shards' group commits and the lease machine share them.
STORE_POOL_SIZE = 16


def resolve_store(args) -> None:
    """--store / --data-dir -> args.store_kind ("file" or "postgresql") with args.data_dir
    (file) or args.dsn, args.node_id, args.lease_ms (postgresql).
    CatalogError (exit 2) for what is wrong on its face; what needs a closer look (the
    DSN, a missing --node-id) is checked by ``check_cluster_args`` (exit 1)."""
    if args.store is not None and args.data_dir is not None:
        raise CatalogError("give --store or --data-dir, not both (--data-dir DIR is "
                           "--store file:DIR)")
    store = args.store if args.store is not None else \
        "file:" + (args.data_dir if args.data_dir is not None else DEFAULT_DATA_DIR)
    scheme = store.partition(":")[0].lower()
    if scheme == "file":
        args.store_kind, args.data_dir, args.dsn = "file", store[len("file:"):], None
        if not args.data_dir:
            raise CatalogError("a file store needs a directory: --store file:DIR or "
                               "--data-dir DIR")
        given = [f for f, v in (("--node-id", args.node_id), ("--lease-ms", args.lease_ms))
                 if v is not None]
        if given:
            raise CatalogError("%s: cluster mode only (a postgresql --store); a file store "
                               "is a single node" % ", ".join(given))
        return
    if scheme not in PG_SCHEMES or not store.startswith(scheme + "://"):
        raise CatalogError("--store %r: expected file:DIR or postgresql://USER@HOST:PORT/DB"
                           % redact(store))
    args.store_kind, args.dsn, args.data_dir = "postgresql", store, None
    if args.node_id is not None and args.node_id < 1:
        raise CatalogError("--node-id must be a positive integer, not %d" % args.node_id)
    if args.lease_ms is None:
        args.lease_ms = DEFAULT_LEASE_MS
    if args.lease_ms < MIN_LEASE_MS:
        raise CatalogError("--lease-ms must be at least %d" % MIN_LEASE_MS)


def check_cluster_args(args) -> None:
    """StartupError (exit 1) for a postgresql store without --node-id or with a DSN that
    cannot be parsed (a port that is no number, an unclosed IPv6 bracket)."""
    if args.store_kind != "postgresql":
        return
    if args.node_id is None:
        raise StartupError("--node-id is required with a postgresql store: a positive "
                           "integer unique in the cluster")
    try:
        urlsplit(args.dsn).port        # ValueError: not a number, out of range, bad brackets
    except ValueError as e:
        raise StartupError("bad --store DSN %s: %s" % (redact(args.dsn), e)) from None


# ---------------------------------------------------------------------- cluster mode
class ClusterView:
    """The cluster view the node APIs read (server/node.py): the ClusterNode's once it is
    set. Before (the socket accepts first: the node registers with its bound port) it
    knows no other node and no owner, so FindCoordinator answers COORDINATOR_NOT_AVAILABLE
    and Metadata lists this node alone."""
    __slots__ = ("node_id", "shard_count", "node")

    def __init__(self, node_id: int, shard_count: int):
        self.node_id = node_id
        self.shard_count = shard_count
        self.node = None                # cluster/node.py ClusterNode

    def brokers(self, listener: Optional[str] = None) -> list:
        if self.node is None:
            return []
        return self.node.brokers(listener) if listener else self.node.brokers()

    def owner(self, shard: int) -> Optional[int]:
        return self.node.owner(shard) if self.node is not None else None

    def controller_id(self) -> int:
        return self.node.controller_id() if self.node is not None else self.node_id

    def serving(self, shard: int) -> bool:
        """ShardSet's lease_check: nothing is served before the node is set."""
        return self.node is not None and self.node.serving(shard)

    def fenced(self, shard: int, epoch: int) -> None:
        """ShardSet's on_fenced: no shard loads before the node is set."""
        if self.node is not None:
            self.node.fenced(shard, epoch)


class CatalogFollower:
    """Installs the other nodes' changes of the shared topic catalog on this node: every
    ``period_s`` (the ClusterNode's refresh period, lease/3) it reads the catalog's version
    and, when it moved, loads the catalog and installs it as a local CreateTopics does
    (catalog.py ``follow_store``: under the server's catalog lock, ShardSet.set_topics).

    A task of its own rather than a step of ClusterNode's refresh: the lease glue (cluster/)
    stays free of the server's catalog, and a slow catalog read or the install of a big
    catalog (set_topics runs every live shard's catalog change) never delays a heartbeat or a
    lease decision. A failed read is logged once until the store answers again and retried
    at the next period."""

    def __init__(self, server, period_s: float):
        self.server = server
        self.period_s = period_s
        self._task: Optional[asyncio.Task] = None
        self._failing = False

    async def poll(self) -> bool:
        """One check -> whether a newer catalog was installed (False too when the store
        failed: logged)."""
        try:
            changed = await follow_store(self.server)
        except asyncio.CancelledError:
            raise
        except Exception as e:      # asyncpg, OS and timeout errors, a bad catalog body
            if not self._failing:
                log.warning("cannot read the shared topic catalog: %s; retrying every %.1f s",
                            first_line(e), self.period_s)
                self._failing = True
            return False
        if self._failing:
            log.info("the shared topic catalog can be read again")
            self._failing = False
        return changed

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            await self.poll()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


# The cluster id of a store: its database and the schema's shard table, as PostgreSQL
# numbers them, so that every node of the cluster gives clients the same id (a cluster
# whose schema is made again is a new cluster).
_CLUSTER_ID_SQL = ("SELECT d.oid::bigint, 'groupcoord_shards'::regclass::oid::bigint "
                   "FROM pg_database d WHERE d.datname = current_database()")


def store_cluster_id(database_oid: int, table_oid: int) -> str:
    """A Kafka-style cluster id (22 characters of url-safe base64 of 16 bytes)."""
    digest = hashlib.sha256(b"groupcoord-cluster:%d:%d" % (database_oid, table_oid)).digest()
    return base64.urlsafe_b64encode(digest[:16]).decode("ascii").rstrip("=")


def _store_retriable(exc: BaseException) -> bool:
    """Whether a failure to reach the store may pass (the server is down or starting, a
    network error, too many connections) rather than need an operator (a refused password,
    no such database)."""
    import asyncpg      # only cluster mode needs the driver
    return isinstance(exc, (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError,
                            asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer"
    return text.splitlines()[0] if text else type(exc).__name__


async def _open_store_once(dsn: str, shards: int) -> tuple:
    """-> (pool, cluster id): a pool of connections to the store, its schema migrated."""
    import asyncpg      # only cluster mode needs the driver
    # min_size=0: no connection floor. With one, asyncpg restores it in a task of its own
    # after the store goes away and logs a traceback at every failed try; connections are
    # then made only by our calls, whose failures the node logs once per interval.
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=STORE_POOL_SIZE,
                                     timeout=STORE_CONNECT_TIMEOUT_S)
    try:
        async with pool.acquire() as conn:
            before = await migrate(conn, shards)
            cluster_id = store_cluster_id(*await conn.fetchrow(_CLUSTER_ID_SQL))
    except BaseException:
        pool.terminate()
        raise
    log.info("store %s: schema %s", redact(dsn),
             "created (first use)" if not before else "up to date"
             if before == SCHEMA_VERSION else "upgraded from version %d to %d"
             % (before, SCHEMA_VERSION))
    return pool, cluster_id


async def open_store(dsn: str, shards: int, *, attempts: int = STORE_CONNECT_ATTEMPTS,
                     first_backoff_s: float = STORE_RETRY_FIRST_S, attempt=_open_store_once,
                     sleep=asyncio.sleep) -> tuple:
    """``attempt(dsn, shards)`` until it succeeds, pausing first_backoff_s, then twice as
    long after each failure that may pass (one WARNING line each); -> its result. A failure
    that will not pass (a bad DSN, a refused login, a schema of another shard count or a
    newer version) or the last attempt's: StartupError."""
    where = redact(dsn)
    pause = first_backoff_s
    for n in range(1, attempts + 1):
        try:
            return await attempt(dsn, shards)
        except SchemaError as e:
            raise StartupError("the store %s: %s" % (where, e)) from None
        except (ValueError, OverflowError) as e:   # asyncpg's DSN and option checks
            raise StartupError("bad --store DSN %s: %s" % (where, first_line(e))) from None
        except Exception as e:
            if not _store_retriable(e):
                raise StartupError("cannot use the store %s: %s" % (where, first_line(e))) \
                    from None
            if n == attempts:
                raise StartupError("cannot reach the store %s (%d attempts): %s"
                                   % (where, attempts, first_line(e))) from None
            log.warning("cannot reach the store %s: %s; attempt %d of %d, the next in %.1f s",
                        where, first_line(e), n, attempts, pause)
            await sleep(pause)
            pause *= 2
    raise StartupError("no attempt to reach the store %s (attempts %d)" % (where, attempts))
