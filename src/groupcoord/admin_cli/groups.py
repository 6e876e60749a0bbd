"""`groupcoord groups`: list, describe, reset the offsets of, and delete groups over the Kafka
protocol (admin.py), against groupcoord or Apache Kafka, with kafka-consumer-groups' columns.

    groupcoord groups --bootstrap-server HOST:PORT list [--type T[,T]] [--state S[,S]] [--json]
    groupcoord groups --bootstrap-server HOST:PORT describe --group G [--members] [--offsets]
                                                   [--state] [--verbose] [--json]
    groupcoord groups --bootstrap-server HOST:PORT reset-offsets --group G --topic T[:P,...]
                      (--to-earliest | --to-offset N | --shift-by N) [--dry-run | --execute]
    groupcoord groups --bootstrap-server HOST:PORT delete --group G
    --command-config FILE     (any of them) Kafka client properties: TLS and SASL
                              (client/security.py ClientSecurity.from_properties)

Tables: one header line, then one line per row, columns left-aligned and two spaces apart, "-"
for nothing; a table without rows prints nothing at all. Notes (the group is empty or
rebalancing, a dry run) go to stderr, so stdout is only the tables (or the JSON).

Where this differs from kafka-consumer-groups, on purpose:
  * describe lists the offset rows sorted by topic and partition (Kafka: by member first);
  * list always shows GROUP, TYPE and STATE (Kafka 4 shows TYPE / STATE when asked for them);
  * reset-offsets does not lower a new offset above the log end to the log end: groupcoord
    stores no records, its log end is always 0, and its groups' offsets point into data kept
    elsewhere. Below the log start offset the broker reports it is raised to it, as Kafka does.
Like Kafka: reset-offsets (dry run included) is refused unless the group is Empty or does
not exist (Dead); --shift-by needs a committed offset on every partition it moves.

Exit status: 0 done; 1 the operation failed (a Kafka error, printed as NAME (code): message;
no bootstrap server reachable; a refused reset); 2 usage error.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Optional

from groupcoord.admin_cli.admin import (EARLIEST, GROUP_TYPES, LATEST, GroupAdmin,
                                        GroupDescription)
from groupcoord.client.errors import ClientError, ResponseError
from groupcoord.client.security import ClientSecurity, load_properties
from groupcoord.protocol.error_codes import ErrorCode as E, error_name

__all__ = ["add_groups_parser", "run", "table"]

PROG = "groupcoord groups"
DEFAULT_TIMEOUT_S = 30.0
# Every state name a group of some type reports (classic; consumer; connect uses the
# consumer ones): --state is checked against them, case-insensitively.
STATES = ("Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Assigning",
          "Reconciling", "Dead")
_REBALANCING = {"preparingrebalance", "completingrebalance", "assigning", "reconciling"}
_INACTIVE = {"empty", "dead"}


class UsageError(Exception):
    """Exit status 2."""


class Failure(Exception):
    """Exit status 1; the message is printed as is."""


# -- arguments -------------------------------------------------------------------------------
def _bootstrap_list(text: str) -> list:
    out = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError("--bootstrap-server: %r is not HOST:PORT" % part.strip())
        out.append((host.strip("[]"), int(port)))
    return out


def _names(choices, what: str):
    """argparse type: a comma-separated list of names out of `choices` (any case) -> the
    lower-case names."""
    known = {c.lower(): c for c in choices}

    def parse(text: str) -> list:
        out = []
        for name in (x.strip() for x in text.split(",")):
            if name.lower() not in known:
                raise argparse.ArgumentTypeError("%r is not a group %s (%s)"
                                                 % (name, what, ", ".join(choices)))
            out.append(name.lower())
        return out
    return parse


def _topic_spec(text: str) -> tuple:
    """T or T:P,P,... -> (topic, [partitions] or None for every partition)."""
    topic, sep, parts = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError("%r: no topic name" % text)
    if not sep:
        return topic, None
    try:
        ps = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError("%r: partitions are numbers, T:0,1,2" % text) from None
    if not ps or ps[0] < 0:
        raise argparse.ArgumentTypeError("%r: partitions are numbers >= 0" % text)
    return topic, ps


def _offset(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an offset" % text) from None
    if n < 0:
        raise argparse.ArgumentTypeError("an offset is >= 0, not %d" % n)
    return n


def _connection_args(p, top: bool) -> None:
    # On `groups` and again on each subcommand, so they may come before or after it; the
    # subcommands' copies leave the attribute alone unless given (SUPPRESS).
    kw = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                   help="the servers to connect to (required)", **({"default": None} | kw))
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="bound on the whole command, retries included (default %s)"
                        % DEFAULT_TIMEOUT_S, **({"default": DEFAULT_TIMEOUT_S} | kw))
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for TLS and SASL (kafka-consumer-groups' "
                        "flag): security.protocol, sasl.mechanism, sasl.jaas.config or "
                        "sasl.username/sasl.password, ssl.truststore.location or "
                        "ssl.ca.location (PEM), ...; other keys are ignored",
                   **({"default": None} | kw))


def add_groups_parser(sub) -> None:
    g = sub.add_parser(
        "groups", help="list, describe, reset the offsets of, and delete groups",
        description="List, describe, reset the offsets of, and delete groups of every type "
                    "(classic, KIP-848 consumer, connect), over the Kafka protocol: works "
                    "against groupcoord and Apache Kafka alike. Tables have "
                    "kafka-consumer-groups' columns; --json gives the same as JSON. Notes "
                    "(an empty or rebalancing group, a dry run) go to stderr. Exit status: 0 "
                    "done, 1 the operation failed (a Kafka error, printed as NAME (code): "
                    "message, or no server reachable, or a refused reset), 2 usage error.")
    _connection_args(g, top=True)
    gsub = g.add_subparsers(dest="groups_command", metavar="GROUPS_COMMAND", required=True)

    ls = gsub.add_parser(
        "list", help="every group with its type and state",
        description="List every group of every broker: GROUP, TYPE (Classic, Consumer = "
                    "KIP-848, Connect) and STATE, sorted by group. Filters are sent to the "
                    "broker (ListGroups v5 TypesFilter, v4 StatesFilter) and applied here "
                    "too, so an older broker that cannot filter gives the same answer.")
    _connection_args(ls, top=False)
    ls.add_argument("--type", action="extend", type=_names(GROUP_TYPES, "type"),
                    metavar="TYPE[,TYPE]", help="only groups of these types: "
                    + ", ".join(GROUP_TYPES))
    ls.add_argument("--state", action="extend", type=_names(STATES, "state"),
                    metavar="STATE[,STATE]",
                    help="only groups in these states (any case): " + ", ".join(STATES))
    ls.add_argument("--json", action="store_true",
                    help="a JSON list of {group, type, state, protocol_type}")

    d = gsub.add_parser(
        "describe", help="a group's committed offsets and lag, members, or state",
        description="Describe one group. --offsets (the default for classic and consumer "
                    "groups): GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG "
                    "CONSUMER-ID HOST CLIENT-ID, one row per partition that is assigned or "
                    "has a committed offset; LOG-END-OFFSET is what the partition's leader "
                    "answers to ListOffsets (groupcoord stores no records: 0), LAG = "
                    "LOG-END-OFFSET - CURRENT-OFFSET. --members (the default for connect "
                    "groups): GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS (connect: GROUP "
                    "MEMBER-ID HOST CLIENT-ID #CONNECTORS #TASKS); --verbose adds the "
                    "instance id, the member epoch and the assignments. --state: GROUP "
                    "COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS (--verbose: and the "
                    "epochs). Several views print one after the other. --json prints "
                    "everything (group, members, offsets) as one object whatever the views.")
    _connection_args(d, top=False)
    d.add_argument("--group", required=True, help="the group id")
    d.add_argument("--offsets", action="store_true", help="committed offsets and lag")
    d.add_argument("--members", action="store_true", help="members and their assignments")
    d.add_argument("--state", action="store_true", help="state, coordinator, assignor")
    d.add_argument("--verbose", action="store_true", help="more columns for --members/--state")
    d.add_argument("--json", action="store_true", help="one JSON object instead of tables")

    r = gsub.add_parser(
        "reset-offsets", help="set a group's committed offsets (dry run unless --execute)",
        description="Work out new committed offsets for the group on the given partitions "
                    "and print them (GROUP TOPIC PARTITION NEW-OFFSET); with --execute, "
                    "commit them (OffsetCommit as an admin tool: no member, generation -1). "
                    "As kafka-consumer-groups: refused, dry run included, unless the group "
                    "is Empty or does not exist yet; --to-earliest asks each partition's "
                    "leader for its log start offset; a new offset below the log start is "
                    "raised to it; --shift-by needs a committed offset on every partition. "
                    "Unlike Kafka, an offset above the log end is kept (groupcoord stores no "
                    "records: its log end is always 0).")
    _connection_args(r, top=False)
    r.add_argument("--group", required=True, help="the group id")
    r.add_argument("--topic", required=True, action="append", type=_topic_spec,
                   metavar="TOPIC[:P,P...]",
                   help="a topic (every partition) or some of its partitions; repeatable")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-offset", type=_offset, metavar="N", help="offset N")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="the committed offset + N (N may be negative)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    r.add_argument("--json", action="store_true",
                   help="a JSON object {group, executed, offsets} instead of the table")

    x = gsub.add_parser(
        "delete", help="delete a group and its committed offsets",
        description="Delete a group and its committed offsets (DeleteGroups). The broker "
                    "refuses a group that has members: NON_EMPTY_GROUP (68), exit status 1.")
    _connection_args(x, top=False)
    x.add_argument("--group", required=True, help="the group id")


# -- output ----------------------------------------------------------------------------------
def _cell(v) -> str:
    return "-" if v is None or v == "" else str(v)


def table(headers, rows) -> str:
    """The rows under the headers, columns padded to their widest cell, two spaces apart;
    "" when there are no rows."""
    if not rows:
        return ""
    cells = [list(headers)] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in cells)


def _emit(text: str) -> None:
    if text:
        print(text)


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def kafka_error_text(e: ResponseError) -> str:
    code = int(e.code)
    return "%s (%d): %s" % (error_name(code), code, e.message)


def _parts_text(parts: dict) -> str:
    """{topic: [p]} -> kafka-consumer-groups' "topic(0,1,2),other(3)"."""
    return ",".join("%s(%s)" % (t, ",".join(map(str, ps))) for t, ps in parts.items()) or None


