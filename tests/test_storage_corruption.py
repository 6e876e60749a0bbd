"""Corruption fails loudly and narrowly (issue 16, point 6; docs/storage.md, "Recovery").

A data directory of 3 shards is written through the runtime (small segments, clean close), then
one shard's log is damaged: a bad CRC in a closed segment, a bad CRC in fsynced bytes at the
tail, a deleted first / middle / last segment, a segment cut at a batch boundary (closed or
active). For each:
  * `groupcoord log verify` reports it (exit 1, a line naming the file) and changes nothing;
  * the runtime Coordinator starts: that shard is FAILED with one log line naming the file and
    position, its groups get COORDINATOR_NOT_AVAILABLE, the other shards serve their offsets,
    and it does not retry;
while a torn tail after the durable point (a partial batch, or a whole batch with a bad CRC) is
still truncated at load and is only a note for verify. One case runs through `groupcoord serve`
(tests/serve_proc.py), one through the reload path (a write fault, then a reload that meets
corruption).
"""
import asyncio
import hashlib
import io
import logging
import os
import shutil

import pytest

from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime import RuntimeConfig, ShardSet, ShardState, shard_for
from groupcoord.storage import Log
from groupcoord.storage import batch as rb
from groupcoord.storage.checkpoint import CHECKPOINT_NAME
from groupcoord.storage.verify import analyze, verify_main
from groupcoord.groups.topics import TopicCatalog
from serve_proc import RawClient, ServeProc

SHARDS = 3
VICTIM = 1
SEGMENT_BYTES = 700
COMMITS = 40
TOPICS = TopicCatalog.of(orders=8)


def group_on(shard, prefix):
    return next(g for g in ("%s%d" % (prefix, i) for i in range(1000))
                if shard_for(g, SHARDS) == shard)


VICTIM_GROUP = group_on(VICTIM, "victim")
OTHERS = {s: group_on(s, "other") for s in range(SHARDS) if s != VICTIM}


def commit(group, partition, offset):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                 member_id="", topics=[m.OffsetCommitRequestTopic(
                                     name="orders", partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=partition,
                                         committed_offset=offset)])])


def fetch(group):
    return m.OffsetFetchRequest(group_id=group, topics=[m.OffsetFetchRequestTopic(
        name="orders", partition_indexes=list(range(8)))])


def fetched(resp):
    return {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions
            if p.committed_offset >= 0}


def config(d, **kw):
    return RuntimeConfig(data_dir=str(d), shards=SHARDS, segment_bytes=SEGMENT_BYTES,
                         reload_backoff_ms=20, **kw)


def want_victim():
    return {i % 8: 1000 + i for i in range(COMMITS)}    # the last commit per partition


async def _write(d):
    c = ShardSet(config(d), topics=TOPICS)
    await c.start()
    for i in range(COMMITS):        # one batch each: several segments
        r = await c.submit(commit(VICTIM_GROUP, i % 8, 1000 + i), 8)
        assert r.topics[0].partitions[0].error_code == 0
    for s, g in OTHERS.items():
        r = await c.submit(commit(g, s, 70 + s), 8)
        assert r.topics[0].partitions[0].error_code == 0
    await c.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "data"
    asyncio.run(_write(d))
    return d


@pytest.fixture
def data(pristine, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(pristine, d)
    return d


def shard_dir(d, i=VICTIM):
    return os.path.join(str(d), "__consumer_offsets-%d" % i)


def segments(d):
    sd = shard_dir(d)
    return [os.path.join(sd, f) for f in sorted(os.listdir(sd)) if f.endswith(".log")]


def batch_starts(path):
    return [b[0] for b in rb.scan(open(path, "rb").read())[0]]


def flip(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))


