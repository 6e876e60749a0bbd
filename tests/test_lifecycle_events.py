"""Lifecycle events (groups/lifecycle.py) as the pure core emits them in Result.events: for
classic, consumer and connect groups and offsets retention, each kind where it happens.

The groups are driven through the coordinator harness (purity and safety checked at each step,
replay equality at teardown). Every event seen is also rendered as its log line and its JSON
fields (runtime/lifecycle_log.py), and after every step each modern group's reconciled count
(kept by replay for the "completed" rule) is compared with a count over its members.
"""
import pytest

from groupcoord.groups import lifecycle as lc
from groupcoord.groups import offsets
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.modern.group import ModernGroup
from groupcoord.groups.modern.reconcile import STABLE
from groupcoord.groups.records import Record
from groupcoord.groups.result import Result, TimerKey, is_durable
from groupcoord.groups.shard import Shard, on_catalog_change
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.lifecycle_log import fields, render

TOPICS = TopicCatalog.of(foo=6, bar=3)
SESSION = 45_000
REBALANCE = 30_000


class Driver:
    """The harness, and the lifecycle events of the steps since the last look."""

    def __init__(self, coord, **cfg):
        kw = dict(consumer_assignment_interval_ms=0, group_initial_rebalance_delay_ms=0)
        kw.update(cfg)
        self.h = coord(config=ShardConfig(**kw), topics=TOPICS)
        self.seen = 0
        apply = self.h._apply

        def checked(res):
            apply(res)
            self.check_counts()
        self.h._apply = checked

    def check_counts(self):
        for g in self.h.shard.groups.values():
            if isinstance(g, ModernGroup):
                te = g.target_epoch
                n = sum(1 for a in g.assignments() if a.state == STABLE and a.epoch == te)
                assert g.reconciled() == n, (g.group_id, g.reconciled(), n)
                assert g.is_stable() == (g.state_name() == "Stable"), g.group_id

    def send(self, req, version=None, client_id="cli", host="/10.0.0.1"):
        h = self.h
        res = h._pure(lambda: h.shard.handle(req, h.now, version, client_id, host))
        h._apply(res)
        if res.park is not None:
            h.waiting[res.park] = res.park
            return res.park
        return res.response

    def events(self) -> list:
        out = []
        for res in self.h.results[self.seen:]:
            for ev in res.events:
                assert isinstance(ev, lc.Event) and ev.kind in lc.KINDS
                line = render(ev)
                assert line.startswith("group %s (%s): " % (ev.group, ev.type)), line
                f = fields(ev)
                assert f["kind"] == ev.kind and f["group"] == ev.group
                out.append(ev)
        self.seen = len(self.h.results)
        return out

    def kinds(self) -> list:
        return [(ev.kind, ev.member, ev.reason) for ev in self.events()]


def one(events, kind):
    got = [ev for ev in events if ev.kind == kind]
    assert len(got) == 1, (kind, events)
    return got[0]


# ================================================================== consumer groups
class Consumer:
    """A member that reports what it owns (the last assignment it was given)."""

    def __init__(self, d, mid, names=("foo",), instance=None, gid="g"):
        self.d, self.mid, self.names, self.instance, self.gid = d, mid, list(names), \
            instance, gid
        self.epoch, self.owned = 0, []

    def send(self, **kw):
        resp = self.d.send(m.ConsumerGroupHeartbeatRequest(group_id=self.gid,
                                                           member_id=self.mid, **kw), 1)
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(
                    topic_id=tp.topic_id, partitions=list(tp.partitions))
                    for tp in resp.assignment.topic_partitions]
        return resp

    def join(self, **kw):
        self.owned = []
        args = dict(member_epoch=0, rebalance_timeout_ms=REBALANCE,
                    subscribed_topic_names=self.names, topic_partitions=[],
                    instance_id=self.instance)
        args.update(kw)
        return self.send(**args)

    def hb(self, **kw):
        kw.setdefault("member_epoch", self.epoch)
        kw.setdefault("topic_partitions", self.owned)
        return self.send(**kw)


