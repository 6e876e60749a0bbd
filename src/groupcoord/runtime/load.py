"""Loading a shard: replay its whole log into a fresh Shard, fast.

    stats = load_shard(shard, log)      # then shard.rearm(now)

The result is the state of the reference loop

    for _off, key, value in log.read(): shard.replay(decode_record(key, value))

reached with less work (docs/benchmarks-storage.md has the figures):

1. Last record per key (``dedup=True``, the default). A first pass over the segments
   (native/recordload.pyx: ``mark_last``) finds the last record of every key; only those,
   tombstones included, and every null-key record are replayed, in log order. Every
   replayer sets its key's state from the record alone (later records override, a
   tombstone deletes), so this is the full log's state -- with one exception, which is why
   a key whose last record is a tombstone also keeps its last value before it: replaying
   an offset commit creates its group when missing, and the offset's tombstone does not
   remove the group again. (Compaction drops that value, so a compacted log can lose such a
   group: docs/benchmarks-storage.md, tests/test_runtime_load.py.) The records skipped are
   validated (CRC, record structure) but not decoded. Checked against the reference loop
   on the traffic of every group type by tests/test_runtime_load.py.
2. Native decoding. The second pass (``replay_segment``) decodes each replayed record with
   the generated codecs' C decoders straight from the segment bytes and hands a Record to
   ``shard.replay`` -- the only mutator, as in the reference loop. A record the fast path
   does not take exactly as ``decode_record`` does goes through ``decode_record`` itself,
   so errors are the reference errors.

Consistency: both passes read the same segment versions (each Segment keeps its own file
descriptor, opened here before the first pass) up to the sizes seen at the start.
Difference from the reference loop: with dedup, a superseded record that would not decode
(a writer bug, not corruption: its batch passed its CRC) is skipped instead of failing the
load; ``dedup=False`` replays every record.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional

from groupcoord._native.recordload import KeyIndex, Plan, mark_last, replay_segment
from groupcoord.groups.records import Record, decode_record, decode_table
from groupcoord.storage.batch import (LENGTH_OVERHEAD, CorruptBatchError,
                                     TruncatedBatchError)

__all__ = ["LoadStats", "load_shard"]

_PLAN: Optional[Plan] = None
CHUNK = 1 << 20                 # bytes read per call; a larger batch grows the buffer


class LoadStats(NamedTuple):
    records_read: int        # records in the log (every segment, up to its durable size)
    records_replayed: int    # records decoded and replayed (the last of each key)
    batches: int
    bytes: int
    segments: int
    seconds: float

    @property
    def read_rate(self) -> float:
        """Log records per second of load time (the figure Kafka quotes)."""
        return self.records_read / self.seconds if self.seconds > 0 else 0.0

    @property
    def replay_rate(self) -> float:
        """Decoded and replayed records per second of load time."""
        return self.records_replayed / self.seconds if self.seconds > 0 else 0.0


def _plan() -> Plan:
    global _PLAN
    if _PLAN is None:
        _PLAN = Plan(decode_table(), Record)
    return _PLAN


def _snapshot(log) -> list:
    # (segment, size) as of now; opening each descriptor pins the file version both passes
    # read even if compaction renames a new version over the path meanwhile.
    segs = [(s, s.size) for s in log.segments()]
    for s, size in segs:
        if size:
            s.fd()
    return segs


class _Reader:
    """Reads segments in chunks into one reused buffer: a fresh buffer per segment would
    cost a page fault per 4 KiB, more than walking the records in it."""

    def __init__(self, chunk: Optional[int] = None):
        self.buf = bytearray(chunk or CHUNK)

    def walk(self, seg, size: int, fn) -> None:
        """fn(buf, end, file position of buf[0], partial) -> bytes consumed (whole
        batches), for each chunk of seg[0:size]; a batch larger than the buffer grows it."""
        fd = seg.fd()
        pos = 0
        while pos < size:
            n = min(len(self.buf), size - pos)
            if seg.ops.preadv(fd, [memoryview(self.buf)[:n]], pos) != n:
                raise TruncatedBatchError(seg.path, pos, "file shorter than its batches")
            partial = pos + n < size
            used = fn(self.buf, n, pos, partial)
            if used == 0 and partial:           # one batch larger than the buffer
                need = LENGTH_OVERHEAD + int.from_bytes(self.buf[8:12], "big", signed=True)
                if n < LENGTH_OVERHEAD or need <= n or need > size - pos:
                    fn(self.buf, n, pos, False)   # raises the batch's error
                    raise CorruptBatchError(seg.path, pos, "batchLength out of range")
                self.buf = bytearray(need)
                continue
            pos += used


def load_shard(shard, log, *, progress: Optional[Callable[[int, int], None]] = None,
               dedup: bool = True) -> LoadStats:
    """Replay ``log`` into the fresh ``shard``; -> LoadStats. ``progress(bytes_done,
    bytes_total)`` is called after each segment is replayed. A corrupt batch raises
    CorruptBatchError (as Log.read does); a record that does not decode raises what
    decode_record raises."""
    t0 = time.perf_counter()
    plan = _plan()
    replay = shard.replay

    def slow(key, value):
        replay(decode_record(key, value))

    segs = _snapshot(log)
    total = sum(size for _s, size in segs)
    reader = _Reader()
    count = [0, 0, 0]                   # records, replayed, batches
    keep = None
    if dedup:
        keep = bytearray()
        last = KeyIndex()

        def mark(buf, end, base, partial, path):
            got, _b, used = mark_last(buf, end, last, keep, count[0], path, base, partial)
            count[0] += got
            return used

        for seg, size in segs:
            reader.walk(seg, size, lambda b, e, p, pa: mark(b, e, p, pa, seg.path))
        del keep[count[0]:]
        del last                        # only the flags are needed from here on
        count[0] = 0

    def replay_chunk(buf, end, base, partial, path):
        got, rep, b, used = replay_segment(buf, end, keep, count[0], plan, replay, slow, path,
                                           base, partial)
        count[0] += got
        count[1] += rep
        count[2] += b
        return used

    done = 0
    for seg, size in segs:
        reader.walk(seg, size, lambda b, e, p, pa: replay_chunk(b, e, p, pa, seg.path))
        done += size
        if progress is not None:
            progress(done, total)
    return LoadStats(count[0], count[1], count[2], total, len(segs),
                     time.perf_counter() - t0)
