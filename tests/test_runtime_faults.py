"""I/O faults in the flush, roll, compaction and reload paths of a shard (issue 16, point 4).

The log's file-system calls go through ``FileOps`` (storage/segment.py); ``FaultOps`` below
is the operating system with a counter in front: it fails the call with a chosen index (or
every call of a kind) with an OSError. The runtime's I/O pool is ``InlineExecutor``, which
runs each job at once in the loop's thread and hands its result back on a later loop turn
(as a thread pool would), so the same scenario makes the same calls in the same order and
"fail call k" means the same thing in every run.

The sweep tests run one scenario (classic groups joining -- one request parked at the join
barrier -- while offset commits are in flight, with small segments so that segments roll
and compaction runs) once to count its I/O calls, then once per call with that call
failing, and check: every request is answered (none left waiting), the shard serves again
once the fault is gone, nothing answered as committed is lost, and the live state equals a
fresh load of what the log holds. No run may leave a future with an unretrieved exception.
"""
import asyncio
import collections
import concurrent.futures
import errno
import gc
import logging
import os
import re
import subprocess
import sys

import pytest

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardState
from groupcoord.runtime.load import load_shard
from groupcoord.runtime.shard_runtime import ShardRuntime
from groupcoord.storage import Log, LogFailedError
from groupcoord.storage.log import LogClosedError
from groupcoord.storage.segment import FileOps

TOPICS = TopicCatalog.of(orders=4)
SHARD_CONFIG = ShardConfig(group_initial_rebalance_delay_ms=0,
                           consumer_assignment_interval_ms=0)
METHODS = ("open", "close", "write", "pread", "preadv", "lseek", "fsize", "ftruncate", "fsync",
           "fdatasync", "listdir", "unlink", "replace", "makedirs", "getsize", "read_file",
           "fsync_dir")
ERRNO = collections.defaultdict(lambda: errno.EIO, open=errno.EMFILE, write=errno.ENOSPC)
WAIT_S = 10          # a guard against hanging forever, not a timing assertion


class FaultOps(FileOps):
    """The OS file calls, counted while ``counting``; the call with index ``fail_at`` (or
    every call named in ``fail_names``) raises OSError instead (a failing close still
    releases its descriptor, as on Linux)."""

    def __init__(self):
        self.counting = False
        self.calls: list = []
        self.fail_at: set = set()
        self.fail_names: set = set()
        self.hits: list = []
        self.scenario_calls = 0

    def _call(self, name, real, args):
        if self.counting:
            i = len(self.calls)
            self.calls.append(name)
            if i in self.fail_at or name in self.fail_names:
                self.hits.append((i, name))
                if name == "close":
                    real(self, *args)
                raise OSError(ERRNO[name], "injected %s failure (call %d)" % (name, i))
        return real(self, *args)


def _wrap(name):
    real = getattr(FileOps, name)

    def method(self, *args):
        return self._call(name, real, args)
    method.__name__ = name
    return method


for _name in METHODS:
    setattr(FaultOps, _name, _wrap(_name))


class InlineExecutor(concurrent.futures.Executor):
    """Runs a job at once, in the caller's thread; the loop sees its end on a later turn."""

    def submit(self, fn, *args, **kwargs):
        f = concurrent.futures.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            f.set_exception(exc)
        return f


class HeldExecutor(concurrent.futures.Executor):
    """As InlineExecutor, but compaction jobs (the runtime submits them as a lambda) wait in
    ``held`` until ``release()``: a compaction still queued when the shard fails."""

    def __init__(self):
        self.held: list = []

    def submit(self, fn, *args, **kwargs):
        f = concurrent.futures.Future()
        if getattr(fn, "__name__", "") == "<lambda>":
            self.held.append((f, fn, args))
            return f
        return _run(f, fn, args)

    def release(self):
        held, self.held = self.held, []
        for f, fn, args in held:
            _run(f, fn, args)


def _run(f, fn, args):
    try:
        f.set_result(fn(*args))
    except BaseException as exc:
        f.set_exception(exc)
    return f


