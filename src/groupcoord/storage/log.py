"""The durable record log of one shard: a directory of segments (segment.py) of RecordBatch
v2 batches (batch.py), with group commit, crash recovery and compaction.

Offsets: append() assigns consecutive offsets from ``next_offset``; flush() returns
``durable_offset``, the offset *after* the last durable record (everything below it is on
disk and fsynced; like Kafka's high watermark, it is exclusive).

Concurrency contract (docs/storage.md):
  * append / flush / read / roll belong to one owner thread (the shard's runtime); so does
    close(), except that the owner may hand it to another thread once it has stopped using
    the log (the runtime closes a failed log in an I/O thread): close() waits for a
    write_flush in progress (a later one returns EBADF without touching the descriptor) and
    for a running compaction, which stops at its next segment (LogClosedError).
  * compact() may run in one worker thread at the same time. It only rewrites *closed*
    segments (never the active one, which is the only one append/flush write), and it takes
    the log's lock only to snapshot the segment list and to swap each rewritten segment in,
    so appends and flushes never wait for compaction I/O -- except a flush that rolls, whose
    checkpoint write may wait for a compaction's (a small file: write, fsync, rename).
  * A read() iterates the segment objects it saw when it started; a segment that compaction
    swaps meanwhile is still read in its old version (its own open descriptor).
  * Compaction rewrites segments oldest first, each with write-new / fsync / rename / fsync
    directory, so a crash at any point leaves a log whose replay gives the same state.

Recovery and corruption: storage/verify.py analyses the directory (read-only), ``_recover``
applies it (truncates a torn tail, or raises CorruptLogError). The checkpoint file
(storage/checkpoint.py) that tells the two apart is written at each roll, each compaction
rewrite and a clean close (``write_checkpoint``).
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from typing import Iterator, NamedTuple, Optional

from groupcoord.storage import batch as rb
from groupcoord.storage import checkpoint as ckpt
from groupcoord.storage.segment import OS_FILE_OPS, FileOps, Segment, write_file_durably
from groupcoord.storage.verify import CLEANED_SUFFIX, analyze

log = logging.getLogger("groupcoord.storage")

FSYNC_POLICIES = ("always", "unsafe-no-fsync")


class CorruptLogError(rb.CorruptBatchError):
    """Corruption that recovery must not repair (storage/verify.py lists the cases): a bad
    batch in fsynced bytes or followed by valid ones, a missing segment file, a segment cut
    at a batch boundary, an unreadable checkpoint. Names the file, the byte position and the
    log offset of the first problem; ``problems`` holds every one found (verify.Problem)."""

    def __init__(self, path, position, reason, offset=None, problems=()):
        super().__init__(path, position, reason)
        self.offset = offset
        self.problems = tuple(problems)
        more = len(self.problems) - 1
        self.args = ("%s: position %d (log offset %s): %s%s; refusing to load this log "
                     "(`groupcoord log verify` lists the problems; restore the files or "
                     "remove the data from the problem on by hand)"
                     % (path, position, offset, reason,
                        " (and %d more problem(s))" % more if more > 0 else ""),)

    def __reduce__(self):
        return (type(self), (self.path, self.position, self.reason, self.offset,
                             self.problems))


class LogFailedError(OSError):
    """A write, fsync or segment roll failed; the log refuses further work until it is
    reopened (recovery decides what of the failed write survived)."""


class LogClosedError(ValueError):
    """The log was closed (before or during this call): a compaction or a write that was
    queued behind the close finds nothing to work on."""

    def __init__(self, what: str = "the log is closed"):
        super().__init__(what)


class CompactionStats(NamedTuple):
    segments_rewritten: int
    records_before: int
    records_after: int
    bytes_before: int
    bytes_after: int
    tombstones_dropped: int


class FlushJob(NamedTuple):
    """One group commit in flight: the bytes, where they go, and the batches they hold."""
    data: bytes
    fd: int
    segment: Segment
    start: int
    info: list          # (base offset, last offset delta, size) per batch
    end_offset: int     # the durable offset once written


class Log:
    def __init__(self, directory: str, fsync: str = "always",
                 segment_bytes: int = 64 << 20, index_interval_bytes: int = 4096,
                 leader_epoch: int = -1, clock=None, ops: FileOps = OS_FILE_OPS):
        # ops: the file-system calls (the OS by default; a simulated disk in tests)
        self.ops = ops
        if fsync not in FSYNC_POLICIES:
            raise ValueError("fsync must be one of %s" % (FSYNC_POLICIES,))
        self.directory = directory
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.leader_epoch = leader_epoch
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()           # guards _segments (swaps, rolls)
        self._compact_lock = threading.Lock()   # one compaction at a time; close waits for it
        self._pending: list = []                # encoded batches not yet written
        self._pending_info: list = []           # (base_offset, last_offset_delta, size)
        self._failed: Optional[BaseException] = None
        self._inflight: Optional[FlushJob] = None
        self._wfd: Optional[int] = None
        # write_flush holds it while it writes: close() waits for a write in progress and
        # a write that starts after close() finds the log closed (never a recycled fd).
        self._write_lock = threading.Lock()
        self._closing = False                   # set first thing in close(): compaction stops
        self.closed = False
        self.truncated_bytes = 0                # recovery: bytes cut from a torn tail
        ops.makedirs(directory)
        self._segments: list = self._recover()
        active = self._segments[-1]
        self.next_offset = active.next_offset
        self.durable_offset = active.next_offset
        self._open_active()

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> list:
        # The analysis (storage/verify.py) only reads; what it finds is applied here.
        d = self.directory
        ops = self.ops
        found = analyze(d, ops, self.index_interval_bytes)
        for path in found.cleaned:                      # an unfinished compaction
            ops.unlink(path)
            log.info("removed unfinished compaction output %s", path)
        if found.problems:
            p = found.problems[0]
            raise CorruptLogError(p.path, p.position, p.reason, p.offset, found.problems)
        # For the checkpoint writer (write_checkpoint): compaction's alternative sizes, and
        # the first segment whose bytes may not be on disk yet (after a kill -9 the page
        # cache still holds the last segment's unsynced tail; unsafe-no-fsync never syncs).
        self._ckpt_lock = threading.Lock()
        self._ckpt_sizes: dict = {}
        if not found.segments:
            seg = Segment(d, 0, self.index_interval_bytes, ops)
            ops.close(ops.open(seg.path, os.O_WRONLY | os.O_CREAT, 0o666))
            ops.fsync_dir(d)
            self._sync_from = 0
            return [seg]
        segments = found.segments
        self._sync_from = segments[-1].base_offset if self.fsync == "always" else 0
        t = found.torn
        if t is not None:
            log.warning("log recovery: truncating %s at position %d (%d bytes dropped: %s)",
                        t.path, t.position, t.dropped, t.reason)
            self.truncated_bytes += t.dropped
            fd = ops.open(t.path, os.O_RDWR)
            try:
                ops.ftruncate(fd, t.position)
                ops.fsync(fd)
            finally:
                ops.close(fd)
            for path in t.remove:
                log.warning("log recovery: removing %s (after the truncated tail)", path)
                self.truncated_bytes += ops.getsize(path)
                ops.unlink(path)
            ops.fsync_dir(d)
        return segments

    # ------------------------------------------------------------------ checkpoint
    def write_checkpoint(self) -> bool:
        """Record in ``log-checkpoint`` (storage/checkpoint.py) the segment files, their
        sizes and the durable end, after syncing any bytes it vouches for that may not be on
        disk. -> False when there is nothing to vouch for (no record yet). OSError when it
        could not be written (the previous checkpoint stays). Owner or compaction thread."""
        with self._ckpt_lock:
            with self._lock:
                segs = list(self._segments)
            # next_offset before size: add_batch sets size first, so the size read covers it.
            end = segs[-1].next_offset
            entries = []
            for s in segs:
                sizes = (s.size,)
                other = self._ckpt_sizes.get(s.base_offset)
                if other is not None and other != s.size:
                    sizes += (other,)
                entries.append((s.base_offset, sizes))
            if end == 0:
                return False
            ops = self.ops
            for s, (_b, sizes) in zip(segs, entries):
                if s.base_offset >= self._sync_from and sizes[0]:
                    fd = ops.open(s.path, os.O_RDONLY)
                    try:
                        ops.fsync(fd)
                    finally:
                        ops.close(fd)
            ckpt.write_checkpoint(self.directory, ckpt.Checkpoint(end, tuple(entries)),
                                  ops)
            if self.fsync == "always":
                self._sync_from = 1 << 63        # every later byte is fsynced by its flush
            else:
                self._sync_from = segs[-1].base_offset
            return True

    def _checkpoint_quietly(self, when: str) -> None:
        # A failed checkpoint write leaves the previous one, which is still true (it says
        # less): recovery then checks less. Not a reason to fail the log.
        try:
            self.write_checkpoint()
        except OSError as exc:
            log.warning("log %s: could not write its checkpoint at %s (%s); the previous one "
                        "stays", self.directory, when, exc)

    def _open_active(self) -> None:
        seg = self._segments[-1]
        ops = self.ops
        self._wfd = ops.open(seg.path, os.O_WRONLY)
        ops.lseek(self._wfd, seg.size, os.SEEK_SET)
        if ops.fsize(self._wfd) != seg.size:
            ops.ftruncate(self._wfd, seg.size)

    # ------------------------------------------------------------------ writing
    def _check(self) -> None:
        if self._failed is not None:
            raise LogFailedError("the log failed earlier (%s); reopen it" % (self._failed,))
        if self.closed:
            raise LogClosedError()

    def append(self, records: list, timestamp_ms: Optional[int] = None) -> range:
        """Buffer one batch of [(key bytes, value bytes | None)]; -> the offsets assigned.
        Nothing is durable before the next flush()."""
        self._check()
        if not records:
            return range(self.next_offset, self.next_offset)
        ts = self._clock() if timestamp_ms is None else timestamp_ms
        base = self.next_offset
        b = rb.encode_batch(records, base, ts, self.leader_epoch)
        self._pending.append(b)
        self._pending_info.append((base, len(records) - 1, len(b)))
        self.next_offset = base + len(records)
        return range(base, self.next_offset)

    @property
    def pending_bytes(self) -> int:
        return sum(i[2] for i in self._pending_info)

    def flush(self) -> int:
        """Write every buffered batch with one write and (fsync="always") one fdatasync;
        -> durable_offset. On an I/O error the log is failed (LogFailedError afterwards),
        the buffered batches are dropped and the file is cut back where it was."""
        job = self.begin_flush()
        if job is None:
            return self.durable_offset
        return self.end_flush(job, self.write_flush(job))

    # A flush in three steps, so that the runtime can run the write + fdatasync in a worker
    # thread while its event loop keeps handling requests (and buffering the next batches):
    #   job = log.begin_flush()          owner thread: takes the buffered batches, rolls
    #   err = log.write_flush(job)       any thread: write + fdatasync; -> None or the OSError
    #   log.end_flush(job, err)          owner thread: index the batches / fail the log
    # Appends may continue between begin and end; a second begin_flush before end_flush of
    # the first is an error (one write in flight at a time keeps the file append-ordered).
    def begin_flush(self) -> Optional["FlushJob"]:
        self._check()
        if self._inflight is not None:
            raise RuntimeError("a flush is already in flight")
        if not self._pending:
            return None
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        active = self._segments[-1]
        if active.size > 0 and active.size + len(data) > self.segment_bytes:
            try:
                self._roll(self._pending_info[0][0])
            except OSError as exc:
                # EMFILE/ENFILE/ENOSPC creating the file, EIO on the directory fsync: fail
                # the log like a failed write (the runtime answers and reloads); recovery
                # takes a half-made next segment as the (empty) active one.
                self._fail(exc)
                raise LogFailedError(exc.errno, "log segment roll failed: %s" % exc) from exc
            active = self._segments[-1]
        job = FlushJob(data, self._wfd, active, active.size, list(self._pending_info),
                       self._pending_info[-1][0] + self._pending_info[-1][1] + 1)
        self._pending = []
        self._pending_info = []
        self._inflight = job
        return job

    def write_flush(self, job: "FlushJob") -> Optional[OSError]:
        with self._write_lock:
            if self.closed:                 # closed while this job waited for its thread
                return OSError(errno.EBADF, "the log was closed before this write")
            try:
                view = memoryview(job.data)
                done = 0
                while done < len(job.data):
                    done += self.ops.write(job.fd, view[done:])
                if self.fsync == "always":
                    self.ops.fdatasync(job.fd)
            except OSError as exc:
                return exc
            return None

    def end_flush(self, job: "FlushJob", error: Optional[OSError]) -> int:
        self._inflight = None
        if error is not None:
            # After a failed write or fsync the page cache cannot be trusted: fail the log;
            # whatever was appended after this job is dropped with it.
            self._fail(error)
            if not self.closed:
                try:
                    self.ops.ftruncate(job.fd, job.start)
                except OSError:
                    pass
            raise LogFailedError(error.errno, "log write failed: %s" % error) from error
        pos = job.start
        for base, lod, size in job.info:
            job.segment.add_batch(pos, base, lod, size)
            pos += size
        self.durable_offset = job.end_offset
        return self.durable_offset

    def roll(self) -> None:
        """Close the active segment and start a new one (no-op when it is empty)."""
        self._check()
        self.flush()
        if self._segments[-1].size > 0:
            self._roll(self.durable_offset)

    def _fail(self, error: BaseException) -> None:
        """Refuse further work until reopened; drop what was buffered (not durable)."""
        self._failed = error
        self._pending.clear()
        self._pending_info.clear()
        self.next_offset = self.durable_offset

    def _roll(self, base: int) -> None:
        # The old active segment is fully written and fsynced by the flushes that filled it.
        # On an error nothing changes here (the caller fails the log). A file created
        # before the error is removed again; if it survives (the unlink failed, or a crash
        # kept the entry) it is empty and its base is the durable end of the log: reopening
        # takes it as the active segment, so no later roll meets it (O_EXCL).
        ops = self.ops
        seg = Segment(self.directory, base, self.index_interval_bytes, ops)
        fd = ops.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            ops.fsync_dir(self.directory)       # the new file's name is durable
        except BaseException:
            for undo in (lambda: ops.close(fd), lambda: ops.unlink(seg.path)):
                try:
                    undo()
                except OSError:
                    pass
            raise
        old, self._wfd = self._wfd, fd
        with self._lock:
            self._segments.append(seg)
        try:
            ops.close(old)
        except OSError as exc:
            # The descriptor is released anyway (Linux); its data was fsynced by the flushes
            # that filled the segment, so nothing is lost.
            log.warning("closing the rolled segment of %s: %s", self.directory, exc)
        # Before any byte goes to the new segment: the checkpoint lists it, and the closed
        # one with its final size (recovery: storage/verify.py).
        self._checkpoint_quietly("a roll")

    # ------------------------------------------------------------------ reading
    def segments(self) -> list:
        with self._lock:
            return list(self._segments)

    def read(self, from_offset: int = 0) -> Iterator[tuple]:
        """(offset, key, value) of every durable record with offset >= from_offset, as of
        the call (later flushes are not seen)."""
        with self._lock:
            segs = [(s, s.size) for s in self._segments]
        for i, (seg, size) in enumerate(segs):
            if i + 1 < len(segs) and segs[i + 1][0].base_offset <= from_offset:
                continue
            yield from seg.read(from_offset, size)

    # ------------------------------------------------------------------ compaction
    def compact(self, retention_ms: int, now_ms: Optional[int] = None) -> CompactionStats:
        """Rewrite the closed segments keeping, per key, only the record with the highest
        offset among them, and dropping tombstones whose batch maxTimestamp is older than
        now_ms - retention_ms. Offsets are kept. Safe to run in a worker thread while the
        owner appends and flushes (see the module docstring). LogClosedError when the log is
        closed before it starts, or while it runs (it stops between two segments: each
        rewritten segment is complete, so what it did is kept)."""
        now = self._clock() if now_ms is None else now_ms
        horizon = now - retention_ms
        with self._compact_lock:
            if self.closed or self._closing:
                raise LogClosedError()
            with self._lock:
                closed = list(self._segments[:-1])
            latest: dict = {}
            for seg in closed:
                for _o, key, _v in seg.read(0):
                    latest[key] = _o
            n_seg = rec_before = rec_after = b_before = b_after = dropped = 0
            for seg in closed:                    # oldest first: see the module docstring
                if self._closing:                 # close() waits for us: stop early
                    raise LogClosedError("the log was closed during compaction")
                batches = rb.decode_batches(seg.read_all(), 0, -1, seg.path)
                out = []
                changed = False
                for base, bts, mts, lod, epoch, recs in batches:
                    keep = []
                    for rec in recs:
                        od, _td, key, value = rec
                        if key is not None and latest.get(key) != base + od:
                            continue
                        if value is None and mts < horizon:
                            dropped += 1
                            continue
                        keep.append(rec)
                    rec_before += len(recs)
                    rec_after += len(keep)
                    if len(keep) != len(recs):
                        changed = True
                    if keep:
                        out.append(rb.encode_batch_explicit(keep, base, bts, mts, lod, epoch))
                b_before += seg.size
                if not changed:
                    b_after += seg.size
                    continue
                data = b"".join(out)
                b_after += len(data)
                self._replace_segment(seg, data)
                n_seg += 1
        return CompactionStats(n_seg, rec_before, rec_after, b_before, b_after, dropped)

    def _replace_segment(self, seg: Segment, data: bytes) -> None:
        ops = self.ops
        tmp = seg.path + CLEANED_SUFFIX
        write_file_durably(ops, tmp, data)
        new = Segment(self.directory, seg.base_offset, self.index_interval_bytes, ops)
        new.add_scanned(rb.scan(data)[0])
        new.next_offset = max(new.next_offset, seg.next_offset)
        # The checkpoint must accept the old size and the new one until the rename is
        # durable (a crash may keep either); a failure here stops the compaction.
        self._ckpt_sizes[seg.base_offset] = len(data)
        self.write_checkpoint()
        ops.replace(tmp, seg.path)
        ops.fsync_dir(self.directory)
        # Swap and forget the old size in one step for a checkpoint writer (which holds
        # _ckpt_lock from its snapshot to its write): it lists the old object with both sizes
        # or the new one alone.
        with self._ckpt_lock:
            with self._lock:
                i = next(i for i, s in enumerate(self._segments) if s is seg)
                self._segments[i] = new
            self._ckpt_sizes.pop(seg.base_offset, None)

    # ------------------------------------------------------------------ lifecycle
    def close(self, flush: bool = True) -> None:
        """Flush (unless flush=False, failed, or a flush is in flight: its end_flush will
        not come), wait for a write in progress and a running compaction (which stops at
        its next segment), close every descriptor. Any thread. A later write_flush returns
        an error, a later compact() raises LogClosedError."""
        if self.closed:
            return
        self._closing = True
        try:
            if flush and self._failed is None and self._inflight is None:
                self.flush()
                self._checkpoint_quietly("close")   # a clean close: the whole log is durable
        finally:
            with self._compact_lock, self._write_lock:
                self.closed = True
                errors = []
                if self._wfd is not None:
                    fd, self._wfd = self._wfd, None
                    try:
                        self.ops.close(fd)
                    except OSError as exc:
                        errors.append(exc)
                for s in self._segments:
                    s.close()               # read descriptors: their close errors are moot
        if errors:
            # The descriptor was released anyway (Linux); say what failed.
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(flush=exc[0] is None)
