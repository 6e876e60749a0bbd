"""One shard on the asyncio event loop: its state machine, its log, its timers.

    rt = ShardRuntime(index, directory, config, topics, clock, io_pool, cpu_pool)
    await rt.load()                          # LOADING -> ACTIVE (replay the log, re-arm timers)
    response = await rt.submit(request, version, client_id, client_host)
    await rt.close()

Requests run one at a time, synchronously on the loop (the shard is single-threaded; no
locks): ``Shard.handle`` computes a Result and the write path (write_path.py, this class's
base) applies it, appends its records and answers once they are durable. This module holds
the rest: loading, the request entry points, failure and reload, timers, offloaded assignor
runs, catalog changes and closing.

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
installed as an event (``consumer/target.py`` ``install_offloaded``) only if the group did not move on.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Optional

from groupcoord.groups.consumer.target import install_offloaded
from groupcoord.groups.shard import Shard, error_response
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.load import load_shard
from groupcoord.runtime.shard_state import STATE_ERROR, ShardState
from groupcoord.runtime.write_path import WritePath
from groupcoord.storage import CorruptBatchError, Log, LogFailedError
from groupcoord.storage.pg_log import LeaseLostError

__all__ = ["ShardRuntime", "ShardState", "wall_clock_ms"]

log = logging.getLogger("groupcoord.runtime")


def wall_clock_ms() -> int:
    # Wall time, not monotonic: deadlines and commit timestamps are stored in records and
    # must keep their meaning across a restart.
    return int(time.time() * 1000)


class ShardRuntime(WritePath):
    def __init__(self, index: int, directory: str, config: RuntimeConfig,
                 topics: TopicCatalog, *, clock: Callable[[], int] = wall_clock_ms,
                 io_pool=None, cpu_pool=None, file_ops=None, store=None, on_fenced=None,
                 lease_check=None):
        # file_ops: the log's file-system calls (None: the OS; a simulated disk in
        # tests/simulation). io_pool / cpu_pool: executors of log I/O and offloaded assignor
        # runs (None: the loop's default executor). store: None (the file log in
        # ``directory``) or a runtime.stores.PgStore (cluster mode: load_shard sets ``epoch``,
        # the lease epoch the log writes with; on_fenced(index, epoch) is told when the
        # store refused a write because the lease is gone). The write path's state: WritePath.
        super().__init__()
        self.store = store if store is not None and store.kind != "file" else None
        self.on_fenced = on_fenced
        self.lease_check = lease_check      # cluster mode: (index) -> may we answer now
        self.epoch = 0
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
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at: Optional[int] = None
        self._jobs: set = set()             # (group id, epoch) of assignor runs in flight
        self._loaded = asyncio.Event()
        self._reload_task: Optional[asyncio.Task] = None
        self.corrupt: Optional[Exception] = None    # why the log cannot load (FAILED)
        self._log_closing: Optional[asyncio.Future] = None   # a failed log's close, off-loop
        self._fail_streak = 0               # failures with no successful write in between
        self._fail_since = 0.0              # loop time of the streak's first failure

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
            if self.store is None:
                lg, sh, stats = await self._loop.run_in_executor(self.io_pool,
                                                                 _open_and_replay)
            else:
                lg, sh, stats = await self._load_from_store(shard_config, topics)
        except CorruptBatchError as exc:
            if gen == self.generation:
                self._corrupted(exc)
            raise
        except LeaseLostError as exc:
            if gen == self.generation:
                self._lost(exc)
            raise
        if gen != self.generation:          # closed (or reloaded) meanwhile
            if self.store is None:
                lg.close(flush=False)
            else:
                await lg.close(flush=False)
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
        self._closed_bytes = self._log_closed_bytes()
        self.state = ShardState.ACTIVE
        self._loaded.set()
        self._arm_timer()
        if self.observer is not None:
            self.observer.loaded(self.index, time.perf_counter() - t0)
        n = getattr(stats, "records_read", 0)
        # One line per shard only when it had something to load: ShardSet.start logs the
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

    async def _load_from_store(self, shard_config, topics):
        """Cluster mode: the shard's rows read on the loop (one query), replayed in a worker
        thread by the same native loader as the file segments."""
        lg = self.store.open(self.index, self.epoch, self.clock)
        try:
            snap = await lg.load()          # LeaseLostError when the lease is not ours

            def _replay():
                sh = Shard(shard_config, topics)
                return sh, load_shard(sh, snap)

            sh, stats = await self._loop.run_in_executor(self.io_pool, _replay)
        except BaseException:
            await lg.close(flush=False)
            raise
        return lg, sh, stats

    def _lost(self, exc) -> None:
        """The store refused a write (or a load) because this node no longer holds the
        shard's lease at its epoch: stop serving it at once (NOT_COORDINATOR: the client
        finds the new coordinator), answer everything waiting, drop the log, tell the
        lease glue. No reload: the shard is another node's now."""
        if self.state is ShardState.UNLOADED and self.log is None:
            return
        answered = self._stop_serving(ShardState.UNLOADED, ErrorCode.NOT_COORDINATOR,
                                      "lease lost")
        log.warning("shard %d: fenced at epoch %d (%s); %d waiting request(s) answered "
                    "NOT_COORDINATOR; unloaded", self.index, self.epoch, exc, answered)
        lg, self.log, self.shard = self.log, None, None
        if lg is not None:
            self._log_closing = self._loop.create_task(_close_async(lg, self.index))
        if self.on_fenced is not None:
            self.on_fenced(self.index, self.epoch)

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
            return error_response(request, version, STATE_ERROR[self.state])
        lc = self.lease_check
        if lc is not None and not lc(self.index):
            # The lease's deadline passed before the lease glue unloaded the shard (a node
            # resumed after a pause): its state may be stale, another node may serve it.
            return error_response(request, version, ErrorCode.NOT_COORDINATOR)
        now = self.clock()
        result = self.shard.handle(request, now, version, client_id, client_host)
        if (not result.records and not result.timers and not result.completions
                and result.park is None and not result.offload and not result.events
                and self.log.next_offset == self.log.durable_offset):
            return result.response          # read-only and nothing pending: the fast path
        waiter = self._process(result, now, request, version)
        if waiter is None:
            return result.response
        f = waiter.future
        return f.result() if f.done() else f

    # ================================================================== failure
    def _stop_serving(self, state: ShardState, code, why: str) -> int:
        """Enter ``state`` (a new generation: callbacks of the old one do nothing), stop the
        group commit, compaction and timer, and answer every waiting and parked request
        ``code`` (a flush() waiter gets LogFailedError: its writes are lost). -> how many
        requests were answered. The caller decides what becomes of the log."""
        self.state = state
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
            if w.request is None:
                w.future.set_exception(LogFailedError(
                    "shard %d %s before these writes were durable" % (self.index, why)))
            else:
                self._error(w, code)
                answered += 1
        return answered

    def _fail(self, exc) -> None:
        """Answer every waiting and parked request COORDINATOR_NOT_AVAILABLE, throw the
        in-memory state away, close the log and reload what it holds after a backoff."""
        if self.state is ShardState.FAILED:
            return
        answered = self._stop_serving(ShardState.FAILED, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      "failed")
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
        if lg is not None and self.store is not None:
            self._log_closing = self._loop.create_task(_close_async(lg, self.index))
        elif lg is not None:
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
            except LeaseLostError:
                return                      # unloaded by _lost: another node's shard now
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
        self._process(install_offloaded(self.shard, job, fut.result(), now), now,
                      event="assignor result")

    # ================================================================== topics, closing
    def set_topics(self, catalog: TopicCatalog) -> None:
        self.topics = catalog
        if self.state is ShardState.ACTIVE:
            now = self.clock()
            self._process(self.shard.update_topics(catalog, now), now, event="topic change")

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
        if lg is not None and self.store is not None:
            await _close_async(lg, self.index)
        elif lg is not None:
            # close() waits for a running compaction: not on the loop.
            try:
                await self._loop.run_in_executor(self.io_pool, lg.close)
            except Exception as exc:
                log.error("shard %d: closing the log of %s failed: %s", self.index,
                          self.directory, exc)


async def _close_async(lg, index: int) -> None:
    """Close a store log (PgShardLog) without flushing; never raises."""
    try:
        await lg.close(flush=False)
    except Exception as exc:
        log.warning("shard %d: closing its log: %s", index, exc)


def _close_log(lg, index: int) -> None:
    """Close a failed log without flushing; its errors are only worth a line (the shard is
    reloading from what the disk holds anyway)."""
    try:
        lg.close(flush=False)
    except Exception as exc:
        log.warning("shard %d: closing its failed log: %s", index, exc)


def _with_offload(cfg, partitions: int):
    import msgspec
    return msgspec.structs.replace(cfg, consumer_assignor_offload_partitions=partitions)