def converge(d, members, rounds=10):
    g = d.h.shard.group(members[0].gid)
    for _ in range(rounds):
        for c in members:
            assert c.hb().error_code == 0
        if g.state_name() == "Stable":
            return
    raise AssertionError("no convergence")


def test_consumer_join_rebalance_completed_with_duration_members_and_partitions(coord):
    d = Driver(coord)
    a, b = Consumer(d, "a"), Consumer(d, "b")
    d.h.now = 1_000
    assert a.join().error_code == 0
    evs = d.events()
    assert [ev.kind for ev in evs] == [lc.MEMBER_JOINED, lc.REBALANCE_STARTED,
                                       lc.ASSIGNMENT_COMPUTED, lc.REBALANCE_COMPLETED]
    j = evs[0]
    assert (j.group, j.type, j.member, j.epoch, j.client, j.host) == \
        ("g", "consumer", "a", 1, "cli", "/10.0.0.1")
    s = evs[1]
    assert (s.epoch, s.reason, s.member, s.members) == (1, "join", "a", 1)
    c = evs[2]
    assert (c.epoch, c.assignor, c.members, c.units_moved, c.unit) == \
        (1, "uniform", 1, 6, "partitions")
    done = evs[3]
    assert (done.epoch, done.duration_ms, done.members, done.units_moved) == (1, 0, 1, 6)

    d.h.now = 2_000
    b.join()
    evs = d.events()
    assert [(ev.kind, ev.epoch) for ev in evs] == [
        (lc.MEMBER_JOINED, 2), (lc.REBALANCE_STARTED, 2), (lc.ASSIGNMENT_COMPUTED, 2)]
    assert one(evs, lc.ASSIGNMENT_COMPUTED).units_moved == 3
    # Not completed while a still holds what b is to get.
    d.h.now = 2_250
    converge(d, [a, b])
    evs = d.events()
    done = one(evs, lc.REBALANCE_COMPLETED)
    assert (done.epoch, done.duration_ms, done.members, done.units_moved) == (2, 250, 2, 3)
    # A Stable group heartbeating reports nothing more.
    converge(d, [a, b])
    assert d.events() == []


def test_consumer_leave_expiry_and_fencing(coord):
    d = Driver(coord)
    a, b = Consumer(d, "a"), Consumer(d, "b")
    a.join(), b.join()
    converge(d, [a, b])
    d.events()
    assert b.send(member_epoch=-1).error_code == 0
    assert d.kinds() == [(lc.MEMBER_LEFT, "b", ""), (lc.REBALANCE_STARTED, "b", "leave")]
    converge(d, [a])           # a's heartbeat computes the target (epoch 3) and takes it all
    assert [(ev.kind, ev.epoch) for ev in d.events()] == [
        (lc.ASSIGNMENT_COMPUTED, 3), (lc.REBALANCE_COMPLETED, 3)]
    # A request at a stale epoch is fenced (the member is not removed).
    resp = a.send(member_epoch=a.epoch + 5)
    assert resp.error_code == E.FENCED_MEMBER_EPOCH
    f = one(d.events(), lc.MEMBER_FENCED)
    assert (f.member, f.reason, f.epoch, f.member_epoch) == ("a", "stale-epoch", 3, 8)
    assert "a" in d.h.shard.group("g").members
    # The last member's session expires: removed, and no rebalance without members.
    d.h.advance(SESSION + 1)
    evs = d.events()
    assert [(ev.kind, ev.member, ev.reason) for ev in evs] == [
        (lc.MEMBER_EXPIRED, "a", "session-expired")]


def test_consumer_revocation_timeout_and_the_rebalance_it_starts(coord):
    d = Driver(coord)
    a, b = Consumer(d, "a"), Consumer(d, "b")
    a.join()
    converge(d, [a])
    b.join()
    d.events()
    a.hb()                                  # told to revoke; never acknowledges
    b.hb()
    d.h.advance(REBALANCE + 1)
    evs = d.events()
    ex = one(evs, lc.MEMBER_EXPIRED)
    assert (ex.member, ex.reason) == ("a", "revocation-timeout")
    st = one(evs, lc.REBALANCE_STARTED)
    assert (st.reason, st.member, st.members) == ("revocation-timeout", "a", 1)


