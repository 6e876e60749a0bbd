"""storage/pg_schema.py and storage/pg_log.py against a real PostgreSQL (tests/pg_server.py):
the schema's migration, the round trip through the file log's loader, group commit, fencing,
failed flushes and compaction. Every test has a database of its own (pg_db)."""
import asyncio
import random

import asyncpg
import pytest

from groupcoord.groups.records import Record, decode_record, encode_record
from groupcoord.groups.shard import Shard
from groupcoord.protocol import messages as m
from groupcoord.runtime.load import load_shard
from groupcoord.storage import Log
from groupcoord.storage.batch import CorruptBatchError, decode, encode_batch
from groupcoord.storage.pg_log import LeaseLostError, PgShardLog, plan_compaction
from groupcoord.storage.pg_schema import SCHEMA_VERSION, SchemaError, migrate
from pg_server import pg_db, pg_server  # noqa: F401  (fixtures)

TS = 1_700_000_000_000
NODE, EPOCH = 1, 3
HANG_GUARD_S = 60       # only against a hang: no test depends on how fast anything is


def run(coro):
    return asyncio.run(coro)


def commit(group, partition, offset, ts=TS):
    return encode_record(Record(
        m.OffsetCommitKey(group=group, topic="t", partition=partition),
        m.OffsetCommitValue(offset=offset, leader_epoch=1, metadata="m%d" % offset,
                            commit_timestamp=ts)))


def tombstone(group, partition):
    return encode_record(Record(m.OffsetCommitKey(group=group, topic="t", partition=partition),
                                None))


def traffic(seed, n=600):
    """Batches of offset commits over a few groups and partitions (keys repeat), with
    offset deletes (tombstones) mixed in; every group keeps a live partition 0."""
    rnd = random.Random(seed)
    out, i = [], 0
    while i < n:
        batch = []
        for _ in range(rnd.choice([1, 1, 2, 5, 13])):
            g, p = "g%d" % rnd.randrange(4), rnd.randrange(1, 9)
            if rnd.random() < 0.15:
                batch.append(tombstone(g, p))
            else:
                batch.append(commit(g, p, i))
            i += 1
        out.append(batch)
    out.append([commit("g%d" % g, 0, n + g) for g in range(4)])
    return out


async def make_pool(dsn, size=4):
    return await asyncpg.create_pool(dsn, min_size=1, max_size=size)


async def own(conn, shard=0, node=NODE, epoch=EPOCH):
    await conn.execute("UPDATE groupcoord_shards SET owner = $2, epoch = $3 WHERE shard = $1",
                       shard, node, epoch)


async def setup(dsn, shards=4):
    pool = await make_pool(dsn)
    async with pool.acquire() as c:
        await migrate(c, shards)
        await own(c)
    return pool


async def table(pool, shard=0):
    async with pool.acquire() as c:
        return [tuple(r) for r in await c.fetch(
            "SELECT base_offset, last_offset, epoch, batch FROM groupcoord_log WHERE shard = $1"
            " ORDER BY base_offset", shard)]


async def wait_for_lock_wait(conn, like):
    """Until a backend whose query matches ``like`` waits for a lock; -> its pid."""
    while True:
        pid = await conn.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'Advisory')"
            " AND query LIKE $1 AND pid <> pg_backend_pid()", like)
        if pid is not None:
            return pid
        await asyncio.sleep(0.01)


def state_of(snapshot_or_log):
    sh = Shard(None, None, strict=True)
    load_shard(sh, snapshot_or_log)
    return sh.snapshot(durable=True)


def naive_state(records):
    sh = Shard(None, None, strict=True)
    for _o, k, v in records:
        sh.replay(decode_record(k, v))
    return sh.snapshot(durable=True)


