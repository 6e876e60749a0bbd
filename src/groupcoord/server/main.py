"""`groupcoord serve`: wire the runtime's ShardSet and the Server together and run them.

The store (--store; --data-dir DIR is an alias of --store file:DIR):

  file:DIR       a single node. Merge --topic/--topics-file into DIR/topics.json, load every
                 shard (``ShardSet.start``), bind.
  postgresql://  cluster mode (docs/cluster.md). Connect to the store (a few attempts
                 with backoff), migrate its schema, merge the topics into the catalog the
                 nodes share through it (server/catalog.py PgCatalogStore), start the shards
                 with none loaded, bind, then start the ClusterNode (cluster/node.py), which
                 registers this node with its advertised address and bound port and loads
                 the shards it acquires, and the CatalogFollower, which installs the other
                 nodes' catalog changes. The node APIs answer from its view (ClusterView).
                 Nothing is kept on local disk.

Then print exactly one line to stdout and flush it:

    groupcoord: listening on HOST:PORT (N shards loaded from DATA_DIR or the store)

(in cluster mode N counts the shards owned at that moment, usually 0). Logs go to stderr.
SIGTERM or SIGINT: graceful shutdown, exit status 0 (cluster mode first hands every owned
shard over: ClusterNode.close unloads and releases them). Startup errors (bad topic spec,
partition decrease, port in use, a data directory that is a file or cannot be created or
written; a bad DSN, a store unreachable after the retries, --node-id missing with a
PostgreSQL store) exit 1 with one line on stderr; bad arguments, and a --node-id another
running node holds in the store, exit 2. A shard with a
corrupt log is no startup error: it stays FAILED (one line on stderr) and N counts only the
shards that loaded.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Optional

from groupcoord.cluster.status import DEFAULT_LEASE_MS, redact
from groupcoord.runtime.lifecycle_log import JsonFormatter
from groupcoord.server.catalog import (CatalogError, CatalogStore, PgCatalogStore,
                                       load_or_create_cluster_id, load_topics_file,
                                       merge_topics, parse_topic_arg)
from groupcoord.server.config_file import add_config_args
from groupcoord.server.cluster_mode import (DEFAULT_DATA_DIR, MIN_LEASE_MS,
                                            STORE_CONNECT_TIMEOUT_S, CatalogFollower,
                                            ClusterView,
                                            check_cluster_args, first_line, open_store,
                                            resolve_store)
from groupcoord.server.access import NodeAccess
from groupcoord.server.listeners import ListenerError, SecurityConfig
from groupcoord.server.security_args import (add_security_args, security_from_args,
                                             uses_security)
from groupcoord.server.processes import (StaticClusterView, Supervisor, check_process_args,
                                         child_argv, follow_supervisor)
from groupcoord.server.startup import (MAX_CONNECTIONS_CAP, StartupError, check_data_dir,
                                       check_open_files_limit, os_error)
from groupcoord.server.topic_admin import CatalogLimits, check_catalog_limits
from groupcoord.server.server import Server, ServerConfig
from groupcoord.server.metrics import Metrics, serve_http
from groupcoord.server.web import add_web_arguments, register_web_routes

__all__ = ["add_serve_parser", "run"]

log = logging.getLogger("groupcoord.serve")


def add_serve_parser(sub):
    from groupcoord.protocol import DEFAULT_MAX_FRAME_BYTES
    s = sub.add_parser(
        "serve", help="run a coordinator node that Kafka clients connect to",
        description="Run a groupcoord coordinator node. Kafka clients bootstrap to it, find it "
                    "as their group coordinator and form classic, consumer (KIP-848) and "
                    "Connect groups through it. With a file store (the default) the node is "
                    "alone and owns every shard; nodes started with the same PostgreSQL "
                    "--store form a cluster that spreads the shards over its live nodes and "
                    "moves them when a node joins, leaves or dies. Once the shards are loaded "
                    "(cluster mode: none yet; the node acquires them next) and the socket "
                    "listens, one line 'groupcoord: listening on HOST:PORT (N shards loaded "
                    "from STORE)' is printed to stdout; logs go to stderr. SIGTERM/SIGINT "
                    "shut down gracefully (exit status 0; cluster mode hands its shards over "
                    "first). With --processes N a supervisor runs N such nodes on one "
                    "machine. Exit status 1: a startup error (one line on stderr); 2: bad "
                    "arguments.")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 for all IPv4 "
                        "interfaces)")
    s.add_argument("--port", type=int, default=9092,
                   help="TCP port (default %(default)s; 0 picks a free port, printed in the "
                        "listening line)")
    s.add_argument("--advertised-host", default=None,
                   help="host name clients are told to connect to in Metadata and "
                        "FindCoordinator (default: --host); in cluster mode also the name "
                        "the other nodes give clients for this one, so every client must "
                        "reach this node by it")
    s.add_argument("--store", default=None, metavar="STORE",
                   help="where the shard logs live. file:DIR: this node's own directory of "
                        "shard logs, topics.json and cluster-id (created if missing); the "
                        "node is alone. postgresql://USER[:PASSWORD]@HOST:PORT/DB: cluster "
                        "mode, every node started with the same store is one cluster; the "
                        "schema is created on first use; needs --node-id. Default: file:%s"
                        % DEFAULT_DATA_DIR)
    s.add_argument("--data-dir", default=None, metavar="DIR",
                   help="the same as --store file:DIR (giving both is an error)")
    s.add_argument("--node-id", type=int, default=None, metavar="N",
                   help="cluster mode: this node's id, a positive integer unique in the "
                        "cluster; required with a postgresql store, refused with a file store "
                        "(a single node is node 0)")
    s.add_argument("--lease-ms", type=int, default=None, metavar="MS",
                   help="cluster mode: how long a shard's lease lasts without renewal "
                        "(default %d, at least %d). A node that cannot renew within it stops "
                        "serving the shard; a dead node's shards move after it. Give every "
                        "node the same value" % (DEFAULT_LEASE_MS, MIN_LEASE_MS))
    s.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                   help="a topic of the catalog, e.g. orders:6 (repeatable); merged into the "
                        "stored catalog (cluster mode: the one catalog every node shares "
                        "through the store): new topics are added, a partition count can "
                        "grow but never shrink")
    s.add_argument("--topics-file", default=None, metavar="PATH",
                   help='JSON file of topics: [{"name": "orders", "partitions": 6}, ...], '
                        "merged like --topic")
    s.add_argument("--shards", type=int, default=50,
                   help="number of coordinator shards (each a single-threaded state machine "
                        "with its own log; default %(default)s). Groups map to shards by "
                        "hash, so keep it fixed for a data directory; every node of a cluster "
                        "gives the same)")
    s.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES,
                   help="largest request accepted, in bytes; a bigger size prefix closes the "
                        "connection (default %(default)s = 100 MiB, like Kafka's "
                        "socket.request.max.bytes)")
    s.add_argument("--max-connections", type=int, default=None,
                   help="open client connections allowed; further ones are closed at once "
                        "(one WARNING line per second counts them). Default: as many as the "
                        "open files limit leaves once raised to its hard limit and the shard "
                        "logs' descriptors are set aside, at most %d (the startup log says "
                        "how many)" % MAX_CONNECTIONS_CAP)
    s.add_argument("--connections-max-idle-ms", type=int, default=600_000,
                   help="close connections with no traffic and no request in flight for this "
                        "long (default %(default)s, Kafka's connections.max.idle.ms; 0 never)")
    s.add_argument("--queued-max-request-bytes", type=int,
                   default=ServerConfig.queued_max_request_bytes,
                   help="request bytes held across all connections (partial frames growing, "
                        "frames not yet run) before frames over 64 KiB wait for room; smaller "
                        "frames are always read (default %(default)s = 256 MiB; Kafka's "
                        "queued.max.request.bytes, unbounded there)")
    s.add_argument("--max-queued-response-bytes", type=int,
                   default=ServerConfig.max_queued_response_bytes,
                   help="per connection: bytes of responses not yet sent above which no "
                        "further request of that connection is taken (default %(default)s "
                        "= 4 MiB)")
    s.add_argument("--fsync", choices=("always", "unsafe-no-fsync"), default="always",
                   help="'always' (default): a response that depends on a write is sent after "
                        "the write is fsynced (group commit). 'unsafe-no-fsync': skip fsync; "
                        "a machine crash can lose acknowledged state (tests, benchmarks)")
    s.add_argument("--allow-create-topics", action="store_true",
                   help="answer CreateTopics and CreatePartitions (off by default: topics are "
                        "an operator's choice, given with --topic/--topics-file); when off, "
                        "they answer POLICY_VIOLATION per topic")
    s.add_argument("--allow-delete-topics", action="store_true",
                   help="answer DeleteTopics (off by default, unlike Kafka's "
                        "delete.topic.enable: a deletion revokes the topic from every group "
                        "and deletes its committed offsets); when off, DeleteTopics answers "
                        "TOPIC_DELETION_DISABLED per topic")
    s.add_argument("--max-topics", type=int, default=CatalogLimits().max_topics,
                   help="topics the catalog may hold (default %(default)s); CreateTopics "
                        "beyond it answers POLICY_VIOLATION, --topic beyond it is a startup "
                        "error")
    s.add_argument("--max-partitions", type=int, default=CatalogLimits().max_partitions,
                   help="partitions of all topics together the catalog may hold (default "
                        "%(default)s); as --max-topics")
    from groupcoord.groups.config import ShardConfig
    s.add_argument("--group-config", action="append", default=[], metavar="NAME=VALUE",
                   help="a group setting by its Kafka broker name (repeatable), e.g. "
                        "group.initial.rebalance.delay.ms=0 or "
                        "group.consumer.heartbeat.interval.ms=1000. Known: %s"
                        % ", ".join("%s (default %s)" % (_kafka_name(f), _show(v))
                                    for f, v in _defaults(ShardConfig)))
    s.add_argument("--processes", type=int, default=1, metavar="N",
                   help="file store: run N node processes on this machine, one per core "
                        "(default %(default)s: this process is the node). A supervisor "
                        "starts nodes 1..N on ports PORT..PORT+N-1 (--port 0: N consecutive "
                        "free ports); node i owns the shards s with s mod N = i-1 and loads "
                        "only those; each lists all N in Metadata and names a group's owner "
                        "in FindCoordinator (NOT_COORDINATOR for another's group). The "
                        "supervisor merges --topic/--topics-file once; the catalog is then "
                        "fixed (no --allow-create-topics/--allow-delete-topics). A node that "
                        "dies is restarted and reloads its shards from their logs (a log "
                        "line each); SIGTERM to the supervisor stops every node, exit 0")
    s.add_argument("--process-node", type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="event loop: uvloop (default) or the stock asyncio loop (debugging)")
    s.add_argument("--log-level", default="INFO",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                   type=str.upper, help="stderr log level (default %(default)s)")
    s.add_argument("--log-format", default="text", choices=("text", "json"),
                   help="stderr log lines: text (default) or json, one object per line with "
                        "ts, level, logger, message and a lifecycle line's fields "
                        "(docs/operations.md, \"Lifecycle logs\")")
    s.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve HTTP on this port once the listeners are bound: /metrics "
                        "(Prometheus), /healthz, /readyz and their .json variants "
                        "(docs/operations.md); 0 picks a free port (logged). With --processes "
                        "N, node i serves PORT+i-1. Default: no metrics")
    s.add_argument("--metrics-host", default=None, metavar="HOST",
                   help="address the metrics port listens on (default: --host)")
    add_web_arguments(s)
    add_security_args(s)
    # --config FILE: every option above by its key in a properties file (config_file.py).
    add_config_args(s, [(_kafka_name(f), v) for f, v in _defaults(ShardConfig)])
    return s


def _kafka_name(field: str) -> str:
    """ShardConfig field -> Kafka's broker setting name (group.consumer.* for consumer_*)."""
    from groupcoord.groups.config import KAFKA_UNITS
    if field in KAFKA_UNITS:
        return KAFKA_UNITS[field][0]        # e.g. offsets.retention.minutes
    if field.startswith(("consumer_", "connect_")):
        field = "group_" + field
    return field.replace("_", ".")


