"""The durable log (groupcoord.storage.Log): group commit, segments and index, reopen,
recovery from torn tails and bit flips, compaction (incl. coordinator replay equality)."""
import logging
import os
import threading

import pytest
from kafka.record.memory_records import MemoryRecords

from coord_harness import Harness
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import decode_record, encode_record
from groupcoord.groups.shard import Shard
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.storage import CorruptLogError, Log, segment_name
from groupcoord.storage import batch as rb

TS = 1_700_000_000_000


def rec(i):
    return (b"key-%d" % (i % 13), b"value-%d" % i if i % 11 else None)


def fill(lg, n, per_batch=3, flush_every=2, ts=TS):
    out = []
    i = 0
    k = 0
    while i < n:
        recs = [rec(j) for j in range(i, min(n, i + per_batch))]
        out.extend(lg.append(recs, ts))
        i += len(recs)
        k += 1
        if k % flush_every == 0:
            lg.flush()
    lg.flush()
    return out


def files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".log"))


def _drop_checkpoint(d):
    if os.path.exists(os.path.join(d, "log-checkpoint")):
        os.unlink(os.path.join(d, "log-checkpoint"))


def test_append_flush_read_and_offsets(tmp_path):
    with Log(str(tmp_path)) as lg:
        assert lg.append([(b"a", b"1"), (b"b", None)], TS) == range(0, 2)
        assert lg.durable_offset == 0 and list(lg.read()) == []   # buffered, not written
        assert lg.append([(b"c", b"3")], TS) == range(2, 3)
        assert lg.flush() == 3
        assert list(lg.read()) == [(0, b"a", b"1"), (1, b"b", None), (2, b"c", b"3")]
        assert list(lg.read(2)) == [(2, b"c", b"3")]
        assert lg.flush() == 3                                     # nothing new
    assert files(str(tmp_path)) == [segment_name(0)]


def test_group_commit_is_one_write_and_one_fsync(tmp_path, monkeypatch):
    calls = {"write": 0, "fdatasync": 0}
    real_write, real_sync = os.write, os.fdatasync

    def write(fd, data):
        calls["write"] += 1
        return real_write(fd, data)

    def fdatasync(fd):
        calls["fdatasync"] += 1
        return real_sync(fd)

    with Log(str(tmp_path)) as lg:
        for i in range(50):
            lg.append([rec(i)], TS)
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        assert lg.flush() == 50
        assert calls == {"write": 1, "fdatasync": 1}
        monkeypatch.undo()
        assert len(rb.scan(open(lg.segments()[-1].path, "rb").read())[0]) == 50


def test_unsafe_mode_skips_fsync_and_is_named_so(tmp_path, monkeypatch):
    with pytest.raises(ValueError):
        Log(str(tmp_path), fsync="never")
    monkeypatch.setattr(os, "fdatasync", lambda fd: pytest.fail("fsync in unsafe mode"))
    with Log(str(tmp_path), fsync="unsafe-no-fsync") as lg:
        lg.append([rec(1)], TS)
        assert lg.flush() == 1


def test_segments_roll_index_and_reopen(tmp_path):
    d = str(tmp_path)
    with Log(d, segment_bytes=2000, index_interval_bytes=300) as lg:
        fill(lg, 400)
        segs = lg.segments()
        assert len(segs) > 5
        assert all(s.size <= 2000 + 400 for s in segs)
        assert all(s.index_entries >= 2 for s in segs[:-1])
        assert [s.base_offset for s in segs] == sorted(s.base_offset for s in segs)
        for s in segs:          # every closed segment is a valid Kafka record set on its own
            assert os.path.basename(s.path) == segment_name(s.base_offset)
            mr = MemoryRecords(open(s.path, "rb").read())
            first = mr.next_batch()
            assert first.base_offset == s.base_offset and first.validate_crc()
        want = [(i,) + rec(i) for i in range(400)]
        assert list(lg.read()) == want
        for start in (0, 1, 57, 199, 200, 398, 399, 400, 1000):
            assert list(lg.read(start)) == want[start:]
    with Log(d, segment_bytes=2000) as lg:
        assert lg.next_offset == lg.durable_offset == 400 and lg.truncated_bytes == 0
        assert list(lg.read()) == want
        assert lg.append([(b"x", b"y")], TS) == range(400, 401)
    with Log(d) as lg:
        assert list(lg.read(400)) == [(400, b"x", b"y")]


