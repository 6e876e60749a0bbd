"""The simulated disk under the real storage layer, and the executors that run its I/O.

`SimDisk` implements `groupcoord.storage.segment.FileOps` (the log's only way to the file
system) in memory, modelling what a crash keeps:

* every file (inode) has its contents as readers see them (the page cache) and the
  contents as of its last fsync/fdatasync (durable);
* directory entries (create, rename, unlink) become durable only at `fsync_dir`;
* `crash(rng)` replaces the live state by what survives: per directory entry, the durable
  entry or (if it changed since the last directory fsync) either version; per file, its
  durable contents plus a random prefix of the bytes written after the last fsync (none:
  "lost before fsync"; some: a torn write, optionally ending in garbage bytes);
* faults: `fail_next` makes the next write or fdatasync raise EIO (the runtime must answer
  COORDINATOR_NOT_AVAILABLE and reload); `no_sync` makes the first fsync stop the job
  (`InterruptedByCrash`: used to run an I/O job that was in flight when the node died: what it
  did before its first fsync reached the page cache, and nothing after it happened -- a
  compaction's rename never runs ahead of the fsync of the file it renames).

`SimExecutor` replaces the runtime's I/O and assignor thread pools: `submit(fn, *args)`
returns an asyncio future of the loop and runs `fn` at a later virtual time drawn from the
seed (a slow disk, a slow assignor), in the loop's single thread. Jobs run atomically at
their completion time, one valid serialisation of what the threads could do (the log's
concurrency contract allows compaction to interleave anywhere with appends and flushes).
"""
from __future__ import annotations

import errno
import os
import posixpath
from typing import Callable, Optional

from groupcoord.storage.segment import FileOps

__all__ = ["SimDisk", "SimExecutor", "InterruptedByCrash"]


class _Inode:
    __slots__ = ("data", "durable")

    def __init__(self):
        self.data = bytearray()
        self.durable = b""


class InterruptedByCrash(Exception):
    """The node died while this I/O job waited for an fsync (see SimExecutor.crash)."""


class _Fd:
    __slots__ = ("ino", "pos", "writable")

    def __init__(self, ino: _Inode, writable: bool):
        self.ino = ino
        self.pos = 0
        self.writable = writable


