"""`groupcoord cluster status --store postgresql://...`: the nodes of a cluster and the owner,
epoch and lease left of every shard, read from the store (a table, or --json for scripts).

Liveness and lease times come from the database's clock, as the nodes decide them. A store
that cannot be reached, or that no node has made the schema in yet, is one line on stderr and
exit status 2 (no traceback).
"""
from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import urlsplit, urlunsplit

from groupcoord.cluster.pg_leases import missing_tables, read_nodes, read_shards

__all__ = ["add_cluster_parser", "fetch_status", "format_status", "run", "StatusError"]

DEFAULT_LEASE_MS = 10_000       # serve's --lease-ms default


class StatusError(Exception):
    """Why there is no status to show (the message is printed as is)."""


def add_cluster_parser(sub) -> None:
    c = sub.add_parser("cluster", help="inspect a cluster of nodes that share a store",
                       description="Inspect a cluster of groupcoord nodes that share a "
                                   "PostgreSQL store.")
    csub = c.add_subparsers(dest="cluster_command", metavar="CLUSTER_COMMAND", required=True)
    s = csub.add_parser(
        "status", help="the nodes and the owner of every shard",
        description="Print the nodes of the cluster (id, host:port, started, last seen, live: "
                    "seen within the lease) and every shard's owner, epoch and lease left, "
                    "as the store has them (times by the database's clock). Exit status: 0, "
                    "or 2 when the store cannot be reached or has no groupcoord schema yet.")
    s.add_argument("--store", required=True, metavar="DSN",
                   help="the cluster's store, postgresql://USER@HOST:PORT/DB")
    s.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS,
                   help="the nodes' --lease-ms: a node is live when seen within it (default "
                        "%(default)s)")
    s.add_argument("--json", action="store_true",
                   help="print one JSON object (store, schema_version, lease_ms, nodes, "
                        "shards) instead of tables")
    s.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for the store (default %(default)s)")


def redact(dsn: str) -> str:
    """The DSN without its password (it is printed in messages)."""
    try:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        netloc = "%s:***@%s" % (parts.username or "", parts.netloc.rpartition("@")[2])
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparsable DSN>"


async def fetch_status(dsn: str, lease_ms: int = DEFAULT_LEASE_MS, timeout: float = 10.0
                       ) -> dict:
    """The cluster's status as plain data; StatusError when there is none to read."""
    import asyncpg      # only this command needs the driver; `groupcoord` starts without it
    where = redact(dsn)
    try:
        conn = await asyncpg.connect(dsn, timeout=timeout, command_timeout=timeout)
    except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError,
            ValueError) as exc:
        raise StatusError("cannot reach the store %s: %s" % (where, _why(exc))) from None
    try:
        missing = await missing_tables(conn)
        if missing:
            raise StatusError("the store %s has no groupcoord schema yet (missing %s): a node "
                              "started with --store creates it" % (where, ", ".join(missing)))
        version = await conn.fetchval("SELECT max(version) FROM groupcoord_schema_version")
        nodes = await read_nodes(conn, lease_ms)
        shards = await read_shards(conn)
    except (OSError, asyncio.TimeoutError, asyncpg.PostgresError,
            asyncpg.InterfaceError) as exc:
        raise StatusError("reading the store %s failed: %s" % (where, _why(exc))) from None
    finally:
        try:
            await asyncio.wait_for(conn.close(), timeout)
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            conn.terminate()
    return {
        "store": where, "schema_version": version, "lease_ms": lease_ms,
        "nodes": [{"node_id": n.node_id, "host": n.host, "port": n.port,
                   "started_at": n.started_at.isoformat(), "last_seen": n.last_seen.isoformat(),
                   "seen_ms_ago": n.seen_ms_ago, "live": n.live} for n in nodes],
        "shards": [{"shard": s.shard, "owner": s.owner, "epoch": s.epoch,
                    "lease_left_ms": s.lease_left_ms} for s in shards],
    }


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, asyncio.TimeoutError) or not text:
        text = "no answer" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
    return text.splitlines()[0]


def _seconds(ms) -> str:
    return "%.1f s" % (ms / 1000.0)


def format_status(st: dict) -> str:
    nodes, shards = st["nodes"], st["shards"]
    live = sum(1 for n in nodes if n["live"])
    lines = ["store %s, schema version %s; live = seen within %d ms"
             % (st["store"], st["schema_version"], st["lease_ms"]),
             "", "nodes: %d, %d live" % (len(nodes), live)]
    if nodes:
        lines.append("  %6s  %-24s %-21s %14s  %s" % ("node", "address", "started (UTC)",
                                                      "last seen", "live"))
        for n in nodes:
            lines.append("  %6d  %-24s %-21s %14s  %s" % (
                n["node_id"], "%s:%d" % (n["host"], n["port"]),
                n["started_at"][:19].replace("T", " "),   # asyncpg answers in UTC
                _seconds(n["seen_ms_ago"]) + " ago", "yes" if n["live"] else "no"))
    owners = {s["owner"] for s in shards if s["owner"] is not None}
    lines += ["", "shards: %d, %d owned by %d node(s)"
              % (len(shards), sum(1 for s in shards if s["owner"] is not None), len(owners))]
    if shards:
        lines.append("  %6s  %6s  %8s  %12s" % ("shard", "owner", "epoch", "lease left"))
        for s in shards:
            left = s["lease_left_ms"]
            lines.append("  %6d  %6s  %8d  %12s" % (
                s["shard"], "-" if s["owner"] is None else s["owner"], s["epoch"],
                "-" if left is None else ("expired" if left <= 0 else _seconds(left))))
    return "\n".join(lines)


def run(args) -> int:
    if not args.store.startswith(("postgresql://", "postgres://")):
        print("groupcoord cluster status: --store must be postgresql://USER@HOST:PORT/DB (a "
              "file: store is one node, no cluster)", file=sys.stderr)
        return 2
    if args.lease_ms <= 0:
        print("groupcoord cluster status: --lease-ms must be positive", file=sys.stderr)
        return 2
    try:
        st = asyncio.run(fetch_status(args.store, args.lease_ms, args.timeout))
    except StatusError as exc:
        print("groupcoord cluster status: %s" % exc, file=sys.stderr)
        return 2
    print(json.dumps(st, indent=2) if args.json else format_status(st))
    return 0
