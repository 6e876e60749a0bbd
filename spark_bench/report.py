"""Results: derived metrics, Parquet + CSV, the printed summary, the PNG figures."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from spark_bench import gen, simulate as S
from spark_bench.workloads import NUMERIC, WORKLOADS

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


# ------------------------------------------------------------------------------ plots
#
# What every figure follows (issue 22): each axis names its quantity and unit; tick labels
# are plain numbers with k / M / G suffixes (no offset, no 10^x); an axis that can hold a zero
# is symlog (linear around 0), so a zero is drawn at 0 instead of vanishing off a log axis;
# each assignor / protocol has one colour, marker and line style in every figure, and series
# at the same position are dodged apart; a line joins only size buckets that hold the same
# events, so a bucket of one group and one event (the giant group) is a lone point; legends
# sit outside the data.

# Okabe-Ito colours (readable with colour blindness), and a marker and line style each so the
# series stay apart in greyscale. A protocol row takes its protocol's style.
STYLES = {
    "eager": ("#D55E00", "s", "-"),
    "incremental-cooperative": ("#0072B2", "o", "--"),
    "uniform": ("#009E73", "D", ":"),
    "range": ("#E69F00", "^", "-."),
    "cooperative-sticky": ("#CC79A7", "v", (0, (6, 2))),
    "cooperative": ("#0072B2", "o", "--"),
    "declarative": ("#009E73", "D", ":"),
}
_SPARE = [("#56B4E9", "P", "-"), ("#000000", "X", "--"), ("#F0E442", "h", ":")]
# what a unit and a member are called in each view
NOUNS = {"connect": ("task", "workers"), "consumer": ("partition", "members")}
PNG_DPI = 110
_EVENT_RANK = {e: i for i, e in enumerate(gen.ALL_EVENTS)}
_STYLE_RANK = {k: i for i, k in enumerate(STYLES)}


def style(config: str):
    """(colour, marker, line style) of an assignor, or of a protocol row such as
    'cooperative (cooperative-sticky)' (the protocol's)."""
    key = config.split(" ")[0]
    if key in STYLES:
        return STYLES[key]
    return _SPARE[sum(map(ord, key)) % len(_SPARE)]


def si(v, pos=None) -> str:
    """A tick label: 1500 -> '1.5k', 2e7 -> '20M', 0.25 -> '0.25', 0 -> '0'."""
    if v is None or not np.isfinite(v):
        return ""
    if v == 0:
        return "0"
    v = float("%.3g" % v)           # round first: 999,999 is '1M', not '1e+03k'
    for f, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= f:
            return "%g%s" % (v / f, suffix)
    return "%g" % v


def _target(config: str):
    """'cooperative (cooperative-sticky)' -> ('cooperative', 'cooperative-sticky')."""
    proto, _, rest = config.partition(" (")
    return proto, rest.rstrip(")") or proto


def _nouns(view: str):
    return NOUNS.get(view, ("unit", "members"))


def _configs(rows) -> list:
    return sorted(set(rows["config"]), key=lambda c: (_STYLE_RANK.get(c.split(" ")[0], 99), c))


def main_bucket(rows) -> str:
    """The size bucket holding the most groups (the regular groups: the giant group is a
    bucket of its own)."""
    first = rows[rows["config"] == rows["config"].iloc[0]]
    return str(first.groupby("bucket")["groups"].sum().idxmax())


def _cells(rows) -> list:
    """The (bucket, event) cells of one view's rows: size buckets in order, events in
    gen's order."""
    cells = set(zip(rows["bucket"], rows["event"]))
    return sorted(cells, key=lambda c: (_BUCKET_RANK.get(c[0], 99),
                                        _EVENT_RANK.get(c[1], 99), c[1]))


def _groups_text(n) -> str:
    lo, hi = int(min(n)), int(max(n))
    return "%s group%s" % ("{:,}".format(lo) if lo == hi else "{:,}-{:,}".format(lo, hi),
                           "" if hi == 1 else "s")


def _ticks(axis):
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis.set_major_formatter(FuncFormatter(si))
    axis.set_minor_formatter(NullFormatter())


def _symlog_y(ax, top: float, linthresh: float = 1.0):
    """Symlog y: linear in [-linthresh, linthresh], so a zero sits at 0, visibly above the
    axis' bottom edge; room above the largest value ``top``."""
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.6)
    _ticks(ax.yaxis)
    top = top if np.isfinite(top) else 0.0
    ax.set_ylim(-0.4 * linthresh, max(top * 2.5, 10 * linthresh))