# ---------------------------------------------------------------------- schema
def test_migrate_creates_the_schema_once_and_is_idempotent(pg_db):
    async def go():
        c = await asyncpg.connect(pg_db)
        try:
            assert await migrate(c, 50) == 0
            assert await migrate(c, 50) == SCHEMA_VERSION
            assert await c.fetchval("SELECT count(*) FROM groupcoord_schema_version") == \
                SCHEMA_VERSION
            rows = await c.fetch("SELECT shard, owner, epoch, lease_expires FROM "
                                 "groupcoord_shards ORDER BY shard")
            assert [tuple(r) for r in rows] == [(s, None, 0, None) for s in range(50)]
            cols = await c.fetch(
                "SELECT table_name, column_name, data_type, is_nullable FROM "
                "information_schema.columns WHERE table_name LIKE 'groupcoord_%' "
                "ORDER BY table_name, ordinal_position")
            got = {}
            for t, col, typ, null in cols:
                got.setdefault(t, []).append((col, typ, null))
            assert got["groupcoord_log"] == [
                ("shard", "integer", "NO"), ("base_offset", "bigint", "NO"),
                ("last_offset", "bigint", "NO"), ("epoch", "bigint", "NO"),
                ("batch", "bytea", "NO")]
            assert [c[0] for c in got["groupcoord_nodes"]] == [
                "node_id", "host", "port", "started_at", "last_seen", "incarnation",
                "endpoints"]
            assert got["groupcoord_shards"] == [
                ("shard", "integer", "NO"), ("owner", "integer", "YES"),
                ("epoch", "bigint", "NO"), ("lease_expires", "timestamp with time zone", "YES")]
            # A node started with another shard count is refused: the hash of a group id
            # to its shard must agree on every node.
            for other in (49, 51):
                with pytest.raises(SchemaError, match="50 shards"):
                    await migrate(c, other)
            await c.execute("INSERT INTO groupcoord_schema_version (version) VALUES ($1)",
                            SCHEMA_VERSION + 1)
            with pytest.raises(SchemaError, match="upgrade the node"):
                await migrate(c, 50)
        finally:
            await c.close()
    run(go())


def test_nodes_migrating_at_once_apply_each_version_once(pg_db):
    async def go():
        conns = [await asyncpg.connect(pg_db) for _ in range(6)]
        try:
            befores = await asyncio.gather(*(migrate(c, 10) for c in conns))
            # Exactly one of them created the schema; the others found it made.
            assert sorted(befores) == [0] + [SCHEMA_VERSION] * 5
            c = conns[0]
            assert await c.fetchval("SELECT count(*) FROM groupcoord_schema_version") == \
                SCHEMA_VERSION
            assert await c.fetchval("SELECT count(*) FROM groupcoord_shards") == 10
        finally:
            for c in conns:
                await c.close()
    run(go())


# ---------------------------------------------------------------------- round trip
def test_round_trip_gives_the_file_logs_bytes_and_state(pg_db, tmp_path):
    batches = traffic(seed=11)

    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            with Log(str(tmp_path / "f"), fsync="unsafe-no-fsync", leader_epoch=EPOCH) as flog:
                for i, b in enumerate(batches):
                    assert lg.append(b, TS + i) == flog.append(b, TS + i)
                    if i % 7 == 0:
                        await lg.flush_async()
                        flog.flush()
                end = await lg.flush_async()
                flog.flush()
                assert end == lg.durable_offset == flog.durable_offset == lg.next_offset
                file_bytes = b"".join(s.read_all() for s in flog.segments())
                file_records = list(flog.read())
                file_state = state_of(flog)
            # A new owner's log (same node and epoch here) reads it back.
            back = PgShardLog(pool, 0, NODE, EPOCH)
            snap = await back.load()
            assert back.next_offset == back.durable_offset == end
            assert snap.data == file_bytes          # the same RecordBatch v2 bytes
            assert list(snap.read()) == file_records
            assert await back.read() == file_records
            assert await back.read(end - 5) == file_records[-5:] and \
                file_records[-5][0] == end - 5
            assert state_of(snap) == file_state == naive_state(file_records)
            assert len(file_state) > 0
            # load(replay) runs the loader over the snapshot; appends continue the offsets.
            again = PgShardLog(pool, 0, NODE, EPOCH)
            stats = await again.load(lambda s: load_shard(Shard(None, None, strict=True), s))
            assert stats.records_read == end and stats.batches == len(batches)
            assert again.append([commit("g9", 0, 1)], TS) == range(end, end + 1)
            assert await again.flush_async() == end + 1
            assert (await table(pool))[-1][:3] == (end, end, EPOCH)
        finally:
            await pool.close()
    run(go())


