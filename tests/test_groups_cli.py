"""`groupcoord groups` (src/groupcoord/admin_cli/) against a real `groupcoord serve` process,
with groups formed by real clients: confluent-kafka consumers (a KIP-848 group with
group.protocol=consumer, a classic group) and an SDK ConnectWorker (a connect group).

Tables are checked exactly: `cells` finds the columns by the header's names, checks that
every row's cells start at those columns (two spaces at least between columns) and returns
the cells, which are compared with what the clients themselves say they own and committed.
The CLI runs in this process (cli.main) except in test_entry_point_exit_statuses, which runs
`python -m groupcoord.cli` as a child, bounded and stopped by PID.
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from groupcoord import cli
from groupcoord.admin_cli import groups as groups_cli
from groupcoord.admin_cli.admin import GroupAdmin
from groupcoord.client import ConnectWorker
from groupcoord.protocol import ListGroupsRequest

from serve_proc import ServeProc, package_root, serve, wait_until  # noqa: F401  (fixture)
from waiting import until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

TOPICS = {"orders": 4, "audit": 2}
CONNECT_ARGS = ["--group-config", "group.connect.heartbeat.interval.ms=200"]
FORM_S = 40.0
HOST = "127.0.0.1"         # what the node records as each member's client host

OFFSETS_COLS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBERS_COLS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
LIST_COLS = ("GROUP", "TYPE", "STATE")
RESET_COLS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


# -- helpers ---------------------------------------------------------------------------------
def cells(text, headers):
    """The rows of a table printed under exactly these headers, as lists of cell strings."""
    lines = text.rstrip("\n").split("\n")
    head = lines[0]
    starts, pos = [], 0
    for h in headers:
        i = head.index(h, pos)
        assert i == 0 or head[i - 2:i] == "  ", "header %r not two spaces after the last" % h
        starts.append(i)
        pos = i + len(h)
    assert head[pos:] == "", "extra columns: %r" % head[pos:]
    rows = []
    for line in lines[1:]:
        row = []
        for k, s in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(line)
            cell = line[s:end]
            assert cell[:1] not in ("", " "), "a cell off its column in %r" % line
            if k + 1 < len(starts):
                assert cell.endswith("  "), "columns closer than two spaces in %r" % line
            assert line == line.rstrip(), "trailing spaces in %r" % line
            row.append(cell.strip())
        rows.append(row)
    return rows


def gc(capsys, *argv):
    """`groupcoord groups ARGV...` in this process -> (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        rc = cli.main(["groups"] + [str(a) for a in argv])
    except SystemExit as e:           # argparse: usage errors (2) and --help (0)
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def consumer(bootstrap, group, name, kip848):
    cfg = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group,
           "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
           "fetch.wait.max.ms": 100, "reconnect.backoff.ms": 50, "retry.backoff.ms": 50,
           "socket.timeout.ms": 20000}
    if kip848:
        cfg["group.protocol"] = "consumer"
    else:
        cfg.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    return Consumer(cfg)


def owned(c):
    return sorted((tp.topic, tp.partition) for tp in c.assignment())


def poll_until(consumers, pred, what, timeout=FORM_S):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out after %.0f s waiting for %s" % (
            timeout, what)
        for c in consumers:
            msg = c.poll(0.02)
            assert msg is None or msg.error() is None or msg.error().code() == \
                confluent_kafka.KafkaError._PARTITION_EOF, msg.error()


def commit(c, topic, partition, offset):
    c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)


def states(capsys, bootstrap):
    rc, out, err = gc(capsys, "--bootstrap-server", bootstrap, "list", "--json")
    assert rc == 0, err
    return {g["group"]: g["state"] for g in json.loads(out)}


def offsets_of(capsys, bootstrap, group):
    """{(topic, partition): committed offset or None} from `describe --json`."""
    rc, out, err = gc(capsys, "--bootstrap-server", bootstrap, "describe", "--group", group,
                      "--json")
    assert rc == 0, err
    return {(o["topic"], o["partition"]): o["current_offset"] for o in json.loads(out)["offsets"]}