def _work_text(connectors, tasks: dict) -> Optional[str]:
    """A connect member's work: "orders(connector,0,1),audit(2)"."""
    out = []
    for name in sorted(set(connectors) | set(tasks)):
        items = (["connector"] if name in connectors else []) + [str(t) for t in
                                                                 tasks.get(name, [])]
        out.append("%s(%s)" % (name, ",".join(items)))
    return ",".join(out) or None


def _kind(d: GroupDescription) -> str:
    return "Connect group" if d.type == "connect" else "Consumer group"


def _type_name(t: Optional[str]) -> Optional[str]:
    return t.capitalize() if t else t


# -- commands --------------------------------------------------------------------------------
async def cmd_list(admin: GroupAdmin, args) -> int:
    groups = await admin.list_groups(args.type or (), args.state or ())
    if args.json:
        print(json.dumps([{"group": g.group_id, "type": g.type, "state": g.state,
                           "protocol_type": g.protocol_type} for g in groups], indent=2))
    else:
        _emit(table(("GROUP", "TYPE", "STATE"),
                    [(g.group_id, _type_name(g.type), g.state) for g in groups]))
    return 0


async def _describe(admin: GroupAdmin, group: str) -> GroupDescription:
    try:
        return await admin.describe_group(group)
    except ResponseError as e:
        if int(e.code) == E.GROUP_ID_NOT_FOUND:
            raise ResponseError(e.code, "Group '%s' does not exist." % group) from None
        raise