def test_a_row_that_is_not_its_batch_is_refused_at_load(pg_db):
    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            lg.append([commit("g", 0, 1)], TS)
            lg.append([commit("g", 1, 2), commit("g", 2, 3)], TS)
            await lg.flush_async()
            async with pool.acquire() as c:
                await c.execute("UPDATE groupcoord_log SET last_offset = 7 WHERE base_offset = 1")
            with pytest.raises(CorruptBatchError, match="shard=0.*last_offset 7"):
                await PgShardLog(pool, 0, NODE, EPOCH).load()
            async with pool.acquire() as c:
                await c.execute("UPDATE groupcoord_log SET last_offset = 2,"
                                " batch = overlay(batch placing '\\x00'::bytea from 30)"
                                " WHERE base_offset = 1")
            with pytest.raises(CorruptBatchError):
                await PgShardLog(pool, 0, NODE, EPOCH).load()
        finally:
            await pool.close()
    run(go())


# ---------------------------------------------------------------------- group commit
def test_group_commit_writes_every_pending_batch_with_one_insert_in_one_transaction(pg_db):
    async def go():
        pool = await setup(pg_db)
        try:
            async with pool.acquire() as c:
                await c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await c.execute("SELECT pg_stat_statements_reset()")
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            for i in range(200):
                lg.append([commit("g", i % 10, i)], TS)
            assert lg.pending_bytes > 0 and lg.durable_offset == 0
            # Many flush callers at once: the first writes everything, the rest find nothing.
            ends = await asyncio.gather(*(lg.flush_async() for _ in range(5)))
            assert ends == [200] * 5 and lg.pending_bytes == 0 and lg.flushes == 1
            async with pool.acquire() as c:
                rows = await c.fetch(
                    "SELECT calls, rows FROM pg_stat_statements WHERE dbid ="
                    " (SELECT oid FROM pg_database WHERE datname = current_database())"
                    " AND query LIKE 'INSERT INTO groupcoord_log%'")
                assert [tuple(r) for r in rows] == [(1, 200)]
                checks = await c.fetchval(
                    "SELECT sum(calls) FROM pg_stat_statements WHERE dbid ="
                    " (SELECT oid FROM pg_database WHERE datname = current_database())"
                    " AND query LIKE 'SELECT owner, epoch FROM groupcoord_shards%FOR SHARE'")
                assert checks == 1
                # one transaction: every row has the same inserting transaction id
                assert await c.fetchval(
                    "SELECT count(DISTINCT xmin::text) FROM groupcoord_log") == 1
                assert await c.fetchval("SELECT count(*) FROM groupcoord_log") == 200
        finally:
            await pool.close()
    run(go())


