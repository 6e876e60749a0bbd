"""The TCP front end: listening socket, connection table, limits, idle reaping, shutdown.

    server = Server(ServerConfig(host="127.0.0.1", port=0), shards, store=CatalogStore(d))
    host, port = await server.start()       # bound; Metadata advertises (advertised host, port)
    ...
    await server.shutdown()                  # stop accepting, drain, shards.close(), close

Listeners (listeners.py): ``config.listeners`` (empty: one PLAINTEXT listener on host:port),
each bound to its own socket, TLS where its protocol says so; each has its NodeState and
Metadata cache, so a client is told the addresses of the listener it came in on. ``access``
(access.py NodeAccess) holds the node's credentials, ACLs and authorizer; default: no
store, no ACL, everybody allowed.

This is the only layer with sockets and the event loop (uvloop by default, see cli.py).
``shards`` is the node's shards: anything with the interface of the runtime's ShardSet
(start/serves/submit_nowait/topics/set_topics/close); the server never looks inside it.
``cluster`` (cluster mode) is the node's view of the cluster that Metadata, DescribeCluster
and FindCoordinator answer from (node.py); None for a single node.

Shutdown order (SIGTERM/SIGINT in ``groupcoord serve``):
  1. stop accepting and stop reading requests on every connection;
  2. answer held Fetches now, and wait (at most ``shutdown_grace_ms``) for the requests already
     read to be answered and written;
  3. ``shards.close()``: it answers the requests still parked (JoinGroup at the barrier,
     SyncGroup waiting for the leader) and flushes durable writes; their responses are written
     (again bounded by the grace time);
  4. close every connection.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Optional

from groupcoord.protocol import DEFAULT_MAX_FRAME_BYTES, supported_versions
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server import node as N
from groupcoord.server.access import NodeAccess
from groupcoord.server.catalog import CatalogStore, load_or_create_cluster_id, store_change
from groupcoord.server.connection import ServerConnection
from groupcoord.server.flow import DEFAULT_QUEUED_MAX_REQUEST_BYTES, RequestBytesPool
from groupcoord.server.listeners import Listener, SecurityConfig, server_ssl_context
from groupcoord.server.metadata_cache import MetadataCache
from groupcoord.server.topic_admin import CatalogLimits, plan_create_topics

__all__ = ["Server", "ServerConfig", "BoundListener"]

log = logging.getLogger("groupcoord.server")


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 9092                        # 0: pick a free port (start() returns it)
    advertised_host: Optional[str] = None   # what Metadata/FindCoordinator say; default host
    data_dir: Optional[str] = None          # where the cluster id lives (None: per process)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections: int = 10_000
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms
    max_in_flight_per_connection: int = 1000
    write_buffer_high: int = 1 << 20        # pause reading above this many unsent bytes
    max_queued_response_bytes: int = 4 << 20   # per connection: responses not yet written
    requests_per_turn: int = 64             # per connection and loop turn
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES   # Kafka's name
    fetch_max_wait_cap_ms: int = 300_000    # an empty Fetch is held min(MaxWaitMs, this)
    shutdown_grace_ms: int = 5_000
    backlog: int = 1024
    cluster_id: Optional[str] = None        # overrides the stored one (tests)
    catalog_limits: CatalogLimits = CatalogLimits()     # CreateTopics: off by default
    listeners: tuple = ()                   # Listener; empty: PLAINTEXT on host:port
    security: SecurityConfig = SecurityConfig()


class BoundListener:
    """A listener with its socket bound: what its connections advertise and cache."""
    __slots__ = ("listener", "node", "metadata_cache", "address", "srv")

    def __init__(self, listener: Listener, node: N.NodeState, metadata_cache: MetadataCache):
        self.listener = listener
        self.node = node
        self.metadata_cache = metadata_cache
        self.address: Optional[tuple] = None
        self.srv = None


class Server:
    def __init__(self, config: ServerConfig, shards, store: Optional[CatalogStore] = None,
                 cluster=None, access: Optional[NodeAccess] = None):
        self.config = config
        self.access = access if access is not None else NodeAccess(config.security)
        self.bound: list = []
        self.shards = shards
        self.store = store
        self.cluster = cluster
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.node: Optional[N.NodeState] = None
        self.request_pool: Optional[RequestBytesPool] = None   # queued.max.request.bytes
        self.metadata_cache: Optional[MetadataCache] = None
        self.connections: set = set()
        self.stats = None                  # metrics.RequestStats: set before start() to count
        self.stopping = False
        self.address: Optional[tuple] = None
        self._srv = None
        self._reaper: Optional[asyncio.Task] = None
        self._topics_lock: Optional[asyncio.Lock] = None
        self.refused_total = 0             # connections refused over max_connections
        self._refused = 0                  # refusals not yet logged (rate-limited logging)
        self._refused_peer = ""            # the latest of them
        self._refused_logged_at = -1e9
        self._refused_report: Optional[asyncio.TimerHandle] = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> tuple:
        """Bind every listener and start accepting; returns the first one's bound
        (host, port) (``bound`` has them all)."""
        cfg = self.config
        self.loop = asyncio.get_running_loop()
        self._topics_lock = asyncio.Lock()
        self.request_pool = RequestBytesPool(cfg.queued_max_request_bytes, self.loop)
        cluster_id = cfg.cluster_id or load_or_create_cluster_id(cfg.data_dir)
        ranges = N.node_api_ranges(supported_versions(), self.shards.serves)
        shards = self.shards
        listeners = list(cfg.listeners) or [Listener("PLAINTEXT", cfg.host, cfg.port)]
        tls = None
        if any(lst.tls for lst in listeners):
            if cfg.security.tls is None:
                raise ValueError("a TLS listener needs a certificate (--ssl-certfile)")
            tls = server_ssl_context(cfg.security.tls)
        for lst in listeners:
            advertised = lst.advertised_host or cfg.advertised_host
            node = N.NodeState(advertised or lst.host, lst.port, cluster_id,
                               lambda: shards.topics, ranges, cluster=self.cluster)
            if cfg.listeners:
                node.listener = lst.protocol
            # Cluster mode too: the cache starts over when the live brokers or the
            # controller change (metadata_cache.MetadataCache._catalog).
            b = BoundListener(lst, node, MetadataCache(node, self.loop))
            try:
                b.srv = await self.loop.create_server(
                    lambda b=b: ServerConnection(self, b), lst.host, lst.port,
                    backlog=cfg.backlog, reuse_address=True,
                    ssl=tls if lst.tls else None)
            except OSError:
                for other in self.bound:
                    other.srv.close()
                raise
            host, port = b.srv.sockets[0].getsockname()[:2]
            node.port = port
            if not advertised:
                node.host = lst.host if lst.host not in ("", "0.0.0.0", "::") else host
            b.address = (host, port)
            self.bound.append(b)
            log.info("listening on %s://%s:%s (advertised as %s:%s)", lst.protocol, host,
                     port, node.host, port)
        first = self.bound[0]
        self.node, self.metadata_cache, self._srv = first.node, first.metadata_cache, first.srv
        self.address = first.address
        if cfg.connections_max_idle_ms > 0:
            self._reaper = self.loop.create_task(self._reap_idle())
        log.info("%d listener(s), %d APIs advertised", len(self.bound), len(ranges))
        return self.address

    async def shutdown(self) -> None:
        """Graceful stop (see the module docstring). Idempotent."""
        if self.stopping:
            return
        self.stopping = True
        grace = self.config.shutdown_grace_ms / 1000.0
        for b in self.bound:
            b.srv.close()
        if self._reaper is not None:
            self._reaper.cancel()
        if self._refused_report is not None:   # report the last refusals before stopping
            self._refused_report.cancel()
            self._report_refused()
        for c in list(self.connections):
            c.stop_reading()
            c.release_held()
        await self._drain(grace)
        try:
            await self.shards.close()
        except Exception:
            log.exception("closing the shards failed")
        await self._drain(grace)
        for c in list(self.connections):
            c.close()
        for b in self.bound:
            try:
                await asyncio.wait_for(b.srv.wait_closed(), grace)
            except (asyncio.TimeoutError, Exception):
                pass
        log.info("server stopped")

    close = shutdown

    async def _drain(self, timeout: float) -> None:
        # Wait until no connection has a request in flight (or the timeout).
        deadline = self.loop.time() + timeout
        while any(c.in_flight() for c in self.connections):
            if self.loop.time() >= deadline:
                n = sum(c.in_flight() for c in self.connections)
                log.warning("shutdown: %d request(s) still in flight after %.1f s; closing "
                            "without their responses", n, timeout)
                return
            await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ connections
    def _admit(self, conn: ServerConnection) -> bool:
        if self.stopping:
            return False
        if len(self.connections) >= self.config.max_connections:
            self.refused_total += 1
            self._refused += 1
            self._refused_peer = conn.peer
            # One line per second under a flood, counting every refusal: the first after a
            # quiet second is reported at once, the rest by a timer (so a burst's tail is
            # counted too, not only when a later refusal comes).
            if self._refused_report is None:
                delay = max(0.0, self._refused_logged_at + 1.0 - self.loop.time())
                self._refused_report = self.loop.call_later(delay, self._report_refused)
            return False
        self.connections.add(conn)
        return True

    def _report_refused(self) -> None:
        self._refused_report = None
        n, self._refused = self._refused, 0
        if not n:
            return
        self._refused_logged_at = self.loop.time()
        log.warning("refused %d connection(s) (latest from %s): %d connections open, the "
                    "--max-connections limit; %d refused since start", n, self._refused_peer,
                    len(self.connections), self.refused_total)

    def _forget(self, conn: ServerConnection) -> None:
        self.connections.discard(conn)

    async def _reap_idle(self) -> None:
        limit = self.config.connections_max_idle_ms / 1000.0
        period = min(max(limit / 10.0, 0.01), 10.0)
        while True:
            await asyncio.sleep(period)
            now = self.loop.time()
            for c in list(self.connections):
                # A connection waiting for a response (a parked JoinGroup) is not idle.
                # Nor is one waiting for request memory (flow.py): that wait is ours.
                if not c.in_flight() and not c.throttled and now - c.last_active > limit:
                    c.close("idle for more than %d ms (connections max idle); closed"
                            % self.config.connections_max_idle_ms)

    # ------------------------------------------------------------------ CreateTopics
    async def create_topics(self, req, version: int):
        # Serialised: two concurrent creates must both see each other's topics.
        async with self._topics_lock:
            # Planned, stored and installed by store_change (a shared catalog that another
            # node changed meanwhile: planned again against the newer one).
            resp, new, error = await store_change(
                self, lambda cat: plan_create_topics(req, version, cat,
                                                     self.config.catalog_limits))
            created = [r for r in resp.topics if r.error_code == 0]
            if error is not None:               # logged by store_change
                for r in created:
                    r.error_code = int(E.KAFKA_STORAGE_ERROR)
                    r.error_message = "cannot persist the topic catalog: %s" % error
                    r.topic_id = N.ZERO_UUID
                    r.num_partitions = r.replication_factor = -1
                    r.configs = None
                return resp
            if new is None:
                return resp
            log.info("created topic(s) %s", ", ".join("%s (%d partitions)"
                                                      % (r.name, r.num_partitions)
                                                      for r in created))
            return resp
