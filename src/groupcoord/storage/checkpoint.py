"""The log checkpoint: one small file per log directory, ``log-checkpoint``, that says how far
the log went, so that recovery can tell a torn tail (truncated) from lost or corrupt data that
had been fsynced (refused). Kafka keeps the same kind of fact in its
recovery-point-offset-checkpoint; this one also lists the segment files.

Layout (ASCII, one item per line, "\\n" line ends):

    groupcoord log checkpoint 1
    durable-offset <D>
    segment <base offset> <size>[,<size>...]          one line per segment, ascending
    crc32c <8 hex digits>                              CRC32C of every byte before this line

* ``D``: every record with an offset below D was durable when the file was written.
* one ``segment`` line per segment file that existed, with its size in bytes. Every segment
  but the last is closed: its file must have exactly one of the listed sizes (two sizes while
  a compaction rewrite of it may or may not have reached the disk). The last one is the
  active segment: its first <size> bytes were fsynced; bytes after them may be a torn tail.

Written atomically (``log-checkpoint.tmp``, fsync, rename, fsync of the directory), so a
reader sees the old or the new file whole. Writers: Log at each roll, at each compaction
rewrite and at a clean close (storage/log.py; docs/storage.md has the guarantee and its
limits). Readers: Log recovery and ``groupcoord log verify`` (storage/verify.py).
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional

from crc32c import crc32c

from groupcoord.storage.segment import OS_FILE_OPS, FileOps, write_file_durably

__all__ = ["CHECKPOINT_NAME", "Checkpoint", "CheckpointError", "read_checkpoint",
           "write_checkpoint", "format_checkpoint", "parse_checkpoint"]

CHECKPOINT_NAME = "log-checkpoint"
TMP_SUFFIX = ".tmp"
_MAGIC = "groupcoord log checkpoint 1"
MAX_BYTES = 16 << 20          # a larger file is not one we wrote


class Checkpoint(NamedTuple):
    durable_offset: int
    segments: tuple           # ((base offset, (size, ...)), ...) ascending by base


class CheckpointError(ValueError):
    """The checkpoint file exists but is not a valid checkpoint (names the file and line)."""

    def __init__(self, path: str, line: int, reason: str):
        super().__init__("%s: line %d: %s" % (path, line, reason))
        self.path = path
        self.line = line
        self.reason = reason


def format_checkpoint(cp: Checkpoint) -> bytes:
    lines = [_MAGIC, "durable-offset %d" % cp.durable_offset]
    lines += ["segment %d %s" % (base, ",".join("%d" % s for s in sizes))
              for base, sizes in cp.segments]
    body = ("\n".join(lines) + "\n").encode("ascii")
    return body + b"crc32c %08x\n" % crc32c(body)


def parse_checkpoint(data: bytes, path: str = CHECKPOINT_NAME) -> Checkpoint:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CheckpointError(path, 1, "not ASCII") from None
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise CheckpointError(path, len(lines), "truncated (no final crc32c line)")
    lines.pop()
    body_len = len(data) - len(lines[-1]) - 1
    crc = lines[-1].split(" ")
    if len(crc) != 2 or crc[0] != "crc32c" or not _is_hex8(crc[1]):
        raise CheckpointError(path, len(lines), "expected 'crc32c <8 hex digits>'")
    if int(crc[1], 16) != crc32c(data[:body_len]):
        raise CheckpointError(path, len(lines), "CRC32C mismatch")
    if lines[0] != _MAGIC:
        raise CheckpointError(path, 1, "expected %r" % _MAGIC)
    durable = _field(lines[1], "durable-offset", path, 2)
    segments = []
    for n, line in enumerate(lines[2:-1], start=3):
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "segment":
            raise CheckpointError(path, n, "expected 'segment <base> <size>[,<size>]'")
        base = _int(parts[1], path, n)
        sizes = tuple(_int(s, path, n) for s in parts[2].split(","))
        if segments and base <= segments[-1][0]:
            raise CheckpointError(path, n, "segment base offsets not ascending")
        segments.append((base, sizes))
    if not segments:
        raise CheckpointError(path, len(lines), "no segment line")
    return Checkpoint(durable, tuple(segments))


def _is_hex8(s: str) -> bool:
    return len(s) == 8 and all(c in "0123456789abcdef" for c in s)


def _int(s: str, path: str, n: int) -> int:
    if not s.isdigit() or len(s) > 19:
        raise CheckpointError(path, n, "%r is not a non-negative integer" % s)
    return int(s)


def _field(line: str, name: str, path: str, n: int) -> int:
    parts = line.split(" ")
    if len(parts) != 2 or parts[0] != name:
        raise CheckpointError(path, n, "expected '%s <integer>'" % name)
    return _int(parts[1], path, n)


def read_checkpoint(directory: str, ops: FileOps = OS_FILE_OPS) -> Optional[Checkpoint]:
    """The directory's checkpoint; None when there is none; CheckpointError when invalid."""
    path = os.path.join(directory, CHECKPOINT_NAME)
    if CHECKPOINT_NAME not in ops.listdir(directory):
        return None
    if ops.getsize(path) > MAX_BYTES:
        raise CheckpointError(path, 1, "larger than %d bytes" % MAX_BYTES)
    return parse_checkpoint(ops.read_file(path), path)


def write_checkpoint(directory: str, cp: Checkpoint, ops: FileOps = OS_FILE_OPS) -> None:
    """Replace the directory's checkpoint atomically; OSError on failure (the old one stays)."""
    path = os.path.join(directory, CHECKPOINT_NAME)
    tmp = path + TMP_SUFFIX
    data = format_checkpoint(cp)
    write_file_durably(ops, tmp, data)
    ops.replace(tmp, path)
    ops.fsync_dir(directory)
