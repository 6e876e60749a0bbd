"""The shard runtime over the PostgreSQL store (runtime/stores.py PgStore, storage/pg_log.py):
a shard loads as the lease holder at an epoch, its group commits go to groupcoord_log, a
reload from the rows gives the same answers, and a write refused because another node took
the lease unloads the shard (NOT_COORDINATOR) and tells the lease glue. Real PostgreSQL
(tests/pg_server.py); each test has a database of its own."""
import asyncio

import asyncpg

from groupcoord.cluster.pg_leases import PgLeases
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardSet, ShardState, shard_for
from groupcoord.runtime.stores import PgStore
from groupcoord.storage.pg_schema import migrate
from pg_server import pg_db, pg_server  # noqa: F401  (fixtures)

SHARDS = 4
TOPICS = TopicCatalog.of(orders=6)
HANG_GUARD_S = 60       # only against a hang


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD_S))


def cg_join(group, member):
    return m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["orders"], topic_partitions=[])


def commit(group, partition, offset, member="", epoch=-1):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch,
                                 member_id=member, topics=[m.OffsetCommitRequestTopic(
                                     name="orders", partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=partition, committed_offset=offset)])])


def fetch(group):
    return m.OffsetFetchRequest(group_id=group, topics=[m.OffsetFetchRequestTopic(
        name="orders", partition_indexes=list(range(6)))])


def fetched(resp):
    return {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}


async def _node(dsn, node_id, fenced=None):
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    shards = ShardSet(RuntimeConfig(shards=SHARDS,
                                    shard_config=ShardConfig(consumer_assignment_interval_ms=0)),
                      topics=TOPICS, store=PgStore(pool, node_id),
                      on_fenced=(lambda i, e: fenced.append((i, e))) if fenced is not None
                      else None)
    await shards.start(shards=[])
    leases = PgLeases(pool, node_id, 60_000, host="127.0.0.1", port=9100 + node_id)
    return pool, shards, leases


def test_a_shard_loads_writes_and_reloads_from_postgresql(pg_db):
    group = "g1"
    ix = shard_for(group, SHARDS)

    async def go():
        admin = await asyncpg.connect(pg_db)
        await migrate(admin, SHARDS)
        pool, shards, leases = await _node(pg_db, 1)
        # Not loaded: the shard answers NOT_COORDINATOR (another node may own it).
        r = await shards.submit(commit(group, 0, 5), 8)
        assert r.topics[0].partitions[0].error_code == E.NOT_COORDINATOR
        epoch = await leases.acquire(ix)
        await shards.load_shard(ix, epoch)
        assert shards.loaded(ix)
        j = await shards.submit(cg_join(group, "m1"), 0)
        assert j.error_code == 0 and j.member_epoch > 0
        for p in range(6):
            r = await shards.submit(commit(group, p, 100 + p, "m1", j.member_epoch), 9)
            assert r.topics[0].partitions[0].error_code == 0
        rows = await admin.fetchval("SELECT count(*) FROM groupcoord_log WHERE shard = $1", ix)
        assert rows >= 1
        await shards.unload_shard(ix)
        assert not shards.loaded(ix)
        await shards.close()
        await pool.close()
        # A second node process (fresh ShardSet) takes the shard over and sees everything.
        pool2, shards2, leases2 = await _node(pg_db, 2)
        await admin.execute("UPDATE groupcoord_shards SET lease_expires = clock_timestamp()"
                            " - interval '1 millisecond' WHERE shard = $1", ix)
        epoch2 = await leases2.acquire(ix)
        assert epoch2 == epoch + 1
        await shards2.load_shard(ix, epoch2)
        got = fetched(await shards2.submit(fetch(group), 7))
        assert got == {p: 100 + p for p in range(6)}
        g = shards2.shards[ix].shard.groups[group]
        assert "m1" in g.members and g.members["m1"].a.epoch == j.member_epoch
        await shards2.close()
        await pool2.close()
        await admin.close()

    run(go())


def test_a_write_after_another_node_took_the_shard_is_refused_and_unloads(pg_db):
    group = "g2"
    ix = shard_for(group, SHARDS)

    async def go():
        admin = await asyncpg.connect(pg_db)
        await migrate(admin, SHARDS)
        fenced = []
        pool, shards, leases = await _node(pg_db, 1, fenced)
        epoch = await leases.acquire(ix)
        await shards.load_shard(ix, epoch)
        r = await shards.submit(commit(group, 0, 7), 8)
        assert r.topics[0].partitions[0].error_code == 0
        # Node 1 is paused past its lease (the database's clock); node 2 takes the shard.
        await admin.execute("UPDATE groupcoord_shards SET lease_expires = clock_timestamp()"
                            " - interval '1 millisecond' WHERE shard = $1", ix)
        pool2 = await asyncpg.create_pool(pg_db, min_size=1, max_size=2)
        epoch2 = await PgLeases(pool2, 2, 60_000, host="127.0.0.1", port=9102).acquire(ix)
        assert epoch2 == epoch + 1
        # The zombie's next write: refused by the store, answered NOT_COORDINATOR, unloaded.
        r = await shards.submit(commit(group, 0, 999), 8)
        assert r.topics[0].partitions[0].error_code == E.NOT_COORDINATOR
        assert shards.shards[ix].state is ShardState.UNLOADED
        assert fenced == [(ix, epoch)]
        r = await shards.submit(commit(group, 1, 5), 8)
        assert r.topics[0].partitions[0].error_code == E.NOT_COORDINATOR
        # Nothing it tried after losing the lease is in the store.
        written = await admin.fetchval(
            "SELECT count(*) FROM groupcoord_log WHERE shard = $1 AND epoch = $2",
            ix, epoch)
        before = written
        rows_new_epoch = await admin.fetchval(
            "SELECT count(*) FROM groupcoord_log WHERE shard = $1 AND epoch > $2", ix, epoch)
        assert rows_new_epoch == 0 and before >= 1
        pool3, shards3, _ = await _node(pg_db, 2)
        await shards3.load_shard(ix, epoch2)
        assert fetched(await shards3.submit(fetch(group), 7))[0] == 7
        for s in (shards, shards3):
            await s.close()
        for p in (pool, pool2, pool3):
            await p.close()
        await admin.close()

    run(go())
