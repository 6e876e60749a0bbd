"""Full benchmark grid for the server-side ``uniform`` assignor (groupcoord.assign.consumer),
mirroring Kafka's ServerSideAssignorBenchmark:

    members {100, 1k, 10k} x partitions/member {10, 50} x topics {10, 100, 1000}
      x subscriptions {homogeneous, heterogeneous} x events {FULL, JOIN_ONE, LEAVE_ONE}

Standalone (no pytest-benchmark):

    PYTHONPATH=src python benchmarks/grid_assign_consumer.py [--out FILE] [--kp-jobs N]
                                                           [--no-kafka-python]

Shapes (same builders as benchmarks/bench_assign_consumer.py):
  * partitions per topic = members * partitions_per_member // topics.
  * heterogeneous = Kafka's bucket shape: members and topics split into 5 buckets, members of
    bucket b subscribe exactly the topics of bucket b (cells with fewer than 5 topics would be
    skipped; the grid has none).
  * FULL: from an empty assignment (current all -1).
  * JOIN_ONE: from the balanced result for M members, member M joins with the subscriptions
    of member M-1 (homogeneous: all topics; heterogeneous: the last bucket, as Kafka does).
  * LEAVE_ONE: from the balanced result for M members, member M // 2 leaves; the owner array
    is renumbered (owners above the leaver shift down by one) before the call, as the group
    does.

Timing: time.perf_counter around one call; 1 warm-up call, then at least 5 timed calls, more
while the cell's time budget (0.5 s) lasts, at most 200; median and min reported. Every cell
checks its output before timing (every unit goes to a subscriber; loads balanced; JOIN/LEAVE
homogeneous: exactly the minimum number of moved units; LEAVE: nothing kept moves).

Baseline numpy-rr: the plain-numpy homogeneous round-robin of bench_assign_consumer.py
(``unit i -> member i % M`` over subscribed units; not sticky, ignores who subscribes what),
timed the same way on the same inputs. Ratio = numpy-rr median / uniform median.

kafka-python 3.0.12 StickyPartitionAssignor (client-side, eager sticky; inputs built like
benchmarks/bench_assign_classic.py: decoded member metadata, previous assignments as
StickyAssignorUserData with generation 1): only cells with <= 10k partitions, one call in a
forked child process with a 60 s cap ("> 60 s" when it did not finish), "-" elsewhere. These
run after all uniform/numpy-rr cells, ``--kp-jobs`` at a time.
"""
import argparse
import multiprocessing as mp
import os
import platform
import sys
import time
from collections import namedtuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_assign_consumer import buckets, homogeneous, numpy_round_robin  # noqa: E402

from groupcoord.assign import consumer as C  # noqa: E402

MEMBERS = (100, 1000, 10_000)
PER_MEMBER = (10, 50)
TOPICS = (10, 100, 1000)
SUBS = ("homogeneous", "heterogeneous")
EVENTS = ("FULL", "JOIN_ONE", "LEAVE_ONE")

MIN_RUNS, MAX_RUNS, CELL_BUDGET_S = 5, 200, 0.5
KP_MAX_PARTITIONS, KP_CAP_S = 10_000, 60.0
N_BUCKETS = 5


