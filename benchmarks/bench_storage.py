"""Storage benchmarks: append throughput with an fsync per batch, and read+decode rate of
offset-commit records (native RecordBatch decoder vs the pure-Python reference in the same
run). Prints a markdown table.

    PYTHONPATH=src python benchmarks/bench_storage.py [--dir DIR] [--records N] [--seconds S]

DIR should be on the disk the coordinator would use (default: a temp dir under the current
directory, not /tmp, which may be tmpfs). Anchors: Kafka ~4.4M offset-commit records/s per
thread (DESIGN.md); issue 5 targets >= 2M/s for decoding.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from groupcoord.groups.records import Record, decode_record, encode_record
from groupcoord.protocol import messages as m
from groupcoord.storage import Log
from groupcoord.storage import batch as rb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import batch_oracle  # noqa: E402  (the pure-Python reference decoder lives with the tests)

TS = 1_700_000_000_000


def offset_commit_records(n):
    out = []
    for i in range(n):
        key = m.OffsetCommitKey(group="group-%d" % (i % 1000), topic="topic-%d" % (i % 50),
                                partition=i % 64)
        value = m.OffsetCommitValue(offset=i * 7, leader_epoch=3, metadata="",
                                    commit_timestamp=TS + i, expire_timestamp=-1)
        out.append(encode_record(Record(key, value)))
    return out


def bench_append(d, records_per_batch, fsync, seconds):
    shutil.rmtree(d, ignore_errors=True)
    recs = offset_commit_records(records_per_batch)
    batches = 0
    with Log(d, fsync=fsync) as lg:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                lg.append(recs, TS)
                lg.flush()
            batches += 10
        dt = time.perf_counter() - t0
    return batches * records_per_batch / dt, batches / dt


def best(fn, repeat=5):
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        out = dt if out is None else min(out, dt)
    return out


def bench_decode(d, n, per_batch=100):
    shutil.rmtree(d, ignore_errors=True)
    recs = offset_commit_records(n)
    with Log(d, fsync="unsafe-no-fsync") as lg:
        for i in range(0, n, per_batch):
            lg.append(recs[i:i + per_batch], TS)
        lg.flush()
        seg = lg.segments()[-1]
        data = seg.read_all()
        assert rb.decode(data)[0] == batch_oracle.decode(data)[0]
        assert len(list(lg.read())) == n
        rows = []
        t = best(lambda: rb.decode(data))
        rows.append(("RecordBatch decode (native), in memory", n / t))
        t = best(lambda: batch_oracle.decode(data), 2)
        rows.append(("RecordBatch decode (pure Python baseline), in memory", n / t))
        t = best(lambda: sum(1 for _ in lg.read()))
        rows.append(("Log.read: pread + native decode (page cache)", n / t))
        sub = min(n, 100_000)
        recs_sub = rb.decode(data)[0][:sub]
        t = best(lambda: [decode_record(k, v) for _o, k, v in recs_sub], 2)
        rows.append(("decode_record of the key/value bytes (coordinator codec)", sub / t))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args(argv)
    base = a.dir or tempfile.mkdtemp(prefix=".bench-storage-", dir=os.getcwd())
    try:
        print("| append (one flush per batch) | fsync | records/s | batches/s |")
        print("|---|---|---:|---:|")
        for per in (1, 10, 100):
            for fsync in ("always", "unsafe-no-fsync"):
                r, b = bench_append(os.path.join(base, "a"), per, fsync, a.seconds)
                print("| %d records/batch | %s | %s | %s |" % (per, fsync, f"{r:,.0f}",
                                                             f"{b:,.0f}"))
        print()
        print("| read + decode, %s offset-commit records (100/batch) | records/s |"
              % f"{a.records:,}")
        print("|---|---:|")
        for name, rate in bench_decode(os.path.join(base, "d"), a.records):
            print("| %s | %s |" % (name, f"{rate:,.0f}"))
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)


def test_bench_storage_smoke(tmp_path, capsys):
    main(["--dir", str(tmp_path), "--records", "2000", "--seconds", "0.05"])
    assert "records/s" in capsys.readouterr().out


if __name__ == "__main__":
    main()
