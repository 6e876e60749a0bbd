"""ConsumerMember and ClassicMember (src/groupcoord/client/): the pure state machines driven
against an in-process coordinator Shard (tests/coord_harness.py), then the asyncio members
end to end against a real `groupcoord serve` on 127.0.0.1.

Safety is checked from the listeners' own logs: `Ledger` records every assigned / revoked /
lost callback and fails at once if a partition is assigned to a member while another one
still holds it.
"""
import asyncio
import time

import pytest

from serve_proc import describe_consumer_group, serve  # noqa: F401  (fixture)
from waiting import until
from coord_harness import Harness

from groupcoord.client import (ClassicMember, ConsumerMember, CustomProtocol, TopicPartition)
from groupcoord.client.members_classic_protocol import ConsumerProtocol
from groupcoord.client.members_classic_state import (ASSIGNED, LOST, REJOIN, SYNC,
                                                     ClassicMemberState)
from groupcoord.client.members_classic_state import JoinedMember as ClassicJoined
from groupcoord.client.members_consumer_state import (JOINING, LEFT, STABLE, UNJOINED,
                                                      ConsumerMemberState, commit_errors,
                                                      fetch_result)
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.modern.reconcile import STABLE as MEMBER_STABLE, UNREVOKED
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

T12 = "t12"


# ============================================================================ helpers
class Ledger:
    """Who holds which partition, from the callbacks. assign() of a partition someone else
    holds is a safety violation (raised at once and remembered)."""

    def __init__(self):
        self.holder = {}
        self.events = []           # (monotonic time, member, op, tp)
        self.violations = []

    def listener(self, name):
        ledger = self

        class L:
            def on_partitions_assigned(self, tps):
                for tp in tps:
                    ledger._op(name, "+", tp)

            async def on_partitions_revoked(self, tps):   # async on purpose: both kinds work
                for tp in tps:
                    ledger._op(name, "-", tp)

            def on_partitions_lost(self, tps):
                for tp in tps:
                    ledger._op(name, "lost", tp)
        return L()

    def _op(self, name, op, tp):
        self.events.append((time.monotonic(), name, op, tp))
        if op == "+":
            other = self.holder.get(tp)
            if other is not None and other != name:
                self.violations.append("%s assigned to %s while %s holds it" % (tp, name, other))
            self.holder[tp] = name
        else:
            if self.holder.get(tp) != name:
                self.violations.append("%s %s by %s, held by %s" % (tp, op, name,
                                                                    self.holder.get(tp)))
            self.holder.pop(tp, None)

    def owned_by(self, name):
        return sorted(tp for tp, n in self.holder.items() if n == name)

    def revoked(self, name, since=0.0):
        return sorted(tp for t, n, op, tp in self.events if n == name and op == "-" and t >= since)

    def check(self):
        assert not self.violations, self.violations


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def tps(topic, parts):
    return [TopicPartition(topic, p) for p in parts]


# ============================================================================ sans-I/O: consumer
CATALOG = TopicCatalog.of(t12=12, t3=3)


# The harness clock does not move: assignment batching off, a target per epoch bump.
CONSUMER_CFG = ShardConfig(consumer_assignment_interval_ms=0)


def hb(h, sm):
    """One heartbeat of a ConsumerMemberState against the harness; callbacks -> ledger."""
    req = sm.heartbeat_request()
    resp = h.send(req, 1)
    return sm.on_heartbeat_response(req, resp)


def reconcile(sm, ledger, name):
    while (rec := sm.next_reconciliation()) is not None:
        if rec.missing_topic_ids:
            sm.add_topic_names({t: CATALOG.by_id[t].name for t in rec.missing_topic_ids})
            continue
        for tp in rec.revoked:
            ledger._op(name, "-", tp)
        sm.revoke_done(rec)
        for tp in rec.assigned:
            ledger._op(name, "+", tp)
        sm.assign_done(rec)


def settle(h, members, ledger, rounds=20):
    """Heartbeat every member in turn (with its reconciliation) until a whole round changes
    no member's epoch or partitions."""
    for _ in range(rounds):
        before = {n: (sm.epoch, sm.owned) for n, sm in members.items()}
        for name, sm in members.items():
            hb(h, sm)
            reconcile(sm, ledger, name)
        if before == {n: (sm.epoch, sm.owned) for n, sm in members.items()} and all(
                sm.state == STABLE and not sm.ack_pending for sm in members.values()):
            return
    raise AssertionError("members did not settle")