class WorkerThread:
    """An SDK ConnectWorker on an event loop of its own thread (the test drives confluent-kafka
    synchronously). `ready` is set once it runs all `units` of work, or on an error."""

    def __init__(self, bootstrap, group, name, connectors, units):
        self.args = (bootstrap, group, name, connectors, units)
        self.ready = threading.Event()
        self.error = None
        self._loop = None
        self._stop = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="connect-" + name)
        self.thread.start()

    def _run(self):
        bootstrap, group, name, connectors, units = self.args

        async def main():
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            w = ConnectWorker(bootstrap, group, member_id=name, client_id=name,
                              worker_url="http://%s:8083" % name, connectors=connectors,
                              request_timeout_s=5.0)
            await w.start()
            try:
                await until(lambda: len(w.state.owned) == units, FORM_S, "%s's work" % name)
                self.ready.set()
                await self._stop.wait()
            finally:
                await w.stop()
        try:
            asyncio.run(asyncio.wait_for(main(), 300))
        except BaseException as e:      # reported by stop() / the fixture
            self.error = e
            self.ready.set()

    def stop(self):
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(20)
        assert not self.thread.is_alive(), "the connect worker did not stop"


# -- a node with three active groups -----------------------------------------------------------
@pytest.fixture(scope="module")
def active(tmp_path_factory):
    """One node; groups "new-app" (KIP-848, consumers new-a and new-b on orders), "old-app"
    (classic, old-a on audit) and "connect-app" (worker W1 running connector sink with 2
    tasks), all Stable, with offsets new-app orders-0 = 5, old-app audit-1 = 7."""
    srv = ServeProc(tmp_path_factory.mktemp("groups-cli"), topics=TOPICS,
                    extra_args=CONNECT_ARGS).start()
    made = []
    worker = None
    try:
        bs = srv.bootstrap
        new_a, new_b = (consumer(bs, "new-app", n, True) for n in ("new-a", "new-b"))
        old_a = consumer(bs, "old-app", "old-a", False)
        made += [new_a, new_b, old_a]
        for c in (new_a, new_b):
            c.subscribe(["orders"])
        old_a.subscribe(["audit"])
        worker = WorkerThread(bs, "connect-app", "W1", {"sink": 2}, units=3)
        poll_until(made, lambda: len(owned(new_a)) == 2 and len(owned(new_b)) == 2
                   and owned(old_a) == [("audit", 0), ("audit", 1)], "the groups to form")
        assert worker.ready.wait(FORM_S) and worker.error is None, worker.error
        owner0 = new_a if ("orders", 0) in owned(new_a) else new_b
        commit(owner0, "orders", 0, 5)
        commit(old_a, "audit", 1, 7)
        yield {"srv": srv, "bs": bs, "new_a": new_a, "new_b": new_b, "old_a": old_a}
    finally:
        if worker is not None:
            worker.stop()
        for c in made:
            c.close()
        rc = srv.stop()
        srv.close()
    assert rc == 0, "serve exited %s after SIGTERM" % rc


def wait_stable(capsys, bs, groups):
    wait_until(lambda: all(states(capsys, bs).get(g) == "Stable" for g in groups), FORM_S,
               what="%s Stable" % ", ".join(groups))


