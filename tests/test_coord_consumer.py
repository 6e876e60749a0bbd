"""KIP-848 consumer group (groups/consumer.py) driven through the coordinator harness.

Every step is checked by the harness for handler purity and for no unit held by two members;
every test ends with a replay-equality check (fresh shard from the durable log bytes).
"""
import random

import pytest

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.group import Group
from groupcoord.groups.modern.reconcile import STABLE, UNRELEASED, UNREVOKED
from groupcoord.groups.result import TimerKey, is_durable
from groupcoord.groups.topics import TopicCatalog, topic_id_for
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

TOPICS = TopicCatalog.of(foo=6, bar=3)
FOO = topic_id_for("foo")
REBALANCE_MS = 30_000


# ---------------------------------------------------------------------- helpers
def name_of(h, tid):
    return h.shard.topics.by_id[tid].name


def tps(h, owned):
    """{"foo": [0, 1]} -> request TopicPartitions."""
    return [m.ConsumerGroupHeartbeatRequestTopicPartitions(
        topic_id=h.shard.topics.get(n).topic_id, partitions=sorted(ps))
        for n, ps in sorted(owned.items())]


def as_dict(h, topic_partitions):
    out = {}
    for tp in topic_partitions:
        if tp.partitions:
            out.setdefault(name_of(h, tp.topic_id), []).extend(tp.partitions)
    return {k: sorted(v) for k, v in out.items()}


def group(h, gid="g"):
    return h.shard.groups[gid]


def units_dict(h, g, units):
    out = {}
    for tid, p in g.external(units):
        out.setdefault(name_of(h, tid), []).append(p)
    return out


def state(h, mid, gid="g"):
    """(epoch, previous epoch, state, assigned, pending) of a member's current assignment."""
    g = group(h, gid)
    a = g.members[mid].a
    return (a.epoch, a.previous_epoch, a.state, units_dict(h, g, a.assigned),
            units_dict(h, g, a.pending_revocation))


def target(h, mid, gid="g"):
    g = group(h, gid)
    return units_dict(h, g, g.targets.get(mid, ()))


def epochs(h, gid="g"):
    g = group(h, gid)
    return g.epoch, g.target_epoch


def recs(h):
    """The durable records of the last step: (type, member id, "T" for a tombstone)."""
    out = []
    for r in filter(is_durable, h.results[-1].records):
        name = r.type.name.replace("CONSUMER_GROUP_", "")
        out.append((name, getattr(r.key, "member_id", ""), "T" if r.value is None else ""))
    return out


def timers(h):
    return dict(h.shard.timers.items())


class Client:
    """A well-behaved member: reports what it owns (the last assignment it received)."""

    def __init__(self, h, mid, names=("foo",), gid="g", instance_id=None, version=1, **kw):
        self.h, self.mid, self.gid, self.version = h, mid, gid, version
        self.names, self.instance_id, self.kw = list(names), instance_id, kw
        self.epoch = 0
        self.owned = []                      # request TopicPartitions: what it owns
        self.last = None

    def send(self, **kw):
        kw.setdefault("group_id", self.gid)
        kw.setdefault("member_id", self.mid)
        resp = self.h.send(m.ConsumerGroupHeartbeatRequest(**kw), self.version)
        self.last = resp
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.member_id:
                self.mid = resp.member_id
            if resp.assignment is not None:
                self.owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(
                    topic_id=tp.topic_id, partitions=list(tp.partitions))
                    for tp in resp.assignment.topic_partitions]
        return resp

    def join(self, **kw):
        args = dict(member_epoch=0, rebalance_timeout_ms=REBALANCE_MS,
                    subscribed_topic_names=self.names, topic_partitions=[],
                    instance_id=self.instance_id)
        args.update(self.kw)
        args.update(kw)
        self.owned = []
        return self.send(**args)

    def hb(self, report=True, **kw):
        kw.setdefault("member_epoch", self.epoch)
        if report and "topic_partitions" not in kw:
            kw["topic_partitions"] = self.owned
        return self.send(**kw)

    def leave(self, epoch=-1):
        return self.send(member_epoch=epoch, instance_id=self.instance_id)


def converge(h, clients, rounds=10):
    """Heartbeat every client until the group is Stable; returns the rounds it took."""
    for i in range(rounds):
        for c in clients:
            assert c.hb().error_code == 0
        if group(h).state_name() == "Stable":
            return i + 1
    raise AssertionError("group did not converge: %s" % group(h).state_name())


def make(coord, **cfg):
    # The protocol tests run with assignment batching off (a target per epoch bump), as
    # Kafka's request tests do; batching has its own tests below.
    return coord(config=ShardConfig(**{**NO_BATCH, **cfg}), topics=TOPICS)


NO_BATCH = {"consumer_assignment_interval_ms": 0}


def hb_request(**kw):
    kw.setdefault("group_id", "g")
    kw.setdefault("member_id", "a")
    return m.ConsumerGroupHeartbeatRequest(**kw)