def _show(v) -> str:
    return ",".join(v) if isinstance(v, tuple) else str(v)


def _defaults(cls) -> list:
    from groupcoord.groups.config import KAFKA_UNITS
    d = cls()
    return [(f, getattr(d, f) // KAFKA_UNITS[f][1] if f in KAFKA_UNITS else getattr(d, f))
            for f in cls.__struct_fields__]


def parse_group_config(items) -> "object":
    """['group.initial.rebalance.delay.ms=0', ...] -> ShardConfig; CatalogError if unknown."""
    import msgspec
    from groupcoord.groups.config import KAFKA_UNITS, ShardConfig
    by_name = {}
    for f, v in _defaults(ShardConfig):
        by_name[_kafka_name(f)] = (f, v)
        by_name[f] = (f, v)
    kw = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in by_name:
            raise CatalogError("--group-config %r: expected NAME=VALUE with NAME one of %s"
                               % (item, ", ".join(sorted(n for n in by_name if "." in n))))
        field, default = by_name[name.strip()]
        value = value.strip()
        try:
            if isinstance(default, tuple):
                kw[field] = tuple(x.strip() for x in value.split(",") if x.strip())
            else:
                # A Kafka name in another unit (offsets.retention.minutes) scales; the field's
                # own name takes ms.
                unit = KAFKA_UNITS[field][1] if name.strip() != field \
                    and field in KAFKA_UNITS else 1
                kw[field] = int(value) * unit
        except ValueError:
            raise CatalogError("--group-config %s: %r is not an integer" % (name, value)) \
                from None
    try:
        return msgspec.structs.replace(ShardConfig(), **kw)
    except ValueError as e:             # a value out of its range (ShardConfig.__post_init__)
        raise CatalogError("--group-config: %s" % e) from None


def _topics_given(args) -> list:
    specs = [parse_topic_arg(t) for t in args.topic]
    if args.topics_file:
        specs.extend(load_topics_file(args.topics_file))
    return specs


def _check_args(args):
    if not 0 <= args.port <= 65535:
        raise CatalogError("--port must be 0..65535")
    if args.shards < 1:
        raise CatalogError("--shards must be at least 1")
    if args.max_frame_bytes < 64:
        raise CatalogError("--max-frame-bytes must be at least 64")
    if args.max_connections is not None and args.max_connections < 1:
        raise CatalogError("--max-connections must be at least 1")
    if args.connections_max_idle_ms < 0:
        raise CatalogError("--connections-max-idle-ms must be >= 0")
    if args.queued_max_request_bytes < 1 or args.max_queued_response_bytes < 1:
        raise CatalogError("--queued-max-request-bytes and --max-queued-response-bytes must "
                           "be >= 1")
    if args.max_topics < 0 or args.max_partitions < 0:
        raise CatalogError("--max-topics and --max-partitions must be >= 0")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535 - max(
            0, args.processes - 1):
        raise CatalogError("--metrics-port must be 0..65535 (with --processes N, up to 65536-N)")
    resolve_store(args)
    check_process_args(args)
    try:
        args.listeners, args.security = security_from_args(args)
    except ListenerError as e:
        raise CatalogError(str(e)) from None
    if args.processes > 1 and uses_security(args):
        raise CatalogError("--processes does not take the security flags yet (listeners, "
                           "TLS, SASL, ACL defaults): run one node per process with a "
                           "PostgreSQL --store instead (docs/security.md)")


def _loop_factory(name: str):
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed; using the stock asyncio loop")
            return None
        return uvloop.new_event_loop
    return None


def run(args) -> int:
    # A node under a --processes supervisor says which one it is in each line.
    node = "node-%d " % args.process_node if args.process_node is not None else ""
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s " + node + "%(name)s: %(message)s")
    if args.log_format == "json":
        for h in logging.getLogger().handlers:
            h.setFormatter(JsonFormatter(args.process_node))
    try:
        _check_args(args)
        given = _topics_given(args)
        args.shard_config = parse_group_config(args.group_config)
    except CatalogError as e:
        print("groupcoord serve: error: %s" % e, file=sys.stderr, flush=True)
        return 2
    factory = _loop_factory(args.loop)
    try:
        check_cluster_args(args)
        if args.processes > 1 and args.process_node is None:
            return _supervise(args, given)
        if args.process_node is not None:
            follow_supervisor()
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_serve(args, given))
    except (StartupError, CatalogError) as e:
        print("groupcoord serve: error: %s" % e, file=sys.stderr, flush=True)
        return getattr(e, "status", 1)
    except OSError as e:
        # An I/O failure no check above foresaw (a shard directory we may not write, a full
        # disk while saving the catalog): one line; the traceback at --log-level DEBUG.
        log.debug("startup failed", exc_info=True)
        print("groupcoord serve: error: %s" % os_error(e), file=sys.stderr, flush=True)
        return 1


