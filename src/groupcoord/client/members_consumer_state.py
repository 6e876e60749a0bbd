"""The KIP-848 consumer member as a pure state machine (no sockets, no clocks, no tasks):
give it responses, it says which request to send next and which callbacks to run.

    sm = ConsumerMemberState("g", topics=["orders"], version=1)
    req = sm.heartbeat_request()               # ConsumerGroupHeartbeatRequest
    out = sm.on_heartbeat_response(req, resp)  # HeartbeatOutcome
    while (rec := sm.next_reconciliation()) is not None:   # revoke first, then assign
        if rec.missing_topic_ids: ...resolve names, sm.add_topic_names({id: name}); continue
        <on_partitions_revoked(rec.revoked)>;  sm.revoke_done(rec)
        <on_partitions_assigned(rec.assigned)>; sm.assign_done(rec)   # -> ack heartbeat now

States (`sm.state`)::

    UNJOINED --heartbeat_request()--> JOINING (epoch 0, every field, owned = [])
    JOINING / STABLE --response OK--> STABLE (epoch and interval from the response; an
              assignment in it becomes the target)
    STABLE --target != owned--> RECONCILING: revoke (owned - target), then assign
              (target - owned); then the next heartbeat goes out at once (ACK) reporting the
              new owned partitions
    any --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> UNJOINED: every owned partition is
              lost (`outcome.lost`), epoch 0, same member id (v1) or none (v0)
    any --leave_request(temporary)--> LEAVING (epoch -1, or -2 for a static member that
              comes back) --response--> LEFT
    any --a non-retriable error--> FATAL (`outcome.fatal` holds the ResponseError)

Fields are sent only when they changed since the last heartbeat the coordinator accepted;
after a join, an error or a lost response, the next heartbeat carries all of them (Kafka's
rule, so a coordinator that lost state relearns it). The instance id is always sent. The
owned partitions are also sent after every answer that carried an assignment, even one equal
to what the member owns: the coordinator repeats an assignment until an owned set confirms it,
and only an owned set acknowledges a revocation (docs/simulation.md, finding 10).

Offsets: `commit_request` / `fetch_request` carry the member id and epoch; a
STALE_MEMBER_EPOCH answer means "retry once the next heartbeat brought the current epoch"
(`commit_errors` classifies a response).
"""
from __future__ import annotations

import base64
import os
from typing import Iterable, Mapping, NamedTuple, Optional

from groupcoord.client.errors import ResponseError
from groupcoord.client.members_common import (COORDINATOR_ERRORS, TopicPartition,
                                              offset_commit_request)
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ConsumerMemberState", "HeartbeatOutcome", "Reconciliation", "new_member_id",
           "UNJOINED", "JOINING", "STABLE", "RECONCILING", "LEAVING", "LEFT", "FATAL",
           "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "OffsetSpec"]

UNJOINED, JOINING, STABLE, RECONCILING, LEAVING, LEFT, FATAL = (
    "UNJOINED", "JOINING", "STABLE", "RECONCILING", "LEAVING", "LEFT", "FATAL")
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000   # Kafka's max.poll.interval.ms default

_FENCED = (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)

Unit = tuple   # (topic_id: bytes, partition: int), the wire's identity of a partition
OffsetSpec = object  # int offset, or (offset, metadata)


