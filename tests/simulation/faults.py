"""Swarm testing: each seed draws its own world and its own fault mix, then the fault
injector applies faults at random virtual times during the fault phase.

Swarm testing (Groce et al.): instead of every fault at a low rate in every run, each seed
switches each fault kind on or off and draws its rates, so some seeds hammer one fault and
others combine a few; interactions that a uniform mix dilutes show up.

Fault kinds (`KINDS`):
  member-crash     a member dies without a word; it restarts later as a fresh member, with
                   its old member id (epoch 0), or with its old id *and* old epoch
  member-leave     a graceful leave (revoke, commit, leave heartbeat), back later
  static-bounce    a static member leaves temporarily (epoch -2 / no LeaveGroup) and comes
                   back with the same instance id and a new member id
  node-crash       the coordinator process dies at a random point (in-flight writes reach
                   the page cache or not; unsynced bytes lost or torn); restarts from disk
  disk-eio         the next write or fdatasync fails (the shard answers
                   COORDINATOR_NOT_AVAILABLE and reloads from its log)
  partition        some members are cut off from the node for a while
  clock-jump       the coordinator's wall clock jumps within +/- the configured bound
  config-change    a connect group's connectors / task counts change, or a topic grows
  (always drawn)   message loss, duplication, delay spikes, slow disk, slow callbacks, slow
                   assignor worker: as rates/probabilities in the mix (0 = off)
"""
from __future__ import annotations

import asyncio

__all__ = ["KINDS", "CLUSTER_KINDS", "FaultMix", "draw_mix", "FaultInjector"]

KINDS = ("member-crash", "member-leave", "static-bounce", "node-crash", "disk-eio",
         "partition", "clock-jump", "config-change")
# Cluster mode only (cluster.py, which also gives node-crash, disk-eio and clock-jump their
# cluster meaning): a node stops for longer than its lease (a zombie when it resumes); the
# store is unreachable for a while.
CLUSTER_KINDS = ("node-pause", "store-down")


class FaultMix:
    def __init__(self, rng, *, only=None, calm: bool = False):
        on = (lambda k: False) if calm else (lambda k: rng.random() < 0.5) if only is None \
            else (lambda k: k in only)
        # events per virtual minute for each enabled kind
        self.rates = {k: rng.choice((2, 6, 15)) for k in KINDS if on(k)}
        p = (lambda x: 0.0) if calm else (lambda x: x if rng.random() < 0.5 else 0.0)
        self.loss_p = p(rng.choice((0.005, 0.02, 0.05)))
        self.dup_p = p(rng.choice((0.01, 0.05)))
        self.spike_p = p(rng.choice((0.01, 0.05)))
        self.disk_spike_p = p(rng.choice((0.02, 0.1)))
        self.slow_callback_p = p(rng.choice((0.05, 0.2)))
        self.slow_assignor_p = p(rng.choice((0.1, 0.5)))
        self.clock_bound_ms = rng.choice((200, 1000)) if "clock-jump" in self.rates else 0
        self.tear = rng.random() < 0.8          # torn tails (else: unsynced bytes all lost)
        self.restart_modes = rng.sample(("fresh", "same-id", "old-epoch"), rng.randint(1, 3))

    def describe(self) -> str:
        bits = ["%s/min=%d" % kv for kv in sorted(self.rates.items())]
        for name in ("loss_p", "dup_p", "spike_p", "disk_spike_p", "slow_callback_p",
                     "slow_assignor_p"):
            v = getattr(self, name)
            if v:
                bits.append("%s=%g" % (name, v))
        if self.clock_bound_ms:
            bits.append("clock_bound=%dms" % self.clock_bound_ms)
        bits.append("restart=%s" % "/".join(self.restart_modes))
        return " ".join(bits) or "no faults"


def draw_mix(rng, only=None, calm=False) -> FaultMix:
    return FaultMix(rng, only=only, calm=calm)


class FaultInjector:
    def __init__(self, sim, mix: FaultMix):
        self.sim = sim
        self.mix = mix
        self.rng = sim.rng
        self.applied: dict = {}

    async def run(self, until_us: int) -> None:
        rates = self.mix.rates
        if not rates:
            return
        kinds = sorted(rates)
        total = sum(rates.values()) / 60.0          # per virtual second
        loop = self.sim.loop
        while True:
            await asyncio.sleep(self.rng.expovariate(total))
            if loop.now_us >= until_us:
                return
            kind = self.rng.choices(kinds, [rates[k] for k in kinds])[0]
            if getattr(self, "_" + kind.replace("-", "_"))():
                self.applied[kind] = self.applied.get(kind, 0) + 1

    # ---------------------------------------------------------------- member faults
    def _pick_member(self, pred=lambda x: True):
        xs = [x for x in self.sim.members if pred(x)]
        return self.rng.choice(xs) if xs else None

    def _later(self, ms: float, fn, *args) -> None:
        self.sim.loop.call_later(ms / 1000, fn, *args)

    def _member_crash(self) -> bool:
        x = self._pick_member(lambda x: x.alive)
        if x is None:
            return False
        x.crash()
        mode = self.rng.choice(self.mix.restart_modes)
        self._later(self.rng.uniform(100, 8000), self.sim.restart_member, x, mode)
        return True

    def _member_leave(self) -> bool:
        x = self._pick_member(lambda x: x.alive and x.fatal is None and x.leave_task is None)
        if x is None:
            return False
        x.leave_task = self.sim.spawn(self._leave_and_back(x, temporary=False))
        return True

    def _static_bounce(self) -> bool:
        x = self._pick_member(lambda x: x.alive and x.fatal is None and x.instance_id
                              and x.leave_task is None)
        if x is None:
            return False
        x.leave_task = self.sim.spawn(self._leave_and_back(x, temporary=True))
        return True

    async def _leave_and_back(self, x, temporary: bool) -> None:
        inc = x.incarnation
        for t in x.tasks:
            t.cancel()
        x.tasks = []
        try:
            await x.leave(temporary)
        finally:
            if x.alive and x.incarnation == inc:
                x.crash()           # the process exits (drops anything left, e.g. mid-join)
        await asyncio.sleep(self.rng.uniform(50, 3000) / 1000)
        if not x.alive and x.incarnation == inc:
            self.sim.restart_member(x, "fresh")

    # ---------------------------------------------------------------- node faults
    def _node_crash(self) -> bool:
        node = self.sim.node
        if not node.up:
            return False
        node.crash()
        self._later(self.rng.uniform(10, 3000), node.start)
        return True

    def _disk_eio(self) -> bool:
        what = self.sim.node.disk.fail_next = self.rng.choice(("write", "fdatasync"))
        self.sim.trace("fault", "the next %s fails (EIO)" % what)
        return True

    def _partition(self) -> bool:
        alive = [x.name for x in self.sim.members if x.alive]
        if not alive:
            return False
        names = self.rng.sample(alive, self.rng.randint(1, len(alive)))
        self.sim.net.partition(names, int(self.rng.uniform(200, 10_000)))
        return True

    def _clock_jump(self) -> bool:
        b = self.mix.clock_bound_ms
        clock = self.sim.node.clock
        clock.offset_ms = self.rng.randint(-b, b)
        self.sim.trace("fault", "coordinator clock offset %+d ms" % clock.offset_ms)
        return True

    def _config_change(self) -> bool:
        return self.sim.change_config()