JOIN = dict(member_epoch=0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["foo"],
            topic_partitions=[])


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("version, fields, code, message", [
    (1, dict(JOIN, group_id=""), E.INVALID_REQUEST, "GroupId can't be empty."),
    (1, dict(JOIN, group_id="  "), E.INVALID_REQUEST, "GroupId can't be empty."),
    (1, dict(JOIN, member_id=""), E.INVALID_REQUEST, "MemberId can't be empty."),
    (0, dict(member_epoch=3, member_id=""), E.INVALID_REQUEST, "MemberId can't be empty."),
    (0, dict(member_epoch=-1, member_id=""), E.INVALID_REQUEST, "MemberId can't be empty."),
    (1, dict(member_epoch=-3), E.INVALID_REQUEST, "MemberEpoch is invalid."),
    (1, dict(member_epoch=-2), E.INVALID_REQUEST, "InstanceId can't be null."),
    (1, dict(JOIN, instance_id=""), E.INVALID_REQUEST, "InstanceId can't be empty."),
    (1, dict(JOIN, rack_id=" "), E.INVALID_REQUEST, "RackId can't be empty."),
    (1, dict(JOIN, rebalance_timeout_ms=-1), E.INVALID_REQUEST,
     "RebalanceTimeoutMs must be provided in first request."),
    (1, dict(JOIN, subscribed_topic_names=None), E.INVALID_REQUEST,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (1, dict(JOIN, topic_partitions=[m.ConsumerGroupHeartbeatRequestTopicPartitions(
        topic_id=FOO, partitions=[0])]), E.INVALID_REQUEST,
     "TopicPartitions must be empty when (re-)joining."),
    (1, dict(JOIN, topic_partitions=None), E.INVALID_REQUEST,
     "TopicPartitions must be empty when (re-)joining."),
    (1, dict(JOIN, server_assignor="sticky"), E.UNSUPPORTED_ASSIGNOR,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    (1, dict(JOIN, subscribed_topic_regex="foo("), E.INVALID_REGULAR_EXPRESSION,
     "SubscribedTopicRegex `foo(` is not a valid regular expression"),
])
def test_request_validation(coord, version, fields, code, message):
    h = make(coord)
    resp = h.send(hb_request(**fields), version)
    assert resp.error_code == code
    assert resp.error_message.startswith(message)
    assert h.log == [] and h.shard.groups == {}


def test_empty_regex_means_no_regex_and_empty_names_are_accepted(coord):
    h = make(coord)
    a = Client(h, "a")
    assert a.join(subscribed_topic_regex="").error_code == 0
    assert group(h).members["a"].meta.subscribed_topic_regex is None
    # Kafka accepts a join with an empty list of names: in the group, subscribed to nothing.
    b = Client(h, "b", names=[])
    resp = b.join()
    assert resp.error_code == 0 and resp.assignment.topic_partitions == []
    assert target(h, "b") == {}


def test_v0_coordinator_generates_the_member_id(coord):
    h = make(coord)
    a = Client(h, "", version=0)
    resp = a.join()
    assert resp.error_code == 0 and len(resp.member_id) == 22
    assert a.mid == resp.member_id and a.mid in group(h).members
    assert a.hb().error_code == 0
    # Deterministic: the same inputs give the same id on another shard.
    h2 = make(coord)
    assert Client(h2, "", version=0).join().member_id == resp.member_id


class OtherGroup(Group):
    """A test double of a group of another type (only its TYPE matters here)."""
    TYPE = "classic"

    def __init__(self, gid):
        self.group_id = gid

    def state_name(self):
        return "Stable"

    def protocol_type(self):
        return "other"

    def is_empty(self):
        return False

    def as_described_group(self, catalog):
        return m.DescribeGroupsResponseDescribedGroup(group_id=self.group_id)

    def validate_offset_commit(self, member_id, instance_id, generation_or_epoch, version):
        return E.UNKNOWN_MEMBER_ID

    def snapshot(self, durable):
        return None


def test_group_of_another_type_is_not_found(coord):
    h = make(coord)
    h.shard.groups["g"] = OtherGroup("g")          # test setup: a classic group holds the id
    resp = Client(h, "a").join()
    assert resp.error_code == E.GROUP_ID_NOT_FOUND
    assert resp.error_message == "Group g is not a consumer group."
    d = h.send(m.ConsumerGroupDescribeRequest(group_ids=["g"])).groups[0]
    assert d.error_code == E.GROUP_ID_NOT_FOUND and "not a consumer group" in d.error_message


def test_unknown_group_member_and_epochs(coord):
    h = make(coord)
    resp = h.send(hb_request(member_epoch=3), 1)
    assert resp.error_code == E.GROUP_ID_NOT_FOUND            # Kafka 4: no such group
    assert h.send(hb_request(member_epoch=-1), 1).error_code == E.GROUP_ID_NOT_FOUND
    a = Client(h, "a")
    a.join()
    resp = h.send(hb_request(member_id="zz", member_epoch=1), 1)
    assert resp.error_code == E.UNKNOWN_MEMBER_ID and "zz" in resp.error_message
    assert h.send(hb_request(member_id="zz", member_epoch=-1), 1).error_code == \
        E.UNKNOWN_MEMBER_ID
    resp = a.hb(member_epoch=7)
    assert resp.error_code == E.FENCED_MEMBER_EPOCH and "greater" in resp.error_message
    assert h.results[-1].records == ()
    assert a.hb(member_epoch=1).error_code == 0


def test_group_max_size(coord):
    h = make(coord, consumer_max_size=1)
    a, b = Client(h, "a"), Client(h, "b")
    a.join()
    resp = b.join()
    assert resp.error_code == E.GROUP_MAX_SIZE_REACHED
    assert "maximum capacity of 1" in resp.error_message
    assert a.hb().error_code == 0                          # members already in carry on


# ---------------------------------------------------------------------- join / leave
def test_join_leave_rejoin_records_and_epochs(coord):
    h = make(coord)
    a = Client(h, "a")
    resp = a.join()
    assert (resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms) == ("a", 1, 5000)
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2, 3, 4, 5]}
    assert recs(h) == [("MEMBER_METADATA", "a", ""), ("PARTITION_METADATA", "", ""),
                       ("METADATA", "", ""), ("TARGET_ASSIGNMENT_MEMBER", "a", ""),
                       ("TARGET_ASSIGNMENT_METADATA", "", ""),
                       ("CURRENT_MEMBER_ASSIGNMENT", "a", "")]
    assert epochs(h) == (1, 1)
    assert state(h, "a") == (1, 0, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})
    assert timers(h) == {TimerKey("consumer-session", "g", "a"): 45_000}

    resp = a.leave()
    assert (resp.error_code, resp.member_id, resp.member_epoch) == (0, "a", -1)
    assert recs(h) == [("CURRENT_MEMBER_ASSIGNMENT", "a", "T"),
                       ("TARGET_ASSIGNMENT_MEMBER", "a", "T"), ("MEMBER_METADATA", "a", "T"),
                       ("PARTITION_METADATA", "", ""), ("METADATA", "", "")]
    assert epochs(h) == (2, 1)
    assert group(h).state_name() == "Empty" and timers(h) == {}

    resp = a.join()                                      # the same id rejoins as a new member
    assert resp.member_epoch == 3 and epochs(h) == (3, 3)
    assert state(h, "a") == (3, 0, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})