def _log_subs(lo: float, hi: float):
    """Log ticks at 1-2-5 over up to two decades, at powers of ten beyond (no crowding)."""
    return (1.0, 2.0, 5.0) if hi <= 300 * lo else (1.0,)


def _rate_y(ax, values):
    """A rate (always > 0): log when it spans more than 20x, else linear from 0."""
    from matplotlib.ticker import LogLocator, MaxNLocator
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() > 20 * v.min():
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=_log_subs(v.min() / 2, v.max() * 2)))
        ax.set_ylim(v.min() / 2, v.max() * 2)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(6))
        ax.set_ylim(0, (v.max() if v.size else 1.0) * 1.15)
    _ticks(ax.yaxis)


def _legend(ax, handles=None, **kw):
    """The legend right of the panel, outside the data."""
    h, lab = ax.get_legend_handles_labels()
    if handles:
        h = h + handles
        lab = lab + [x.get_label() for x in handles]
    if h:
        ax.legend(h, lab, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8,
                  frameon=False, borderaxespad=0.0, **kw)


def _by_event(ax, rows, value, view, ylabel, linthresh=1.0, ref=None, ref_label=None,
              later=None, later_label=None, scale="symlog"):
    """One cell per (size bucket, event), one dodged marker per config: points, never lines
    (events are categories). ``value(part)`` -> the y of each row; ``ref`` -> a black bar mark
    per point (a reference such as the minimum); ``later`` -> a hollow marker where it differs
    from ``value`` (a later phase). ``scale``: symlog, or linear from 0 (small counts)."""
    from matplotlib.lines import Line2D
    cells = _cells(rows)
    main = main_bucket(rows)
    pos = {c: i for i, c in enumerate(cells)}
    configs = _configs(rows)
    k_n = len(configs)
    step = min(0.75 / max(k_n, 1), 0.22)
    extra, top, hollow = [], 0.0, False
    for k, cfg in enumerate(configs):
        part = rows[rows["config"] == cfg]
        x = (np.array([pos[c] for c in zip(part["bucket"], part["event"])], dtype=float)
             + (k - (k_n - 1) / 2) * step)
        y = np.asarray(value(part), dtype=float)
        top = np.nanmax(np.concatenate([[top], y]))
        colour, marker, _ = style(cfg)
        ax.plot(x, y, linestyle="none", marker=marker, color=colour, markersize=7,
                markeredgecolor="black", markeredgewidth=0.5, alpha=0.9, label=cfg,
                zorder=3, clip_on=False)
        if ref is not None:
            r = np.asarray(ref(part), dtype=float)
            top = np.nanmax(np.concatenate([[top], r]))
            ax.plot(x, r, linestyle="none", marker="_",
                    color="black", markersize=12, markeredgewidth=1.6, zorder=4,
                    clip_on=False)
        if later is not None:
            z = np.asarray(later(part), dtype=float)
            d = np.isfinite(z) & (np.abs(z - y) > 1e-9 * np.maximum(np.abs(y), 1.0))
            if d.any():
                hollow = True
                top = np.nanmax(np.concatenate([[top], z[d]]))
                ax.plot(x[d], z[d], linestyle="none", marker=marker, color=colour,
                        markerfacecolor="white", markersize=7, markeredgewidth=1.5,
                        zorder=3, clip_on=False)
    if ref is not None:
        extra.append(Line2D([], [], linestyle="none", marker="_", color="black",
                            markersize=12, markeredgewidth=1.6, label=ref_label))
    if hollow:
        extra.append(Line2D([], [], linestyle="none", marker="o", color="0.3",
                            markerfacecolor="white", markeredgewidth=1.5, label=later_label))
    for i in range(len(cells)):
        if i % 2:
            ax.axvspan(i - 0.5, i + 0.5, color="0.94", zorder=0, linewidth=0)
    first = rows[rows["config"] == configs[0]]
    n_of = {c: int(n) for c, n in zip(zip(first["bucket"], first["event"]), first["groups"])}
    labels = []
    for i, (b, e) in enumerate(cells):
        if b == main:
            labels.append(e)
        else:
            labels.append("%s (%s %s, %s)" % (e, b, _nouns(view)[1],
                                               _groups_text([n_of.get((b, e), 0)])))
        if i and cells[i - 1][0] != b:
            ax.axvline(i - 0.5, color="0.35", linewidth=1.0, zorder=1)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(cells) - 0.4)
    main_n = [n_of[c] for c in cells if c[0] == main and c in n_of]
    ax.set_xlabel("churn event\n(groups of %s %s unless marked; %s per event)"
                  % (main, _nouns(view)[1], _groups_text(main_n or [0])), fontsize=9)
    ax.set_ylabel(ylabel)
    if scale == "linear":
        from matplotlib.ticker import MaxNLocator
        top = max(top if np.isfinite(top) else 0.0, 1.0)
        ax.set_ylim(-0.04 * top, top * 1.2)
        ax.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        _ticks(ax.yaxis)
    else:
        _symlog_y(ax, top, linthresh)
    ax.grid(True, axis="y", which="major", alpha=0.35)
    return extra


