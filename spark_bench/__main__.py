"""python -m spark_bench {assign,reconcile,compare,plot} [options]  (docs/spark-bench.md)"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import threading
import time

from spark_bench import gen, simulate as S
from spark_bench.engine import ASSIGNORS

EPILOG = """\
workloads:
  assign     every assignor on every group: time, balance, stickiness (units moved vs the
             minimum a balanced assignment needs), validation
  reconcile  KIP-848 / Connect declarative reconciliation after each churn event, in rounds of
             heartbeats: rounds and time to converge, units in flight per round, max units
             unowned, never-owned-twice check
  compare    eager vs incremental-cooperative vs declarative on the same groups: task-seconds
             of downtime per rebalance
  plot       no Spark: redraw every <workload>.png in --out from its Parquet results, and
             summary.png ("which assignor should I use") when assign and compare are there

The default shape (--groups 1000 --workers 1000000 --tasks 10000000) is 1,000 groups sharing
1M workers and 10M tasks, plus (unless --no-giant) one giant group of 1M workers x 10M tasks.
Outputs in --out: <workload>.parquet, <workload>.csv (one row per workload, view, config,
event and group-size bucket), <workload>.png, <workload>-run.json; summary.png once --out
holds both assign and compare results.

examples:
  python -m spark_bench assign --workers 1000000 --tasks 10000000
  python -m spark_bench compare --groups 200 --workers 20000 --tasks 200000 --no-giant
  python -m spark_bench reconcile --master spark://host:7077 --groups 100000 ...
  python -m spark_bench plot --out spark-bench-out
