"""Spark side: the session, the plan as a DataFrame, mapInArrow, progress, the baseline.

Local mode (``--master local[*]``): executors are Python workers on this machine, started
with PYSPARK_PYTHON = this interpreter and a PYTHONPATH holding the repository root (for
spark_bench) and the directory groupcoord is imported from (src/ in a development checkout,
site-packages when it is pip-installed).

Cluster mode (any other master): every node needs groupcoord installed (it is a compiled
extension: ``pip install groupcoord`` or a packed environment through ``spark.archives``),
and spark_bench is shipped to the executors as a zip with ``sc.addPyFile`` (done here).
"""
from __future__ import annotations

import io
import os
import sys
import tempfile
import threading
import time
import zipfile

from spark_bench import workloads as W

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _groupcoord_root() -> str:
    import groupcoord
    return os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))


def worker_pythonpath() -> str:
    parts = [REPO, _groupcoord_root()]
    old = os.environ.get("PYTHONPATH")
    if old:
        parts += old.split(os.pathsep)
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


def is_local(master: str) -> bool:
    return master.startswith("local")


def session(master: str = "local[*]", driver_memory: str = "4g", app: str = "spark_bench",
            conf: dict = None, quiet: bool = True):
    """A SparkSession for the harness (UI off, Arrow on, workers on this interpreter)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pp = worker_pythonpath()
    # The JVM (and so the local Python workers it forks) inherits the driver's environment.
    os.environ["PYTHONPATH"] = pp
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", driver_memory)
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.shuffle.partitions", "8")
         .config("spark.python.worker.reuse", "true")
         .config("spark.executorEnv.PYTHONPATH", pp)
         .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
         .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR"))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    if not is_local(master):
        ship_package(spark)
    return spark


def ship_package(spark) -> str:
    """Zip spark_bench and add it to every executor's path (cluster mode)."""
    buf = io.BytesIO()
    pkg = os.path.join(REPO, "spark_bench")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(os.listdir(pkg)):
            if f.endswith(".py"):
                z.write(os.path.join(pkg, f), "spark_bench/" + f)
    path = os.path.join(tempfile.mkdtemp(prefix="spark_bench-"), "spark_bench.zip")
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())
    spark.sparkContext.addPyFile(path)
    return path


# ------------------------------------------------------------------------------ plan

def partition_plan(rows, units_per_partition: int = 2_000_000, max_groups: int = 2000):
    """Cut the plan (group_id, n_workers, n_tasks) into partitions of about
    ``units_per_partition`` units (a bigger group gets a partition of its own), group ids
    contiguous, so a partition is one batch for the kernels."""
    parts, cur, size = [], [], 0
    for r in rows:
        u = int(r[2]) + int(r[1])
        if cur and (size + u > units_per_partition or len(cur) >= max_groups):
            parts.append(cur)
            cur, size = [], 0
        cur.append(tuple(int(x) for x in r))
        size += u
    if cur:
        parts.append(cur)
    # Largest first: Spark starts tasks in partition order, so the giant group starts at
    # once instead of last (longest-processing-time-first keeps the cores busy).
    parts.sort(key=lambda p: -sum(int(r[1]) + int(r[2]) for r in p))
    return parts


PLAN_SCHEMA = "group_id long, n_workers long, n_tasks long"


def plan_frame(spark, parts):
    """The plan as a DataFrame with exactly one partition per batch (no shuffle)."""
    rdd = spark.sparkContext.parallelize(parts, max(len(parts), 1)).flatMap(lambda p: p)
    return spark.createDataFrame(rdd, PLAN_SCHEMA)


def _map_fn(workload: str, opts):
    def fn(batches):
        import time
        import pyarrow as pa
        t = time.perf_counter()
        tables = [pa.Table.from_batches([b]) for b in batches]
        if not tables:
            return
        plan = pa.concat_tables(tables).to_pandas()
        if len(plan) == 0:
            return
        from spark_bench.workloads import run_batch, to_record_batch
        rows = run_batch(workload, plan, opts)
        if rows:
            task = time.perf_counter() - t
            rows[0]["task_s"] = task       # counted once per executor task
            rows[0]["task_s_max"] = task
        yield to_record_batch(rows)
    return fn


def partials(spark, workload: str, parts, opts):
    """DataFrame of partial aggregates (workloads.SCHEMA), computed in the executors."""
    return plan_frame(spark, parts).mapInArrow(_map_fn(workload, opts), W.SPARK_DDL)


def _digest_fn(opts):
    def fn(batches):
        import pyarrow as pa
        from spark_bench import gen
        for b in batches:
            plan = b.to_pandas()
            out = {"group_id": [], "view": [], "digest": []}
            for g, w, t in zip(plan["group_id"], plan["n_workers"], plan["n_tasks"]):
                for view in opts.views:
                    grp = gen.make_group(opts.cluster, int(g), int(w), int(t), view,
                                         gen.event_for(view, int(g), opts.events))
                    out["group_id"].append(int(g))
                    out["view"].append(view)
                    out["digest"].append(gen.digest(grp))
            yield pa.RecordBatch.from_pydict(out)
    return fn


