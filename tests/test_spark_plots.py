"""spark_bench's figures (spark_bench/report.py), drawn from real workload tables of tiny
groups computed without Spark (the plain loop spark_bench.spark.baseline, the same function
the executors run): every axis labelled with its unit, plain tick labels (no offset, no
10^x), zeros drawn inside the axes, one style per series and dodged positions, events never
joined by lines, a bucket of one group and one event drawn as a lone point, the summary
figure, the `plot` subcommand and the stage log. No Spark is started here.
"""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from spark_bench import gen, report, spark as SP, workloads as W
from spark_bench.__main__ import Steps, main

UNITS = ("(s)", "tasks", "partitions", "-seconds", "rounds", "/s", "ratio")
# a numeric tick label: plain digits with an optional k/M/G/T suffix (and /s or x)
PLAIN = re.compile(r"^-?\d+(\.\d+)?[kMGT]?(/s|x)?$")


def _table(workload, events=gen.ALL_EVENTS, giant=True):
    """The derived table of a run over 16 groups of 10 workers (and a giant group of 160),
    through the plain loop."""
    opts = W.Options(cluster=gen.GenConfig(seed=5), events=events)
    rows = gen.plan_groups(5, 16, 160, 1600, "fixed", giant=giant)
    pdf, _ = SP.baseline(workload, SP.partition_plan(rows, 2000), opts)
    return report.derive(pdf)


@pytest.fixture(scope="module")
def tables():
    return {w: _table(w) for w in W.WORKLOADS}


def _drawn(fig):
    FigureCanvasAgg(fig).draw()
    return [ax for ax in fig.axes if ax.get_visible()]


def _numeric(axis):
    return axis.get_scale() != "linear" or not any(
        t.get_text() and not PLAIN.match(t.get_text()) for t in axis.get_ticklabels())


def _lines(ax):
    """The data series (not the separators between size buckets, drawn in axes space)."""
    return [ln for ln in ax.get_lines()
            if len(ln.get_xdata()) and ln.get_transform() == ax.transData]


def test_si_tick_labels():
    assert [report.si(v) for v in (0, 1500, 2.5e7, 999_999, 0.25, -2000, 303, 1e9)] == \
        ["0", "1.5k", "25M", "1M", "0.25", "-2k", "303", "1G"]


@pytest.mark.parametrize("workload", W.WORKLOADS)
def test_every_axis_is_labelled_with_its_unit(tables, workload):
    axes = _drawn(report.figure(tables[workload], workload))
    assert len(axes) == {"assign": 4, "compare": 4, "reconcile": 8}[workload]
    for ax in axes:
        assert ax.get_title()
        ylab, xlab = ax.get_ylabel(), ax.get_xlabel()
        assert any(u in ylab for u in UNITS) and "(" in ylab, ylab
        # the x axis is a size (a unit: members / workers) or the churn event (a category)
        assert "per group" in xlab or xlab.startswith("churn event"), xlab


@pytest.mark.parametrize("workload", W.WORKLOADS)
def test_tick_labels_are_plain_numbers(tables, workload):
    fig = report.figure(tables[workload], workload)
    for ax in _drawn(fig):
        for axis in (ax.xaxis, ax.yaxis):
            assert axis.get_offset_text().get_text() == ""
            if axis is ax.xaxis and ax.get_xlabel().startswith("churn event"):
                labels = [t.get_text() for t in axis.get_ticklabels()]
                assert labels and all(labels)       # one event name per cell
                continue
            texts = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            assert texts, ax.get_title()
            bad = [t for t in texts if not PLAIN.match(t)]
            assert not bad, (ax.get_title(), bad)


def test_zeros_are_drawn_inside_the_axes(tables):
    # compare: after a connect leave nothing moves before the scheduled delay (first
    # convergence 0 s); assign: incremental-cooperative moves 0 tasks on a leave
    zeros = 0
    for workload in ("compare", "assign", "reconcile"):
        for ax in _drawn(report.figure(tables[workload], workload)):
            lo, hi = ax.get_ylim()
            for ln in _lines(ax):
                y = np.asarray(ln.get_ydata(), dtype=float)
                if (y == 0).any():
                    zeros += 1
                    assert ax.get_yscale() != "log", ax.get_title()
                    assert lo < 0 < hi, (ax.get_title(), lo, hi)
                    assert ln.get_marker() not in (None, "", "None", " ")
    assert zeros >= 3


