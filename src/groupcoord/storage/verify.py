"""What recovery finds in a log directory, without changing it: the analysis that Log recovery
applies (storage/log.py ``Log._recover``) and that ``groupcoord log verify`` prints.

    a = analyze(directory)          # reads only
    a.problems    # corruption: [Problem(path, position, offset, reason)]; Log refuses to open
    a.torn        # a torn tail recovery would truncate (not corruption), or None
    a.segments    # the Segment objects, scanned and indexed (what Log opens with)

What counts as corruption (docs/storage.md, "Recovery"):
  * a segment file that the checkpoint (storage/checkpoint.py) lists is missing, or the first
    segment file does not start at offset 0 (segment files are never deleted: compaction
    rewrites them in place, keeping offsets);
  * a closed segment whose size is not the one the checkpoint recorded, or an active segment
    shorter than its recorded durable size (a cut at a batch boundary), or a log that ends
    below the checkpoint's durable offset;
  * a bad batch (CRC, lengths, offsets going backwards) in bytes the checkpoint says were
    fsynced, or one followed by a valid batch;
  * a checkpoint that exists but does not parse.
A bad batch after the durable point with nothing valid after it is a torn tail.
"""
from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple, Optional

from groupcoord.storage import batch as rb
from groupcoord.storage.checkpoint import (CHECKPOINT_NAME, Checkpoint, CheckpointError,
                                           read_checkpoint)
from groupcoord.storage.segment import (OS_FILE_OPS, FileOps, Segment, parse_segment_name,
                                        segment_name)

__all__ = ["Problem", "TornTail", "Analysis", "analyze", "find_log_dirs", "verify_main",
           "CLEANED_SUFFIX"]

CLEANED_SUFFIX = ".cleaned"         # an unfinished compaction's output (storage/log.py)


class Problem(NamedTuple):
    path: str                   # the file (a missing one is named too)
    position: int               # byte position in it (0 for a missing file)
    offset: Optional[int]       # the first log offset affected, when known
    reason: str

    def line(self) -> str:
        return "%s: position %d (log offset %s): %s" % (
            self.path, self.position, "?" if self.offset is None else self.offset,
            self.reason)


class TornTail(NamedTuple):
    path: str
    position: int               # where the last complete batch ends: the file is cut here
    dropped: int                # bytes after it
    reason: str                 # what is wrong with the bytes at `position`
    remove: tuple               # later segment files (nothing valid in them), removed too
    removed_bytes: int


class Analysis(NamedTuple):
    directory: str
    segments: list              # Segment objects; a torn segment holds its valid part only
    problems: list
    torn: Optional[TornTail]
    cleaned: list               # leftover compaction outputs (removed at open)
    checkpoint: Optional[Checkpoint]
    bytes: int                  # bytes in the segment files


def analyze(directory: str, ops: FileOps = OS_FILE_OPS,
            index_interval: int = 4096) -> Analysis:
    d = directory
    names = ops.listdir(d)
    cleaned = sorted(os.path.join(d, n) for n in names if n.endswith(CLEANED_SUFFIX))
    bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
    problems: list = []
    cp = None
    try:
        cp = read_checkpoint(d, ops)
    except CheckpointError as e:
        problems.append(Problem(e.path, 0, None, "the checkpoint is unreadable (line %d: %s)"
                                % (e.line, e.reason)))
    listed = dict(cp.segments) if cp is not None else {}
    last_listed = cp.segments[-1][0] if cp is not None else -1
    present = set(bases)
    listed_bases = sorted(listed)
    for i, base in enumerate(listed_bases):
        if base in present:
            continue
        nxt = listed_bases[i + 1] if i + 1 < len(listed_bases) else max(cp.durable_offset,
                                                                        base)
        lost = ("offsets %d-%d are lost" % (base, nxt - 1) if nxt > base
                else "it held no durable records yet")
        problems.append(Problem(os.path.join(d, segment_name(base)), 0, base,
                                "segment file missing (%s lists it): %s"
                                % (CHECKPOINT_NAME, lost)))
    first = min(present | set(listed)) if present or listed else 0
    if first > 0:
        problems.append(Problem(
            os.path.join(d, segment_name(0)), 0, 0,
            "segment file missing: the log starts with %s (segment files are never "
            "deleted, not even by compaction): offsets 0-%d are lost"
            % (segment_name(first), first - 1)))

    segments: list = []
    torn = None
    expected = 0
    total = 0
    for i, base in enumerate(bases):
        seg = Segment(d, base, index_interval, ops)
        seg.next_offset = max(base, expected)
        data = ops.read_file(seg.path)
        total += len(data)
        batches, stop, reason, _truncated = rb.scan(data)
        # Offsets must increase across batches and segments. baseOffset is outside the CRC:
        # a flipped one shows up as offsets going back, at this batch or the next. That batch
        # passed its CRC, so this is never a torn write.
        floor = max(base, expected)
        backwards = False
        for j, (_pos, b, lod, _c, _m, _s) in enumerate(batches):
            if b < floor:
                reason = ("base offset %d below %d (a baseOffset here or in the previous "
                          "batch is corrupt)" % (b, floor))
                k = max(j - 1, 0)           # report from the previous batch
                stop, backwards = batches[k][0], True
                del batches[k:]
                break
            floor = b + lod + 1
        seg.add_scanned(batches)
        segments.append(seg)
        expected = seg.next_offset
        sizes = listed.get(base)
        closed = sizes is not None and base != last_listed
        durable_end = len(data) if closed else (min(sizes) if sizes is not None else 0)
        if reason is None:
            if closed and len(data) not in sizes:
                if len(data) < max(sizes):
                    why = ("cut at a batch boundary: the closed segment is %d bytes, %s "
                           "recorded %s: records from offset %d on are lost"
                           % (len(data), CHECKPOINT_NAME, _sizes(sizes), expected))
                else:
                    why = ("the closed segment is %d bytes, %s recorded %s: bytes were added "
                           "after it was closed" % (len(data), CHECKPOINT_NAME, _sizes(sizes)))
                problems.append(Problem(seg.path, len(data), expected, why))
            elif not closed and len(data) < durable_end:
                problems.append(Problem(
                    seg.path, len(data), expected,
                    "cut at a batch boundary: the segment is %d bytes, %s recorded %d durable "
                    "bytes: records from offset %d on are lost"
                    % (len(data), CHECKPOINT_NAME, durable_end, expected)))
            continue
        # A bad batch at `stop`.
        if backwards:
            problems.append(Problem(seg.path, stop, expected, reason))
            continue
        if closed or stop < durable_end:
            problems.append(Problem(
                seg.path, stop, expected,
                "%s, in bytes %s says were fsynced (corruption, not a torn write)"
                % (reason, CHECKPOINT_NAME)))
            continue
        later = rb.find_valid_batch(data, stop + 1, -1, expected)
        if later < 0:
            for nb in bases[i + 1:]:
                if rb.find_valid_batch(ops.read_file(os.path.join(d, segment_name(nb))), 0,
                                       -1, expected) >= 0:
                    later = nb
                    break
        if later >= 0 or any(nb in listed for nb in bases[i + 1:]):
            problems.append(Problem(seg.path, stop, expected,
                                    "%s, followed by valid batches (corruption in the "
                                    "middle, not a torn tail)" % reason))
            continue
        rest = tuple(os.path.join(d, segment_name(nb)) for nb in bases[i + 1:])
        torn = TornTail(seg.path, stop, len(data) - stop, reason, rest,
                        sum(ops.getsize(p) for p in rest))
        break
    if cp is not None and not problems and segments \
            and segments[-1].next_offset < cp.durable_offset:
        last = segments[-1]
        problems.append(Problem(
            last.path, last.size, last.next_offset,
            "the log ends at offset %d but %s says offsets below %d were durable: records "
            "lost" % (last.next_offset, CHECKPOINT_NAME, cp.durable_offset)))
    return Analysis(d, segments, problems, torn, cleaned, cp, total)


