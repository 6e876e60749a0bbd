"""Our assignors inside real clients against `groupcoord serve` (docs/embedding.md):
kafka-python 3.0.12 KafkaConsumers and aiokafka 0.14.0 AIOKafkaConsumers with
groupcoord.integrations' assignors, three consumers on two topics.

Every scenario joins the consumers one at a time, then the first (the leader) leaves, and
checks after each step: every partition owned exactly once, counts as balanced as the
strategy gives; from the rebalance callbacks (one timeline, in the order the callbacks ran),
that no partition was ever held by two consumers; and, for the sticky strategies, that every
partition that did not need to move stayed (cooperative: the partitions the old members
revoked are exactly the newcomer's share and nobody revokes anything when a member leaves;
eager: what an old member gets back is a subset of what it had, or a superset on a leave).
The mixed-group test puts our CooperativeStickyAssignor and kafka-python's own in one group.

kafka-python 3.0.12 drops a JoinGroup+SyncGroup result that completes while no poll() waits
(tests/test_cluster_failover.py), so each KafkaConsumer is polled by a thread of its own.
Every consumer is closed and every server stopped (by PID, tests/serve_proc.py) at the end.
"""
import asyncio
import threading
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener as AioListener
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.coordinator.assignors.cooperative_sticky import \
    CooperativeStickyAssignor as KafkaPythonCooperativeSticky

from groupcoord.integrations import aiokafka as A
from groupcoord.integrations import kafka_python as K
from groupcoord.integrations import protocols as P
from serve_proc import serve  # noqa: F401  (fixture)

TOPICS = {"ia": 6, "ib": 4}
ALL = frozenset((t, p) for t, n in TOPICS.items() for p in range(n))
SIZES = {1: [10], 2: [5, 5], 3: [3, 3, 4]}
SESSION_MS = 6000
SETTLE_S = 45.0          # bound of every wait for a settled group
STABLE_S = 1.5           # a settled assignment must stay unchanged this long
STICKY = {P.STICKY, P.COOPERATIVE_STICKY, P.OPTIMAL}


