"""The classic group member (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a pure state
machine: responses in, the next request and what it means out. What the metadata and
assignment bytes hold is the business of a protocol (members_classic_protocol.py).

    sm = ClassicMemberState("g", session_timeout_ms=10_000, rebalance_timeout_ms=30_000)
    req = sm.join_request("consumer", [("range", metadata)])
    out = sm.on_join_response(resp)      # Outcome(kind=SYNC, leader members...) or REJOIN...
    req = sm.sync_request(assignments)   # the leader's; {} for followers
    out = sm.on_sync_response(resp)      # Outcome(kind=ASSIGNED, assignment=bytes) ...
    req = sm.heartbeat_request()         # every heartbeat interval while STABLE
    out = sm.on_heartbeat_response(resp) # OK / REJOIN / LOST ...

States::

    UNJOINED --join_request--> JOINING
    JOINING  --OK--> SYNCING (generation, protocol, leader; the leader gets the members)
             --MEMBER_ID_REQUIRED--> UNJOINED with the id the coordinator gave (join again now)
             --UNKNOWN_MEMBER_ID--> UNJOINED without an id; --REBALANCE_IN_PROGRESS--> UNJOINED
    SYNCING  --OK--> STABLE (the assignment bytes)
             --REBALANCE_IN_PROGRESS--> UNJOINED (join again; what is owned stays owned)
    STABLE   --heartbeat OK--> STABLE; --REBALANCE_IN_PROGRESS--> UNJOINED
    SYNCING, STABLE --ILLEGAL_GENERATION (keeps the id) / UNKNOWN_MEMBER_ID (drops it)-->
             UNJOINED with kind LOST: everything owned is lost, generation -1
    any      --coordinator errors--> UNJOINED, kind COORDINATOR (find it again, then join)
    any      --FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, GROUP_MAX_SIZE_REACHED,
               INVALID_SESSION_TIMEOUT, ...--> FATAL
    any      --leave_request--> LEFT
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence

from groupcoord.client.errors import ResponseError
from groupcoord.client.members_common import COORDINATOR_ERRORS, offset_commit_request
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ClassicMemberState", "Outcome", "JoinedMember", "UNJOINED", "JOINING", "SYNCING",
           "STABLE", "LEFT", "FATAL", "OK", "REJOIN", "SYNC", "ASSIGNED", "LOST",
           "COORDINATOR", "FATAL_ERROR"]

UNJOINED, JOINING, SYNCING, STABLE, LEFT, FATAL = (
    "UNJOINED", "JOINING", "SYNCING", "STABLE", "LEFT", "FATAL")
# Outcome kinds
OK, REJOIN, SYNC, ASSIGNED, LOST, COORDINATOR, FATAL_ERROR = (
    "OK", "REJOIN", "SYNC", "ASSIGNED", "LOST", "COORDINATOR", "FATAL")


class JoinedMember(NamedTuple):
    """One member as the leader sees it in the JoinGroup response."""
    member_id: str
    instance_id: Optional[str]
    metadata: bytes


class Outcome(NamedTuple):
    kind: str
    members: tuple = ()                  # SYNC, leader only: JoinedMember...
    assignment: bytes = b""              # ASSIGNED
    error: Optional[ResponseError] = None
    code: int = 0


class ClassicMemberState:
    def __init__(self, group_id: str, *, instance_id: Optional[str] = None,
                 session_timeout_ms: int = 45_000, rebalance_timeout_ms: int = 300_000,
                 member_id: str = ""):
        self.group_id = group_id
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = member_id
        self.generation = -1
        self.protocol_type: Optional[str] = None
        self.protocol_name: Optional[str] = None
        self.leader = ""
        self.skip_assignment = False
        self.state = UNJOINED
        self.fatal: Optional[ResponseError] = None

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader == self.member_id

    # ------------------------------------------------------------------ JoinGroup
    def join_request(self, protocol_type: str, protocols: Sequence[tuple],
                     reason: Optional[str] = None) -> m.JoinGroupRequest:
        self._require(UNJOINED)
        self.state = JOINING
        self.protocol_type = protocol_type
        return m.JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.instance_id, protocol_type=protocol_type,
            protocols=[m.JoinGroupRequestProtocol(name=n, metadata=md) for n, md in protocols],
            reason=reason)

    def on_join_response(self, resp: m.JoinGroupResponse) -> Outcome:
        code = resp.error_code
        if self.state != JOINING:
            return Outcome(OK)                      # late answer after a leave: nothing
        if code == 0:
            self.state = SYNCING
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            self.protocol_name = resp.protocol_name
            self.leader = resp.leader
            self.skip_assignment = bool(resp.skip_assignment)
            members = tuple(JoinedMember(x.member_id, x.group_instance_id, bytes(x.metadata))
                            for x in resp.members) if self.is_leader else ()
            return Outcome(SYNC, members=members)
        self.state = UNJOINED
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id            # KIP-394: join again with it
            return Outcome(REJOIN, code=code)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return Outcome(REJOIN, code=code)
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            return Outcome(REJOIN, code=code)
        if code in COORDINATOR_ERRORS:
            return Outcome(COORDINATOR, code=code)
        return self._fatal(code)

    # ------------------------------------------------------------------ offsets
    def commit_request(self, offsets) -> m.OffsetCommitRequest:
        """OffsetCommit with this member's generation and member id (Kafka's classic
        consumer commit): the coordinator refuses it once the generation moved on."""
        return offset_commit_request(self.group_id, self.generation, self.member_id,
                                     self.instance_id, offsets)

    # ------------------------------------------------------------------ SyncGroup
    def sync_request(self, assignments: Mapping[str, bytes]) -> m.SyncGroupRequest:
        self._require(SYNCING)
        return m.SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance_id, protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignments=[m.SyncGroupRequestAssignment(member_id=k, assignment=v)
                         for k, v in sorted(assignments.items())])

    def on_sync_response(self, resp: m.SyncGroupResponse) -> Outcome:
        code = resp.error_code
        if self.state != SYNCING:
            return Outcome(OK)
        if code == 0:
            self.state = STABLE
            return Outcome(ASSIGNED, assignment=bytes(resp.assignment))
        return self._member_error(code)

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat_request(self) -> m.HeartbeatRequest:
        self._require(STABLE)
        return m.HeartbeatRequest(group_id=self.group_id, generation_id=self.generation,
                                  member_id=self.member_id, group_instance_id=self.instance_id)

    def on_heartbeat_response(self, resp: m.HeartbeatResponse) -> Outcome:
        if self.state != STABLE:
            return Outcome(OK)          # answered after we moved on (rejoin / leave)
        if resp.error_code == 0:
            return Outcome(OK)
        return self._member_error(resp.error_code)

    def _member_error(self, code: int) -> Outcome:
        """Sync and Heartbeat errors (Kafka's AbstractCoordinator rules)."""
        self.state = UNJOINED
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return Outcome(REJOIN, code=code)
        if code == ErrorCode.ILLEGAL_GENERATION:
            self.generation = -1                # keep the member id
            return Outcome(LOST, code=code)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.generation = -1
            self.member_id = ""
            return Outcome(LOST, code=code)
        if code in COORDINATOR_ERRORS:
            return Outcome(COORDINATOR, code=code)
        return self._fatal(code)

    def rejoin(self) -> None:
        """The member wants a new rebalance (cooperative follow-up, subscription change)."""
        if self.state in (SYNCING, STABLE):
            self.state = UNJOINED

    def request_lost(self) -> None:
        """A Join/Sync/Heartbeat got no answer: join again (same id, same generation)."""
        if self.state in (JOINING, SYNCING, STABLE):
            self.state = UNJOINED

    # ------------------------------------------------------------------ LeaveGroup
    def leave_request(self, version: int) -> m.LeaveGroupRequest:
        self.state = LEFT
        if version >= 3:
            return m.LeaveGroupRequest(group_id=self.group_id, members=[
                m.LeaveGroupRequestMemberIdentity(member_id=self.member_id,
                                                  group_instance_id=self.instance_id,
                                                  reason="the member is closing")])
        return m.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)

    # ------------------------------------------------------------------ helpers
    def _fatal(self, code: int) -> Outcome:
        self.state = FATAL
        self.fatal = ResponseError(code)
        return Outcome(FATAL_ERROR, error=self.fatal, code=code)

    def _require(self, state: str) -> None:
        if self.state != state:
            raise RuntimeError("classic member is %s, not %s" % (self.state, state))