def runtime(directory, ops, io_pool=None, **kw):
    cfg = dict(shards=1, segment_bytes=1024, compact_min_dirty_bytes=1,
               compact_min_dirty_ratio=0.0, tombstone_retention_ms=0, reload_backoff_ms=1,
               reload_backoff_max_ms=4, shard_config=SHARD_CONFIG)
    cfg.update(kw)
    pool = io_pool or InlineExecutor()
    return ShardRuntime(0, str(directory), RuntimeConfig(data_dir=str(directory), **cfg),
                        TOPICS, io_pool=pool, cpu_pool=InlineExecutor(), file_ops=ops)


def commit(group, partition, offset):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                 member_id="", topics=[m.OffsetCommitRequestTopic(
                                     name="orders", partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=partition, committed_offset=offset)])])


def commit_code(resp):
    return resp.topics[0].partitions[0].error_code


def join(group, member=""):
    return m.JoinGroupRequest(group_id=group, session_timeout_ms=30000,
                              rebalance_timeout_ms=30000, member_id=member,
                              protocol_type="consumer",
                              protocols=[m.JoinGroupRequestProtocol(name="range",
                                                                    metadata=b"m")])


def sync(group, gen, member):
    return m.SyncGroupRequest(group_id=group, generation_id=gen, member_id=member,
                              assignments=[m.SyncGroupRequestAssignment(member_id=member,
                                                                        assignment=b"all")])


async def answered(*aws):
    """Every request answered; none left waiting (the WAIT_S guard only stops a hang)."""
    futs = [asyncio.ensure_future(a) for a in aws]
    done, pending = await asyncio.wait(futs, timeout=WAIT_S)
    assert not pending, "%d request(s) left waiting" % len(pending)
    return [f.result() for f in futs]


async def serving(rt):
    """Wait (bounded) until the shard is ACTIVE again after a failure."""
    for _ in range(WAIT_S * 200):
        if rt.state is ShardState.ACTIVE:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the shard did not serve again: %s" % rt.state)


async def scenario(rt, rounds=3):
    """Classic groups join (one JoinGroup parked at the barrier) while commits are in
    flight. -> {(group, partition): [(offset, error code)]} of every commit."""
    commits = collections.defaultdict(list)
    for r in range(rounds):
        grp = "cls%d" % r
        a = await rt.submit(join(grp), 3)
        assert a.error_code != E.UNKNOWN_SERVER_ERROR, a
        if a.error_code == 0:
            s = await rt.submit(sync(grp, a.generation_id, a.member_id), 3)
            assert s.error_code != E.UNKNOWN_SERVER_ERROR, s
        reqs = [(g, p, 10 * r + p) for g in ("g0", "g1", "g2") for p in (0, 1)]
        parked = asyncio.ensure_future(rt.submit(join(grp), 3))   # waits for a's rejoin
        results = await answered(*(rt.submit(commit(g, p, o), 8) for g, p, o in reqs))
        for (g, p, o), resp in zip(reqs, results):
            code = commit_code(resp)
            assert code in (0, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS), \
                (g, p, o, resp)
            commits[(g, p)].append((o, code))
        again, b = await answered(rt.submit(join(grp, a.member_id or ""), 3), parked)
        for resp in (again, b):
            assert resp.error_code != E.UNKNOWN_SERVER_ERROR, resp
    return commits


def fetch_all(rt):
    return {(g, p): (v.offset if v is not None else None)
            for g in ("g0", "g1", "g2") for p in (0, 1)
            for v in [rt.shard.offsets.get(g, {}).get(("orders", p))]}


def fresh_snapshot(directory):
    lg = Log(str(directory), segment_bytes=1024)
    try:
        sh = Shard(SHARD_CONFIG, TOPICS)
        load_shard(sh, lg)
        return sh.snapshot(durable=True)
    finally:
        lg.close(flush=False)


class LoopErrors:
    """The loop's exception handler: collects what asyncio reports (e.g. "Future exception
    was never retrieved", an exception in a callback)."""

    def __init__(self, loop):
        self.errors = []
        loop.set_exception_handler(lambda _l, ctx: self.errors.append(
            "%s %r" % (ctx.get("message"), ctx.get("exception"))))


