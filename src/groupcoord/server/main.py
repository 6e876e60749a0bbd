"""`groupcoord serve`: wire the runtime's Coordinator and the Server together and run them.

Startup: merge --topic/--topics-file into <data-dir>/topics.json, load every shard
(``Coordinator.start``), bind, then print exactly one line to stdout and flush it:

    groupcoord: listening on HOST:PORT (N shards loaded from DATA_DIR)

Logs go to stderr. SIGTERM or SIGINT: graceful shutdown (Server.shutdown), exit status 0.
Startup errors (bad topic spec, partition decrease, port in use) exit 1 (2 for bad
arguments) with one line on stderr.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from groupcoord.server.catalog import (CatalogError, CatalogStore, load_topics_file,
                                       merge_topics, parse_topic_arg)
from groupcoord.server.server import Server, ServerConfig

__all__ = ["add_serve_parser", "run"]

log = logging.getLogger("groupcoord.serve")


class StartupError(Exception):
    pass


def add_serve_parser(sub):
    from groupcoord.protocol import DEFAULT_MAX_FRAME_BYTES
    s = sub.add_parser(
        "serve", help="run a coordinator node that Kafka clients connect to",
        description="Run a groupcoord coordinator node. Kafka clients bootstrap to it, find it "
                    "as their group coordinator and form classic, consumer (KIP-848) and "
                    "Connect groups through it. Once every shard is loaded and the socket "
                    "listens, one line 'groupcoord: listening on HOST:PORT (N shards loaded "
                    "from DATA_DIR)' is printed to stdout; logs go to stderr. SIGTERM/SIGINT "
                    "shut down gracefully (exit status 0).")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 for all IPv4 "
                        "interfaces)")
    s.add_argument("--port", type=int, default=9092,
                   help="TCP port (default %(default)s; 0 picks a free port, printed in the "
                        "listening line)")
    s.add_argument("--advertised-host", default=None,
                   help="host name clients are told to connect to in Metadata and "
                        "FindCoordinator (default: --host)")
    s.add_argument("--data-dir", default="./groupcoord-data",
                   help="directory of the shard logs, topics.json and cluster-id (default "
                        "%(default)s; created if missing)")
    s.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                   help="a topic of the catalog, e.g. orders:6 (repeatable); merged into the "
                        "stored catalog: new topics are added, a partition count can grow "
                        "but never shrink")
    s.add_argument("--topics-file", default=None, metavar="PATH",
                   help='JSON file of topics: [{"name": "orders", "partitions": 6}, ...], '
                        "merged like --topic")
    s.add_argument("--shards", type=int, default=50,
                   help="number of coordinator shards (each a single-threaded state machine "
                        "with its own log; default %(default)s). Groups map to shards by "
                        "hash, so keep it fixed for a data directory")
    s.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES,
                   help="largest request accepted, in bytes; a bigger size prefix closes the "
                        "connection (default %(default)s = 100 MiB, like Kafka's "
                        "socket.request.max.bytes)")
    s.add_argument("--max-connections", type=int, default=10_000,
                   help="open client connections allowed; further ones are closed at once "
                        "(default %(default)s)")
    s.add_argument("--connections-max-idle-ms", type=int, default=600_000,
                   help="close connections with no traffic and no request in flight for this "
                        "long (default %(default)s, Kafka's connections.max.idle.ms; 0 never)")
    s.add_argument("--fsync", choices=("always", "unsafe-no-fsync"), default="always",
                   help="'always' (default): a response that depends on a write is sent after "
                        "the write is fsynced (group commit). 'unsafe-no-fsync': skip fsync; "
                        "a machine crash can lose acknowledged state (tests, benchmarks)")
    from groupcoord.coordinator.config import ShardConfig
    s.add_argument("--group-config", action="append", default=[], metavar="NAME=VALUE",
                   help="a group setting by its Kafka broker name (repeatable), e.g. "
                        "group.initial.rebalance.delay.ms=0 or "
                        "group.consumer.heartbeat.interval.ms=1000. Known: %s"
                        % ", ".join("%s (default %s)" % (_kafka_name(f), _show(v))
                                    for f, v in _defaults(ShardConfig)))
    s.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="event loop: uvloop (default) or the stock asyncio loop (debugging)")
    s.add_argument("--log-level", default="INFO",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                   type=str.upper, help="stderr log level (default %(default)s)")
    return s


def _kafka_name(field: str) -> str:
    """ShardConfig field -> Kafka's broker setting name (group.consumer.* for consumer_*)."""
    if field.startswith(("consumer_", "connect_")):
        field = "group_" + field
    return field.replace("_", ".")