def cut(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


# ------------------------------------------------------------------ the damage
# Each: (data dir) -> (the file the report names, a phrase of the reason).
def crc_in_a_closed_segment(d):
    seg = segments(d)[1]
    flip(seg, batch_starts(seg)[0] + 40)          # the first batch, not the segment's last
    return seg, "CRC32C mismatch"


def crc_in_fsynced_tail(d):
    seg = segments(d)[-1]
    flip(seg, batch_starts(seg)[-1] + 40)         # the last batch: fsynced, then the close
    return seg, "says were fsynced"


def deleted_first_segment(d):
    seg = segments(d)[0]
    os.unlink(seg)
    return seg, "segment file missing"


def deleted_middle_segment(d):
    seg = segments(d)[2]
    os.unlink(seg)
    return seg, "segment file missing"


def deleted_last_segment(d):
    seg = segments(d)[-1]
    os.unlink(seg)
    return seg, "segment file missing"


def cut_last_segment_at_a_batch_boundary(d):
    seg = segments(d)[-1]
    cut(seg, batch_starts(seg)[-1])
    return seg, "cut at a batch boundary"


def cut_closed_segment_at_a_batch_boundary(d):
    seg = segments(d)[1]
    cut(seg, batch_starts(seg)[-1])
    return seg, "cut at a batch boundary"


def deleted_first_segment_without_checkpoint(d):
    os.unlink(os.path.join(shard_dir(d), CHECKPOINT_NAME))
    seg = segments(d)[0]
    os.unlink(seg)
    return seg, "the log starts with"


DAMAGE = [crc_in_a_closed_segment, crc_in_fsynced_tail, deleted_first_segment,
          deleted_middle_segment, deleted_last_segment, cut_last_segment_at_a_batch_boundary,
          cut_closed_segment_at_a_batch_boundary, deleted_first_segment_without_checkpoint]


def tree(d):
    """Every file under d with its bytes' digest (verify must change nothing)."""
    out = {}
    for root, _dirs, files in os.walk(str(d)):
        for f in files:
            p = os.path.join(root, f)
            out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def run_verify(path):
    out, err = io.StringIO(), io.StringIO()
    rc = verify_main(str(path), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_the_pristine_log_has_several_segments_and_verifies_clean(pristine):
    assert len(segments(pristine)) >= 4
    before = tree(pristine)
    rc, out, _ = run_verify(pristine)
    assert rc == 0, out
    assert out.strip().splitlines()[-1].startswith("checked %d log directories" % SHARDS)
    assert "clean" in out and "problem" not in out
    assert tree(pristine) == before


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__)
def test_verify_reports_the_damage_and_changes_nothing(data, damage):
    path, phrase = damage(data)
    before = tree(data)
    for target in (data, shard_dir(data)):          # the data dir, or one shard dir
        rc, out, _ = run_verify(target)
        assert rc == 1, out
        lines = [ln for ln in out.splitlines() if ln.startswith(path + ": position ")]
        assert lines and any(phrase in ln for ln in lines), out
        assert "log offset" in lines[0]
        assert "problem(s) in 1 log(s)" in out.splitlines()[-1]
    assert tree(data) == before


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__)
def test_a_corrupt_shard_fails_alone_with_one_line(data, damage, caplog):
    path, phrase = damage(data)

    async def go():
        c = ShardSet(config(data), topics=TOPICS)
        with caplog.at_level(logging.INFO, "groupcoord"):
            await c.start()                         # the node starts
        try:
            assert c.failed_shards().keys() == {VICTIM}
            for s in c.shards:
                assert s.state is (ShardState.FAILED if s.index == VICTIM
                                   else ShardState.ACTIVE)
            r = await c.submit(commit(VICTIM_GROUP, 0, 5), 8)
            assert r.topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE
            r = await c.submit(fetch(VICTIM_GROUP), 7)
            assert r.error_code == E.COORDINATOR_NOT_AVAILABLE
            for s, g in OTHERS.items():             # every other shard serves
                assert fetched(await c.submit(fetch(g), 7)) == {s: 70 + s}
                r = await c.submit(commit(g, 1, 9), 8)
                assert r.topics[0].partitions[0].error_code == 0
            gen = c.shards[VICTIM].generation
            await asyncio.sleep(0.2)                # 10 reload backoffs: no retry
            assert c.shards[VICTIM].state is ShardState.FAILED
            assert c.shards[VICTIM].generation == gen
        finally:
            await c.close()
    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("shard %d: corrupt log" % VICTIM)]
    assert len(lines) == 1, lines
    assert path in lines[0] and "position" in lines[0] and phrase in lines[0], lines[0]
    assert "COORDINATOR_NOT_AVAILABLE" in lines[0]
    assert not any("Traceback" in (r.exc_text or "") for r in caplog.records)
    summary = [r.getMessage() for r in caplog.records if "not serving" in r.getMessage()
               and r.getMessage().startswith("1 of %d shard(s)" % SHARDS)]
    assert len(summary) == 1 and "groupcoord log verify" in summary[0]