def test_list_with_type_and_state_filters(active, capsys):
    bs = active["bs"]
    wait_stable(capsys, bs, ("new-app", "old-app", "connect-app"))
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "list")
    assert (rc, err) == (0, "")
    assert cells(out, LIST_COLS) == [["connect-app", "Connect", "Stable"],
                                     ["new-app", "Consumer", "Stable"],
                                     ["old-app", "Classic", "Stable"]]
    # --bootstrap-server after the subcommand works too; types and states in any case
    rc, out, _ = gc(capsys, "list", "--bootstrap-server", bs, "--type", "CONSUMER")
    assert rc == 0 and cells(out, LIST_COLS) == [["new-app", "Consumer", "Stable"]]
    rc, out, _ = gc(capsys, "--bootstrap-server", bs, "list", "--type", "classic,connect")
    assert rc == 0 and [r[0] for r in cells(out, LIST_COLS)] == ["connect-app", "old-app"]
    rc, out, _ = gc(capsys, "--bootstrap-server", bs, "list", "--type", "consumer",
                    "--type", "classic", "--state", "stable")
    assert rc == 0 and [r[0] for r in cells(out, LIST_COLS)] == ["new-app", "old-app"]
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "list", "--state", "Empty")
    assert (rc, out, err) == (0, "", "")          # no rows: no table at all
    rc, out, _ = gc(capsys, "--bootstrap-server", bs, "list", "--json")
    assert rc == 0 and json.loads(out) == [
        {"group": "connect-app", "type": "connect", "state": "Stable", "protocol_type": "connect"},
        {"group": "new-app", "type": "consumer", "state": "Stable", "protocol_type": "consumer"},
        {"group": "old-app", "type": "classic", "state": "Stable", "protocol_type": "consumer"}]


def test_describe_offsets_members_state_json(active, capsys):
    bs, new_a, new_b = active["bs"], active["new_a"], active["new_b"]
    wait_stable(capsys, bs, ("new-app", "old-app"))
    who = {}
    for c, name in ((new_a, "new-a"), (new_b, "new-b")):
        for tp in owned(c):
            who[tp] = (c.memberid(), name)
    # Without a view flag: --offsets, as kafka-consumer-groups --describe.
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "new-app")
    assert (rc, err) == (0, "")
    expected = [["new-app", "orders", str(p), "5" if p == 0 else "-", "0",
                 "-5" if p == 0 else "-", who[("orders", p)][0], HOST, who[("orders", p)][1]]
                for p in range(4)]
    assert cells(out, OFFSETS_COLS) == expected
    rc, out2, _ = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "new-app",
                     "--offsets")
    assert (rc, out2) == (0, out)

    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "new-app",
                      "--members")
    assert (rc, err) == (0, "")
    assert cells(out, MEMBERS_COLS) == [["new-app", new_a.memberid(), HOST, "new-a", "2"],
                                        ["new-app", new_b.memberid(), HOST, "new-b", "2"]]

    def parts(c):
        return "orders(%s)" % ",".join(str(p) for _, p in owned(c))
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "new-app",
                      "--state", "--members", "--verbose")
    assert (rc, err) == (0, "")
    state_part, members_part = out.split("\n\n")
    [[group, coord, assignor, state, n, epoch, target_epoch]] = cells(
        state_part, ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                     "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"))
    assert (group, coord, assignor, state, n) == ("new-app", "%s (0)" % bs, "uniform",
                                                  "Stable", "2")
    assert int(epoch) >= 2 and target_epoch == epoch
    assert cells(members_part, ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST",
                                "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "ASSIGNMENT",
                                "TARGET-ASSIGNMENT")) == [
        ["new-app", c.memberid(), "-", HOST, name, "2", epoch, parts(c), parts(c)]
        for c, name in ((new_a, "new-a"), (new_b, "new-b"))]

    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "new-app",
                      "--json")
    assert (rc, err) == (0, "")
    d = json.loads(out)
    host, port = bs.split(":")
    assert {k: d[k] for k in ("group", "type", "state", "protocol_type", "assignor",
                              "coordinator")} == {
        "group": "new-app", "type": "consumer", "state": "Stable", "protocol_type": "consumer",
        "assignor": "uniform", "coordinator": {"node_id": 0, "host": host, "port": int(port)}}
    assert d["group_epoch"] == d["assignment_epoch"] == int(epoch)
    assert d["members"] == [
        {"member_id": c.memberid(), "instance_id": None, "client_id": name, "host": HOST,
         "partitions": [{"topic": "orders", "partitions": [p for _, p in owned(c)]}],
         "member_epoch": int(epoch),
         "target_partitions": [{"topic": "orders", "partitions": [p for _, p in owned(c)]}]}
        for c, name in ((new_a, "new-a"), (new_b, "new-b"))]
    assert d["offsets"] == [
        {"topic": "orders", "partition": p, "current_offset": 5 if p == 0 else None,
         "log_end_offset": 0, "lag": -5 if p == 0 else None, "member_id": who[("orders", p)][0],
         "host": HOST, "client_id": who[("orders", p)][1]} for p in range(4)]