def test_lost_join_response_is_accepted(coord):
    h = make(coord)
    a = Client(h, "a")
    a.join()
    resp = a.join()                 # the response was lost: epoch 0 again, owns nothing
    assert resp.error_code == 0 and resp.member_epoch == 1
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2, 3, 4, 5]}
    assert h.results[-1].records == ()


# ---------------------------------------------------------------------- reconciliation
def two_members(h):
    """a alone owns foo 0-5 at epoch 1; b joins at epoch 2 and waits (UNRELEASED)."""
    a, b = Client(h, "a"), Client(h, "b")
    a.join()
    resp = b.join()
    assert resp.member_epoch == 2 and resp.assignment.topic_partitions == []
    assert recs(h) == [("MEMBER_METADATA", "b", ""), ("METADATA", "", ""),
                       ("TARGET_ASSIGNMENT_MEMBER", "a", ""),
                       ("TARGET_ASSIGNMENT_MEMBER", "b", ""),
                       ("TARGET_ASSIGNMENT_METADATA", "", ""),
                       ("CURRENT_MEMBER_ASSIGNMENT", "b", "")]
    assert epochs(h) == (2, 2)
    assert target(h, "a") == {"foo": [0, 1, 2]} and target(h, "b") == {"foo": [3, 4, 5]}
    assert state(h, "b") == (2, 0, UNRELEASED, {}, {})
    return a, b


def test_stable_to_stable_heartbeat_writes_nothing(coord):
    h = make(coord)
    a = Client(h, "a")
    a.join()
    a.hb()                                   # a reports what it started: confirmed
    res_before = len(h.results)
    resp = a.hb(report=False)
    assert resp.member_epoch == 1 and resp.assignment is None
    assert len(h.results) == res_before + 1 and h.results[-1].records == ()
    assert h.results[-1].timers == ((TimerKey("consumer-session", "g", "a"), 45_000),)
    # The same heartbeat with every field re-sent unchanged (slow path) writes nothing either.
    resp = a.hb(rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["foo"],
                subscribed_topic_regex="")
    assert resp.assignment is None and h.results[-1].records == ()


def test_reconciliation_revoke_then_release(coord):
    h = make(coord)
    a, b = two_members(h)
    # stable -> unrevoked: a must give 3-5 up before moving to epoch 2.
    h.now = 1000
    resp = a.hb()
    assert (resp.member_epoch, as_dict(h, resp.assignment.topic_partitions)) == \
        (1, {"foo": [0, 1, 2]})
    assert state(h, "a") == (1, 1, UNREVOKED, {"foo": [0, 1, 2]}, {"foo": [3, 4, 5]})
    assert recs(h) == [("CURRENT_MEMBER_ASSIGNMENT", "a", "")]
    assert timers(h)[TimerKey("consumer-revocation", "g", "a")] == 1000 + REBALANCE_MS

    # unrevoked -> unrevoked: still owning the revoked partitions, or not saying.
    resp = h.send(hb_request(member_id="a", member_epoch=1,
                             topic_partitions=tps(h, {"foo": [0, 1, 2, 3, 4, 5]})), 1)
    assert resp.member_epoch == 1 and h.results[-1].records == ()
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2]}
    resp = a.hb(report=False)
    # Not saying what it owns: no record; the pending revocation is repeated anyway (its
    # first answer may have gone to a late request copy: tests/simulation found it).
    assert h.results[-1].records == ()
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2]}
    assert state(h, "a")[2] == UNREVOKED

    # unreleased -> unreleased: 3-5 are still pending revocation at a.
    resp = b.hb()
    assert resp.member_epoch == 2 and resp.assignment is None
    assert h.results[-1].records == () and state(h, "b") == (2, 0, UNRELEASED, {}, {})

    # unrevoked -> stable: a reports 0-2 only.
    resp = a.hb()
    assert resp.member_epoch == 2 and resp.assignment is None
    assert state(h, "a") == (2, 1, STABLE, {"foo": [0, 1, 2]}, {})
    assert h.results[-1].timers[0] == (TimerKey("consumer-revocation", "g", "a"), None)
    assert TimerKey("consumer-revocation", "g", "a") not in timers(h)

    # unreleased -> stable: b now gets 3-5.
    resp = b.hb()
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [3, 4, 5]}
    assert state(h, "b") == (2, 0, STABLE, {"foo": [3, 4, 5]}, {})
    assert group(h).state_name() == "Stable" and epochs(h) == (2, 2)


def test_stable_to_unreleased(coord):
    h = make(coord)
    a, b = two_members(h)
    converge(h, [a, b])
    # a switches to bar: it must revoke foo 0-2, which the target now gives to b.
    resp = a.hb(subscribed_topic_names=["bar"])
    assert epochs(h) == (3, 3)
    assert target(h, "a") == {"bar": [0, 1, 2]} and target(h, "b") == {"foo": [0, 1, 2, 3, 4, 5]}
    assert resp.member_epoch == 2 and state(h, "a")[2] == UNREVOKED
    resp = b.hb()
    assert resp.member_epoch == 3 and resp.assignment is None
    assert state(h, "b") == (3, 2, UNRELEASED, {"foo": [3, 4, 5]}, {})
    a.hb()                                   # revoked foo: a moves to bar at epoch 3
    assert state(h, "a") == (3, 2, STABLE, {"bar": [0, 1, 2]}, {})
    b.hb()
    assert state(h, "b") == (3, 2, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})