def _k(n):
    n = int(n)
    return "%dk" % (n // 1000) if n >= 1000 and n % 1000 == 0 else str(n)


def _fmt_ms(s):
    ms = s * 1e3
    if ms >= 1000:
        return "%.2f s" % (ms / 1e3)
    return "%.3f ms" % ms


# ------------------------------------------------------------------------------ cells

Cell = namedtuple("Cell", "m r t subs event ppt indptr rows cur n_members")


def build(m, r, t, subs, event):
    make = buckets if subs == "heterogeneous" else homogeneous
    ppt, indptr, rows = make(m, m * r, t)
    n_units = int(ppt.sum())
    if event == "FULL":
        return Cell(m, r, t, subs, event, ppt, indptr, rows,
                    np.full(n_units, -1, np.int32), m)
    start = C.uniform(ppt, indptr, rows, None)
    if event == "JOIN_ONE":
        last = rows[indptr[m - 1]:indptr[m]]
        indptr2 = np.append(indptr, indptr[-1] + last.size)
        rows2 = np.concatenate([rows, last]).astype(np.int32)
        return Cell(m, r, t, subs, event, ppt, indptr2, rows2, start, m + 1)
    if event == "LEAVE_ONE":
        leaver = m // 2
        cur = np.where(start == leaver, -1, np.where(start > leaver, start - 1, start))
        cur = cur.astype(np.int32)
        lens = np.diff(indptr)
        keep = np.r_[0:leaver, leaver + 1:m]
        indptr2 = np.zeros(m, np.int64)
        np.cumsum(lens[keep], out=indptr2[1:])
        rows2 = np.concatenate([rows[indptr[i]:indptr[i + 1]] for i in keep]).astype(np.int32)
        return Cell(m, r, t, subs, event, ppt, indptr2, rows2, cur, m - 1)
    raise ValueError(event)


def run_uniform(c):
    return C.uniform(c.ppt, c.indptr, c.rows, c.cur)


def run_rr(c):
    return numpy_round_robin(c.ppt, c.indptr, c.rows, c.n_members)


def check(c, out):
    M = c.n_members
    t = c.ppt.shape[0]
    assert out.shape[0] == c.ppt.sum() and np.all(out >= 0) and np.all(out < M)
    unit_topic = np.repeat(np.arange(t), c.ppt)
    sub = np.zeros((M, t), dtype=bool)
    sub[np.repeat(np.arange(M), np.diff(c.indptr)), c.rows] = True
    assert np.all(sub[out, unit_topic]), "unit given to a non-subscriber"
    ld = np.bincount(out, minlength=M)
    if c.subs == "homogeneous":
        assert ld.max() - ld.min() <= 1, (ld.min(), ld.max())
    else:               # within every bucket (members with identical subscriptions)
        _, grp = np.unique(sub, axis=0, return_inverse=True)
        grp = grp.ravel()
        for g in np.unique(grp):
            sl = ld[grp == g]
            assert sl.max() - sl.min() <= 1, (g, sl.min(), sl.max())
    moved = int(np.count_nonzero(out != c.cur))
    if c.event == "JOIN_ONE":
        assert moved == np.count_nonzero(out == M - 1)       # only moves to the newcomer
        if c.subs == "homogeneous":
            assert moved == int(c.ppt.sum()) // M
    elif c.event == "LEAVE_ONE":
        keep = c.cur >= 0
        assert np.array_equal(out[keep], c.cur[keep])        # nothing kept moves


def time_fn(fn):
    fn()                                                      # warm-up
    ts = []
    t_end = time.perf_counter() + CELL_BUDGET_S
    while len(ts) < MIN_RUNS or (len(ts) < MAX_RUNS and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), float(np.min(ts)), len(ts)


# ------------------------------------------------------------------------------ kafka-python

_KMember = namedtuple("_KMember", "member_id group_instance_id metadata")
_KMeta = namedtuple("_KMeta", "topics user_data")


class _KCluster:
    def __init__(self, ppt):
        self.names = ["t%04d" % i for i in range(ppt.shape[0])]
        self.parts = {n: set(range(int(p))) for n, p in zip(self.names, ppt)}

    def topics(self):
        return list(self.names)

    def partitions_for_topic(self, topic):
        return self.parts[topic]


def kafka_python_inputs(c):
    """Members as kafka-python sees them: subscribed topic names and the previous assignment
    (c.cur) as a decoded StickyAssignorUserData, generation 1 (bench_assign_classic.py)."""
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserData
    offs = np.zeros(c.ppt.shape[0] + 1, np.int64)
    np.cumsum(c.ppt, out=offs[1:])
    unit_topic = np.repeat(np.arange(c.ppt.shape[0]), c.ppt)
    owned = [dict() for _ in range(c.n_members)]
    for u in np.flatnonzero(c.cur >= 0):
        tp = int(unit_topic[u])
        owned[int(c.cur[u])].setdefault("t%04d" % tp, []).append(int(u - offs[tp]))
    members = []
    for m in range(c.n_members):
        topics = ["t%04d" % i for i in c.rows[c.indptr[m]:c.indptr[m + 1]]]
        ud = StickyAssignorUserData(sorted(owned[m].items()), 1) if owned[m] else b""
        members.append(_KMember("member-%05d" % m, None, _KMeta(topics, ud)))
    return _KCluster(c.ppt), members


def _kp_child(cluster, members, n_units, conn):
    import warnings
    warnings.simplefilter("ignore")
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    t0 = time.perf_counter()
    out = StickyPartitionAssignor().assign(cluster, members)
    dt = time.perf_counter() - t0
    loads = [sum(len(p) for _, p in a.assigned_partitions) for a in out.values()]
    conn.send((dt, sum(loads) == n_units, max(loads) - min(loads)))
    conn.close()


def kafka_python_jobs(cells, jobs):
    """Run kafka-python's sticky assignor once per cell, `jobs` forked children at a time,
    each killed after KP_CAP_S. -> {key: (seconds or None, complete, spread)}"""
    ctx = mp.get_context("fork")
    pending = list(cells)
    running = {}
    results = {}
    while pending or running:
        while pending and len(running) < jobs:
            key, c = pending.pop(0)
            cluster, members = kafka_python_inputs(c)
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_kp_child, args=(cluster, members, int(c.ppt.sum()), tx))
            p.start()
            tx.close()
            running[key] = (p, rx, time.monotonic())
        time.sleep(0.05)
        for key in list(running):
            p, rx, t0 = running[key]
            if rx.poll():
                results[key] = rx.recv()
                p.join()
            elif not p.is_alive():
                results[key] = ("error", False, None)
            elif time.monotonic() - t0 > KP_CAP_S:
                p.terminate()
                p.join()
                results[key] = (None, False, None)
            else:
                continue
            del running[key]
            print("  kafka-python %s: %s" % (key, results[key]), file=sys.stderr, flush=True)
    return results