def test_consumer_state_heartbeat_fields_join_then_only_changes():
    sm = ConsumerMemberState("g", topics=["t12"], instance_id="i1", rebalance_timeout_ms=5000)
    assert sm.state == UNJOINED and len(sm.member_id) == 22
    req = sm.heartbeat_request()
    assert sm.state == JOINING
    assert (req.member_epoch, req.subscribed_topic_names, req.rebalance_timeout_ms,
            req.topic_partitions, req.instance_id) == (0, ["t12"], 5000, [], "i1")
    h = Harness(CONSUMER_CFG, CATALOG)
    resp = h.send(req, 1)
    assert sm.on_heartbeat_response(req, resp).ok and sm.epoch > 0
    req2 = sm.heartbeat_request()
    # unchanged fields are null; the instance id is always sent; owned (nothing started
    # yet) is reported because the answer carried an assignment
    assert (req2.subscribed_topic_names, req2.rebalance_timeout_ms, req2.topic_partitions,
            req2.instance_id) == (None, -1, [], "i1")
    sm.on_heartbeat_response(req2, h.send(req2, 1))
    ledger = Ledger()
    reconcile(sm, ledger, "a")
    assert len(ledger.owned_by("a")) == 12 and sm.ack_pending
    req3 = sm.heartbeat_request()                    # the ack carries the owned partitions
    assert sum(len(tp.partitions) for tp in req3.topic_partitions) == 12
    sm.on_heartbeat_response(req3, h.send(req3, 1))
    sm.subscribe(["t12", "t3"])
    req4 = sm.heartbeat_request()
    assert req4.subscribed_topic_names == ["t12", "t3"] and req4.topic_partitions is None
    sm.heartbeat_lost()                              # no answer: everything again next time
    req5 = sm.heartbeat_request()
    assert req5.rebalance_timeout_ms == 5000 and req5.subscribed_topic_names == ["t12", "t3"]
    assert len(req5.topic_partitions) == 1


def test_consumer_state_three_members_then_fourth_no_double_ownership():
    h = Harness(CONSUMER_CFG, CATALOG)
    ledger = Ledger()
    members = {n: ConsumerMemberState("g", topics=[T12]) for n in "abc"}
    settle(h, members, ledger)
    assert sorted(len(ledger.owned_by(n)) for n in "abc") == [4, 4, 4]
    members["d"] = ConsumerMemberState("g", topics=[T12])
    settle(h, members, ledger)
    assert sorted(len(ledger.owned_by(n)) for n in "abcd") == [3, 3, 3, 3]
    ledger.check()
    # leave (-1): its partitions go to the others
    req = members["d"].leave_request()
    assert req.member_epoch == -1
    assert members["d"].on_heartbeat_response(req, h.send(req, 1)).left
    for tp in ledger.owned_by("d"):
        ledger._op("d", "-", tp)
    del members["d"]
    settle(h, members, ledger)
    assert sorted(len(ledger.owned_by(n)) for n in "abc") == [4, 4, 4]
    ledger.check()


def test_consumer_state_fenced_loses_everything_and_rejoins_at_epoch_0():
    h = Harness(CONSUMER_CFG, CATALOG)
    ledger = Ledger()
    sm = ConsumerMemberState("g", topics=[T12])
    settle(h, {"a": sm}, ledger)
    mid = sm.member_id
    sm.epoch += 5                                    # an epoch the coordinator never gave
    out = hb(h, sm)
    assert out.rejoin and len(out.lost) == 12 and sm.state == UNJOINED
    assert (sm.epoch, sm.owned, sm.member_id) == (0, frozenset(), mid)
    req = sm.heartbeat_request()
    assert req.member_epoch == 0 and req.topic_partitions == []


def test_consumer_state_v0_gets_its_member_id_from_the_coordinator():
    h = Harness(CONSUMER_CFG, CATALOG)
    sm = ConsumerMemberState("g", topics=[T12], version=0)
    assert sm.member_id == ""
    req = sm.heartbeat_request()
    assert sm.on_heartbeat_response(req, h.send(req, 0)).ok and sm.member_id