# ---------------------------------------------------------------------- fencing
def test_a_flush_after_another_node_took_the_shard_is_fenced_and_writes_nothing(pg_db):
    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            lg.append([commit("g", 0, 1)], TS)
            await lg.flush_async()
            before = await table(pool)
            async with pool.acquire() as c:         # node 2 takes the shard over
                await own(c, node=2, epoch=EPOCH + 1)
            lg.append([commit("g", 0, 2)], TS)
            lg.append([commit("g", 1, 3)], TS)
            with pytest.raises(LeaseLostError) as err:
                await lg.flush_async()
            assert (err.value.owner, err.value.current_epoch) == (2, EPOCH + 1)
            assert await table(pool) == before
            assert lg.fenced and lg.durable_offset == lg.next_offset == 1
            for call in (lambda: lg.append([commit("g", 0, 4)], TS), lg.flush_async,
                         lambda: lg.compact(0, TS), lg.read):
                with pytest.raises(LeaseLostError):
                    r = call()
                    if asyncio.iscoroutine(r):
                        await r
            # The same node at an older epoch (it released and reacquired meanwhile) is
            # fenced too, and a node that does not own the shard cannot load it.
            async with pool.acquire() as c:
                await own(c, node=NODE, epoch=EPOCH + 2)
            stale = PgShardLog(pool, 0, NODE, EPOCH)
            with pytest.raises(LeaseLostError):
                await stale.load()
            assert await table(pool) == before
        finally:
            await pool.close()
    run(go())


