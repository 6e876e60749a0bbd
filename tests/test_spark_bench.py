"""spark_bench: reproducible generation, hand-checked metrics of every workload, the
never-owned-twice check, and the Spark path (mapInArrow) against the plain single-process
loop. The many-groups API it runs on (groupcoord.assign.many) has its own tests:
tests/test_assign_many.py.

Tests marked ``spark`` share one local SparkSession (session scope: starting the JVM costs
seconds); the others need no Spark.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from groupcoord.assign import many as B

from spark_bench import gen, simulate as S, workloads as W
from spark_bench.gen import Group

SEED = int(os.environ.get("SPARK_BENCH_TEST_SEED", "20261121"))


# ------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session: 2 cores, UI off, workers on this
    interpreter with the repository root (spark_bench) and groupcoord's directory on their
    path (spark_bench.spark.session does both)."""
    from spark_bench import spark as SP
    s = SP.session("local[2]", driver_memory="1g", app="spark_bench-tests",
                   conf={"spark.sql.shuffle.partitions": "2"})
    yield s
    s.stop()


# ------------------------------------------------------------------------------ generation

def test_generation_is_reproducible_from_the_seed():
    cfg = gen.GenConfig(seed=7, task_dist="zipf", partition_dist="uniform",
                        subscriptions="nested")
    for view, events in (("connect", gen.CONNECT_EVENTS), ("consumer", gen.CONSUMER_EVENTS)):
        for i, ev in enumerate(events):
            a = gen.make_group(cfg, 100 + i, 50, 500, view, ev)
            b = gen.make_group(cfg, 100 + i, 50, 500, view, ev)
            c = gen.make_group(gen.GenConfig(seed=8, task_dist="zipf",
                                             partition_dist="uniform",
                                             subscriptions="nested"), 100 + i, 50, 500, view,
                               ev)
            assert gen.digest(a) == gen.digest(b)
            assert gen.digest(a) != gen.digest(c)
    assert gen.plan_groups(3, 10, 1000, 10000, "zipf") == gen.plan_groups(3, 10, 1000, 10000,
                                                                         "zipf")


def test_generated_events_change_what_they_say():
    cfg = gen.GenConfig(seed=1, churn_fraction=0.2)
    g = gen.make_group(cfg, 0, 20, 200, "connect", "join-many")
    assert g.present[0].sum() == 20 and g.present[1].sum() == 24
    g = gen.make_group(cfg, 0, 20, 200, "connect", "leave-one")
    assert g.present[1].sum() == 19
    g = gen.make_group(cfg, 0, 20, 200, "connect", "bounce-beyond")
    assert len(g.present) == 3 and g.present[1].sum() == 19 and g.present[2].sum() == 20
    g = gen.make_group(cfg, 0, 20, 200, "connect", "connectors-removed")
    assert (g.size_after == 0).sum() == 4 and int((g.size_before - 1).sum()) == 200
    g = gen.make_group(cfg, 0, 20, 200, "connect", "connectors-added")
    assert (g.size_before == 0).sum() == 4
    g = gen.make_group(cfg, 0, 20, 200, "consumer", "partitions-added")
    assert g.size_after.sum() > g.size_before.sum() == 200
    for pat in gen.SUBSCRIPTIONS:
        g = gen.make_group(gen.GenConfig(seed=1, subscriptions=pat, topics=8), 0, 8, 80,
                           "consumer", "join-one")
        rows = [set(g.subs[g.sub_indptr[m]:g.sub_indptr[m + 1]]) for m in range(9)]
        if pat == "homogeneous":
            assert all(r == set(range(8)) for r in rows)
        elif pat == "disjoint":
            assert rows[0].isdisjoint(rows[1]) and rows[0] == rows[4]
        else:
            assert rows[0] < rows[1] < rows[2] < rows[3]
    for dist in gen.SIZE_DISTS:
        s = gen.blocks_for_total(np.random.default_rng(0), dist if dist != "zipf" else
                                 "zipf:2", 10.0, 1234)
        assert s.sum() == 1234 and s.min() >= 1


