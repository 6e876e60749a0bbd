"""runtime/load.py: load_shard gives the state of the reference loop

    for _off, key, value in log.read(): shard.replay(decode_record(key, value))

on logs of real coordinator traffic: every harness the coordinator suites build (classic,
consumer, connect, offsets, both migrations, with their leaves, expiries and conversion
tombstones) is recorded, written to a log with seeded random batching and rolling, with
offset deletes (tombstones) mixed in, and loaded with and without last-record-per-key
dedup, before and after compaction. Plus errors, chunk boundaries and the stats.
"""
import os
import random

import pytest

import coord_harness
from groupcoord.groups.records import Record, decode_record, encode_record
from groupcoord.groups.shard import Shard
from groupcoord.protocol import messages as m
from groupcoord.runtime import load as load_mod
from groupcoord.runtime.load import LoadStats, load_shard
from groupcoord.storage import Log
from groupcoord.storage.batch import CorruptBatchError, encode_batch

HERE = os.path.dirname(os.path.abspath(__file__))
SUITES = ["test_coord_classic.py", "test_coord_consumer.py", "test_coord_connect.py",
          "test_coord_offsets.py", "test_coord_migration.py",
          "test_coord_migration_connect.py"]
TS = 1_700_000_000_000


# ---------------------------------------------------------------------- recorded traffic
class _Recorder:
    """A pytest plugin that keeps every Harness the coordinator suites create."""

    def __init__(self):
        self.harnesses = []

    def pytest_sessionstart(self, session):
        orig = coord_harness.Harness.__init__
        made = self.harnesses

        def init(h, *a, **kw):
            orig(h, *a, **kw)
            made.append((h, session))
        self._orig = orig
        coord_harness.Harness.__init__ = init

    def pytest_sessionfinish(self, session):
        coord_harness.Harness.__init__ = self._orig


@pytest.fixture(scope="module")
def traffic():
    """(name, config, topics, records) of every harness with durable records."""
    rec = _Recorder()
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-x",
                      "--capture=sys"] + [os.path.join(HERE, f) for f in SUITES],
                     plugins=[rec])
    assert rc == 0, "the coordinator suites failed (exit %s)" % rc
    out = [("harness-%d" % i, h.config, h.shard.topics, list(h.log))
           for i, (h, _s) in enumerate(rec.harnesses) if h.log]
    types = {r.type for _n, _c, _t, recs in out for r in recs}
    assert len(types) >= 14, sorted(t.name for t in types)     # every group type's records
    assert any(r.value is None for _n, _c, _t, recs in out for r in recs)
    return out


def with_offset_deletes(records, rnd):
    """records with, after some offset commits, a tombstone of that offset (an offset
    delete), and sometimes a re-commit after it."""
    out = []
    for r in records:
        out.append(r)
        if isinstance(r.key, m.OffsetCommitKey) and r.value is not None \
                and rnd.random() < 0.3:
            out.append(Record(r.key, None))
            if rnd.random() < 0.5:
                out.append(r)
    return out


def write_log(d, records, rnd, segment_bytes):
    """records into a Log at d with random batch sizes, flushes and rolls."""
    lg = Log(d, fsync="unsafe-no-fsync", segment_bytes=segment_bytes)
    i = 0
    while i < len(records):
        n = rnd.choice([1, 1, 2, 3, 5, 8, 40])
        lg.append([encode_record(r) for r in records[i:i + n]], TS + i)
        i += n
        if rnd.random() < 0.4:
            lg.flush()
        if rnd.random() < 0.05:
            lg.roll()
    lg.flush()
    return lg


def naive(config, topics, lg):
    sh = Shard(config, topics, strict=True)
    for _off, k, v in lg.read():
        sh.replay(decode_record(k, v))
    return sh


def loaded(config, topics, lg, **kw):
    sh = Shard(config, topics, strict=True)
    stats = load_shard(sh, lg, **kw)
    return sh, stats


