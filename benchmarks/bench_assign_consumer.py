"""Benchmarks of the KIP-848 server-side consumer assignors (groupcoord.assign.consumer).

Opt-in only (the project's testpaths is tests/ and its addopts disable benchmarks):

    PYTHONPATH=src python -m pytest -p no:cacheprovider benchmarks/bench_assign_consumer.py \
        --benchmark-enable --benchmark-json=/tmp/bench-assign-consumer.json
    PYTHONPATH=src python benchmarks/bench_assign_consumer.py /tmp/bench-assign-consumer.json
                                                                  # prints the Markdown table

Every row is one pytest-benchmark *group* holding two benchmarks, impl=groupcoord and
impl=numpy-rr, timed in the same process on inputs of the same size:

  numpy-rr  the baseline: a plain-numpy homogeneous round-robin (``unit i -> member i % M``
            over the units of every subscribed topic). Not sticky and blind to who subscribes
            what (so wrong for heterogeneous groups): the floor of what writing an owner array
            from these inputs costs in numpy.

Shapes (Kafka's ServerSideAssignorBenchmark where it has one):
  * FULL: from an empty assignment (current all -1).
  * heterogeneous: Kafka's bucket shape, members and topics split into 5 buckets, members of
    bucket b subscribe exactly the topics of bucket b. Also (not a Kafka shape) random
    subscriptions: every member subscribes k random topics.
  * JOIN_ONE: from the balanced assignment of M members, member M joins (same topics).
  * LEAVE_ONE: from the balanced assignment of M members, member M // 2 leaves (the owner
    array is renumbered by the caller, as the group does, before the call).
  * grid: members {100, 1k, 10k} x partitions/member {10, 50} x topics {10, 100, 1000},
    homogeneous, FULL (partitions per topic = members * ratio // topics).

Before anything is timed each case checks its output (valid, balanced, sticky as stated).
"""
import json
import sys

import numpy as np
import pytest

from groupcoord.assign import consumer as C

pytestmark = pytest.mark.perf

GROUPCOORD = "groupcoord"
BASELINE = "numpy-rr"


def numpy_round_robin(ppt, indptr, subs, n_members):
    """Baseline: homogeneous round-robin in plain numpy (not sticky, ignores who subscribes
    what)."""
    mask = np.zeros(ppt.shape[0], dtype=bool)
    mask[subs] = True
    units = np.flatnonzero(np.repeat(mask, ppt))
    out = np.full(int(ppt.sum()), -1, dtype=np.int32)
    out[units] = np.arange(units.size, dtype=np.int32) % np.int32(n_members)
    return out