def test_consumer_state_commit_stale_epoch_then_fetch():
    h = Harness(CONSUMER_CFG, CATALOG)
    ledger = Ledger()
    sm = ConsumerMemberState("g", topics=[T12])
    settle(h, {"a": sm}, ledger)
    tp = TopicPartition(T12, 0)
    commit = sm.commit_request({tp: 7})
    # the member's next heartbeat (new subscription) moves its epoch; the commit built before
    # it carries the old epoch
    sm.subscribe([T12, "t3"])
    hb(h, sm)
    errs = commit_errors(h.send(commit, 9))
    assert errs == {tp: E.STALE_MEMBER_EPOCH}
    assert commit_errors(h.send(sm.commit_request({tp: (7, "meta")}), 9)) == {}
    err, offsets, errors = fetch_result(h.send(sm.fetch_request([tp]), 9))
    assert (err, offsets, errors) == (0, {tp: (7, "meta")}, {})
    stale = sm.fetch_request([tp])
    stale.groups[0].member_epoch -= 1
    assert fetch_result(h.send(stale, 9))[0] == E.STALE_MEMBER_EPOCH


def test_consumer_state_static_leave_and_return_keeps_the_assignment():
    h = Harness(CONSUMER_CFG, CATALOG)
    ledger = Ledger()
    members = {"a": ConsumerMemberState("g", topics=[T12], instance_id="ia"),
               "b": ConsumerMemberState("g", topics=[T12])}
    settle(h, members, ledger)
    before = ledger.owned_by("a")
    req = members["a"].leave_request(temporary=True)
    assert req.member_epoch == -2
    members["a"].on_heartbeat_response(req, h.send(req, 1))
    for tp in before:
        ledger._op("a", "-", tp)
    again = ConsumerMemberState("g", topics=[T12], instance_id="ia")   # a new member id
    members["a"] = again
    settle(h, members, ledger)
    assert ledger.owned_by("a") == before and len(ledger.owned_by("b")) == 6
    assert ledger.revoked("b") == []
    ledger.check()


def test_consumer_state_reports_owned_after_every_answer_with_an_assignment():
    """The coordinator repeats an assignment until an owned set confirms it, and only an owned
    set acknowledges a revocation (docs/simulation.md, finding 10): the heartbeat after an
    answer that carried an assignment reports the owned partitions even when the answer
    changed nothing for the member; other heartbeats omit them."""
    h = Harness(CONSUMER_CFG, CATALOG)
    sm = ConsumerMemberState("g", topics=[T12])
    ledger = Ledger()
    settle(h, {"a": sm}, ledger)
    req = sm.heartbeat_request()
    assert req.topic_partitions is None
    resp = h.send(req, 1)
    assert resp.assignment is None
    sm.on_heartbeat_response(req, resp)
    # The same assignment again (as a repeat is): nothing to do, but the next heartbeat
    # reports what the member owns; the one after it does not.
    resp.assignment = m.ConsumerGroupHeartbeatResponseAssignment(topic_partitions=[
        m.ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=CATALOG.get(T12).topic_id,
                                                        partitions=list(range(12)))])
    req = sm.heartbeat_request()
    assert sm.on_heartbeat_response(req, resp).ok and sm.state == STABLE
    assert sm.next_reconciliation() is None and not sm.ack_pending
    req = sm.heartbeat_request()
    assert sum(len(tp.partitions) for tp in req.topic_partitions) == 12
    sm.on_heartbeat_response(req, h.send(req, 1))
    assert sm.heartbeat_request().topic_partitions is None


def test_consumer_state_acknowledges_a_revocation_of_partitions_it_never_heard_of():
    """Simulation finding 10 (liveness seed 502916) through the state machine: the answer to
    a late copy of a's heartbeat moved it to a new epoch with partitions it never heard of;
    a's retry is answered with a revocation of those, and a keeps exactly what it owns. Its
    next heartbeat reports its owned set, which acknowledges: a is not fenced by the
    revocation timeout while running its partitions, and c gets the others."""
    h = Harness(ShardConfig(consumer_assignment_interval_ms=0,
                            consumer_session_timeout_ms=10_000_000), CATALOG)
    ledger = Ledger()
    a, b = ConsumerMemberState("g", topics=[T12]), ConsumerMemberState("g", topics=[T12])
    settle(h, {"a": a, "b": b}, ledger)
    mine = ledger.owned_by("a")
    req = b.leave_request()
    b.on_heartbeat_response(req, h.send(req, 1))
    for tp in ledger.owned_by("b"):
        ledger._op("b", "-", tp)
    copy = a.heartbeat_request()
    assert h.send(copy, 1).member_epoch == a.epoch + 1     # all 12 for a; answer lost
    a.heartbeat_lost()                       # the connection broke: a retries in full
    c = ConsumerMemberState("g", topics=[T12])
    hb(h, c)                                 # the target moves: a is to keep its own 6
    out = hb(h, a)
    assert out.ok and a.state == STABLE and a.next_reconciliation() is None
    g = h.shard.group("g")
    assert g.members[a.member_id].a.state == UNREVOKED
    req = a.heartbeat_request()              # reports its owned set: acknowledged
    assert sum(len(tp.partitions) for tp in req.topic_partitions) == 6
    assert a.on_heartbeat_response(req, h.send(req, 1)).ok
    assert g.members[a.member_id].a.state == MEMBER_STABLE and a.epoch == g.target_epoch
    settle(h, {"a": a, "c": c}, ledger)
    assert ledger.owned_by("a") == mine and len(ledger.owned_by("c")) == 6
    ledger.check()