def _supervise(args, given) -> int:
    # The topics are merged and the cluster id made once, here; the nodes read them.
    check_data_dir(args.data_dir)
    _load_catalog(args, args.data_dir, given)
    load_or_create_cluster_id(args.data_dir)
    options = add_serve_parser(argparse.ArgumentParser().add_subparsers())
    return Supervisor(args, child_argv(options, args)).run()


async def _serve(args, given) -> int:
    try:
        from groupcoord.runtime import RuntimeConfig, ShardSet
        from groupcoord.runtime.shards import ShardLoadError
    except ImportError as e:   # pragma: no cover - the runtime is part of the package
        raise StartupError("the coordinator runtime is not available: %s" % e) from None
    stop = _stop_event()
    if args.store_kind == "postgresql":
        return await _serve_cluster(args, given, stop)

    check_data_dir(args.data_dir)
    max_connections = check_open_files_limit(args.max_connections, args.shards, args.data_dir)
    # A node of --processes (server/processes.py) loads only its shards, reads the catalog
    # its supervisor merged, and answers as one node of a fixed cluster.
    view = StaticClusterView.of(args) if args.process_node is not None else None
    owned = view.owned() if view is not None else list(range(args.shards))
    store, catalog, limits = _load_catalog(args, args.data_dir, given,
                                           merge=view is None)
    shards = ShardSet(RuntimeConfig(data_dir=args.data_dir, shards=args.shards,
                                    fsync=args.fsync, shard_config=args.shard_config),
                      topics=catalog)
    metrics = _metrics(args, shards, lambda: owned)
    try:
        await shards.start(owned)
    except ShardLoadError as e:
        raise StartupError(str(e)) from None
    # A shard whose log is corrupt stays FAILED (it logged one line, its groups get
    # COORDINATOR_NOT_AVAILABLE); the others serve. The listening line counts loaded shards.
    loaded = len(owned) - len(shards.failed_shards())
    # The credentials and ACLs (security/store.py): in the data directory; a --processes
    # node has none of its own (its supervisor's directory is shared; docs/security.md).
    access = await _load_access(args, None if view is not None else args.data_dir, None,
                                shards)
    server = Server(_server_config(args, max_connections, limits, args.data_dir), shards,
                    store=store, cluster=view, access=access)
    if metrics is not None:
        metrics.watch_server(server)
    host, port = await _listen(server, shards, args)
    http = await _start_http(args, metrics, server)
    if not stop.is_set():
        _print_listening(host, port, loaded, args.data_dir, server)
        await stop.wait()
    log.info("shutting down")
    await _stop_http(http, metrics)
    await server.shutdown()
    return 0


