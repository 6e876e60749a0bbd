"""Rebalance protocols simulated over a batch of groups after one churn event each.

Time model (docs/spark-bench.md, "Metrics"): time 0 is the churn event. Every member
heartbeats every ``heartbeat_s`` at its own phase (drawn per member, gen.Group.phase); a
*round* is one heartbeat interval in which every member heartbeats once. A join/sync round
trip of the classic protocols costs ``rebalance_s``. Connect holds the work of a departed
worker for ``delay_s`` (scheduled.rebalance.max.delay.ms); a bouncing worker is back after
``bounce_s`` (within the delay: min(bounce_s, delay_s / 2); beyond: delay_s + bounce_s).

Protocols:
* ``declarative`` (KIP-848 consumer groups, Connect's new protocol): the target comes from
  the server-side assignor (uniform / incremental-cooperative); members converge to it by
  heartbeats, revoke before assign (native reconcile_round_many, one call per round for the
  whole batch).
* ``eager`` (classic): at its first heartbeat after the event each member stops all its
  units and rejoins; when the last member has rejoined, one sync hands out the new
  assignment (range / Connect eager) to everyone.
* ``cooperative`` (KIP-429 / KIP-415): a first rebalance keeps every unit that stays, the
  members revoke the units that move, and a second rebalance gives those out (targets:
  cooperative-sticky / incremental-cooperative).

Downtime: a unit that must run after the event (not removed) is *down* while no member holds
it; task-seconds of downtime = the sum of those intervals over all units, from the event until
the final target is reached.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groupcoord.assign import many as B

from spark_bench.engine import StateBatch, Timer, Universe, run_assignor

PROTOCOLS = ("eager", "cooperative", "declarative")
IN_FLIGHT_ROUNDS = 8          # in-flight units recorded for the first rounds of phase 1


@dataclass(frozen=True)
class SimParams:
    heartbeat_s: float = 3.0
    rebalance_s: float = 0.2
    delay_s: float = 300.0
    bounce_s: float = 30.0
    max_rounds: int = 100
    broken: bool = False          # tests only: a reconciler that assigns before release


@dataclass(frozen=True)
class Phase:
    t: float          # start, seconds after the event (a multiple of the heartbeat)
    members: int      # index into Group.present
    hold: bool        # ICA: the scheduled delay runs (lost work is held)
    lost: bool        # ICA: units held by the previous phase are lost work (not new)


def target_assignor(view: str, protocol: str) -> str:
    if view == "connect":
        return "eager" if protocol == "eager" else "incremental-cooperative"
    return {"eager": "range", "cooperative": "cooperative-sticky",
            "declarative": "uniform"}[protocol]


def _align(t: float, h: float) -> float:
    return float(np.ceil(t / h - 1e-9) * h)


def phases(view: str, event: str, protocol: str, p: SimParams) -> list:
    """The targets a group goes through after its event (one per membership change or
    scheduled-delay expiry), with their start times."""
    h = p.heartbeat_s
    if view == "consumer":
        return [Phase(0.0, 1, False, False)]
    bounce = event.startswith("bounce")
    t_back = (min(p.bounce_s, p.delay_s / 2) if event == "bounce-within"
              else p.delay_s + p.bounce_s)
    if protocol == "eager":               # no delay: every membership change rebalances
        out = [Phase(0.0, 1, False, False)]
        if bounce:
            out.append(Phase(_align(t_back, h), 2, False, False))
        return out
    delay = _align(p.delay_s, h)
    out = [Phase(0.0, 1, True, False)]
    if event in ("leave-one", "leave-many"):
        out.append(Phase(delay, 1, False, True))
    elif event == "bounce-within":
        out.append(Phase(_align(t_back, h), 2, True, True))
        out.append(Phase(delay, 2, False, True))
    elif event == "bounce-beyond":
        out.append(Phase(delay, 1, False, True))
        out.append(Phase(_align(t_back, h), 2, False, False))
    return out


class Result:
    """Per-group results of one protocol over a batch (arrays of length G)."""

    def __init__(self, G: int):
        self.down = np.zeros(G)
        self.converge_s = np.zeros(G)
        self.first_converge_s = np.zeros(G)
        self.rounds = np.zeros(G, dtype=np.int64)
        self.max_unowned = np.zeros(G, dtype=np.int64)
        self.owned_twice = np.zeros(G, dtype=np.int64)
        self.moved = np.zeros(G, dtype=np.int64)
        self.in_flight = np.zeros((IN_FLIGHT_ROUNDS, G), dtype=np.int64)
        self.unconverged = np.zeros(G, dtype=np.int64)
        self.kernel_s = 0.0


def _gsum(uni: Universe, mask: np.ndarray, weights=None) -> np.ndarray:
    w = mask if weights is None else np.where(mask, weights, 0)
    return np.bincount(uni.group_of_unit, weights=w, minlength=uni.G)


def simulate(groups: list, protocol: str, p: SimParams, initial: str = None) -> Result:
    """Run ``protocol`` on a batch of groups of one view and one event. ``initial``: the
    assignor that produced the assignment running before the event (default: the protocol's
    own target assignor, from scratch)."""
    uni = Universe(groups)
    G = uni.G
    res = Result(G)
    if G == 0:
        return res
    view, event = groups[0].view, groups[0].event
    timer = Timer()
    name = target_assignor(view, protocol)
    # Before the event: a settled assignment (computed from nothing).
    sb0 = StateBatch(uni, 0, "before")
    none = np.full(int(sb0.unit_off[-1]), -1, dtype=np.int32)
    _, prev = run_assignor(initial or name, sb0, none, timer)
    n = uni.n_units()
    holder_old = sb0.to_universe(prev)
    holder_new = np.full(n, -1, dtype=np.int32)
    told = np.zeros(n, dtype=np.uint8)
    since = np.zeros(n)                   # new units are down from the event
    rel = np.full(n, np.nan)
    acq = np.full(n, np.nan)
    counts = uni.counts
    unowned = np.zeros(G, dtype=np.int64)
    last = np.zeros(G)
    target_prev = None
    plan = phases(view, event, protocol, p)
    h = p.heartbeat_s
    for k, ph in enumerate(plan):
        t_next = plan[k + 1].t if k + 1 < len(plan) else None
        # Holdings at the phase start; members that are gone drop their units now.
        H_raw = np.where(holder_new >= 0, holder_new, holder_old)
        H = H_raw.copy()
        sb = StateBatch(uni, ph.members, "after")
        gm = uni.member_off[uni.group_of_unit] + np.maximum(H, 0)
        gone = (H >= 0) & (sb.u2m[gm] < 0)
        since[gone] = ph.t
        H[gone] = -1
        lost = None
        if view == "connect" and ph.lost and target_prev is not None:
            lost_u = (target_prev < 0) & (H < 0) & (counts == 1)
            lost = sb.gather(lost_u)
        # departed owners show as -2 (lost work) to the assignor
        cur = sb.from_universe(H_raw)
        tgt_dense, final = run_assignor(name, sb, cur, timer, hold=ph.hold, lost=lost)
        target = np.full(n, -1, dtype=np.int32)
        sb.to_universe(final if protocol != "declarative" else tgt_dense, out=target)
        target_prev = target
        # the never-owned-twice check of the previous phase, then a fresh record
        res.owned_twice += B.owned_twice_many(uni.unit_off, holder_old, holder_new, rel, acq)
        rel[:] = np.nan
        acq[:] = np.nan
        holder_old = H.astype(np.int32)
        holder_new = np.full(n, -1, dtype=np.int32)
        told[:] = 0
        unowned = _gsum(uni, (counts == 1) & (H < 0)).astype(np.int64)
        res.max_unowned = np.maximum(res.max_unowned, unowned)
        res.moved += _gsum(uni, (H >= 0) & (target != H)).astype(np.int64)
        if protocol == "declarative":
            conv = _declarative(uni, p, ph, t_next, k, target, holder_old, holder_new, told,
                                counts, since, rel, acq, res, unowned, last)
        else:
            conv = _classic(uni, p, ph, protocol, target, holder_old, holder_new, counts,
                            since, rel, acq, res, unowned, last)
        if k == 0:
            res.first_converge_s = last.copy()
        res.rounds += conv
    res.owned_twice += B.owned_twice_many(uni.unit_off, holder_old, holder_new, rel, acq)
    # units that never came back (only when max_rounds cut a phase short)
    held = (counts == 1) & (holder_new < 0) & (holder_old < 0) & (target_prev >= 0)
    res.unconverged = _gsum(uni, held).astype(np.int64)
    t_end = last[uni.group_of_unit]
    res.down += _gsum(uni, held, t_end - since)
    res.converge_s = last
    res.kernel_s = timer.s
    return res


def _declarative(uni, p, ph, t_next, k, target, holder_old, holder_new, told, counts, since,
                 rel, acq, res, unowned, last):
    G = uni.G
    own_ip, own_u = B.members_csr_many(holder_old, uni.unit_off, uni.member_off,
                                       local_units=False)
    tgt_ip, tgt_u = B.members_csr_many(target, uni.unit_off, uni.member_off,
                                       local_units=False)
    hb_order = np.lexsort((uni.phase, uni.group_of_member)).astype(np.int32)
    in_flight = np.zeros(G, dtype=np.int64)
    max_un = res.max_unowned.copy()
    done = np.zeros(G, dtype=bool)
    rounds = np.zeros(G, dtype=np.int64)
    for r in range(p.max_rounds):
        t0 = ph.t + r * p.heartbeat_s
        if t_next is not None and t0 >= t_next:
            break
        B.reconcile_round_many(uni.unit_off, uni.member_off, hb_order, uni.phase, own_ip,
                               own_u, tgt_ip, tgt_u, target, holder_old, holder_new, told,
                               counts, since, rel, acq, res.down, unowned, max_un,
                               in_flight, last, t0, p.broken)
        if k == 0 and r < IN_FLIGHT_ROUNDS:
            res.in_flight[r] = in_flight
        newly = (in_flight == 0) & ~done
        rounds[newly] = r + 1
        done |= newly
        if done.all():
            break
    rounds[~done] = p.max_rounds
    res.max_unowned = max_un
    return rounds


def _classic(uni, p, ph, protocol, target, holder_old, holder_new, counts, since, rel, acq,
             res, unowned, last):
    """Eager and cooperative rebalances in closed form (their timeline is fixed by the join
    barrier: everyone rejoins at its next heartbeat, the sync follows the last join)."""
    G = uni.G
    gu = uni.group_of_unit
    present = np.zeros(uni.member_off[-1], dtype=bool)
    for g, grp in enumerate(uni.groups):
        present[uni.member_off[g]:uni.member_off[g + 1]] = grp.present[
            min(ph.members, len(grp.present) - 1)]
    ph_m = np.where(present, uni.phase, 0.0)
    maxph = np.maximum.reduceat(ph_m, uni.member_off[:-1]) if G else np.zeros(0)
    maxph = np.where(np.diff(uni.member_off) > 0, maxph, 0.0)
    t_a = ph.t + maxph + p.rebalance_s                # first (or only) sync
    run = counts == 1
    wanted = target >= 0
    held = holder_old >= 0
    gm = uni.member_off[gu] + np.maximum(holder_old, 0)
    if protocol == "eager":
        t_rel = ph.t + uni.phase[gm]
        rel[held] = t_rel[held]
        since[held] = t_rel[held]
        acq_t = t_a[gu]
        res.down += _gsum(uni, run & wanted, acq_t - since)
        acq[wanted] = acq_t[wanted]
        during = _gsum(uni, run).astype(np.int64)             # everyone stopped at once
        res.max_unowned = np.maximum(res.max_unowned, during)
        end = np.where(_gsum(uni, held | wanted) > 0, t_a, ph.t)
        holder_new[:] = target
        holder_old[:] = -1
        res.in_flight[0] = np.maximum(res.in_flight[0], during) if ph.t == 0 else \
            res.in_flight[0]
    else:
        t_b = t_a + maxph + p.rebalance_s                 # the follow-up rebalance
        moved = held & (target != holder_old)
        fresh = ~held & wanted
        rel[moved] = t_a[gu][moved]
        since[moved] = t_a[gu][moved]
        res.down += _gsum(uni, run & fresh, t_a[gu] - since)
        acq[fresh] = t_a[gu][fresh]
        mv_w = moved & wanted
        res.down += _gsum(uni, run & mv_w, t_b[gu] - since)
        acq[mv_w] = t_b[gu][mv_w]
        still = run & ~wanted & ~held                     # held lost work stays down
        during = _gsum(uni, run & mv_w).astype(np.int64) + _gsum(uni, still).astype(np.int64)
        res.max_unowned = np.maximum(res.max_unowned, during)
        end = np.where(_gsum(uni, mv_w | (moved & ~wanted)) > 0, t_b,
                       np.where(_gsum(uni, fresh) > 0, t_a, ph.t))
        holder_new[:] = np.where(wanted, target, -1)
        holder_old[:] = -1
        if ph.t == 0:
            res.in_flight[0] = _gsum(uni, run & (moved | fresh)).astype(np.int64)
    changed = end > ph.t
    last[changed] = end[changed]
    return np.where(changed, np.ceil((end - ph.t) / p.heartbeat_s - 1e-9), 0).astype(np.int64)
