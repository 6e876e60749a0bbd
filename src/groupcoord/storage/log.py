"""The durable record log of one shard: a directory of segments (segment.py) of RecordBatch
v2 batches (batch.py), with group commit, crash recovery and compaction.

Offsets: append() assigns consecutive offsets from ``next_offset``; flush() returns
``durable_offset``, the offset *after* the last durable record (everything below it is on
disk and fsynced; like Kafka's high watermark, it is exclusive).

Concurrency contract (docs/storage.md):
  * append / flush / read / roll / close belong to one owner thread (the shard's runtime).
  * compact() may run in one worker thread at the same time. It only rewrites *closed*
    segments (never the active one, which is the only one append/flush write), and it takes
    the log's lock only to snapshot the segment list and to swap each rewritten segment in,
    so appends and flushes never wait for compaction I/O.
  * A read() iterates the segment objects it saw when it started; a segment that compaction
    swaps meanwhile is still read in its old version (its own open descriptor).
  * Compaction rewrites segments oldest first, each with write-new / fsync / rename / fsync
    directory, so a crash at any point leaves a log whose replay gives the same state.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Iterator, NamedTuple, Optional

from groupcoord.storage import batch as rb
from groupcoord.storage.segment import (OS_FILE_OPS, FileOps, Segment, parse_segment_name,
                                        segment_name)

log = logging.getLogger("groupcoord.storage")

FSYNC_POLICIES = ("always", "unsafe-no-fsync")
CLEANED_SUFFIX = ".cleaned"


class CorruptLogError(rb.CorruptBatchError):
    """A corrupt batch followed by valid ones: corruption in the middle of the log, which
    recovery must not truncate away. Names the file, the byte position and the offset."""

    def __init__(self, path, position, reason, offset=None):
        super().__init__(path, position, reason)
        self.offset = offset
        self.args = ("%s: corrupt record batch at position %d (log offset %s) followed by "
                     "valid batches: %s; refusing to start (restore the segment or remove the "
                     "data after it by hand)" % (path, position, offset, reason),)

    def __reduce__(self):
        return (type(self), (self.path, self.position, self.reason, self.offset))


class LogFailedError(OSError):
    """A write or fsync failed; the log refuses further work until it is reopened
    (recovery decides what of the failed write survived)."""


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
        d = self.directory
        ops = self.ops
        for name in ops.listdir(d):
            if name.endswith(CLEANED_SUFFIX):          # an unfinished compaction
                ops.unlink(os.path.join(d, name))
                log.info("removed unfinished compaction output %s", os.path.join(d, name))
        bases = sorted(b for b in (parse_segment_name(n) for n in ops.listdir(d))
                       if b is not None)
        if not bases:
            seg = Segment(d, 0, self.index_interval_bytes, ops)
            ops.close(ops.open(seg.path, os.O_WRONLY | os.O_CREAT, 0o666))
            ops.fsync_dir(d)
            return [seg]
        segments = []
        expected = 0
        for i, base in enumerate(bases):
            seg = Segment(d, base, self.index_interval_bytes, ops)
            seg.next_offset = max(base, expected)
            data = ops.read_file(seg.path)
            batches, stop, reason, truncated = rb.scan(data)
            # Offsets must increase across batches and segments.
            # (baseOffset is outside the CRC: a flipped one shows up as offsets going back,
            # at this batch or the next. The batch there passed its CRC, so this is not a torn
            # write: it is reported as corruption in the middle, never truncated away.)
            floor = max(base, expected)
            backwards = False
            for j, (pos, b, lod, _c, _m, _s) in enumerate(batches):
                if b < floor:
                    # Either this baseOffset or the previous one is wrong: report from the
                    # previous batch.
                    reason = ("base offset %d below %d (a baseOffset here or in the previous "
                              "batch is corrupt)" % (b, floor))
                    k = max(j - 1, 0)
                    stop, truncated, backwards = batches[k][0], False, True
                    del batches[k:]
                    break
                floor = b + lod + 1
            seg.add_scanned(batches)
            segments.append(seg)
            expected = seg.next_offset
            if reason is None:
                continue
            # A bad batch at `stop`: a torn/corrupt tail unless a valid batch follows it.
            min_off = 0 if backwards else expected
            later = stop if backwards else rb.find_valid_batch(data, stop + 1, -1, min_off)
            if later < 0:
                for nb in bases[i + 1:]:
                    p = os.path.join(d, segment_name(nb))
                    if rb.find_valid_batch(ops.read_file(p), 0, -1, min_off) >= 0:
                        later = nb
                        break
                else:
                    later = -1
            if later >= 0:
                raise CorruptLogError(seg.path, stop, reason, expected)
            log.warning("log recovery: truncating %s at position %d (%d bytes dropped: %s)",
                        seg.path, stop, len(data) - stop, reason)
            self.truncated_bytes += len(data) - stop
            fd = ops.open(seg.path, os.O_RDWR)
            try:
                ops.ftruncate(fd, stop)
                ops.fsync(fd)
            finally:
                ops.close(fd)
            for nb in bases[i + 1:]:
                p = os.path.join(d, segment_name(nb))
                log.warning("log recovery: removing %s (after the truncated tail)", p)
                self.truncated_bytes += ops.getsize(p)
                ops.unlink(p)
            ops.fsync_dir(d)
            break
        return segments

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
            raise ValueError("the log is closed")

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
            self._roll(self._pending_info[0][0])
            active = self._segments[-1]
        job = FlushJob(data, self._wfd, active, active.size, list(self._pending_info),
                       self._pending_info[-1][0] + self._pending_info[-1][1] + 1)
        self._pending = []
        self._pending_info = []
        self._inflight = job
        return job

    def write_flush(self, job: "FlushJob") -> Optional[OSError]:
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
            self._failed = error
            self._pending.clear()
            self._pending_info.clear()
            self.next_offset = self.durable_offset
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

    def _roll(self, base: int) -> None:
        # The old active segment is fully written and fsynced by the flushes that filled it.
        seg = Segment(self.directory, base, self.index_interval_bytes, self.ops)
        fd = self.ops.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.ops.fsync_dir(self.directory)      # the new file's name is durable
        self.ops.close(self._wfd)
        self._wfd = fd
        with self._lock:
            self._segments.append(seg)

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
        owner appends and flushes (see the module docstring)."""
        now = self._clock() if now_ms is None else now_ms
        horizon = now - retention_ms
        with self._compact_lock:
            if self.closed:
                raise ValueError("the log is closed")
            with self._lock:
                closed = list(self._segments[:-1])
            latest: dict = {}
            for seg in closed:
                for _o, key, _v in seg.read(0):
                    latest[key] = _o
            n_seg = rec_before = rec_after = b_before = b_after = dropped = 0
            for seg in closed:                    # oldest first: see the module docstring
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
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            done = 0
            while done < len(data):
                done += ops.write(fd, view[done:])
            ops.fsync(fd)
        finally:
            ops.close(fd)
        new = Segment(self.directory, seg.base_offset, self.index_interval_bytes, ops)
        new.add_scanned(rb.scan(data)[0])
        new.next_offset = max(new.next_offset, seg.next_offset)
        ops.replace(tmp, seg.path)
        ops.fsync_dir(self.directory)
        with self._lock:
            i = next(i for i, s in enumerate(self._segments) if s is seg)
            self._segments[i] = new

    # ------------------------------------------------------------------ lifecycle
    def close(self, flush: bool = True) -> None:
        """Flush (unless flush=False or failed), wait for a running compaction, close."""
        if self.closed:
            return
        if flush and self._failed is None:
            self.flush()
        with self._compact_lock:
            self.closed = True
            if self._wfd is not None:
                self.ops.close(self._wfd)
                self._wfd = None
            for s in self._segments:
                s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(flush=exc[0] is None)
