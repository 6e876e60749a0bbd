"""Benchmark grid for the server-side ``range`` assignor (groupcoord.assign.consumer.range_)
against Kafka's own Java RangeAssignor, same inputs, same run:

    members {100, 1k, 10k} x partitions/member {10, 50} x topics {10, 100, 1000}
      x subscriptions {homogeneous, heterogeneous} x events {FULL, JOIN_ONE, LEAVE_ONE}

(the grid of benchmarks/grid_assign_consumer.py, whose ``build`` makes the cells: same shapes,
same JOIN_ONE / LEAVE_ONE membership; range ignores the previous assignment, Kafka's gets it
in its GroupSpec as a coordinator would pass it).

    PYTHONPATH=src python benchmarks/grid_assign_range.py --kafka-classpath CP [--out FILE]

CP holds Kafka's classes behind org.apache.kafka.coordinator.group.assignor.RangeAssignor
(the kafka-group-coordinator, kafka-group-coordinator-api and kafka-clients jars of a Kafka
4.x release, or classes built from Kafka's source); they are not in this repository. Without
--kafka-classpath only groupcoord is timed. `javac`/`java` (17+) come from PATH.

Per cell, in this order: groupcoord's output is checked against a plain-numpy reference of
Kafka's range rule; groupcoord is timed (time.perf_counter around one call; 1 warm-up call,
then at least 5 and at most 200 calls within 0.5 s; median and min); the cell is written to a
file and benchmarks/java/RangeAssignorBench.java times Kafka's assignor on it in a fresh JVM
(JMH-like: 5 warm-up and 5 measured iterations of 200 ms, every measured call timed; median
and min) and writes Kafka's result back, which must equal groupcoord's unit for unit.
Ratio = Kafka median / groupcoord median.
"""
import argparse
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grid_assign_consumer import (EVENTS, MEMBERS, N_BUCKETS, PER_MEMBER, SUBS,  # noqa: E402
                                  TOPICS, _k, build, time_fn)

from groupcoord.assign import consumer as C  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_SRC = os.path.join(HERE, "java", "RangeAssignorBench.java")
MAGIC = 0x52414E47
JAVA_ITERS, JAVA_ITER_MS = 5, 200


def _fmt(s):
    """Seconds as µs below 1 ms (small groups take well under one), else ms."""
    if s < 1e-3:
        return "%.2f µs" % (s * 1e6) if s < 1e-4 else "%.1f µs" % (s * 1e6)
    return "%.2f ms" % (s * 1e3)


def reference(c):
    """Kafka's range rule in plain numpy: per topic, its subscribers in index order take
    contiguous ranges, the first P % S one partition more."""
    T, M = c.ppt.shape[0], c.n_members
    sub = np.zeros((M, T), dtype=bool)
    sub[np.repeat(np.arange(M), np.diff(c.indptr)), c.rows] = True
    parts = []
    for t in range(T):
        ms = np.flatnonzero(sub[:, t]).astype(np.int32)
        P = int(c.ppt[t])
        if ms.size == 0:
            parts.append(np.full(P, -1, np.int32))
            continue
        q, r = divmod(P, ms.size)
        parts.append(np.repeat(ms, q + (np.arange(ms.size) < r)))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def write_cell(path, c):
    with open(path, "wb") as f:
        f.write(struct.pack("<iiiiq", MAGIC, c.ppt.shape[0], c.n_members, int(c.ppt.sum()),
                            c.rows.shape[0]))
        for a, dt in ((c.ppt, "<i4"), (c.indptr, "<i8"), (c.rows, "<i4"), (c.cur, "<i4")):
            f.write(np.ascontiguousarray(a, dtype=dt).tobytes())


def compile_java(classpath, outdir):
    subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", outdir, JAVA_SRC], check=True)


def run_java(c, classpath, classes, tmp):
    cell, result = os.path.join(tmp, "cell.bin"), os.path.join(tmp, "kafka-out.bin")
    write_cell(cell, c)
    p = subprocess.run(["java", "-Xms1g", "-Xmx4g", "-cp", classes + os.pathsep + classpath,
                        "RangeAssignorBench", cell, str(JAVA_ITERS), str(JAVA_ITER_MS), result],
                       check=True, capture_output=True, text=True)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")][-1].split()
    owners = np.fromfile(result, dtype="<i4")
    return int(line[1]) / 1e9, int(line[2]) / 1e9, int(line[3]), line[4], owners


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kafka-classpath", help="Kafka's group-coordinator classes (see above)")
    ap.add_argument("--out", help="also write the Markdown table to this file")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="grid-range-")
    classes = os.path.join(tmp, "classes")
    if args.kafka_classpath:
        os.mkdir(classes)
        compile_java(args.kafka_classpath, classes)
    rows = []
    try:
        for m in MEMBERS:
            for r in PER_MEMBER:
                for t in TOPICS:
                    for subs in SUBS:
                        if subs == "heterogeneous" and t < N_BUCKETS:
                            continue
                        for ev in EVENTS:
                            c = build(m, r, t, subs, ev)
                            ours = C.range_(c.ppt, c.indptr, c.rows, c.cur)
                            assert np.array_equal(ours, reference(c)), (m, r, t, subs, ev)
                            gc = time_fn(lambda: C.range_(c.ppt, c.indptr, c.rows, c.cur))
                            kj = None
                            if args.kafka_classpath:
                                kj = run_java(c, args.kafka_classpath, classes, tmp)
                                assert np.array_equal(kj[4], ours), ("Kafka differs", m, r, t,
                                                                     subs, ev)
                            key = (m, r, t, subs, ev)
                            rows.append((key, int(c.ppt.sum()), gc, kj))
                            print("  %s: range %s (%d runs)%s" % (
                                key, _fmt(gc[0]), gc[2],
                                "" if kj is None else ", Kafka %s (%d calls, %s), %.1fx" % (
                                    _fmt(kj[0]), kj[2], kj[3], kj[0] / gc[0])),
                                file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lines = ["| members | partitions/member | topics | partitions | subscriptions | event | "
             "groupcoord range median (min) | runs | Kafka RangeAssignor median (min) | "
             "calls | ratio Kafka/groupcoord |",
             "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for key, n_units, gc, kj in rows:
        m, r, t, subs, ev = key
        ks = kr = kn = "-"
        if kj is not None:
            ks, kn, kr = "%s (%s)" % (_fmt(kj[0]), _fmt(kj[1])), str(kj[2]), \
                "%.1fx" % (kj[0] / gc[0])
        lines.append("| %s | %d | %d | %s | %s | %s | %s (%s) | %d | %s | %s | %s |" % (
            _k(m), r, t, _k(n_units), subs, ev, _fmt(gc[0]), _fmt(gc[1]), gc[2],
            ks, kn, kr))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    ratios = [kj[0] / gc[0] for _, _, gc, kj in rows if kj is not None]
    if ratios:
        print("ratio Kafka/groupcoord: min %.1fx, median %.1fx, max %.1fx over %d cells"
              % (min(ratios), float(np.median(ratios)), max(ratios), len(ratios)),
              file=sys.stderr)
    print("python %s, numpy %s, nproc %d" % (platform.python_version(), np.__version__,
                                             os.cpu_count()), file=sys.stderr)


if __name__ == "__main__":
    main()
