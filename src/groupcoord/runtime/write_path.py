"""The write path of a shard runtime: a Result's records to the log, the answer back once they
are durable.

    ShardRuntime._process(result)       (on the loop, one request or event at a time)
      encode + size-check the durable records     nothing applied if one cannot be written
      Shard.apply(result)                         replay into memory: the next request sees it
      Log.append(records)                         buffered; the first append of a loop
                                                  iteration schedules the group commit
      completions, park, or the response          each a _Waiter released when
                                                  durable_offset passes its records
    group commit: Log.begin_flush (loop) -> write_flush (I/O thread: one write + one
      fdatasync) -> end_flush (loop): release the waiters it covers, trigger compaction,
      start the next commit with what arrived meanwhile

An answer whose request wrote nothing still waits for every write before it (read-your-writes
for the client that asked right after another's change). Appends made during one loop
iteration go out as one write + one fdatasync in an I/O thread while the loop goes on with the
next requests, which form the next group commit. Any failure on this path calls
``ShardRuntime._fail`` (shard_runtime.py): the shard is answered, dropped and reloaded.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Optional

from groupcoord.groups.records import encode_record
from groupcoord.groups.result import TimerKey, Volatile
from groupcoord.groups.shard import error_response
from groupcoord.protocol import api_keys as K
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.runtime import lifecycle_log
from groupcoord.runtime.shard_state import ShardState
from groupcoord.storage import LogFailedError
from groupcoord.storage.log import LogClosedError
from groupcoord.storage.pg_log import LeaseLostError

__all__ = ["WritePath", "UNWRITABLE_RETRY_MS", "Unwritable", "encode_checked"]

log = logging.getLogger("groupcoord.runtime")


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


class WritePath:
    """The write-path half of ShardRuntime (its base class): ShardRuntime sets the shard,
    its log, its loop, state and generation, and supplies ``_fail`` (failure and reload),
    ``_arm_timer`` and ``_offload``, which this half calls."""

    def __init__(self):
        self._waiters: collections.deque = collections.deque()  # by offset, ascending
        self._parked: dict = {}             # ParkKey -> _Waiter
        self._flushing = False
        self._compacting = False
        self._dirty_bytes = 0
        self._closed_bytes = 0
        self._unwritable_logged: set = set()    # (group, kind) refused and logged (_process)
        self._flush_bytes = 0               # a store log's commit in flight: its bytes
        self._compact_streak = 0            # failed compactions in a row
        self._compact_retry_at = 0.0        # loop time before which none is started
        # counters (for logs and benchmarks)
        self.flushes = 0
        self.records_written = 0
        # Metrics hooks (server/metrics.py Metrics): result(rt, result, request, event)
        # before a Result with records is applied; flushed(seconds, records) per group
        # commit; loaded(index, seconds) (shard_runtime.py). None: no metrics.
        self.observer = None
        # Writes a Result's lifecycle events as log lines once it is applied and appended
        # (lifecycle_log.py; one per process: the rate limit is the node's).
        self.lifecycle = lifecycle_log.DEFAULT
        self.history = None                 # the web view's group history (server/group_view.py)
        self._flush_t0 = 0.0                # the group commit in flight: when it began,
        self._flush_n = 0                   # how many records it takes,
        self._flush_mark = 0                # and records_written when it began

    # ================================================================== a Result
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
                durable = encode_checked(result.records, shard.config.message_max_bytes)
            except Unwritable as exc:
                return self._unwritable(result, exc, now, request, version, event)
        obs = self.observer
        if obs is not None and result.records:
            obs.result(self, result, request, event)
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
        if result.events:
            self.lifecycle.write(result.events)
            if self.history is not None:
                self.history.note(self, result.events)
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
        if self.store is not None:
            # A store log (PostgreSQL): the group commit is one awaited transaction.
            self._flush_bytes = lg.pending_bytes
            self._flush_began()
            task = self._loop.create_task(lg.flush_async())
            task.add_done_callback(lambda t: self._end_store_flush(t, gen))
            return
        try:
            job = lg.begin_flush()
            if job is None:
                self._flushing = False
                return
            self._flush_began()
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

    def _end_store_flush(self, task, gen: int) -> None:
        exc = None if task.cancelled() else task.exception()    # always retrieved
        if gen != self.generation or self.log is None:
            return
        if isinstance(exc, LeaseLostError):
            self._lost(exc)                 # another node holds the shard: unload
            return
        if exc is not None or task.cancelled():
            self._fail(exc)                 # the store is unreachable: reload after a backoff
            return
        self._dirty_bytes += self._flush_bytes
        self._flushed(task.result())

    def _end_flush(self, job, error, gen: int) -> None:
        if gen != self.generation or self.log is None:
            return                          # the shard was reloaded or closed meanwhile
        try:
            durable = self.log.end_flush(job, error)
        except Exception as exc:            # LogFailedError: the write or fdatasync failed
            self._fail(exc)
            return
        self._flushed(durable)

    def _flushed(self, durable: int) -> None:
        """Everything below ``durable`` is durable: release its waiters, start the next
        group commit with what arrived meanwhile."""
        self.flushes += 1
        if self.observer is not None:
            self.observer.flushed(time.perf_counter() - self._flush_t0, self._flush_n)
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

    def _flush_began(self) -> None:
        # A group commit takes every record appended so far (the metrics hook's figures).
        self._flush_t0 = time.perf_counter()
        self._flush_n = self.records_written - self._flush_mark
        self._flush_mark = self.records_written

    async def flush(self) -> None:
        """Wait until everything appended so far is durable."""
        if self.state is not ShardState.ACTIVE or self.log.next_offset == \
                self.log.durable_offset:
            return
        fut = self._loop.create_future()
        self._waiters.append(_Waiter(fut, None, 0, None, self.log.next_offset))
        await fut

    # ================================================================== compaction
    def _account(self) -> None:
        cfg = self.config
        if self.store is not None:
            # Store logs count the bytes their commits wrote (_end_store_flush).
            if (not self._compacting and self._dirty_bytes >= cfg.compact_min_dirty_bytes
                    and self._loop.time() >= self._compact_retry_at):
                self._start_compaction()
            return
        segs = self.log.segments()
        closed = sum(s.size for s in segs[:-1])
        if closed > self._closed_bytes:
            self._dirty_bytes += closed - self._closed_bytes
        self._closed_bytes = closed
        if (not self._compacting and self._dirty_bytes >= cfg.compact_min_dirty_bytes
                and self._dirty_bytes >= cfg.compact_min_dirty_ratio * max(closed, 1)
                and self._loop.time() >= self._compact_retry_at):
            self._start_compaction()

    def _start_compaction(self) -> None:
        self._compacting = True
        lg, gen = self.log, self.generation
        now = self.clock()
        if self.store is not None:
            fut = self._loop.create_task(lg.compact(self.config.tombstone_retention_ms, now))
            fut.add_done_callback(lambda f: self._compaction_done(f, gen))
            return
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
        if isinstance(exc, LeaseLostError):
            self._lost(exc)
            return
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
        self._closed_bytes = self._log_closed_bytes()
        log.info("shard %d: compacted: %s", self.index, fut.result())

    def _log_closed_bytes(self) -> int:
        if self.store is not None:
            return 0
        return sum(s.size for s in self.log.segments()[:-1])

    # ================================================================== retries
    def _backoff_s(self, streak: int) -> float:
        """The pause before the next attempt after ``streak`` failures in a row (a reload
        after failed writes, a compaction after failed ones)."""
        cfg = self.config
        cap = max(cfg.reload_backoff_ms, cfg.reload_backoff_max_ms)
        return min(cfg.reload_backoff_ms * (1 << min(max(streak - 1, 0), 30)), cap) / 1000


# A timer whose Result could not be written fires again this much later.
UNWRITABLE_RETRY_MS = 10_000

# RecordBatch v2 framing (storage/batch.py): the batch header, and the most one record adds
# around its key and value (seven varints).
_BATCH_HEADER = 61
_RECORD_FRAMING_MAX = 32


class Unwritable(Exception):
    """A Result's records cannot be written: a field over what it holds, or a record over
    message.max.bytes."""


def encode_checked(records, max_bytes: int) -> list:
    """The (key, value) bytes of the durable records, in order. Raises Unwritable when one
    cannot be encoded or takes more than ``max_bytes`` in a batch of its own: the check runs
    before anything is applied, so that a refused Result changes nothing."""
    out = []
    for r in records:
        if isinstance(r, Volatile):
            continue
        try:
            k, v = encode_record(r)
        except ValueError as exc:           # the codec's EncodeError: a field over its size
            raise Unwritable(str(exc)) from None
        size = _BATCH_HEADER + _RECORD_FRAMING_MAX + len(k) + (len(v) if v is not None else 0)
        if size > max_bytes:
            raise Unwritable("a %s record of %d bytes exceeds message.max.bytes %d"
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


def _outcome(fut):
    """The error of a write_flush future (it returns its OSError rather than raising)."""
    if fut.cancelled():                 # the executor was shut down under it
        return OSError("the log write was cancelled")
    exc = fut.exception()
    if exc is not None:
        return exc if isinstance(exc, OSError) else OSError(str(exc))
    return fut.result()