def test_a_takeover_in_progress_holds_the_flush_until_it_commits_then_fences_it(pg_db):
    """The epoch check's row lock: a flush that reaches the check while another node's
    acquisition is uncommitted waits for it and then sees the new epoch."""
    async def go():
        pool = await setup(pg_db)
        taker = await asyncpg.connect(pg_db)
        watch = await asyncpg.connect(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            tx = taker.transaction()
            await tx.start()
            await own(taker, node=2, epoch=EPOCH + 1)
            lg.append([commit("g", 0, 1)], TS)
            flush = asyncio.ensure_future(lg.flush_async())
            await asyncio.wait_for(wait_for_lock_wait(watch, "%FOR SHARE%"), HANG_GUARD_S)
            assert not flush.done()
            await tx.commit()
            with pytest.raises(LeaseLostError):
                await asyncio.wait_for(flush, HANG_GUARD_S)
            assert await table(pool) == []
        finally:
            await taker.close()
            await watch.close()
            await pool.close()
    run(go())


# ---------------------------------------------------------------------- failed flushes
def test_a_flush_killed_mid_way_leaves_nothing_and_the_retry_writes_it_once(pg_db):
    """The flush's backend is terminated after its INSERT ran (a statement trigger holds it
    there on an advisory lock the test owns), before COMMIT."""
    async def go():
        pool = await setup(pg_db)
        admin = await asyncpg.connect(pg_db)
        try:
            await admin.execute("""
                CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_advisory_lock_shared(4242);
                      PERFORM pg_advisory_unlock_shared(4242); RETURN NULL; END $$;
                CREATE TRIGGER hold AFTER INSERT ON groupcoord_log
                    FOR EACH STATEMENT EXECUTE FUNCTION hold();""")
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            for i in range(20):
                lg.append([commit("g", i, i)], TS)
            await admin.execute("SELECT pg_advisory_lock(4242)")
            flush = asyncio.ensure_future(lg.flush_async())
            pid = await asyncio.wait_for(wait_for_lock_wait(admin, "INSERT INTO groupcoord_log%"),
                                         HANG_GUARD_S)
            # The rows are inserted (uncommitted) right now; kill the connection.
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
                await asyncio.wait_for(flush, HANG_GUARD_S)
            await admin.execute("SELECT pg_advisory_unlock(4242)")
            assert await table(pool) == []
            assert lg.durable_offset == 0 and lg.next_offset == 20 and not lg.fenced
            lg.append([commit("g", 99, 99)], TS)            # appends go on meanwhile
            assert await lg.flush_async() == 21
            rows = await table(pool)
            assert [r[0] for r in rows] == list(range(21))
            assert naive_state(await lg.read()) == state_of(await PgShardLog(
                pool, 0, NODE, EPOCH).load())
        finally:
            await admin.close()
            await pool.close()
    run(go())


def test_a_flush_whose_commit_answer_was_lost_is_not_written_twice(pg_db):
    """The COMMIT went through but its answer never came back (the connection died after
    it): the next flush finds those batches there and writes only the newer ones."""
    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            real = lg._write

            async def lost_answer(batches):
                await real(batches)
                raise ConnectionResetError("connection lost after COMMIT")
            lg._write = lost_answer
            for i in range(5):
                lg.append([commit("g", i, i)], TS)
            with pytest.raises(ConnectionResetError):
                await lg.flush_async()
            lg._write = real
            assert lg.durable_offset == 0 and len(await table(pool)) == 5
            lg.append([commit("g", 7, 7)], TS)
            assert await lg.flush_async() == 6
            assert [r[0] for r in await table(pool)] == list(range(6))
            # Nothing committed at all: the retry writes everything.
            lg2 = PgShardLog(pool, 1, NODE, EPOCH)
            async with pool.acquire() as c:
                await own(c, shard=1)
            await lg2.load()

            async def failed(batches):
                raise ConnectionResetError("connection lost before COMMIT")
            lg2._write = failed
            lg2.append([commit("g", 0, 0)], TS)
            with pytest.raises(ConnectionResetError):
                await lg2.flush_async()
            del lg2._write
            lg2.append([commit("g", 1, 1)], TS)
            assert await lg2.flush_async() == 2
            assert [r[0] for r in await table(pool, 1)] == [0, 1]
        finally:
            await pool.close()
    run(go())


# ---------------------------------------------------------------------- compaction
def test_compaction_keeps_the_latest_record_per_key_and_the_loaded_state(pg_db):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    batches = traffic(seed, n=1500)

    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH, merge_bytes=4096, vacuum_rows=1)
            await lg.load()
            for i, b in enumerate(batches):
                lg.append(b, TS + i)
                if i % 5 == 0:
                    await lg.flush_async()
            end = await lg.flush_async()
            full = await lg.read()
            before_rows = await table(pool)
            state = state_of(await PgShardLog(pool, 0, NODE, EPOCH).load())
            latest = {}
            for off, k, v in full:
                latest[k] = (off, v)
            # Tombstones kept (long retention), then dropped (retention 0).
            st = await lg.compact(1 << 40, TS + 10 ** 6)
            rows = await table(pool)
            assert len(rows) < len(before_rows) / 5
            assert st.records_before == len(full) - len(batches[-1]) and \
                st.records_after < st.records_before / 3
            assert rows[-1] == before_rows[-1]          # the log's end row stays
            got = await lg.read()
            assert {k: (o, v) for o, k, v in got} == latest
            assert len(got) == len(latest)              # exactly one record per key
            assert [o for o, _k, _v in got] == sorted(o for o, _k, _v in got)
            snap = await PgShardLog(pool, 0, NODE, EPOCH).load()
            assert snap.next_offset == end and state_of(snap) == state
            st = await lg.compact(0, TS + 10 ** 6)
            got = await lg.read()
            assert st.tombstones_dropped == sum(v is None for o, v in latest.values()
                                                if o < before_rows[-1][0])
            assert {k: (o, v) for o, k, v in got} == {
                k: ov for k, ov in latest.items() if ov[1] is not None
                or ov[0] >= before_rows[-1][0]}
            snap = await PgShardLog(pool, 0, NODE, EPOCH).load()
            assert snap.next_offset == end and state_of(snap) == state
            # Idempotent: nothing left to do.
            st = await lg.compact(0, TS + 10 ** 6)
            assert st.segments_rewritten == 0 and await lg.read() == got
            assert lg.vacuums == 2          # after each compaction that left dead rows
            # Appends after compaction continue the offsets.
            lg.append([commit("g0", 0, 1)], TS)
            assert await lg.flush_async() == end + 1
        finally:
            await pool.close()
    run(go())