def test_consumer_static_member_leaves_for_a_while_and_is_replaced(coord):
    d = Driver(coord)
    a = Consumer(d, "a1", instance="i")
    other = Consumer(d, "o")
    a.join(), other.join()
    converge(d, [a, other])
    d.events()
    assert a.send(member_epoch=-2, instance_id="i").error_code == 0
    left = one(d.events(), lc.MEMBER_LEFT)
    assert (left.member, left.instance, left.reason) == ("a1", "i", "static-leave")
    a2 = Consumer(d, "a2", instance="i")
    assert a2.join().error_code == 0
    evs = d.events()
    rep = one(evs, lc.STATIC_REPLACED)
    assert (rep.member, rep.previous, rep.instance, rep.epoch) == ("a2", "a1", "i", 2)
    assert not [ev for ev in evs if ev.kind in (lc.REBALANCE_STARTED, lc.MEMBER_JOINED)]
    converge(d, [a2, other])
    # Back to the epoch the group had completed: no second "completed" line.
    assert [ev.kind for ev in d.events()] == []
    assert "replaced: member a2 took over from a1" in render(rep)


def test_consumer_subscription_and_metadata_changes_start_rebalances(coord):
    d = Driver(coord)
    a = Consumer(d, "a")
    a.join()
    converge(d, [a])
    d.events()
    a.hb(subscribed_topic_names=["foo", "bar"])
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.reason, st.member, st.epoch) == ("subscription", "a", 2)
    converge(d, [a])
    d.events()
    d.h.update_topics(TopicCatalog.of(foo=8, bar=3))
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.reason, st.member, st.epoch) == ("metadata", "", 3)
    assert "the subscribed topics changed" in render(st)


def test_consumer_rebalance_running_at_a_restart_completes_with_unknown_duration(coord):
    d = Driver(coord)
    a, b = Consumer(d, "a"), Consumer(d, "b")
    a.join()
    converge(d, [a])
    b.join()
    d.events()
    # Restart: a fresh shard replays the durable records (no event: replay has no Result).
    fresh = Shard(d.h.config, TOPICS, strict=True)
    for rec in d.h.log:
        fresh.replay(rec)
    d.h.shard = fresh
    converge(d, [a, b])
    done = one(d.events(), lc.REBALANCE_COMPLETED)
    assert (done.epoch, done.duration_ms, done.units_moved) == (2, -1, -1)
    assert "duration unknown" in render(done)
    # A group found Stable after a restart reports no completion when nothing moved.
    fresh = Shard(d.h.config, TOPICS, strict=True)
    for rec in d.h.log:
        fresh.replay(rec)
    d.h.shard = fresh
    a.hb(rebalance_timeout_ms=REBALANCE + 1)          # the general path, no bump
    assert d.events() == []


def test_consumer_classic_protocol_member_joins_and_leaves(coord):
    d = Driver(coord)
    a = Consumer(d, "a")
    a.join()
    converge(d, [a])
    d.events()
    sub = embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=["foo"]))
    r = d.send(m.JoinGroupRequest(
        group_id="g", session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE, member_id="",
        protocol_type="consumer",
        protocols=[m.JoinGroupRequestProtocol(name="range", metadata=sub)]), 5,
        client_id="old")
    assert r.error_code == 0
    evs = d.events()
    j = one(evs, lc.MEMBER_JOINED)
    assert (j.member, j.client, j.epoch) == (r.member_id, "old", 2)
    assert one(evs, lc.REBALANCE_STARTED).reason == "join"
    assert d.send(m.LeaveGroupRequest(group_id="g", member_id=r.member_id), 1).error_code == 0
    evs = d.events()
    assert [(ev.kind, ev.member) for ev in evs][:2] == [
        (lc.MEMBER_LEFT, r.member_id), (lc.REBALANCE_STARTED, r.member_id)]


