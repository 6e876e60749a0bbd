"""Runner command of the deterministic simulation.

    python -m tests.simulation --seeds 500                 # seeds 0..499, swarm fault mixes
    python -m tests.simulation --seed 1234 --trace         # replay one seed, print its trace
    python -m tests.simulation --long --minutes 10 --jobs 2 --liveness   # the long run
    python -m tests.simulation --seeds 200 --faults node-crash,disk-eio --kinds consumer

Prints progress, seeds/s, and for every failing seed its invariant, the world, the fault
mix and a one-line replay command (the same seed with the same options replays exactly).
Exit status 1 when any seed failed.
"""
from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tests.simulation.faults import CLUSTER_KINDS, KINDS
from tests.simulation.mutations import MUTATIONS
from tests.simulation.runner import HASH_SEED, Options, run_seed


def _opts(a) -> Options:
    return Options(duration_s=a.duration, liveness=a.liveness, bound_s=a.bound,
                   kinds=tuple(a.kinds.split(",")) if a.kinds else None,
                   faults=tuple(a.faults.split(",")) if a.faults else None,
                   mutation=a.mutation, operator=a.operator, cluster=a.cluster)


def _one(args):
    seed, opts = args
    return run_seed(seed, opts)


def report_failure(console, res, trace: bool) -> None:
    console.print("[bold red]FAIL[/] seed %d: %s" % (res.seed, escape(res.failure)),
                  highlight=False)
    console.print("  world: %s" % res.world, highlight=False, markup=False)
    console.print("  faults: %s" % res.mix, highlight=False, markup=False)
    if trace:
        for line in res.trace_tail:
            console.print("    " + line, highlight=False, markup=False)
    console.print("  replay: %s" % res.replay, highlight=False, markup=False)


def _fixed_hash_seed() -> None:
    """String hashing is salted per process unless PYTHONHASHSEED is set, and set iteration
    order follows it (in the coordinator and the SDK too): re-run ourselves with a fixed
    salt so that a seed replays exactly in any process."""
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        env = dict(os.environ, PYTHONHASHSEED=HASH_SEED)
        os.execve(sys.executable, [sys.executable, "-m", "tests.simulation"] + sys.argv[1:],
                  env)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.simulation",
                                description="Deterministic simulation of the coordinator "
                                            "(docs/simulation.md).")
    p.add_argument("--seeds", type=int, default=200, help="number of seeds (default 200)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--seed", type=int, help="run only this seed (prints its trace)")
    p.add_argument("--duration", type=float, default=30.0,
                   help="virtual seconds of the fault phase per seed (default 30)")
    p.add_argument("--liveness", action="store_true",
                   help="after the fault phase stop faults and require convergence")
    p.add_argument("--bound", type=float, default=90.0,
                   help="liveness: virtual seconds allowed to converge (default 90)")
    p.add_argument("--kinds", help="group kinds to draw from: consumer,connect,classic")
    p.add_argument("--faults", help="enable exactly these fault kinds (%s; with --cluster "
                                    "also %s)" % (",".join(KINDS), ",".join(CLUSTER_KINDS)))
    p.add_argument("--cluster", type=int, default=0, metavar="N",
                   help="N coordinator nodes over a simulated PostgreSQL store, shards moving "
                        "between them by leases (default 0: one node over a simulated disk)")
    p.add_argument("--mutation", choices=sorted(MUTATIONS),
                   help="plant a known bug (tests/simulation/mutations.py) to check the checkers")
    p.add_argument("--operator", action="store_true",
                   help="an operator deletes groups and offsets now and then (DeleteGroups, "
                        "OffsetDelete) during the fault phase")
    p.add_argument("--long", action="store_true",
                   help="run seeds from --start until --minutes of wall time have passed")
    p.add_argument("--minutes", type=float, default=10.0, help="--long: wall-time budget")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--trace", action="store_true", help="print the trace tail of failures")
    p.add_argument("--max-failures", type=int, default=20,
                   help="stop after this many failing seeds (default 20)")
    a = p.parse_args(argv)
    console = Console(soft_wrap=True)
    opts = _opts(a)

    if a.seed is not None:
        res = run_seed(a.seed, opts)
        if res.ok:
            for line in res.trace_tail if a.trace else ():
                console.print("    " + line, highlight=False, markup=False)
            console.print("seed %d ok: %.1f virtual s in %.2f s wall; converge %d ms; "
                          "digest %08x; %s" % (res.seed, res.virtual_s, res.wall_s,
                                               res.converge_ms, res.digest, res.stats),
                          highlight=False)
            return 0
        report_failure(console, res, True)
        return 1

    seeds = itertools.count(a.start) if a.long else iter(range(a.start, a.start + a.seeds))
    deadline = time.monotonic() + a.minutes * 60 if a.long else None
    failures = []
    done = 0
    worst_converge = -1
    t0 = time.perf_counter()
    pool = multiprocessing.get_context("fork").Pool(a.jobs) if a.jobs > 1 else None
    work = ((s, opts) for s in seeds)
    results = pool.imap(_one, work, chunksize=4) if pool else map(_one, work)
    total = None if a.long else a.seeds
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn(
            "{task.completed} seeds"), TimeElapsedColumn(), console=console,
            transient=False) as prog:
        task = prog.add_task("simulating", total=total)
        try:
            for res in results:
                done += 1
                worst_converge = max(worst_converge, res.converge_ms)
                prog.update(task, advance=1, description="simulating (%d failed, %.1f seeds/s)"
                            % (len(failures), done / (time.perf_counter() - t0)))
                if not res.ok:
                    failures.append(res)
                    prog.console.print()
                    report_failure(prog.console, res, a.trace)
                    if len(failures) >= a.max_failures:
                        break
                if deadline is not None and time.monotonic() >= deadline:
                    break
        finally:
            if pool is not None:
                pool.terminate()
    wall = time.perf_counter() - t0
    console.print("%d seeds (%d..%d) in %.1f s: %.2f seeds/s with %d job(s); %d failed%s"
                  % (done, a.start, a.start + done - 1, wall, done / wall if wall else 0,
                     a.jobs, len(failures),
                     "; slowest convergence %d ms" % worst_converge if a.liveness else ""),
                  highlight=False, markup=False)
    for res in failures:
        console.print("  failed: seed %d: %s\n    %s" % (res.seed, res.failure, res.replay),
                      highlight=False, markup=False)
    return 1 if failures else 0


if __name__ == "__main__":
    _fixed_hash_seed()
    sys.exit(main())