def _show(v) -> str:
    return ",".join(v) if isinstance(v, tuple) else str(v)


def _defaults(cls) -> list:
    d = cls()
    return [(f, getattr(d, f)) for f in cls.__struct_fields__]


def parse_group_config(items) -> "object":
    """['group.initial.rebalance.delay.ms=0', ...] -> ShardConfig; CatalogError if unknown."""
    import msgspec
    from groupcoord.coordinator.config import ShardConfig
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
                kw[field] = int(value)
        except ValueError:
            raise CatalogError("--group-config %s: %r is not an integer" % (name, value)) \
                from None
    return msgspec.structs.replace(ShardConfig(), **kw)


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
    if args.max_connections < 1:
        raise CatalogError("--max-connections must be at least 1")
    if args.connections_max_idle_ms < 0:
        raise CatalogError("--connections-max-idle-ms must be >= 0")


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
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        _check_args(args)
        given = _topics_given(args)
        args.shard_config = parse_group_config(args.group_config)
    except CatalogError as e:
        print("groupcoord serve: error: %s" % e, file=sys.stderr, flush=True)
        return 2
    factory = _loop_factory(args.loop)
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_serve(args, given))
    except (StartupError, CatalogError) as e:
        print("groupcoord serve: error: %s" % e, file=sys.stderr, flush=True)
        return 1


async def _serve(args, given) -> int:
    try:
        from groupcoord.runtime import Coordinator, RuntimeConfig
    except ImportError as e:   # pragma: no cover - the runtime is part of the package
        raise StartupError("the coordinator runtime is not available: %s" % e) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):   # pragma: no cover - not on Windows
            pass

    try:
        os.makedirs(args.data_dir, exist_ok=True)
    except OSError as e:
        raise StartupError("cannot create data directory %s: %s" % (args.data_dir, e)) from None
    store = CatalogStore(args.data_dir)
    catalog, changed = merge_topics(store.load(), given)
    if changed:
        store.save(catalog)
    log.info("topic catalog: %d topic(s)%s", len(catalog),
             "" if not len(catalog) else ": " + ", ".join(
                 "%s (%d)" % (t.name, t.partitions) for t in catalog))

    coord = Coordinator(RuntimeConfig(data_dir=args.data_dir, shards=args.shards,
                                      fsync=args.fsync, shard_config=args.shard_config),
                        topics=catalog)
    await coord.start()
    server = Server(ServerConfig(
        host=args.host, port=args.port, advertised_host=args.advertised_host,
        data_dir=args.data_dir, max_frame_bytes=args.max_frame_bytes,
        max_connections=args.max_connections,
        connections_max_idle_ms=args.connections_max_idle_ms), coord, store=store)
    try:
        host, port = await server.start()
    except OSError as e:
        await coord.close()
        raise StartupError("cannot listen on %s:%s: %s" % (args.host, args.port,
                                                           e.strerror or e)) from None
    if not stop.is_set():
        sys.stdout.write("groupcoord: listening on %s:%d (%d shards loaded from %s)\n"
                         % (host, port, args.shards, args.data_dir))
        sys.stdout.flush()
        await stop.wait()
    log.info("shutting down")
    await server.shutdown()
    return 0