# ------------------------------------------------------------------------------ hand-checked

def _consumer_join_group(ppt=4):
    """2 members (heartbeat phases 0.5 s and 1.0 s) on one topic of 4 partitions; a third
    member (phase 1.5 s, id sorting last) joins."""
    return Group(0, "consumer", "join-one", np.array([ppt]), np.array([ppt]),
                 [np.array([True, True, False]), np.array([True, True, True])],
                 sub_indptr=np.array([0, 1, 2, 3]), subs=np.zeros(3, np.int32),
                 phase=np.array([0.5, 1.0, 1.5]))


def test_assign_metrics_by_hand():
    # connect: 2 workers, one connector with 3 tasks (units c, t0, t1, t2); a worker joins
    g = Group(0, "connect", "join-one", np.array([4]), np.array([4]),
              [np.array([True, True, False]), np.array([True, True, True])],
              phase=np.zeros(3))
    rows = {r["config"]: r for r in W._assign("connect", "join-one", "1-9", [g],
                                              ("eager", "incremental-cooperative"), 0.0)}
    ica = rows["incremental-cooperative"]
    # before: c->w0, tasks by water fill t0->w0, t1->w1, t2->w0; after: w0 keeps its lowest
    # task, t2 moves to the new worker: 1 move, the minimum; the connector stays
    assert (ica["moved"], ica["min_moved"], ica["spread_max"]) == (1, 1, 1)
    assert ica["invalid_groups"] == 0 and ica["list_violations"] == 0
    assert ica["units"] == 4 and ica["workers"] == 3 and ica["units_assigned"] == 8
    eager = rows["eager"]
    # eager round robin: before c->0, t0->1, t1->0, t2->1; after c->0, t0->1, t1->2, t2->0
    assert (eager["moved"], eager["min_moved"]) == (2, 1)
    rows = {r["config"]: r for r in W._assign("consumer", "join-one", "1-9",
                                              [_consumer_join_group()],
                                              ("uniform", "range", "cooperative-sticky"), 0)}
    # uniform/cooperative-sticky: m0 keeps p0 p1 (the +1 slot), m1 keeps p2, p3 -> m2
    assert rows["uniform"]["moved"] == rows["uniform"]["min_moved"] == 1
    assert rows["cooperative-sticky"]["moved"] == 1
    # range: before m0 p0 p1, m1 p2 p3; after m0 p0 p1, m1 p2, m2 p3: also 1 move
    assert rows["range"]["moved"] == 1 and rows["range"]["spread_max"] == 1


def test_reconcile_metrics_by_hand():
    p = S.SimParams(heartbeat_s=3.0, rebalance_s=0.2)
    r = S.simulate([_consumer_join_group()], "declarative", p)
    # target m0: p0 p1, m1: p2, m2: p3. Round 1: m1 (t=1.0) is told to revoke p3, m2 (1.5)
    # gets nothing (p3 unreleased). Round 2: m1 releases p3 at 4.0, m2 takes it at 4.5.
    assert r.rounds[0] == 2
    assert r.converge_s[0] == pytest.approx(4.5)
    assert r.down[0] == pytest.approx(0.5)
    assert r.max_unowned[0] == 1
    assert r.in_flight[:3, 0].tolist() == [1, 0, 0]
    assert r.owned_twice[0] == 0 and r.moved[0] == 1 and r.unconverged[0] == 0