def test_large_batch_bigger_than_the_read_chunk(tmp_path):
    big = b"z" * (3 << 20)
    with Log(str(tmp_path)) as lg:
        lg.append([(b"a", b"1")], TS)
        lg.append([(b"b", big)], TS)
        lg.append([(b"c", b"3")], TS)
        lg.flush()
        assert list(lg.read()) == [(0, b"a", b"1"), (1, b"b", big), (2, b"c", b"3")]


def test_empty_directory_and_empty_active_segment_after_roll(tmp_path):
    d = str(tmp_path / "new")
    with Log(d) as lg:
        fill(lg, 10)
        lg.roll()
        assert files(d) == [segment_name(0), segment_name(10)]
    with Log(d) as lg:
        assert lg.next_offset == 10
        assert lg.append([(b"k", b"v")], TS) == range(10, 11)


def _two_batch_log(d):
    with Log(d) as lg:
        lg.append([rec(i) for i in range(4)], TS)
        lg.flush()
        lg.append([rec(i) for i in range(4, 9)], TS)
        lg.flush()
        (seg,) = lg.segments()
    data = open(seg.path, "rb").read()
    first_end = rb.scan(data)[0][0][5]
    return seg.path, data, first_end


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path, caplog):
    path, data, first_end = _two_batch_log(str(tmp_path / "orig"))
    d = str(tmp_path / "t")
    os.makedirs(d)
    p = os.path.join(d, os.path.basename(path))
    for cut in range(first_end, len(data)):
        with open(p, "wb") as f:
            f.write(data[:cut])
        # A torn tail comes from an unclean stop, which writes no checkpoint: drop the one
        # the previous round's clean close wrote (it vouches for that round's bytes).
        _drop_checkpoint(d)
        caplog.clear()
        with caplog.at_level(logging.WARNING, "groupcoord.storage"):
            with Log(d) as lg:
                assert lg.next_offset == 4
                assert [r[0] for r in lg.read()] == [0, 1, 2, 3]
                assert lg.truncated_bytes == cut - first_end
                lg.append([(b"again", b"1")], TS)
        assert os.path.getsize(p) == first_end + len(rb.encode_batch([(b"again", b"1")], 4, TS))
        if cut > first_end:
            msgs = [r.getMessage() for r in caplog.records]
            assert len(msgs) == 1 and p in msgs[0] and "position %d" % first_end in msgs[0]


def test_bit_flip_in_the_last_batch_truncates_it(tmp_path):
    path, data, first_end = _two_batch_log(str(tmp_path / "orig"))
    d = str(tmp_path / "t")
    os.makedirs(d)
    p = os.path.join(d, os.path.basename(path))
    # Every byte covered by the CRC or checked (length, magic, crc); not baseOffset/epoch.
    for i in list(range(first_end + 8, first_end + 12)) + list(range(first_end + 16, len(data))):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with open(p, "wb") as f:
            f.write(bad)
        with Log(d) as lg:
            assert [r[0] for r in lg.read()] == [0, 1, 2, 3], i
        assert os.path.getsize(p) == first_end


def test_bit_flip_in_the_middle_is_a_startup_error_naming_file_and_offset(tmp_path):
    path, data, first_end = _two_batch_log(str(tmp_path / "orig"))
    d = str(tmp_path / "t")
    os.makedirs(d)
    p = os.path.join(d, os.path.basename(path))
    positions = list(range(0, 12)) + list(range(16, first_end))   # all but leader epoch
    for i in positions:
        for bit in (0, 6):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            with open(p, "wb") as f:
                f.write(bad)
            try:
                Log(d).close()
            except CorruptLogError as exc:
                e = exc
            else:
                pytest.fail("no startup error for a flip of bit %d at byte %d" % (bit, i))
            assert e.path == p and e.offset == 0 and e.position in (0, first_end), (i, bit)
            assert p in str(e) and "log offset 0" in str(e)
            assert open(p, "rb").read() == bytes(bad)              # nothing was truncated