def test_target_moves_while_unrevoked_and_unreleased(coord):
    h = make(coord)
    a, b = two_members(h)
    a.hb()                                   # a: UNREVOKED at 1 (pending 3-5)
    c = Client(h, "c")
    c.join()                                 # target moves to epoch 3
    assert epochs(h) == (3, 3)
    assert (target(h, "a"), target(h, "b"), target(h, "c")) == \
        ({"foo": [0, 1]}, {"foo": [3, 4]}, {"foo": [2, 5]})
    assert state(h, "c") == (3, 0, UNRELEASED, {}, {})
    # a still owns 3-5: it keeps revoking the same partitions, epoch 1.
    resp = h.send(hb_request(member_id="a", member_epoch=1,
                             topic_partitions=tps(h, {"foo": [0, 1, 2, 3, 4, 5]})), 1)
    assert resp.member_epoch == 1 and h.results[-1].records == ()
    # b, unreleased at epoch 2, now reconciles towards epoch 3 (nothing to revoke).
    resp = b.hb()
    assert resp.member_epoch == 3 and state(h, "b") == (3, 2, UNRELEASED, {}, {})
    # a revokes 3-5, and must now also revoke 2 (moved to c): unrevoked again, at the next
    # epoch (Kafka's rule: a revocation acknowledged moves the member to epoch + 1).
    resp = a.hb()
    assert state(h, "a") == (2, 1, UNREVOKED, {"foo": [0, 1]}, {"foo": [2]})
    assert resp.member_epoch == 2
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1]}
    resp = a.hb()
    assert state(h, "a") == (3, 2, STABLE, {"foo": [0, 1]}, {})   # straight to epoch 3
    converge(h, [a, b, c])
    assert state(h, "b")[3] == {"foo": [3, 4]} and state(h, "c")[3] == {"foo": [2, 5]}


def test_a_late_commit_from_before_a_revocation_is_refused(coord):
    """Finding 11 (tests/simulation, liveness seed 1006657): a member acknowledges a
    revocation while the target has moved on and it must now revoke more. It released the
    first partitions, which go to another member at once; a commit it sent while it still
    owned them (a late copy of a request whose connection broke) must not overwrite the new
    owner's offsets. Kafka's CurrentAssignmentBuilder moves the member to the next epoch when
    it acknowledges, so that commit carries a stale epoch."""
    h = make(coord)
    a, b = two_members(h)
    a.hb()                                   # a: UNREVOKED at 1 (pending 3-5)
    Client(h, "c").join()                    # target 3: a [0, 1], b [3, 4], c [2, 5]
    b.hb()
    # a's commit at epoch 1, sent while it ran 3-5; its connection breaks, the copy is late.
    late = commit_request(a.mid, 1, {3: 100, 4: 100})
    resp = a.hb()                            # a revoked 3-5; it must now revoke 2 as well
    assert state(h, "a") == (2, 1, UNREVOKED, {"foo": [0, 1]}, {"foo": [2]})
    assert resp.member_epoch == 2
    resp = b.hb()
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [3, 4]}
    b.hb()
    assert commit_codes(h.send(commit_request(b.mid, 3, {3: 50, 4: 50}), 9)) == [0, 0]
    assert commit_codes(h.send(late, 9)) == [E.STALE_MEMBER_EPOCH] * 2
    assert {p: v.offset for (t, p), v in h.shard.offsets["g"].items()} == {3: 50, 4: 50}
    # a's live commits carry the epoch it was told.
    assert commit_codes(h.send(commit_request(a.mid, 2, {0: 7, 2: 7}), 9)) == [0, 0]


def commit_request(mid, epoch, offsets):
    return m.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=epoch, member_id=mid,
        topics=[m.OffsetCommitRequestTopic(name="foo", partitions=[
            m.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
            for p, o in sorted(offsets.items())])])


def commit_codes(resp):
    return [p.error_code for t in resp.topics for p in t.partitions]


def test_lost_heartbeat_response_previous_epoch(coord):
    h = make(coord)
    a, b = two_members(h)
    a.hb()
    resp = a.hb()                            # a revoked 3-5: epoch 2 ... response lost
    assert resp.member_epoch == 2
    # a resends with epoch 1, owning a subset of its assignment: accepted, told epoch 2.
    resp = h.send(hb_request(member_id="a", member_epoch=1,
                             topic_partitions=tps(h, {"foo": [0, 1, 2]})), 1)
    assert resp.error_code == 0 and resp.member_epoch == 2
    # previous epoch with partitions outside the assignment, or not said: fenced.
    resp = h.send(hb_request(member_id="a", member_epoch=1,
                             topic_partitions=tps(h, {"foo": [0, 1, 2, 3]})), 1)
    assert resp.error_code == E.FENCED_MEMBER_EPOCH
    resp = h.send(hb_request(member_id="a", member_epoch=1), 1)
    assert resp.error_code == E.FENCED_MEMBER_EPOCH and "smaller" in resp.error_message
    # a stale epoch older than the previous one: fenced.
    b.hb()
    resp = h.send(hb_request(member_id="b", member_epoch=1,
                             topic_partitions=tps(h, {})), 1)
    assert resp.error_code == E.FENCED_MEMBER_EPOCH and h.results[-1].records == ()


@pytest.mark.parametrize("late", ["join", "heartbeat"])
def test_assignment_is_repeated_until_the_member_confirms_it(coord, late):
    """Finding 10 (tests/simulation), the liveness half: the first copy of a request the
    member retried arrives after the retry was answered and after the partitions it waits
    for were released; it is answered with them, and the answer is lost. The member saw its
    retry answered, so its next heartbeats omit their owned set: the assignment must be
    repeated until the member reports exactly it as owned, or it never runs them."""
    h = make(coord)
    a, b = two_members(h)
    a.hb()                                   # a must revoke 3-5 (UNREVOKED at epoch 1)
    if late == "heartbeat":
        b.hb()                               # b heard epoch 2; its next heartbeat goes late
    # b's retry (a full request after the broken connection) is answered first: a still
    # holds 3-5, nothing for b yet.
    retry = dict(JOIN) if late == "join" else dict(member_epoch=2, topic_partitions=[])
    resp = h.send(hb_request(member_id="b", **retry), 1)
    assert resp.member_epoch == 2
    if late == "join":
        assert resp.assignment.topic_partitions == []
    else:
        assert resp.assignment is None         # it owns what it is assigned: nothing
    assert state(h, "b") == (2, 0, UNRELEASED, {}, {})
    a.hb()                                   # a acknowledges: 3-5 are free
    copy = dict(JOIN) if late == "join" else dict(member_epoch=2)
    lost = h.send(hb_request(member_id="b", **copy), 1)    # the late first copy: lost
    assert as_dict(h, lost.assignment.topic_partitions) == {"foo": [3, 4, 5]}
    assert state(h, "b") == (2, 0, STABLE, {"foo": [3, 4, 5]}, {})
    # b's next heartbeats carry no owned set (nothing changed for it): it is still told.
    for _ in range(2):
        resp = b.hb(report=False)
        assert (resp.error_code, resp.member_epoch) == (0, 2)
        assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [3, 4, 5]}
        assert not recs(h)
    # b starts them and reports them: confirmed, no longer repeated (the steady path again).
    resp = b.hb()
    assert resp.assignment is None and not recs(h)
    resp = b.hb(report=False)
    assert resp.assignment is None and h.results[-1].records == ()
    assert group(h).state_name() == "Stable"