# ================================================================== classic groups
def sub(*topics) -> bytes:
    return embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=list(topics)))


def assignment(**parts) -> bytes:
    return embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps)
        for t, ps in parts.items()]))


def join(d, member="", instance=None, version=5, session=SESSION, metadata=None):
    """A JoinGroup (with its MEMBER_ID_REQUIRED round): the response, or the ParkKey of a
    join parked at the barrier."""
    req = m.JoinGroupRequest(
        group_id="g", session_timeout_ms=session, rebalance_timeout_ms=REBALANCE,
        member_id=member, group_instance_id=instance, protocol_type="consumer",
        protocols=[m.JoinGroupRequestProtocol(name="range", metadata=metadata or sub("foo"))])
    r = d.send(req, version)
    if getattr(r, "error_code", 0) == E.MEMBER_ID_REQUIRED:
        req.member_id = r.member_id
        r = d.send(req, version)
    return r


def sync(d, member, gen, assignments=None):
    return d.send(m.SyncGroupRequest(
        group_id="g", generation_id=gen, member_id=member, assignments=[
            m.SyncGroupRequestAssignment(member_id=k, assignment=v)
            for k, v in (assignments or {}).items()]), 3)


def test_classic_join_rebalance_completed_with_partitions_moved(coord):
    d = Driver(coord)
    d.h.now = 1_000
    r1 = join(d)
    assert r1.error_code == 0 and r1.generation_id == 1    # alone: the barrier completes
    evs = d.events()
    assert [(ev.kind, ev.epoch) for ev in evs] == [(lc.MEMBER_JOINED, 0),
                                                   (lc.REBALANCE_STARTED, 1)]
    assert one(evs, lc.MEMBER_JOINED).client == "cli"
    d.h.now = 1_040
    assert sync(d, r1.member_id, 1, {r1.member_id: assignment(foo=[0, 1, 2])}).error_code == 0
    done = one(d.events(), lc.REBALANCE_COMPLETED)
    assert (done.type, done.epoch, done.duration_ms, done.members, done.units_moved) == \
        ("classic", 1, 40, 1, 3)
    assert fields(done)["generation"] == 1 and "epoch" not in fields(done)
    assert "rebalance completed: generation 1 in 40 ms, 1 member, 3 partitions moved" \
        in render(done)

    d.h.now = 2_000
    p2 = join(d)                                   # parked at the barrier
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.epoch, st.reason) == (2, "join")
    r1b = join(d, r1.member_id)                    # the leader rejoins: the barrier completes
    r2 = d.h.completion(p2)
    m2 = r2.member_id
    d.h.now = 2_100
    sync(d, m2, 2)                                 # parked until the leader's
    sync(d, r1b.member_id, 2, {r1.member_id: assignment(foo=[0, 1]),
                               m2: assignment(foo=[2])})
    done = one(d.events(), lc.REBALANCE_COMPLETED)
    assert (done.epoch, done.duration_ms, done.members, done.units_moved) == (2, 100, 2, 1)


def form2(d):
    r1 = join(d)
    sync(d, r1.member_id, 1, {r1.member_id: b""})
    p2 = join(d)
    join(d, r1.member_id)
    r2 = d.h.completion(p2)
    sync(d, r2.member_id, 2)
    sync(d, r1.member_id, 2, {})
    d.events()
    return r1.member_id, r2.member_id


def test_classic_leave_and_session_expiry(coord):
    d = Driver(coord)
    a, b = form2(d)
    assert d.send(m.LeaveGroupRequest(group_id="g", member_id=b), 1).error_code == 0
    assert d.kinds() == [(lc.MEMBER_LEFT, b, ""), (lc.REBALANCE_STARTED, b, "leave")]
    join(d, a)                                     # gen 3, alone
    sync(d, a, 3, {})
    assert one(d.events(), lc.REBALANCE_COMPLETED).epoch == 3
    d.h.advance(SESSION + 1)
    evs = d.events()
    assert [(ev.kind, ev.member, ev.reason) for ev in evs] == [
        (lc.MEMBER_EXPIRED, a, "session-expired")]      # nobody left to rebalance