def test_describe_classic_and_connect(active, capsys):
    bs, old_a = active["bs"], active["old_a"]
    wait_stable(capsys, bs, ("old-app", "connect-app"))
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "old-app")
    assert (rc, err) == (0, "")
    mid = old_a.memberid()
    assert cells(out, OFFSETS_COLS) == [
        ["old-app", "audit", "0", "-", "0", "-", mid, HOST, "old-a"],
        ["old-app", "audit", "1", "7", "0", "-7", mid, HOST, "old-a"]]
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "old-app",
                      "--members", "--verbose")
    assert (rc, err) == (0, "")
    assert cells(out, ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                       "#PARTITIONS", "ASSIGNMENT")) == [
        ["old-app", mid, "-", HOST, "old-a", "2", "audit(0,1)"]]
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "old-app",
                      "--state")
    assert (rc, err) == (0, "")
    [[_, _, assignor, state, n]] = cells(out, ("GROUP", "COORDINATOR (ID)",
                                               "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"))
    assert (state, n) == ("Stable", "1") and assignor in ("range", "roundrobin",
                                                          "cooperative-sticky")
    # A connect group: members by default (it has no partitions).
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "connect-app")
    assert (rc, err) == (0, "")
    assert cells(out, ("GROUP", "MEMBER-ID", "HOST", "CLIENT-ID", "#CONNECTORS", "#TASKS")) \
        == [["connect-app", "W1", HOST, "W1", "1", "2"]]
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "connect-app",
                      "--members", "--verbose")
    assert (rc, err) == (0, "")
    [row] = cells(out, ("GROUP", "MEMBER-ID", "GROUP-INSTANCE-ID", "WORKER-URL", "HOST",
                        "CLIENT-ID", "#CONNECTORS", "#TASKS", "CURRENT-EPOCH", "ASSIGNMENT",
                        "TARGET-ASSIGNMENT"))
    assert row[:8] == ["connect-app", "W1", "-", "http://W1:8083", HOST, "W1", "1", "2"]
    assert row[9:] == ["sink(connector,0,1)", "sink(connector,0,1)"] and int(row[8]) >= 1


def test_active_groups_refuse_reset_and_delete(active, capsys):
    bs = active["bs"]
    wait_stable(capsys, bs, ("new-app", "old-app"))
    for group in ("new-app", "old-app"):
        for mode in ((), ("--dry-run",), ("--execute",)):
            rc, out, err = gc(capsys, "--bootstrap-server", bs, "reset-offsets", "--group",
                              group, "--topic", "orders", "--to-offset", 1, *mode)
            assert (rc, out) == (1, "")
            assert err == ("groupcoord groups reset-offsets: Assignments can only be reset if "
                           "the group '%s' is inactive, but the current state is Stable.\n"
                           % group)
        rc, out, err = gc(capsys, "--bootstrap-server", bs, "delete", "--group", group)
        assert (rc, out) == (1, "")
        assert err == ("groupcoord groups delete: Group '%s' could not be deleted due to: "
                       "NON_EMPTY_GROUP (68): The group is not empty.\n" % group)
    assert offsets_of(capsys, bs, "old-app")[("audit", 1)] == 7       # nothing changed
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "no-such")
    assert (rc, out) == (1, "")
    assert err == ("groupcoord groups describe: GROUP_ID_NOT_FOUND (69): Group 'no-such' "
                   "does not exist.\n")


class OldBroker(GroupAdmin):
    """Talks as if every broker offered ListGroups up to `LIST_MAX` only."""
    LIST_MAX = 3

    async def _open(self, host, port):
        conn = await super()._open(host, port)
        key = ListGroupsRequest.API_KEY
        conn.versions[key] = min(conn.versions[key], self.LIST_MAX)
        return conn