def test_corruption_in_a_closed_segment_followed_by_another_segment(tmp_path):
    d = str(tmp_path)
    with Log(d, segment_bytes=500) as lg:
        fill(lg, 100)
        segs = lg.segments()
    victim = segs[1].path
    bad = bytearray(open(victim, "rb").read())
    bad[-5] ^= 0xFF                     # the last batch of a closed segment
    open(victim, "wb").write(bad)
    with pytest.raises(CorruptLogError, match=os.path.basename(victim)):
        Log(d)


def test_torn_tail_then_an_empty_new_segment_is_recovered(tmp_path):
    d = str(tmp_path)
    with Log(d) as lg:
        fill(lg, 10)
        (seg,) = lg.segments()
    data = open(seg.path, "rb").read()
    open(seg.path, "wb").write(data[:-3])
    open(os.path.join(d, segment_name(10)), "wb").close()   # crash right after a roll
    _drop_checkpoint(d)         # ... before any checkpoint (the clean close above wrote one)
    with Log(d) as lg:
        assert lg.next_offset < 10 and files(d) == [segment_name(0)]


def test_leftover_compaction_output_is_removed(tmp_path):
    d = str(tmp_path)
    with Log(d) as lg:
        fill(lg, 5)
    open(os.path.join(d, segment_name(0) + ".cleaned"), "wb").write(b"partial")
    with Log(d) as lg:
        assert [r[0] for r in lg.read()] == list(range(5))
    assert not any(f.endswith(".cleaned") for f in os.listdir(d))


def test_failed_write_fails_the_log_until_reopened(tmp_path, monkeypatch):
    from groupcoord.storage import LogFailedError
    d = str(tmp_path)
    lg = Log(d)
    fill(lg, 5)
    lg.append([(b"k", b"v")], TS)

    def boom(fd):
        raise OSError(5, "EIO")

    monkeypatch.setattr(os, "fdatasync", boom)
    with pytest.raises(LogFailedError):
        lg.flush()
    monkeypatch.undo()
    with pytest.raises(LogFailedError):
        lg.append([(b"k", b"v")], TS)
    lg.close()
    with Log(d) as lg2:
        assert lg2.next_offset == 5


# ---------------------------------------------------------------------- compaction
def test_compaction_keeps_exactly_the_latest_value_per_key(tmp_path):
    d = str(tmp_path)
    with Log(d, segment_bytes=600) as lg:
        fill(lg, 300, ts=TS)
        lg.roll()
        closed = lg.segments()[:-1]
        before = list(lg.read())
        latest = {}
        for o, k, v in before:
            latest[k] = (o, v)
        stats = lg.compact(retention_ms=10 ** 9, now_ms=TS + 1000)   # tombstones kept
        after = list(lg.read())
        assert sorted(after) == sorted((o, k, v) for k, (o, v) in latest.items())
        assert stats.records_before == 300 and stats.records_after == len(latest)
        assert stats.segments_rewritten > 0 and stats.bytes_after < stats.bytes_before
        assert [s.base_offset for s in lg.segments()[:-1]] == [s.base_offset for s in closed]
        assert lg.append([(b"new", b"1")], TS) == range(300, 301)     # offsets unaffected
        lg.flush()
        tomb = [k for k, (o, v) in latest.items() if v is None]
        assert tomb
        stats = lg.compact(retention_ms=500, now_ms=TS + 1000)        # now they are old
        assert stats.tombstones_dropped == len(tomb)
        left = {k for _o, k, _v in lg.read()}
        assert not left & set(tomb)
    with Log(d) as lg:                                                # reopen after compaction
        assert lg.next_offset == 301
        assert sorted(lg.read()) == sorted(
            [(o, k, v) for k, (o, v) in latest.items() if v is not None] + [(300, b"new", b"1")])
        for s in lg.segments():
            mr = MemoryRecords(open(s.path, "rb").read())
            while mr.has_next():
                assert mr.next_batch().validate_crc()