def same_state(a, b, now):
    assert a.snapshot(durable=True) == b.snapshot(durable=True)
    assert a.snapshot(durable=False) == b.snapshot(durable=False)
    a.rearm(now)
    b.rearm(now)
    assert a.timers.items() == b.timers.items()


def test_load_equals_naive_replay_on_recorded_traffic(traffic, tmp_path):
    seed = int(os.environ.get("GROUPCOORD_LOAD_SEED", random.randrange(1 << 30)))
    print("seed", seed, "(GROUPCOORD_LOAD_SEED repeats a run)")
    rnd = random.Random(seed)
    total = dropped = 0
    for i, (name, config, topics, records) in enumerate(traffic):
        records = with_offset_deletes(records, rnd)
        d = str(tmp_path / name)
        lg = write_log(d, records, rnd, rnd.choice([600, 2000, 1 << 20]))
        try:
            want = naive(config, topics, lg)
            stage = "full log"
            for dedup in (True, False):
                got, stats = loaded(config, topics, lg, dedup=dedup)
                assert stats.records_read == len(records)
                if not dedup:
                    assert stats.records_replayed == len(records)
                same_state(got, want, TS)
                want = naive(config, topics, lg)           # rearm changed its timers
            total += stats.records_read
            dropped += stats.records_read - loaded(config, topics, lg)[1].records_replayed
            # Compaction of the closed segments, keeping and then dropping tombstones: the
            # load must still equal the reference loop on the compacted log. (Whether that
            # equals the state before compaction is compaction's business; it must, and that
            # is checked here too.)
            lg.roll()
            before = naive(config, topics, lg).snapshot(durable=True)
            for retention in (1 << 40, 0):
                lg.compact(retention, now_ms=TS + 10 ** 9)
                stage = "compacted, retention %d" % retention
                for dedup in (True, False):
                    got, _ = loaded(config, topics, lg, dedup=dedup)
                    same_state(got, naive(config, topics, lg), TS)
                # Compaction changes nothing replay can see, whether it keeps tombstones or
                # drops them (a conversion's classic tombstone dropped leaves the offsets'
                # group to be replaced by the new type: classic/group.py's is_offsets_only).
                assert naive(config, topics, lg).snapshot(durable=True) == before
        except AssertionError as exc:
            raise AssertionError("%s, %s (seed %d): %s" % (name, stage, seed, exc)) from exc
        finally:
            lg.close()
    assert dropped > 0.2 * total        # the traffic repeats keys: dedup had work to do