async def _offset_rows(admin: GroupAdmin, d: GroupDescription) -> list:
    """[(topic, partition, current, log end, lag, member or None)] sorted by partition."""
    owner = {}
    for mb in d.members:
        for t, ps in mb.partitions.items():
            for p in ps:
                owner[(t, p)] = mb
    committed = await admin.committed_offsets(d.group_id)
    keys = sorted(set(owner) | set(committed))
    ends = await admin.list_offsets(keys, LATEST)
    rows = []
    for tp in keys:
        cur = committed.get(tp)
        end = ends.get(tp)
        end = end if isinstance(end, int) else None
        lag = end - cur if end is not None and cur is not None else None
        rows.append((tp[0], tp[1], cur, end, lag, owner.get(tp)))
    return rows


def _member_json(d: GroupDescription, mb) -> dict:
    out = {"member_id": mb.member_id, "instance_id": mb.instance_id,
           "client_id": mb.client_id, "host": mb.host}
    if d.type == "connect":
        out.update(worker_url=mb.worker_url, member_epoch=mb.member_epoch,
                   connectors=mb.connectors, tasks=_tasks_json(mb.tasks),
                   target_connectors=mb.target_connectors,
                   target_tasks=_tasks_json(mb.target_tasks or {}))
        return out
    out["partitions"] = _parts_json(mb.partitions)
    if d.type == "consumer":
        out.update(member_epoch=mb.member_epoch,
                   target_partitions=_parts_json(mb.target_partitions or {}))
    return out


