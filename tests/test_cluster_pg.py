"""cluster/pg_leases.py and `groupcoord cluster status` against a real PostgreSQL
(tests/pg_server.py). Every test has a database of its own (pg_db, from the session's server).

Expiry is mostly forced by moving a lease's end into the past in SQL (what the database's clock
would do after a lease), so no test waits on time; one test lets a 50 ms lease run out by the
database's clock, polling without a timed assertion.
"""
import asyncio
import json
import socket
import subprocess
import sys

import asyncpg

from groupcoord import cli
from groupcoord.cluster.pg_leases import PgLeases, missing_tables, read_shards
from groupcoord.storage.pg_schema import SCHEMA_VERSION, migrate
from pg_server import pg_db, pg_server  # noqa: F401  (fixtures)

SHARDS = 8
LEASE_MS = 60_000       # long: nothing expires unless a test makes it
HANG_GUARD_S = 60       # only against a hang


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD_S))


async def _setup(dsn, nodes=(1, 2), lease_ms=LEASE_MS):
    """The schema, and a pool + PgLeases per node (sessions of their own, as separate
    processes would have; a pool, so that one node's calls can run concurrently)."""
    admin = await asyncpg.connect(dsn)
    await migrate(admin, SHARDS)
    leases = []
    for n in nodes:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        leases.append(PgLeases(pool, n, lease_ms, host="127.0.0.1", port=9100 + n))
    return admin, leases


async def _close(admin, leases):
    for x in leases:
        await x.db.close()
    await admin.close()


async def _expire(admin, shard):
    """What the database's clock does to a lease nobody renews."""
    await admin.execute("UPDATE groupcoord_shards SET lease_expires = clock_timestamp() - "
                        "interval '1 millisecond' WHERE shard = $1", shard)


async def _row(admin, shard):
    return tuple(await admin.fetchrow(
        "SELECT owner, epoch, lease_expires IS NOT NULL FROM groupcoord_shards WHERE shard = $1",
        shard))


def test_two_nodes_racing_for_every_shard_get_one_owner_each(pg_db):
    async def main():
        admin, (a, b) = await _setup(pg_db)
        try:
            for rnd in range(5):
                order = list(range(SHARDS))
                calls = [(s, x) for s in order for x in ((a, b) if rnd % 2 else (b, a))]
                results = await asyncio.gather(*(x.acquire(s) for s, x in calls))
                won = {}
                for (shard, node), epoch in zip(calls, results):
                    if epoch is not None:
                        assert shard not in won, "shard %d granted twice" % shard
                        won[shard] = (node.node_id, epoch)
                assert sorted(won) == order
                rows = await read_shards(admin)
                assert [(r.owner, r.epoch) for r in rows] == [won[s] for s in order]
                assert all(r.lease_left_ms > 0 for r in rows)
                for x in (a, b):
                    mine = [(s, e) for s, (o, e) in won.items() if o == x.node_id]
                    theirs = [(s, e) for s, (o, e) in won.items() if o != x.node_id]
                    assert await x.renew(mine) == {s for s, _ in mine}
                    assert await x.renew(theirs) == set()
                # Free every shard for the next round: release by each owner.
                for s, (o, e) in won.items():
                    assert await (a if o == a.node_id else b).release(s, e)
        finally:
            await _close(admin, [a, b])
    run(main())


def test_an_expired_lease_is_taken_over_and_the_old_owner_is_fenced_out(pg_db):
    async def main():
        admin, (a, b) = await _setup(pg_db)
        try:
            assert await a.acquire(3) == 1
            assert await b.acquire(3) is None               # a's lease is live
            await _expire(admin, 3)
            assert await b.acquire(3) == 2
            assert await _row(admin, 3) == (2, 2, True)
            # The old owner's renewal, release and re-acquire all fail; b's lease is whole.
            assert await a.renew([(3, 1)]) == set()
            assert await a.release(3, 1) is False
            assert await a.acquire(3) is None
            assert await _row(admin, 3) == (2, 2, True)
            assert await b.renew([(3, 2)]) == {3}
            # A renewal at a stale epoch fails even for the owner.
            assert await b.renew([(3, 1)]) == set()
        finally:
            await _close(admin, [a, b])
    run(main())