# ============================================================================ sans-I/O: classic
CLASSIC_CFG = ShardConfig(group_initial_rebalance_delay_ms=0)


class ClassicDriver:
    """Drives ClassicMemberStates + ConsumerProtocols against the harness step by step."""

    def __init__(self, h, ledger):
        self.h, self.ledger = h, ledger
        self.members = {}
        self.parked = {}

    def add(self, name, assignors, instance_id=None):
        sm = ClassicMemberState("g", instance_id=instance_id, session_timeout_ms=10_000,
                                rebalance_timeout_ms=10_000)
        self.members[name] = (sm, ConsumerProtocol([T12], assignors))
        return sm

    def join(self, name):
        sm, proto = self.members[name]
        for tp in proto.revoke_before_join():
            self.ledger._op(name, "-", tp)
        proto.revoked(proto.revoke_before_join())
        r = self.h.send(sm.join_request("consumer", proto.protocols()), 9)
        if hasattr(r, "key"):
            self.parked[name] = r
            return None
        return self.on_join(name, r)

    def on_join(self, name, resp):
        sm, proto = self.members[name]
        out = sm.on_join_response(resp)
        if out.kind == REJOIN:
            return self.join(name)
        assert out.kind == SYNC, out
        assign = {}
        if sm.is_leader and not sm.skip_assignment:
            assign = proto.leader_assign(sm.protocol_name, out.members, {T12: 12})
        r = self.h.send(sm.sync_request(assign), 5)
        if hasattr(r, "key"):
            self.parked[name] = r
            return None
        return self.on_sync(name, r)

    def on_sync(self, name, resp):
        sm, proto = self.members[name]
        out = sm.on_sync_response(resp)
        if out.kind != ASSIGNED:
            return out
        plan = proto.plan_sync(out.assignment)
        for tp in plan.revoked:
            self.ledger._op(name, "-", tp)
        proto.revoked(plan.revoked)
        for tp in plan.assigned:
            self.ledger._op(name, "+", tp)
        proto.installed(plan, sm.generation)
        if plan.rejoin:
            sm.rejoin()
        return out

    def pump(self):
        """Deliver completed parked requests."""
        for name, p in list(self.parked.items()):
            if self.h.answered(p):
                del self.parked[name]
                resp = self.h.completion(p)
                sm = self.members[name][0]
                (self.on_join if sm.state == "JOINING" else self.on_sync)(name, resp)

    def heartbeat(self, name):
        sm, proto = self.members[name]
        if sm.state != "STABLE":
            return None
        out = sm.on_heartbeat_response(self.h.send(sm.heartbeat_request(), 4))
        if out.kind == LOST:
            for tp in proto.lost():
                self.ledger._op(name, "lost", tp)
        return out.kind

    def settle(self, rounds=30):
        for _ in range(rounds):
            self.pump()
            for name, (sm, _) in self.members.items():
                if sm.state == "UNJOINED" and name not in self.parked:
                    self.join(name)
                else:
                    self.heartbeat(name)
            self.pump()
            if not self.parked and all(sm.state == "STABLE" for sm, _ in self.members.values()):
                return
        raise AssertionError("classic members did not settle: %s"
                             % {n: sm.state for n, (sm, _) in self.members.items()})


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_classic_state_three_members_converge_and_a_fourth_joins(assignor):
    h = Harness(CLASSIC_CFG, CATALOG)
    ledger = Ledger()
    d = ClassicDriver(h, ledger)
    for n in "abc":
        d.add(n, [assignor])
    first = d.members["a"][0]
    req = first.join_request("consumer", d.members["a"][1].protocols())
    resp = h.send(req, 9)
    assert resp.error_code == E.MEMBER_ID_REQUIRED and first.on_join_response(resp).kind == REJOIN
    assert first.member_id                                    # KIP-394 id, join again with it
    d.settle()
    assert sorted(len(ledger.owned_by(n)) for n in "abc") == [4, 4, 4]
    held = {n: ledger.owned_by(n) for n in "abc"}
    t = len(ledger.events)
    d.add("d", [assignor])
    d.settle()
    assert sorted(len(ledger.owned_by(n)) for n in "abcd") == [3, 3, 3, 3]
    ledger.check()
    if assignor == "cooperative-sticky":
        # only what moved was revoked, and each survivor kept the rest
        for n in "abc":
            revoked = sorted(tp for _, who, op, tp in ledger.events[t:] if who == n and op == "-")
            assert revoked == sorted(set(held[n]) - set(ledger.owned_by(n)))
            assert set(ledger.owned_by(n)) <= set(held[n])