class Timeline:
    """Rebalance callbacks of every consumer of a group, in the order they ran."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []        # (consumer, "assign" | "revoke", frozenset of (topic, p))

    def add(self, name, kind, partitions):
        with self.lock:
            self.events.append((name, kind, frozenset((tp.topic, tp.partition)
                                                      for tp in partitions)))

    def mark(self):
        with self.lock:
            return len(self.events)

    def since(self, mark):
        with self.lock:
            return list(self.events[mark:])

    def check_never_held_twice(self):
        """Replays the callbacks: a partition assigned to a consumer while another holds it
        is a failure. Returns what each consumer holds at the end."""
        holder, held = {}, {}
        for i, (name, kind, parts) in enumerate(self.since(0)):
            mine = held.setdefault(name, set())
            if kind == "assign":
                for tp in parts:
                    other = holder.get(tp)
                    assert other in (None, name), \
                        "event %d: %s assigned to %s while %s holds it" % (i, tp, name, other)
                    holder[tp] = name
                mine |= parts
            else:
                for tp in parts:
                    if holder.get(tp) == name:
                        del holder[tp]
                mine -= parts
        return held


def _revoked_by(events, names):
    return [p for name, kind, parts in events if kind == "revoke" and name in names
            for p in parts]


# ----------------------------------------------------------------------------- kafka-python

class KafkaPythonGroup:
    """kafka-python consumers of one group, each polled without pause by its own thread."""

    POLL_MS = 100

    def __init__(self, bootstrap, group, timeline=None):
        self.bootstrap, self.group = bootstrap, group
        self.timeline = timeline or Timeline()
        self.lock = threading.Lock()
        self.consumers, self.threads, self.stops, self.owned = {}, {}, {}, {}
        self.failure = []

    def add(self, name, strategy):
        timeline = self.timeline

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                timeline.add(name, "revoke", revoked)

            def on_partitions_lost(self, lost):
                timeline.add(name, "revoke", lost)

            def on_partitions_assigned(self, assigned):
                timeline.add(name, "assign", assigned)
        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=name,
            partition_assignment_strategy=[strategy], enable_auto_commit=False,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
            max_poll_interval_ms=30000, request_timeout_ms=40000, fetch_max_wait_ms=100,
            reconnect_backoff_ms=50, retry_backoff_ms=50, metadata_max_age_ms=5000)
        c.subscribe(sorted(TOPICS), listener=Listener())
        stop = threading.Event()
        t = threading.Thread(target=self._run, args=(name, c, stop), daemon=True,
                             name="kpy-%s" % name)
        self.consumers[name], self.threads[name], self.stops[name] = c, t, stop
        self.owned[name] = frozenset()
        t.start()

    def _run(self, name, c, stop):
        try:
            while not stop.is_set():
                c.poll(timeout_ms=self.POLL_MS)
                mine = frozenset((tp.topic, tp.partition) for tp in c.assignment())
                with self.lock:
                    self.owned[name] = mine
        except Exception as e:              # surfaced by owned_now() in the test's thread
            self.failure.append(e)

    def owned_now(self):
        if self.failure:
            raise self.failure[0]
        with self.lock:
            return dict(self.owned)

    def is_leader(self, name):
        return bool(self.consumers[name]._coordinator._is_leader)

    def remove(self, name):
        """Stop its poll thread, then close it (revoke callback, LeaveGroup)."""
        self.stops[name].set()
        self.threads.pop(name).join(30)
        c = self.consumers.pop(name)
        with self.lock:
            del self.owned[name]
        c.close(timeout_ms=10000)

    def close(self):
        for name in list(self.consumers):
            self.remove(name)


def settled(owned_now, sizes, what):
    """Wait (bounded) until the owned sets cover every partition once with these sizes and
    stay unchanged for STABLE_S; returns them."""
    deadline = time.monotonic() + SETTLE_S
    last, since = None, None
    while time.monotonic() < deadline:
        owned = owned_now()
        flat = [tp for s in owned.values() for tp in s]
        ok = (len(flat) == len(ALL) and set(flat) == ALL
              and sorted(len(s) for s in owned.values()) == sizes)
        if ok and owned == last:
            if time.monotonic() - since >= STABLE_S:
                return owned
        elif ok:
            since = time.monotonic()
        last = owned if ok else None
        time.sleep(0.05)
    raise AssertionError("%s: no settled assignment with sizes %s within %.0f s: %r"
                         % (what, sizes, SETTLE_S, owned_now()))


def check_step(timeline, mark, before, after, name, cooperative, sticky, joined):
    """The stickiness of one step (a join of `name`, or its leave) from the callbacks."""
    old = [n for n in before if n != name and n in after]
    events = timeline.since(mark)
    if not sticky:
        return
    if cooperative:
        revoked = _revoked_by(events, old)
        if joined:       # the old members revoked exactly the newcomer's share, once each
            share = after[name] & frozenset().union(*before.values())
            assert sorted(revoked) == sorted(share), (name, revoked, after[name])
        else:
            assert revoked == [], "survivors revoked %s when %s left" % (revoked, name)
    for n in old:
        if joined:
            assert after[n] <= before[n], (n, before[n], after[n])
        else:
            assert before[n] <= after[n], (n, before[n], after[n])


def run_kafka_python(bootstrap, group, kinds, leader_kind=None):
    """kinds: the assignor class of each of 3 consumers, joined in that order."""
    g = KafkaPythonGroup(bootstrap, group)
    try:
        owned = {}
        names = ["%s-c%d" % (group, i) for i in range(len(kinds))]
        for k, (name, cls) in enumerate(zip(names, kinds), start=1):
            mark = g.timeline.mark()
            g.add(name, cls)
            after = settled(g.owned_now, SIZES[k], "%s joined" % name)
            cooperative = all(c.name in P.COOPERATIVE for c in kinds[:k])
            sticky = all(c.name in STICKY for c in kinds[:k])
            check_step(g.timeline, mark, owned, after, name, cooperative, sticky, True)
            owned = after
        assert g.is_leader(names[0])          # the first to join leads while it stays
        if leader_kind is not None:
            assert isinstance(g.consumers[names[0]]._coordinator._lookup_assignor(
                kinds[0].name), leader_kind)
        mark = g.timeline.mark()
        g.remove(names[0])
        after = settled(g.owned_now, SIZES[2], "%s left" % names[0])
        check_step(g.timeline, mark, owned, after, names[0],
                   all(c.name in P.COOPERATIVE for c in kinds),
                   all(c.name in STICKY for c in kinds), False)
        held = g.timeline.check_never_held_twice()
        for n in after:                   # the callbacks add up to what each one owns
            assert held[n] == after[n], (n, held[n], after[n])
    finally:
        g.close()


@pytest.mark.parametrize("cls", [K.RangeAssignor, K.RoundRobinAssignor, K.StickyAssignor,
                                 K.CooperativeStickyAssignor, K.OptimalAssignor],
                         ids=lambda c: c.name)
def test_kafka_python_consumers_with_our_assignor(serve, cls):  # noqa: F811
    srv = serve(topics=TOPICS)
    run_kafka_python(srv.bootstrap, "kpy-" + cls.name, [cls] * 3)


@pytest.mark.parametrize("first", ["ours", "kafka-python"])
def test_mixed_cooperative_sticky_group_converges(serve, first):  # noqa: F811
    """Our CooperativeStickyAssignor and kafka-python's own, one protocol name: the first to
    join leads until it leaves, then a member of the other kind or of its own leads."""
    srv = serve(topics=TOPICS)
    ours, theirs = K.CooperativeStickyAssignor, KafkaPythonCooperativeSticky
    kinds = [ours, theirs, ours] if first == "ours" else [theirs, ours, theirs]
    run_kafka_python(srv.bootstrap, "mixed-" + first, kinds, leader_kind=kinds[0])


# ----------------------------------------------------------------------------- aiokafka

async def _aiokafka(bootstrap, group, cls):
    timeline = Timeline()
    consumers, tasks, stop = {}, {}, asyncio.Event()

    class Listener(AioListener):
        def __init__(self, name):
            self.name = name

        def on_partitions_revoked(self, revoked):
            timeline.add(self.name, "revoke", revoked)

        def on_partitions_assigned(self, assigned):
            timeline.add(self.name, "assign", assigned)

    async def poll(c):
        while not stop.is_set():
            try:
                await c.getmany(timeout_ms=50)
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.05)

    def owned_now():
        return {n: frozenset((tp.topic, tp.partition) for tp in c.assignment())
                for n, c in consumers.items()}

    async def wait_settled(sizes, what):
        return await asyncio.to_thread(settled, owned_now, sizes, what)

    names = ["%s-a%d" % (group, i) for i in range(3)]
    try:
        owned = {}
        for k, name in enumerate(names, start=1):
            mark = timeline.mark()
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id=group, client_id=name,
                partition_assignment_strategy=[cls()], enable_auto_commit=False,
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                max_poll_interval_ms=30000, rebalance_timeout_ms=10000,
                request_timeout_ms=20000, retry_backoff_ms=50, fetch_max_wait_ms=100,
                metadata_max_age_ms=5000)
            c.subscribe(sorted(TOPICS), listener=Listener(name))
            consumers[name] = c
            await asyncio.wait_for(c.start(), 20)
            tasks[name] = asyncio.ensure_future(poll(c))
            after = await wait_settled(SIZES[k], "%s joined" % name)
            check_step(timeline, mark, owned, after, name, False, cls.name in STICKY, True)
            owned = after
        # the first consumer stops (LeaveGroup); aiokafka calls no listener on stop, so its
        # release is recorded when the application lets go: before stop()
        mark = timeline.mark()
        leaving = names[0]
        timeline.add(leaving, "revoke", consumers[leaving].assignment())
        tasks.pop(leaving).cancel()
        await asyncio.wait_for(consumers.pop(leaving).stop(), 20)
        after = await wait_settled(SIZES[2], "%s left" % leaving)
        check_step(timeline, mark, owned, after, leaving, False, cls.name in STICKY, False)
        held = timeline.check_never_held_twice()
        for n in after:
            assert held[n] == after[n], (n, held[n], after[n])
    finally:
        stop.set()
        for t in tasks.values():
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for c in consumers.values():
            await asyncio.wait_for(c.stop(), 20)


@pytest.mark.parametrize("cls", [A.RangeAssignor, A.RoundRobinAssignor, A.StickyAssignor,
                                 A.OptimalAssignor], ids=lambda c: c.name)
def test_aiokafka_consumers_with_our_assignor(serve, cls):  # noqa: F811
    srv = serve(topics=TOPICS)
    asyncio.run(asyncio.wait_for(_aiokafka(srv.bootstrap, "aio-" + cls.name, cls), 240))


# ----------------------------------------------------------------------------- both clients

class AioMembers:
    """aiokafka consumers on an event loop of their own thread, driven from the test."""

    def __init__(self, bootstrap, group, timeline):
        self.bootstrap, self.group, self.timeline = bootstrap, group, timeline
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="aio-loop")
        self.thread.start()
        self.consumers, self.tasks = {}, {}

    def run(self, coro, timeout=30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add(self, name, cls):
        timeline = self.timeline

        class Listener(AioListener):
            def on_partitions_revoked(self, revoked):
                timeline.add(name, "revoke", revoked)

            def on_partitions_assigned(self, assigned):
                timeline.add(name, "assign", assigned)

        async def start():
            c = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=self.group, client_id=name,
                partition_assignment_strategy=[cls()], enable_auto_commit=False,
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                max_poll_interval_ms=30000, rebalance_timeout_ms=10000,
                request_timeout_ms=20000, retry_backoff_ms=50, fetch_max_wait_ms=100,
                metadata_max_age_ms=5000)
            c.subscribe(sorted(TOPICS), listener=Listener())
            self.consumers[name] = c
            await c.start()

            async def poll():
                while True:
                    try:
                        await c.getmany(timeout_ms=50)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        await asyncio.sleep(0.05)
            self.tasks[name] = asyncio.ensure_future(poll())
        self.run(start())

    def owned_now(self):
        async def read():
            return {n: frozenset((tp.topic, tp.partition) for tp in c.assignment())
                    for n, c in self.consumers.items()}
        return self.run(read(), 5.0)

    def close(self):
        async def stop_all():
            for t in self.tasks.values():
                t.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            for c in self.consumers.values():
                await asyncio.wait_for(c.stop(), 20)
        try:
            self.run(stop_all(), 60.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def test_mixed_optimal_group_of_kafka_python_and_aiokafka(serve):  # noqa: F811
    """groupcoord-optimal: kafka-python members (cooperative: they keep their partitions
    while they rejoin) and aiokafka members (eager: they release everything before each
    JoinGroup) in one group; the first, a kafka-python member, leads until it leaves, then
    the leader is whichever the coordinator picks. The cooperative survivor revokes nothing
    when a member leaves."""
    srv = serve(topics=TOPICS)
    timeline = Timeline()
    kp = KafkaPythonGroup(srv.bootstrap, "mixed-optimal", timeline)
    aio = AioMembers(srv.bootstrap, "mixed-optimal", timeline)
    try:
        def owned_now():
            return {**kp.owned_now(), **aio.owned_now()}
        steps = [("kp-0", kp, K.OptimalAssignor), ("aio-1", aio, A.OptimalAssignor),
                 ("kp-2", kp, K.OptimalAssignor)]
        owned = {}
        for k, (name, group, cls) in enumerate(steps, start=1):
            group.add(name, cls)
            after = settled(owned_now, SIZES[k], "%s joined" % name)
            for n in owned:                   # old members only give (sticky)
                assert after[n] <= owned[n], (n, owned[n], after[n])
            owned = after
        assert kp.is_leader("kp-0")
        mark = timeline.mark()
        kp.remove("kp-0")
        after = settled(owned_now, SIZES[2], "kp-0 left")
        assert _revoked_by(timeline.since(mark), {"kp-2"}) == []
        for n in after:
            assert owned[n] <= after[n], (n, owned[n], after[n])
        held = timeline.check_never_held_twice()
        for n in after:
            assert held[n] == after[n], (n, held[n], after[n])
    finally:
        try:
            kp.close()
        finally:
            aio.close()
