"""One node's view of its shard leases: a sans-I/O state machine, time passed in (monotonic ms).

The store (cluster/pg_leases.py) holds one row per shard: owner, epoch, lease expiry, with the
expiry decided by the store's clock. This machine decides what the node asks of the store and
when it may serve; the glue runs the actions it returns and reports every answer back:

    m = LeaseMachine(shards=50, config=LeaseConfig(lease_ms=10_000))
    m.set_target({0, 3, 7})                   # from balance.target over the live nodes
    for action in m.tick(now):                # Acquire / Renew / Release / Load / Unload
        ...                                   # run it; report its outcome:
    m.acquired(shard, attempt, epoch, now)    # epoch None: refused, or the call failed
    m.renewed(attempt, renewed_shards, now)   # None: the call failed
    m.released(shard, epoch, now, error=False)
    m.unloaded(shard, now)                    # the glue finished an Unload
    m.fenced(shard, epoch, now)               # an append at that epoch was refused
    m.serving(shard, now)                     # may this node answer for the shard now?
    m.next_wakeup(now)                        # when tick() next has something to do

Per shard (NOT_OWNED -> ACQUIRING -> OWNED(epoch) -> RELEASING -> NOT_OWNED, or -> LOST ->
NOT_OWNED when the lease is gone, fenced, or not confirmed in time):

- Safety does not depend on clocks agreeing, only on their rates (the safety margin covers
  the difference): a grant or renewal sent at local time S sets the store's expiry to the
  store's clock at execution + lease, which is no earlier than S + lease in real time; so
  the node serves only while its local clock is before S + lease_ms - safety_ms, with S the
  start of the newest confirmed attempt (the deadline). Late answers are harmless: they are
  measured from their own start.
- Writes are fenced by the store (the append checks owner and epoch under a row lock), so a
  node that is paused past its deadline and wakes up cannot write; ``fenced`` unloads.
- Renewals go out every renew_every_ms (lease/3) for every OWNED or RELEASING shard in one
  call; a failed call is retried after retry_ms. A renewal that does not renew a shard means
  its (owner, epoch) changed in the store; epochs only grow, so that epoch is gone for good.
- Hand-off (the target no longer has the shard): unload first, then release, so the next
  owner loads the log only once this node has stopped writing to it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple, Union

__all__ = ["State", "LeaseConfig", "LeaseMachine", "Acquire", "Renew", "Release", "Load",
           "Unload", "Action"]


class State(enum.Enum):
    NOT_OWNED = "not-owned"
    ACQUIRING = "acquiring"
    OWNED = "owned"
    RELEASING = "releasing"
    LOST = "lost"


@dataclass(frozen=True)
class Acquire:
    shard: int
    attempt: int


@dataclass(frozen=True)
class Renew:
    attempt: int
    epochs: Tuple[Tuple[int, int], ...]       # (shard, epoch) pairs, ascending shard


@dataclass(frozen=True)
class Release:
    shard: int
    epoch: int


@dataclass(frozen=True)
class Load:
    shard: int
    epoch: int


@dataclass(frozen=True)
class Unload:
    shard: int
    epoch: int
    reason: str        # "handoff", "lost" (the store says not ours), "fenced", "expired"


Action = Union[Acquire, Renew, Release, Load, Unload]


@dataclass(frozen=True)
class LeaseConfig:
    lease_ms: int = 10_000
    safety_ms: Optional[int] = None       # default lease/10: covers clock-rate differences
    renew_every_ms: Optional[int] = None  # default lease/3: two renewals may fail in a row
    retry_ms: Optional[int] = None        # failed call or refused acquire; default lease/10

    def __post_init__(self):
        if self.lease_ms < 3:
            raise ValueError("lease_ms must be at least 3, got %d" % self.lease_ms)
        for name, default in (("safety_ms", self.lease_ms // 10),
                              ("renew_every_ms", self.lease_ms // 3),
                              ("retry_ms", max(1, self.lease_ms // 10))):
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        if not 0 <= self.safety_ms < self.lease_ms:
            raise ValueError("safety_ms must be in [0, lease_ms)")
        if not 0 < self.renew_every_ms < self.lease_ms - self.safety_ms:
            raise ValueError("renew_every_ms must be positive and below lease_ms - safety_ms")
        if self.retry_ms <= 0:
            raise ValueError("retry_ms must be positive")


class _Shard:
    __slots__ = ("index", "state", "epoch", "deadline", "attempt", "attempt_start", "retry_at",
                 "loaded", "unloading", "release_sent", "last_epoch")

    def __init__(self, index: int):
        self.index = index
        self.state = State.NOT_OWNED
        self.epoch: Optional[int] = None
        self.deadline = 0                 # local ms; serve only strictly before it
        self.attempt = 0                  # the acquire attempt in flight
        self.attempt_start = 0
        self.retry_at: Optional[int] = None   # None: at once (local times may be negative)
        self.loaded = False               # Load returned, no Unload yet
        self.unloading = False            # Unload returned, unloaded() not yet called
        self.release_sent = False
        self.last_epoch = -1              # epochs granted to this node only grow


class LeaseMachine:
    def __init__(self, shards: int, config: Optional[LeaseConfig] = None):
        if shards <= 0:
            raise ValueError("shards must be positive")
        self.config = config or LeaseConfig()
        self._shards = [_Shard(i) for i in range(shards)]
        self._target: frozenset = frozenset()
        self._attempts = 0
        # renewals in flight: attempt -> (local start, ((shard, epoch), ...))
        self._renewals: Dict[int, Tuple[int, Tuple[Tuple[int, int], ...]]] = {}
        self._next_renew: Optional[int] = None

    # ------------------------------------------------------------------ queries
    def state(self, shard: int) -> State:
        return self._shards[shard].state

    def epoch(self, shard: int) -> Optional[int]:
        return self._shards[shard].epoch

    def deadline(self, shard: int) -> Optional[int]:
        s = self._shards[shard]
        return s.deadline if s.state in (State.OWNED, State.RELEASING) else None

    def serving(self, shard: int, now: int) -> bool:
        s = self._shards[shard]
        return s.state is State.OWNED and now < s.deadline

    def owned(self) -> List[int]:
        return [s.index for s in self._shards if s.state is State.OWNED]

    def idle(self) -> bool:
        """Nothing owned, nothing in flight: a node that set an empty target may stop."""
        return all(s.state is State.NOT_OWNED for s in self._shards)

    @property
    def target(self) -> frozenset:
        return self._target

    def next_wakeup(self, now: int) -> int:
        """The earliest local time at which tick() may have something to do (<= now: now)."""
        c = self.config
        times = []
        holding = False
        for s in self._shards:
            st = s.state
            if st is State.OWNED or st is State.RELEASING:
                holding = True
                times.append(s.deadline)
                if st is State.OWNED and s.index not in self._target:
                    times.append(now)
                elif st is State.RELEASING and not s.release_sent and not s.unloading \
                        and not s.loaded:
                    times.append(now if s.retry_at is None else s.retry_at)
            elif st is State.NOT_OWNED and s.index in self._target:
                times.append(now if s.retry_at is None else s.retry_at)
            elif st is State.ACQUIRING:
                times.append(s.attempt_start + c.lease_ms)
        if holding and self._next_renew is not None:
            times.append(self._next_renew)
        return max(now, min(times)) if times else now + c.renew_every_ms

    # ------------------------------------------------------------------ inputs
    def set_target(self, shards: Iterable[int]) -> None:
        t = frozenset(shards)
        bad = [i for i in t if not 0 <= i < len(self._shards)]
        if bad:
            raise ValueError("no such shard: %s" % sorted(bad))
        self._target = t

    def tick(self, now: int) -> List[Action]:
        c = self.config
        out: List[Action] = []
        for s in self._shards:
            st = s.state
            if st is State.OWNED or st is State.RELEASING:
                if now >= s.deadline:
                    # Not confirmed in time: another node may hold it from now on.
                    self._lose(s, "expired", out, None)
                    continue
                if st is State.OWNED and s.index not in self._target:
                    s.state = State.RELEASING
                    self._release_or_unload(s, "handoff", out)
                elif (st is State.RELEASING and not s.release_sent and not s.loaded
                      and not s.unloading and _due(s, now)):
                    s.release_sent = True
                    out.append(Release(s.index, s.epoch))
            elif st is State.ACQUIRING:
                if now >= s.attempt_start + c.lease_ms:
                    # No answer within a lease: give up on it (a late answer is ignored; a
                    # grant it carried lapses, or the next grant bumps the epoch past it).
                    s.state = State.NOT_OWNED
                    s.retry_at = None
                    st = State.NOT_OWNED
            if st is State.NOT_OWNED and s.index in self._target and _due(s, now):
                self._attempts += 1
                s.state = State.ACQUIRING
                s.attempt = self._attempts
                s.attempt_start = now
                out.append(Acquire(s.index, s.attempt))
        held = tuple((s.index, s.epoch) for s in self._shards
                     if s.state is State.OWNED or (s.state is State.RELEASING
                                                   and not s.release_sent))
        if not held:
            self._next_renew = None
        elif self._next_renew is None or now >= self._next_renew:
            self._attempts += 1
            self._renewals[self._attempts] = (now, held)
            self._next_renew = now + c.renew_every_ms
            out.append(Renew(self._attempts, held))
        # An attempt unanswered for a whole lease can no longer extend anything.
        for a in [a for a, (start, _) in self._renewals.items() if now - start >= c.lease_ms]:
            del self._renewals[a]
        return out

    def acquired(self, shard: int, attempt: int, epoch: Optional[int], now: int
                 ) -> List[Action]:
        """The answer to Acquire(shard, attempt): the granted epoch, or None (refused: another
        node's lease is live; or the call failed)."""
        s = self._shards[shard]
        out: List[Action] = []
        if s.state is not State.ACQUIRING or s.attempt != attempt:
            return out
        if epoch is None:
            s.state = State.NOT_OWNED
            s.retry_at = now + self.config.retry_ms
            return out
        if epoch <= s.last_epoch:
            raise ValueError("shard %d granted epoch %d after epoch %d: the store's epochs "
                             "must grow" % (shard, epoch, s.last_epoch))
        s.last_epoch = epoch
        s.epoch = epoch
        s.deadline = s.attempt_start + self.config.lease_ms - self.config.safety_ms
        s.release_sent = False
        if self._next_renew is None:
            self._next_renew = s.attempt_start + self.config.renew_every_ms
        if now >= s.deadline:
            # Granted, but too late to serve on: ask again at once (the new grant bumps the
            # epoch and fences anything written under this one).
            s.state = State.NOT_OWNED
            s.retry_at = None
        elif shard not in self._target:
            s.state = State.RELEASING
            s.release_sent = True
            out.append(Release(shard, epoch))
        else:
            s.state = State.OWNED
            s.loaded = True
            out.append(Load(shard, epoch))
        return out

    def renewed(self, attempt: int, renewed: Optional[Iterable[int]], now: int
                ) -> List[Action]:
        """The answer to Renew(attempt): the shards the store renewed, or None (the call
        failed: nothing is extended, the renewal is retried after retry_ms)."""
        out: List[Action] = []
        entry = self._renewals.pop(attempt, None)
        if entry is None:
            return out
        start, epochs = entry
        if renewed is None:
            if self._next_renew is not None:
                self._next_renew = min(self._next_renew, now + self.config.retry_ms)
            return out
        ok = frozenset(renewed)
        deadline = start + self.config.lease_ms - self.config.safety_ms
        for shard, epoch in epochs:
            s = self._shards[shard]
            if s.state not in (State.OWNED, State.RELEASING) or s.epoch != epoch:
                continue
            if shard in ok:
                if deadline > s.deadline:
                    s.deadline = deadline
            else:
                self._lose(s, "lost", out, now + self.config.retry_ms)
        return out

    def released(self, shard: int, epoch: int, now: int, error: bool = False
                 ) -> List[Action]:
        """The answer to Release(shard, epoch). error: the call failed (it is sent again while
        the lease lasts); otherwise the lease is gone, released or already not ours."""
        s = self._shards[shard]
        if s.state is not State.RELEASING or s.epoch != epoch or not s.release_sent:
            return []
        if error:
            s.release_sent = False
            s.retry_at = now + self.config.retry_ms
        else:
            self._forget(s, now)
        return []

    def unloaded(self, shard: int, now: int) -> List[Action]:
        """The glue finished an Unload of the shard."""
        s = self._shards[shard]
        out: List[Action] = []
        if not s.unloading:
            return out
        s.unloading = False
        if s.state is State.LOST:
            s.state = State.NOT_OWNED         # retry_at was set when it was lost
        elif s.state is State.RELEASING and not s.release_sent:
            s.release_sent = True
            out.append(Release(shard, s.epoch))
        return out

    def fenced(self, shard: int, epoch: int, now: int) -> List[Action]:
        """An append under this epoch was refused by the store: another node owns the shard."""
        s = self._shards[shard]
        out: List[Action] = []
        if s.state in (State.OWNED, State.RELEASING) and s.epoch == epoch:
            self._lose(s, "fenced", out, now + self.config.retry_ms)
        return out

    # ------------------------------------------------------------------ transitions
    def _release_or_unload(self, s: _Shard, reason: str, out: List[Action]) -> None:
        if s.loaded:
            s.loaded = False
            s.unloading = True
            out.append(Unload(s.index, s.epoch, reason))
        elif not s.unloading:
            s.release_sent = True
            out.append(Release(s.index, s.epoch))

    def _lose(self, s: _Shard, reason: str, out: List[Action], retry_at: Optional[int]
              ) -> None:
        # retry_at: an expired lease may still be ours (ask again at once); one another node
        # holds is not free before it expires.
        s.state = State.LOST
        s.release_sent = False
        s.retry_at = retry_at
        if s.loaded:
            s.loaded = False
            s.unloading = True
            out.append(Unload(s.index, s.epoch, reason))
        if not s.unloading:
            s.state = State.NOT_OWNED

    def _forget(self, s: _Shard, now: int) -> None:
        # Released (or found not ours): leave the shard to its new owner for a while.
        s.state = State.NOT_OWNED
        s.release_sent = False
        s.retry_at = now + self.config.retry_ms


def _due(s: _Shard, now: int) -> bool:
    return s.retry_at is None or now >= s.retry_at