def test_classic_state_illegal_generation_is_lost_and_rejoins():
    h = Harness(CLASSIC_CFG, CATALOG)
    ledger = Ledger()
    d = ClassicDriver(h, ledger)
    sm = d.add("a", ["range"])
    d.settle()
    mid = sm.member_id
    sm.generation += 3
    assert d.heartbeat("a") == LOST and sm.state == "UNJOINED" and sm.member_id == mid
    assert ledger.owned_by("a") == []
    d.settle()
    assert len(ledger.owned_by("a")) == 12
    ledger.check()


def test_classic_protocol_subscription_carries_the_generation_marker():
    p = ConsumerProtocol([T12], ["cooperative-sticky"])
    assert p.cooperative
    p.installed(p.plan_sync(ConsumerProtocol.leader_assign(
        "cooperative-sticky", [ClassicJoined("m1", None, p.protocols()[0][1])], {T12: 12})["m1"]),
        generation=7)
    sub = p.subscription("cooperative-sticky")
    assert sub.generation_id == 7 and sub.user_data == (7).to_bytes(4, "big")
    assert sum(len(x.partitions) for x in sub.owned_partitions) == 12
    assert not ConsumerProtocol([T12], ["cooperative-sticky", "range"]).cooperative


def test_classic_protocol_subscription_reports_the_joined_generation_owning_nothing():
    # Java's generation().generationId: an eager member (it revoked everything before
    # joining) installed generation 4 and then joined 6, whose SyncGroup answer it lost.
    # The coordinator saw its SyncGroup at 6 and refuses JoinGroups carrying an older
    # generation as late copies (finding 12): this rejoin must carry 6.
    p = ConsumerProtocol([T12], ["roundrobin"])
    p.installed(p.plan_sync(b""), generation=4)
    assert p.subscription("roundrobin", joined_generation=6).generation_id == 6
    assert p.subscription("roundrobin").generation_id == 4
    p.lost()
    assert p.subscription("roundrobin", joined_generation=-1).generation_id == -1


# ============================================================================ end to end
FAST = ["--group-config", "group.consumer.heartbeat.interval.ms=200",
        "--group-config", "group.initial.rebalance.delay.ms=0",
        "--group-config", "group.min.session.timeout.ms=1000",
        # the stale-epoch checks need the epoch to move at the subscription change itself
        "--group-config", "group.consumer.assignment.interval.ms=0"]


def test_e2e_consumer_members_converge_fourth_joins_commit_stale_and_leave(serve):  # noqa: F811
    srv = serve(topics={T12: 12, "t3": 3}, extra_args=FAST)

    async def main():
        ledger = Ledger()
        ms = {n: ConsumerMember(srv.bootstrap, "cg", topics=[T12], listener=ledger.listener(n),
                                rebalance_timeout_ms=10_000) for n in "abc"}
        try:
            for mb in ms.values():
                await mb.start()
            # Wait for the balanced end state itself: "all stable and 12 owned" also holds for
            # a moment as [0, 0, 12], before the first member hears of the newcomers.
            await until(lambda: all(mb.stable for mb in ms.values())
                        and sorted(len(mb.assignment) for mb in ms.values()) == [4, 4, 4], 20,
                        "3 members to own 4 partitions each")
            assert sorted(len(ledger.owned_by(n)) for n in "abc") == [4, 4, 4]
            ms["d"] = ConsumerMember(srv.bootstrap, "cg", topics=[T12],
                                     listener=ledger.listener("d"))
            await ms["d"].start()
            await until(lambda: all(mb.stable for mb in ms.values())
                        and sorted(len(mb.assignment) for mb in ms.values()) == [3, 3, 3, 3],
                        20, "4 members with 3 partitions each")
            ledger.check()
            g = describe_consumer_group(srv.host, srv.port, "cg")
            assert {x.member_id: x.member_epoch for x in g.members} == {
                mb.member_id: mb.epoch for mb in ms.values()}

            # commit and fetch with the member epoch
            a = ms["a"]
            mine = a.assignment
            await a.commit({tp: 100 + tp.partition for tp in mine})
            got = await a.committed(mine)
            assert got == {tp: (100 + tp.partition, "") for tp in mine}

            # leave (-1): the others take its partitions, nobody holds one twice
            await ms["d"].close()
            assert ms["d"].state == LEFT and ledger.owned_by("d") == []
            del ms["d"]
            await until(lambda: all(mb.stable for mb in ms.values())
                        and sorted(len(mb.assignment) for mb in ms.values()) == [4, 4, 4],
                        20, "back to 3 members")
            ledger.check()
        finally:
            for mb in ms.values():
                await mb.close()

    run(main())