@pytest.mark.parametrize("workload", W.WORKLOADS)
def test_events_are_points_and_series_do_not_hide_each_other(tables, workload):
    df = tables[workload]
    fig = report.figure(df, workload)
    for ax in _drawn(fig):
        if not ax.get_xlabel().startswith("churn event"):
            continue
        at = {}
        for ln in _lines(ax):
            # events are categories: markers only, never a line between two of them
            assert ln.get_linestyle() == "None" and ln.get_marker() not in ("None", None)
            if ln.get_marker() == "_" or ln.get_markerfacecolor() == "white":
                continue          # the minimum marks, the hollow later phase
            style = (ln.get_color(), ln.get_marker())
            for x in np.asarray(ln.get_xdata(), dtype=float):
                at.setdefault(round(x, 6), set()).add(style)
        # each position holds one series: dodged apart, none drawn over another
        assert at and all(len(s) == 1 for s in at.values())
    for view in gen.VIEWS:      # a protocol keeps its style in both views
        configs = sorted(set(df[df["view"] == view]["config"]))
        assert len({report.style(c)[:2] for c in configs}) == len(configs)


def _size_panels(fig):
    return [ax for ax in _drawn(fig) if "per group (mean" in ax.get_xlabel()]


def test_a_bucket_of_one_event_is_a_lone_point(tables):
    # the giant group (its own size bucket) has one group and one event, the regular
    # bucket all of the view's events: the two are not joined by a line
    df = tables["assign"]
    panels = _size_panels(report.figure(df, "assign"))
    assert len(panels) == 2
    for ax in panels:
        lines = _lines(ax)
        assert all(len(ln.get_xdata()) == 1 for ln in lines)
        hollow = [ln for ln in lines if ln.get_markerfacecolor() == "white"]
        view = "connect" if "workers" in ax.get_xlabel() else "consumer"
        assert len(hollow) == len(set(df[df["view"] == view]["config"]))
        assert all(ln.get_linestyle() == "None" for ln in hollow)
        assert re.search(r"hollow: 100-999 bucket, [\w-]+ only \(1 group\), not joined",
                         ax.get_xlabel()), ax.get_xlabel()
    # with the same single event everywhere, the buckets are comparable: one line each
    same = _table("assign", events=("join-one",))
    for ax in _size_panels(report.figure(same, "assign")):
        lines = _lines(ax)
        assert lines and all(len(ln.get_xdata()) == 2 and ln.get_linestyle() != "None"
                             for ln in lines)
        assert not [ln for ln in lines if ln.get_markerfacecolor() == "white"]


def test_summary_figure_answers_which_assignor(tables):
    fig = report.summary_figure(tables["assign"], tables["compare"])
    axes = _drawn(fig)
    assert "Which assignor should I use?" in fig.get_suptitle()
    assert len(axes) == 3
    labels = [t.get_text() for t in axes[0].get_yticklabels()]
    # one row per assignor and the protocol delivering it: connect eager (eager), ICA
    # (cooperative, declarative); consumer uniform (declarative), range (eager),
    # cooperative-sticky (cooperative)
    assert len(labels) == 6
    assert sum("incremental-cooperative" in t for t in labels) == 2
    assert all("protocol" in t for t in labels)
    for ax, unit in zip(axes, ("per second", "ratio", "-seconds")):
        assert unit in ax.get_xlabel()
        assert ax.xaxis.get_offset_text().get_text() == ""
        assert all(PLAIN.match(t.get_text()) for t in ax.get_xticklabels() if t.get_text())
        # one marker per option; the value written next to it
        marks = [ln for ln in _lines(ax) if ln.get_marker() not in ("|", "None")]
        assert len(marks) == 6
        assert len([t for t in ax.texts if t.get_text()]) == 6


def test_plot_subcommand_redraws_from_the_parquet(tables, tmp_path, capsys):
    assert main(["plot", "--out", str(tmp_path)]) == 1          # nothing to draw yet
    for w in ("assign", "compare"):
        report.write(tables[w], str(tmp_path), w, {})
    assert main(["plot", "--out", str(tmp_path)]) == 0
    for f in ("assign.png", "compare.png", "summary.png"):
        assert (tmp_path / f).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "reconcile.png").exists()
    assert "summary.png" in capsys.readouterr().out


def test_steps_log_one_line_per_stage_with_the_elapsed_time():
    out = io.StringIO()
    steps = Steps(out=out)
    steps.say("plan")
    with steps.stage("starting Spark", "master local[2]", ticking=False):
        pass
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert all(re.match(r"^\[\s*\d+\.\d s\] ", ln) for ln in lines)
    assert lines[1].endswith("starting Spark: master local[2] ...")
    assert re.search(r"starting Spark: done in \d+\.\d s$", lines[2])
