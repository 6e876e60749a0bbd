"""The log of one shard in PostgreSQL (cluster mode): storage/log.py's Log over the table
``groupcoord_log`` of storage/pg_schema.py.

Layout: one row per RecordBatch v2,

    groupcoord_log(shard, base_offset, last_offset, epoch, batch)   PRIMARY KEY (shard, base_offset)

``batch`` holds the bytes storage/batch.py encodes for the file segments (its
partitionLeaderEpoch is the shard epoch of the writer, clamped to int32), so the rows of a
shard in base_offset order, concatenated, are a segment: runtime/load.py replays them with the
same native calls (``load()`` hands it a one-segment view of them).

Offsets as in Log: append() assigns consecutive offsets from ``next_offset``;
``durable_offset`` is exclusive (everything below it is committed in the database).

Group commit and fencing. ``flush_async()`` takes every pending batch and writes them in ONE
transaction of two statements:

    SELECT owner, epoch FROM groupcoord_shards WHERE shard = $1 FOR SHARE
    INSERT INTO groupcoord_log SELECT ... FROM unnest($batches...)

then COMMIT; ``durable_offset`` moves only after the COMMIT. The row lock makes a takeover
(UPDATE of the shard's row by the acquiring node) wait for the transactions that passed the
check, and every transaction after the takeover sees the new owner and epoch: a node that lost
the shard raises LeaseLostError, its transaction rolls back, and the log is *fenced* (every
later call raises LeaseLostError; what was pending is dropped, the runtime answers
NOT_COORDINATOR). Any other failure (connection lost, database restarting) leaves the pending
batches pending, in order, for the next flush. Because a connection lost during COMMIT leaves
the outcome unknown, the flush after such a failure first reads which of its batches are
already there and inserts only the rest.

Compaction (``compact()``): keeps the latest record per key, drops tombstones older than the
retention (by the record's timestamp) and merges what is left into few batches, offsets kept.
It reads the shard's rows below the last durable one (without locks), computes the rewrite in
a worker thread, then applies it in one transaction: the same epoch check (FOR SHARE), one
UPDATE of the merged batches and one DELETE of the emptied rows. Appends never wait for it:
FOR SHARE does not conflict with FOR SHARE, the rows it touches lie below the durable offset
where appends never write, and its table locks (ROW EXCLUSIVE) do not conflict with INSERT.
Only a takeover's UPDATE waits, for the one rewrite transaction. Once its compactions have
left ``vacuum_rows`` dead rows, the log runs VACUUM on the table (which blocks no append
either), so that the table's size stays bounded under a steady rewrite of the same keys. The
row holding the end of the log is never compacted, so a reload restores ``next_offset`` (as Log
never compacts the active segment).

Concurrency contract: one owner (the shard's runtime, on its event loop) calls append,
flush_async, load, read and close; one compact() may run at the same time (each holds a pooled
connection of its own).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Iterator, NamedTuple, Optional

from groupcoord.storage import batch as rb
from groupcoord.storage.log import CompactionStats, LogClosedError

__all__ = ["PgShardLog", "LeaseLostError", "PgSnapshot", "PgCompactionPlan", "plan_compaction"]

log = logging.getLogger("groupcoord.storage")

# A merged batch stops growing here; a row at least half this size whose records are all
# still live is left alone, so a compaction rewrites only what changed since the last one.
MERGE_BYTES = 256 << 10
# Rows a log's compactions may leave dead before it vacuums the table itself. Autovacuum
# wakes up only every autovacuum_naptime (a minute by default): a busy shard's dead rows
# would take that much space before their pages are reused.
VACUUM_ROWS = 10_000
_INT32_MAX = (1 << 31) - 1

_CHECK = "SELECT owner, epoch FROM groupcoord_shards WHERE shard = $1 FOR SHARE"
_INSERT = ("INSERT INTO groupcoord_log (shard, base_offset, last_offset, epoch, batch)"
           " SELECT $1, u.b, u.l, $2, u.d"
           " FROM unnest($3::bigint[], $4::bigint[], $5::bytea[]) AS u(b, l, d)")
_UPDATE = ("UPDATE groupcoord_log AS g SET last_offset = u.l, epoch = u.e, batch = u.d"
           " FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[]) AS u(b, l, e, d)"
           " WHERE g.shard = $1 AND g.base_offset = u.b")
_DELETE = "DELETE FROM groupcoord_log WHERE shard = $1 AND base_offset = ANY($2::bigint[])"
_SELECT = ("SELECT base_offset, last_offset, batch FROM groupcoord_log"
           " WHERE shard = $1 AND last_offset >= $2 AND base_offset < $3 ORDER BY base_offset")


class LeaseLostError(Exception):
    """This node no longer owns the shard at the epoch it writes with (another node took it
    over, or it was released): the write was not made and the log is fenced."""

    def __init__(self, shard: int, epoch: int, owner: Optional[int], current_epoch):
        super().__init__("shard %d: fenced: written at epoch %d, but the shard is owned by %s "
                         "at epoch %s" % (shard, epoch,
                                          "no node" if owner is None else "node %d" % owner,
                                          current_epoch))
        self.shard = shard
        self.epoch = epoch
        self.owner = owner
        self.current_epoch = current_epoch


class _Batch(NamedTuple):
    base: int
    last: int
    data: bytes


# ---------------------------------------------------------------------- the loaded rows
class _MemoryOps:
    """The one read call runtime/load.py makes on a segment (FileOps.preadv), over bytes."""

    def __init__(self, data: bytes):
        self._data = data

    def preadv(self, _fd, buffers, offset):
        n = 0
        for b in buffers:
            chunk = self._data[offset + n:offset + n + len(b)]
            b[:len(chunk)] = chunk
            n += len(chunk)
            if len(chunk) < len(b):
                break
        return n


class _MemorySegment:
    """A Segment as runtime/load.py reads it (size, path, fd(), ops.preadv), over the
    concatenated rows of a shard."""

    def __init__(self, shard: int, data: bytes, next_offset: int):
        self.path = "postgresql:groupcoord_log[shard=%d]" % shard
        self.base_offset = 0
        self.size = len(data)
        self.next_offset = next_offset
        self.ops = _MemoryOps(data)

    def fd(self) -> int:
        return -1


class PgSnapshot:
    """A shard's durable batches as of one load(): ``segments()`` gives runtime/load.py its
    input (``load_shard(shard, snapshot)``), ``read()`` the records, ``data`` the bytes."""

    def __init__(self, shard: int, data: bytes, next_offset: int, batches: int):
        self.shard = shard
        self.data = data
        self.next_offset = next_offset
        self.batches = batches
        self._segment = _MemorySegment(shard, data, next_offset)

    def segments(self) -> list:
        return [self._segment]

    def read(self, from_offset: int = 0) -> Iterator[tuple]:
        """(offset, key, value) of every record with offset >= from_offset."""
        recs, _used = rb.decode(self.data, 0, len(self.data), self._segment.path, 0, False,
                                from_offset)
        return iter(recs)


def _join_rows(shard: int, rows) -> tuple:
    """-> (bytes, next offset) of rows (base_offset, last_offset, batch) in offset order,
    each checked against its batch header (CorruptBatchError names the shard and offset)."""
    data = b"".join(r[2] for r in rows)
    path = "postgresql:groupcoord_log[shard=%d]" % shard
    infos, stop, reason, _trunc = rb.scan(data)
    if reason is not None or stop != len(data) or len(infos) != len(rows):
        raise rb.CorruptBatchError(path, stop, reason or "a row holds %d batches"
                                   % (len(infos) - len(rows) + 1))
    nxt = 0
    for (pos, base, lod, _n, _mts, _size), row in zip(infos, rows):
        if base != row[0] or base + lod != row[1] or base < nxt:
            raise rb.CorruptBatchError(path, pos, "row base_offset %d / last_offset %d does "
                                       "not match its batch (%d..%d) or goes back"
                                       % (row[0], row[1], base, base + lod))
        nxt = base + lod + 1
    return data, nxt


# ---------------------------------------------------------------------- compaction plan
class PgCompactionPlan(NamedTuple):
    updates: list       # (base_offset, last_offset, epoch, batch bytes) of rewritten rows
    deletes: list       # base_offset of rows removed
    stats: CompactionStats


def plan_compaction(rows, horizon_ms: int, merge_bytes: int = MERGE_BYTES) -> PgCompactionPlan:
    """The rewrite of rows (base_offset, last_offset, epoch, batch), in offset order: per
    key only its last record among them; a tombstone that is a key's last record is dropped
    when its timestamp is older than horizon_ms; null-key records stay. What is left is
    merged, in order, into batches of up to merge_bytes based at the first row of each run
    (which is updated; the run's other rows are deleted; a run with nothing left is deleted
    whole). Pure: runs in a worker thread."""
    decoded = []
    latest: dict = {}
    for base, last, epoch, data in rows:
        recs = []
        for bbase, bts, _mts, _lod, _ep, brecs in rb.decode_batches(data):
            for od, td, key, value in brecs:
                off = bbase + od
                recs.append((off, bts + td, key, value))
                if key is not None:
                    latest[key] = off
        decoded.append((base, last, epoch, len(data), recs))
    updates, deletes = [], []
    rec_before = rec_after = dropped = b_before = b_after = 0
    run: list = []          # rows of the current run
    kept: list = []         # its surviving records
    kept_bytes = 0

    def close_run():
        nonlocal kept_bytes, b_after
        if not run:
            return
        if len(run) == 1 and len(kept) == len(run[0][4]):
            b_after += run[0][3]                        # unchanged: not rewritten
        elif not kept:
            deletes.extend(r[0] for r in run)
        else:
            head = run[0][0]
            ts0 = min(t for _o, t, _k, _v in kept)
            batch = rb.encode_batch_explicit(
                [(o - head, t - ts0, k, v) for o, t, k, v in kept], head, ts0,
                max(t for _o, t, _k, _v in kept), run[-1][1] - head,
                min(max(r[2] for r in run), _INT32_MAX))
            updates.append((head, run[-1][1], max(r[2] for r in run), batch))
            deletes.extend(r[0] for r in run[1:])
            b_after += len(batch)
        run.clear()
        kept.clear()
        kept_bytes = 0

    for row in decoded:
        base, last, _epoch, size, recs = row
        b_before += size
        live = []
        for rec in recs:
            off, ts, key, value = rec
            if key is not None and latest[key] != off:
                continue
            if value is None and ts < horizon_ms:
                dropped += 1
                continue
            live.append(rec)
        rec_before += len(recs)
        rec_after += len(live)
        if len(live) == len(recs) and size >= merge_bytes // 2:
            close_run()                                 # a full, clean batch: keep it
            run.append(row)
            kept.extend(live)
            close_run()
            continue
        live_bytes = sum(len(k or b"") + len(v or b"") + 24 for _o, _t, k, v in live)
        if run and (kept_bytes + live_bytes > merge_bytes or last - run[0][0] > _INT32_MAX):
            close_run()
        run.append(row)
        kept.extend(live)
        kept_bytes += live_bytes
    close_run()
    stats = CompactionStats(len(updates) + len(deletes), rec_before, rec_after, b_before,
                            b_after, dropped)
    return PgCompactionPlan(updates, deletes, stats)


# ---------------------------------------------------------------------- the log
class PgShardLog:
    def __init__(self, pool, shard: int, node_id: int, epoch: int, *,
                 clock: Optional[Callable[[], int]] = None, executor=None,
                 merge_bytes: int = MERGE_BYTES, vacuum_rows: int = VACUUM_ROWS):
        # pool: an asyncpg Pool (anything whose acquire() is an async context manager giving
        # a connection); shared by the node's shards. executor: where compaction computes
        # (None: the loop's default executor).
        self.pool = pool
        self.shard = shard
        self.node_id = node_id
        self.epoch = epoch
        self.leader_epoch = min(epoch, _INT32_MAX)      # the batches' partitionLeaderEpoch
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._executor = executor
        self.merge_bytes = merge_bytes
        self.vacuum_rows = vacuum_rows      # 0: leave vacuuming to autovacuum
        self._dead_rows = 0                 # rows updated or deleted since this log vacuumed
        self.next_offset = 0
        self.durable_offset = 0
        self._pending: list = []            # _Batch, in offset order
        self._flush_lock = asyncio.Lock()   # one flush transaction at a time, in order
        self._compact_lock = asyncio.Lock()
        self._unsure = False                # a failed flush may have committed
        self._fenced: Optional[LeaseLostError] = None
        self.closed = False
        self.loaded = False
        # counters (logs, benchmarks, tests)
        self.flushes = 0
        self.flush_failures = 0
        self.vacuums = 0

    # ------------------------------------------------------------------ state
    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    def _check(self) -> None:
        if self._fenced is not None:
            raise LeaseLostError(self.shard, self.epoch, self._fenced.owner,
                                 self._fenced.current_epoch) from self._fenced
        if self.closed:
            raise LogClosedError()

    def _fence(self, exc: LeaseLostError) -> None:
        if self._fenced is None:
            log.warning("%s; %d pending batch(es) dropped", exc, len(self._pending))
        self._fenced = exc
        self._pending = []
        self.next_offset = self.durable_offset

    async def _check_epoch(self, conn) -> None:
        row = await conn.fetchrow(_CHECK, self.shard)
        owner, epoch = (row["owner"], row["epoch"]) if row is not None else (None, None)
        if owner != self.node_id or epoch != self.epoch:
            raise LeaseLostError(self.shard, self.epoch, owner, epoch)

    # ------------------------------------------------------------------ loading
    async def load(self, replay: Optional[Callable[[PgSnapshot], object]] = None):
        """Read the shard's batches (checking first that this node owns it at its epoch:
        LeaseLostError otherwise), check them, restore next_offset / durable_offset.
        -> ``replay(snapshot)`` when given, else the PgSnapshot. The replay is the file log's:
        ``await pglog.load(lambda snap: load_shard(shard, snap))`` (runtime/load.py), or
        load_shard on the returned snapshot in a worker thread. CorruptBatchError when a
        row is not the batch it claims to be."""
        self._check()
        if self._pending or self.next_offset:
            raise RuntimeError("load() is for a fresh log (nothing appended)")
        async with self.pool.acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                row = await conn.fetchrow(
                    "SELECT owner, epoch FROM groupcoord_shards WHERE shard = $1", self.shard)
                if row is None or row["owner"] != self.node_id or row["epoch"] != self.epoch:
                    exc = LeaseLostError(self.shard, self.epoch, row and row["owner"],
                                         row and row["epoch"])
                    self._fence(exc)
                    raise exc
                rows = await conn.fetch(_SELECT, self.shard, 0, 1 << 62)
        data, nxt = _join_rows(self.shard, rows)
        self.next_offset = self.durable_offset = nxt
        self.loaded = True
        snap = PgSnapshot(self.shard, data, nxt, len(rows))
        return replay(snap) if replay is not None else snap

    async def read(self, from_offset: int = 0) -> list:
        """[(offset, key, value)] of every durable record with offset >= from_offset."""
        self._check()
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(_SELECT, self.shard, from_offset, self.durable_offset)
        data, _nxt = _join_rows(self.shard, rows)
        return list(PgSnapshot(self.shard, data, _nxt, len(rows)).read(from_offset))

    # ------------------------------------------------------------------ writing
    def append(self, records: list, timestamp_ms: Optional[int] = None) -> range:
        """Buffer one batch of [(key bytes, value bytes | None)]; -> the offsets assigned.
        Nothing is durable before the next flush_async()."""
        self._check()
        if not records:
            return range(self.next_offset, self.next_offset)
        ts = self._clock() if timestamp_ms is None else timestamp_ms
        base = self.next_offset
        data = rb.encode_batch(records, base, ts, self.leader_epoch)
        self.next_offset = base + len(records)
        self._pending.append(_Batch(base, self.next_offset - 1, data))
        return range(base, self.next_offset)

    @property
    def pending_bytes(self) -> int:
        return sum(len(b.data) for b in self._pending)

    async def flush_async(self) -> int:
        """Write every pending batch in one transaction (epoch check, one INSERT, COMMIT);
        -> durable_offset. Callers that come while a flush runs wait for it and then flush
        what arrived meanwhile (group commit). LeaseLostError: the shard is no longer ours;
        the log is fenced. Any other error: the batches stay pending; call again."""
        self._check()
        async with self._flush_lock:
            self._check()
            if not self._pending:
                return self.durable_offset
            batches = self._pending
            self._pending = []
            try:
                await self._write(batches)
            except LeaseLostError as exc:
                self._pending = batches + self._pending
                self._fence(exc)
                raise
            except BaseException:
                # Cancelled or failed at any point: the transaction may even have committed
                # (a connection lost during COMMIT); the next flush finds out.
                self._pending = batches + self._pending
                self._unsure = True
                self.flush_failures += 1
                raise
            self._unsure = False
            self.flushes += 1
            self.durable_offset = batches[-1].last + 1
            return self.durable_offset

    async def _write(self, batches: list) -> None:
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await self._check_epoch(conn)
                if self._unsure:
                    batches = batches[await self._already_written(conn, batches):]
                    if not batches:
                        return
                await conn.execute(_INSERT, self.shard, self.epoch, [b.base for b in batches],
                                   [b.last for b in batches], [b.data for b in batches])

    async def _already_written(self, conn, batches: list) -> int:
        """How many of batches (a prefix, all or none of each earlier attempt) an earlier
        flush whose outcome is unknown committed. Under the epoch check nobody else writes
        this shard, so what is there at or after the first base offset is ours."""
        have = [r[0] for r in await conn.fetch(
            "SELECT base_offset FROM groupcoord_log WHERE shard = $1 AND base_offset >= $2"
            " ORDER BY base_offset", self.shard, batches[0].base)]
        if have != [b.base for b in batches[:len(have)]]:
            raise rb.CorruptBatchError(
                "postgresql:groupcoord_log[shard=%d]" % self.shard, 0,
                "rows from offset %d are not the batches this node wrote (%s...)"
                % (batches[0].base, have[:5]))
        if have:
            log.info("shard %d: a flush whose outcome was unknown had committed %d batch(es)",
                     self.shard, len(have))
        return len(have)

    # ------------------------------------------------------------------ compaction
    async def compact(self, retention_ms: int, now_ms: Optional[int] = None) -> CompactionStats:
        """Keep the latest record per key among the durable rows below the last one, drop
        tombstones older than now_ms - retention_ms, merge the rest (offsets kept): one
        transaction with the epoch check (see the module docstring: appends never wait for
        it). LeaseLostError (and the log is fenced) when the shard is no longer ours."""
        now = self._clock() if now_ms is None else now_ms
        async with self._compact_lock:
            self._check()
            end = self.durable_offset
            async with self.pool.acquire() as conn:
                rows = await conn.fetch(
                    "SELECT base_offset, last_offset, epoch, batch FROM groupcoord_log"
                    " WHERE shard = $1 AND last_offset < $2 ORDER BY base_offset",
                    self.shard, end)
            if rows and rows[-1][1] + 1 == end:
                rows = rows[:-1]            # the end of the log: it gives next_offset
            if not rows:
                return CompactionStats(0, 0, 0, 0, 0, 0)
            loop = asyncio.get_running_loop()
            plan = await loop.run_in_executor(
                self._executor, plan_compaction, [tuple(r) for r in rows], now - retention_ms,
                self.merge_bytes)
            self._check()
            if not plan.updates and not plan.deletes:
                return plan.stats
            try:
                async with self.pool.acquire() as conn:
                    async with conn.transaction():
                        await self._check_epoch(conn)
                        if plan.updates:
                            u = plan.updates
                            await conn.execute(_UPDATE, self.shard, [x[0] for x in u],
                                               [x[1] for x in u], [x[2] for x in u],
                                               [x[3] for x in u])
                        if plan.deletes:
                            await conn.execute(_DELETE, self.shard, plan.deletes)
            except LeaseLostError as exc:
                self._fence(exc)
                raise
            self._dead_rows += len(plan.updates) + len(plan.deletes)
            if self.vacuum_rows and self._dead_rows >= self.vacuum_rows:
                await self._vacuum()
            return plan.stats

    async def _vacuum(self) -> None:
        # Makes the dead rows' space reusable (the free space map) before the next appends
        # extend the table. Locks nothing appends take (SHARE UPDATE EXCLUSIVE; the table
        # never truncates: pg_schema.py); SKIP_LOCKED: when another node's vacuum runs,
        # that one does the work.
        self._dead_rows = 0
        async with self.pool.acquire() as conn:
            await conn.execute("VACUUM (SKIP_LOCKED) groupcoord_log")
        self.vacuums += 1

    # ------------------------------------------------------------------ lifecycle
    async def close(self, flush: bool = True) -> None:
        """Flush what is pending (unless flush=False or fenced) and refuse further calls."""
        if self.closed:
            return
        try:
            if flush and self._fenced is None and self._pending:
                await self.flush_async()
        finally:
            self.closed = True
            self._pending = []