def test_a_lease_runs_out_by_the_database_clock(pg_db):
    async def main():
        admin, (b,) = await _setup(pg_db, nodes=(2,))
        a = PgLeases(await asyncpg.connect(pg_db), 1, lease_ms=50)
        try:
            assert await a.acquire(0) == 1
            epoch = None
            for _ in range(HANG_GUARD_S * 100):
                epoch = await b.acquire(0)
                if epoch is not None:
                    break
                await asyncio.sleep(0.01)
            assert epoch == 2
            assert await a.renew([(0, 1)]) == set()
        finally:
            await a.db.close()
            await _close(admin, [b])
    run(main())


def test_release_keeps_the_epoch_and_the_next_grant_bumps_it(pg_db):
    async def main():
        admin, (a, b) = await _setup(pg_db)
        try:
            assert await a.acquire(5) == 1
            assert await a.acquire(5) == 2                  # its own again: a new epoch
            assert await a.release(5, 1) is False           # not the current tenure
            assert await a.release(5, 2) is True
            assert await _row(admin, 5) == (None, 2, False)
            assert await a.release(5, 2) is False           # once
            assert await b.acquire(5) == 3
            assert await a.renew([(5, 2)]) == set()
            assert await b.renew([(5, 3), (6, 0)]) == {5}   # shard 6: never granted to b
        finally:
            await _close(admin, [a, b])
    run(main())


def test_renewals_of_overlapping_shards_from_two_sessions_do_not_deadlock(pg_db):
    async def main():
        admin, (a, b) = await _setup(pg_db)
        try:
            epochs = {s: await a.acquire(s) for s in range(SHARDS)}
            pairs = sorted(epochs.items())
            # b's stale view claims the same shards, in the opposite order.
            for _ in range(20):
                ra, rb = await asyncio.gather(a.renew(pairs), b.renew(pairs[::-1]))
                assert ra == set(range(SHARDS)) and rb == set()
        finally:
            await _close(admin, [a, b])
    run(main())


def test_a_displaced_process_cannot_acquire_its_id_shards(pg_db):
    """Two processes with node id 1: once the second holds the id's row, the first (paused,
    woken) can no longer take shards, not even the ones owned by "node 1" (the second)."""
    async def main():
        admin, (old, other) = await _setup(pg_db)
        twin = PgLeases(other.db, 1, LEASE_MS, host="127.0.0.1", port=9401)
        try:
            assert await old.register() is None
            assert await old.acquire(0) == 1
            await admin.execute("UPDATE groupcoord_nodes SET last_seen = last_seen - "
                                "interval '1 hour' WHERE node_id = 1")    # old looks dead
            assert await twin.register() is None                       # the twin takes id 1
            await admin.execute("UPDATE groupcoord_shards SET lease_expires = NULL "
                                "WHERE shard = 0")
            assert await twin.acquire(0) == 2
            assert await old.acquire(0) is None         # owner = 1, but not its incarnation
            assert await old.acquire(1) is None         # a free shard neither
            assert await twin.acquire(1) == 1
        finally:
            await _close(admin, [old, other])
    run(main())