def test_e2e_consumer_commit_stale_member_epoch_is_retried(serve):  # noqa: F811
    srv = serve(topics={T12: 12, "t3": 3}, extra_args=FAST)

    async def main():
        ledger = Ledger()
        a = ConsumerMember(srv.bootstrap, "stale", topics=[T12], listener=ledger.listener("a"))
        try:
            await a.start()
            await until(lambda: a.stable and len(a.assignment) == 12, 20, "a to own t12")
            epoch = a.epoch
            # The subscription change goes out at once and moves the epoch; the commit right
            # behind it on the same connection still carries the old one.
            await a.subscribe([T12, "t3"])
            await a.commit({TopicPartition(T12, 0): 5})
            assert a.stale_commit_retries >= 1 and a.epoch > epoch
            assert (await a.committed([TopicPartition(T12, 0)])) == {
                TopicPartition(T12, 0): (5, "")}
            await until(lambda: a.stable and len(a.assignment) == 15, 20, "t12 + t3")
        finally:
            await a.close()
        ledger.check()

    run(main())


def test_e2e_consumer_static_member_restart_keeps_its_assignment(serve):  # noqa: F811
    srv = serve(topics={T12: 12}, extra_args=FAST)

    async def main():
        ledger = Ledger()
        a = ConsumerMember(srv.bootstrap, "st", topics=[T12], instance_id="inst-a",
                           listener=ledger.listener("a"))
        b = ConsumerMember(srv.bootstrap, "st", topics=[T12], listener=ledger.listener("b"))
        try:
            await a.start()
            await b.start()
            await until(lambda: a.stable and b.stable and len(a.assignment) == 6
                        and len(b.assignment) == 6, 20, "two members with 6 each")
            before, old_id = a.assignment, a.member_id
            t = time.monotonic()
            await a.close()                           # static: epoch -2, a temporary leave
            a = ConsumerMember(srv.bootstrap, "st", topics=[T12], instance_id="inst-a",
                               listener=ledger.listener("a"))
            await a.start()
            await until(lambda: a.stable and len(a.assignment) == 6, 20, "a back")
            assert a.assignment == before and a.member_id != old_id
            assert ledger.revoked("b", since=t) == [] and len(b.assignment) == 6
        finally:
            await a.close(temporary=False)
            await b.close()
        ledger.check()

    run(main())