async def _serve_cluster(args, given, stop: asyncio.Event) -> int:
    # The ClusterNode and the PostgreSQL store of the runtime (docs/cluster.md).
    from groupcoord.cluster.node import ClusterNode, NodeIdInUseError
    from groupcoord.runtime import RuntimeConfig, ShardSet
    from groupcoord.runtime.stores import PgStore
    where = redact(args.dsn)
    max_connections = check_open_files_limit(args.max_connections, args.shards, None)
    limits = _catalog_limits(args)
    log.info("cluster mode: node %d, store %s, %d shards, lease %d ms", args.node_id, where,
             args.shards, args.lease_ms)

    async def pause(seconds: float) -> None:
        # A signal while waiting for the store stops the node now, not after the retries.
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        if stop.is_set():
            raise _Stopped

    try:
        pool, cluster_id = await open_store(args.dsn, args.shards, sleep=pause)
    except _Stopped:
        log.info("stopped while waiting for the store")
        return 0
    try:
        store = PgCatalogStore(pool, where)
        try:
            catalog = await store.merge(given, limits)
        except CatalogError:
            raise
        except Exception as e:              # asyncpg, OS and timeout errors
            raise StartupError("cannot merge the topics into the catalog in %s: %s"
                               % (where, first_line(e))) from None
        _log_catalog(catalog, "the store's version %d" % store.version)
        view = ClusterView(args.node_id, args.shards)
        shards = ShardSet(RuntimeConfig(shards=args.shards,
                                        fsync=args.fsync, shard_config=args.shard_config),
                          topics=catalog, store=PgStore(pool, args.node_id),
                          on_fenced=view.fenced, lease_check=view.serving)
        # Ready once joined and every shard it holds a lease on is loaded.
        joined: list = []
        metrics = _metrics(args, shards, lambda: joined[0].machine.owned() if joined else None)
        await shards.start(shards=[])       # the ClusterNode loads the shards it acquires
        access = await _load_access(args, None, pool, shards)
        server = Server(_server_config(args, max_connections, limits, None,
                                       cluster_id=cluster_id),
                        shards, store=store, cluster=view, access=access)
        if metrics is not None:
            metrics.watch_server(server)
        host, port = await _listen(server, shards, args)
        http = await _start_http(args, metrics, server)
        # Registered with what clients are told (the advertised host, the bound port): the
        # other nodes list this one in Metadata and FindCoordinator from that row.
        # With several listeners, each one's address too (every node names the others'
        # addresses on the listener a client came in on).
        endpoints = ({b.listener.protocol: (b.node.host, b.address[1]) for b in server.bound}
                     if len(server.bound) > 1 else None)
        node = ClusterNode(pool, shards, node_id=args.node_id, host=server.node.host,
                           port=port, lease_ms=args.lease_ms, shard_count=args.shards,
                           endpoints=endpoints)
        view.node = node
        try:
            await node.start()
        except Exception as e:
            log.debug("cluster node start failed", exc_info=True)
            view.node = None
            await _stop_http(http, metrics)
            await server.shutdown()
            if isinstance(e, NodeIdInUseError):
                raise StartupError(str(e), status=2) from None
            raise StartupError("node %d could not join the cluster of %s: %s"
                               % (args.node_id, where, first_line(e))) from None
        joined.append(node)
        # The other nodes' catalog changes, checked as often as the leases are refreshed.
        follower = CatalogFollower(server, node.config.renew_every_ms / 1000.0)
        follower.start()
        # ... and their credential and ACL changes, as often.
        access_poll = asyncio.get_running_loop().create_task(
            _follow_access(access, node.config.renew_every_ms / 1000.0))
        if not stop.is_set():
            loaded = sum(1 for i in range(args.shards) if shards.loaded(i))
            _print_listening(host, port, loaded, where, server)
            await stop.wait()
        log.info("shutting down: handing this node's shards over")
        await _stop_http(http, metrics)
        try:
            # Unload and release every owned shard first, so that other nodes take them
            # at once rather than after the lease; requests meanwhile get NOT_COORDINATOR.
            await node.close()
        except Exception:
            log.exception("handing the shards over failed; they move when their leases "
                          "expire")
        await follower.stop()
        access_poll.cancel()
        await server.shutdown()
        return 0
    finally:
        try:
            await asyncio.wait_for(pool.close(), STORE_CONNECT_TIMEOUT_S)
        except Exception:                   # a store gone away: drop the connections
            pool.terminate()


