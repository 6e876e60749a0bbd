"""Client-side assignor benchmarks (groupcoord.assign.classic), with kafka-python 3.0.12's own
sticky / range / roundrobin assignors beside ours where they finish in reasonable time.

Opt-in only (the project's testpaths is tests/ and its addopts disable benchmarks):

    PYTHONPATH=src python -m pytest benchmarks/bench_assign_classic.py --benchmark-enable \\
        -p no:cacheprovider --benchmark-json=assign-classic.json
    python benchmarks/bench_assign_classic.py --table assign-classic.json   # markdown table

Shapes (members subscribe to every topic unless said otherwise; member ids sort as indices):
  * 1M partitions (1000 topics x 1000) x 2000 members -- franz-go's published sticky shape:
      FULL      a new group: nobody owns anything (generation -1 everywhere);
      JOIN_ONE  1999 members own a balanced assignment (generation 1), one member joins;
      LEAVE_ONE 2000 members own a balanced assignment, member 1000 leaves (1999 stay);
      STEADY    2000 members own a balanced assignment, nothing changes.
    Plus the same four on heterogeneous subscriptions (each member 100 random topics of the
    1000: 100k partitions each) and a RESUB case (10% of the members swap 10 topics).
  * 10k partitions (100 x 100) x 1000 members, FULL and JOIN_ONE, beside kafka-python's
    StickyPartitionAssignor (one round each: it takes ~15-20 s per call), and range /
    roundrobin beside kafka-python's.

Timed: one call of the public array API (``cooperative_sticky``, ``range_assign``,
``roundrobin``) on prepared numpy inputs -- validation, claim resolution, the assignment and
the withheld set included. kafka-python: one ``assign(cluster, members)`` on decoded member
metadata (its previous assignments passed as already-decoded StickyAssignorUserData
objects). Ours end-to-end (``impl=groupcoord-e2e``: ConsumerProtocolSubscription messages in,
ConsumerProtocolAssignment messages out, via ``classic.assign``) is timed for the 10k rows too.
Before timing, every case checks its result (balance, withheld counts, parity).
"""
import functools
import json
import sys
from collections import namedtuple

import numpy as np
import pytest

from groupcoord.assign import classic as C
from groupcoord.protocol.messages import (ConsumerProtocolSubscription,
                                          ConsumerProtocolSubscriptionTopicPartition)