def test_compaction_runs_while_appends_continue(tmp_path):
    d = str(tmp_path)
    with Log(d, segment_bytes=800) as lg:
        fill(lg, 600)
        lg.roll()
        errors = []

        def worker():
            try:
                for _ in range(5):
                    lg.compact(10 ** 9, TS)
            except Exception as e:          # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=worker)
        t.start()
        n = 600
        while t.is_alive() or n < 900:
            lg.append([rec(n)], TS)
            n += 1
            lg.flush()
            it = lg.read(n - 1)
            assert next(it)[0] == n - 1
        t.join()
        assert not errors
        got = list(lg.read())
        latest = {}
        for i in range(n):
            latest[rec(i)[0]] = i
        offs = [o for o, _k, _v in got]
        assert offs == sorted(offs) and set(latest.values()) <= set(offs)
        assert set(range(len(offs))) != set(offs)         # something was compacted away
    with Log(d) as lg:
        assert lg.next_offset == n


def _coordinator_history():
    """Records of OffsetCommits and KIP-848 consumer heartbeats through a real Shard."""
    h = Harness(config=ShardConfig(group_initial_rebalance_delay_ms=0),
                topics=TopicCatalog.of(t=6, u=3))
    epoch = {}
    owned = {}

    def hb(mid, **kw):
        r = h.send(m.ConsumerGroupHeartbeatRequest(group_id="cg", member_id=mid, **kw), 1)
        assert r.error_code == 0, r
        epoch[mid] = r.member_epoch
        if r.assignment is not None:
            owned[mid] = [m.ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=tp.topic_id, partitions=list(tp.partitions))
                for tp in r.assignment.topic_partitions]
        return r

    for mid in ("m1", "m2", "m3"):
        hb(mid, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=["t", "u"],
           topic_partitions=[])
    for rnd in range(6):
        for mid in sorted(epoch):
            hb(mid, member_epoch=epoch[mid], topic_partitions=owned.get(mid, []))
        for grp in ("s1", "s2"):
            h.send(m.OffsetCommitRequest(
                group_id=grp, generation_id_or_member_epoch=-1, member_id="",
                topics=[m.OffsetCommitRequestTopic(name="t", partitions=[
                    m.OffsetCommitRequestPartition(partition_index=p,
                                                   committed_offset=rnd * 100 + p,
                                                   committed_metadata="r%d" % rnd)
                    for p in range(4)])]), 8)
        if rnd == 3:
            hb("m3", member_epoch=-1)                 # leaves: tombstones for its records
            del epoch["m3"]
        h.advance(1000)
    return h


def _replay(records, h):
    fresh = Shard(h.config, h.shard.topics, strict=True)
    for _o, k, v in records:
        fresh.replay(decode_record(k, v))
    return fresh.snapshot(durable=True)


def test_coordinator_replay_after_compaction_has_the_same_snapshot(tmp_path):
    h = _coordinator_history()
    assert len(h.log) > 30
    want = h.shard.snapshot(durable=True)
    d = str(tmp_path)
    with Log(d, segment_bytes=700) as lg:
        for i, r in enumerate(h.log):
            lg.append([encode_record(r)], TS + i)
            if i % 3 == 2:
                lg.flush()
        lg.roll()
        assert _replay(lg.read(), h) == want
        stats = lg.compact(retention_ms=0, now_ms=TS + 10 ** 6)   # drop every old tombstone
        assert stats.records_after < stats.records_before
        assert _replay(lg.read(), h) == want
        keys = [k for _o, k, _v in lg.read()]
        assert len(keys) == len(set(keys))                        # one record per key
    with Log(d) as lg:
        assert _replay(lg.read(), h) == want