def test_revocation_of_partitions_never_heard_of_is_acknowledged_by_an_owned_set(coord):
    """Finding 10 (tests/simulation, liveness seed 502916), the safety half: the answer to a
    late copy of a's heartbeat moved it to a new epoch with partitions it never heard of; a's
    retry (at the previous epoch, reporting what it owns) is accepted and the target now
    revokes those partitions. a owns exactly what it is told, so a Kafka-rule member would
    send no owned set and be fenced by the revocation timeout while still running the rest:
    as Kafka's coordinator, a heartbeat without owned partitions acknowledges nothing, and the
    SDK's member therefore reports its owned set after every answer with an assignment."""
    h = make(coord, consumer_session_timeout_ms=10_000_000)
    a, b = two_members(h)
    converge(h, [a, b])
    b.leave()                                # target (next heartbeat): all of foo to a
    lost = h.send(hb_request(member_id="a", member_epoch=2), 1)     # a late copy: lost
    assert lost.member_epoch == 3
    assert state(h, "a") == (3, 2, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})
    c = Client(h, "c")
    c.join()
    assert epochs(h) == (4, 4) and target(h, "a") == {"foo": [0, 1, 2]}
    # a's retry at epoch 2 with what it owns: the previous epoch, owned within the
    # assignment: accepted; 3-5, which a never heard of, are to be revoked.
    h.now = 1000
    resp = h.send(hb_request(member_id="a", member_epoch=2, rebalance_timeout_ms=REBALANCE_MS,
                             subscribed_topic_names=["foo"],
                             topic_partitions=tps(h, {"foo": [0, 1, 2]})), 1)
    assert resp.member_epoch == 3
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2]}
    assert state(h, "a") == (3, 3, UNREVOKED, {"foo": [0, 1, 2]}, {"foo": [3, 4, 5]})
    revocation = TimerKey("consumer-revocation", "g", "a")
    assert timers(h)[revocation] == 1000 + REBALANCE_MS
    # No owned set: nothing acknowledged (Kafka's rule); the assignment is repeated.
    resp = h.send(hb_request(member_id="a", member_epoch=3), 1)
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2]}
    assert state(h, "a")[2] == UNREVOKED and not recs(h)
    assert c.hb().member_epoch == 4 and state(h, "c")[2] == UNRELEASED
    # a reports what it owns (the SDK does after an answer with an assignment): acknowledged.
    resp = h.send(hb_request(member_id="a", member_epoch=3,
                             topic_partitions=tps(h, {"foo": [0, 1, 2]})), 1)
    assert (resp.member_epoch, resp.assignment) == (4, None)
    assert state(h, "a") == (4, 3, STABLE, {"foo": [0, 1, 2]}, {})
    assert revocation not in timers(h)
    resp = c.hb()
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [3, 4, 5]}


def test_three_members_one_to_three_and_back(coord):
    h = make(coord, consumer_session_timeout_ms=10_000_000)
    a, b, c = Client(h, "a"), Client(h, "b"), Client(h, "c")
    a.join()
    assert state(h, "a")[3] == {"foo": [0, 1, 2, 3, 4, 5]} and epochs(h) == (1, 1)
    b.join()
    assert epochs(h) == (2, 2)
    converge(h, [a, b])
    assert (state(h, "a")[3], state(h, "b")[3]) == ({"foo": [0, 1, 2]}, {"foo": [3, 4, 5]})
    c.join()
    assert epochs(h) == (3, 3)
    converge(h, [a, b, c])
    assert [state(h, x)[:4] for x in "abc"] == [
        (3, 2, STABLE, {"foo": [0, 1]}), (3, 2, STABLE, {"foo": [3, 4]}),
        (3, 0, STABLE, {"foo": [2, 5]})]
    b.leave()
    assert epochs(h) == (4, 3) and group(h).state_name() == "Assigning"
    converge(h, [a, c])
    assert epochs(h) == (4, 4)
    assert state(h, "a")[3] == {"foo": [0, 1, 3]} and state(h, "c")[3] == {"foo": [2, 4, 5]}
    c.leave()
    converge(h, [a])
    assert epochs(h) == (5, 5) and state(h, "a")[3] == {"foo": [0, 1, 2, 3, 4, 5]}


# ---------------------------------------------------------------------- timers
def test_revocation_timeout_fences_the_member(coord):
    h = make(coord, consumer_session_timeout_ms=10_000_000)
    a, b = two_members(h)
    a.hb()                                   # UNREVOKED, deadline now + 30 s
    h.advance(REBALANCE_MS - 1)
    assert "a" in group(h).members
    h.advance(1)
    assert "a" not in group(h).members
    assert recs(h) == [("CURRENT_MEMBER_ASSIGNMENT", "a", "T"),
                       ("TARGET_ASSIGNMENT_MEMBER", "a", "T"), ("MEMBER_METADATA", "a", "T"),
                       ("METADATA", "", "")]
    assert epochs(h) == (3, 2)
    assert a.hb().error_code == E.UNKNOWN_MEMBER_ID
    resp = b.hb()
    assert resp.member_epoch == 3
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2, 3, 4, 5]}


def test_revocation_timer_is_cancelled_when_revoked(coord):
    h = make(coord, consumer_session_timeout_ms=10_000_000)
    a, b = two_members(h)
    a.hb()
    a.hb()                                   # revoked in time
    h.advance(REBALANCE_MS * 2)
    assert "a" in group(h).members and state(h, "a")[2] == STABLE


def test_session_expiry_removes_the_member(coord):
    h = make(coord)
    a, b = two_members(h)
    converge(h, [a, b])
    for _ in range(10):                      # b keeps heartbeating, a goes silent
        h.advance(5000)
        assert b.hb().error_code == 0
    assert "a" not in group(h).members
    assert epochs(h)[0] == 3
    assert state(h, "b") == (3, 2, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})
    # a stale session timer of a removed member does nothing.
    assert h.shard.fire(TimerKey("consumer-session", "g", "a"), h.now).records == ()


