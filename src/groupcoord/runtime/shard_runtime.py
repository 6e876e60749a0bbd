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

Any failure in the flush path (a write, an fdatasync, a segment roll: any OSError, or a bug)
fails the shard: every request waiting on a write or parked is answered
COORDINATOR_NOT_AVAILABLE, the log is closed, and the shard reloads from its log, which holds
exactly what was acknowledged (the state in memory ran ahead of the log and is thrown away).
Failures with no successful write in between back off exponentially before the reload
(``reload_backoff_ms`` doubling up to ``reload_backoff_max_ms``), one log line per failure,
so one per interval. Every future the shard starts (write, compaction, assignor run, close)
has its outcome retrieved, even when the shard moved on before it ended.

A log that is corrupt at load (CorruptBatchError: docs/storage.md, "Recovery") leaves the shard
FAILED with ``corrupt`` set and one log line; it answers COORDINATOR_NOT_AVAILABLE and is not
reloaded (the same bytes would fail again) until something calls ``load()`` again.

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

from groupcoord.groups import consumer
from groupcoord.groups.records import encode_record
from groupcoord.groups.result import TimerKey, Volatile
from groupcoord.groups.shard import Shard, error_response
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import api_keys as K
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.load import load_shard
from groupcoord.storage import CorruptBatchError, Log, LogFailedError
from groupcoord.storage.log import LogClosedError

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
    FAILED = "failed"        # a log write failed (reloading), or the log is corrupt (.corrupt)


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
        self.corrupt: Optional[Exception] = None    # why the log cannot load (FAILED)
        self._unwritable_logged: set = set()    # (group, kind) refused and logged (_process)
        self._log_closing: Optional[asyncio.Future] = None   # a failed log's close, off-loop
        self._fail_streak = 0               # failures with no successful write in between
        self._fail_since = 0.0              # loop time of the streak's first failure
        self._compact_streak = 0            # failed compactions in a row
        self._compact_retry_at = 0.0        # loop time before which none is started
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
        self.corrupt = None
        try:
            lg, sh, stats = await self._loop.run_in_executor(self.io_pool, _open_and_replay)
        except CorruptBatchError as exc:
            if gen == self.generation:
                self._corrupted(exc)
            raise
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
            if gen != self.generation:      # that write failed the shard: its reload is due
                return
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

    def _corrupted(self, exc) -> None:
        """The log is corrupt (CorruptLogError from recovery: storage/verify.py lists the
        cases; or a bad batch met by the replay): FAILED until an operator repairs it and
        loads the shard again (a restart). One line, no retry: the same bytes would fail
        again."""
        self.state = ShardState.FAILED
        self.corrupt = exc
        # A new generation: nothing started for the failed load acts on this shard, and the
        # reload loop (_reload) sees the shard moved on and stops instead of retrying.
        self.generation += 1
        log.error("shard %d: corrupt log, not serving its groups (COORDINATOR_NOT_AVAILABLE) "
                  "until it is repaired and the shard loaded again: %s", self.index, exc)

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

    def _process(self, result, now: int, request=None, version: int = 0, event=None):
        """Apply a Result: encode, replay, append, answer completions, park or queue the
        response. -> the _Waiter the caller awaits, or None when its response can go at once.

        Its durable records are encoded and size-checked BEFORE anything is applied: a Result
        whose records cannot be written changes nothing (memory stays what the log holds);
        the request gets the error Kafka answers for a too large append, and an event's
        Result (``event``: the TimerKey that fired, or a description) is dropped and logged
        (_unwritable)."""
        shard = self.shard
        durable = None
        if result.records:
            try:
                durable = _encode_checked(result.records, shard.config.message_max_bytes)
            except _Unwritable as exc:
                return self._unwritable(result, exc, now, request, version, event)
        try:
            shard.apply(result)
        except Exception:
            # A replay bug must not leave half a change in memory: reload from the log.
            log.exception("shard %d: replay failed; reloading from the log", self.index)
            self._fail(None)
            if request is None:
                return None
            return self._answer_error(request, version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
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

    def _unwritable(self, result, exc, now: int, request, version: int, event):
        """A Result whose records cannot be written: nothing of it is applied (its timers,
        completions and park neither). A request is answered the error Kafka gives a too
        large append (INVALID_COMMIT_OFFSET_SIZE for a commit, else UNKNOWN_SERVER_ERROR:
        GroupCoordinatorService's mapping of RecordTooLargeException); a timer that fired is
        armed again ``UNWRITABLE_RETRY_MS`` later, so the group is not left without it (its
        state may have changed by then). Logged once per group and kind."""
        gid = _group_of(request, result.records)
        what = (type(request).__name__ if request is not None
                else getattr(event, "kind", None) or str(event or "event"))
        key = (gid, what)
        if key not in self._unwritable_logged:
            if len(self._unwritable_logged) >= 10_000:
                self._unwritable_logged.clear()         # bounded; a rare line may repeat
            self._unwritable_logged.add(key)
            log.error("shard %d: group %r: %s not applied, its records cannot be written: %s"
                      "%s (logged once per group and kind)", self.index,
                      gid[:256] if gid else gid, what, exc,
                      "; the request is refused" if request is not None
                      else "; retried in %d ms" % UNWRITABLE_RETRY_MS
                      if isinstance(event, TimerKey) else "; dropped")
        if isinstance(event, TimerKey):
            self.shard.timers.apply(((event, now + UNWRITABLE_RETRY_MS),))
            self._arm_timer()
        if request is None:
            return None
        code = (ErrorCode.INVALID_COMMIT_OFFSET_SIZE if request.API_KEY == K.OFFSET_COMMIT
                else ErrorCode.UNKNOWN_SERVER_ERROR)
        fut = self._loop.create_future()
        fut.set_result(error_response(request, version, code, "its records cannot be "
                                      "written: %s" % exc))
        return _Waiter(fut, request, version)

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
        lg = self.log
        if self.state is not ShardState.ACTIVE or lg is None:
            self._flushing = False
            return
        gen = self.generation
        try:
            job = lg.begin_flush()
            if job is None:
                self._flushing = False
                return
            if self.config.fsync != "always":
                self._end_flush(job, lg.write_flush(job), gen)
                return
            fut = self._loop.run_in_executor(self.io_pool, lg.write_flush, job)
        except Exception as exc:
            # LogFailedError: a segment roll failed (EMFILE, ENOSPC, EIO on the directory);
            # anything else is a bug. Either way no flush would ever come: fail, answer, reload.
            self._fail(exc)
            return
        fut.add_done_callback(lambda f: self._end_flush(job, _outcome(f), gen))

    def _end_flush(self, job, error, gen: int) -> None:
        if gen != self.generation or self.log is None:
            return                          # the shard was reloaded or closed meanwhile
        try:
            durable = self.log.end_flush(job, error)
        except Exception as exc:            # LogFailedError: the write or fdatasync failed
            self._fail(exc)
            return
        self.flushes += 1
        if self._fail_streak:
            log.info("shard %d: log writes succeed again after %d failure(s) in a row",
                     self.index, self._fail_streak)
            self._fail_streak = 0
        ws = self._waiters
        while ws and ws[0].offset <= durable:
            w = ws.popleft()
            if not w.future.done():
                w.future.set_result(w.response)
        try:
            self._account()
            if self.log.pending_bytes:
                self._start_flush()         # what arrived during the write: next commit
            else:
                self._flushing = False
        except Exception as exc:            # a bug: never leave the next commit unscheduled
            self._fail(exc)

    # ================================================================== failure
    def _backoff_s(self, streak: int) -> float:
        """The pause before the next attempt after ``streak`` failures in a row."""
        cfg = self.config
        cap = max(cfg.reload_backoff_ms, cfg.reload_backoff_max_ms)
        return min(cfg.reload_backoff_ms * (1 << min(max(streak - 1, 0), 30)), cap) / 1000

    def _fail(self, exc) -> None:
        """Answer every waiting and parked request COORDINATOR_NOT_AVAILABLE, throw the
        in-memory state away, close the log and reload what it holds after a backoff."""
        if self.state is ShardState.FAILED:
            return
        self.state = ShardState.FAILED
        self.generation += 1
        self._flushing = False
        self._compacting = False            # the old log's compaction stops at its close
        self._cancel_timer()
        waiters = list(self._waiters) + list(self._parked.values())
        self._waiters.clear()
        self._parked.clear()
        answered = 0
        for w in waiters:
            if w.future.done():
                continue
            if w.request is None:           # flush(): the writes it waited for are lost
                w.future.set_exception(LogFailedError(
                    "shard %d failed before these writes were durable" % self.index))
            else:
                self._error(w, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                answered += 1
        self._fail_streak += 1
        now = self._loop.time()
        if self._fail_streak == 1:
            self._fail_since = now
        delay = self._backoff_s(self._fail_streak)
        what = "failed (see above)" if exc is None else (
            str(exc) if isinstance(exc, OSError) else "failed: %r" % (exc,))
        if self._fail_streak == 1:
            log.error("shard %d: %s; %d waiting request(s) answered COORDINATOR_NOT_AVAILABLE; "
                      "reloading from the last durable state in %g s", self.index, what,
                      answered, delay)
        else:
            log.error("shard %d: %s; failure %d in a row over %.0f s with no successful write; "
                      "%d waiting request(s) answered COORDINATOR_NOT_AVAILABLE; reloading in "
                      "%g s", self.index, what, self._fail_streak, now - self._fail_since,
                      answered, delay)
        lg, self.log, self.shard = self.log, None, None
        if lg is not None:
            # Off the loop: close() waits for a write in progress and a running compaction.
            # The reload waits for it (the directory is the old log's until then).
            try:
                self._log_closing = self._loop.run_in_executor(self.io_pool, _close_log, lg,
                                                               self.index)
            except RuntimeError:            # the executor is shut down: close here
                _close_log(lg, self.index)
        self._reload_task = self._loop.create_task(self._reload(delay))

    async def _reload(self, delay: float) -> None:
        gen = self.generation
        while True:
            await asyncio.sleep(delay)
            closing = self._log_closing
            if closing is not None:
                await asyncio.shield(closing)       # _close_log never raises
                if self._log_closing is closing:
                    self._log_closing = None
            if gen != self.generation or self.state is not ShardState.FAILED:
                return                      # closed (or loaded by someone else) meanwhile
            try:
                await self.load()
                return
            except Exception as exc:
                if self.generation != gen + 1:
                    return                  # closed meanwhile
                self.state = ShardState.FAILED
                self._fail_streak += 1
                delay = self._backoff_s(self._fail_streak)
                gen = self.generation
                log.error("shard %d: reload from %s failed (%s; failure %d in a row); "
                          "retrying in %g s", self.index, self.directory, exc,
                          self._fail_streak, delay)

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
            self._process(shard.fire(key, now), now, event=key)
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
        exc = None if fut.cancelled() else fut.exception()     # retrieved even when stale
        if gen != self.generation or self.state is not ShardState.ACTIVE or fut.cancelled():
            return
        if exc is not None:
            log.error("shard %d: assignor run %r failed: %r", self.index, job, exc)
            return
        now = self.clock()
        self._process(consumer.install_offloaded(self.shard, job, fut.result(), now), now,
                      event="assignor result")

    # ================================================================== compaction
    def _account(self) -> None:
        segs = self.log.segments()
        closed = sum(s.size for s in segs[:-1])
        if closed > self._closed_bytes:
            self._dirty_bytes += closed - self._closed_bytes
        self._closed_bytes = closed
        cfg = self.config
        if (not self._compacting and self._dirty_bytes >= cfg.compact_min_dirty_bytes
                and self._dirty_bytes >= cfg.compact_min_dirty_ratio * max(closed, 1)
                and self._loop.time() >= self._compact_retry_at):
            self._start_compaction()

    def _start_compaction(self) -> None:
        self._compacting = True
        lg, gen = self.log, self.generation
        now = self.clock()
        fut = self._loop.run_in_executor(
            self.io_pool, lambda: lg.compact(self.config.tombstone_retention_ms, now))
        fut.add_done_callback(lambda f: self._compaction_done(f, gen))

    def _compaction_done(self, fut, gen: int) -> None:
        # The outcome is always retrieved: the compaction of a log that the shard closed
        # meanwhile (failed, reloaded, closed) raises LogClosedError, and asyncio reports an
        # exception nobody retrieved (simulation seeds 501887, 502070).
        exc = None if fut.cancelled() else fut.exception()
        if gen != self.generation or self.log is None:
            # That log's flag went with it (_fail and close reset _compacting).
            if exc is not None and not isinstance(exc, LogClosedError):
                log.info("shard %d: the compaction of a log closed since ended with %r",
                         self.index, exc)
            return
        self._compacting = False
        if exc is not None or fut.cancelled():
            # Nothing is lost (each segment is swapped whole); retried after a backoff, not
            # at the next group commit, so a persistent fault does not rewrite in a loop.
            self._compact_streak += 1
            delay = self._backoff_s(self._compact_streak)
            self._compact_retry_at = self._loop.time() + delay
            log.error("shard %d: compaction failed (%r; failure %d in a row); retrying in "
                      "%g s at the earliest", self.index, exc, self._compact_streak, delay)
            return
        self._compact_streak = 0
        self._dirty_bytes = 0
        self._closed_bytes = sum(s.size for s in self.log.segments()[:-1])
        log.info("shard %d: compacted: %s", self.index, fut.result())

    # ================================================================== topics, closing
    def set_topics(self, catalog: TopicCatalog) -> None:
        self.topics = catalog
        if self.state is ShardState.ACTIVE:
            now = self.clock()
            self._process(self.shard.update_topics(catalog, now), now, event="topic change")

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
            except Exception as exc:
                log.error("shard %d: final flush failed: %s", self.index, exc)
        loading = self.state is ShardState.LOADING
        task, self._reload_task = self._reload_task, None
        self.generation += 1
        self.state = ShardState.UNLOADED
        self._flushing = False
        self._compacting = False
        self._cancel_timer()
        for w in list(self._parked.values()) + list(self._waiters):
            if w.request is not None:
                self._error(w, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            elif not w.future.done():
                w.future.set_result(None)
        self._parked.clear()
        self._waiters.clear()
        lg, self.log, self.shard = self.log, None, None
        if task is not None and not task.done():
            if loading:
                # Inside load(): it sees the generation move and closes the log it opened
                # (cancelling it would leave that log open in the worker thread).
                await asyncio.wait([task])
            else:
                task.cancel()               # sleeping before a reload
        closing, self._log_closing = self._log_closing, None
        if closing is not None:
            await closing                   # a failed log's close: _close_log never raises
        if lg is not None:
            # close() waits for a running compaction: not on the loop.
            try:
                await self._loop.run_in_executor(self.io_pool, lg.close)
            except Exception as exc:
                log.error("shard %d: closing the log of %s failed: %s", self.index,
                          self.directory, exc)


# A timer whose Result could not be written fires again this much later.
UNWRITABLE_RETRY_MS = 10_000

# RecordBatch v2 framing (storage/batch.py): the batch header, and the most one record adds
# around its key and value (seven varints).
_BATCH_HEADER = 61
_RECORD_FRAMING_MAX = 32


class _Unwritable(Exception):
    """A Result's records cannot be written: a field over what it holds, or a record over
    message.max.bytes."""


def _encode_checked(records, max_bytes: int) -> list:
    """The (key, value) bytes of the durable records, in order. Raises _Unwritable when one
    cannot be encoded or takes more than ``max_bytes`` in a batch of its own: the check runs
    before anything is applied, so that a refused Result changes nothing."""
    out = []
    for r in records:
        if isinstance(r, Volatile):
            continue
        try:
            k, v = encode_record(r)
        except ValueError as exc:           # the codec's EncodeError: a field over its size
            raise _Unwritable(str(exc)) from None
        size = _BATCH_HEADER + _RECORD_FRAMING_MAX + len(k) + (len(v) if v is not None else 0)
        if size > max_bytes:
            raise _Unwritable("a %s record of %d bytes exceeds message.max.bytes %d"
                              % (r.type.name, size, max_bytes))
        out.append((k, v))
    return out


def _group_of(request, records) -> Optional[str]:
    """The group a refused Result is about (for its log line)."""
    gid = getattr(request, "group_id", None)
    if gid is not None:
        return gid
    for r in records:
        key = getattr(r, "key", r)
        for f in ("group", "group_id"):
            g = getattr(key, f, None)
            if isinstance(g, str):
                return g
    return None


def _close_log(lg, index: int) -> None:
    """Close a failed log without flushing; its errors are only worth a line (the shard is
    reloading from what the disk holds anyway)."""
    try:
        lg.close(flush=False)
    except Exception as exc:
        log.warning("shard %d: closing its failed log: %s", index, exc)


def _outcome(fut):
    """The error of a write_flush future (it returns its OSError rather than raising)."""
    if fut.cancelled():                 # the executor was shut down under it
        return OSError("the log write was cancelled")
    exc = fut.exception()
    if exc is not None:
        return exc if isinstance(exc, OSError) else OSError(str(exc))
    return fut.result()


def _with_offload(cfg, partitions: int):
    import msgspec
    return msgspec.structs.replace(cfg, consumer_assignor_offload_partitions=partitions)
