"""`groupcoord users set|delete|list`: the SCRAM credentials in a node's store, offline.

    groupcoord users set NAME --mechanism SCRAM-SHA-512 --password-stdin [--iterations N]
                         [--store STORE | --data-dir DIR]
    groupcoord users delete NAME [--mechanism M] [--store STORE | --data-dir DIR]
    groupcoord users list [--json] [--store STORE | --data-dir DIR]

STORE is what `serve --store` takes (file:DIR, postgresql://...); --data-dir DIR is file:DIR;
neither is serve's default data directory. The store is created if missing (a data directory,
or the PostgreSQL schema), so users can be made before the first start. The password is read
from standard input (one trailing newline dropped; a terminal is asked without echo) and only
its salted SCRAM credential (security/scram.py) is written: never the password, and `list`
shows names, mechanisms and iteration counts only. A running node sees a change made here at
its next start with a file store, and within its next poll of the store with PostgreSQL.
Exit status: 0 done, 1 the store cannot be used or the user/mechanism does not exist, 2 usage.
"""
from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from typing import Optional

from groupcoord.cluster.status import redact
from groupcoord.security.records import (SecurityState, credential_record,
                                         credential_tombstone)
from groupcoord.security.scram import (MAX_ITERATIONS, MECHANISM_NAMES, MECHANISMS,
                                       MIN_ITERATIONS, make_credential)
from groupcoord.security.store import open_security_store
from groupcoord.server.catalog import CatalogError
from groupcoord.server.cluster_mode import DEFAULT_DATA_DIR, resolve_store

__all__ = ["add_users_parser", "run"]

PROG = "groupcoord users"
MAX_NAME_BYTES = 32767          # the record key's string (int16 length)
DEFAULT_ITERATIONS = 4096       # Kafka's kafka-configs default


class UsageError(Exception):
    """Exit status 2, the message on stderr."""


class Failure(Exception):
    """Exit status 1, the message on stderr."""


def _store_args(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--store", metavar="STORE",
                   help="the node's store, as `serve --store` takes it: file:DIR or "
                        "postgresql://USER@HOST:PORT/DB (created if missing)")
    g.add_argument("--data-dir", metavar="DIR",
                   help="the same as --store file:DIR (default: serve's, %s)" % DEFAULT_DATA_DIR)


def _mechanism(text: str) -> str:
    name = text.upper()
    if name not in MECHANISMS:
        raise argparse.ArgumentTypeError("%r is not a SCRAM mechanism (%s)"
                                         % (text, ", ".join(sorted(MECHANISMS))))
    return name


def add_users_parser(sub) -> None:
    u = sub.add_parser(
        "users", help="manage the SCRAM credentials of SASL users in the store",
        description="Manage the SCRAM credentials (SCRAM-SHA-256, SCRAM-SHA-512; PLAIN checks "
                    "against them too) of the users that authenticate with SASL. Works on the "
                    "store directly, with or without a running node, also before the first "
                    "start (the store is created). A running node sees the change at its next "
                    "start with a file store, and within a refresh period with a PostgreSQL "
                    "store. Admin clients can do the same over the wire "
                    "(AlterUserScramCredentials). Exit status: 0 done, 1 the store cannot be "
                    "used or no such user/mechanism, 2 usage error.")
    usub = u.add_subparsers(dest="users_command", metavar="USERS_COMMAND", required=True)
    s = usub.add_parser(
        "set", help="create or replace a user's credential (password from stdin)",
        description="Create or replace NAME's credential for each --mechanism. The password "
                    "is read from standard input: everything up to EOF with one trailing "
                    "newline dropped (`printf %%s \"$PW\" | ...` or `... < file`), or asked "
                    "without echo on a terminal. It is never written anywhere: only a random "
                    "salt, the iteration count and the SCRAM StoredKey/ServerKey derived from "
                    "it are stored. An empty or multi-line password is refused.")
    s.add_argument("name", metavar="NAME", help="the user name (principal User:NAME)")
    s.add_argument("--mechanism", action="append", type=_mechanism, required=True,
                   metavar="MECHANISM",
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeat to set both with one password)")
    s.add_argument("--password-stdin", action="store_true", required=True,
                   help="read the password from standard input (required: a password is "
                        "never taken from the command line)")
    s.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help="PBKDF2 iterations, %d to %d (default %%(default)s)"
                        % (MIN_ITERATIONS, MAX_ITERATIONS))
    _store_args(s)
    d = usub.add_parser(
        "delete", help="remove a user's credential(s)",
        description="Remove NAME's credential for each --mechanism given, or every credential "
                    "of NAME without one. Exit status 1 when there is nothing to remove.")
    d.add_argument("name", metavar="NAME", help="the user name")
    d.add_argument("--mechanism", action="append", type=_mechanism, metavar="MECHANISM",
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: all)")
    _store_args(d)
    ls = usub.add_parser(
        "list", help="list the users, their mechanisms and iteration counts",
        description="List every user with a credential: name, mechanism, iterations. Salts "
                    "and keys are never shown.")
    ls.add_argument("--json", action="store_true",
                    help="print a JSON array of {name, mechanism, iterations}")
    _store_args(ls)