def test_compare_downtime_by_hand():
    p = S.SimParams(heartbeat_s=3.0, rebalance_s=0.2)
    g = [_consumer_join_group()]
    eager = S.simulate(g, "eager", p)
    # everyone stops at its heartbeat (m0 at 0.5: p0 p1, m1 at 1.0: p2 p3), the sync follows
    # the last join (1.5) after 0.2 s: 2 x 1.2 + 2 x 0.7 task-seconds
    assert eager.down[0] == pytest.approx(3.8)
    assert eager.converge_s[0] == pytest.approx(1.7) and eager.max_unowned[0] == 4
    coop = S.simulate(g, "cooperative", p)
    # p3 revoked at the first sync (1.7), given at the second (1.7 + 1.5 + 0.2)
    assert coop.down[0] == pytest.approx(1.7)
    assert coop.converge_s[0] == pytest.approx(3.4)
    decl = S.simulate(g, "declarative", p)
    assert decl.down[0] == pytest.approx(0.5)
    assert eager.owned_twice[0] == coop.owned_twice[0] == decl.owned_twice[0] == 0


def test_connect_leave_waits_for_the_scheduled_delay():
    # 3 workers, one connector with 5 tasks; worker 2 leaves: its units stay down until the
    # delay expires (incremental cooperative) but move at once with eager
    g = Group(0, "connect", "leave-one", np.array([6]), np.array([6]),
              [np.ones(3, bool), np.array([True, True, False])], phase=np.array([0.1, 0.2, 0.3]))
    p = S.SimParams(heartbeat_s=1.0, rebalance_s=0.0, delay_s=10.0)
    decl = S.simulate([g], "declarative", p)
    # before (ICA from empty): c->w0, tasks w0 w1 w2 w0 w1: w2 held one task
    assert decl.first_converge_s[0] == 0.0            # nothing moves before the delay
    assert decl.down[0] == pytest.approx(10.1)        # held 10 s, taken at w0's heartbeat
    assert decl.converge_s[0] == pytest.approx(10.1)
    eager = S.simulate([g], "eager", p)
    assert eager.converge_s[0] == pytest.approx(0.2)  # the last member's heartbeat


def test_never_owned_twice_check_fails_on_a_broken_reconciler():
    g = [_consumer_join_group()]
    ok = S.simulate(g, "declarative", S.SimParams())
    bad = S.simulate(g, "declarative", S.SimParams(broken=True))
    assert ok.owned_twice[0] == 0
    # the broken reconciler gives p3 to m2 (t=1.5) before m1 released it (t=4.0)
    assert bad.owned_twice[0] == 1
    # the check reads only the member-side record
    n = B.owned_twice_many([0, 2], np.array([-1, 1], np.int32), np.array([0, 2], np.int32),
                           np.array([2.0, np.nan]), np.array([1.0, np.nan]))
    assert n[0] == 2          # unit 0 acquired before its release; unit 1 held twice now


def test_every_protocol_converges_on_every_event():
    cfg = gen.GenConfig(seed=SEED)
    print("seed", SEED)
    for view, events in (("connect", gen.CONNECT_EVENTS), ("consumer", gen.CONSUMER_EVENTS)):
        for ev in events:
            groups = [gen.make_group(cfg, i, 12, 100, view, ev) for i in range(4)]
            for proto in S.PROTOCOLS:
                r = S.simulate(groups, proto, S.SimParams())
                assert r.owned_twice.sum() == 0, (view, ev, proto)
                assert r.unconverged.sum() == 0, (view, ev, proto)
                assert (r.down >= 0).all()


# ------------------------------------------------------------------------------ Spark

@pytest.mark.spark
def test_generation_independent_of_partitioning(spark):
    from spark_bench import spark as SP
    opts = W.Options(cluster=gen.GenConfig(seed=SEED))
    rows = gen.plan_groups(SEED, 9, 90, 900, "uniform", giant=False)
    one = SP.digests(spark, [rows], opts).toPandas()
    three = SP.digests(spark, [rows[0:2], rows[2:7], rows[7:]], opts).toPandas()
    key = ["group_id", "view"]
    a = one.sort_values(key).reset_index(drop=True)
    b = three.sort_values(key).reset_index(drop=True)
    assert len(a) == 18 and a.equals(b)
    # and the driver-side generation agrees with the executors'
    local = {(g, v): gen.digest(gen.make_group(opts.cluster, g, w, t, v,
                                               gen.event_for(v, g, opts.events)))
             for g, w, t in rows for v in gen.VIEWS}
    assert {(int(r.group_id), r.view): r.digest for r in a.itertuples()} == local


