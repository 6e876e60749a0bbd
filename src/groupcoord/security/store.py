"""Where the security records (security/records.py: SCRAM credentials, ACL bindings) are kept:
a SecurityStore gives them back in order (``load``), makes new ones durable (``append``) and,
in cluster mode, hands a node the records other nodes appended (``poll``).

File store (``FileSecurityStore(data_dir)``), layout:

    <data_dir>/security/        a storage/log.py Log (RecordBatch v2 segments, fsync always),
                                one batch per append
    <data_dir>/security.lock    flock(2) taken for every operation
    <data_dir>/security.compacting, security.old
                                only while a compaction swaps the log (see below)

Every operation opens the Log under the lock, does its work and closes it: a node and the
`groupcoord users` command may use one data directory at the same time without two writers on
one log. A running node does not see what the command appended until it loads again (its
next start; ``poll`` is [] for this store). Compaction: when the log has reached
``compact_min_bytes`` and more than twice the size of its live records (the latest per key,
not a tombstone, in log order; the rest are overwritten or deleted keys and tombstones), the
live records are written as one batch to a new Log in security.compacting, which is closed
(fsynced), then swapped in:
rename security -> security.old, security.compacting -> security, fsync the data directory,
remove security.old. The first operation after a crash finishes or undoes a swap: without
security/ the complete security.compacting (or else security.old) becomes it; leftovers are
removed. So the log stays within twice its live size or compact_min_bytes (plus one append),
in one segment. Checked at every load (a node's start, each users command) and append.

PostgreSQL store (``PgSecurityStore(pool)``), table groupcoord_security (storage/pg_schema.py,
version 3): one row per append, ``batch`` the RecordBatch v2 bytes of storage/batch.py whose
records are at offsets base_offset..last_offset (the rows in base_offset order, concatenated,
are a log segment). An append is one transaction: LOCK TABLE ... IN EXCLUSIVE MODE (appends
of every node queue on it; readers do not), next offset = the last row's last_offset + 1,
INSERT, COMMIT. Serialised appends make offsets grow in commit order, so a node that has read
everything below offset n never later finds a new row below n: ``poll`` reads the rows from
its next offset on.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import os
import shutil
import time
from typing import List, Optional, Tuple

from groupcoord.cluster.status import redact
from groupcoord.storage import batch as rb
from groupcoord.storage.log import Log
from groupcoord.storage.pg_schema import migrate
from groupcoord.storage.segment import OS_FILE_OPS

__all__ = ["SecurityStore", "FileSecurityStore", "PgSecurityStore", "open_security_store",
           "SECURITY_DIR", "COMPACT_MIN_BYTES", "live_records"]

SECURITY_DIR = "security"
# Below this size the file store is never compacted (a few thousand credentials or ACLs).
COMPACT_MIN_BYTES = 256 << 10
STORE_CALL_TIMEOUT_S = 10.0         # one statement or transaction of the PostgreSQL store
Records = List[Tuple[bytes, Optional[bytes]]]


def _now_ms() -> int:
    return int(time.time() * 1000)


def live_records(records: Records) -> Records:
    """The latest record of every key that is not a tombstone, in the order of those latest
    records: what a compaction keeps (replaying it gives the state replaying all gives)."""
    latest = {}
    for i, (key, _v) in enumerate(records):
        latest[key] = i
    return [records[i] for i in sorted(latest.values()) if records[i][1] is not None]


class SecurityStore(abc.ABC):
    @abc.abstractmethod
    async def load(self) -> Records:
        """Every record the store holds, in order (compacted: the same state on replay)."""

    @abc.abstractmethod
    async def append(self, records: Records) -> None:
        """Store [(key, value or None)] as one batch, durable before this returns."""

    @abc.abstractmethod
    async def poll(self) -> Records:
        """Records appended by others since the last load/poll, in order."""

    @abc.abstractmethod
    async def close(self) -> None:
        ...


class _Closed(RuntimeError):
    def __init__(self):
        super().__init__("the security store is closed")


# ---------------------------------------------------------------------- file store
class FileSecurityStore(SecurityStore):
    def __init__(self, data_dir: str, compact_min_bytes: int = COMPACT_MIN_BYTES):
        self.data_dir = data_dir
        self.directory = os.path.join(data_dir, SECURITY_DIR)
        self.compact_min_bytes = compact_min_bytes
        self.compactions = 0            # done by this object (tests, logs)
        self.closed = False
        # The size below which the last look found that compacting cannot pay yet: no need
        # to read the whole log again before (an append would otherwise do it every time).
        self._recheck_at = 0

    @contextlib.contextmanager
    def _locked(self):
        if self.closed:
            raise _Closed()
        os.makedirs(self.data_dir, exist_ok=True)
        fd = os.open(self.directory + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)      # released by the close
            self._finish_swap()
            yield
        finally:
            os.close(fd)

    def _finish_swap(self) -> None:
        # Compaction renamed security -> security.old only after security.compacting was
        # complete and durable; see the module docstring.
        d, new, old = self.directory, self.directory + ".compacting", self.directory + ".old"
        if not os.path.exists(d) and os.path.exists(old):
            os.rename(new if os.path.exists(new) else old, d)
            OS_FILE_OPS.fsync_dir(self.data_dir)
        for leftover in (new, old):
            if os.path.exists(leftover):
                shutil.rmtree(leftover)

    def _open(self, directory: Optional[str] = None) -> Log:
        return Log(directory or self.directory, fsync="always")

    def _load(self) -> Records:
        if not any(os.path.exists(self.directory + x) for x in ("", ".compacting", ".old")):
            if self.closed:
                raise _Closed()
            return []           # nothing stored yet: create nothing (`users list`)
        with self._locked():
            log = self._open()
            try:
                records = [(k, v) for _o, k, v in log.read(0)]
                live = self._maybe_compact(log, records)
            finally:
                log.close()
            return records if live is None else live

    def _append(self, records: Records) -> None:
        with self._locked():
            log = self._open()
            try:
                log.append(list(records), _now_ms())
                log.flush()
                self._maybe_compact(log, None)
            finally:
                log.close()

    def _maybe_compact(self, log: Log, records: Optional[Records]) -> Optional[Records]:
        """Compact when it pays (module docstring) -> the live records, else None."""
        size = sum(s.size for s in log.segments())
        if size < max(self.compact_min_bytes, self._recheck_at):
            return None
        if records is None:
            records = [(k, v) for _o, k, v in log.read(0)]
        live = live_records(records)
        live_bytes = len(rb.encode_batch(live, 0, 0)) if live else 0    # the compacted log
        if size <= 2 * live_bytes:
            # Dead records cannot outweigh the live ones before the log reaches this size.
            self._recheck_at = 2 * live_bytes
            return None
        log.close()
        self._swap_in(live)
        self.compactions += 1
        self._recheck_at = 0
        return live

    def _swap_in(self, live: Records) -> None:
        new, old = self.directory + ".compacting", self.directory + ".old"
        log = self._open(new)
        try:
            if live:
                log.append(live, _now_ms())
        finally:
            log.close()                 # flush (fdatasync) + checkpoint
        OS_FILE_OPS.fsync_dir(self.data_dir)        # security.compacting is there
        os.rename(self.directory, old)
        os.rename(new, self.directory)
        OS_FILE_OPS.fsync_dir(self.data_dir)
        shutil.rmtree(old)

    async def load(self) -> Records:
        return await asyncio.to_thread(self._load)

    async def append(self, records: Records) -> None:
        if records:
            await asyncio.to_thread(self._append, records)

    async def poll(self) -> Records:
        if self.closed:
            raise _Closed()
        return []           # other writers (the users command) are seen at the next load

    async def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------------- PostgreSQL store
class PgSecurityStore(SecurityStore):
    _LOCK = "LOCK TABLE groupcoord_security IN EXCLUSIVE MODE"
    _LAST = "SELECT last_offset FROM groupcoord_security ORDER BY base_offset DESC LIMIT 1"
    _INSERT = ("INSERT INTO groupcoord_security (base_offset, last_offset, batch)"
               " VALUES ($1, $2, $3)")
    _READ = ("SELECT base_offset, last_offset, batch FROM groupcoord_security"
             " WHERE base_offset >= $1 ORDER BY base_offset")

    def __init__(self, pool, name: str = "the store", close_pool: bool = False,
                 timeout_s: float = STORE_CALL_TIMEOUT_S):
        self.pool = pool                # an asyncpg Pool, its schema migrated
        self.name = name                # for messages: the redacted DSN
        self.close_pool = close_pool    # open_security_store made the pool: close() closes it
        self.timeout_s = timeout_s
        # Every row below it was returned by load/poll or appended by this store with no
        # unseen row before it (see poll).
        self.next_offset = 0
        self.closed = False

    def _check(self) -> None:
        if self.closed:
            raise _Closed()

    async def _read(self, start: int) -> list:
        return await asyncio.wait_for(self.pool.fetch(self._READ, start), self.timeout_s)

    @staticmethod
    def _records(row) -> Records:
        recs, _ = rb.decode(row["batch"], path="groupcoord_security row %d"
                            % row["base_offset"])
        return [(k, v) for _o, k, v in recs]

    async def load(self) -> Records:
        self._check()
        rows = await self._read(0)
        out: Records = []
        for row in rows:
            out.extend(self._records(row))
        self.next_offset = rows[-1]["last_offset"] + 1 if rows else 0
        return out

    async def _append_tx(self, records: Records) -> int:
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(self._LOCK)
                last = await conn.fetchval(self._LAST)
                base = 0 if last is None else last + 1
                batch = rb.encode_batch(list(records), base, _now_ms())
                await conn.execute(self._INSERT, base, base + len(records) - 1, batch)
        return base

    async def append(self, records: Records) -> None:
        self._check()
        if not records:
            return
        base = await asyncio.wait_for(self._append_tx(records), self.timeout_s)
        if base == self.next_offset:
            self.next_offset = base + len(records)      # nothing unseen before it

    async def poll(self) -> Records:
        """The records of the rows from ``next_offset`` on: the other nodes' appends since
        the last load/poll. This store's own appends are left out when no unseen row came
        before them (the caller applied them when it appended); one that another node's row
        preceded comes back after that row, so that applying what poll returns in order
        gives the store's order (applying a record twice is harmless: it sets or deletes
        its key)."""
        self._check()
        rows = await self._read(self.next_offset)
        out: Records = []
        for row in rows:
            out.extend(self._records(row))
        if rows:
            self.next_offset = rows[-1]["last_offset"] + 1
        return out

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.close_pool:
            try:
                await asyncio.wait_for(self.pool.close(), self.timeout_s)
            except (OSError, asyncio.TimeoutError):
                self.pool.terminate()


# ---------------------------------------------------------------------- opening
PG_SCHEMES = ("postgresql://", "postgres://")     # as libpq and asyncpg accept them


async def open_security_store(store: str, connect_timeout_s: float = STORE_CALL_TIMEOUT_S
                              ) -> SecurityStore:
    """The security store of a node's store: "file:DIR" or a plain directory (a FileSecurityStore
    on DIR), or "postgresql://..." (a PgSecurityStore on a pool of its own, the schema
    created or upgraded without shard rows: this works before any node started). The users
    command checks its --store with serve's parser (server/cluster_mode.py resolve_store)
    first; this module stays free of server/ imports (the server imports it). ValueError for
    an empty directory; OSError / asyncpg errors when the store cannot be used."""
    if not store.startswith(PG_SCHEMES):
        directory = store[len("file:"):] if store.startswith("file:") else store
        if not directory:
            raise ValueError("a file store needs a directory: file:DIR")
        return FileSecurityStore(directory)
    import asyncpg      # only a PostgreSQL store needs the driver
    pool = await asyncpg.create_pool(store, min_size=0, max_size=2, timeout=connect_timeout_s)
    try:
        async with pool.acquire() as conn:
            await asyncio.wait_for(migrate(conn, None), connect_timeout_s)
    except BaseException:
        pool.terminate()
        raise
    return PgSecurityStore(pool, redact(store), close_pool=True)