@pytest.mark.parametrize("tail", ["partial batch", "whole batch with a bad CRC"])
def test_a_torn_tail_after_the_durable_point_is_truncated(data, tail, caplog):
    seg = segments(data)[-1]
    size = os.path.getsize(seg)
    extra = bytearray(rb.encode_batch([(b"k" * 20, b"v" * 40)], 10_000, 0))
    if tail == "partial batch":
        extra = extra[:len(extra) // 2]             # a write cut by a kill -9
    else:
        extra[-3] ^= 0xFF                           # written, never fsynced, garbled
    with open(seg, "ab") as f:
        f.write(bytes(extra))
    before = tree(data)
    rc, out, _ = run_verify(data)
    assert rc == 0, out
    assert any(ln.startswith("note: %s: position %d: torn tail" % (seg, size))
               for ln in out.splitlines()), out
    assert tree(data) == before

    async def go():
        c = ShardSet(config(data), topics=TOPICS)
        with caplog.at_level(logging.WARNING, "groupcoord"):
            await c.start()
        try:
            assert c.failed_shards() == {} and c.active()
            assert fetched(await c.submit(fetch(VICTIM_GROUP), 7)) == want_victim()
        finally:
            await c.close()
    asyncio.run(go())
    assert os.path.getsize(seg) == size
    assert any("truncating %s at position %d" % (seg, size) in r.getMessage()
               for r in caplog.records)
    assert run_verify(data)[0] == 0


def test_a_reload_that_meets_corruption_stops_there(data, monkeypatch, caplog):
    """A write fault fails the shard; its reload finds a closed segment deleted meanwhile:
    FAILED with one line, and no reload loop."""
    async def go():
        c = ShardSet(config(data), topics=TOPICS)
        await c.start()
        try:
            rt = c.shards[VICTIM]
            os.unlink(segments(data)[1])            # the open log still holds it open
            real = Log.write_flush

            def eio_once(lg, job):
                monkeypatch.setattr(Log, "write_flush", real)
                return OSError(5, "EIO (injected)")
            monkeypatch.setattr(Log, "write_flush", eio_once)
            with caplog.at_level(logging.INFO, "groupcoord"):
                r = await c.submit(commit(VICTIM_GROUP, 0, 1), 8)
                assert r.topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE
                for _ in range(300):
                    if rt.corrupt is not None:
                        break
                    await asyncio.sleep(0.01)
                assert rt.corrupt is not None and rt.state is ShardState.FAILED
                gen = rt.generation
                await asyncio.sleep(0.3)            # 15 reload backoffs
                assert rt.state is ShardState.FAILED and rt.generation == gen
            g = OTHERS[0]
            assert fetched(await c.submit(fetch(g), 7)) == {0: 70}
        finally:
            await c.close()
    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if "corrupt log" in r.getMessage()]
    assert len(lines) == 1 and "segment file missing" in lines[0], lines
    assert not [r for r in caplog.records if "reload from" in r.getMessage()]


def test_serve_starts_with_a_corrupt_shard_and_serves_the_others(data):
    path, _phrase = deleted_middle_segment(data)
    with ServeProc(data, shards=SHARDS) as srv:
        line = [ln for ln in srv._stdout_lines if ln.startswith("groupcoord: listening")]
        assert len(line) == 1 and "(%d shards loaded from" % (SHARDS - 1) in line[0], line
        with RawClient(srv.host, srv.port) as cl:
            r = cl.call(commit(VICTIM_GROUP, 0, 5), 8)
            assert r.topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE
            for s, g in OTHERS.items():
                assert fetched(cl.call(fetch(g), 7)) == {s: 70 + s}
                r = cl.call(commit(g, 2, 11), 8)
                assert r.topics[0].partitions[0].error_code == 0
        assert srv.stop() == 0                      # graceful: SIGTERM, exit 0
        err = srv.stderr_text()
    lines = [ln for ln in err.splitlines() if "corrupt log" in ln]
    assert len(lines) == 1 and path in lines[0] and "segment file missing" in lines[0], err
    assert "Traceback" not in err


def test_recovery_analysis_matches_what_log_does(data):
    """Log refuses exactly what analyze() reports, with the first problem in its message."""
    from groupcoord.storage import CorruptLogError
    path, _ = cut_closed_segment_at_a_batch_boundary(data)
    found = analyze(shard_dir(data))
    assert found.problems and found.problems[0].path == path
    with pytest.raises(CorruptLogError) as exc:
        Log(shard_dir(data))
    assert exc.value.path == path and exc.value.problems == tuple(found.problems)
    assert "log offset %d" % found.problems[0].offset in str(exc.value)