# ---------------------------------------------------------------------- static members
def test_static_leave_and_replacement(coord):
    h = make(coord)
    a = Client(h, "a1", instance_id="inst-a")
    b = Client(h, "b")
    a.join()
    b.join()
    converge(h, [a, b])
    before = epochs(h)
    resp = a.leave(epoch=-2)
    assert (resp.error_code, resp.member_id, resp.member_epoch) == (0, "a1", -2)
    assert recs(h) == [("CURRENT_MEMBER_ASSIGNMENT", "a1", "")]
    assert epochs(h) == before and state(h, "a1")[0] == -2
    assert state(h, "a1")[3] == {"foo": [0, 1, 2]}            # kept while away
    assert group(h).state_name() == "Reconciling"
    # The old member id is gone from the client; a new id takes the instance over.
    a2 = Client(h, "a2", instance_id="inst-a")
    resp = a2.join()
    assert resp.error_code == 0 and resp.member_epoch == 2
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2]}
    assert epochs(h) == before                                # no rebalance
    assert "a1" not in group(h).members
    assert state(h, "a2") == (2, 0, STABLE, {"foo": [0, 1, 2]}, {})
    assert recs(h) == [("CURRENT_MEMBER_ASSIGNMENT", "a1", "T"),
                       ("TARGET_ASSIGNMENT_MEMBER", "a1", "T"), ("MEMBER_METADATA", "a1", "T"),
                       ("TARGET_ASSIGNMENT_MEMBER", "a2", ""), ("MEMBER_METADATA", "a2", ""),
                       ("CURRENT_MEMBER_ASSIGNMENT", "a2", "")]
    assert TimerKey("consumer-session", "g", "a1") not in timers(h)
    assert group(h).state_name() == "Stable"


def test_static_unreleased_and_fenced_instance(coord):
    h = make(coord)
    a = Client(h, "a1", instance_id="inst-a")
    a.join()
    resp = Client(h, "a2", instance_id="inst-a").join()
    assert resp.error_code == E.UNRELEASED_INSTANCE_ID and "inst-a" in resp.error_message
    resp = h.send(hb_request(member_id="zz", member_epoch=1, instance_id="inst-a"), 1)
    assert resp.error_code == E.FENCED_INSTANCE_ID
    resp = h.send(hb_request(member_id="a1", member_epoch=-2, instance_id="nope"), 1)
    assert resp.error_code == E.UNKNOWN_MEMBER_ID and "nope" in resp.error_message
    resp = h.send(hb_request(member_id="zz", member_epoch=-2, instance_id="inst-a"), 1)
    assert resp.error_code == E.FENCED_INSTANCE_ID
    assert a.hb(instance_id="inst-a").error_code == 0          # the owner carries on


def test_static_member_away_expires_with_its_session(coord):
    h = make(coord)
    a = Client(h, "a1", instance_id="inst-a")
    b = Client(h, "b")
    a.join()
    b.join()
    converge(h, [a, b])
    a.leave(epoch=-2)
    for _ in range(8):
        h.advance(5000)
        b.hb()
    assert "a1" in group(h).members                          # still within its session
    for _ in range(3):
        h.advance(5000)
        b.hb()
    assert "a1" not in group(h).members and "inst-a" not in group(h).static
    assert state(h, "b")[3] == {"foo": [0, 1, 2, 3, 4, 5]}
    # Once it expired, the instance id joins as a new member (with a rebalance).
    e = epochs(h)[0]
    assert Client(h, "a3", instance_id="inst-a").join().member_epoch == e + 1


def test_static_member_rejoins_with_its_own_id(coord):
    h = make(coord)
    a = Client(h, "a1", instance_id="inst-a")
    a.join()
    a.leave(epoch=-2)
    resp = a.join()
    assert resp.error_code == 0 and resp.member_epoch == 1
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2, 3, 4, 5]}
    assert state(h, "a1") == (1, 0, STABLE, {"foo": [0, 1, 2, 3, 4, 5]}, {})


# ---------------------------------------------------------------------- subscriptions
def test_member_changes_bump_the_epoch(coord):
    h = make(coord)
    a = Client(h, "a")
    a.join()
    a.hb(rack_id="r1")
    assert epochs(h) == (2, 2) and a.epoch == 2
    a.hb(server_assignor="range")
    assert epochs(h) == (3, 3) and group(h).preferred_assignor() == "range"
    # client id / host: metadata record only, no rebalance.
    res = h._pure(lambda: h.shard.handle(hb_request(member_id="a", member_epoch=3), h.now, 1,
                                         client_id="new-client", client_host="10.0.0.1"))
    h._apply(res)
    assert res.response.error_code == 0 and recs(h) == [("MEMBER_METADATA", "a", "")]
    assert epochs(h) == (3, 3)
    meta = group(h).members["a"].meta
    assert (meta.client_id, meta.client_host) == ("new-client", "10.0.0.1")


def test_regex_subscription_and_catalog_changes(coord):
    h = coord(topics=TopicCatalog.of(orders=2, payments=2, misc=1), config=ShardConfig(**NO_BATCH))
    a = Client(h, "a", names=())
    resp = a.join(subscribed_topic_names=None, subscribed_topic_regex="orders|pay.*")
    assert as_dict(h, resp.assignment.topic_partitions) == {"orders": [0, 1],
                                                            "payments": [0, 1]}
    assert sorted(group(h).topic_meta) == ["orders", "payments"] and epochs(h) == (1, 1)
    # More partitions for a subscribed topic: epoch bump.
    h.update_topics(h.shard.topics.with_topics(("orders", 3, topic_id_for("orders"))))
    assert recs(h) == [("PARTITION_METADATA", "", ""), ("METADATA", "", "")]
    assert epochs(h) == (2, 1) and group(h).state_name() == "Assigning"
    # An unrelated topic: nothing.
    h.update_topics(h.shard.topics.with_topics(("other", 4)))
    assert h.results[-1].records == () and epochs(h) == (2, 1)
    # A new topic matching the regex: another bump.
    h.update_topics(h.shard.topics.with_topics(("payments-eu", 1)))
    assert epochs(h) == (3, 1)
    resp = a.hb()
    assert resp.member_epoch == 3
    assert as_dict(h, resp.assignment.topic_partitions) == {
        "orders": [0, 1, 2], "payments": [0, 1], "payments-eu": [0]}
    # A topic deleted from the catalog: bump, and its partitions leave the target.
    h.update_topics(TopicCatalog([t for t in h.shard.topics if t.name != "payments"]))
    assert epochs(h) == (4, 3)
    a.hb()
    assert target(h, "a") == {"orders": [0, 1, 2], "payments-eu": [0]}
    # Switching from the regex to names.
    a.hb(subscribed_topic_regex="", subscribed_topic_names=["misc"])
    assert group(h).members["a"].meta.subscribed_topic_regex is None
    assert target(h, "a") == {"misc": [0]} and sorted(group(h).topic_meta) == ["misc"]
    converge(h, [a])