def test_classic_rebalance_and_sync_timeouts(coord):
    d = Driver(coord)
    a, b = form2(d)
    join(d, a)                                     # the leader rejoins: b must too
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.reason, st.member, st.epoch) == ("leader-rejoin", a, 3)
    d.h.advance(REBALANCE + 1)                     # b never rejoins
    ex = one(d.events(), lc.MEMBER_EXPIRED)
    assert (ex.member, ex.reason) == (b, "rebalance-timeout")
    # a is in generation 3 alone; it never syncs: removed by the pending-sync deadline.
    d.h.advance(REBALANCE + 1)
    ex = one(d.events(), lc.MEMBER_EXPIRED)
    assert (ex.member, ex.reason) == (a, "sync-timeout")


def test_classic_static_member_replaced_and_the_old_id_fenced(coord):
    d = Driver(coord)
    r = join(d, instance="i")
    sync(d, r.member_id, 1, {r.member_id: b""})
    d.events()
    r2 = join(d, instance="i")                     # same protocols, Stable: no rebalance
    assert r2.error_code == 0 and r2.member_id != r.member_id
    evs = d.events()
    rep = one(evs, lc.STATIC_REPLACED)
    assert (rep.member, rep.previous, rep.instance, rep.epoch) == \
        (r2.member_id, r.member_id, "i", 1)
    assert not [ev for ev in evs if ev.kind == lc.REBALANCE_STARTED]
    hb = d.send(m.HeartbeatRequest(group_id="g", generation_id=1, member_id=r.member_id,
                                   group_instance_id="i"), 3)
    assert hb.error_code == E.FENCED_INSTANCE_ID
    f = one(d.events(), lc.MEMBER_FENCED)
    assert (f.member, f.instance, f.reason) == (r.member_id, "i", "instance-taken")


def test_classic_group_rebalances_when_a_subscribed_topic_changes(coord):
    d = Driver(coord)
    r = join(d)
    sync(d, r.member_id, 1, {r.member_id: b""})
    d.events()
    new = TopicCatalog.of(foo=8, bar=3)
    for res in on_catalog_change(d.h.shard, TOPICS, new, d.h.now):
        d.h._apply(res)
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.reason, st.epoch, st.type) == ("metadata", 2, "classic")


# ================================================================== connect groups
def asg():
    return [m.ConnectGroupHeartbeatRequestAssignor(name="ica", minimum_version=0,
                                                   maximum_version=1, version=1)]


def cfg_state(tasks=2):
    return m.ConnectGroupHeartbeatRequestConfigState(config_offset=1, connectors=[
        m.ConnectGroupHeartbeatRequestConnectorConfig(name="A", task_count=tasks)])


def whb(d, mid, epoch, **kw):
    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", REBALANCE)
        kw.setdefault("client_assignors", asg())
    return d.send(m.ConnectGroupHeartbeatRequest(group_id="g", member_id=mid,
                                                 member_epoch=epoch, **kw))


def install(d, worker, epoch, split):
    """PrepareAssignment, then InstallAssignment of split = {member: (connectors, {c: tasks})}."""
    p = d.send(m.ConnectGroupPrepareAssignmentRequest(group_id="g", member_id=worker,
                                                      member_epoch=epoch))
    assert p.error_code == 0, p
    CT = m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks
    T = m.ConnectGroupInstallAssignmentRequestConnectorTasks
    r = d.send(m.ConnectGroupInstallAssignmentRequest(
        group_id="g", member_id=worker, member_epoch=epoch, group_epoch=p.group_epoch,
        assignor_state=None, rebalance_delay_ms=-1, members=[
            m.ConnectGroupInstallAssignmentRequestMember(member_id=mid, connectors_and_tasks=CT(
                connectors=conns, tasks=[T(connector=c, task_ids=t) for c, t in tasks.items()]))
            for mid, (conns, tasks) in split.items()]))
    assert r.error_code == 0, r
    return p.group_epoch


