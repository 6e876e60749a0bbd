"""security/store.py's PostgreSQL store against a real PostgreSQL (tests/pg_server.py): the
schema made offline (no shard rows), rows as RecordBatch v2, two nodes seeing each other's
appends through poll(), concurrent appends serialised, and `groupcoord users` on it. Every
test has a database of its own (pg_db)."""
import asyncio
import io
import json
import random
import sys

import asyncpg
import pytest

from groupcoord.cli import main as cli_main
from groupcoord.security.acl import AclBinding
from groupcoord.security.records import (SecurityState, acl_record, acl_tombstone,
                                         credential_record, credential_tombstone)
from groupcoord.security.scram import ScramCredential, verify_password
from groupcoord.security.store import PgSecurityStore, open_security_store
from groupcoord.storage.batch import decode
from groupcoord.storage.pg_schema import SCHEMA_VERSION, migrate
from pg_server import pg_db, pg_server  # noqa: F401  (fixtures)

SHA256, SHA512 = 1, 2


def run(coro):
    return asyncio.run(coro)


def cred(mech=SHA512, seed=0):
    rnd = random.Random(seed)
    return ScramCredential(mech, rnd.randbytes(16), rnd.randbytes(64), rnd.randbytes(64), 4096)


def acl(name, principal="User:alice", op=3):
    return AclBinding(3, name, 4, principal, "*", op, 3)


def snapshot(state):
    return ({u: dict(ms) for u, ms in state.users.items()}, set(state.acls))


async def node_store(dsn):
    """A node's store: a pool of its own on the migrated schema."""
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=3)
    async with pool.acquire() as c:
        await migrate(c, 8)
    return PgSecurityStore(pool, close_pool=True)


def test_the_schema_is_made_before_any_node_and_a_node_then_makes_its_shards(pg_db):
    async def go():
        st = await open_security_store(pg_db)         # what `groupcoord users` does
        try:
            await st.append([credential_record("alice", cred())])
        finally:
            await st.close()
        c = await asyncpg.connect(pg_db)
        try:
            assert await c.fetchval("SELECT max(version) FROM groupcoord_schema_version") == \
                SCHEMA_VERSION
            assert await c.fetchval("SELECT count(*) FROM groupcoord_shards") == 0
            cols = await c.fetch("SELECT column_name, data_type, is_nullable FROM "
                                 "information_schema.columns WHERE table_name = "
                                 "'groupcoord_security' ORDER BY ordinal_position")
            assert [tuple(r) for r in cols] == [
                ("base_offset", "bigint", "NO"), ("last_offset", "bigint", "NO"),
                ("batch", "bytea", "NO"), ("appended_at", "timestamp with time zone", "NO")]
            # the first node starts with its own shard count; the user is still there
            assert await migrate(c, 8) == SCHEMA_VERSION
            assert await c.fetchval("SELECT count(*) FROM groupcoord_shards") == 8
        finally:
            await c.close()
        st = await node_store(pg_db)
        try:
            assert SecurityState.replay(await st.load()).credential("alice", SHA512) == cred()
        finally:
            await st.close()
    run(go())


def test_rows_are_record_batches_with_consecutive_offsets(pg_db):
    async def go():
        st = await node_store(pg_db)
        try:
            batches = [[credential_record("a", cred(seed=1))],
                       [acl_record(acl("x")), acl_record(acl("y")), acl_tombstone(acl("x"))],
                       [credential_tombstone("a", SHA512)]]
            for b in batches:
                await st.append(b)
            await st.append([])                       # no row for nothing
            rows = await st.pool.fetch("SELECT base_offset, last_offset, batch FROM "
                                       "groupcoord_security ORDER BY base_offset")
            assert [(r[0], r[1]) for r in rows] == [(0, 0), (1, 3), (4, 4)]
            # concatenated, the rows are one log segment: offsets 0..4 in order
            recs, end = decode(b"".join(r[2] for r in rows))
            assert [o for o, _k, _v in recs] == list(range(5))
            assert [(k, v) for _o, k, v in recs] == [r for b in batches for r in b]
            assert await st.load() == [r for b in batches for r in b]
            assert await st.poll() == []
            await st.close()
            with pytest.raises(RuntimeError, match="closed"):
                await st.poll()
        finally:
            await st.close()
    run(go())


def test_two_nodes_see_each_others_appends_through_poll(pg_db):
    async def go():
        a, b = await node_store(pg_db), await node_store(pg_db)
        try:
            sa = SecurityState.replay(await a.load())
            sb = SecurityState.replay(await b.load())

            async def write(store, state, records):   # what a node does: append, apply
                await store.append(records)
                for r in records:
                    state.apply(*r)

            async def follow(store, state):
                got = await store.poll()
                for r in got:
                    state.apply(*r)
                return got
            await write(a, sa, [credential_record("alice", cred(seed=1))])
            assert await follow(a, sa) == []               # its own, already applied
            assert await follow(b, sb) == [credential_record("alice", cred(seed=1))]
            await write(b, sb, [acl_record(acl("a-")), credential_record("bob", cred(seed=2))])
            assert await follow(b, sb) == []
            assert len(await follow(a, sa)) == 2
            assert snapshot(sa) == snapshot(sb)
            # Both write the same key before either polls: the store's order decides, and
            # each node converges on it once it has polled (its own later row comes back
            # after the other's earlier one).
            await write(a, sa, [credential_record("alice", cred(seed=3))])
            await write(b, sb, [credential_record("alice", cred(seed=4))])
            await write(a, sa, [acl_tombstone(acl("a-"))])
            await follow(a, sa)
            await follow(b, sb)
            fresh = await node_store(pg_db)
            try:
                truth = SecurityState.replay(await fresh.load())
            finally:
                await fresh.close()
            assert truth.credential("alice", SHA512) == cred(seed=4)
            assert truth.acls == frozenset()
            assert snapshot(sa) == snapshot(sb) == snapshot(truth)
            assert await follow(a, sa) == [] and await follow(b, sb) == []
        finally:
            await a.close()
            await b.close()
    run(go())