def _parts_json(parts: dict) -> list:
    return [{"topic": t, "partitions": ps} for t, ps in parts.items()]


def _tasks_json(tasks: dict) -> list:
    return [{"connector": c, "task_ids": ids} for c, ids in sorted(tasks.items())]


def _members_sorted(d: GroupDescription) -> list:
    return sorted(d.members, key=lambda mb: (mb.client_id, mb.member_id))


def _members_table(d: GroupDescription, verbose: bool) -> str:
    g = d.group_id
    ms = _members_sorted(d)
    if d.type == "connect":
        def n_tasks(mb):
            return sum(len(t) for t in mb.tasks.values())
        if verbose:
            return table(("GROUP", "MEMBER-ID", "GROUP-INSTANCE-ID", "WORKER-URL", "HOST",
                          "CLIENT-ID", "#CONNECTORS", "#TASKS", "CURRENT-EPOCH", "ASSIGNMENT",
                          "TARGET-ASSIGNMENT"),
                         [(g, mb.member_id, mb.instance_id, mb.worker_url, mb.host,
                           mb.client_id, len(mb.connectors), n_tasks(mb), mb.member_epoch,
                           _work_text(mb.connectors, mb.tasks),
                           _work_text(mb.target_connectors or [], mb.target_tasks or {}))
                          for mb in ms])
        return table(("GROUP", "MEMBER-ID", "HOST", "CLIENT-ID", "#CONNECTORS", "#TASKS"),
                     [(g, mb.member_id, mb.host, mb.client_id, len(mb.connectors),
                       n_tasks(mb)) for mb in ms])

    def n_parts(mb):
        return sum(len(ps) for ps in mb.partitions.values())
    if not verbose:
        return table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"),
                     [(g, mb.member_id, mb.host, mb.client_id, n_parts(mb)) for mb in ms])
    if d.type == "consumer":
        return table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                      "#PARTITIONS", "CURRENT-EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT"),
                     [(g, mb.member_id, mb.instance_id, mb.host, mb.client_id, n_parts(mb),
                       mb.member_epoch, _parts_text(mb.partitions),
                       _parts_text(mb.target_partitions or {})) for mb in ms])
    return table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                  "#PARTITIONS", "ASSIGNMENT"),
                 [(g, mb.member_id, mb.instance_id, mb.host, mb.client_id, n_parts(mb),
                   _parts_text(mb.partitions)) for mb in ms])