"""


def _csv(kind, choices):
    def parse(s):
        if s == "all":
            return tuple(choices)
        vals = tuple(x.strip() for x in s.split(",") if x.strip())
        bad = [v for v in vals if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError("unknown %s %s (choose from %s, or all)"
                                             % (kind, ", ".join(bad), ", ".join(choices)))
        return vals
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m spark_bench", description="Benchmark groupcoord's assignors and "
        "rebalance protocols on synthetic clusters with PySpark.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=("assign", "reconcile", "compare", "plot"))
    g = p.add_argument_group("spark")
    g.add_argument("--master", default="local[*]",
                   help="Spark master URL (default local[*]; local[2], spark://host:7077, "
                        "yarn, k8s://...)")
    g.add_argument("--driver-memory", default="4g", help="spark.driver.memory (default 4g)")
    g.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark configuration, repeatable")
    g.add_argument("--units-per-partition", type=int, default=2_000_000,
                   help="batch size: units per Spark partition (one kernel batch); a larger "
                        "group gets a partition of its own (default 2,000,000)")
    g.add_argument("--no-warmup", action="store_true",
                   help="skip the warm-up job (a small job run first and discarded)")
    g.add_argument("--baseline", choices=("on", "off", "pool"), default="on",
                   help="on: also run the same batches in a plain single-process loop and "
                        "report Spark's speed-up and overhead; pool: and on a pool of as "
                        "many plain processes as Spark has cores (default on)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the one-line-per-stage log stays)")
    g = p.add_argument_group("population")
    g.add_argument("--groups", type=int, default=1000,
                   help="regular groups (default 1000)")
    g.add_argument("--workers", type=int, default=1_000_000,
                   help="workers (members) over all regular groups; also the giant group's "
                        "size (default 1,000,000)")
    g.add_argument("--tasks", type=int, default=10_000_000,
                   help="tasks (connect) / partitions (consumer) over all regular groups; "
                        "also the giant group's (default 10,000,000)")
    g.add_argument("--no-giant", action="store_true",
                   help="no giant group of --workers x --tasks")
    g.add_argument("--seed", type=int, default=0, help="seed of everything generated")
    g.add_argument("--size-dist", choices=gen.SIZE_DISTS, default="fixed",
                   help="workers per regular group: fixed, uniform on [1, 2 mean - 1], or "
                        "Zipf (default fixed)")
    g.add_argument("--zipf-a", type=float, default=2.0, help="Zipf exponent (default 2.0)")
    g.add_argument("--task-dist", choices=gen.SIZE_DISTS, default="fixed",
                   help="tasks per connector (default fixed)")
    g.add_argument("--tasks-per-connector", type=float, default=10.0,
                   help="mean tasks per connector (default 10)")
    g.add_argument("--partition-dist", choices=gen.SIZE_DISTS, default="fixed",
                   help="how a consumer group's partitions spread over its topics "
                        "(default fixed)")
    g.add_argument("--topics", type=int, default=8, help="topics per consumer group (default 8)")
    g.add_argument("--subscriptions", choices=gen.SUBSCRIPTIONS, default="homogeneous",
                   help="consumer subscriptions: homogeneous (all topics), disjoint (k "
                        "classes of topics), nested (class j = first (j+1)/k of the topics)")
    g.add_argument("--sub-classes", type=int, default=4,
                   help="k for disjoint / nested subscriptions (default 4)")
    g.add_argument("--views", type=_csv("view", gen.VIEWS), default=gen.VIEWS,
                   help="connect, consumer or all (default all)")
    g.add_argument("--events", type=_csv("event", gen.ALL_EVENTS), default=gen.ALL_EVENTS,
                   help="churn events, comma list or all: " + ", ".join(gen.ALL_EVENTS) +
                        " (each group gets one, cycling over group ids)")
    g.add_argument("--churn-fraction", type=float, default=0.1,
                   help="'many' events: this fraction of the members / connectors / topics "
                        "(default 0.1, at least 2)")
    g.add_argument("--assignors", type=_csv("assignor", ASSIGNORS), default=ASSIGNORS,
                   help="assign workload: " + ", ".join(ASSIGNORS) + " (default all)")
    g = p.add_argument_group("protocol timing (reconcile, compare)")
    g.add_argument("--heartbeat-ms", type=float, default=3000,
                   help="heartbeat interval = one round (default 3000)")
    g.add_argument("--rebalance-ms", type=float, default=200,
                   help="join + sync round trip of a classic rebalance (default 200)")
    g.add_argument("--delay-ms", type=float, default=300_000,
                   help="Connect scheduled.rebalance.max.delay.ms (default 300000)")
    g.add_argument("--bounce-ms", type=float, default=30_000,
                   help="how long a bouncing worker is away (bounce-within: at most half "
                        "the delay; bounce-beyond: delay + this) (default 30000)")
    g.add_argument("--max-rounds", type=int, default=100,
                   help="give up a phase after this many rounds (default 100)")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="spark-bench-out", help="output directory")
    return p


def options(a):
    from spark_bench.workloads import Options
    cfg = gen.GenConfig(seed=a.seed, task_dist=a.task_dist,
                        tasks_per_connector=a.tasks_per_connector,
                        partition_dist=a.partition_dist, topics=a.topics, zipf_a=a.zipf_a,
                        subscriptions=a.subscriptions, sub_classes=a.sub_classes,
                        churn_fraction=a.churn_fraction, heartbeat_ms=a.heartbeat_ms)
    sim = S.SimParams(heartbeat_s=a.heartbeat_ms / 1000, rebalance_s=a.rebalance_ms / 1000,
                      delay_s=a.delay_ms / 1000, bounce_s=a.bounce_ms / 1000,
                      max_rounds=a.max_rounds)
    return Options(cluster=cfg, events=a.events, views=a.views, assignors=a.assignors, sim=sim)


class Steps:
    """What the run is doing, one line per stage with the seconds since the start: starting
    the JVM and the warm-up job take many seconds with nothing else on the screen. A stage
    that has no progress bar prints a 'still ...' line every ``tick`` seconds."""

    def __init__(self, tick: float = 15.0, out=None):
        self.t0 = time.perf_counter()
        self.tick = tick
        self.out = out          # None: sys.stdout at the time of each line

    def say(self, msg: str):
        print("[%6.1f s] %s" % (time.perf_counter() - self.t0, msg), file=self.out,
              flush=True)

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "", ticking: bool = True):
        self.say("%s%s ..." % (name, ": " + detail if detail else ""))
        t = time.perf_counter()
        stop = threading.Event()

        def tick():
            while not stop.wait(self.tick):
                self.say("  still %s (%.0f s so far)" % (name, time.perf_counter() - t))
        th = threading.Thread(target=tick, daemon=True) if ticking and self.tick else None
        if th:
            th.start()
        try:
            yield
        finally:
            stop.set()
            if th:
                th.join()
        self.say("%s: done in %.1f s" % (name, time.perf_counter() - t))


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    from spark_bench import report
    if a.workload == "plot":
        paths = report.replot(a.out)
        if not paths:
            print("no results (<workload>.parquet) in %s" % a.out)
            return 1
        print("wrote " + ", ".join(paths))
        return 0
    from spark_bench import spark as SP
    steps = Steps()
    opts = options(a)
    rows = gen.plan_groups(a.seed, a.groups, a.workers, a.tasks, a.size_dist,
                           giant=not a.no_giant, zipf_a=a.zipf_a)
    parts = SP.partition_plan(rows, a.units_per_partition)
    conf = dict(kv.split("=", 1) for kv in a.conf)
    steps.say("spark_bench %s: %d groups (%d workers, %d tasks in all) in %d partitions"
              % (a.workload, len(rows), sum(r[1] for r in rows), sum(r[2] for r in rows),
                 len(parts)))
    from pyspark.sql import SparkSession
    own_session = SparkSession.getActiveSession() is None   # stop only a session we start
    with steps.stage("starting Spark", "master %s, driver memory %s (the JVM starts)"
                     % (a.master, a.driver_memory)):
        spark = SP.session(a.master, a.driver_memory, conf=conf)
    try:
        cores = SP.cores(spark)
        steps.say("Spark is up: master %s, %d cores" % (a.master, cores))
        bars = not a.no_progress
        warm = None
        if not a.no_warmup:
            # First job: starts the Python workers, imports, JIT; its numbers are discarded.
            small = SP.partition_plan(rows[:min(len(rows), 2 * cores)], 1)
            small = [[(g, min(w, 100), min(t, 1000)) for g, w, t in p] for p in small]
            with steps.stage("warm-up job", "%d small groups, discarded (starts the Python "
                             "workers, imports groupcoord)" % sum(map(len, small)),
                             ticking=not bars):
                _, warm = SP.run_job(spark, a.workload, small, opts, progress=bars,
                                     label="warm-up")
        with steps.stage("%s job" % a.workload, "%d partitions on %d cores"
                         % (len(parts), cores), ticking=not bars):
            pdf, wall = SP.run_job(spark, a.workload, parts, opts, progress=bars,
                                   label=a.workload)
        timing = {"spark_s": wall, "cores": cores, "warmup_s": warm}
        if a.baseline in ("on", "pool"):
            with steps.stage("baseline", "the same batches in a plain single-process loop"):
                base, bwall = SP.baseline(a.workload, parts, opts)
            timing.update(baseline_s=bwall, speedup=bwall / wall,
                          overhead=wall * cores / bwall,
                          baseline_kernel_s=float(base["kernel_s"].sum()))
        if a.baseline == "pool":
            with steps.stage("pool baseline", "the same batches on %d plain processes"
                             % cores):
                _, pwall = SP.baseline_pool(a.workload, parts, opts, cores)
            timing.update(pool_s=pwall, pool_ratio=wall / pwall)
        table = report.derive(pdf)
        meta = {"argv": sys.argv if argv is None else argv, "args": vars(a), "timing": timing,
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "python": sys.version.split()[0]},
                "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        for col, val in (("spark_s", wall), ("baseline_s", timing.get("baseline_s")),
                         ("speedup", timing.get("speedup")),
                         ("overhead", timing.get("overhead")),
                         ("pool_s", timing.get("pool_s")),
                         ("pool_ratio", timing.get("pool_ratio"))):
            table[col] = val      # whole-run figures, repeated on every row
        paths = report.write(table, a.out, a.workload, meta)
        with steps.stage("plots", ticking=False):
            paths["png"] = report.plot(table, os.path.join(a.out, a.workload + ".png"),
                                       a.workload)
            summary = report.plot_summary(a.out)
            if summary:
                paths["summary"] = summary
        from rich.console import Console
        report.summary(table, a.workload, timing, console=Console(width=160))
        print("wrote " + ", ".join(paths.values()))
        if a.workload != "assign" and int(table["owned_twice"].sum()):
            print("FAILED: units owned by two members at once: %d"
                  % int(table["owned_twice"].sum()))
            return 1
        if a.workload == "assign" and not bool(table["valid"].all()):
            print("FAILED: invalid assignments (see the valid column)")
            return 1
        return 0
    finally:
        if own_session:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
