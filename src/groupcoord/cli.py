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
    args = p.parse_args(argv)
    if args.command in (None, "apis"):
        return cmd_apis(args)
    if args.command == "serve":
        from groupcoord.server.main import run
        return run(args)
    p.error("unknown command %r" % args.command)  # pragma: no cover - argparse rejects first
    return 2


if __name__ == "__main__":
    sys.exit(main())
