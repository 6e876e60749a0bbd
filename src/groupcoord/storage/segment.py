"""One segment file of the log: ``<20-digit base offset>.log``, a concatenation of RecordBatch
v2 batches, with an in-memory sparse index (batch base offset -> file position, one entry
every ``index_interval`` bytes) built when the segment is scanned at open and extended on
every flush.

A Segment object describes one version of the file: it keeps its own read-only descriptor,
so a reader that holds it keeps reading that version even after compaction renamed a new
version over the path (the descriptor is closed when the object is collected).
"""
from __future__ import annotations

import bisect
import os
import weakref
from typing import Iterator, Optional

from groupcoord.storage import batch as rb

SUFFIX = ".log"
READ_CHUNK = 1 << 20


class FileOps:
    """The file-system calls of the log (segment.py, log.py, runtime/load.py), as one object so
    that a test can run the real storage code over a simulated disk (tests/simulation/disk.py).
    This default is the operating system. Each method looks its ``os`` function up at call
    time, so tests that monkeypatch ``os.write`` / ``os.fdatasync`` keep working."""

    def open(self, path, flags, mode=0o777):
        return os.open(path, flags, mode)

    def close(self, fd):
        os.close(fd)

    def write(self, fd, data):
        return os.write(fd, data)

    def pread(self, fd, n, offset):
        return os.pread(fd, n, offset)

    def preadv(self, fd, buffers, offset):
        return os.preadv(fd, buffers, offset)

    def lseek(self, fd, pos, how):
        return os.lseek(fd, pos, how)

    def fsize(self, fd):
        return os.fstat(fd).st_size

    def ftruncate(self, fd, length):
        os.ftruncate(fd, length)

    def fsync(self, fd):
        os.fsync(fd)

    def fdatasync(self, fd):
        os.fdatasync(fd)

    def listdir(self, path):
        return os.listdir(path)

    def unlink(self, path):
        os.unlink(path)

    def replace(self, src, dst):
        os.replace(src, dst)

    def makedirs(self, path):
        os.makedirs(path, exist_ok=True)

    def getsize(self, path):
        return os.path.getsize(path)

    def read_file(self, path):
        with open(path, "rb") as f:
            return f.read()

    def fsync_dir(self, path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_FILE_OPS = FileOps()


def write_file_durably(ops: FileOps, path: str, data: bytes) -> None:
    """Create or truncate ``path``, write all of ``data`` and fsync it (OSError on failure;
    the caller renames it into place and fsyncs the directory)."""
    fd = ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        done = 0
        while done < len(data):
            done += ops.write(fd, view[done:])
        ops.fsync(fd)
    finally:
        ops.close(fd)


def _close_quietly(ops: FileOps, fd: int) -> None:
    # A read descriptor's close error says nothing about data (Linux releases the
    # descriptor anyway), and this often runs from the garbage collector, where an exception
    # would only be printed.
    try:
        ops.close(fd)
    except OSError:
        pass


def segment_name(base_offset: int) -> str:
    return "%020d%s" % (base_offset, SUFFIX)


def parse_segment_name(name: str) -> Optional[int]:
    if len(name) == 20 + len(SUFFIX) and name.endswith(SUFFIX) and name[:20].isdigit():
        return int(name[:20])
    return None


class Segment:
    def __init__(self, directory: str, base_offset: int, index_interval: int = 4096,
                 ops: FileOps = OS_FILE_OPS):
        self.ops = ops
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_name(base_offset))
        self.index_interval = index_interval
        self.size = 0                      # bytes of valid batches
        self.next_offset = base_offset     # offset after the last record of the last batch
        self.batches = 0
        self._idx_offsets: list = []
        self._idx_positions: list = []
        self._last_indexed = -(1 << 62)
        self._fd: Optional[int] = None
        self._finalizer = None

    # ------------------------------------------------------------------ index
    def add_batch(self, position: int, base_offset: int, last_offset_delta: int,
                  size: int) -> None:
        if position - self._last_indexed >= self.index_interval:
            self._idx_offsets.append(base_offset)
            self._idx_positions.append(position)
            self._last_indexed = position
        self.size = position + size
        self.next_offset = max(self.next_offset, base_offset + last_offset_delta + 1)
        self.batches += 1

    def add_scanned(self, batches: list) -> None:
        """Add the (position, base, last_delta, count, max_ts, size) rows of recordbatch.scan."""
        for pos, base, lod, _count, _mts, size in batches:
            self.add_batch(pos, base, lod, size)

    def position_for(self, offset: int) -> int:
        """A batch boundary at or before the batch that holds ``offset``."""
        i = bisect.bisect_right(self._idx_offsets, offset) - 1
        return self._idx_positions[i] if i >= 0 else 0

    @property
    def index_entries(self) -> int:
        return len(self._idx_offsets)

    # ------------------------------------------------------------------ reading
    def fd(self) -> int:
        if self._fd is None:
            self._fd = self.ops.open(self.path, os.O_RDONLY)
            self._finalizer = weakref.finalize(self, _close_quietly, self.ops, self._fd)
        return self._fd

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
            self._fd = None

    def read_all(self, end: Optional[int] = None) -> bytes:
        end = self.size if end is None else end
        data = self.ops.pread(self.fd(), end, 0)
        if len(data) != end:
            raise rb.TruncatedBatchError(self.path, len(data), "file shorter than its batches")
        return data

    def read(self, from_offset: int, end: Optional[int] = None,
             chunk: int = READ_CHUNK) -> Iterator[tuple]:
        """(offset, key, value) of the records with offset >= from_offset in [0, end)."""
        end = self.size if end is None else end
        fd = self.fd()
        pos = self.position_for(from_offset)
        while pos < end:
            buf = self.ops.pread(fd, min(chunk, end - pos), pos)
            recs, used = rb.decode(buf, 0, len(buf), self.path, pos, True, from_offset)
            if used == 0:                   # one batch larger than the chunk
                if len(buf) < rb.LENGTH_OVERHEAD:
                    raise rb.TruncatedBatchError(self.path, pos, "file ends inside a batch")
                need = rb.LENGTH_OVERHEAD + int.from_bytes(buf[8:12], "big", signed=True)
                if need <= len(buf) or pos + need > end:
                    raise rb.CorruptBatchError(self.path, pos, "batchLength out of range")
                buf = self.ops.pread(fd, need, pos)
                recs, used = rb.decode(buf, 0, len(buf), self.path, pos, False, from_offset)
            yield from recs
            pos += used

    def __repr__(self):
        return "Segment(%s, size=%d, next_offset=%d)" % (self.path, self.size, self.next_offset)