def run_case(tmp_path, name, fail_at=(), fail_names=(), clear_after=None):
    """One run of the scenario with the given faults; -> (ops, commits, loop errors)."""
    directory = tmp_path / name
    ops = FaultOps()

    async def go():
        errors = LoopErrors(asyncio.get_running_loop())
        rt = runtime(directory, ops)
        await rt.load()
        ops.fail_at, ops.fail_names = set(fail_at), set(fail_names)
        ops.counting = True
        commits = await scenario(rt)
        ops.fail_names = set()              # a persistent fault clears
        await serving(rt)                   # (a reload still inside the counted window)
        ops.scenario_calls = len(ops.calls)
        ops.fail_at = set()
        # It serves again: a new commit is answered as committed.
        r = await answered(rt.submit(commit("g0", 0, 1000), 8))
        assert commit_code(r[0]) == 0, r
        commits[("g0", 0)].append((1000, 0))
        await rt.flush()
        got = fetch_all(rt)
        live = rt.shard.snapshot(durable=True)
        ops.counting = False
        await rt.close()
        gc.collect()
        await asyncio.sleep(0)
        return commits, got, live, errors.errors

    with asyncio.Runner() as runner:
        commits, got, live, errors = runner.run(go())
        gc.collect()
    # Nothing answered as committed is lost: offsets only grow here, so what the shard
    # holds is at least the last acknowledged value (and one that was sent).
    for key, sent in commits.items():
        acked = [o for o, code in sent if code == 0]
        if acked:
            assert got[key] is not None and got[key] >= max(acked), (key, sent, got[key])
        assert got[key] is None or got[key] in [o for o, _ in sent], (key, sent, got[key])
    # The state served is what the log holds.
    assert live == fresh_snapshot(directory)
    return ops, commits, errors


# ---------------------------------------------------------------------- the sweep
def test_every_io_call_of_flush_roll_and_compaction_failing_once(tmp_path):
    base, _c, errors = run_case(tmp_path, "base")
    assert not errors, errors
    calls = base.calls[:base.scenario_calls]
    kinds = collections.Counter(calls)
    print("I/O calls of the scenario: %d %s" % (len(calls), dict(kinds)))
    # The scenario exercises group commits, segment rolls and compaction.
    assert {"write", "fdatasync", "open", "fsync_dir", "close", "replace", "fsync",
            "pread"} <= set(kinds), kinds
    failed_shard = 0
    for k, name in enumerate(calls):
        ops, commits, errors = run_case(tmp_path, "k%d" % k, fail_at=[k])
        assert ops.hits[:1] == [(k, name)], (k, name, ops.hits)    # the same call failed
        assert not errors, (k, name, errors)
        if any(code == E.COORDINATOR_NOT_AVAILABLE for sent in commits.values()
               for _o, code in sent):
            failed_shard += 1
    # Write/fdatasync/roll faults failed the shard (compaction faults need not).
    assert failed_shard >= kinds["write"] + kinds["fdatasync"], failed_shard


def test_every_io_call_of_a_reload_failing_once(tmp_path):
    """A write fails (the shard reloads); then each call of that reload fails in turn: the
    reload is retried after a backoff and the shard serves again."""
    base, _c, _e = run_case(tmp_path, "base")
    first_sync = base.calls.index("fdatasync")
    ops, _c, errors = run_case(tmp_path, "eio", fail_at=[first_sync])
    assert not errors, errors
    # The calls between the failure and the next write: closing the failed log, the
    # reload's recovery and replay.
    after = ops.calls[first_sync + 1:ops.scenario_calls]
    reload_calls = after[:after.index("write")] if "write" in after else after
    print("I/O calls after the failed write, up to the next write: %s" % reload_calls)
    assert {"listdir", "read_file", "open"} <= set(reload_calls), reload_calls
    for j in range(first_sync + 1, first_sync + 1 + len(reload_calls)):
        ops, _c, errors = run_case(tmp_path, "r%d" % j, fail_at=[first_sync, j])
        assert [i for i, _n in ops.hits] == [first_sync, j], ops.hits
        assert not errors, (j, errors)