def _sizes(sizes) -> str:
    return " or ".join("%d bytes" % s for s in sizes)


# ---------------------------------------------------------------------- groupcoord log verify
_SHARD_DIR = re.compile(r"^__consumer_offsets-(\d+)$")


def is_log_dir(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(parse_segment_name(n) is not None or n == CHECKPOINT_NAME for n in names)


def find_log_dirs(path: str) -> list:
    """[path] when path is one log directory, else its shard directories
    (``__consumer_offsets-<n>``, by n) that hold a log."""
    if is_log_dir(path):
        return [path]
    found = []
    for name in os.listdir(path):
        m = _SHARD_DIR.match(name)
        p = os.path.join(path, name)
        if m and os.path.isdir(p):
            found.append((int(m.group(1)), p))
    return [p for _n, p in sorted(found)]


def verify_main(path: str, out=None, err=None) -> int:
    """``groupcoord log verify PATH``: -> exit status (0 clean, 1 corruption, 2 usage)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if not os.path.isdir(path):
        print("groupcoord log verify: error: %s is not a directory" % path, file=err)
        return 2
    dirs = find_log_dirs(path)
    if not dirs:
        print("groupcoord log verify: error: no log in %s (expected segment files "
              "(<20 digits>.log) or __consumer_offsets-<n> shard directories)" % path,
              file=err)
        return 2
    n_problems = n_segments = n_bytes = n_notes = 0
    bad_dirs = 0
    for d in dirs:
        try:
            a = analyze(d)
        except OSError as e:
            print("%s: cannot read: %s" % (d, e), file=out)
            n_problems += 1
            bad_dirs += 1
            continue
        n_segments += len(a.segments)
        n_bytes += a.bytes
        for p in a.problems:
            print(p.line(), file=out)
        if a.problems:
            n_problems += len(a.problems)
            bad_dirs += 1
            continue
        if a.torn is not None:
            t = a.torn
            n_notes += 1
            print("note: %s: position %d: torn tail after the durable point (%s): opening the "
                  "log truncates %d bytes%s (not corruption)"
                  % (t.path, t.position, t.reason, t.dropped,
                     " and removes %d later segment file(s)" % len(t.remove)
                     if t.remove else ""), file=out)
        for c in a.cleaned:
            n_notes += 1
            print("note: %s: output of an unfinished compaction: opening the log removes it "
                  "(not corruption)" % c, file=out)
        if a.checkpoint is None and a.bytes:
            n_notes += 1
            print("note: %s: no %s: only checks that need none were made (missing first "
                  "segment, CRCs, offsets)" % (d, CHECKPOINT_NAME), file=out)
    print("checked %d log director%s (%d segment files, %d bytes): %s%s"
          % (len(dirs), "y" if len(dirs) == 1 else "ies", n_segments, n_bytes,
             "%d problem(s) in %d log(s)" % (n_problems, bad_dirs) if n_problems else "clean",
             ", %d note(s)" % n_notes if n_notes else ""), file=out)
    return 1 if n_problems else 0