def new_member_id() -> str:
    """A client-generated member id (ConsumerGroupHeartbeat v1): a random UUID in Kafka's
    string form (22 characters of URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


class HeartbeatOutcome(NamedTuple):
    """What a heartbeat response means for the driver."""
    ok: bool = False                       # accepted; epoch/interval updated
    lost: tuple = ()                       # partitions to report lost (fenced), sorted
    rejoin: bool = False                   # fenced: heartbeat again at once with epoch 0
    find_coordinator: bool = False         # coordinator moved/unavailable: find it, retry
    left: bool = False                     # the leave heartbeat was answered
    fatal: Optional[ResponseError] = None  # stop: the member cannot continue


class Reconciliation(NamedTuple):
    """One step towards the target: `revoked` first, then `assigned` (TopicPartition lists,
    sorted). `missing_topic_ids`: topic ids to resolve to names before it can run."""
    target: frozenset
    revoked: list
    assigned: list
    revoked_units: frozenset
    assigned_units: frozenset
    missing_topic_ids: frozenset = frozenset()


def _units(topic_partitions) -> frozenset:
    return frozenset((tp.topic_id, p) for tp in topic_partitions for p in tp.partitions)


def _wire(units: Iterable[Unit]) -> list:
    by_topic: dict = {}
    for tid, p in units:
        by_topic.setdefault(tid, []).append(p)
    return [m.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(by_topic.items())]


class ConsumerMemberState:
    """One KIP-848 member. `version` is the negotiated ConsumerGroupHeartbeat version: v1+
    members generate their id, v0 members get it from the coordinator."""

    def __init__(self, group_id: str, *, topics: Optional[Iterable[str]] = None,
                 regex: Optional[str] = None, version: int = 1,
                 member_id: Optional[str] = None, instance_id: Optional[str] = None,
                 rack_id: Optional[str] = None, server_assignor: Optional[str] = None,
                 rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS):
        if topics is None and regex is None:
            raise ValueError("subscribe to topic names, a regex, or both")
        self.group_id = group_id
        self.topics = sorted(set(topics or ()))
        self.regex = regex
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.version = version
        self.member_id = member_id if member_id is not None else (
            new_member_id() if version >= 1 else "")
        self.epoch = 0
        self.state = UNJOINED
        self.heartbeat_interval_ms = 0        # 0 until the coordinator said
        self.owned: frozenset = frozenset()   # units whose assigned-callback ran, not revoked
        self.target: Optional[frozenset] = None   # the latest assignment received
        self.topic_names: dict = {}           # topic id -> name
        self.ack_pending = False              # owned changed: heartbeat now, not at interval
        self.fatal: Optional[ResponseError] = None
        self._sent: Optional[dict] = None     # fields the coordinator has (None: send all)
        self._in_flight: Optional[dict] = None

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Optional[Iterable[str]] = None,
                  regex: Optional[str] = None) -> None:
        """Change the subscription; the next heartbeat carries it."""
        if topics is None and regex is None:
            raise ValueError("subscribe to topic names, a regex, or both")
        self.topics = sorted(set(topics or ()))
        self.regex = regex

    def add_topic_names(self, names: Mapping[bytes, str]) -> None:
        self.topic_names.update(names)

    def name_of(self, unit: Unit) -> TopicPartition:
        return TopicPartition(self.topic_names[unit[0]], unit[1])

    def owned_partitions(self) -> list:
        return sorted(self.name_of(u) for u in self.owned if u[0] in self.topic_names)

    # ------------------------------------------------------------------ heartbeats
    def _fields(self) -> dict:
        return {"rebalance_timeout_ms": self.rebalance_timeout_ms,
                "subscribed_topic_names": self.topics,
                "subscribed_topic_regex": self.regex,
                "server_assignor": self.server_assignor,
                "rack_id": self.rack_id,
                "owned": self.owned}

    def heartbeat_request(self) -> m.ConsumerGroupHeartbeatRequest:
        if self.state in (LEFT, FATAL):
            raise RuntimeError("member is %s" % self.state)
        if self.state == UNJOINED:
            self.state = JOINING
            self.epoch = 0
            self._sent = None
        now = self._fields()
        sent = self._sent or {}
        full = self._sent is None

        def changed(name):
            return full or sent.get(name) != now[name]

        req = m.ConsumerGroupHeartbeatRequest(group_id=self.group_id,
                                              member_id=self.member_id,
                                              member_epoch=self.epoch,
                                              instance_id=self.instance_id)
        if changed("rebalance_timeout_ms"):
            req.rebalance_timeout_ms = self.rebalance_timeout_ms
        if changed("subscribed_topic_names") or changed("subscribed_topic_regex"):
            req.subscribed_topic_names = list(self.topics)
            if self.regex is not None:
                req.subscribed_topic_regex = self.regex
            elif not full and sent.get("subscribed_topic_regex"):
                req.subscribed_topic_regex = ""        # "" clears the regex we had sent
        if self.server_assignor is not None and changed("server_assignor"):
            req.server_assignor = self.server_assignor
        if self.rack_id is not None and changed("rack_id"):
            req.rack_id = self.rack_id
        if changed("owned"):
            # A join reports nothing owned (the coordinator requires an empty list).
            req.topic_partitions = [] if self.epoch == 0 else _wire(self.owned)
        self._in_flight = now
        self.ack_pending = False
        return req

    def leave_request(self, temporary: bool = False) -> m.ConsumerGroupHeartbeatRequest:
        """epoch -1 (leave), or -2 for a static member leaving for a while (it keeps its
        partitions at the coordinator until its session expires or it comes back)."""
        if temporary and self.instance_id is None:
            raise ValueError("only a static member (instance_id) can leave temporarily")
        self.state = LEAVING
        epoch = STATIC_LEAVE_EPOCH if temporary else LEAVE_EPOCH
        return m.ConsumerGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                               member_epoch=epoch, instance_id=self.instance_id)

    # ------------------------------------------------------------------ keep-alives
    def keepalive_ready(self) -> bool:
        """Joined, nothing to reconcile or report, and nothing changed since the heartbeat
        the coordinator last accepted: heartbeat_request() would carry only the member's
        identity (keepalive_request()). A driver of many members may then send one encoding
        of it per member id and epoch and book it with try_keepalive()
        (benchmarks/loadgen.py)."""
        return (self.state == STABLE and self.epoch > 0 and not self.ack_pending
                and self._sent is not None and self._sent == self._fields())

    def keepalive_request(self) -> m.ConsumerGroupHeartbeatRequest:
        """The identity-only heartbeat heartbeat_request() builds when keepalive_ready().
        Books nothing."""
        return m.ConsumerGroupHeartbeatRequest(group_id=self.group_id,
                                               member_id=self.member_id,
                                               member_epoch=self.epoch,
                                               instance_id=self.instance_id)

    def try_keepalive(self) -> bool:
        """If keepalive_ready(), book a keep-alive as sent, as heartbeat_request() would, and
        return True: send keepalive_request() (or an encoding of it made earlier for the same
        member id and epoch) and give its answer to on_heartbeat_response. Else False: the
        next heartbeat has fields to send, use heartbeat_request()."""
        if not self.keepalive_ready():
            return False
        self._in_flight = self._sent
        self.ack_pending = False
        return True

    def heartbeat_lost(self) -> None:
        """The request got no answer (timeout, connection loss): send everything next time."""
        self._sent = None
        self._in_flight = None

    def on_heartbeat_response(self, req: m.ConsumerGroupHeartbeatRequest,
                              resp: m.ConsumerGroupHeartbeatResponse) -> HeartbeatOutcome:
        code = resp.error_code
        leaving = req.member_epoch < 0
        if leaving:
            # Any answer ends a leave: gone, unknown, fenced all mean "not a member".
            if code in COORDINATOR_ERRORS:
                return HeartbeatOutcome(find_coordinator=True)
            self._reset(LEFT)
            return HeartbeatOutcome(left=True)
        if self.state in (LEFT, LEAVING, FATAL):
            return HeartbeatOutcome()          # a late answer to a heartbeat before the leave
        if code == 0:
            if resp.member_id:
                self.member_id = resp.member_id
            self.epoch = resp.member_epoch
            if resp.heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = resp.heartbeat_interval_ms
            self._sent = self._in_flight
            self._in_flight = None
            if resp.assignment is not None:
                self.target = _units(resp.assignment.topic_partitions)
                if self._sent is not None:
                    # Report what we own next time even if it did not change: the coordinator
                    # may believe otherwise (its answer went to a late copy of a request), and
                    # only an owned set confirms an assignment or acknowledges a revocation.
                    self._sent = dict(self._sent, owned=None)
            self.state = RECONCILING if (self.target is not None
                                         and self.target != self.owned) else STABLE
            return HeartbeatOutcome(ok=True)
        self._in_flight = None
        if code in COORDINATOR_ERRORS:
            self._sent = None
            return HeartbeatOutcome(find_coordinator=True)
        if code in _FENCED or (code == ErrorCode.GROUP_ID_NOT_FOUND and req.member_epoch > 0):
            lost = self.owned_partitions()
            self._reset(UNJOINED)
            if self.version < 1:
                self.member_id = ""            # v0: the coordinator hands out a new id
            return HeartbeatOutcome(lost=tuple(lost), rejoin=True)
        self.fatal = ResponseError(code, resp.error_message)
        lost = self.owned_partitions()
        self._reset(FATAL)
        return HeartbeatOutcome(lost=tuple(lost), fatal=self.fatal)

    def _reset(self, state: str) -> None:
        self.state = state
        self.epoch = 0
        self.owned = frozenset()
        self.target = None
        self._sent = None
        self._in_flight = None
        self.ack_pending = False

    # ------------------------------------------------------------------ reconciliation
    def next_reconciliation(self) -> Optional[Reconciliation]:
        """The next step towards the target, or None when owned == target."""
        if self.state not in (STABLE, RECONCILING) or self.target is None \
                or self.target == self.owned:
            return None
        target = self.target
        missing = frozenset(t for t, _ in target | self.owned if t not in self.topic_names)
        revoke = self.owned - target
        add = target - self.owned
        if missing:
            return Reconciliation(target, [], [], revoke, add, missing)
        return Reconciliation(target, sorted(map(self.name_of, revoke)),
                              sorted(map(self.name_of, add)), revoke, add)

    def revoke_done(self, rec: Reconciliation) -> None:
        """on_partitions_revoked returned: these are released."""
        self.owned = self.owned - rec.revoked_units
        self.ack_pending = True

    def assign_done(self, rec: Reconciliation) -> None:
        """on_partitions_assigned returned: these are owned. Heartbeat now (the ack)."""
        self.owned = self.owned | rec.assigned_units
        self.ack_pending = True
        if self.state == RECONCILING and self.target == self.owned:
            self.state = STABLE

    # ------------------------------------------------------------------ offsets
    def commit_request(self, offsets: Mapping[TopicPartition, OffsetSpec]) -> m.OffsetCommitRequest:
        """OffsetCommit (v9: member id + member epoch). offsets: {TopicPartition: offset or
        (offset, metadata)}."""
        return offset_commit_request(self.group_id, self.epoch, self.member_id,
                                     self.instance_id, offsets)

    def fetch_request(self, partitions: Optional[Iterable[TopicPartition]]) -> m.OffsetFetchRequest:
        """OffsetFetch v8+ (one group; v9 names the member and its epoch). None = all."""
        topics = None
        if partitions is not None:
            by_topic: dict = {}
            for tp in sorted(partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [m.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]
        return m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            topics=topics)], require_stable=True)


def commit_errors(resp: m.OffsetCommitResponse) -> dict:
    """{TopicPartition: ErrorCode or int} of the partitions that failed."""
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                out[TopicPartition(t.name, p.partition_index)] = _code(p.error_code)
    return out


def fetch_result(resp: m.OffsetFetchResponse) -> tuple:
    """-> (group error code, {TopicPartition: (offset, metadata)}, {TopicPartition: code});
    offset -1 = nothing committed."""
    if resp.groups:
        g = resp.groups[0]
        err, topics = g.error_code, g.topics
    else:
        err, topics = resp.error_code, resp.topics
    offsets, errors = {}, {}
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code:
                errors[tp] = _code(p.error_code)
            else:
                offsets[tp] = (p.committed_offset, p.metadata)
    return _code(err), offsets, errors


def _code(c: int):
    try:
        return ErrorCode(c)
    except ValueError:
        return c