def owned(conns, tasks):
    return m.ConnectGroupHeartbeatRequestConnectorsAndTasks(
        connectors=conns, tasks=[m.ConnectGroupHeartbeatRequestConnectorTasks(
            connector=c, task_ids=t) for c, t in tasks.items()])


def test_connect_join_install_completed_leave_expiry_fencing(coord):
    d = Driver(coord)
    d.h.now = 1_000
    r = whb(d, "w1", 0, config_state=cfg_state(), worker_url="http://w1")
    assert r.error_code == E.COMPUTE_ASSIGNMENT
    evs = d.events()
    assert [(ev.kind, ev.epoch) for ev in evs] == [(lc.MEMBER_JOINED, 1),
                                                   (lc.REBALANCE_STARTED, 1)]
    d.h.now = 1_500
    install(d, "w1", 0, {"w1": (["A"], {"A": [0, 1]})})
    c = one(d.events(), lc.ASSIGNMENT_COMPUTED)
    assert (c.worker, c.assignor, c.epoch, c.units_moved, c.unit, c.members) == \
        ("w1", "ica", 1, 3, "connectors/tasks", 1)
    assert "computed by worker w1 with assignor ica" in render(c)
    d.h.now = 2_000
    r = whb(d, "w1", 0)
    assert r.member_epoch == 1
    done = one(d.events(), lc.REBALANCE_COMPLETED)
    assert (done.epoch, done.duration_ms, done.members, done.units_moved) == (1, 1_000, 1, 3)

    d.h.now = 3_000
    assert whb(d, "w2", 0).member_epoch == 1
    evs = d.events()
    assert [(ev.kind, ev.member) for ev in evs] == [(lc.MEMBER_JOINED, "w2"),
                                                    (lc.REBALANCE_STARTED, "w2")]
    install(d, "w1", 1, {"w1": (["A"], {"A": [0]}), "w2": ([], {"A": [1]})})
    assert one(d.events(), lc.ASSIGNMENT_COMPUTED).units_moved == 1
    whb(d, "w1", 1, owned_connectors_and_tasks=owned(["A"], {"A": [0, 1]}))   # told to revoke
    whb(d, "w1", 1, owned_connectors_and_tasks=owned(["A"], {"A": [0]}))      # revoked
    assert d.h.shard.group("g").state_name() == "Reconciling"
    assert not [ev for ev in d.events() if ev.kind == lc.REBALANCE_COMPLETED]
    d.h.now = 3_600
    assert whb(d, "w2", 1, owned_connectors_and_tasks=owned([], {})).member_epoch == 2
    done = one(d.events(), lc.REBALANCE_COMPLETED)
    assert (done.epoch, done.duration_ms, done.members, done.units_moved) == (2, 600, 2, 1)

    # Fenced: a heartbeat at an epoch the group never gave.
    r = whb(d, "w2", 9)
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    f = one(d.events(), lc.MEMBER_FENCED)
    assert (f.member, f.reason, f.member_epoch, f.type) == ("w2", "stale-epoch", 9, "connect")
    # Leave, then the other's session expires.
    assert whb(d, "w2", -1).error_code == 0
    assert d.kinds()[:2] == [(lc.MEMBER_LEFT, "w2", ""), (lc.REBALANCE_STARTED, "w2", "leave")]
    d.h.advance(SESSION + 1)
    assert d.kinds() == [(lc.MEMBER_EXPIRED, "w1", "session-expired")]


def test_connect_config_change_starts_a_rebalance(coord):
    d = Driver(coord)
    whb(d, "w1", 0, config_state=cfg_state())
    install(d, "w1", 0, {"w1": (["A"], {"A": [0, 1]})})
    whb(d, "w1", 0)
    d.events()
    r = whb(d, "w1", 1, config_state=m.ConnectGroupHeartbeatRequestConfigState(
        config_offset=2, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
            name="A", task_count=3)]))
    assert r.error_code in (0, E.COMPUTE_ASSIGNMENT)
    st = one(d.events(), lc.REBALANCE_STARTED)
    assert (st.reason, st.epoch) == ("config", 2)