def test_a_node_with_several_listeners_registers_each_address(pg_db):
    """Schema v5: the listeners' addresses travel with the node row, so another node can
    name them per listener (cluster/node.py ClusterNode.brokers(listener))."""
    async def main():
        admin, (a, b) = await _setup(pg_db)
        b.endpoints = json.dumps({"PLAINTEXT": ["127.0.0.1", 9102],
                                  "SASL_SSL": ["10.0.0.2", 9302]})
        try:
            await a.register()
            await b.register()
            rows = {r.node_id: r for r in await a.live_rows()}
            assert rows[1].listeners() == {}             # one listener: host and port
            assert rows[2].listeners() == {"PLAINTEXT": ("127.0.0.1", 9102),
                                           "SASL_SSL": ("10.0.0.2", 9302)}
            await admin.execute("UPDATE groupcoord_nodes SET endpoints = 'not json' "
                                "WHERE node_id = 2")
            rows = {r.node_id: r for r in await a.live_rows()}
            assert rows[2].listeners() == {}             # unreadable: the main address
            await b.heartbeat()                          # the heartbeat writes them again
            rows = {r.node_id: r for r in await a.live_rows()}
            assert rows[2].listeners()["SASL_SSL"] == ("10.0.0.2", 9302)
        finally:
            await _close(admin, [a, b])
    run(main())


def test_nodes_register_heartbeat_and_drop_out_of_the_live_list(pg_db):
    async def main():
        admin, (a, b) = await _setup(pg_db)
        try:
            await a.register()
            await b.register()
            assert await a.live_nodes() == [(1, "127.0.0.1", 9101), (2, "127.0.0.1", 9102)]
            started = await admin.fetchval(
                "SELECT started_at FROM groupcoord_nodes WHERE node_id = 2")
            await admin.execute("UPDATE groupcoord_nodes SET last_seen = last_seen - "
                                "interval '1 hour' WHERE node_id = 2")
            assert await a.live_nodes() == [(1, "127.0.0.1", 9101)]
            b.port = 9200
            await b.heartbeat()
            assert await a.live_nodes() == [(1, "127.0.0.1", 9101), (2, "127.0.0.1", 9200)]
            assert await admin.fetchval(
                "SELECT started_at FROM groupcoord_nodes WHERE node_id = 2") == started
            await b.register()                              # a restart
            assert await admin.fetchval(
                "SELECT started_at FROM groupcoord_nodes WHERE node_id = 2") > started
        finally:
            await _close(admin, [a, b])
    run(main())


def test_a_node_id_is_held_by_one_incarnation_until_its_row_is_older_than_the_lease(pg_db):
    async def main():
        # Two processes started with --node-id 1 (two PgLeases: two incarnations).
        admin, (a, b) = await _setup(pg_db, nodes=(1, 1))
        b.port = 9200
        try:
            assert await a.register() is None
            held = await b.register()               # a's row, seen just now: refused
            assert (held.host, held.port, held.incarnation) == ("127.0.0.1", 9101,
                                                                a.incarnation)
            assert 0 <= held.seen_ms_ago < LEASE_MS and held.last_seen is not None
            assert await b.heartbeat() is False     # and writes nothing
            assert await a.heartbeat() is True
            assert await a.live_nodes() == [(1, "127.0.0.1", 9101)]
            # a stops heartbeating (dead, paused): once its row is older than the lease, the
            # id is b's, and a's heartbeat and leave no longer touch the row.
            await admin.execute("UPDATE groupcoord_nodes SET last_seen = last_seen - "
                                "interval '1 hour' WHERE node_id = 1")
            assert await b.register() is None
            assert await a.heartbeat() is False
            assert (await a.holder()).port == 9200
            await a.leave()
            assert await a.live_nodes() == [(1, "127.0.0.1", 9200)]
            await b.leave()
            assert await a.holder() is None
            # A live row written before schema version 4 (no incarnation) holds the id too.
            await admin.execute("INSERT INTO groupcoord_nodes (node_id, host, port, started_at,"
                                " last_seen) VALUES (1, 'old', 1, now(), clock_timestamp())")
            held = await a.register()
            assert (held.host, held.incarnation) == ("old", None)
        finally:
            await _close(admin, [a, b])
    run(main())


