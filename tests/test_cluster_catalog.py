"""The topic catalog that the nodes of a cluster share through PostgreSQL (issue 19;
server/catalog.py PgCatalogStore, store_change, follow_store; server/cluster_mode.py
CatalogFollower; storage/pg_schema.py version 2): schema version 1 upgrades in place; a
CreateTopics on one node is listed by another's Metadata after one refresh of its follower
(and by its running follower task); CreateTopics of two topics on two nodes at once both land,
of one topic on both: one success, one TOPIC_ALREADY_EXISTS; a node restarting with its flags
never undoes a change made through another node; a partition decrease at start is refused
(a real `serve` process, exit 1)."""
import asyncio
import os
import subprocess
import sys

import asyncpg
import pytest

import groupcoord.protocol as P
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardSet
from groupcoord.runtime.stores import PgStore
from groupcoord.server.catalog import CatalogError, PgCatalogStore, TopicSpec
from groupcoord.server.cluster_mode import CatalogFollower
from groupcoord.server.server import Server, ServerConfig
from groupcoord.server.topic_admin import CatalogLimits
from groupcoord.storage.pg_schema import MIGRATIONS, SCHEMA_VERSION, migrate
from pg_server import pg_db, pg_server  # noqa: F401 (fixtures)
from serve_proc import package_root
from server_client import WireClient

M = P.messages
SHARDS = 4
ALLOW = CatalogLimits(allow_create_topics=True, allow_delete_topics=True)
BOUND_S = 60.0


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, BOUND_S)
    return asyncio.run(bounded())


class Node:
    """One node's catalog path in-process: a ShardSet over the PostgreSQL store (no shard
    loaded: the catalog does not need any), a Server bound to a free port whose catalog
    store is the shared one, and its CatalogFollower (polled by hand unless started)."""

    @classmethod
    async def start(cls, dsn, node_id, specs=(), period_s=3600.0):
        self = cls()
        self.pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        async with self.pool.acquire() as c:
            await migrate(c, SHARDS)
        self.store = PgCatalogStore(self.pool, "node %d's store" % node_id)
        catalog = await self.store.merge([TopicSpec(n, p) for n, p in specs], ALLOW)
        self.shards = ShardSet(RuntimeConfig(shards=SHARDS), topics=catalog,
                               store=PgStore(self.pool, node_id))
        await self.shards.start(shards=[])
        self.server = Server(ServerConfig(port=0, cluster_id="catalog-test",
                                          catalog_limits=ALLOW), self.shards, store=self.store)
        _, self.port = await self.server.start()
        self.follower = CatalogFollower(self.server, period_s)
        return self

    async def ask(self, req, version):
        c = await WireClient.connect("127.0.0.1", self.port)
        try:
            return await c.call(req, version, timeout=20)
        finally:
            c.writer.close()

    async def create(self, *topics):
        r = await self.ask(M.CreateTopicsRequest(topics=[
            M.CreateTopicsRequestCreatableTopic(name=n, num_partitions=p, replication_factor=-1)
            for n, p in topics], timeout_ms=20_000), 7)
        return {t.name: t.error_code for t in r.topics}

    async def listed(self):
        meta = await self.ask(M.MetadataRequest(topics=None), 12)
        return {t.name: len(t.partitions) for t in meta.topics}

    async def close(self):
        await self.follower.stop()
        await self.server.shutdown()
        await self.pool.close()


async def stored(dsn):
    conn = await asyncpg.connect(dsn)
    try:
        version, cat, given = await PgCatalogStore(conn).read()
    finally:
        await conn.close()
    return version, {t.name: t.partitions for t in cat}, given