# ================================================================== offsets, admin
def test_offsets_expired_and_the_empty_group_deleted(coord):
    d = Driver(coord, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1_000)
    d.h.shard.rearm(0)
    r = d.send(m.OffsetCommitRequest(group_id="s", generation_id_or_member_epoch=-1,
                                     member_id="", topics=[m.OffsetCommitRequestTopic(
                                         name=t, partitions=[m.OffsetCommitRequestPartition(
                                             partition_index=p, committed_offset=5)
                                             for p in (0, 1)]) for t in ("foo", "bar")]), 8)
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
    d.h.advance(61_000)
    evs = d.events()
    ex = one(evs, lc.OFFSETS_EXPIRED)
    assert (ex.group, ex.type, ex.offsets, ex.topics) == ("s", "classic", 4, ("bar", "foo"))
    dl = one(evs, lc.GROUP_DELETED)
    assert (dl.group, dl.reason) == ("s", "empty-expired")
    assert render(ex) == "group s (classic): 4 offsets expired (topics bar, foo)"


def test_delete_groups_reports_each_deleted_group(coord):
    d = Driver(coord)
    d.send(m.OffsetCommitRequest(group_id="s", generation_id_or_member_epoch=-1, member_id="",
                                 topics=[m.OffsetCommitRequestTopic(
                                     name="foo", partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=5)])]), 8)
    d.events()
    resp = d.send(m.DeleteGroupsRequest(groups_names=["s", "nope"]), 2)
    assert [r.error_code for r in resp.results] == [0, E.GROUP_ID_NOT_FOUND]
    dl = one(d.events(), lc.GROUP_DELETED)
    assert (dl.group, dl.reason, dl.offsets) == ("s", "delete-request", 1)
    assert render(dl) == "group s (classic): group deleted (by a DeleteGroups request, " \
        "with 1 offset)"


# ================================================================== the data itself
def test_events_are_neither_replayed_nor_written(coord):
    d = Driver(coord)
    a = Consumer(d, "a")
    a.join()
    converge(d, [a])
    res = d.h.results[0]
    assert res.events and all(not isinstance(ev, Record) for ev in res.events)
    assert not any(isinstance(r, lc.Event) for x in d.h.results for r in x.records)
    # Shard.apply ignores them: applying a Result that carries only events changes nothing.
    before = d.h.shard.snapshot(durable=False)
    d.h.shard.apply(Result(None, events=res.events))
    assert d.h.shard.snapshot(durable=False) == before
    # What recovery replays (the durable records) rebuilds the group and reports nothing:
    # replay has no Result to carry events.
    fresh = d.h.replayed()
    assert fresh.snapshot() == d.h.shard.snapshot()
    assert all(is_durable(r) for r in d.h.log)


def test_the_retention_sweep_logs_nothing_itself(coord, caplog):
    d = Driver(coord, offsets_retention_ms=1_000, offsets_retention_check_interval_ms=1_000)
    d.h.shard.rearm(0)
    d.send(m.OffsetCommitRequest(group_id="s", generation_id_or_member_epoch=-1, member_id="",
                                 topics=[m.OffsetCommitRequestTopic(
                                     name="foo", partitions=[m.OffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=5)])]), 8)
    with caplog.at_level("DEBUG", logger="groupcoord"):
        d.h.advance(5_000)
    assert one(d.events(), lc.OFFSETS_EXPIRED).offsets == 1
    assert [r.getMessage() for r in caplog.records] == []
    assert d.h.shard.fire(TimerKey(offsets.RETENTION, ""), d.h.now).events == ()


@pytest.mark.parametrize("reason", sorted(lc.REASONS))
def test_every_reason_renders(reason):
    for kind in (lc.REBALANCE_STARTED, lc.MEMBER_LEFT, lc.MEMBER_EXPIRED, lc.MEMBER_FENCED,
                 lc.GROUP_DELETED):
        line = render(lc.Event(kind=kind, group="g", type="consumer", member="m", epoch=3,
                               reason=reason, members=2))
        assert line.startswith("group g (consumer): ") and "{" not in line