# ------------------------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also write the Markdown table to this file")
    ap.add_argument("--kp-jobs", type=int, default=1,
                    help="kafka-python cells run at a time (default 1)")
    ap.add_argument("--no-kafka-python", action="store_true")
    args = ap.parse_args(argv)

    rows = []
    kp_cells = []
    for m in MEMBERS:
        for r in PER_MEMBER:
            for t in TOPICS:
                for subs in SUBS:
                    if subs == "heterogeneous" and t < N_BUCKETS:
                        continue
                    for ev in EVENTS:
                        c = build(m, r, t, subs, ev)
                        check(c, run_uniform(c))
                        gc = time_fn(lambda: run_uniform(c))
                        rr = time_fn(lambda: run_rr(c))
                        key = (m, r, t, subs, ev)
                        rows.append((key, int(c.ppt.sum()), gc, rr))
                        print("  %s: uniform %s (%d runs), numpy-rr %s" % (
                            key, _fmt_ms(gc[0]), gc[2], _fmt_ms(rr[0])),
                            file=sys.stderr, flush=True)
                        if not args.no_kafka_python and c.ppt.sum() <= KP_MAX_PARTITIONS:
                            kp_cells.append((key, c))
                        else:
                            del c
    kp = kafka_python_jobs(kp_cells, args.kp_jobs) if kp_cells else {}

    lines = ["| members | partitions/member | topics | partitions | subscriptions | event | "
             "uniform median (min) | runs | numpy-rr median | ratio rr/uniform | "
             "kafka-python sticky (1 run) | ratio kp/uniform |",
             "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for key, n_units, gc, rr in rows:
        m, r, t, subs, ev = key
        if key in kp:
            dt, complete, spread = kp[key]
            if dt is None:
                kps, kpr = "> 60 s", ""
            elif dt == "error":
                kps, kpr = "error", ""
            else:
                kps = _fmt_ms(dt) + ("" if complete else " (incomplete)")
                kpr = "%.0fx" % (dt / gc[0])
        else:
            kps, kpr = "-", "-"
        lines.append("| %s | %d | %d | %s | %s | %s | %s (%s) | %d | %s | %.2fx | %s | %s |" % (
            _k(m), r, t, _k(n_units), subs, ev, _fmt_ms(gc[0]), _fmt_ms(gc[1]), gc[2],
            _fmt_ms(rr[0]), rr[0] / gc[0], kps, kpr))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print("python %s, numpy %s, nproc %d" % (platform.python_version(), np.__version__,
                                             os.cpu_count()), file=sys.stderr)


if __name__ == "__main__":
    main()