# ---------------------------------------------------------------------- fd exhaustion
def test_fd_exhaustion_during_a_segment_roll_answers_and_recovers(tmp_path, caplog):
    """EMFILE while opening the next segment: every waiting request is answered
    COORDINATOR_NOT_AVAILABLE (before the fix the shard never flushed again and nothing was
    answered); reloads fail while descriptors are short and are retried; once descriptors
    are back the shard serves what its log holds."""
    ops = FaultOps()

    async def go():
        errors = LoopErrors(asyncio.get_running_loop())
        rt = runtime(tmp_path, ops, compact_min_dirty_bytes=1 << 30)
        await rt.load()
        n = 0
        while len(rt.log.segments()) == 1 or rt.log.segments()[-1].size < 600:
            n += 1
            r = await rt.submit(commit("g%d" % (n % 3), 0, n), 8)
            assert commit_code(r) == 0
        acked = n
        ops.counting = True
        ops.fail_names = {"open"}           # no descriptor left: EMFILE
        results = await answered(*(rt.submit(commit("g%d" % (i % 3), 0, acked + i), 8)
                                   for i in range(1, 9)))
        assert {commit_code(r) for r in results} == {E.COORDINATOR_NOT_AVAILABLE}, results
        assert rt.state is not ShardState.ACTIVE
        while not any(i for i, name in ops.hits if name == "open" and i > 0) or \
                len(ops.hits) < 3:
            await asyncio.sleep(0.005)     # reloads fail on open too, and are retried
        assert rt.state is not ShardState.ACTIVE
        ops.fail_names = set()
        await serving(rt)
        r = await rt.submit(commit("g0", 0, 10_000), 8)
        assert commit_code(r) == 0
        last = {g: rt.shard.offsets[g][("orders", 0)].offset for g in ("g0", "g1", "g2")}
        await rt.close()
        gc.collect()
        await asyncio.sleep(0)
        return acked, last, errors.errors

    with caplog.at_level(logging.INFO, logger="groupcoord"):
        with asyncio.Runner() as runner:
            acked, last, errors = runner.run(go())
    assert not errors, errors
    # The acknowledged commits survived; the failed ones did not reach the log.
    assert last["g0"] == 10_000
    assert max(last["g1"], last["g2"]) <= acked
    text = caplog.text
    assert "[Errno %d] log segment roll failed" % errno.EMFILE in text, text
    assert re.search(r"reload from .* failed .*failure \d+ in a row", text), text


# ---------------------------------------------------------------------- backoff
def test_persistent_write_fault_backs_off_exponentially_and_logs_each_interval(tmp_path,
                                                                              caplog):
    ops = FaultOps()

    async def go():
        rt = runtime(tmp_path, ops, reload_backoff_ms=1, reload_backoff_max_ms=8)
        await rt.load()
        r = await rt.submit(commit("g", 0, 1), 8)
        assert commit_code(r) == 0
        ops.counting = True
        ops.fail_names = {"write"}          # ENOSPC on every write
        failures = 0
        while failures < 7:
            await serving(rt)
            r = await rt.submit(commit("g", 0, 2), 8)
            assert commit_code(r) == E.COORDINATOR_NOT_AVAILABLE
            failures += 1
        ops.fail_names = set()              # space again
        await serving(rt)
        r = await rt.submit(commit("g", 0, 3), 8)
        assert commit_code(r) == 0
        ops.fail_names = {"write"}          # a new fault: the backoff starts over
        r = await rt.submit(commit("g", 0, 4), 8)
        assert commit_code(r) == E.COORDINATOR_NOT_AVAILABLE
        await serving(rt)
        await rt.close()

    with caplog.at_level(logging.INFO, logger="groupcoord.runtime"):
        with asyncio.Runner() as runner:
            runner.run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "groupcoord.runtime"]
    fails = [x for x in lines if "answered COORDINATOR_NOT_AVAILABLE" in x]
    # One line per failure (so one per backoff interval), counting the failures in a row.
    assert len(fails) == 8, lines
    delays = [re.search(r"reloading .*in ([0-9.e-]+) s", x).group(1) for x in fails]
    assert delays == ["0.001", "0.002", "0.004", "0.008", "0.008", "0.008", "0.008",
                      "0.001"], fails
    assert "in a row" not in fails[0] and all(
        "failure %d in a row" % (i + 1) in x for i, x in enumerate(fails[1:7], 1)), fails
    assert "[Errno %d] log write failed" % errno.ENOSPC in fails[0], fails[0]
    assert any("log writes succeed again after 7 failure(s)" in x for x in lines), lines