pytestmark = [pytest.mark.perf, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

OURS, OURS_E2E, KAFKA_PYTHON = "groupcoord", "groupcoord-e2e", "kafka-python"


def _owned_from(owner, n_members):
    order = np.argsort(owner, kind="stable")
    cnt = np.bincount(owner[owner >= 0], minlength=n_members)
    ip = np.zeros(n_members + 1, np.int64)
    np.cumsum(cnt, out=ip[1:])
    return ip, order[np.count_nonzero(owner < 0):].astype(np.int32)


def _homog(T, M):
    return (np.arange(M + 1, dtype=np.int64) * T, np.tile(np.arange(T, dtype=np.int32), M))


def _fresh(ppt, sip, subs):
    M = sip.shape[0] - 1
    return C.cooperative_sticky(ppt, sip, subs, np.zeros(M + 1, np.int64),
                                np.zeros(0, np.int32), np.full(M, -1, np.int32)).final_owner


Case = namedtuple("Case", "args check")


@functools.lru_cache(maxsize=None)
def sticky_case(shape: str, scenario: str) -> Case:
    """-> the cooperative_sticky arguments of a scenario and a check of its result."""
    rng = np.random.default_rng(20260101)
    if shape == "1M x 2k":
        T, P, M = 1000, 1000, 2000
    else:
        T, P, M = 100, 100, 1000
    ppt = np.full(T, P, np.int32)
    hetero = scenario.startswith("HETERO")
    scenario = scenario.replace("HETERO ", "")
    if hetero:
        picks = [np.sort(rng.choice(T, 100, replace=False)).astype(np.int32)
                 for _ in range(M + 1)]
        subs_all = np.concatenate(picks)
        sip_all = np.arange(M + 2, dtype=np.int64) * 100
    else:
        sip_all, subs_all = _homog(T, M + 1)

    def first(n):                       # subscriptions of members 0..n-1
        return sip_all[:n + 1], subs_all[:sip_all[n]]

    sip, subs = first(M)
    if scenario == "FULL":
        oip, owned, gen = np.zeros(M + 1, np.int64), np.zeros(0, np.int32), np.full(M, -1,
                                                                                    np.int32)
        expect_withheld = 0
    elif scenario == "JOIN_ONE":
        prev = _fresh(ppt, *first(M - 1))
        oip, owned = _owned_from(prev, M)
        gen = np.full(M, 1, np.int32)
        gen[-1] = -1
        expect_withheld = None if hetero else int(ppt.sum()) // M
    elif scenario == "LEAVE_ONE":
        prev = _fresh(ppt, *first(M + 1))
        prev[prev == 1000] = -1                             # member 1000 leaves
        prev[prev > 1000] -= 1
        keep = np.r_[0:1000, 1001:M + 1]
        sip = np.zeros(M + 1, np.int64)
        np.cumsum(np.diff(sip_all)[keep], out=sip[1:])
        subs = np.concatenate([subs_all[sip_all[m]:sip_all[m + 1]] for m in keep])
        oip, owned = _owned_from(prev, M)
        gen = np.full(M, 1, np.int32)
        # homogeneous: the leaver's units are free, nothing owned moves; heterogeneous: a
        # chain may have to move a few owned units for balance
        expect_withheld = None if hetero else 0
    elif scenario == "STEADY":
        prev = _fresh(ppt, sip, subs)
        oip, owned = _owned_from(prev, M)
        gen = np.full(M, 1, np.int32)
        expect_withheld = 0
    elif scenario == "RESUB":
        prev = _fresh(ppt, sip, subs)
        oip, owned = _owned_from(prev, M)
        gen = np.full(M, 1, np.int32)
        per = subs.reshape(M, 100).copy()
        for m in rng.choice(M, M // 10, replace=False):
            keep = per[m][10:]
            new = rng.choice(np.setdiff1d(np.arange(T), keep), 10, replace=False)
            per[m] = np.sort(np.concatenate([keep, new]))
        subs = per.ravel().astype(np.int32)
        expect_withheld = None
    else:
        raise ValueError(scenario)
    args = (ppt, sip, subs, oip, owned, gen)

    def check(res):
        final = res.final_owner
        cnt = np.bincount(final[final >= 0], minlength=M)
        if not hetero:
            assert cnt.max() - cnt.min() <= 1 and cnt.sum() == ppt.sum()
        else:
            assert cnt.max() - cnt.min() <= 2            # (dec-min is tested in tests/)
        if expect_withheld is not None:
            assert res.withheld.size == expect_withheld, (res.withheld.size, expect_withheld)
    return Case(args, check)


SCENARIOS_1M = ["FULL", "JOIN_ONE", "LEAVE_ONE", "STEADY",
                "HETERO FULL", "HETERO JOIN_ONE", "HETERO LEAVE_ONE", "HETERO STEADY",
                "HETERO RESUB"]


@pytest.mark.parametrize("scenario", SCENARIOS_1M)
def test_cooperative_sticky_1m_x_2k(benchmark, scenario):
    case = sticky_case("1M x 2k", scenario)
    case.check(C.cooperative_sticky(*case.args))
    benchmark.group = "cooperative_sticky 1M x 2k %s" % scenario
    benchmark.extra_info.update(impl=OURS, shape="1M x 2k", scenario=scenario)
    benchmark.pedantic(C.cooperative_sticky, args=case.args, rounds=15, iterations=1,
                       warmup_rounds=1)


# ----------------------------------------------------------------------------- kafka-python

_KMember = namedtuple("_KMember", "member_id group_instance_id metadata")
_KMeta = namedtuple("_KMeta", "topics user_data")


class _KCluster:
    def __init__(self, T, P):
        self.names = ["t%03d" % t for t in range(T)]
        self.parts = set(range(P))

    def topics(self):
        return list(self.names)

    def partitions_for_topic(self, topic):
        return self.parts


def _kafka_python_members(case, T, P):
    """kafka-python's view of a sticky case: topics, and each member's previous assignment
    and generation as a decoded StickyAssignorUserData (what its parse accepts)."""
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserData
    ppt, sip, subs, oip, owned, gen = case.args
    members = []
    for m in range(sip.shape[0] - 1):
        topics = ["t%03d" % t for t in subs[sip[m]:sip[m + 1]]]
        units = owned[oip[m]:oip[m + 1]]
        ud = b""
        if units.size:
            by = {}
            for u in sorted(units.tolist()):
                by.setdefault("t%03d" % (u // P), []).append(u % P)
            ud = StickyAssignorUserData(sorted(by.items()), int(gen[m]))
        members.append(_KMember("member-%04d" % m, None, _KMeta(topics, ud)))
    return members


def _kafka_python_owner(out, T, P, M):
    owner = np.full(T * P, -1, np.int32)
    for m in range(M):
        for topic, parts in out["member-%04d" % m].assigned_partitions:
            for p in parts:
                owner[int(topic[1:]) * P + p] = m
    return owner


def _subscription_messages(case, P):
    ppt, sip, subs, oip, owned, gen = case.args
    msgs = []
    for m in range(sip.shape[0] - 1):
        units = owned[oip[m]:oip[m + 1]]
        by = {}
        for u in sorted(units.tolist()):
            by.setdefault("t%03d" % (u // P), []).append(u % P)
        msgs.append(ConsumerProtocolSubscription(
            topics=["t%03d" % t for t in subs[sip[m]:sip[m + 1]]], generation_id=int(gen[m]),
            owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=p)
                              for t, p in by.items()]))
    return msgs


@pytest.mark.parametrize("impl", [OURS, OURS_E2E, KAFKA_PYTHON])
@pytest.mark.parametrize("scenario", ["FULL", "JOIN_ONE"])
def test_sticky_10k_x_1k(benchmark, scenario, impl):
    T, P, M = 100, 100, 1000
    case = sticky_case("10k x 1k", scenario)
    benchmark.group = "sticky 10k x 1k %s" % scenario
    benchmark.extra_info.update(impl=impl, shape="10k x 1k", scenario=scenario)
    if impl == OURS:
        case.check(C.cooperative_sticky(*case.args))
        benchmark.pedantic(C.cooperative_sticky, args=case.args, rounds=50, iterations=1,
                           warmup_rounds=2)
    elif impl == OURS_E2E:
        msgs = _subscription_messages(case, P)
        parts = {"t%03d" % t: P for t in range(T)}
        out = C.assign("cooperative-sticky", msgs, parts)
        withheld = T * P // M if scenario == "JOIN_ONE" else 0   # the newcomer's, this round
        assert sum(sum(len(tp.partitions) for tp in a.assigned_partitions)
                   for a in out) == T * P - withheld
        benchmark.pedantic(C.assign, args=("cooperative-sticky", msgs, parts), rounds=10,
                           iterations=1, warmup_rounds=1)
    else:
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
        members = _kafka_python_members(case, T, P)
        cluster = _KCluster(T, P)
        result = {}

        def run():
            result["out"] = StickyPartitionAssignor().assign(cluster, members)
        benchmark.pedantic(run, rounds=1, iterations=1)     # ~15-20 s a call
        owner = _kafka_python_owner(result["out"], T, P, M)
        cnt = np.bincount(owner[owner >= 0], minlength=M)
        assert cnt.max() - cnt.min() <= 1 and cnt.sum() == T * P


@pytest.mark.parametrize("impl", [OURS, KAFKA_PYTHON])
@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_range_roundrobin_10k_x_1k(benchmark, name, impl):
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    T, P, M = 100, 100, 1000
    ppt = np.full(T, P, np.int32)
    sip, subs = _homog(T, M)
    ours = C.range_assign if name == "range" else C.roundrobin
    theirs = RangePartitionAssignor if name == "range" else RoundRobinPartitionAssignor
    members = [_KMember("member-%04d" % m, None, _KMeta(["t%03d" % t for t in range(T)], b""))
               for m in range(M)]
    cluster = _KCluster(T, P)
    assert np.array_equal(ours(ppt, sip, subs),
                          _kafka_python_owner(theirs.assign(cluster, members), T, P, M))
    benchmark.group = "%s 10k x 1k" % name
    benchmark.extra_info.update(impl=impl, shape="10k x 1k", scenario=name)
    if impl == OURS:
        benchmark.pedantic(ours, args=(ppt, sip, subs), rounds=100, iterations=1,
                           warmup_rounds=3)
    else:
        benchmark.pedantic(theirs.assign, args=(cluster, members), rounds=5, iterations=1)


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_range_roundrobin_1m_x_2k(benchmark, name):
    ppt = np.full(1000, 1000, np.int32)
    sip, subs = _homog(1000, 2000)
    fn = C.range_assign if name == "range" else C.roundrobin
    cnt = np.bincount(fn(ppt, sip, subs), minlength=2000)
    if name == "range":          # per topic: 1000 partitions, 2000 members -> first 1000 only
        assert np.all(cnt[:1000] == 1000) and np.all(cnt[1000:] == 0)
    else:
        assert np.all(cnt == 500)
    benchmark.group = "%s 1M x 2k" % name
    benchmark.extra_info.update(impl=OURS, shape="1M x 2k", scenario=name)
    benchmark.pedantic(fn, args=(ppt, sip, subs), rounds=15, iterations=1, warmup_rounds=1)


# ----------------------------------------------------------------------------- table

def table(path: str) -> str:
    """Markdown table from a --benchmark-json file: median (min) per benchmark, and the
    ratios kafka-python median / groupcoord median (kernel, and end-to-end) per group."""
    data = json.load(open(path))
    groups = {}
    for b in data["benchmarks"]:
        groups.setdefault(b["group"], {})[b["extra_info"]["impl"]] = b["stats"]
    rows = ["| benchmark | groupcoord median (min) | kafka-python | ratio | "
            "groupcoord-e2e median | ratio e2e |", "|---|---:|---:|---:|---:|---:|"]

    def ms(v):
        v *= 1e3
        return "%.1f ms" % v if v >= 1 else "%.0f us" % (v * 1e3)

    def ratio(a, b):
        return ("%.0fx" % (a["median"] / b["median"])) if a and b else ""
    for g in groups:
        im = groups[g]
        ours, e2e, kp = im.get(OURS), im.get(OURS_E2E), im.get(KAFKA_PYTHON)
        rows.append("| %s | %s | %s | %s | %s | %s |" % (
            g, "%s (%s)" % (ms(ours["median"]), ms(ours["min"])) if ours else "",
            ("%.2f s" % kp["median"] if kp["median"] >= 1 else ms(kp["median"])) if kp else "",
            ratio(kp, ours), ms(e2e["median"]) if e2e else "", ratio(kp, e2e)))
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    else:
        print(__doc__)