def _state_table(d: GroupDescription, verbose: bool) -> str:
    c = d.coordinator
    row = [d.group_id, "%s:%d (%d)" % (c.host, c.port, c.node_id), d.assignor, d.state,
           len(d.members)]
    headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    if verbose:
        headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [d.group_epoch, d.assignment_epoch]
    return table(headers, [row])


def _offsets_table(d: GroupDescription, rows: list) -> str:
    return table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"),
                 [(d.group_id, t, p, cur, end, lag,
                   mb.member_id if mb else None, mb.host if mb else None,
                   mb.client_id if mb else None)
                  for t, p, cur, end, lag, mb in rows])


async def cmd_describe(admin: GroupAdmin, args) -> int:
    d = await _describe(admin, args.group)
    views = [v for v in ("state", "members", "offsets") if getattr(args, v)]
    if not views:
        views = ["members"] if d.type == "connect" else ["offsets"]
    rows = await _offset_rows(admin, d) if args.json or "offsets" in views else []
    if args.json:
        c = d.coordinator
        print(json.dumps({
            "group": d.group_id, "type": d.type, "state": d.state,
            "protocol_type": d.protocol_type, "assignor": d.assignor,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "coordinator": {"node_id": c.node_id, "host": c.host, "port": c.port},
            "members": [_member_json(d, mb) for mb in _members_sorted(d)],
            "offsets": [{"topic": t, "partition": p, "current_offset": cur,
                         "log_end_offset": end, "lag": lag,
                         "member_id": mb.member_id if mb else None,
                         "host": mb.host if mb else None,
                         "client_id": mb.client_id if mb else None}
                        for t, p, cur, end, lag, mb in rows]}, indent=2))
        return 0
    state = d.state.lower()
    if state == "empty" and ("members" in views or "offsets" in views):
        _note("%s '%s' has no active members." % (_kind(d), d.group_id))
    elif state in _REBALANCING:
        _note("Warning: %s '%s' is rebalancing." % (_kind(d), d.group_id))
    out = []
    for v in views:
        if v == "state":
            out.append(_state_table(d, args.verbose))
        elif v == "members":
            out.append(_members_table(d, args.verbose))
        else:
            out.append(_offsets_table(d, rows))
    _emit("\n\n".join(t for t in out if t))
    return 0


async def cmd_reset_offsets(admin: GroupAdmin, args) -> int:
    group = args.group
    try:
        state = (await admin.describe_group(group)).state
    except ResponseError as e:
        if int(e.code) != E.GROUP_ID_NOT_FOUND:
            raise
        state = "Dead"          # no such group yet: its first offsets may be set
    if state.lower() not in _INACTIVE:
        raise Failure("Assignments can only be reset if the group '%s' is inactive, but the "
                      "current state is %s." % (group, state))
    partitions = await _resolve(admin, args.topic)
    earliest = await admin.list_offsets(partitions, EARLIEST)
    for tp in partitions:
        if not isinstance(earliest[tp], int):
            e = earliest[tp]
            raise ResponseError(e.code, "the log start offset of %s-%d: %s"
                                % (tp[0], tp[1], e.message))
    if args.to_earliest:
        new = {tp: earliest[tp] for tp in partitions}
    elif args.to_offset is not None:
        new = {tp: args.to_offset for tp in partitions}
    else:
        committed = await admin.committed_offsets(group)
        for t, p in partitions:
            if (t, p) not in committed:
                raise Failure("Cannot shift offset for partition %s-%d since there is no "
                              "current committed offset." % (t, p))
        new = {tp: committed[tp] + args.shift_by for tp in partitions}
    for (t, p), off in new.items():
        if off < earliest[(t, p)]:
            _note("New offset (%d) is lower than earliest offset for topic partition %s-%d. "
                  "Value will be set to %d" % (off, t, p, earliest[(t, p)]))
            new[(t, p)] = earliest[(t, p)]
    if args.execute:
        refused = await admin.commit_offsets(group, new)
        if refused:
            by_code: dict = {}
            for (t, p), code in sorted(refused.items()):
                by_code.setdefault(code, []).append("%s-%d" % (t, p))
            raise Failure("OffsetCommit refused: " + "; ".join(
                "%s (%d) for %s: %s" % (error_name(c), c, ", ".join(tps),
                                        ResponseError(c, None).message)
                for c, tps in sorted(by_code.items())))
    if args.json:
        print(json.dumps({"group": group, "executed": bool(args.execute),
                          "offsets": [{"topic": t, "partition": p, "new_offset": o}
                                      for (t, p), o in sorted(new.items())]}, indent=2))
    else:
        _emit(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                    [(group, t, p, o) for (t, p), o in sorted(new.items())]))
        if not args.execute and not args.dry_run:
            _note("Dry run: nothing was committed (add --execute to commit these offsets).")
    return 0