def test_a_version_1_schema_upgrades_in_place_with_an_empty_catalog(pg_db):  # noqa: F811
    async def main():
        conn = await asyncpg.connect(pg_db)
        try:
            async with conn.transaction():      # what a version 1 node made
                await conn.execute("CREATE TABLE groupcoord_schema_version (version int "
                                   "PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
                for statement in MIGRATIONS[1]:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO groupcoord_schema_version (version) VALUES (1)")
                await conn.execute("INSERT INTO groupcoord_shards (shard) "
                                   "SELECT generate_series(0, $1 - 1)", SHARDS)
                await conn.execute("UPDATE groupcoord_shards SET owner = 7, epoch = 3 "
                                   "WHERE shard = 1")
            assert await migrate(conn, SHARDS) == 1
            assert await migrate(conn, SHARDS) == SCHEMA_VERSION
            assert await conn.fetchval("SELECT count(*) FROM groupcoord_schema_version") == \
                len(MIGRATIONS)
            # The version 1 rows are kept.
            assert tuple(await conn.fetchrow("SELECT owner, epoch FROM groupcoord_shards "
                                             "WHERE shard = 1")) == (7, 3)
            # One catalog row at most (the CHECK), empty at version 0.
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute("INSERT INTO groupcoord_catalog VALUES (2, 0, ''::bytea)")
        finally:
            await conn.close()
        assert await stored(pg_db) == (0, {}, {})
    run(main())


def test_create_topics_on_one_node_is_listed_by_another_after_one_refresh(pg_db):  # noqa: F811
    async def main():
        n1 = await Node.start(pg_db, 1, [("orders", 3)])
        n2 = await Node.start(pg_db, 2, [("orders", 3)])
        try:
            assert await n2.follower.poll() is False        # nothing changed yet
            assert await n1.create(("payments", 5)) == {"payments": 0}
            assert await n1.listed() == {"orders": 3, "payments": 5}
            assert await n2.listed() == {"orders": 3}        # not read yet
            assert await n2.follower.poll() is True          # one refresh
            assert await n2.listed() == {"orders": 3, "payments": 5}
            assert n2.shards.topics.by_name["payments"].partitions == 5
            # A change through node 2 now reaches node 1 the same way.
            r = await n2.ask(M.DeleteTopicsRequest(topic_names=["orders"], timeout_ms=20_000), 4)
            assert [x.error_code for x in r.responses] == [0]
            assert await n1.follower.poll() is True
            assert await n1.listed() == {"payments": 5}
            assert await n1.follower.poll() is False
        finally:
            await n1.close()
            await n2.close()
        assert (await stored(pg_db))[1] == {"payments": 5}
    run(main())


def test_the_running_follower_installs_another_nodes_change(pg_db):  # noqa: F811
    async def main():
        n1 = await Node.start(pg_db, 1)
        n2 = await Node.start(pg_db, 2, period_s=0.05)
        n2.follower.start()
        try:
            assert await n1.create(("fresh", 2)) == {"fresh": 0}
            # Waits (bounded by run's BOUND_S) for the task; no assertion on how long.
            while "fresh" not in await n2.listed():
                await asyncio.sleep(0.05)
            assert await n2.listed() == {"fresh": 2}
        finally:
            await n1.close()
            await n2.close()
    run(main())


def test_concurrent_create_topics_on_two_nodes_both_land(pg_db):  # noqa: F811
    async def main():
        n1 = await Node.start(pg_db, 1)
        n2 = await Node.start(pg_db, 2)
        try:
            # Both nodes have read the same version (the empty merges wrote nothing).
            base = n1.store.version
            assert n2.store.version == base
            # Node 2's save loses the race for sure: node 1 saves first, node 2 still holds
            # the old version; it installs node 1's catalog and plans again.
            assert await n1.create(("a", 1)) == {"a": 0}
            assert await n2.create(("b", 2)) == {"b": 0}
            assert await n2.listed() == {"a": 1, "b": 2}
            # And at once, from both sides.
            got = await asyncio.gather(n1.create(("c", 3)), n2.create(("d", 4)))
            assert got == [{"c": 0}, {"d": 0}]
            for n in (n1, n2):
                await n.follower.poll()
                assert await n.listed() == {"a": 1, "b": 2, "c": 3, "d": 4}
            # The same new topic on both: one gets it, the other a clear error.
            got = await asyncio.gather(n1.create(("same", 2)), n2.create(("same", 2)))
            assert sorted(g["same"] for g in got) == [0, E.TOPIC_ALREADY_EXISTS]
        finally:
            await n1.close()
            await n2.close()
        version, topics, _ = await stored(pg_db)
        assert topics == {"a": 1, "b": 2, "c": 3, "d": 4, "same": 2}
        assert version == base + 5           # one stored change per topic created
    run(main())


def test_a_failed_store_answers_storage_error_and_changes_nothing(pg_db):  # noqa: F811
    async def main():
        n1 = await Node.start(pg_db, 1, [("orders", 1)])
        try:
            await n1.store.pool.close()          # the store is gone for this node
            assert await n1.create(("x", 1)) == {"x": E.KAFKA_STORAGE_ERROR}
            assert await n1.listed() == {"orders": 1}
            assert await n1.follower.poll() is False     # logged, retried next period
        finally:
            await n1.server.shutdown()
        assert (await stored(pg_db))[1] == {"orders": 1}
    run(main())


def test_restarting_with_unchanged_flags_keeps_other_nodes_changes(pg_db):  # noqa: F811
    async def main():
        conn = await asyncpg.connect(pg_db)
        try:
            await migrate(conn, SHARDS)
            s1, s2 = PgCatalogStore(conn), PgCatalogStore(conn)
            await s1.merge([TopicSpec("orders", 6)])
            await s2.merge([TopicSpec("audit", 1)])         # another node's own flags
            # A client raises orders to 9 and deletes audit (through some node).
            cat = await s2.load()
            assert await s2.save(TopicCatalog.of(orders=9)) is True
            assert {t.name for t in cat} == {"orders", "audit"}
            # Both nodes restart with their flags: neither change is undone.
            assert {t.name: t.partitions for t in await s1.merge([TopicSpec("orders", 6)])} \
                == {"orders": 9}
            assert {t.name: t.partitions for t in await s2.merge([TopicSpec("audit", 1)])} \
                == {"orders": 9}
            assert s2.given == {"orders": 6, "audit": 1}
            # A stale save loses: nothing written.
            stale = PgCatalogStore(conn)
            await stale.load()
            assert await s1.save(TopicCatalog.of(orders=9, more=1)) is True
            assert await stale.save(TopicCatalog.of(orders=12)) is False
            # A decrease below what is stored is refused.
            with pytest.raises(CatalogError, match="partitions cannot be removed"):
                await s1.merge([TopicSpec("orders", 7)])
        finally:
            await conn.close()
        assert (await stored(pg_db))[1] == {"orders": 9, "more": 1}
    run(main())


def test_a_partition_decrease_at_start_is_refused(pg_db, tmp_path):  # noqa: F811
    async def seed():
        conn = await asyncpg.connect(pg_db)
        try:
            await migrate(conn, SHARDS)
            await PgCatalogStore(conn).merge([TopicSpec("orders", 6)])
        finally:
            await conn.close()
    run(seed())
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--store", pg_db,
                        "--node-id", "2", "--port", "0", "--shards", str(SHARDS),
                        "--topic", "orders:4", "--loop", "asyncio"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=package_root()))
    errs = [x for x in r.stderr.splitlines() if x.startswith("groupcoord serve: error:")]
    assert r.returncode == 1 and r.stdout == "" and len(errs) == 1, r.stderr
    assert "'orders' has 6 partitions" in errs[0] and "cannot be removed" in errs[0]
    assert "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []               # nothing kept on local disk
    assert run(stored(pg_db))[1] == {"orders": 6}