def test_appends_go_on_while_a_compaction_transaction_is_open(pg_db):
    """A compaction's rewrite transaction held open (a trigger on its UPDATE waits on an
    advisory lock the test owns) blocks neither appends nor their flushes; a takeover waits
    for it."""
    async def go():
        pool = await setup(pg_db)
        admin = await asyncpg.connect(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            for i in range(50):
                lg.append([commit("g", i % 3, i)], TS)
                await lg.flush_async()
            await admin.execute("""
                CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_advisory_lock_shared(4243);
                      PERFORM pg_advisory_unlock_shared(4243); RETURN NULL; END $$;
                CREATE TRIGGER hold AFTER UPDATE ON groupcoord_log
                    FOR EACH STATEMENT EXECUTE FUNCTION hold();""")
            await admin.execute("SELECT pg_advisory_lock(4243)")
            compaction = asyncio.ensure_future(lg.compact(1 << 40, TS))
            await asyncio.wait_for(wait_for_lock_wait(admin, "UPDATE groupcoord_log%"),
                                   HANG_GUARD_S)
            for i in range(50, 60):
                lg.append([commit("g", i % 3, i)], TS)
                assert await asyncio.wait_for(lg.flush_async(), HANG_GUARD_S) == i + 1
            # Another node's acquisition waits for the rewrite transaction (FOR SHARE).
            taker = await asyncpg.connect(pg_db)
            try:
                take = asyncio.ensure_future(own(taker, node=2, epoch=EPOCH + 1))
                await asyncio.wait_for(wait_for_lock_wait(admin, "UPDATE groupcoord_shards%"),
                                       HANG_GUARD_S)
                await admin.execute("SELECT pg_advisory_unlock(4243)")
                st = await asyncio.wait_for(compaction, HANG_GUARD_S)
                await asyncio.wait_for(take, HANG_GUARD_S)
            finally:
                await taker.close()
            assert st.records_after < st.records_before
            async with pool.acquire() as c:
                await own(c)
            got = await PgShardLog(pool, 0, NODE, EPOCH).load()
            assert got.next_offset == 60
            # keys g/0..2: their last records below the log's end row (49) are 46..48
            assert sorted(o for o, _k, _v in got.read()) == [46, 47, 48, 49] + \
                list(range(50, 60))
        finally:
            await admin.close()
            await pool.close()
    run(go())


def test_a_compaction_that_lost_the_shard_changes_nothing(pg_db):
    async def go():
        pool = await setup(pg_db)
        try:
            lg = PgShardLog(pool, 0, NODE, EPOCH)
            await lg.load()
            for i in range(20):
                lg.append([commit("g", 0, i)], TS)
                await lg.flush_async()
            before = await table(pool)
            async with pool.acquire() as c:
                await own(c, node=2, epoch=EPOCH + 1)
            with pytest.raises(LeaseLostError):
                await lg.compact(0, TS)
            assert lg.fenced and await table(pool) == before
        finally:
            await pool.close()
    run(go())


def test_compaction_plan_merges_runs_and_keeps_big_clean_batches():
    """plan_compaction alone (no database): runs are merged up to merge_bytes, a run with
    nothing left is deleted, a large batch whose records all live is left as it is."""
    rows, off = [], 0
    for i in range(30):
        recs = [commit("g", i % 4, i)]
        data = encode_batch(recs, off, TS + i, EPOCH)
        rows.append((off, off, EPOCH, data))
        off += 1
    big = [commit("big%d" % j, 0, j) for j in range(40)]
    data = encode_batch(big, off, TS, EPOCH)
    rows.append((off, off + 39, EPOCH, data))
    plan = plan_compaction(rows, 0, merge_bytes=2 * len(data))
    # 26 of the first 30 rows hold only superseded records: deleted (the run's head row
    # stays, updated with the 4 live records); the big row is untouched.
    assert len(plan.updates) == 1 and plan.updates[0][0] == 0 and plan.updates[0][1] == 29
    assert sorted(plan.deletes) == list(range(1, 30))
    merged, _ = decode(plan.updates[0][3])
    assert [o for o, _k, _v in merged] == [26, 27, 28, 29]
    assert plan.stats.records_before == 70 and plan.stats.records_after == 44
