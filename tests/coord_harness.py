"""In-process driver of a coordinator Shard for tests (no sockets, clocks or disks).

Every step checks the coordinator's disciplines:
  * purity: a handler (handle/fire) leaves the shard's full snapshot unchanged;
  * safety: no unit is held (assigned or pending revocation) by two members of a group;
and at teardown (the ``coord`` fixture does it automatically) replay equality: a fresh shard
that replays the durable records, each round-tripped through its log bytes, has the same
durable snapshot as the live shard.
"""
from __future__ import annotations

from collections import defaultdict

from groupcoord.groups.records import decode_record, encode_record
from groupcoord.groups.result import ParkKey, is_durable
from groupcoord.groups.shard import Shard


class Parked:
    """A request the coordinator answered later; see Harness.completion()."""
    def __init__(self, key: ParkKey):
        self.key = key

    def __repr__(self):
        return "Parked(%s)" % (self.key,)


class SafetyViolation(AssertionError):
    pass


class Harness:
    def __init__(self, config=None, topics=None, now: int = 0, check_pure: bool = True):
        self.config = config
        self.shard = Shard(config, topics, strict=True)
        self.now = now
        self.check_pure = check_pure
        self.log: list = []                       # durable records, in write order
        self.events: list = []                    # every replayed item (durable or volatile)
        self.waiting: dict = {}                   # ParkKey -> Parked, not yet answered
        self.completed = defaultdict(list)        # ParkKey -> responses delivered later
        self.results: list = []                   # every Result applied, in order

    # ------------------------------------------------------------------ driving
    def send(self, request, version=None):
        """Handle a request now; returns its response, or a Parked handle."""
        res = self._pure(lambda: self.shard.handle(request, self.now, version))
        self._apply(res)
        if res.park is not None:
            p = Parked(res.park)
            self.waiting[res.park] = p
            return p
        return res.response

    def fire_due(self) -> int:
        n = 0
        for key in self.shard.due(self.now):
            res = self._pure(lambda: self.shard.fire(key, self.now))
            self._apply(res)
            n += 1
        return n

    def advance(self, ms: int) -> int:
        """Move the clock forward, firing every timer due on the way, in deadline order and
        at its own deadline. Returns how many fired."""
        end = self.now + ms
        n = 0
        while True:
            nxt = self.shard.timers.next_deadline()
            if nxt is None or nxt > end:
                break
            self.now = max(self.now, nxt)
            n += self.fire_due()
        self.now = end
        return n

    def update_topics(self, catalog):
        res = self.shard.update_topics(catalog, self.now)
        self._apply(res)
        return res

    def completion(self, key_or_parked):
        """The response delivered for a parked request (AssertionError if none yet)."""
        key = getattr(key_or_parked, "key", key_or_parked)
        got = self.completed.get(key)
        assert got, "no response yet for %s" % (key,)
        return got[-1]

    def answered(self, parked) -> bool:
        return bool(self.completed.get(parked.key))

    # ------------------------------------------------------------------ checks
    def _pure(self, fn):
        if not self.check_pure:
            return fn()
        before = self.shard.snapshot(durable=False)
        timers_before = self.shard.timers.items()
        res = fn()
        assert self.shard.snapshot(durable=False) == before, "a handler mutated group state"
        assert self.shard.timers.items() == timers_before, "a handler changed the timers"
        return res

    def _apply(self, res):
        self.shard.apply(res)
        self.results.append(res)
        self.events.extend(res.records)
        self.log.extend(r for r in res.records if is_durable(r))
        for key, resp in res.completions:
            self.completed[key].append(resp)
            self.waiting.pop(key, None)
        self.check_safety()

    def check_safety(self):
        for gid, g in self.shard.groups.items():
            held = g.held_units()
            if not held:
                continue
            seen = {}
            for member, units in held.items():
                for u in units:
                    other = seen.setdefault(u, member)
                    if other != member:
                        raise SafetyViolation("group %s: unit %r held by %s and %s"
                                              % (gid, u, other, member))

    def replayed(self) -> Shard:
        """A fresh shard rebuilt from the durable records, each through its log bytes."""
        fresh = Shard(self.config, self.shard.topics, strict=True)
        for rec in self.log:
            fresh.replay(decode_record(*encode_record(rec)))
        return fresh

    def check_replay(self):
        fresh = self.replayed()
        live = self.shard.snapshot(durable=True)
        got = fresh.snapshot(durable=True)
        if got != live:
            diffs = []
            for gid in sorted(set(live["groups"]) | set(got["groups"])):
                if live["groups"].get(gid) != got["groups"].get(gid):
                    diffs.append("group %s:\n  live   %r\n  replay %r"
                                 % (gid, live["groups"].get(gid), got["groups"].get(gid)))
            if live["offsets"] != got["offsets"]:
                diffs.append("offsets differ:\n  live   %r\n  replay %r"
                             % (live["offsets"], got["offsets"]))
            raise AssertionError("replay differs from live state:\n" + "\n".join(diffs))
