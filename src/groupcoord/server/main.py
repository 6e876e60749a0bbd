"""`groupcoord serve`: wire the runtime's ShardSet and the Server together and run them.

Startup: merge --topic/--topics-file into <data-dir>/topics.json, load every shard
(``ShardSet.start``), bind, then print exactly one line to stdout and flush it:

    groupcoord: listening on HOST:PORT (N shards loaded from DATA_DIR)

Logs go to stderr. SIGTERM or SIGINT: graceful shutdown (Server.shutdown), exit status 0.
Startup errors (bad topic spec, partition decrease, port in use, a data directory that is
a file or cannot be created or written) exit 1 (2 for bad arguments) with one line on stderr. A shard with a corrupt log is no startup error: it stays
FAILED (one line on stderr) and N counts only the shards that loaded.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Optional

from groupcoord.server.catalog import (CatalogError, CatalogStore, load_topics_file,
                                       merge_topics, parse_topic_arg)
from groupcoord.server.topic_admin import CatalogLimits, check_catalog_limits
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
    s.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="event loop: uvloop (default) or the stock asyncio loop (debugging)")
    s.add_argument("--log-level", default="INFO",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                   type=str.upper, help="stderr log level (default %(default)s)")
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


# Descriptors besides connections and segment files: listening sockets, stdio, the event
# loop's own (epoll, self-pipe), the catalog and cluster-id files, log handlers.
FD_MARGIN = 64
# The default --max-connections: whatever the descriptors allow, up to this. A fixed default
# (it was 10,000) refused the 10,000th member of a big group plus any admin connection on a
# machine that could hold far more; Kafka's max.connections is unbounded.
MAX_CONNECTIONS_CAP = 1_000_000


def check_open_files_limit(max_connections: Optional[int], shards: int, data_dir: str) -> int:
    """Compare RLIMIT_NOFILE with what this node may hold open: every connection, one
    descriptor per segment file (each segment keeps its read descriptor), and per shard its
    write descriptor plus one for a segment roll or a compaction's output. Raise the soft
    limit towards the hard one where it is short; log one line saying what was done (a
    warning when still short: a roll that cannot open its file fails its shard).
    max_connections None (the default of --max-connections): raise the soft limit to the
    hard one and allow every descriptor the logs leave, up to MAX_CONNECTIONS_CAP. Returns
    the max connections to enforce."""
    try:
        import resource
    except ImportError:                 # pragma: no cover - not on Windows
        return MAX_CONNECTIONS_CAP if max_connections is None else max_connections
    segments = 0
    try:
        for name in os.listdir(data_dir):
            d = os.path.join(data_dir, name)
            if name.startswith("__consumer_offsets-") and os.path.isdir(d):
                segments += sum(1 for f in os.listdir(d) if f.endswith(".log"))
    except OSError:
        pass                            # no data yet: only the margin below counts
    if max_connections is None:
        return _connections_from_limit(resource, segments, shards)
    need = max_connections + segments + 2 * shards + FD_MARGIN
    what = ("%d connections + %d segment files + %d shards x 2 + %d"
            % (max_connections, segments, shards, FD_MARGIN))
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == inf or soft >= need:
        log.info("open files limit %s covers the %d this node may use (%s)",
                 "unlimited" if soft == inf else soft, need, what)
        return max_connections
    raised = None
    for target in ([hard] if hard != inf else []) + [need]:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):   # e.g. the hard limit is above fs.nr_open
            continue
        raised = target
        break
    new = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    hard_s = "unlimited" if hard == inf else str(hard)
    if raised is not None and (new == inf or new >= need):
        log.info("open files limit: raised the soft limit from %d to %s (hard limit %s) for "
                 "the %d this node may use (%s)", soft, new, hard_s, need, what)
    else:
        log.warning("open files limit %d (hard limit %s%s) is below the %d this node may use "
                    "(%s): connections beyond it are refused and a shard whose segment roll "
                    "cannot open its file fails and reloads; raise the limit (ulimit -n) or "
                    "lower --max-connections", new, hard_s,
                    "; soft limit raised from %d" % soft if new != soft else "", need, what)
    return max_connections


def _connections_from_limit(resource, segments: int, shards: int) -> int:
    """The default --max-connections: the soft RLIMIT_NOFILE raised to the hard limit, less
    the descriptors the logs need, capped. One log line says what was chosen."""
    inf = resource.RLIM_INFINITY
    reserved = segments + 2 * shards + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_CONNECTIONS_CAP + reserved
    if soft != inf and soft < want and soft != hard:
        for target in ([hard] if hard != inf else []) + [want]:
            if hard != inf and target > hard:
                continue
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                break
            except (ValueError, OSError):   # e.g. the hard limit is above fs.nr_open
                continue
    new = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    conns = MAX_CONNECTIONS_CAP if new == inf else max(1, min(MAX_CONNECTIONS_CAP,
                                                              new - reserved))
    how = ("max connections %d: the open files limit %s%s less %d for the logs (%d segment "
           "files + %d shards x 2 + %d)" % (conns, "unlimited" if new == inf else new,
                                            " (raised from %d)" % soft if new != soft else "",
                                            reserved, segments, shards, FD_MARGIN))
    if conns < 1024:
        log.warning("%s: few; raise the open files limit (ulimit -n) or give "
                    "--max-connections", how)
    else:
        log.info("%s", how)
    return conns


def check_data_dir(path: str) -> None:
    """Create the data directory if missing and prove it writable (a probe file), so that a
    path that is a file, a parent we may not write, or a read-only directory is one line at
    startup (StartupError) rather than a traceback from the first write."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise StartupError("data directory %s exists but is not a directory" % path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise StartupError("cannot create data directory %s: %s" % (path, _os_error(e))) \
            from None
    probe = os.path.join(path, ".groupcoord-write-probe-%d" % os.getpid())
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise StartupError("data directory %s is not writable: %s" % (path, _os_error(e))) \
            from None