def _vs_size(ax, rows, col, view, ylabel):
    """``col`` of each config against the group size (bucket mean), events pooled per bucket.
    A line joins only buckets holding the same events as the main bucket; any other bucket
    (the giant group: one group, one event) is a lone hollow point."""
    from matplotlib.lines import Line2D
    s = by_config(rows)
    main = main_bucket(rows)
    evsets = {(c, b): frozenset(p["event"][p["groups"] > 0])
              for (c, b), p in rows.groupby(["config", "bucket"])}
    configs = _configs(rows)
    k_n = len(configs)
    lone, ys, xs = {}, [], []
    for k, cfg in enumerate(configs):
        part = s[s["config"] == cfg].sort_values("workers_mean")
        ref = evsets.get((cfg, main))
        x = part["workers_mean"].to_numpy(dtype=float) * 10 ** ((k - (k_n - 1) / 2) * 0.03)
        y = part[col].to_numpy(dtype=float)
        ok = np.isfinite(y) & (y > 0)
        same = np.array([evsets.get((cfg, b)) == ref for b in part["bucket"]]) & ok
        colour, marker, ls = style(cfg)
        ax.plot(x[same], y[same], color=colour, marker=marker, linestyle=ls, markersize=7,
                markeredgecolor="black", markeredgewidth=0.5, label=cfg, zorder=3)
        other = ok & ~same
        if other.any():
            ax.plot(x[other], y[other], linestyle="none", marker=marker, color=colour,
                    markerfacecolor="white", markersize=7, markeredgewidth=1.5, zorder=3)
            for b in part["bucket"][other]:
                p = rows[(rows["config"] == cfg) & (rows["bucket"] == b)]
                lone[b] = (sorted(evsets[(cfg, b)], key=lambda e: _EVENT_RANK.get(e, 99)),
                           int(p["groups"].sum()))
        ys.append(y[ok])
        xs.append(x[ok])
    ax.set_xscale("log")
    _ticks(ax.xaxis)
    allx = np.concatenate(xs) if xs else np.array([1.0])
    if allx.size:
        ax.set_xlim(allx.min() / 3, allx.max() * 3)
    _rate_y(ax, np.concatenate(ys) if ys else [])
    label = "%s per group (mean of each size bucket, log scale)" % _nouns(view)[1]
    n_ev = len(evsets.get((configs[0], main), ())) if configs else 0
    for b, (evs, n) in sorted(lone.items(), key=lambda kv: _BUCKET_RANK.get(kv[0], 99)):
        what = ", ".join(evs) if len(evs) <= 2 else "%d of the %d events" % (len(evs), n_ev)
        label += "\nhollow: %s bucket, %s only (%s), not joined" % (b, what,
                                                                    _groups_text([n]))
    ax.set_xlabel(label, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.35)
    extra = []
    if lone:
        extra.append(Line2D([], [], linestyle="none", marker="o", color="0.3",
                            markerfacecolor="white", markeredgewidth=1.5,
                            label="other events (see x label)"))
    return extra


def _per_group(col):
    return lambda p: _div(p[col], p["groups"])