def test_list_falls_back_on_older_list_groups(active, capsys):
    """ListGroups v3 (no states, no types) and v4 (no types): the same table, the types
    learnt from ConsumerGroupDescribe / ConnectGroupDescribe, the states from the
    describes, and the filters applied here."""
    bs = active["bs"]
    wait_stable(capsys, bs, ("new-app", "old-app", "connect-app"))
    parser = cli_parser()

    def run(cap, *argv):
        admin_cls = type("OldBroker%d" % cap, (OldBroker,), {"LIST_MAX": cap})
        capsys.readouterr()
        rc = groups_cli.run(parser.parse_args(["groups", "--bootstrap-server", bs] + list(argv)),
                            admin_cls=admin_cls)
        out = capsys.readouterr()
        return rc, out.out, out.err

    for cap in (3, 4):
        rc, out, err = run(cap, "list")
        assert (rc, err) == (0, "")
        assert cells(out, LIST_COLS) == [["connect-app", "Connect", "Stable"],
                                         ["new-app", "Consumer", "Stable"],
                                         ["old-app", "Classic", "Stable"]], cap
        rc, out, _ = run(cap, "list", "--type", "consumer,connect", "--state", "stable")
        assert rc == 0 and [r[0] for r in cells(out, LIST_COLS)] == ["connect-app", "new-app"]
        rc, out, _ = run(cap, "list", "--state", "empty")
        assert (rc, out) == (0, "")


def cli_parser():
    p = argparse.ArgumentParser(prog="groupcoord")
    groups_cli.add_groups_parser(p.add_subparsers(dest="command"))
    return p