def _os_error(e: OSError) -> str:
    """'Permission denied: /a/b' from an OSError (its str() repeats the errno)."""
    what = e.strerror or str(e)
    return "%s: %s" % (what, e.filename) if e.filename else what


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
    except OSError as e:
        # An I/O failure no check above foresaw (a shard directory we may not write, a full
        # disk while saving the catalog): one line; the traceback at --log-level DEBUG.
        log.debug("startup failed", exc_info=True)
        print("groupcoord serve: error: %s" % _os_error(e), file=sys.stderr, flush=True)
        return 1


async def _serve(args, given) -> int:
    try:
        from groupcoord.runtime import RuntimeConfig, ShardSet
        from groupcoord.runtime.shards import ShardLoadError
    except ImportError as e:   # pragma: no cover - the runtime is part of the package
        raise StartupError("the coordinator runtime is not available: %s" % e) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):   # pragma: no cover - not on Windows
            pass

    check_data_dir(args.data_dir)
    max_connections = check_open_files_limit(args.max_connections, args.shards, args.data_dir)
    store = CatalogStore(args.data_dir)
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

    shards = ShardSet(RuntimeConfig(data_dir=args.data_dir, shards=args.shards,
                                    fsync=args.fsync, shard_config=args.shard_config),
                      topics=catalog)
    try:
        await shards.start()
    except ShardLoadError as e:
        raise StartupError(str(e)) from None
    # A shard whose log is corrupt stays FAILED (it logged one line, its groups get
    # COORDINATOR_NOT_AVAILABLE); the others serve. The listening line counts loaded shards.
    loaded = args.shards - len(shards.failed_shards())
    server = Server(ServerConfig(
        host=args.host, port=args.port, advertised_host=args.advertised_host,
        data_dir=args.data_dir, max_frame_bytes=args.max_frame_bytes,
        max_connections=max_connections,
        connections_max_idle_ms=args.connections_max_idle_ms,
        queued_max_request_bytes=args.queued_max_request_bytes,
        max_queued_response_bytes=args.max_queued_response_bytes,
        catalog_limits=limits), shards, store=store)
    try:
        host, port = await server.start()
    except OSError as e:
        await shards.close()
        raise StartupError("cannot listen on %s:%s: %s" % (args.host, args.port,
                                                           e.strerror or e)) from None
    if not stop.is_set():
        sys.stdout.write("groupcoord: listening on %s:%d (%d shards loaded from %s)\n"
                         % (host, port, loaded, args.data_dir))
        sys.stdout.flush()
        await stop.wait()
    log.info("shutting down")
    await server.shutdown()
    return 0