def figure(df: pd.DataFrame, workload: str):
    """The figure of one workload's table, panels per view (connect, consumer).

    assign: throughput against group size; units moved by the rebalance after each event,
    against the minimum a balanced assignment needs. reconcile / compare: downtime and time
    to converge after each event (reconcile also: rounds, the most units unowned)."""
    from matplotlib.figure import Figure
    views = [v for v in gen.VIEWS if v in set(df["view"])] + \
        sorted(set(df["view"]) - set(gen.VIEWS))
    n_cells = max([len(_cells(df[df["view"] == v])) for v in views] or [1])
    ev_w = 1.4 + 0.6 * n_cells
    widths = [5.0, ev_w] if workload == "assign" else [ev_w, ev_w]
    per_view = 2 if workload == "reconcile" else 1       # rows of panels per view
    n_rows = max(len(views), 1) * per_view
    fig = Figure(figsize=(sum(widths) + 3.2, 0.6 + 4.8 * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, 2, squeeze=False, gridspec_kw={"width_ratios": widths})
    titles = {"assign": "assign: how fast each assignor is, and how many units it moves",
              "reconcile": "reconcile: declarative (KIP-848 / Connect) reconciliation after "
                           "each churn event",
              "compare": "compare: eager vs cooperative vs declarative rebalancing after "
                         "each churn event"}
    fig.suptitle("spark_bench " + titles.get(workload, workload), fontsize=12,
                 fontweight="bold")
    for r, view in enumerate(views):
        rows = df[df["view"] == view]
        unit = _nouns(view)[0]
        ax = axes[r * per_view]
        if workload == "assign":
            extra = _vs_size(ax[0], rows, "tasks_per_s_core", view,
                             "%ss assigned per second per core (%ss/s)" % (unit, unit))
            ax[0].set_title("%s: assignment throughput (kernel, one core)" % view)
            extra += _by_event(ax[1], rows, _per_group("moved"), view,
                               "%ss moved per rebalance (%ss, mean per group)" % (unit, unit),
                               ref=_per_group("min_moved"),
                               ref_label="minimum a balanced assignment needs")
            ax[1].set_title("%s: %ss moved by the rebalance after the event" % (view, unit))
            _legend(ax[1], extra)
            continue
        extra = _by_event(ax[0], rows, _per_group("downtime_s"), view,
                          "downtime per rebalance (%s-seconds, mean per group)" % unit)
        ax[0].set_title("%s: downtime (%ss held by nobody x seconds)" % (view, unit))
        extra += _by_event(ax[1], rows, _per_group("first_converge_s"), view,
                           "time to converge after the event (s)",
                           later=_per_group("converge_s"),
                           later_label="hollow: final convergence, after the\n"
                                       "scheduled delay or a return")
        ax[1].set_title("%s: time until every %s is with its target" % (view, unit))
        _legend(ax[1], extra)
        if workload == "reconcile":
            ax = axes[r * per_view + 1]
            _by_event(ax[0], rows, _per_group("rounds"), view,
                      "heartbeat rounds to converge (rounds, mean per group)",
                      scale="linear")
            ax[0].set_title("%s: heartbeat rounds until converged (all phases)" % view)
            _by_event(ax[1], rows, _per_group("max_unowned"), view,
                      "most %ss unowned at once (%ss, mean per group)" % (unit, unit))
            ax[1].set_title("%s: most %ss held by nobody at one moment" % (view, unit))
    return fig


def plot(df: pd.DataFrame, path: str, workload: str) -> str:
    """Write the workload's figure (:func:`figure`) as a PNG."""
    fig = figure(df, workload)
    fig.savefig(path, dpi=PNG_DPI)
    return path


def _options(assign: pd.DataFrame, compare: pd.DataFrame) -> list:
    """One row per (view, assignor, protocol that reaches members with it), measured on each
    workload's main size bucket, events pooled."""
    out = []
    for view in [v for v in gen.VIEWS if v in set(assign["view"])]:
        a = assign[assign["view"] == view]
        a = a[a["bucket"] == main_bucket(a)]
        c = compare[compare["view"] == view] if compare is not None else compare
        if c is not None and len(c):
            c = c[c["bucket"] == main_bucket(c)]
        for cfg in _configs(a):
            r = a[a["config"] == cfg]
            mn = float(r["min_moved"].sum())
            ok = r["min_moved"] > 0
            base = dict(view=view, assignor=cfg,
                        # per churn event, for the range drawn under each mean
                        moved_ratio_ev=list(_div(r["moved"][ok], r["min_moved"][ok])),
                        rate=float(r["units_assigned"].sum()) / max(float(
                            r["kernel_s"].sum()), 1e-12),
                        moved_ratio=float(r["moved"].sum()) / mn if mn > 0 else np.nan,
                        moved_per_group=float(r["moved"].sum()) / max(
                            float(r["groups"].sum()), 1.0),
                        groups=int(r["groups"].sum()), bucket=str(r["bucket"].iloc[0]))
            protos = [p for p in _configs(c) if _target(p)[1] == cfg] \
                if c is not None and len(c) else []
            for p in protos or [None]:
                row = dict(base, protocol=None, downtime=np.nan, c_groups=0, c_bucket="",
                           downtime_ev=[])
                if p is not None:
                    q = c[c["config"] == p]
                    row.update(protocol=_target(p)[0], c_groups=int(q["groups"].sum()),
                               downtime_ev=list(_div(q["downtime_s"], q["groups"])),
                               downtime=float(q["downtime_s"].sum()) / max(
                                   float(q["groups"].sum()), 1.0),
                               c_bucket=str(q["bucket"].iloc[0]))
                out.append(row)
    return out


def summary_figure(assign: pd.DataFrame, compare: pd.DataFrame = None):
    """'Which assignor should I use?': per assignor and the protocol that delivers it,
    throughput, units moved against the minimum, and downtime per rebalance, side by side
    (one row per option, one panel per criterion)."""
    from matplotlib.figure import Figure
    opts = _options(assign, compare)
    # rows top to bottom, a gap between the views
    y, ypos, prev = 0.0, [], None
    for o in opts:
        if prev is not None and o["view"] != prev:
            y += 0.7
        ypos.append(y)
        y += 1.0
        prev = o["view"]
    ypos = np.array(ypos)
    fig = Figure(figsize=(15, 2.6 + 0.62 * len(opts)), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    fig.suptitle("Which assignor should I use? Assignment speed vs units moved vs downtime, "
                 "per assignor and the protocol that delivers it", fontsize=12,
                 fontweight="bold")
    panels = [
        ("rate", "speed (higher is better)",
         "units assigned per second per core\n(tasks or partitions per second)", "auto",
         lambda v: si(v) + "/s"),
        ("moved_ratio", "stickiness (lower is better; 1 = the minimum)",
         "units moved by a rebalance / the minimum a balanced\nassignment needs "
         "(ratio, log scale)", "log", lambda v: "%.3gx" % v),
        ("downtime", "downtime (lower is better)",
         "downtime per rebalance, mean per group\n(task- or partition-seconds, symlog scale)",
         "symlog", lambda v: si(v)),
    ]
    best_fn = {"rate": max, "moved_ratio": min, "downtime": min}
    for ax, (key, title, xlabel, scale, fmt) in zip(axes, panels):
        vals = np.array([o[key] for o in opts], dtype=float)
        pos = vals[np.isfinite(vals) & (vals > 0)]
        if scale == "auto":         # a rate: log when it spans more than 20x
            scale = "rate-log" if pos.size and pos.max() > 20 * pos.min() else "linear"
            if scale == "rate-log":
                xlabel = xlabel.replace("per second)", "per second, log scale)")
        base = {"log": 1.0, "rate-log": pos.min() / 3 if pos.size else 1.0}.get(scale, 0.0)
        highs = []
        for yy, o in zip(ypos, opts):
            if key == "rate":       # per event it is timing noise (ms per cell), not signal
                break
            ev = np.asarray(o[key + "_ev"], dtype=float)
            ev = ev[np.isfinite(ev)]
            if ev.size > 1:         # the range over the churn events, under the mean
                ax.plot([ev.min(), ev.max()], [yy + 0.27] * 2, color="0.3", linewidth=1,
                        marker="|", markersize=7, clip_on=False)
                highs.append(ev.max())
        for yy, o, v in zip(ypos, opts, vals):
            colour, marker, _ = style(o["assignor"])
            if not np.isfinite(v):
                ax.text(base, yy, "  not measured (run compare)" if key == "downtime"
                        else "  n/a", va="center", fontsize=8, color="0.4")
                continue
            ax.hlines(yy, base, v, color=colour, linewidth=3, alpha=0.6)
            ax.plot([v], [yy], marker=marker, color=colour, markersize=9,
                    markeredgecolor="black", markeredgewidth=0.6, linestyle="none",
                    zorder=3, clip_on=False)
            same = [w for w, p in zip(vals, opts) if p["view"] == o["view"] and np.isfinite(w)]
            best = bool(same) and v == best_fn[key](same)
            extra = ""
            if key == "moved_ratio":
                extra = " (%s/group)" % si(o["moved_per_group"])
            ax.annotate(fmt(v) + extra, (v, yy), xytext=(8, 0), textcoords="offset points",
                        va="center", fontsize=8, fontweight="bold" if best else "normal")
        fin = np.concatenate([vals[np.isfinite(vals)], highs])
        top = fin.max() if fin.size else 1.0
        if scale == "linear":
            ax.set_xlim(0, top * 1.4)
            from matplotlib.ticker import MaxNLocator
            ax.xaxis.set_major_locator(MaxNLocator(5))
        elif scale == "log":
            ax.set_xscale("log")
            ax.set_xlim(0.8, max(top, 1.0) * 12)
        elif scale == "rate-log":
            from matplotlib.ticker import LogLocator
            ax.set_xscale("log")
            ax.set_xlim(base, top * 6)
            ax.xaxis.set_major_locator(LogLocator(subs=_log_subs(base, top * 6)))
        else:
            ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
            ax.set_xlim(-0.4, max(top, 10.0) * 30)
        _ticks(ax.xaxis)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(True, axis="x", which="major", alpha=0.35)
    labels = ["%s\n%s%s" % (o["assignor"], o["view"],
                            ", %s protocol" % o["protocol"] if o["protocol"] else "")
              for o in opts]
    axes[0].set_yticks(ypos)
    axes[0].set_yticklabels(labels, fontsize=9)
    axes[0].set_ylim(ypos.max() + 0.6 if len(ypos) else 1, -0.6)
    axes[0].set_ylabel("assignor (view, protocol)")
    notes = []
    for view in dict.fromkeys(o["view"] for o in opts):
        o = next(p for p in opts if p["view"] == view)
        txt = "%s: assign on %s groups of %s %s" % (view, "{:,}".format(o["groups"]),
                                                     o["bucket"], _nouns(view)[1])
        if o["c_groups"]:
            txt += ", compare on %s groups of %s" % ("{:,}".format(o["c_groups"]),
                                                      o["c_bucket"])
        notes.append(txt)
    fig.supxlabel("Markers: all churn events of each run pooled (" + "; ".join(notes) +
                  "); the thin line under each: the range over the events, best to worst "
                  "(none for speed: per event it is a few ms of timing). "
                  "Bold: the best of its view. Protocols: eager stops every unit and rejoins; "
                  "cooperative (KIP-429 / KIP-415) revokes only what moves, in two "
                  "rebalances; declarative (KIP-848) converges by heartbeats.", fontsize=8,
                  wrap=True)
    return fig


def plot_summary(out: str, path: str = None):
    """summary.png from the assign and compare results in ``out``; None when either is
    missing."""
    a = os.path.join(out, "assign.parquet")
    c = os.path.join(out, "compare.parquet")
    if not (os.path.exists(a) and os.path.exists(c)):
        return None
    path = path or os.path.join(out, "summary.png")
    fig = summary_figure(pd.read_parquet(a), pd.read_parquet(c))
    fig.savefig(path, dpi=PNG_DPI)
    return path


def replot(out: str) -> list:
    """Redraw every <workload>.png and summary.png from the Parquet results in ``out`` (no
    Spark)."""
    paths = []
    for w in WORKLOADS:
        p = os.path.join(out, w + ".parquet")
        if os.path.exists(p):
            paths.append(plot(pd.read_parquet(p), os.path.join(out, w + ".png"), w))
    s = plot_summary(out)
    if s:
        paths.append(s)
    return paths