def _store_spec(args) -> str:
    """--store / --data-dir through serve's parser (the same forms and errors: CatalogError)
    -> "file:DIR" or the DSN."""
    spec = argparse.Namespace(store=args.store, data_dir=args.data_dir, node_id=None,
                              lease_ms=None, catalog_dir=None)
    resolve_store(spec)
    return "file:" + spec.data_dir if spec.store_kind == "file" else spec.dsn


def _check_name(name: str) -> None:
    if not name:
        raise UsageError("the user name is empty")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UsageError("the user name is longer than %d bytes" % MAX_NAME_BYTES)


def read_password(stdin, name: str) -> str:
    """The password from ``stdin``: a terminal is asked without echo; otherwise everything up
    to EOF, one trailing newline ("\\n" or "\\r\\n") dropped. UsageError if empty, not UTF-8 or
    more than one line."""
    if stdin.isatty():
        text = getpass.getpass("Password for %s: " % name)
    else:
        raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError("the password on standard input is not UTF-8") from None
        if text.endswith("\r\n"):
            text = text[:-2]
        elif text.endswith("\n"):
            text = text[:-1]
    if not text:
        raise UsageError("empty password on standard input (give it with --password-stdin: "
                         "printf %s \"$PASSWORD\" | groupcoord users set ...)")
    if "\n" in text or "\r" in text:
        raise UsageError("the password on standard input has more than one line")
    return text


def _rows(state: SecurityState) -> list:
    return [{"name": user, "mechanism": MECHANISM_NAMES.get(mech, "mechanism-%d" % mech),
             "iterations": cred.iterations}
            for user in sorted(state.users)
            for mech, cred in sorted(state.users[user].items())]


def format_users(rows: list) -> str:
    if not rows:
        return "no users"
    width = max(4, max(len(r["name"]) for r in rows))
    lines = ["%-*s  %-14s %s" % (width, "NAME", "MECHANISM", "ITERATIONS")]
    lines += ["%-*s  %-14s %d" % (width, r["name"], r["mechanism"], r["iterations"])
              for r in rows]
    return "\n".join(lines)


async def _run(spec: str, args, password: Optional[str]) -> str:
    if spec.startswith("file:") and os.path.exists(spec[5:]) and not os.path.isdir(spec[5:]):
        raise Failure("data directory %s exists but is not a directory" % spec[5:])
    store = await open_security_store(spec)
    try:
        state = SecurityState.replay(await store.load())
        cmd = args.users_command
        if cmd == "list":
            rows = _rows(state)
            return json.dumps(rows, indent=2) if args.json else format_users(rows)
        if cmd == "set":
            mechs = list(dict.fromkeys(args.mechanism))
            records = [credential_record(args.name, make_credential(
                MECHANISMS[m], password, iterations=args.iterations)) for m in mechs]
            await store.append(records)
            return "user %s: %s set (%d iterations)" % (args.name, ", ".join(mechs),
                                                          args.iterations)
        have = state.users.get(args.name, {})
        if args.mechanism:
            mechs = list(dict.fromkeys(args.mechanism))
            missing = [m for m in mechs if MECHANISMS[m] not in have]
            if missing:
                raise Failure("user %s has no %s credential" % (args.name, ", ".join(missing)))
            codes = [MECHANISMS[m] for m in mechs]
        else:
            if not have:
                raise Failure("no user %s" % args.name)
            codes = sorted(have)
        await store.append([credential_tombstone(args.name, c) for c in codes])
        return "user %s: %s deleted" % (args.name, ", ".join(
            MECHANISM_NAMES.get(c, "mechanism-%d" % c) for c in codes))
    finally:
        await store.close()


def _store_errors() -> tuple:
    errors = (OSError, asyncio.TimeoutError, ValueError, RuntimeError)
    try:
        import asyncpg      # only a PostgreSQL store needs the driver
    except ImportError:     # pragma: no cover - asyncpg is a dependency
        return errors
    return errors + (asyncpg.PostgresError, asyncpg.InterfaceError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, asyncio.TimeoutError) or not text:
        return "no answer" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
    return text.splitlines()[0]


def run(args, stdin=None) -> int:
    stdin = sys.stdin if stdin is None else stdin
    try:
        try:
            spec = _store_spec(args)
        except CatalogError as exc:     # a --store that is no store
            raise UsageError(str(exc)) from None
        password = None
        if args.users_command in ("set", "delete"):
            _check_name(args.name)
        if args.users_command == "set":
            if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
                raise UsageError("--iterations must be %d to %d (Kafka's bounds), not %d"
                                 % (MIN_ITERATIONS, MAX_ITERATIONS, args.iterations))
            password = read_password(stdin, args.name)
    except UsageError as exc:
        print("%s: %s" % (PROG, exc), file=sys.stderr)
        return 2
    try:
        out = asyncio.run(_run(spec, args, password))
    except Failure as exc:
        print("%s: %s" % (PROG, exc), file=sys.stderr)
        return 1
    except _store_errors() as exc:
        print("%s: cannot use the store %s: %s" % (PROG, redact(spec), _first_line(exc)),
              file=sys.stderr)
        return 1
    print(out)
    if args.users_command != "list" and spec.startswith("file:"):
        print("note: a node running on this data directory sees the change at its next "
              "start", file=sys.stderr)
    return 0