class SimDisk(FileOps):
    def __init__(self):
        self.names: dict = {}          # path -> _Inode (live namespace)
        self.durable_names: dict = {}  # path -> _Inode (as of the last fsync_dir)
        self.dirs: set = set()
        self.fds: dict = {}
        self._next_fd = 3
        self.fail_next: Optional[str] = None   # "write" | "fdatasync": raise EIO once
        self.no_sync = False
        # counters (reported by the runner)
        self.writes = 0
        self.syncs = 0
        self.crashes = 0
        self.torn = 0
        self.eio = 0

    # ---------------------------------------------------------------- helpers
    def _fd(self, fd: int) -> _Fd:
        f = self.fds.get(fd)
        if f is None:
            raise OSError(errno.EBADF, "bad file descriptor %d" % fd)
        return f

    def _enoent(self, path):
        return FileNotFoundError(errno.ENOENT, "no such file", path)

    # ---------------------------------------------------------------- FileOps
    def open(self, path, flags, mode=0o777):
        ino = self.names.get(path)
        if ino is None:
            if not flags & os.O_CREAT:
                raise self._enoent(path)
            if posixpath.dirname(path) not in self.dirs:
                raise self._enoent(posixpath.dirname(path))
            ino = self.names[path] = _Inode()
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise FileExistsError(errno.EEXIST, "file exists", path)
        if flags & os.O_TRUNC:
            del ino.data[:]
        fd = self._next_fd
        self._next_fd += 1
        self.fds[fd] = _Fd(ino, bool(flags & (os.O_WRONLY | os.O_RDWR)))
        return fd

    def close(self, fd):
        self.fds.pop(fd, None)      # closing twice (finalizers after a crash) is harmless

    def write(self, fd, data):
        f = self._fd(fd)
        if self.fail_next == "write":
            self.fail_next = None
            self.eio += 1
            raise OSError(errno.EIO, "simulated write error")
        data = bytes(data)
        d = f.ino.data
        if f.pos > len(d):
            d.extend(bytes(f.pos - len(d)))
        d[f.pos:f.pos + len(data)] = data
        f.pos += len(data)
        self.writes += 1
        return len(data)

    def pread(self, fd, n, offset):
        return bytes(self._fd(fd).ino.data[offset:offset + n])

    def preadv(self, fd, buffers, offset):
        d = self._fd(fd).ino.data
        total = 0
        for b in buffers:
            chunk = d[offset + total:offset + total + len(b)]
            b[:len(chunk)] = chunk
            total += len(chunk)
            if len(chunk) < len(b):
                break
        return total

    def lseek(self, fd, pos, how):
        f = self._fd(fd)
        if how == os.SEEK_SET:
            f.pos = pos
        elif how == os.SEEK_END:
            f.pos = len(f.ino.data) + pos
        else:
            f.pos += pos
        return f.pos

    def fsize(self, fd):
        return len(self._fd(fd).ino.data)

    def ftruncate(self, fd, length):
        d = self._fd(fd).ino.data
        if length < len(d):
            del d[length:]
        else:
            d.extend(bytes(length - len(d)))

    def fsync(self, fd):
        self.fdatasync(fd)

    def fdatasync(self, fd):
        f = self._fd(fd)
        if self.no_sync:
            raise InterruptedByCrash()
        if self.fail_next == "fdatasync":
            self.fail_next = None
            self.eio += 1
            raise OSError(errno.EIO, "simulated fsync error")
        f.ino.durable = bytes(f.ino.data)
        self.syncs += 1

    def listdir(self, path):
        if path not in self.dirs:
            raise self._enoent(path)
        return sorted(posixpath.basename(p) for p in self.names
                      if posixpath.dirname(p) == path)

    def unlink(self, path):
        if self.names.pop(path, None) is None:
            raise self._enoent(path)

    def replace(self, src, dst):
        ino = self.names.pop(src, None)
        if ino is None:
            raise self._enoent(src)
        self.names[dst] = ino

    def makedirs(self, path):
        self.dirs.add(path)         # directories themselves are durable at once

    def getsize(self, path):
        ino = self.names.get(path)
        if ino is None:
            raise self._enoent(path)
        return len(ino.data)

    def read_file(self, path):
        ino = self.names.get(path)
        if ino is None:
            raise self._enoent(path)
        return bytes(ino.data)

    def fsync_dir(self, path):
        if self.no_sync:
            raise InterruptedByCrash()
        for p in set(self.names) | set(self.durable_names):
            if posixpath.dirname(p) == path:
                if p in self.names:
                    self.durable_names[p] = self.names[p]
                else:
                    self.durable_names.pop(p, None)

    # ---------------------------------------------------------------- crash
    def crash(self, rng, tear: bool = True, garbage: bool = True) -> None:
        """The machine lost power: keep what a real disk could have kept (see module doc).
        tear=False: unsynced bytes are always lost; garbage: a torn tail may end in junk."""
        self.crashes += 1
        self.fds.clear()
        names = {}
        for p in sorted(set(self.names) | set(self.durable_names)):
            live, dur = self.names.get(p), self.durable_names.get(p)
            keep = dur if live is dur or rng.random() < 0.5 else live
            if keep is not None:
                names[p] = keep
        seen = set()
        for p, ino in sorted(names.items()):
            if id(ino) in seen:
                continue
            seen.add(id(ino))
            durable, data = ino.durable, bytes(ino.data)
            if data.startswith(durable) and len(data) > len(durable) and tear:
                extra = data[len(durable):]
                k = 0 if rng.random() < 0.4 else rng.randint(0, len(extra))
                kept = bytearray(extra[:k])
                if garbage and k and rng.random() < 0.3:
                    n = rng.randint(1, min(16, k))
                    kept[k - n:] = bytes(rng.randrange(256) for _ in range(n))
                if 0 < k < len(extra):
                    self.torn += 1
                result = durable + bytes(kept)
            elif data != durable and not data.startswith(durable) and rng.random() < 0.5:
                result = data          # an unsynced truncation that reached the disk anyway
            else:
                result = durable
            ino.data = bytearray(result)
            ino.durable = result
        self.names = names
        self.durable_names = dict(names)

    def total_bytes(self) -> int:
        return sum(len(i.data) for i in {id(i): i for i in self.names.values()}.values())


class SimExecutor:
    """A stand-in for a ThreadPoolExecutor: jobs run on the loop at a virtual time.

    latency(fn) -> seconds until the job runs. `crash(run_unsynced)` drops every pending job
    (the node died); run_unsynced(fn) decides, per job, whether its effects still reached
    the page cache (it is then run with the disk's fsyncs disabled)."""

    def __init__(self, loop, latency: Callable[[object], float], name: str):
        self.loop = loop
        self.latency = latency
        self.name = name
        self.pending: dict = {}        # id -> (handle, fn, args, future)
        self._ids = 0
        self.jobs = 0

    def submit(self, fn, *args):
        fut = self.loop.create_future()
        self._ids += 1
        jid = self._ids
        handle = self.loop.call_later(self.latency(fn), self._run, jid)
        self.pending[jid] = (handle, fn, args, fut)
        return fut

    def _run(self, jid: int) -> None:
        _h, fn, args, fut = self.pending.pop(jid)
        self.jobs += 1
        try:
            res = fn(*args)
        except BaseException as exc:       # handed to the awaiting code, as a pool does
            if not fut.done():
                fut.set_exception(exc)
            return
        if not fut.done():
            fut.set_result(res)

    def crash(self, run_unsynced: Optional[Callable[[object], bool]] = None,
              disk: Optional[SimDisk] = None) -> None:
        jobs = sorted(self.pending.items())
        self.pending.clear()
        for _jid, (handle, fn, args, fut) in jobs:
            handle.cancel()
            if run_unsynced is not None and disk is not None and run_unsynced(fn):
                # It ran up to its first fsync, where the crash stopped it.
                disk.no_sync = True
                try:
                    fn(*args)
                except Exception:           # InterruptedByCrash; the process is dead anyway
                    pass
                finally:
                    disk.no_sync = False
            # The future stays pending: the code awaiting it died with the node.

    def shutdown(self, wait: bool = True, **kw) -> None:
        self.crash()