def test_missing_tables_names_the_schema_a_fresh_database_lacks(pg_db):
    async def main():
        conn = await asyncpg.connect(pg_db)
        try:
            assert await missing_tables(conn) == ["groupcoord_schema_version",
                                                  "groupcoord_nodes", "groupcoord_shards"]
            await migrate(conn, SHARDS)
            assert await missing_tables(conn) == []
        finally:
            await conn.close()
    run(main())


# ---------------------------------------------------------------------------- the CLI
def _populate(dsn):
    async def main():
        admin, (a, b) = await _setup(dsn, lease_ms=LEASE_MS)
        try:
            await a.register()
            await b.register()
            await admin.execute("UPDATE groupcoord_nodes SET last_seen = last_seen - "
                                "interval '1 hour' WHERE node_id = 2")
            assert await a.acquire(0) == 1
            assert await b.acquire(1) == 1
            assert await b.release(1, 1)
            assert await b.acquire(2) == 1
            await _expire(admin, 2)
        finally:
            await _close(admin, [a, b])
    run(main())


def test_cluster_status_prints_nodes_and_shards(pg_db, capsys):
    _populate(pg_db)
    assert cli.main(["cluster", "status", "--store", pg_db]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "nodes: 2, 1 live" in lines
    assert "shards: %d, 2 owned by 2 node(s)" % SHARDS in lines
    node1 = next(x.split() for x in lines if x.split()[:2] == ["1", "127.0.0.1:9101"])
    node2 = next(x.split() for x in lines if x.split()[:2] == ["2", "127.0.0.1:9102"])
    assert node1[-1] == "yes" and node2[-1] == "no"
    shard = {x.split()[0]: x.split()[1:] for x in lines
             if len(x.split()) >= 4 and x.split()[0].isdigit() and ":" not in x}
    assert shard["0"][:2] == ["1", "1"] and shard["0"][-1] == "s"      # "59.9 s"
    assert shard["1"] == ["-", "1", "-"]                                # released
    assert shard["2"] == ["2", "1", "expired"]
    assert shard["7"] == ["-", "0", "-"]


def test_cluster_status_json(pg_db, capsys):
    _populate(pg_db)
    assert cli.main(["cluster", "status", "--store", pg_db, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["schema_version"] == SCHEMA_VERSION and st["lease_ms"] == 10_000
    assert [(n["node_id"], n["host"], n["port"], n["live"]) for n in st["nodes"]] == [
        (1, "127.0.0.1", 9101, True), (2, "127.0.0.1", 9102, False)]
    shards = {s["shard"]: s for s in st["shards"]}
    assert sorted(shards) == list(range(SHARDS))
    assert (shards[0]["owner"], shards[0]["epoch"]) == (1, 1)
    assert 0 < shards[0]["lease_left_ms"] <= LEASE_MS
    assert (shards[1]["owner"], shards[1]["epoch"], shards[1]["lease_left_ms"]) == (None, 1, None)
    assert shards[2]["owner"] == 2 and shards[2]["lease_left_ms"] <= 0


def _status_cmd(*args):
    return subprocess.run([sys.executable, "-m", "groupcoord.cli", "cluster", "status", *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_cluster_status_without_a_schema_or_a_server_is_exit_2_and_one_line(pg_db, pg_server):
    r = _status_cmd("--store", pg_db)
    assert r.returncode == 2 and r.stdout == ""
    assert "no groupcoord schema yet" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # A port nobody listens on (the session server's port + a password that must not show).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _status_cmd("--store", "postgresql://postgres:hunter2@127.0.0.1:%d/x" % port)
    assert r.returncode == 2 and "cannot reach the store" in r.stderr
    assert "hunter2" not in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _status_cmd("--store", pg_server.dsn("no_such_database"))
    assert r.returncode == 2 and "cannot reach the store" in r.stderr
    assert "Traceback" not in r.stderr
    r = _status_cmd("--store", "file:/tmp/x")
    assert r.returncode == 2 and "postgresql://" in r.stderr