# -- reset-offsets and delete once the members are gone ------------------------------------------
def test_reset_offsets_and_delete_after_members_leave(serve, capsys):
    srv = serve(topics=TOPICS)
    bs = srv.bootstrap
    old = consumer(bs, "drain-old", "old-x", False)
    new = consumer(bs, "drain-new", "new-x", True)
    try:
        old.subscribe(["audit"])
        new.subscribe(["orders"])
        poll_until([old, new], lambda: len(owned(old)) == 2 and len(owned(new)) == 4,
                   "both groups to form")
        commit(old, "audit", 0, 4)
        commit(new, "orders", 1, 9)
        wait_until(lambda: states(capsys, bs) == {"drain-old": "Stable", "drain-new": "Stable"},
                   FORM_S, what="both groups Stable")
        rc, _, err = gc(capsys, "--bootstrap-server", bs, "reset-offsets", "--group",
                        "drain-new", "--topic", "orders:1", "--to-offset", 6, "--execute")
        assert rc == 1 and "inactive, but the current state is Stable." in err
    finally:
        old.close()         # LeaveGroup / leave heartbeat: both groups become Empty at once
        new.close()
    wait_until(lambda: states(capsys, bs) == {"drain-old": "Empty", "drain-new": "Empty"},
               FORM_S, what="both groups Empty")

    def reset(*argv):
        return gc(capsys, "--bootstrap-server", bs, "reset-offsets", *argv)

    # A dry run prints the plan and commits nothing.
    rc, out, err = reset("--group", "drain-old", "--topic", "audit", "--to-offset", 3)
    assert rc == 0
    assert cells(out, RESET_COLS) == [["drain-old", "audit", "0", "3"],
                                      ["drain-old", "audit", "1", "3"]]
    assert err == "Dry run: nothing was committed (add --execute to commit these offsets).\n"
    rc, out2, err = reset("--group", "drain-old", "--topic", "audit", "--to-offset", 3,
                          "--dry-run")
    assert (rc, out2, err) == (0, out, "")
    assert offsets_of(capsys, bs, "drain-old") == {("audit", 0): 4}

    rc, out, err = reset("--group", "drain-old", "--topic", "audit", "--to-offset", 3,
                         "--execute")
    assert (rc, err) == (0, "")
    assert cells(out, RESET_COLS) == [["drain-old", "audit", "0", "3"],
                                      ["drain-old", "audit", "1", "3"]]
    assert offsets_of(capsys, bs, "drain-old") == {("audit", 0): 3, ("audit", 1): 3}
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "drain-old")
    assert rc == 0 and err == "Consumer group 'drain-old' has no active members.\n"
    assert cells(out, OFFSETS_COLS) == [
        ["drain-old", "audit", "0", "3", "0", "-3", "-", "-", "-"],
        ["drain-old", "audit", "1", "3", "0", "-3", "-", "-", "-"]]
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "drain-old",
                      "--members")
    assert (rc, out, err) == (0, "", "Consumer group 'drain-old' has no active members.\n")

    rc, out, err = reset("--group", "drain-old", "--topic", "audit:1", "--shift-by", 2,
                         "--execute")
    assert (rc, err) == (0, "") and cells(out, RESET_COLS) == [["drain-old", "audit", "1", "5"]]
    # Below the log start (0 here): raised to it, with Kafka's warning.
    rc, out, err = reset("--group", "drain-old", "--topic", "audit:0", "--shift-by", -10,
                         "--execute")
    assert rc == 0 and cells(out, RESET_COLS) == [["drain-old", "audit", "0", "0"]]
    assert err == ("New offset (-7) is lower than earliest offset for topic partition audit-0. "
                   "Value will be set to 0\n")
    assert offsets_of(capsys, bs, "drain-old") == {("audit", 0): 0, ("audit", 1): 5}
    rc, out, err = reset("--group", "drain-old", "--topic", "audit", "--to-earliest",
                         "--execute", "--json")
    assert (rc, err) == (0, "")
    assert json.loads(out) == {"group": "drain-old", "executed": True, "offsets": [
        {"topic": "audit", "partition": 0, "new_offset": 0},
        {"topic": "audit", "partition": 1, "new_offset": 0}]}
    assert offsets_of(capsys, bs, "drain-old") == {("audit", 0): 0, ("audit", 1): 0}
    rc, out, err = reset("--group", "drain-old", "--topic", "orders:2", "--shift-by", 1)
    assert (rc, out) == (1, "")
    assert err == ("groupcoord groups reset-offsets: Cannot shift offset for partition "
                   "orders-2 since there is no current committed offset.\n")
    rc, out, err = reset("--group", "drain-old", "--topic", "nope", "--to-earliest")
    assert (rc, out) == (1, "")
    assert err.startswith("groupcoord groups reset-offsets: UNKNOWN_TOPIC_OR_PARTITION (3): ")
    rc, out, err = reset("--group", "drain-old", "--topic", "audit:2", "--to-earliest")
    assert (rc, out) == (1, "")
    assert err == ("groupcoord groups reset-offsets: UNKNOWN_TOPIC_OR_PARTITION (3): topic "
                   "'audit' has no partition 2 (it has 2)\n")

    # The KIP-848 group, now Empty: reset works, offsets read back.
    rc, out, err = reset("--group", "drain-new", "--topic", "orders:1,2", "--to-offset", 6,
                         "--execute")
    assert (rc, err) == (0, "")
    assert cells(out, RESET_COLS) == [["drain-new", "orders", "1", "6"],
                                      ["drain-new", "orders", "2", "6"]]
    assert offsets_of(capsys, bs, "drain-new") == {("orders", 1): 6, ("orders", 2): 6}

    # A group that does not exist yet (Dead): its first offsets may be set, as in Kafka.
    rc, out, err = reset("--group", "fresh", "--topic", "orders:3", "--to-offset", 11,
                         "--execute")
    assert (rc, err) == (0, "") and cells(out, RESET_COLS) == [["fresh", "orders", "3", "11"]]
    assert offsets_of(capsys, bs, "fresh") == {("orders", 3): 11}

    # delete: works once empty; the group and its offsets are gone.
    for group in ("drain-old", "drain-new", "fresh"):
        rc, out, err = gc(capsys, "--bootstrap-server", bs, "delete", "--group", group)
        assert (rc, err) == (0, "")
        assert out == "Deletion of requested consumer groups ('%s') was successful.\n" % group
    assert states(capsys, bs) == {}
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "delete", "--group", "drain-old")
    assert (rc, out) == (1, "")
    assert err == ("groupcoord groups delete: Group 'drain-old' could not be deleted due to: "
                   "GROUP_ID_NOT_FOUND (69): The group id does not exist.\n")
    rc, out, err = gc(capsys, "--bootstrap-server", bs, "describe", "--group", "drain-old")
    assert rc == 1 and "GROUP_ID_NOT_FOUND (69)" in err