CLASSIC_KW = dict(session_timeout_ms=3000, rebalance_timeout_ms=5000, heartbeat_interval_ms=100)


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_e2e_classic_members_converge_and_rebalance_when_one_leaves(serve, assignor):  # noqa: F811
    srv = serve(topics={T12: 12}, extra_args=FAST)

    async def main():
        ledger = Ledger()
        ms = {n: ClassicMember(srv.bootstrap, "cl-" + assignor, topics=[T12],
                               assignors=[assignor], listener=ledger.listener(n), **CLASSIC_KW)
              for n in "abc"}
        try:
            for mb in ms.values():
                await mb.start()

            def converged(names):
                gens = {ms[n].generation for n in names}
                return (all(ms[n].state == "STABLE" for n in names) and len(gens) == 1
                        and sorted(len(ms[n].assignment) for n in names) == [12 // len(names)]
                        * len(names))
            await until(lambda: converged("abc"), 20, "3 classic members converge")
            assert sum(1 for mb in ms.values() if mb.is_leader) == 1
            held = {n: ledger.owned_by(n) for n in "abc"}
            t = time.monotonic()
            await ms["c"].close()
            await until(lambda: converged("ab"), 20, "2 classic members converge")
            ledger.check()
            if assignor == "cooperative-sticky":
                for n in "ab":           # nothing moved away from a survivor: nothing revoked
                    assert ledger.revoked(n, since=t) == []
                    assert set(held[n]) <= set(ledger.owned_by(n))
            else:                        # eager: everything revoked before rejoining
                for n in "ab":
                    assert ledger.revoked(n, since=t) == sorted(held[n])
            # a newcomer: cooperative-sticky revokes exactly what moves to it
            held = {n: ledger.owned_by(n) for n in "ab"}
            t = time.monotonic()
            ms["d"] = ClassicMember(srv.bootstrap, "cl-" + assignor, topics=[T12],
                                    assignors=[assignor], listener=ledger.listener("d"),
                                    **CLASSIC_KW)
            await ms["d"].start()
            await until(lambda: converged("abd"), 20, "a, b and the newcomer converge")
            ledger.check()
            if assignor == "cooperative-sticky":
                for n in "ab":
                    assert ledger.revoked(n, since=t) == sorted(set(held[n])
                                                                - set(ledger.owned_by(n)))
        finally:
            for mb in ms.values():
                await mb.close()
        ledger.check()

    run(main())


def test_e2e_classic_static_member_restart_keeps_its_assignment(serve):  # noqa: F811
    # The restart keeps the assignment only when the new incarnation joins with the metadata
    # its predecessor last joined with (Stable + identical protocols). A fresh member claims
    # nothing, so both must form the group in its first generation, as under Kafka's initial
    # rebalance delay; with no delay, b's join could land after a had formed generation 1
    # alone (a loaded CI machine did), a rejoined claiming partitions, and the restart then
    # rightly rebalanced.
    delayed = [x if x != "group.initial.rebalance.delay.ms=0"
               else "group.initial.rebalance.delay.ms=1000" for x in FAST]
    srv = serve(topics={T12: 12}, extra_args=delayed)

    async def main():
        ledger = Ledger()
        a = ClassicMember(srv.bootstrap, "cls", topics=[T12], assignors=["range"],
                          instance_id="inst-a", listener=ledger.listener("a"), **CLASSIC_KW)
        b = ClassicMember(srv.bootstrap, "cls", topics=[T12], assignors=["range"],
                          instance_id="inst-b", listener=ledger.listener("b"), **CLASSIC_KW)
        try:
            await a.start()
            await b.start()
            await until(lambda: a.state == b.state == "STABLE" and a.generation == b.generation
                        and len(a.assignment) == len(b.assignment) == 6, 20, "a and b")
            before, gen, old = a.assignment, a.generation, a.member_id
            t = time.monotonic()
            await a.close()                      # static: no LeaveGroup
            a = ClassicMember(srv.bootstrap, "cls", topics=[T12], assignors=["range"],
                              instance_id="inst-a", listener=ledger.listener("a"),
                              **CLASSIC_KW)
            await a.start()
            await until(lambda: a.state == "STABLE" and len(a.assignment) == 6, 20, "a back")
            assert a.assignment == before and a.generation == gen and a.member_id != old
            # Five more answered heartbeats of b (a rebalance would reach it on one): none.
            beats = []
            heartbeat = b._heartbeat

            async def counted():
                await heartbeat()
                beats.append(b.generation)
            b._heartbeat = counted
            await until(lambda: len(beats) >= 5, 10, "five heartbeats of b")
            assert b.generation == gen and ledger.revoked("b", since=t) == []
        finally:
            await a.close(leave=True)
            await b.close(leave=True)
        ledger.check()

    run(main())


def test_e2e_classic_custom_protocol_leader_assigns_opaque_bytes(serve):  # noqa: F811
    srv = serve(extra_args=FAST)

    async def main():
        got = {}

        def assign(name, members):
            ids = sorted(x.member_id for x in members)
            return {mid: b"%s:%d/%d:%s" % (name.encode(), i, len(ids),
                                           dict((x.member_id, x.metadata)
                                                for x in members)[mid])
                    for i, mid in enumerate(ids)}

        def listener(n):
            class L:
                def on_assigned(self, a):
                    got[n] = a

                def on_revoked(self, a):
                    got.pop(n, None)
            return L()

        ms = [ClassicMember(srv.bootstrap, "custom", protocol=CustomProtocol(
            "work", [("v2", b"url-%d" % i), ("v1", b"old")], assign), listener=listener(i),
            **CLASSIC_KW) for i in range(3)]
        try:
            for mb in ms:
                await mb.start()
            await until(lambda: len(got) == 3 and len({a.generation for a in got.values()}) == 1
                        and all(mb.state == "STABLE" for mb in ms), 20, "custom group")
            datas = sorted(a.data for a in got.values())
            assert [d.split(b":")[1] for d in datas] == [b"0/3", b"1/3", b"2/3"]
            assert all(a.protocol == "v2" for a in got.values())
            assert {d.split(b":")[2] for d in datas} == {b"url-0", b"url-1", b"url-2"}
        finally:
            for mb in ms:
                await mb.close()

    run(main())


def test_e2e_classic_member_commits_with_its_generation(serve):  # noqa: F811
    """ClassicMember.commit: accepted in the member's generation, fetched back; once the
    group moved to a newer generation, a commit in the old one raises CommitFailed
    (ILLEGAL_GENERATION), as Kafka's CommitFailedException."""
    srv = serve(topics={T12: 12}, extra_args=FAST)

    async def main():
        from groupcoord.client import ClientError, CommitFailed
        from groupcoord.client.connection import Connection
        from groupcoord.protocol import messages as m
        a = ClassicMember(srv.bootstrap, "cl-commit", topics=[T12], **CLASSIC_KW)
        b = None
        try:
            with pytest.raises(ClientError):
                await a.commit({TopicPartition(T12, 0): 1})       # no generation yet
            await a.start()
            await until(lambda: a.state == "STABLE" and len(a.assignment) == 12, 20,
                        "a alone owns 12")
            await a.commit({tp: (100 + tp.partition, "m") for tp in a.assignment})
            conn = await Connection.open(srv.host, srv.port)
            try:
                resp = await conn.request(m.OffsetFetchRequest(groups=[
                    m.OffsetFetchRequestGroup(group_id="cl-commit", topics=[
                        m.OffsetFetchRequestTopics(name=T12, partition_indexes=[0, 11])])]), 8)
            finally:
                await conn.close()
            got = [(p.partition_index, p.committed_offset, p.metadata)
                   for p in resp.groups[0].topics[0].partitions]
            assert got == [(0, 100, "m"), (11, 111, "m")]
            gen = a.generation
            b = ClassicMember(srv.bootstrap, "cl-commit", topics=[T12], **CLASSIC_KW)
            await b.start()
            await until(lambda: a.generation > gen and b.state == "STABLE"
                        and a.state == "STABLE", 20, "a new generation with b")
            a.sm.generation = gen            # as if a had missed the rebalance
            with pytest.raises(CommitFailed) as err:
                await a.commit({TopicPartition(T12, 0): 5})
            assert set(err.value.errors.values()) == {E.ILLEGAL_GENERATION}
        finally:
            for mb in (a, b):
                if mb is not None:
                    await mb.close()

    run(main())


# ============================================================================ no server
@pytest.mark.integration          # real sockets (a refused connection)
@pytest.mark.parametrize("kind", ["consumer", "classic"])
def test_start_without_a_server_raises_coordinator_not_found_naming_the_address(kind):
    """Nothing listens at the bootstrap address: start() (and so `async with`) raises the
    typed CoordinatorNotFound naming the address and the refusal once the bootstrap timeout
    has passed, instead of the driver retrying in silence (the README example used to exit 0
    printing nothing). The outer wait_for only bounds a hang; it is not a timing check."""
    from groupcoord.client import CoordinatorNotFound, ConnectionClosed
    import socket
    # A bound socket that never listens: connections to its port are refused, and no other
    # process can take the port while the test runs.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % closed.getsockname()[1]

        async def main():
            if kind == "consumer":
                mb = ConsumerMember(addr, "nobody-home", topics=[T12], bootstrap_timeout_s=1.0)
            else:
                mb = ClassicMember(addr, "nobody-home", topics=[T12], bootstrap_timeout_s=1.0)
            with pytest.raises(CoordinatorNotFound) as err:
                async with mb:
                    raise AssertionError("the member started without a coordinator")
            assert addr in str(err.value) and "bootstrap timeout 1.0 s" in str(err.value)
            assert isinstance(err.value.last, ConnectionClosed)   # the refusal itself
            assert mb.error is err.value and mb._task is None      # no driver left behind
            with pytest.raises(CoordinatorNotFound):
                await mb.wait_closed()
            await mb.close()                                       # harmless after it

        run(main(), timeout=30)
