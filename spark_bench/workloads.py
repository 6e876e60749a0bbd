"""The three workloads as plain functions over a batch of planned groups.

``run_batch(workload, plan, opts)`` takes a pandas DataFrame of (group_id, n_workers, n_tasks)
rows (the driver's plan), generates those groups (gen.make_group: from the seed and group id
only), runs the batched kernels once per (view, event, size bucket) sub-batch and returns
partial aggregates: one row per (workload, view, config, event, bucket) with sums and maxima
(``SCHEMA``). Spark calls it from mapInArrow (spark_bench.spark); the single-process baseline
calls the very same function in a loop (spark_bench.spark.baseline).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from groupcoord.assign import many as B

from spark_bench import gen, simulate as S
from spark_bench.engine import (CONNECT_ASSIGNORS, CONSUMER_ASSIGNORS, StateBatch, Timer,
                                Universe, run_assignor)

WORKLOADS = ("assign", "reconcile", "compare")

# Columns of the partial aggregates. Names ending in _max aggregate with max, the numeric
# others with sum (spark_bench.report).
KEYS = ["workload", "view", "config", "event", "bucket"]
NUMERIC = [
    ("groups", pa.int64()), ("workers", pa.int64()), ("units", pa.int64()),
    ("units_max", pa.int64()), ("workers_max", pa.int64()),
    ("gen_s", pa.float64()), ("kernel_s", pa.float64()), ("wall_s", pa.float64()),
    # whole executor task (the mapInArrow function, Arrow in and out): on one row per task
    ("task_s", pa.float64()), ("task_s_max", pa.float64()),
    ("units_assigned", pa.int64()),
    # assign
    ("initial_s", pa.float64()), ("rebalance_s", pa.float64()),
    ("moved", pa.int64()), ("min_moved", pa.int64()), ("spread_max", pa.int64()),
    ("spread", pa.int64()), ("unassigned", pa.int64()), ("held", pa.int64()),
    ("invalid_groups", pa.int64()), ("list_violations", pa.int64()),
    # reconcile / compare
    ("rounds", pa.int64()), ("rounds_max", pa.int64()),
    ("converge_s", pa.float64()), ("converge_s_max", pa.float64()),
    ("first_converge_s", pa.float64()),
    ("downtime_s", pa.float64()), ("max_unowned", pa.int64()), ("max_unowned_max", pa.int64()),
    ("owned_twice", pa.int64()), ("unconverged", pa.int64()),
] + [("in_flight_r%d" % (i + 1), pa.int64()) for i in range(S.IN_FLIGHT_ROUNDS)]
SCHEMA = pa.schema([(k, pa.string()) for k in KEYS] + NUMERIC)
# The same schema for Spark (mapInArrow takes a DDL string).
SPARK_DDL = ", ".join("%s %s" % (f.name, {"string": "string", "int64": "bigint",
                                          "double": "double"}[str(f.type)]) for f in SCHEMA)


@dataclass(frozen=True)
class Options:
    """What the executors need besides the plan (shipped in the closure: a few scalars)."""
    cluster: gen.GenConfig = field(default_factory=gen.GenConfig)
    events: tuple = gen.ALL_EVENTS
    views: tuple = gen.VIEWS
    assignors: tuple = CONNECT_ASSIGNORS + CONSUMER_ASSIGNORS
    sim: S.SimParams = field(default_factory=S.SimParams)


def _row(workload, view, config, event, bucket, **vals) -> dict:
    r = {"workload": workload, "view": view, "config": config, "event": event,
         "bucket": bucket}
    for name, typ in NUMERIC:
        r[name] = vals.get(name, 0.0 if pa.types.is_floating(typ) else 0)
    return r


def _generate(plan, view: str, opts: Options):
    t = time.perf_counter()
    gids = plan["group_id"].to_numpy()
    ws = plan["n_workers"].to_numpy()
    ts = plan["n_tasks"].to_numpy()
    groups = [gen.make_group(opts.cluster, int(g), int(w), int(n), view,
                             gen.event_for(view, int(g), opts.events))
              for g, w, n in zip(gids, ws, ts)]
    return groups, time.perf_counter() - t


def _subsets(groups):
    """Sub-batches of one event and one size bucket (the rows' keys), in a stable order."""
    if not groups:
        return []
    buckets = gen.bucket_of([g.present[0].sum() for g in groups])
    keys = {}
    for g, b in zip(groups, buckets):
        keys.setdefault((g.event, str(b)), []).append(g)
    return sorted(keys.items())


def _views(workload: str, opts: Options):
    for view in opts.views:
        names = CONNECT_ASSIGNORS if view == "connect" else CONSUMER_ASSIGNORS
        if workload == "assign" and not any(a in opts.assignors for a in names):
            continue
        if not any(e in (gen.CONNECT_EVENTS if view == "connect" else gen.CONSUMER_EVENTS)
                   for e in opts.events):
            continue
        yield view, [a for a in names if a in opts.assignors]


def run_batch(workload: str, plan, opts: Options) -> list:
    """Partial aggregate rows (dicts following SCHEMA) for the planned groups of one batch."""
    rows = []
    for view, assignors in _views(workload, opts):
        groups, gen_s = _generate(plan, view, opts)
        total_units = max(sum(g.n_units_universe for g in groups), 1)
        for (event, bucket), sub in _subsets(groups):
            share = gen_s * sum(g.n_units_universe for g in sub) / total_units
            if workload == "assign":
                rows += _assign(view, event, bucket, sub, assignors, share)
            elif workload == "reconcile":
                rows += _protocols(workload, view, event, bucket, sub, ("declarative",),
                                   opts, share)
            elif workload == "compare":
                rows += _protocols(workload, view, event, bucket, sub, S.PROTOCOLS, opts,
                                   share)
            else:
                raise ValueError("unknown workload %r" % workload)
    return rows


def _sizes(sub, sb):
    return dict(groups=len(sub), workers=int(sb.n_members.sum()),
                units=int(sb.unit_off[-1]), workers_max=int(sb.n_members.max()),
                units_max=int(np.diff(sb.unit_off).max()))


def _assign(view, event, bucket, sub, assignors, gen_share) -> list:
    rows = []
    uni = Universe(sub)
    sb0 = StateBatch(uni, 0, "before")
    sb1 = StateBatch(uni, 1, "after")
    none = np.full(int(sb0.unit_off[-1]), -1, dtype=np.int32)
    for name in assignors:
        wall = time.perf_counter()
        t0 = Timer()
        _, prev = run_assignor(name, sb0, none, t0)
        cur = sb1.from_universe(sb0.to_universe(prev))
        t1 = Timer()
        # the scheduled delay runs at the event: ICA holds a departed worker's work
        _, final = run_assignor(name, sb1, cur, t1, hold=True)
        m = B.assignment_metrics(cur, final, sb1.unit_off, sb1.member_off, sb1.kind)
        # ICA may leave lost work (-2 in cur) unassigned during the delay; all else required
        required = cur != -2 if name == "incremental-cooperative" else None
        v = B.validate_many(final, sb1.unit_off, sb1.member_off, required)
        lists = B.validate_lists(final, sb1.unit_off, sb1.member_off, required)
        held = int(m.unassigned.sum()) - int(v[:, 0].sum())
        rows.append(_row(
            "assign", view, name, event, bucket, **_sizes(sub, sb1),
            gen_s=gen_share / len(assignors), kernel_s=t0.s + t1.s,
            wall_s=time.perf_counter() - wall,
            units_assigned=int(sb0.unit_off[-1] + sb1.unit_off[-1]),
            initial_s=t0.s, rebalance_s=t1.s, moved=int(m.moved.sum()),
            min_moved=int(m.min_moved.sum()), spread_max=int(m.spread.max()),
            spread=int(m.spread.sum()), unassigned=int(v[:, 0].sum()), held=held,
            invalid_groups=int(((v[:, 0] + v[:, 1]) > 0).sum()),
            list_violations=int(sum(lists.counts.values()))))
    return rows


def _protocols(workload, view, event, bucket, sub, protocols, opts, gen_share) -> list:
    rows = []
    sb1 = StateBatch(Universe(sub), 1, "after")
    sizes = _sizes(sub, sb1)
    for proto in protocols:
        wall = time.perf_counter()
        r = S.simulate(sub, proto, opts.sim)
        extra = {"in_flight_r%d" % (i + 1): int(r.in_flight[i].sum())
                 for i in range(S.IN_FLIGHT_ROUNDS)}
        rows.append(_row(
            workload, view, "%s (%s)" % (proto, S.target_assignor(view, proto)), event,
            bucket, **sizes, gen_s=gen_share / len(protocols), kernel_s=r.kernel_s,
            wall_s=time.perf_counter() - wall, moved=int(r.moved.sum()),
            rounds=int(r.rounds.sum()), rounds_max=int(r.rounds.max()),
            converge_s=float(r.converge_s.sum()), converge_s_max=float(r.converge_s.max()),
            first_converge_s=float(r.first_converge_s.sum()),
            downtime_s=float(r.down.sum()), max_unowned=int(r.max_unowned.sum()),
            max_unowned_max=int(r.max_unowned.max()), owned_twice=int(r.owned_twice.sum()),
            unconverged=int(r.unconverged.sum()), **extra))
    return rows


def to_record_batch(rows: list) -> pa.RecordBatch:
    cols = {name: [r[name] for r in rows] for name in SCHEMA.names}
    return pa.RecordBatch.from_pydict(cols, schema=SCHEMA)
