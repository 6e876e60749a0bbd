"""The `groupcoord` command."""
import argparse
import sys

import groupcoord


def _apis():
    from groupcoord.protocol import messages, supported_versions
    names = {c.API_KEY: c.__name__[:-len("Request")]
             for c in vars(messages).values()
             if isinstance(c, type) and getattr(c, "KIND", None) == "request"}
    return [(k, names[k], lo, hi) for k, (lo, hi) in supported_versions().items()]


def cmd_apis(args) -> int:
    print("groupcoord %s speaks these Kafka APIs:" % groupcoord.__version__)
    print("%7s  %-32s %s" % ("api key", "name", "versions"))
    for key, name, lo, hi in _apis():
        print("%7d  %-32s %d-%d" % (key, name, lo, hi))
    return 0


def _add_log_parser(sub):
    lg = sub.add_parser("log", help="offline tools for the shard logs of a data directory",
                        description="Offline tools for the shard logs of a data directory "
                                    "(run them while no node uses it).")
    lsub = lg.add_subparsers(dest="log_command", metavar="LOG_COMMAND", required=True)
    v = lsub.add_parser(
        "verify", help="check every shard log for corruption without changing anything",
        description="Check the logs of a data directory (every __consumer_offsets-<n> shard "
                    "directory in it), or one shard directory, the way start-up recovery "
                    "does, but read-only: nothing is truncated or removed. Corruption is: a "
                    "segment file missing (the first one, or one the log-checkpoint lists), "
                    "a segment cut at a batch boundary (shorter than its recorded size), a bad "
                    "batch (CRC32C, lengths, offsets going back) in bytes that were fsynced or "
                    "followed by valid batches, an unreadable log-checkpoint. Prints one line "
                    "per problem, 'FILE: position P (log offset O): REASON', then a summary. "
                    "Lines starting with 'note:' are not corruption (a torn tail after the "
                    "durable point, which start-up truncates; an unfinished compaction's "
                    "output; no checkpoint yet). Exit status: 0 clean, 1 corruption found, 2 "
                    "usage error (no such directory, no log in it).")
    v.add_argument("dir", metavar="DIR", help="a data directory (--data-dir of serve) or one "
                                              "shard directory in it")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="groupcoord",
        description="A high-throughput coordinator for Kafka-protocol groups (classic "
                    "JoinGroup/SyncGroup, KIP-848 consumer groups, Kafka Connect worker "
                    "groups). Run without a command to print the version and the APIs.")
    p.add_argument("--version", action="version", version="groupcoord " + groupcoord.__version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("apis", help="list the Kafka APIs and versions this build speaks")
    from groupcoord.server.main import add_serve_parser
    add_serve_parser(sub)
    _add_log_parser(sub)
    from groupcoord.cluster.status import add_cluster_parser
    add_cluster_parser(sub)
    from groupcoord.security.users_cli import add_users_parser
    add_users_parser(sub)
    from groupcoord.admin_cli.groups import add_groups_parser
    add_groups_parser(sub)
    args = p.parse_args(argv)
    if args.command in (None, "apis"):
        return cmd_apis(args)
    if args.command == "serve":
        from groupcoord.server.main import run
        return run(args)
    if args.command == "log":
        from groupcoord.storage.verify import verify_main
        return verify_main(args.dir)
    if args.command == "cluster":
        from groupcoord.cluster.status import run as cluster_status
        return cluster_status(args)
    if args.command == "users":
        from groupcoord.security.users_cli import run as users_run
        return users_run(args)
    if args.command == "groups":
        from groupcoord.admin_cli.groups import run as groups_run
        return groups_run(args)
    p.error("unknown command %r" % args.command)  # pragma: no cover - argparse rejects first
    return 2


if __name__ == "__main__":
    sys.exit(main())