def test_interleaved_groups_of_one_shard(traffic, tmp_path):
    """Several groups' histories interleaved in one log, as a shard holds them: the
    consumer suite's harnesses with the default config, group ids made distinct."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    chosen = [t for t in traffic if t[1] is None and not t[2].by_id][:40]
    assert len(chosen) >= 5
    streams = []
    for j, (_n, _c, _t, records) in enumerate(chosen):
        streams.append([rename(r, "h%d-" % j) for r in with_offset_deletes(records, rnd)])
    merged = []
    while any(streams):
        s = rnd.choice([s for s in streams if s])
        merged.append(s.pop(0))
    lg = write_log(str(tmp_path / "mix"), merged, rnd, 4000)
    try:
        want = naive(None, chosen[0][2], lg)
        got, stats = loaded(None, chosen[0][2], lg)
        assert stats.records_replayed < stats.records_read
        same_state(got, want, TS)
    finally:
        lg.close()


def rename(rec, prefix):
    import msgspec
    key = rec.key
    for f in ("group", "group_id"):
        if f in key.__struct_fields__:
            key = msgspec.structs.replace(key, **{f: prefix + getattr(key, f)})
    return Record(key, rec.value)


# ---------------------------------------------------------------------- unit behaviour
def commits(n, groups=10, start=0):
    return [encode_record(Record(
        m.OffsetCommitKey(group="g%d" % (i % groups), topic="t", partition=i % 7),
        m.OffsetCommitValue(offset=i, leader_epoch=1, metadata="x" * (i % 3),
                            commit_timestamp=TS + i))) for i in range(start, start + n)]


def test_stats_progress_and_empty_log(tmp_path):
    with Log(str(tmp_path / "e")) as lg:
        sh = Shard()
        st = load_shard(sh, lg)
        assert st[:5] == (0, 0, 0, 0, 1) and sh.snapshot() == Shard().snapshot()
    seen = []
    with Log(str(tmp_path / "a"), fsync="unsafe-no-fsync", segment_bytes=4000) as lg:
        recs = commits(500)
        for i in range(0, 500, 10):
            lg.append(recs[i:i + 10], TS)
            lg.flush()
        sh = Shard()
        st = load_shard(sh, lg, progress=lambda done, total: seen.append((done, total)))
        assert isinstance(st, LoadStats)
        assert st.records_read == 500 and st.records_replayed == 70      # 10 groups x 7
        assert st.batches == 50 and st.segments == len(lg.segments()) > 3
        assert st.bytes == sum(s.size for s in lg.segments())
        assert seen[-1] == (st.bytes, st.bytes) and len(seen) == st.segments
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)
        assert st.read_rate > 0 and st.replay_rate > 0
        assert sh.snapshot() == naive(None, None, lg).snapshot()


def test_batches_across_chunk_boundaries_and_larger_than_a_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(load_mod, "CHUNK", 3000)
    with Log(str(tmp_path / "c"), fsync="unsafe-no-fsync") as lg:
        recs = commits(2000)
        i = 0
        for n in [1, 7, 300, 2, 500, 13] * 20:            # 300+ records: > one chunk
            if i >= len(recs):
                break
            lg.append(recs[i:i + n], TS)
            i += n
        lg.flush()
        for dedup in (True, False):
            sh = Shard()
            st = load_shard(sh, lg, dedup=dedup)
            assert st.records_read == len(recs)
            assert sh.snapshot() == naive(None, None, lg).snapshot()


def test_null_keys_are_replayed_and_fail_as_in_the_reference(tmp_path):
    with Log(str(tmp_path / "n")) as lg:
        lg.append(commits(3) + [(None, b"\x00\x01")])
        lg.flush()
        with pytest.raises(TypeError):
            naive(None, None, lg)
        with pytest.raises(TypeError):
            load_shard(Shard(), lg)


@pytest.mark.parametrize("key,value", [
    (b"\x00\x63" + b"\x00\x01g", None),                         # unknown type 99
    (b"\x00\x01\x00\x01g", b"\x00\x04"),                        # truncated key
    (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01\x00", None),   # trailing key byte
    (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01", b"\xff\xff"),   # value version -1
    (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01", b"\x00\x04\x00"),   # truncated value
    (b"\x00\x01\x00\x01\xff\x00\x01t\x00\x00\x00\x01", None),   # bad UTF-8
    (b"\x00", None),                                            # no type
])
def test_bad_records_raise_the_reference_error(tmp_path, key, value):
    with Log(str(tmp_path / "b")) as lg:
        lg.append(commits(5) + [(key, value)])
        lg.flush()
        with pytest.raises(Exception) as ref:
            naive(None, None, lg)
        for dedup in (True, False):
            with pytest.raises(type(ref.value)) as got:
                load_shard(Shard(), lg, dedup=dedup)
            assert str(got.value) == str(ref.value)


def test_newer_value_version_and_legacy_type_take_the_reference_path(tmp_path):
    # Version 9 (newer than known: read as the newest, trailing bytes ignored) and the
    # legacy offset-commit type 0.
    key = b"\x00\x00" + encode_record(Record(m.OffsetCommitKey("g", "t", 1), None))[0][2:]
    v4 = encode_record(Record(m.OffsetCommitKey("g", "t", 2), m.OffsetCommitValue(
        offset=5, leader_epoch=2, metadata="m", commit_timestamp=TS)))[1]
    with Log(str(tmp_path / "v")) as lg:
        lg.append([(key, v4), (key.replace(b"\x00\x01t", b"\x00\x01u"),
                               b"\x00\x09" + v4[2:] + b"\x07\x07")])
        lg.flush()
        want = naive(None, None, lg).snapshot()
        for dedup in (True, False):
            sh = Shard()
            load_shard(sh, lg, dedup=dedup)
            assert sh.snapshot() == want and len(want["offsets"]["g"]) == 2


def test_corrupt_batch_raises_corrupt_batch_error(tmp_path):
    d = str(tmp_path / "x")
    with Log(d) as lg:
        lg.append(commits(10))
        lg.append(commits(10, start=10))
        lg.flush()
        seg = lg.segments()[-1]
        first = len(encode_batch(commits(10), 0, TS))
        with open(seg.path, "r+b") as f:              # flip a byte of the second batch
            f.seek(first + 70)
            b = f.read(1)
            f.seek(first + 70)
            f.write(bytes([b[0] ^ 0xFF]))
        with pytest.raises(CorruptBatchError) as exc:
            load_shard(Shard(), lg)
        assert exc.value.path == seg.path and exc.value.position == first
        with pytest.raises(CorruptBatchError):
            naive(None, None, lg)


def test_offset_delete_keeps_the_group_its_commit_created(tmp_path):
    """An offset commit to an unknown group creates it (Empty, classic); the offset's
    tombstone removes the offset, not the group. Dedup keeps the commit before the
    tombstone for this reason."""
    key = m.OffsetCommitKey(group="s", topic="t", partition=0)
    val = m.OffsetCommitValue(offset=1, commit_timestamp=TS)
    with Log(str(tmp_path / "o")) as lg:
        for _ in range(3):
            lg.append([encode_record(Record(key, val))])
        lg.append([encode_record(Record(key, None))])
        lg.flush()
        want = naive(None, None, lg)
        assert set(want.groups) == {"s"} and want.offsets == {}
        sh = Shard()
        st = load_shard(sh, lg)
        assert st.records_replayed == 2
        assert sh.snapshot() == want.snapshot()


def test_compaction_keeps_the_group_an_offset_tombstone_names(tmp_path):
    # Compaction drops the commit before its tombstone; replaying the tombstone alone must
    # still give the (empty) group the commit created.
    key = m.OffsetCommitKey(group="s", topic="t", partition=0)
    with Log(str(tmp_path / "k")) as lg:
        lg.append([encode_record(Record(key, m.OffsetCommitValue(offset=1)))])
        lg.append([encode_record(Record(key, None))])
        lg.roll()
        want = naive(None, None, lg)
        assert set(want.groups) == {"s"}
        lg.compact(1 << 40, now_ms=TS)
        assert set(naive(None, None, lg).groups) == {"s"}


def test_compaction_dropping_a_conversion_tombstone_keeps_the_new_group(tmp_path):
    # classic group + offsets, converted to a consumer group (classic tombstone, consumer
    # records). Compaction with tombstones dropped leaves: the offset commit (which creates an
    # offsets-only classic group on replay) then the consumer records, which must replace it.
    recs = [Record(m.GroupMetadataKey(group="g"), m.GroupMetadataValue(protocol_type="consumer",
                                                                       generation=3)),
            Record(m.OffsetCommitKey(group="g", topic="t", partition=0),
                   m.OffsetCommitValue(offset=5)),
            Record(m.GroupMetadataKey(group="g"), None),
            Record(m.ConsumerGroupMetadataKey(group_id="g"),
                   m.ConsumerGroupMetadataValue(epoch=4))]
    with Log(str(tmp_path / "c")) as lg:
        for r in recs:
            lg.append([encode_record(r)], TS)
        lg.roll()
        before = naive(None, None, lg)
        assert before.groups["g"].TYPE == "consumer"
        lg.compact(0, now_ms=TS + 10 ** 9)
        assert len(list(lg.read())) == 2
        after = naive(None, None, lg)
        assert after.groups["g"].TYPE == "consumer"
        assert after.snapshot(durable=True) == before.snapshot(durable=True)