def test_range_vs_uniform(coord):
    topics = TopicCatalog.of(t1=3, t2=3)
    got = {}
    for name in ("range", "uniform"):
        h = coord(topics=topics, config=ShardConfig(**NO_BATCH))
        a, b = Client(h, "a", names=["t1", "t2"]), Client(h, "b", names=["t1", "t2"])
        a.join(server_assignor=name)
        b.join(server_assignor=name)
        converge(h, [a, b])
        assert group(h).preferred_assignor() == name
        got[name] = (state(h, "a")[3], state(h, "b")[3])
    # range: per topic, contiguous ranges, the first member one extra (co-partitioned).
    assert got["range"] == ({"t1": [0, 1], "t2": [0, 1]}, {"t1": [2], "t2": [2]})
    # uniform: 3 and 3.
    assert [sum(len(v) for v in x.values()) for x in got["uniform"]] == [3, 3]


def test_assignor_choice_most_common_else_default(coord):
    h = coord(config=ShardConfig(consumer_assignors=("range", "uniform"), **NO_BATCH),
              topics=TOPICS)
    a, b, c = Client(h, "a"), Client(h, "b"), Client(h, "c")
    a.join()
    assert group(h).preferred_assignor() == "range"          # default: the first configured
    b.join(server_assignor="uniform")
    assert group(h).preferred_assignor() == "uniform"
    c.join(server_assignor="range")
    assert group(h).preferred_assignor() == "range"          # 1-1 tie: smallest name


# ---------------------------------------------------------------------- describe
def test_consumer_group_describe(coord):
    h = make(coord, consumer_session_timeout_ms=10_000_000)
    d = h.send(m.ConsumerGroupDescribeRequest(group_ids=["nope"])).groups[0]
    assert (d.error_code, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")
    a, b = Client(h, "a", instance_id="i-a", rack_id="r1"), Client(h, "b")
    a.join()
    b.join()

    def describe():
        return h.send(m.ConsumerGroupDescribeRequest(group_ids=["g"]), 1).groups[0]

    d = describe()
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) \
        == (0, "Reconciling", 2, 2, "uniform")
    ma, mb = d.members
    assert (ma.member_id, ma.instance_id, ma.rack_id, ma.member_epoch, ma.member_type) == \
        ("a", "i-a", "r1", 1, 1)
    assert ma.subscribed_topic_names == ["foo"] and ma.subscribed_topic_regex is None
    tp = ma.assignment.topic_partitions[0]
    assert (tp.topic_id, tp.topic_name, tp.partitions) == (FOO, "foo", [0, 1, 2, 3, 4, 5])
    assert ma.target_assignment.topic_partitions[0].partitions == [0, 1, 2]
    assert mb.assignment.topic_partitions == []
    converge(h, [a, b])
    assert describe().group_state == "Stable"
    b.leave()
    assert describe().group_state == "Assigning"
    a.leave()
    assert describe().group_state == "Empty"
    # Classic DescribeGroups / ListGroups see it as a consumer group (members described in
    # ConsumerProtocol terms: tests/test_coord_admin.py).
    dg = h.send(m.DescribeGroupsRequest(groups=["g"])).groups[0]
    assert (dg.error_code, dg.error_message, dg.group_state, dg.protocol_type,
            dg.protocol_data, dg.members) == (0, None, "Empty", "consumer", "uniform", [])
    lg = h.send(m.ListGroupsRequest()).groups
    assert [(x.group_id, x.group_type, x.protocol_type, x.group_state) for x in lg] == \
        [("g", "consumer", "consumer", "Empty")]


# ---------------------------------------------------------------------- offsets
def test_offset_validation(coord):
    h = make(coord)
    a = Client(h, "a")
    a.join()
    g = group(h)
    assert g.validate_offset_commit("a", None, 1, 9) == 0
    assert g.validate_offset_commit("a", None, 0, 9) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("zz", None, 1, 9) == E.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("a", None, 1, 8) == E.UNSUPPORTED_VERSION
    assert g.validate_offset_commit("", None, -1, 9) == E.UNKNOWN_MEMBER_ID  # group not empty
    assert g.validate_offset_fetch("a", 1) == 0
    assert g.validate_offset_fetch("a", 2) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_fetch("zz", 1) == E.UNKNOWN_MEMBER_ID
    assert g.validate_offset_fetch(None, -1) == 0
    a.leave()
    assert g.validate_offset_commit("", None, -1, 2) == 0                  # empty group


# ---------------------------------------------------------------------- recovery
def test_recovery_replays_and_rearms_then_continues(coord):
    h = make(coord)
    a, b = two_members(h)
    h.now = 2000
    a.hb()                                   # a UNREVOKED, b UNRELEASED
    fresh = h.replayed()
    assert fresh.snapshot() == h.shard.snapshot()
    fresh.rearm(5000)
    assert dict(fresh.timers.items()) == {
        TimerKey("consumer-session", "g", "a"): 50_000,
        TimerKey("consumer-session", "g", "b"): 50_000,
        TimerKey("consumer-revocation", "g", "a"): 35_000,
        TimerKey("offsets-retention", ""): 5000 + 600_000}      # the shard's retention check
    # Continue on the recovered shard.
    h2 = coord(topics=TOPICS, now=5000, config=ShardConfig(**NO_BATCH))
    h2.shard, h2.log = fresh, list(h.log)
    a.h = b.h = h2
    assert a.hb().member_epoch == 2
    assert b.hb().member_epoch == 2
    assert state(h2, "b") == (2, 0, STABLE, {"foo": [3, 4, 5]}, {})
    assert group(h2).state_name() == "Stable"


