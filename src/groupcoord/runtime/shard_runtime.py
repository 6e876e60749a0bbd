"""One coordinator shard on the asyncio event loop: its state machine, its log, its timers.

    rt = ShardRuntime(index, directory, config, topics, clock, io_pool, cpu_pool)
    await rt.load()                          # LOADING -> ACTIVE (replay the log, re-arm timers)
    response = await rt.submit(request, version, client_id, client_host)
    await rt.close()

Requests run one at a time, synchronously on the loop (the shard is single-threaded; no
locks): ``Shard.handle`` computes a Result, ``Shard.apply`` replays it into memory at once
(so the next request sees it), its durable records are appended to the log, and the answer
waits until the log's durable offset passes the end of those records. An answer whose request
wrote nothing still waits for every write before it (read-your-writes for the client that
asked right after another's change). Writes are group-committed: appends made during one
loop iteration go out as one write + one fdatasync in an I/O thread while the loop goes on
with the next requests, which form the next group commit.

A failed write (LogFailedError) fails the shard: every request waiting on a write or parked
is answered COORDINATOR_NOT_AVAILABLE, and the shard reloads from its log, which holds exactly
what was acknowledged (the state in memory ran ahead of the log and is thrown away).

Timers are the shard's table (``Shard.timers``); one loop timer is armed at the earliest
deadline and fires everything due through ``Shard.fire``. Server-side assignor runs over
large groups come back in ``Result.offload``; they run in a worker thread and their result is
installed as an event (``consumer.install_offloaded``) only if the group did not move on.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from typing import Callable, Optional

from groupcoord.coordinator import consumer
from groupcoord.coordinator.records import encode_record
from groupcoord.coordinator.result import Volatile
from groupcoord.coordinator.shard import Shard, error_response
from groupcoord.coordinator.topics import TopicCatalog
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.load import load_shard
from groupcoord.storage import Log, LogFailedError

__all__ = ["ShardRuntime", "ShardState", "wall_clock_ms"]

log = logging.getLogger("groupcoord.runtime")


def wall_clock_ms() -> int:
    # Wall time, not monotonic: deadlines and commit timestamps are stored in records and
    # must keep their meaning across a restart.
    return int(time.time() * 1000)


class ShardState(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"        # a log write failed; reloading


# The error a request gets while the shard cannot serve it.
_STATE_ERROR = {
    ShardState.UNLOADED: ErrorCode.NOT_COORDINATOR,
    ShardState.LOADING: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ShardState.FAILED: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


class _Waiter:
    """A response (or a parked request's future) and what is needed to answer it with an
    error instead if the write it waits for fails."""
    __slots__ = ("future", "request", "version", "response", "offset")

    def __init__(self, future, request, version, response=None, offset=0):
        self.future = future
        self.request = request
        self.version = version
        self.response = response
        self.offset = offset


class ShardRuntime:
    def __init__(self, index: int, directory: str, config: RuntimeConfig,
                 topics: TopicCatalog, *, clock: Callable[[], int] = wall_clock_ms,
                 io_pool=None, cpu_pool=None, file_ops=None):
        # file_ops: the log's file-system calls (None: the OS; a simulated disk in
        # tests/simulation). io_pool / cpu_pool: executors of log I/O and offloaded assignor
        # runs (None: the loop's default executor).
        self.index = index
        self.file_ops = file_ops
        self.directory = directory
        self.config = config
        self.topics = topics
        self.clock = clock
        self.io_pool = io_pool
        self.cpu_pool = cpu_pool
        self.state = ShardState.UNLOADED
        self.shard: Optional[Shard] = None
        self.log: Optional[Log] = None
        self.generation = 0                 # bumped on every (re)load: stale callbacks see it
        self.load_stats = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._waiters: collections.deque = collections.deque()  # by offset, ascending
        self._parked: dict = {}             # ParkKey -> _Waiter
        self._flushing = False
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at: Optional[int] = None
        self._jobs: set = set()             # (group id, epoch) of assignor runs in flight
        self._compacting = False
        self._dirty_bytes = 0
        self._closed_bytes = 0
        self._loaded = asyncio.Event()
        self._reload_task: Optional[asyncio.Task] = None
        # counters (for logs and benchmarks)
        self.flushes = 0
        self.records_written = 0

    # ================================================================== loading
    async def load(self) -> None:
        """Open the log (recovery), replay it into a fresh shard, re-arm the timers."""
        self._loop = asyncio.get_running_loop()
        self.state = ShardState.LOADING
        self._loaded.clear()
        self.generation += 1
        gen = self.generation
        t0 = time.perf_counter()
        shard_config = self.config.shard_config
        if not shard_config.consumer_assignor_offload_partitions:
            shard_config = _with_offload(shard_config, self.config.offload_partitions)
        topics = self.topics

        def _open_and_replay():
            kw = {} if self.file_ops is None else {"ops": self.file_ops}
            lg = Log(self.directory, fsync=self.config.fsync,
                     segment_bytes=self.config.segment_bytes, clock=self.clock, **kw)
            try:
                sh = Shard(shard_config, topics)
                stats = load_shard(sh, lg)
            except BaseException:
                lg.close(flush=False)
                raise
            return lg, sh, stats

        # Recovery and replay run in a worker thread so that the loop keeps answering the
        # other shards (and this one's requests with COORDINATOR_LOAD_IN_PROGRESS).
        lg, sh, stats = await self._loop.run_in_executor(self.io_pool, _open_and_replay)
        if gen != self.generation:          # closed (or reloaded) meanwhile
            lg.close(flush=False)
            return
        self.log, self.shard, self.load_stats = lg, sh, stats
        now = self.clock()
        sh.rearm(now)                       # session timeouts restart from load time
        # Compare every group's persisted subscription metadata with the catalog now: it may
        # have changed while this shard was loading, or before (while it was failed: a
        # change seen by no live shard is in no record; found by the simulation, seed
        # 101457). A group whose metadata is current writes nothing.
        sh_result = sh.update_topics(self.topics, now)
        if sh_result.records:
            self._process(sh_result, now)
        self._closed_bytes = sum(s.size for s in lg.segments()[:-1])
        self.state = ShardState.ACTIVE
        self._loaded.set()
        self._arm_timer()
        n = getattr(stats, "records_read", 0)
        # One line per shard only when it had something to load: the coordinator logs the
        # summary over all shards, and 50 "0 records" lines say nothing.
        log.log(logging.INFO if n else logging.DEBUG,
                "shard %d loaded: %d records from %s in %.3f s (%d groups)", self.index,
                n, self.directory, time.perf_counter() - t0, len(sh.groups))

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    # ================================================================== requests
    async def submit(self, request, version: int, client_id: str = "",
                     client_host: str = ""):
        """Handle one request; -> its response once the writes it depends on are durable."""
        r = self.submit_nowait(request, version, client_id, client_host)
        if isinstance(r, asyncio.Future):
            return await r
        return r

    def submit_nowait(self, request, version: int, client_id: str = "",
                      client_host: str = ""):
        """As submit, without a coroutine: -> the response when it can go at once (nothing
        written, nothing pending), else an asyncio.Future of it. The server's hot path."""
        if self.state is not ShardState.ACTIVE:
            return error_response(request, version, _STATE_ERROR[self.state])
        now = self.clock()
        result = self.shard.handle(request, now, version, client_id, client_host)
        if (not result.records and not result.timers and not result.completions
                and result.park is None and not result.offload
                and self.log.next_offset == self.log.durable_offset):
            return result.response          # read-only and nothing pending: the fast path
        waiter = self._process(result, now, request, version)
        if waiter is None:
            return result.response
        f = waiter.future
        return f.result() if f.done() else f

    def _process(self, result, now: int, request=None, version: int = 0):
        """Apply a Result: replay, append, answer completions, park or queue the response.
        -> the _Waiter the caller awaits, or None when its response can go at once."""
        shard = self.shard
        try:
            shard.apply(result)
        except Exception:
            # A replay bug must not leave half a change in memory: reload from the log.
            log.exception("shard %d: replay failed; reloading from the log", self.index)
            self._fail(None)
            if request is None:
                return None
            return self._answer_error(request, version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if result.records:
            durable = [encode_record(r) for r in result.records
                       if not isinstance(r, Volatile)]
            if durable:
                try:
                    self.log.append(durable, now)
                except LogFailedError:
                    self._fail(None)
                    if request is None:
                        return None
                    return self._answer_error(request, version,
                                              ErrorCode.COORDINATOR_NOT_AVAILABLE)
                self.records_written += len(durable)
                self._schedule_flush()
        target = self.log.next_offset
        for key, response in result.completions:
            w = self._parked.pop(key, None)
            if w is not None:
                w.response, w.offset = response, target
                self._release(w)
        waiter = None
        if request is not None:
            fut = self._loop.create_future()
            waiter = _Waiter(fut, request, version, result.response, target)
            if result.park is not None:
                old = self._parked.pop(result.park, None)
                if old is not None:         # the state machine answers supersessions; be safe
                    self._error(old, ErrorCode.REBALANCE_IN_PROGRESS)
                self._parked[result.park] = waiter
            else:
                self._release(waiter)
        if result.timers:
            # Asked on every change. A steady heartbeat only pushes its session deadline
            # later, which Timers records in O(1) (its heap entry is deferred when its old
            # deadline passes) and wake_at reads the heap top: O(1) on the hot path.
            self._arm_timer()
        for job in result.offload:
            self._offload(job)
        return waiter

    def _release(self, w: _Waiter) -> None:
        if w.offset <= self.log.durable_offset:
            if not w.future.done():
                w.future.set_result(w.response)
        else:
            self._waiters.append(w)

    def _answer_error(self, request, version, code) -> _Waiter:
        fut = self._loop.create_future()
        fut.set_result(error_response(request, version, code))
        return _Waiter(fut, request, version)

    @staticmethod
    def _error(w: _Waiter, code) -> None:
        if not w.future.done():
            w.future.set_result(error_response(w.request, w.version, code))

    # ================================================================== group commit
    def _schedule_flush(self) -> None:
        if not self._flushing:
            self._flushing = True
            # call_soon: the requests already read in this loop iteration append first and
            # share this fsync.
            self._loop.call_soon(self._start_flush)

    def _start_flush(self) -> None:
        if self.state is not ShardState.ACTIVE or self.log is None:
            self._flushing = False
            return
        try:
            job = self.log.begin_flush()
        except LogFailedError:
            self._fail(None)
            return
        if job is None:
            self._flushing = False
            return
        if self.config.fsync != "always":
            self._end_flush(job, self.log.write_flush(job), self.generation)
            return
        gen = self.generation
        fut = self._loop.run_in_executor(self.io_pool, self.log.write_flush, job)
        fut.add_done_callback(lambda f: self._end_flush(job, _outcome(f), gen))

    def _end_flush(self, job, error, gen: int) -> None:
        if gen != self.generation or self.log is None:
            return                          # the shard was reloaded or closed meanwhile
        try:
            durable = self.log.end_flush(job, error)
        except LogFailedError as exc:
            log.error("shard %d: log write failed (%s); answering COORDINATOR_NOT_AVAILABLE "
                      "and reloading from the last durable state", self.index, exc)
            self._fail(exc)
            return
        self.flushes += 1
        ws = self._waiters
        while ws and ws[0].offset <= durable:
            w = ws.popleft()
            if not w.future.done():
                w.future.set_result(w.response)
        self._account()
        if self.log.pending_bytes:
            self._start_flush()             # what arrived during the write: next commit
        else:
            self._flushing = False

    # ================================================================== failure
    def _fail(self, exc) -> None:
        """Throw the in-memory state away and reload what the log holds."""
        if self.state is ShardState.FAILED:
            return
        self.state = ShardState.FAILED
        self.generation += 1
        self._flushing = False
        self._cancel_timer()
        waiters = list(self._waiters) + list(self._parked.values())
        self._waiters.clear()
        self._parked.clear()
        for w in waiters:
            self._error(w, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        lg, self.log, self.shard = self.log, None, None
        if lg is not None:
            try:
                lg.close(flush=False)
            except Exception:               # already failed: nothing more to save
                log.debug("closing the failed log of shard %d", self.index, exc_info=True)
        self._reload_task = self._loop.create_task(self._reload())

    async def _reload(self) -> None:
        while self.state is ShardState.FAILED:
            await asyncio.sleep(self.config.reload_backoff_ms / 1000)
            if self.state is not ShardState.FAILED:
                return
            try:
                await self.load()
            except Exception as exc:
                self.state = ShardState.FAILED
                log.error("shard %d: reload from %s failed (%s); retrying", self.index,
                          self.directory, exc)

    # ================================================================== timers
    def _arm_timer(self) -> None:
        nd = self.shard.timers.wake_at()      # may be early: _on_timer then fires nothing
        if nd is None or (self._timer_at is not None and self._timer_at <= nd):
            return      # an earlier (or equal) wake-up is armed; it re-arms when it fires
        self._cancel_timer()
        self._timer_at = nd
        delay = max(0.0, (nd - self.clock()) / 1000.0)
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if self.state is not ShardState.ACTIVE:
            return
        now = self.clock()
        shard = self.shard
        for key in shard.due(now):
            self._process(shard.fire(key, now), now)
            if self.state is not ShardState.ACTIVE:
                return
        self._arm_timer()

    # ================================================================== offloaded assignors
    def _offload(self, job) -> None:
        key = (job.group_id, job.epoch)
        if key in self._jobs:
            return                          # already running for this epoch
        self._jobs.add(key)
        gen = self.generation
        log.debug("shard %d: %r runs off the loop", self.index, job)
        fut = self._loop.run_in_executor(self.cpu_pool, job.run)
        fut.add_done_callback(lambda f: self._offload_done(job, f, gen))

    def _offload_done(self, job, fut, gen: int) -> None:
        self._jobs.discard((job.group_id, job.epoch))
        if gen != self.generation or self.state is not ShardState.ACTIVE:
            return
        exc = fut.exception()
        if exc is not None:
            log.error("shard %d: assignor run %r failed: %r", self.index, job, exc)
            return
        now = self.clock()
        self._process(consumer.install_offloaded(self.shard, job, fut.result(), now), now)

    # ================================================================== compaction
    def _account(self) -> None:
        segs = self.log.segments()
        closed = sum(s.size for s in segs[:-1])
        if closed > self._closed_bytes:
            self._dirty_bytes += closed - self._closed_bytes
        self._closed_bytes = closed
        cfg = self.config
        if (not self._compacting and self._dirty_bytes >= cfg.compact_min_dirty_bytes
                and self._dirty_bytes >= cfg.compact_min_dirty_ratio * max(closed, 1)):
            self._start_compaction()

    def _start_compaction(self) -> None:
        self._compacting = True
        lg, gen = self.log, self.generation
        now = self.clock()
        fut = self._loop.run_in_executor(
            self.io_pool, lambda: lg.compact(self.config.tombstone_retention_ms, now))
        fut.add_done_callback(lambda f: self._compaction_done(f, gen))

    def _compaction_done(self, fut, gen: int) -> None:
        self._compacting = False
        if gen != self.generation or self.log is None:
            return
        exc = fut.exception()
        if exc is not None:
            log.error("shard %d: compaction failed: %r", self.index, exc)
            return
        self._dirty_bytes = 0
        self._closed_bytes = sum(s.size for s in self.log.segments()[:-1])
        log.info("shard %d: compacted: %s", self.index, fut.result())

    # ================================================================== topics, closing
    def set_topics(self, catalog: TopicCatalog) -> None:
        self.topics = catalog
        if self.state is ShardState.ACTIVE:
            now = self.clock()
            self._process(self.shard.update_topics(catalog, now), now)

    async def flush(self) -> None:
        """Wait until everything appended so far is durable."""
        if self.state is not ShardState.ACTIVE or self.log.next_offset == \
                self.log.durable_offset:
            return
        fut = self._loop.create_future()
        self._waiters.append(_Waiter(fut, None, 0, None, self.log.next_offset))
        await fut

    async def close(self) -> None:
        """Finish pending writes, answer parked requests (COORDINATOR_NOT_AVAILABLE: the
        client finds the coordinator again), close the log."""
        if self.state is ShardState.ACTIVE:
            try:
                await self.flush()
            except Exception:
                log.exception("shard %d: final flush failed", self.index)
        if self._reload_task is not None:
            self._reload_task.cancel()
        self.generation += 1
        self.state = ShardState.UNLOADED
        self._cancel_timer()
        for w in list(self._parked.values()) + list(self._waiters):
            if w.request is not None:
                self._error(w, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            elif not w.future.done():
                w.future.set_result(None)
        self._parked.clear()
        self._waiters.clear()
        lg, self.log, self.shard = self.log, None, None
        if lg is not None:
            # close() waits for a running compaction: not on the loop.
            await self._loop.run_in_executor(self.io_pool, lg.close)


def _outcome(fut):
    """The error of a write_flush future (it returns its OSError rather than raising)."""
    exc = fut.exception()
    if exc is not None:
        return exc if isinstance(exc, OSError) else OSError(str(exc))
    return fut.result()


def _with_offload(cfg, partitions: int):
    import msgspec
    return msgspec.structs.replace(cfg, consumer_assignor_offload_partitions=partitions)