def test_backoff_settings():
    cfg = RuntimeConfig(reload_backoff_ms=100, reload_backoff_max_ms=1000)
    rt = ShardRuntime(0, "unused", cfg, TOPICS)
    assert [rt._backoff_s(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    # A max below the initial pause: the initial pause throughout.
    rt = ShardRuntime(0, "unused", RuntimeConfig(reload_backoff_ms=5000,
                                                 reload_backoff_max_ms=1000), TOPICS)
    assert rt._backoff_s(1) == rt._backoff_s(9) == 5.0
    assert rt._backoff_s(10_000) == 5.0
    with pytest.raises(ValueError):
        RuntimeConfig(reload_backoff_max_ms=-1)


# ---------------------------------------------------------------------- closing
def test_compaction_queued_when_the_shard_fails_is_observed(tmp_path):
    """A compaction still queued when the shard fails runs against the closed log and
    raises LogClosedError: its future is observed (before the fix: "Future exception was
    never retrieved: ValueError('the log is closed')", simulation seeds 501887 and 502070)."""
    ops = FaultOps()
    pool = HeldExecutor()

    async def go():
        errors = LoopErrors(asyncio.get_running_loop())
        rt = runtime(tmp_path, ops, io_pool=pool)
        await rt.load()
        n = 0
        while not pool.held:
            n += 1
            assert commit_code(await rt.submit(commit("g", n % 2, n), 8)) == 0
        ops.counting = True
        ops.fail_names = {"fdatasync"}
        r = await rt.submit(commit("g", 0, 10_000), 8)
        assert commit_code(r) == E.COORDINATOR_NOT_AVAILABLE
        ops.fail_names = set()
        pool.release()                      # the compaction of the closed log runs now
        await asyncio.sleep(0)
        await serving(rt)
        gc.collect()
        await asyncio.sleep(0)
        await rt.close()
        return errors.errors

    with asyncio.Runner() as runner:
        errors = runner.run(go())
        gc.collect()
    assert not errors, errors


def test_closing_a_shard_with_a_flush_waiter_and_a_failed_write(tmp_path):
    """flush() waiters learn that their writes were lost when the shard fails; close()
    answers parked requests; nothing is left unretrieved."""
    ops = FaultOps()

    async def go():
        errors = LoopErrors(asyncio.get_running_loop())
        rt = runtime(tmp_path, ops)
        await rt.load()
        a = await rt.submit(join("cls"), 3)
        await rt.submit(sync("cls", a.generation_id, a.member_id), 3)
        parked = asyncio.ensure_future(rt.submit(join("cls"), 3))
        ops.counting = True
        ops.fail_names = {"write"}
        c = asyncio.ensure_future(rt.submit(commit("g", 0, 5), 8))
        await asyncio.sleep(0)
        with pytest.raises(LogFailedError):
            await rt.flush()
        p, c = await answered(parked, c)
        assert p.error_code == commit_code(c) == E.COORDINATOR_NOT_AVAILABLE
        ops.fail_names = set()
        await serving(rt)
        parked = asyncio.ensure_future(rt.submit(join("cls"), 3))
        await asyncio.sleep(0)
        await rt.close()
        p, = await answered(parked)
        assert p.error_code == E.COORDINATOR_NOT_AVAILABLE
        gc.collect()
        await asyncio.sleep(0)
        return errors.errors

    with asyncio.Runner() as runner:
        assert runner.run(go()) == []


# ---------------------------------------------------------------------- the log itself
def _fill(lg, n=8):
    for i in range(n):
        lg.append([(b"k%d" % i, b"v" * 200)])
        lg.flush()


def test_log_failed_roll_on_open_fails_the_log_and_reopens(tmp_path):
    ops = FaultOps()
    lg = Log(str(tmp_path), segment_bytes=1024, ops=ops)
    _fill(lg)
    durable = lg.durable_offset
    segs = len(lg.segments())
    ops.counting, ops.fail_names = True, {"open"}
    while len(lg.segments()) == segs:
        lg.append([(b"x", b"y" * 200)])
        durable = lg.durable_offset
        try:
            lg.flush()
        except LogFailedError as exc:
            assert exc.errno == errno.EMFILE and "roll failed" in str(exc)
            break
    else:
        raise AssertionError("the roll did not fail")
    with pytest.raises(LogFailedError):
        lg.append([(b"x", b"y")])
    assert lg.next_offset == lg.durable_offset == durable
    lg.close(flush=False)
    ops.fail_names = set()
    lg = Log(str(tmp_path), segment_bytes=1024, ops=ops)
    assert lg.next_offset == durable
    _fill(lg)
    assert len(lg.segments()) > segs
    lg.close()


@pytest.mark.parametrize("leftover", [False, True])
def test_log_roll_that_created_the_file_then_failed_does_not_wedge_later_rolls(tmp_path,
                                                                              leftover):
    """The directory fsync fails after the next segment was created: the log fails and
    removes the file again; reopened, the log rolls on as before (before the fix every
    later roll hit FileExistsError). leftover: the empty file stayed (a crash kept its
    directory entry): reopening takes it as the active segment."""
    ops = FaultOps()
    lg = Log(str(tmp_path), segment_bytes=1024, ops=ops)
    _fill(lg)
    before = sorted(os.listdir(tmp_path))
    segs = len(lg.segments())
    ops.counting, ops.fail_names = True, {"fsync_dir"}
    with pytest.raises(LogFailedError):
        for _ in range(20):
            lg.append([(b"x", b"y" * 200)])
            lg.flush()
    durable = lg.durable_offset
    assert ops.hits and ops.hits[0][1] == "fsync_dir"
    assert sorted(os.listdir(tmp_path)) == before           # the half-made file is gone
    lg.close(flush=False)
    ops.fail_names = set()
    if leftover:
        (tmp_path / ("%020d.log" % durable)).write_bytes(b"")
    lg = Log(str(tmp_path), segment_bytes=1024, ops=ops)
    assert lg.next_offset == durable
    if leftover:
        assert lg.segments()[-1].base_offset == durable and lg.segments()[-1].size == 0
    _fill(lg, 12)                                       # fills it and rolls on
    assert len(lg.segments()) >= segs + 2
    got = [o for o, _k, _v in lg.read(0)]
    assert got == list(range(lg.durable_offset))
    lg.close()


def test_log_closed_refuses_compaction_and_late_writes(tmp_path):
    lg = Log(str(tmp_path), segment_bytes=1024)
    _fill(lg)
    lg.append([(b"late", b"x")])
    job = lg.begin_flush()
    lg.close()                          # a flush in flight: close does not flush over it
    err = lg.write_flush(job)           # the write that ran after the close
    assert isinstance(err, OSError) and err.errno == errno.EBADF
    with pytest.raises(LogClosedError):
        lg.compact(0)
    with pytest.raises(LogClosedError):
        lg.append([(b"k", b"v")])
    assert isinstance(LogClosedError(), ValueError)      # what callers caught before


# ---------------------------------------------------------------------- RLIMIT_NOFILE
def _limit_run(tmp_path, soft, hard, max_connections):
    code = (
        "import logging, resource, sys\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO, format='%%(levelname)s "
        "%%(message)s')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d))\n"
        "from groupcoord.server.main import check_open_files_limit\n"
        "check_open_files_limit(%d, 4, %r)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
        % (soft, hard, max_connections, str(tmp_path)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip()), [x for x in p.stderr.splitlines() if "open files" in x]


def test_open_files_limit_is_raised_or_warned_at_startup(tmp_path):
    import resource
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 16
    cap = min(hard, 4096)
    seg_dir = tmp_path / "__consumer_offsets-0"
    seg_dir.mkdir()
    for i in range(3):
        (seg_dir / ("%020d.log" % i)).write_bytes(b"")
    # Short, and the hard limit allows enough: the soft limit goes up to the hard one.
    new, lines = _limit_run(tmp_path, 256, cap, 1000)
    assert new == cap and len(lines) == 1, lines
    assert lines[0].startswith("INFO") and "raised the soft limit from 256 to %d" % cap \
        in lines[0] and "1000 connections + 3 segment files + 4 shards x 2 + 64" in lines[0]
    # Short even at the hard limit: raised as far as allowed, one warning.
    new, lines = _limit_run(tmp_path, 256, 512, 1000)
    assert new == 512 and len(lines) == 1 and lines[0].startswith("WARNING"), lines
    assert "is below the 1075" in lines[0] and "raised from 256" in lines[0]
    # Enough already: unchanged, one line.
    new, lines = _limit_run(tmp_path, cap, cap, 100)
    assert new == cap and len(lines) == 1 and "covers the 175" in lines[0], lines