def digests(spark, parts, opts):
    """(group_id, view, digest) of every planned group, generated in the executors: the
    reproducibility check (the same seed gives the same groups whatever the partitioning)."""
    return plan_frame(spark, parts).mapInArrow(_digest_fn(opts),
                                               "group_id bigint, view string, digest string")


def aggregate(df):
    """Partial aggregates -> one row per (workload, view, config, event, bucket), in Spark."""
    from pyspark.sql import functions as F
    aggs = []
    for name, _ in W.NUMERIC:
        fn = F.max if name.endswith("_max") else F.sum
        aggs.append(fn(name).alias(name))
    return df.groupBy(*W.KEYS).agg(*aggs)


def aggregate_local(pdf):
    """The same aggregation as :func:`aggregate`, on partial rows already at the driver."""
    agg = {n: ("max" if n.endswith("_max") else "sum") for n, _ in W.NUMERIC}
    return pdf.groupby(W.KEYS, as_index=False).agg(agg)


# Up to this many partitions the partial rows (a few dozen per partition) are collected and
# summed at the driver: a Spark groupBy adds a shuffle stage (~1 s per job on 2 cores) for a
# few thousand rows. Beyond it (clusters), Spark aggregates.
LOCAL_AGGREGATE_MAX_PARTITIONS = 1000


def run_job(spark, workload: str, parts, opts, progress: bool = True, label: str = ""):
    """Run one workload as one Spark job; returns (pandas table, wall seconds)."""
    t = time.perf_counter()
    with StageProgress(spark, label or workload, enabled=progress):
        df = partials(spark, workload, parts, opts)
        if len(parts) <= LOCAL_AGGREGATE_MAX_PARTITIONS:
            pdf = aggregate_local(df.toPandas())
        else:
            pdf = aggregate(df).toPandas()
    return pdf, time.perf_counter() - t


def baseline(workload: str, parts, opts):
    """The same batches through the same function in one plain Python loop (no Spark).
    Returns (pandas table of partial rows aggregated like Spark does, wall seconds)."""
    import pandas as pd
    t = time.perf_counter()
    rows = []
    for p in parts:
        tp = time.perf_counter()
        plan = pd.DataFrame(p, columns=["group_id", "n_workers", "n_tasks"])
        part = W.run_batch(workload, plan, opts)
        if part:
            part[0]["task_s"] = part[0]["task_s_max"] = time.perf_counter() - tp
        rows += part
    wall = time.perf_counter() - t
    return aggregate_local(pd.DataFrame(rows, columns=W.SCHEMA.names)), wall


def _pool_part(args):
    import time as _t
    import pandas as pd
    from spark_bench import workloads as W_
    workload, part, opts = args
    t = _t.perf_counter()
    rows = W_.run_batch(workload, pd.DataFrame(part, columns=["group_id", "n_workers",
                                                              "n_tasks"]), opts)
    if rows:
        rows[0]["task_s"] = rows[0]["task_s_max"] = _t.perf_counter() - t
    return rows


def baseline_pool(workload: str, parts, opts, processes: int):
    """The same batches on a pool of ``processes`` plain Python processes (no Spark), largest
    first like Spark: separates Spark's own overhead from the machine's parallel speed-up
    (on a loaded machine two parallel processes do not run twice as fast). The pool is
    started and warmed (imports) before the timed run. Returns (table, wall seconds)."""
    import multiprocessing as mp
    import pandas as pd
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes) as pool:
        pool.map(_pool_part, [(workload, [p[0]], opts) for p in parts[:processes]],
                 chunksize=1)
        t = time.perf_counter()
        out = pool.map(_pool_part, [(workload, p, opts) for p in parts], chunksize=1)
        wall = time.perf_counter() - t
    rows = [r for part in out for r in part]
    return aggregate_local(pd.DataFrame(rows, columns=W.SCHEMA.names)), wall


class StageProgress:
    """A rich progress bar per active Spark stage, polled from the status tracker."""

    def __init__(self, spark, label: str, enabled: bool = True, interval: float = 0.5):
        self.sc = spark.sparkContext
        self.label = label
        self.enabled = enabled
        self.interval = interval
        self._stop = threading.Event()

    def __enter__(self):
        if not self.enabled:
            return self
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
            TimeElapsedColumn
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), transient=False)
        self.progress.start()
        self.tasks = {}
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self):
        tracker = self.sc.statusTracker()
        while not self._stop.is_set():
            try:
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is None:
                        continue
                    if sid not in self.tasks:
                        self.tasks[sid] = self.progress.add_task(
                            "%s: stage %d" % (self.label, sid), total=info.numTasks)
                    self.progress.update(self.tasks[sid], completed=info.numCompletedTasks)
                for sid, tid in list(self.tasks.items()):
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        self.progress.update(tid, completed=info.numCompletedTasks)
            except Exception:        # the tracker may go away at shutdown: stop polling
                return
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        self._stop.set()
        self.thread.join(timeout=2)
        for sid, tid in self.tasks.items():
            info = self.sc.statusTracker().getStageInfo(sid)
            if info is not None:
                self.progress.update(tid, completed=info.numCompletedTasks)
        self.progress.stop()
        return False


def cores(spark) -> int:
    return int(spark.sparkContext.defaultParallelism)
