"""Results: derived metrics, Parquet + CSV, the printed summary and the PNG plot."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from spark_bench import gen, simulate as S
from spark_bench.workloads import NUMERIC

_BUCKET_RANK = {b: i for i, b in enumerate(gen.BUCKET_ORDER)}


def _div(a, b):
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / b, np.nan)


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Add the derived columns (means, rates) to the aggregated rows and sort them."""
    df = df.copy()
    g = df["groups"]
    df["workers_mean"] = _div(df["workers"], g)
    df["units_mean"] = _div(df["units"], g)
    # kernel time is measured inside one executor task (one core): rate per core
    df["tasks_per_s_core"] = _div(df["units_assigned"], df["kernel_s"])
    df["e2e_tasks_per_s_core"] = _div(df["units_assigned"], df["wall_s"] + df["gen_s"])
    df["moved_over_min"] = _div(df["moved"], df["min_moved"])
    df["spread_mean"] = _div(df["spread"], g)
    df["valid"] = (df["invalid_groups"] == 0) & (df["list_violations"] == 0)
    df["rounds_mean"] = _div(df["rounds"], g)
    df["converge_s_mean"] = _div(df["converge_s"], g)
    df["first_converge_s_mean"] = _div(df["first_converge_s"], g)
    df["downtime_per_rebalance_s"] = _div(df["downtime_s"], g)
    df["max_unowned_mean"] = _div(df["max_unowned"], g)
    fl = np.stack([_div(df["in_flight_r%d" % (i + 1)], g) for i in range(S.IN_FLIGHT_ROUNDS)],
                  axis=1) if len(df) else np.zeros((0, S.IN_FLIGHT_ROUNDS))
    df["in_flight_per_round"] = [" ".join("%.1f" % x for x in row) for row in fl]
    df["never_owned_twice"] = df["owned_twice"] == 0
    df["_b"] = df["bucket"].map(_BUCKET_RANK)
    df = df.sort_values(["workload", "view", "config", "event", "_b"]).drop(columns="_b")
    return df.reset_index(drop=True)


def write(df: pd.DataFrame, out: str, name: str, meta: dict) -> dict:
    """Parquet + CSV of the table, and a JSON of the run's parameters and timings."""
    os.makedirs(out, exist_ok=True)
    paths = {"parquet": os.path.join(out, name + ".parquet"),
             "csv": os.path.join(out, name + ".csv"),
             "json": os.path.join(out, name + "-run.json")}
    df.to_parquet(paths["parquet"], index=False)
    df.to_csv(paths["csv"], index=False, float_format="%.6g")
    with open(paths["json"], "w") as fh:
        json.dump(meta, fh, indent=2, default=str)
    return paths


def by_config(df: pd.DataFrame) -> pd.DataFrame:
    """Collapse events: one row per (workload, view, config, bucket)."""
    keys = ["workload", "view", "config", "bucket"]
    num = [n for n, _ in NUMERIC]
    agg = {c: ("max" if c.endswith("_max") else "sum") for c in num}
    out = df.groupby(keys, as_index=False).agg(agg)
    out = derive(out.assign(event="*"))
    return out


def summary(df: pd.DataFrame, workload: str, timing: dict, console=None) -> str:
    """The table printed at the end of a run (also returned as text)."""
    from rich.console import Console
    from rich.table import Table
    con = console or Console(record=True, width=160)
    t = Table(title="spark_bench %s: by config and group size (all events)" % workload)
    s = by_config(df)
    if workload == "assign":
        cols = [("view", "view"), ("config", "assignor"), ("bucket", "workers"),
                ("groups", "groups"), ("units", "units"), ("kernel_s", "kernel s"),
                ("tasks_per_s_core", "tasks/s/core"), ("moved", "moved"),
                ("min_moved", "min moved"), ("spread_max", "spread max"),
                ("valid", "valid")]
    else:
        cols = [("view", "view"), ("config", "protocol"), ("bucket", "workers"),
                ("groups", "groups"), ("rounds_mean", "rounds"),
                ("first_converge_s_mean", "converge s"), ("converge_s_mean", "final s"),
                ("downtime_per_rebalance_s", "downtime task-s/rebalance"),
                ("max_unowned_mean", "max unowned"), ("never_owned_twice", "owned once")]
    for _, head in cols:
        t.add_column(head, justify="right")
    for _, r in s.iterrows():
        t.add_row(*[_fmt(r[c]) for c, _ in cols])
    con.print(t)
    if timing:
        lines = ["Spark job (warm): %.2f s on %d cores" % (timing["spark_s"],
                                                           timing["cores"])]
        if timing.get("warmup_s") is not None:
            lines.append("warm-up job (discarded): %.2f s" % timing["warmup_s"])
        if "task_s" in df:
            lines.append("executor tasks: %.2f s in all, the longest %.2f s"
                         % (float(df["task_s"].sum()), float(df["task_s_max"].max())))
        if timing.get("baseline_s"):
            lines.append("plain single-process loop: %.2f s -> speed-up %.2fx, Spark "
                         "core-seconds per loop second %.2f (overhead target < 2)"
                         % (timing["baseline_s"], timing["speedup"], timing["overhead"]))
        if timing.get("pool_s"):
            lines.append("plain processes in parallel (%d): %.2f s -> Spark / pool wall "
                         "%.2f" % (timing["cores"], timing["pool_s"], timing["pool_ratio"]))
        if workload == "assign":
            tot_u = float(df["units_assigned"].sum())
            lines.append("tasks assigned: %d; kernel tasks/s per core: %.3g; end-to-end "
                         "tasks/s per core (Spark wall x cores): %.3g"
                         % (tot_u, tot_u / max(float(df["kernel_s"].sum()), 1e-12),
                            tot_u / max(timing["spark_s"] * timing["cores"], 1e-12)))
        for line in lines:
            con.print(line)
    return con.export_text() if console is None else ""


def _fmt(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "-"
        return "%.3g" % v if abs(v) < 1e6 else "%.3e" % v
    return str(v)


def plot(df: pd.DataFrame, path: str, workload: str) -> str:
    """Throughput (assign) and/or convergence and downtime (reconcile, compare) vs cluster
    size, one line per (view, config)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = by_config(df)
    panels = (["tasks_per_s_core"] if workload == "assign"
              else ["first_converge_s_mean", "downtime_per_rebalance_s"])
    titles = {"tasks_per_s_core": "assign throughput (tasks/s per core)",
              "first_converge_s_mean": "time to converge after the event (s)",
              "downtime_per_rebalance_s": "downtime per rebalance (task-seconds)"}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, col in zip(axes[0], panels):
        for (view, cfg), part in s.groupby(["view", "config"]):
            part = part.sort_values("workers_mean")
            y = part[col].to_numpy(dtype=float)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                ax.plot(part["workers_mean"].to_numpy()[ok], y[ok], marker="o",
                        label="%s %s" % (view, cfg))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("workers per group (bucket mean)")
        ax.set_title(titles[col])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