class _Stopped(Exception):
    """SIGTERM/SIGINT before the node started."""


def _stop_event() -> asyncio.Event:
    """Set by SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):   # pragma: no cover - not on Windows
            pass
    return stop


def _load_catalog(args, directory: str, given, merge: bool = True) -> tuple:
    """Merge the topics given into the catalog stored in directory -> (CatalogStore,
    catalog, CatalogLimits); CatalogError for a partition decrease or a catalog over the
    limits. merge False: read it as stored (a --processes node)."""
    store = CatalogStore(directory)
    if not merge:
        catalog = store.load()
        changed, given_now = False, store.given     # load() read the recorded specs
    else:
        catalog, changed = merge_topics(store.load(), given, store.given)
        given_now = {s.name: s.partitions for s in given}
    limits = CatalogLimits(allow_create_topics=args.allow_create_topics,
                           max_topics=args.max_topics, max_partitions=args.max_partitions,
                           allow_delete_topics=args.allow_delete_topics)
    over = check_catalog_limits(catalog, limits)
    if over:
        raise CatalogError(over + " (raise the limit or give fewer topics)")
    if changed or given_now != store.given:
        store.save(catalog, given=given_now)
    log.info("topic catalog: %d topic(s)%s", len(catalog),
             "" if not len(catalog) else ": " + ", ".join(
                 "%s (%d)" % (t.name, t.partitions) for t in catalog))
    return store, catalog, limits


def _catalog_limits(args) -> CatalogLimits:
    return CatalogLimits(allow_create_topics=args.allow_create_topics,
                         max_topics=args.max_topics, max_partitions=args.max_partitions,
                         allow_delete_topics=args.allow_delete_topics)


def _log_catalog(catalog, where: str) -> None:
    log.info("topic catalog (%s): %d topic(s)%s", where, len(catalog),
             "" if not len(catalog) else ": " + ", ".join(
                 "%s (%d)" % (t.name, t.partitions) for t in catalog))


def _server_config(args, max_connections: int, limits, data_dir: Optional[str],
                   cluster_id: Optional[str] = None) -> ServerConfig:
    return ServerConfig(
        host=args.host, port=args.port, advertised_host=args.advertised_host,
        data_dir=data_dir, max_frame_bytes=args.max_frame_bytes,
        max_connections=max_connections,
        connections_max_idle_ms=args.connections_max_idle_ms,
        queued_max_request_bytes=args.queued_max_request_bytes,
        max_queued_response_bytes=args.max_queued_response_bytes,
        catalog_limits=limits, cluster_id=cluster_id,
        listeners=getattr(args, "listeners", ()),
        **({"security": args.security} if getattr(args, "security", None) else {}))


async def _listen(server: Server, shards, args) -> tuple:
    try:
        return await server.start()
    except OSError as e:
        await shards.close()
        raise StartupError("cannot listen on %s:%s: %s" % (args.host, args.port,
                                                           e.strerror or e)) from None


async def _follow_access(access: NodeAccess, period: float) -> None:
    """Cluster mode: apply the other nodes' credential and ACL changes every period; a
    store that is away is retried next period (one line per outage)."""
    failing = False
    while True:
        await asyncio.sleep(period)
        try:
            await access.poll()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not failing:
                log.warning("cannot read credential and ACL changes from the store: %s; "
                            "retrying every %.1f s", first_line(e), period)
            failing = True
            continue
        if failing:
            log.info("credential and ACL changes are read from the store again")
        failing = False


async def _load_access(args, data_dir: Optional[str], pool, shards) -> NodeAccess:
    """The node's credentials and ACLs, replayed from the security store of the data
    directory (file store) or of the PostgreSQL pool; neither: none (nothing stored)."""
    from groupcoord.security.store import FileSecurityStore, PgSecurityStore
    store = None
    if data_dir is not None:
        store = FileSecurityStore(data_dir)
    elif pool is not None:
        store = PgSecurityStore(pool)
    access = NodeAccess(getattr(args, "security", None) or SecurityConfig(), store)
    try:
        await access.load()
    except Exception as e:
        await shards.close()
        raise StartupError("cannot load the credentials and ACLs from %s: %s"
                           % (data_dir or redact(args.dsn), first_line(e))) from None
    return access


def _metrics(args, shards, owned) -> Optional[Metrics]:
    """--metrics-port: the node's metrics (server/metrics.py), hooked into the shards before
    they load (their loads are timed); owned() -> the shards the node owns, for /readyz."""
    if args.metrics_port is None:
        return None
    metrics = Metrics(shards, owned=owned)
    metrics.watch_shards()
    return metrics


async def _start_http(args, metrics: Optional[Metrics], server: Server):
    """The metrics port (http.py), once the listeners are bound -> its HttpServer, where
    other pages may add routes; None without --metrics-port. Cannot bind: a startup error."""
    if metrics is None:
        return None
    host = args.metrics_host or args.host
    port = args.metrics_port
    if port and args.process_node is not None:
        port += args.process_node - 1       # node i of --processes: PORT+i-1
    try:
        http = await serve_http(metrics, host, port)
    except OSError as e:
        await server.shutdown()
        raise StartupError("cannot listen on the metrics port %s:%s: %s"
                           % (host, port, e.strerror or e)) from None
    log.info("metrics on http://%s:%d/metrics (health: /healthz, /readyz)", *http.address)
    register_web_routes(http, server, args)
    return http


async def _stop_http(http, metrics: Optional[Metrics]) -> None:
    if http is not None:
        await http.close()
    if metrics is not None:
        metrics.stop()


def _print_listening(host: str, port: int, loaded: int, where: str, server=None) -> None:
    more = ""
    if server is not None and len(server.bound) > 1 or (
            server is not None and server.bound and server.bound[0].listener.protocol
            != "PLAINTEXT"):
        more = "; listeners: " + ", ".join("%s://%s:%d" % (b.listener.protocol, *b.address[:2])
                                           for b in server.bound)
    sys.stdout.write("groupcoord: listening on %s:%d (%d shards loaded from %s%s)\n"
                     % (host, port, loaded, where, more))
    sys.stdout.flush()