def homogeneous(n_members, n_partitions, n_topics):
    ppt = np.full(n_topics, n_partitions // n_topics, dtype=np.int32)
    indptr = np.arange(n_members + 1, dtype=np.int64) * n_topics
    subs = np.tile(np.arange(n_topics, dtype=np.int32), n_members)
    return ppt, indptr, subs


def buckets(n_members, n_partitions, n_topics, n_buckets=5):
    """Kafka's HETEROGENEOUS benchmark shape: 5 buckets of members x topics."""
    ppt = np.full(n_topics, n_partitions // n_topics, dtype=np.int32)
    tb = -(-n_topics // n_buckets)
    mb = -(-n_members // n_buckets)
    rows = []
    for m in range(n_members):
        b = m // mb
        rows.append(np.arange(b * tb, min((b + 1) * tb, n_topics), dtype=np.int32))
    indptr = np.zeros(n_members + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([r.size for r in rows])
    return ppt, indptr, np.concatenate(rows)


def _check_balanced(out, n_members):
    ld = np.bincount(out[out >= 0], minlength=n_members)
    assert ld.max() - ld.min() <= 1, (ld.min(), ld.max())


class Case:
    def __init__(self, label, ppt, indptr, subs, cur, target_ms=None, fn=None):
        self.label, self.ppt, self.indptr, self.subs, self.cur = label, ppt, indptr, subs, cur
        self.n_members = indptr.shape[0] - 1
        self.target_ms = target_ms
        self.fn = fn or C.uniform

    def run(self):
        return self.fn(self.ppt, self.indptr, self.subs, self.cur)

    def baseline(self):
        return numpy_round_robin(self.ppt, self.indptr, self.subs, self.n_members)


def case_full(m, n, t, target_ms=None, grid=False):
    ppt, indptr, subs = homogeneous(m, n, t)
    cur = np.full(int(ppt.sum()), -1, dtype=np.int32)
    label = ("grid: uniform FULL, %s members x %d partitions/member, %d topics"
             % (_k(m), n // m, t) if grid else
             "uniform homogeneous FULL %s partitions x %s members, %d topics"
             % (_k(ppt.sum()), _k(m), t))
    c = Case(label, ppt, indptr, subs, cur, target_ms)
    out = c.run()
    _check_balanced(out, m)
    assert np.all(out >= 0)
    return c


def case_hetero(m, n, t, target_ms=None):
    ppt, indptr, subs = buckets(m, n, t)
    cur = np.full(int(ppt.sum()), -1, dtype=np.int32)
    c = Case("uniform heterogeneous (5 buckets) FULL %s x %s, %d topics"
             % (_k(ppt.sum()), _k(m), t), ppt, indptr, subs, cur, target_ms)
    out = c.run()
    assert np.all(out >= 0)
    # within every bucket loads are within 1, and every unit goes to its bucket's members
    mb = -(-m // 5)
    tb = -(-t // 5)
    tu = np.repeat(np.arange(t), ppt)
    assert np.all(out // mb == tu // tb)
    ld = np.bincount(out, minlength=m)
    for b in range(5):
        sl = ld[b * mb:(b + 1) * mb]
        assert sl.max() - sl.min() <= 1
    return c


def case_join(m, n, t, target_ms=None):
    ppt, indptr, subs = homogeneous(m, n, t)
    start = C.uniform(ppt, indptr, subs, None)
    ppt2, indptr2, subs2 = homogeneous(m + 1, n, t)
    c = Case("uniform homogeneous JOIN_ONE %s x %s -> %s members, %d topics"
             % (_k(ppt.sum()), _k(m), _k(m + 1), t), ppt2, indptr2, subs2, start, target_ms)
    out = c.run()
    _check_balanced(out, m + 1)
    moved = int(np.count_nonzero(out != start))
    assert moved == np.count_nonzero(out == m) == int(ppt.sum()) // (m + 1)
    return c


def case_leave(m, n, t, target_ms=None):
    ppt, indptr, subs = homogeneous(m, n, t)
    start = C.uniform(ppt, indptr, subs, None)
    leaver = m // 2
    cur = np.where(start == leaver, -1, np.where(start > leaver, start - 1, start))
    cur = cur.astype(np.int32)
    ppt2, indptr2, subs2 = homogeneous(m - 1, n, t)
    c = Case("uniform homogeneous LEAVE_ONE %s x %s -> %s members, %d topics"
             % (_k(ppt.sum()), _k(m), _k(m - 1), t), ppt2, indptr2, subs2, cur, target_ms)
    out = c.run()
    _check_balanced(out, m - 1)
    keep = cur >= 0
    assert np.array_equal(out[keep], cur[keep])
    return c


def case_hetero_random(m, n, t, k, target_ms=None):
    """Not a Kafka shape: every member subscribes k random topics (seeded), so nearly every
    topic has its own subscriber set and the greedy plan needs many refinement moves."""
    rng = np.random.default_rng(848)
    ppt = np.full(t, n // t, dtype=np.int32)
    subs = np.concatenate([np.sort(rng.choice(t, k, replace=False)) for _ in range(m)])
    subs = subs.astype(np.int32)
    indptr = np.arange(m + 1, dtype=np.int64) * k
    cur = np.full(int(ppt.sum()), -1, dtype=np.int32)
    c = Case("uniform heterogeneous (random %d of %d topics each) FULL %s x %s"
             % (k, t, _k(ppt.sum()), _k(m)), ppt, indptr, subs, cur, target_ms)
    out = c.run()
    rows = subs.reshape(m, k)
    tu = np.repeat(np.arange(t), ppt)
    assert np.all((rows[out] == tu[:, None]).any(axis=1))   # every unit to a subscriber
    return c


def case_hetero_join(m, n, t):
    """Kafka's INCREMENTAL heterogeneous shape: a member joins the last bucket."""
    ppt, indptr, subs = buckets(m, n, t)
    start = C.uniform(ppt, indptr, subs, None)
    last = subs[indptr[m - 1]:indptr[m]]
    indptr2 = np.append(indptr, indptr[-1] + last.size)
    subs2 = np.concatenate([subs, last])
    c = Case("uniform heterogeneous (5 buckets) JOIN_ONE %s x %s -> %s members, %d topics"
             % (_k(ppt.sum()), _k(m), m + 1, t), ppt, indptr2, subs2, start)
    out = c.run()
    moved = int(np.count_nonzero(out != start))
    bucket_units = int(np.count_nonzero(start >= (m - 1) // (-(-m // 5)) * (-(-m // 5))))
    bucket_members = m - (m - 1) // (-(-m // 5)) * (-(-m // 5)) + 1
    assert moved == np.count_nonzero(out == m) == bucket_units // bucket_members
    return c


def case_range(m, n, t, hetero):
    ppt, indptr, subs = (buckets if hetero else homogeneous)(m, n, t)
    fn = lambda p, i, s, c: C.range_(p, i, s, c)   # noqa: E731
    c = Case("range %s FULL %s x %s, %d topics"
             % ("heterogeneous (5 buckets)" if hetero else "homogeneous", _k(ppt.sum()), _k(m),
                t), ppt, indptr, subs, None, fn=fn)
    out = c.run()
    assert np.all(out >= 0)
    return c


def _k(n):
    n = int(n)
    if n >= 1000 and n % 1000 == 0:
        return "%dk" % (n // 1000)
    return str(n)


HEADLINE = [
    ("full-500k-10k", lambda: case_full(10_000, 500_000, 100, 5.0)),
    ("hetero-250k-5k", lambda: case_hetero(5_000, 250_000, 100, 10.0)),
    ("hetero-250k-5k-1000t", lambda: case_hetero(5_000, 250_000, 1000, 10.0)),
    ("hetero-random-250k-5k-20of100", lambda: case_hetero_random(5_000, 250_000, 100, 20)),
    ("hetero-random-250k-5k-3of1000", lambda: case_hetero_random(5_000, 250_000, 1000, 3)),
    ("hetero-join-250k-5k", lambda: case_hetero_join(5_000, 250_000, 100)),
    ("join-100k-10k", lambda: case_join(10_000, 100_000, 100, 1.0)),
    ("leave-100k-10k", lambda: case_leave(10_000, 100_000, 100, None)),
    ("range-500k-10k", lambda: case_range(10_000, 500_000, 100, False)),
    ("range-hetero-250k-5k", lambda: case_range(5_000, 250_000, 100, True)),
]
GRID = [("grid-%d-%d-%d" % (m, r, t), (lambda m=m, r=r, t=t: case_full(m, m * r, t, grid=True)))
        for m in (100, 1000, 10_000) for r in (10, 50) for t in (10, 100, 1000)]

_CACHE = {}


def _case(key, make):
    if key not in _CACHE:
        _CACHE.clear()          # keep one shape's arrays alive at a time
        _CACHE[key] = make()
    return _CACHE[key]


@pytest.mark.parametrize("impl", [GROUPCOORD, BASELINE])
@pytest.mark.parametrize("key,make", HEADLINE + GRID, ids=[k for k, _ in HEADLINE + GRID])
def test_assign_consumer(benchmark, key, make, impl):
    c = _case(key, make)
    benchmark.group = c.label
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["target_ms"] = c.target_ms
    benchmark.extra_info["n_units"] = int(c.ppt.sum())
    benchmark.extra_info["n_members"] = c.n_members
    benchmark(c.run if impl == GROUPCOORD else c.baseline)


# ------------------------------------------------------------------------------ report

def table(path):
    """Markdown table from a pytest-benchmark JSON file (median and min per row)."""
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        rows.setdefault(b["group"], {})[b["extra_info"]["impl"]] = b
    lines = ["| case | groupcoord median (min) | numpy-rr median | ratio rr/gc | target | met |",
             "|---|---:|---:|---:|---:|:-:|"]
    for group, r in rows.items():
        gc, rr = r.get(GROUPCOORD), r.get(BASELINE)
        if gc is None:
            continue
        med = gc["stats"]["median"] * 1e3
        mn = gc["stats"]["min"] * 1e3
        rr_med = rr["stats"]["median"] * 1e3 if rr else float("nan")
        target = gc["extra_info"].get("target_ms")
        met = "" if target is None else ("yes" if med <= target else "**no**")
        lines.append("| %s | %.3f ms (%.3f) | %.3f ms | %.2fx | %s | %s |" % (
            group, med, mn, rr_med, rr_med / med, "<= %g ms" % target if target else "-", met))
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1]))