# -- usage, help, exit statuses ----------------------------------------------------------------
def test_usage_errors_and_help(capsys):
    for argv, why in [
            (("list",), "--bootstrap-server HOST:PORT is required"),
            (("--bootstrap-server", "nohost", "list"), "'nohost' is not HOST:PORT"),
            (("--bootstrap-server", "h:1", "list", "--type", "share"), "not a group type"),
            (("--bootstrap-server", "h:1", "list", "--state", "Stabel"), "not a group state"),
            (("--bootstrap-server", "h:1", "describe"), "--group"),
            (("--bootstrap-server", "h:1", "reset-offsets", "--group", "g", "--topic", "t"),
             "one of the arguments"),
            (("--bootstrap-server", "h:1", "reset-offsets", "--group", "g", "--topic", "t",
              "--to-offset", "1", "--shift-by", "1"), "not allowed with"),
            (("--bootstrap-server", "h:1", "reset-offsets", "--group", "g", "--topic", "t:x",
              "--to-earliest"), "partitions are numbers"),
            (("--bootstrap-server", "h:1", "reset-offsets", "--group", "g", "--topic", "t",
              "--to-offset", "-1"), "an offset is >= 0"),
            (("--bootstrap-server", "h:1", "reset-offsets", "--group", "g", "--topic", "t",
              "--to-earliest", "--execute", "--dry-run"), "not allowed with"),
            (("--bootstrap-server", "h:1", "delete"), "--group")]:
        rc, out, err = gc(capsys, *argv)
        assert (rc, out) == (2, ""), argv
        assert why in err, (argv, err)
    for sub, says in [("list", "TypesFilter"), ("describe", "CURRENT-OFFSET LOG-END-OFFSET LAG"),
                      ("reset-offsets", "NEW-OFFSET"), ("delete", "NON_EMPTY_GROUP")]:
        rc, out, _ = gc(capsys, sub, "--help")
        assert rc == 0 and says in " ".join(out.split()), sub
    rc, out, _ = gc(capsys, "--help")
    assert rc == 0 and all(s in out for s in ("list", "describe", "reset-offsets", "delete"))


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_entry_point_exit_statuses(active, capsys):
    """The real console entry point as a child process: 0, 1 (a Kafka error; nothing
    listening), 2 (usage), each bounded and stopped by PID if it overran."""
    bs = active["bs"]
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root() + os.pathsep + env.get("PYTHONPATH", "")

    def child(*argv):
        p = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "groups"] + list(argv),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
        return p.returncode, out, err

    rc, out, err = child("--bootstrap-server", bs, "list", "--type", "classic")
    assert (rc, err) == (0, "") and cells(out, LIST_COLS) == [["old-app", "Classic", "Stable"]]
    rc, out, err = child("--bootstrap-server", bs, "delete", "--group", "new-app")
    assert (rc, out) == (1, "") and "NON_EMPTY_GROUP (68)" in err
    port = _closed_port()
    rc, out, err = child("--bootstrap-server", "127.0.0.1:%d" % port, "--timeout", "10",
                         "list")
    assert (rc, out) == (1, "")
    assert err.startswith("groupcoord groups list: no bootstrap server answered "
                          "(127.0.0.1:%d): " % port)
    rc, out, err = child("--bootstrap-server", bs, "reset-offsets", "--group", "g")
    assert (rc, out) == (2, "") and "--topic" in err