async def _resolve(admin: GroupAdmin, specs: list) -> list:
    """--topic specs -> sorted [(topic, partition)], every one known to Metadata."""
    md = await admin.metadata(sorted({t for t, _ in specs}))
    out = set()
    for topic, parts in specs:
        have = md.leaders.get(topic)
        if have is None:
            code = md.topic_errors.get(topic, E.UNKNOWN_TOPIC_OR_PARTITION)
            raise ResponseError(code, "topic '%s': %s" % (topic, ResponseError(code).message))
        for p in (sorted(have) if parts is None else parts):
            if p not in have:
                raise ResponseError(E.UNKNOWN_TOPIC_OR_PARTITION,
                                    "topic '%s' has no partition %d (it has %d)"
                                    % (topic, p, len(have)))
            out.add((topic, p))
    return sorted(out)


async def cmd_delete(admin: GroupAdmin, args) -> int:
    try:
        await admin.delete_group(args.group)
    except ResponseError as e:
        raise Failure("Group '%s' could not be deleted due to: %s"
                      % (args.group, kafka_error_text(e))) from None
    print("Deletion of requested consumer groups ('%s') was successful." % args.group)
    return 0


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset_offsets,
            "delete": cmd_delete}


def _security(path: Optional[str]) -> Optional[ClientSecurity]:
    if not path:
        return None
    try:
        security = ClientSecurity.from_properties(load_properties(path))
        security.ssl_context()          # unusable certificate files: a usage error, now
    except OSError as e:
        raise UsageError("--command-config: cannot read %s: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise UsageError("--command-config %s: %s" % (path, e))
    return security


async def _main(args, bootstrap: list, admin_cls, security=None) -> int:
    # Only given when set: an admin_cls of before --command-config keeps working.
    kw = {} if security is None else {"security": security}
    admin = admin_cls(bootstrap, timeout_s=args.timeout, **kw)
    try:
        return await COMMANDS[args.groups_command](admin, args)
    finally:
        await admin.close()


def run(args, admin_cls=GroupAdmin) -> int:
    """Run a parsed `groups` command; the exit status. `admin_cls` makes the connections
    (a GroupAdmin subclass can, say, cap the versions to talk as an older client would)."""
    prog = "%s %s" % (PROG, args.groups_command)
    try:
        if not args.bootstrap_server:
            raise UsageError("--bootstrap-server HOST:PORT is required")
        if not args.timeout or args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        security = _security(getattr(args, "command_config", None))
        return asyncio.run(_main(args, _bootstrap_list(args.bootstrap_server), admin_cls,
                                 security))
    except UsageError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    except Failure as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
    except ResponseError as e:
        print("%s: %s" % (prog, kafka_error_text(e)), file=sys.stderr)
        return 1
    except ClientError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