def test_concurrent_appends_from_several_nodes_are_serialised(pg_db):
    async def go():
        nodes = [await node_store(pg_db) for _ in range(3)]
        try:
            states = [SecurityState.replay(await n.load()) for n in nodes]
            rnd = random.Random(5)

            async def writer(i):
                for j in range(15):
                    recs = [acl_record(acl("n%d-%d" % (i, j)))]
                    if rnd.random() < 0.5:
                        recs.append(credential_record("u%d" % rnd.randrange(3),
                                                      cred(seed=i * 100 + j)))
                    await nodes[i].append(recs)
                    for r in recs:
                        states[i].apply(*r)
                    if rnd.random() < 0.3:
                        for r in await nodes[i].poll():
                            states[i].apply(*r)
            await asyncio.gather(*(writer(i) for i in range(3)))
            for n, s in zip(nodes, states):
                for r in await n.poll():
                    s.apply(*r)
            rows = await nodes[0].pool.fetch("SELECT base_offset, last_offset FROM "
                                             "groupcoord_security ORDER BY base_offset")
            assert len(rows) == 45
            expect = 0
            for base, last in rows:                   # no gap, no overlap
                assert base == expect
                expect = last + 1
            truth = SecurityState.replay(await nodes[0].load())
            assert len(truth.acls) == 45
            for s in states:
                assert snapshot(s) == snapshot(truth)
        finally:
            for n in nodes:
                await n.close()
    run(go())


def users(args, stdin=b"", monkeypatch=None):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        return cli_main(["users"] + args)
    except SystemExit as e:
        return e.code


def test_users_cli_on_a_postgresql_store_before_any_node(pg_db, monkeypatch, capsys):
    assert users(["list", "--store", pg_db], monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out.strip() == "no users"
    assert users(["set", "alice", "--mechanism", "SCRAM-SHA-512", "--mechanism",
                  "SCRAM-SHA-256", "--password-stdin", "--store", pg_db], b"pw-alice\n",
                 monkeypatch) == 0
    out = capsys.readouterr()
    assert "next start" not in out.err                 # a running node polls the store
    assert users(["set", "bob", "--mechanism", "SCRAM-SHA-256", "--password-stdin",
                  "--iterations", "16384", "--store", pg_db], b"pw-bob", monkeypatch) == 0

    async def node_view():
        st = await node_store(pg_db)
        try:
            return SecurityState.replay(await st.load())
        finally:
            await st.close()
    state = run(node_view())
    assert verify_password(state.credential("alice", SHA512), "pw-alice")
    assert verify_password(state.credential("bob", SHA256), "pw-bob")
    assert state.credential("bob", SHA256).iterations == 16384
    capsys.readouterr()
    assert users(["list", "--json", "--store", pg_db], monkeypatch=monkeypatch) == 0
    text = capsys.readouterr().out
    assert json.loads(text) == [
        {"name": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        {"name": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 16384}]
    for c in (state.credential("alice", SHA512), state.credential("bob", SHA256)):
        assert c.salt.hex() not in text and c.stored_key.hex() not in text
    assert users(["delete", "alice", "--mechanism", "SCRAM-SHA-256", "--store", pg_db],
                 monkeypatch=monkeypatch) == 0
    assert users(["delete", "bob", "--store", pg_db], monkeypatch=monkeypatch) == 0
    assert users(["delete", "bob", "--store", pg_db], monkeypatch=monkeypatch) == 1
    capsys.readouterr()
    assert users(["list", "--store", pg_db], monkeypatch=monkeypatch) == 0
    assert [x.split() for x in capsys.readouterr().out.splitlines()[1:]] == [
        ["alice", "SCRAM-SHA-512", "4096"]]


def test_a_node_polling_sees_what_the_users_command_did(pg_db, monkeypatch):
    async def go():
        st = await node_store(pg_db)
        try:
            state = SecurityState.replay(await st.load())
            # the command runs while the node is up (its own process in real life)
            assert await asyncio.to_thread(
                users, ["set", "carol", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                        "--store", pg_db], b"pw", monkeypatch) == 0
            assert state.credential("carol", SHA512) is None
            for r in await st.poll():
                state.apply(*r)
            assert verify_password(state.credential("carol", SHA512), "pw")
            assert await asyncio.to_thread(
                users, ["delete", "carol", "--store", pg_db], b"", monkeypatch) == 0
            for r in await st.poll():
                state.apply(*r)
            assert "carol" not in state.users
        finally:
            await st.close()
    run(go())


def test_users_cli_reports_an_unreachable_store(monkeypatch, capsys):
    import socket
    with socket.socket() as s:                      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = "postgresql://postgres:secret-pw@127.0.0.1:%d/x" % port
    assert users(["list", "--store", dsn], monkeypatch=monkeypatch) == 1
    err = capsys.readouterr().err
    assert "cannot use the store postgresql://postgres:***@127.0.0.1:%d/x" % port in err
    assert "secret-pw" not in err and "Traceback" not in err