# ---------------------------------------------------------------------- random walk
def test_random_membership_walk_converges(coord):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    h = coord(topics=TopicCatalog.of(foo=7, bar=5, baz=3),
              config=ShardConfig(consumer_session_timeout_ms=10**9, **NO_BATCH))
    clients = {}
    for step in range(60):
        op = rnd.random()
        if op < 0.25 or not clients:
            mid = "m%d" % step
            c = Client(h, mid, names=rnd.sample(["foo", "bar", "baz"], rnd.randint(1, 3)))
            assert c.join().error_code == 0
            clients[mid] = c
        elif op < 0.35 and len(clients) > 1:
            c = clients.pop(rnd.choice(sorted(clients)))
            assert c.leave().error_code == 0
        else:
            c = clients[rnd.choice(sorted(clients))]
            assert c.hb(report=rnd.random() < 0.8).error_code == 0
    converge(h, list(clients.values()), rounds=20)
    g = group(h)
    # Stable: everyone holds exactly its target; every subscribed partition is assigned.
    held = set()
    for mid in clients:
        assert g.members[mid].a.assigned == g.targets[mid]
        held |= g.targets[mid]
    subscribed = {n for c in clients.values() for n in c.names}
    assert len(held) == sum(h.shard.topics.get(n).partitions for n in subscribed)


def test_subscription_to_a_missing_topic_then_created(coord):
    h = make(coord)
    a = Client(h, "a", names=["later"])
    resp = a.join()
    assert resp.member_epoch == 1 and resp.assignment.topic_partitions == []
    assert group(h).topic_meta == {} and recs(h)[1] == ("METADATA", "", "")
    h.update_topics(h.shard.topics.with_topics(("later", 2)))
    assert epochs(h) == (2, 1)
    resp = a.hb()
    assert resp.member_epoch == 2
    assert as_dict(h, resp.assignment.topic_partitions) == {"later": [0, 1]}


def test_fast_path_with_owned_reported(coord):
    h = make(coord)
    a = Client(h, "a")
    a.join()
    resp = a.hb()                            # owns exactly its assignment: confirmed
    assert resp.assignment is None and not recs(h)
    resp = a.hb()                            # again: nothing to say, the fast path
    assert resp.assignment is None and h.results[-1].records == ()
    assert len(h.results[-1].timers) == 1
    # A duplicate hiding a missing partition is not "owns exactly": the assignment is resent.
    resp = h.send(hb_request(member_id="a", member_epoch=1, topic_partitions=tps(
        h, {"foo": [0, 0, 1, 2, 3, 4]})), 1)
    assert as_dict(h, resp.assignment.topic_partitions) == {"foo": [0, 1, 2, 3, 4, 5]}
    resp = h.send(hb_request(member_id="a", member_epoch=1, topic_partitions=tps(
        h, {"foo": [0, 1, 2, 3, 4, 5], "bar": [0]})), 1)
    assert resp.assignment is not None and h.results[-1].records == ()


# ---------------------------------------------------------------------- assignment batching
BATCH_MS = 1_000


def test_batching_join_storm_shares_one_assignment_run(coord):
    """KIP-1263: bumps within the assignment interval leave the target behind; the group's
    assignment timer computes it once, for all of them, when the interval ends."""
    h = coord(config=ShardConfig(consumer_assignment_interval_ms=BATCH_MS), topics=TOPICS)
    a = Client(h, "a")
    assert a.join().member_epoch == 1                 # the first run is not delayed
    key = TimerKey("consumer-assignment", "g", "")
    assert timers(h)[key] == BATCH_MS
    h.advance(10)
    b, c = Client(h, "b"), Client(h, "c")
    rb, rc = b.join(), c.join()
    # Joined at the previous target's epoch with nothing assigned; no target record yet.
    assert (rb.member_epoch, rc.member_epoch) == (1, 1)
    assert as_dict(h, rb.assignment.topic_partitions) == {}
    assert epochs(h) == (3, 1) and group(h).state_name() == "Assigning"
    assert "TARGET_ASSIGNMENT_METADATA" not in [r[0] for r in recs(h)]
    assert a.hb().member_epoch == 1                   # a keeps everything meanwhile
    assert state(h, "a")[3] == {"foo": [0, 1, 2, 3, 4, 5]}
    h.advance(BATCH_MS - 10)                          # the timer fires: one run, epoch 3
    assert epochs(h) == (3, 3)
    kinds = [r[0] for r in recs(h)]
    assert kinds.count("TARGET_ASSIGNMENT_METADATA") == 1
    assert sorted(len(target(h, x)["foo"]) for x in "abc") == [2, 2, 2]
    assert timers(h)[key] == 2 * BATCH_MS             # the next interval runs from here
    converge(h, [a, b, c])
    assert sorted(len(state(h, x)[3]["foo"]) for x in "abc") == [2, 2, 2]
    assert {state(h, x)[0] for x in "abc"} == {3}
    h.check_replay()


def test_batching_heartbeat_after_the_interval_computes_at_once(coord):
    h = coord(config=ShardConfig(consumer_assignment_interval_ms=BATCH_MS), topics=TOPICS)
    a = Client(h, "a")
    a.join()
    h.shard.timers.apply([(TimerKey("consumer-assignment", "g", ""), None)])  # as after a restart
    h.advance(5)
    assert Client(h, "b").join().member_epoch == 2    # no pending interval: computed inline
    assert epochs(h) == (2, 2)


def test_batching_timer_is_a_no_op_when_nothing_is_behind(coord):
    h = coord(config=ShardConfig(consumer_assignment_interval_ms=BATCH_MS), topics=TOPICS)
    a = Client(h, "a")
    a.join()
    n = len(h.results)
    h.advance(BATCH_MS)                               # fires with the target up to date
    assert epochs(h) == (1, 1)
    assert all(not r.records for r in h.results[n:])
    assert a.leave().error_code == 0
    h.advance(2 * BATCH_MS)
    assert not group(h).members