@pytest.mark.spark
@pytest.mark.parametrize("workload", W.WORKLOADS)
def test_spark_equals_plain_loop(spark, workload):
    from spark_bench import report, spark as SP
    opts = W.Options(cluster=gen.GenConfig(seed=SEED))
    rows = gen.plan_groups(SEED, 16, 160, 1600, "zipf", giant=True)
    parts = SP.partition_plan(rows, units_per_partition=800)
    assert len(parts) > 1
    got, _ = SP.run_job(spark, workload, parts, opts, progress=False)
    ref, _ = SP.baseline(workload, parts, opts)
    timing = {"gen_s", "kernel_s", "wall_s", "initial_s", "rebalance_s", "task_s",
              "task_s_max"}
    cols = [n for n, _ in W.NUMERIC if n not in timing]
    key = W.KEYS
    a = got.sort_values(key).reset_index(drop=True)
    b = ref.sort_values(key).reset_index(drop=True)
    assert a[key].equals(b[key])
    for c in cols:
        assert np.allclose(a[c].to_numpy(float), b[c].to_numpy(float)), c
    if workload == "reconcile":
        # the Spark-side aggregation (used beyond LOCAL_AGGREGATE_MAX_PARTITIONS) agrees
        sp = SP.aggregate(SP.partials(spark, workload, parts, opts)).toPandas()
        sp = sp.sort_values(key).reset_index(drop=True)
        for c in cols:
            assert np.allclose(sp[c].to_numpy(float), a[c].to_numpy(float)), c
    t = report.derive(got)
    if workload == "assign":
        assert t["valid"].all()
        assert set(t["config"]) == set(W.CONNECT_ASSIGNORS + W.CONSUMER_ASSIGNORS)
    else:
        assert t["never_owned_twice"].all() and (t["unconverged"] == 0).all()
    assert (t["groups"].groupby([t["view"], t["config"]]).sum() == 17).all()


@pytest.mark.spark
def test_cli_writes_table_and_plot(spark, tmp_path, capsys):
    from spark_bench.__main__ import main
    rc = main(["compare", "--master", "local[2]", "--groups", "6", "--workers", "60",
               "--tasks", "600", "--no-giant", "--out", str(tmp_path), "--no-warmup",
               "--no-progress", "--baseline", "on", "--delay-ms", "6000"])
    assert rc == 0
    for f in ("compare.parquet", "compare.csv", "compare.png", "compare-run.json"):
        assert (tmp_path / f).stat().st_size > 0
    import pandas as pd
    t = pd.read_parquet(tmp_path / "compare.parquet")
    assert set(t["config"].str.split(" ").str[0]) == set(S.PROTOCOLS)
    assert t["downtime_per_rebalance_s"].notna().all()
    out = capsys.readouterr().out
    assert "downtime" in out and "speed-up" in out
    # a line per stage with the time since the start, also without progress bars
    for stage in ("starting Spark", "compare job", "baseline", "plots"):
        assert re.search(r"^\[\s*\d+\.\d s\] %s: done in \d+\.\d s$" % stage, out, re.M), stage
    # compare alone: no summary figure (it needs the assign results too)
    assert not (tmp_path / "summary.png").exists()


def test_cli_help():
    import subprocess
    r = subprocess.run([sys.executable, "-m", "spark_bench", "--help"], capture_output=True,
                       text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(
                           __file__))))
    assert r.returncode == 0 and "--master" in r.stdout and "reconcile" in r.stdout
