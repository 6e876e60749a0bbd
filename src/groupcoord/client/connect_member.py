"""A Connect worker's group membership as a sans-I/O state machine.

    st = ConnectMemberState(group_id, member_id, worker_url=..., assignors=[AssignorSpec()])
    req = st.heartbeat_request()          # what to send now
    out = st.on_response(resp)            # what to do with the answer (Outcome)
    ... stop out.revoke, call on_revoked, st.revoked(out.revoke) ...
    ... start out.assign, call on_assigned, st.assigned(out.assign) ...
    st.on_request_failed()                # timeout / connection lost: next heartbeat is full

States (`phase`):

    UNJOINED --heartbeat epoch 0--> JOINING --OK--> STABLE <--OK-- (heartbeats)
       ^                               |               |
       |  FENCED_MEMBER_EPOCH /        |               +-- leave_request() --> LEFT
       +--- UNKNOWN_MEMBER_ID ---------+---------------+   (-1, or -2 for a static member)
       |  (give up all work, rejoin with the same member id at epoch 0)
    FATAL: UNSUPPORTED_ASSIGNOR while joining, INVALID_REQUEST, FENCED_INSTANCE_ID,
           UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, GROUP_ID_NOT_FOUND, ...

Heartbeat contents (the seed: "set all the top level fields when it joins for the first time
or when an error occurs; otherwise only the fields which have changed"): a full heartbeat
carries instance id, worker url, rebalance timeout, client assignors, config state and owned
work; later ones carry only what changed since the last one that was answered (owned work
after every change, so that the coordinator sees revocations acknowledged, and after every
answer that carried an assignment, so that it sees the assignment confirmed).

Work is a set of units (connector, task): task -1 is the connector instance itself.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Sequence

from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.client.connect_assignor import AssignorSpec

__all__ = ["ConnectMemberState", "Outcome", "Action", "Phase", "TaskId", "Unit", "LEAVE_EPOCH",
           "STATIC_LEAVE_EPOCH", "split_units", "units_of"]

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class TaskId(NamedTuple):
    """A connector's task (Connect's ConnectorTaskId)."""
    connector: str
    task: int


Unit = tuple  # (connector, task) with task -1 for the connector


class Phase(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    STABLE = "stable"
    LEFT = "left"
    FATAL = "fatal"


class Action(enum.Enum):
    OK = "ok"                    # reconcile (revoke / assign) and carry on
    REJOIN = "rejoin"            # everything revoked; next heartbeat joins at epoch 0
    FIND_COORDINATOR = "find"    # the coordinator moved or is unavailable
    RETRY = "retry"              # transient: heartbeat again after a backoff
    FATAL = "fatal"              # stop: `error` says why


@dataclass
class Outcome:
    action: Action
    revoke: frozenset = frozenset()
    assign: frozenset = frozenset()
    compute: bool = False        # COMPUTE_ASSIGNMENT: we are the chosen worker
    interval_ms: int = 0
    error: int = 0
    error_message: Optional[str] = None
    assignment_error: int = 0


def units_of(ct) -> frozenset:
    """Wire ConnectorsAndTasks (any of the message variants) -> frozenset of units."""
    out = {(c, -1) for c in ct.connectors}
    for t in ct.tasks:
        out.update((t.connector, i) for i in t.task_ids)
    return frozenset(out)


def split_units(units: Iterable[Unit]) -> tuple[list[str], list[TaskId]]:
    """Units -> (sorted connector names, sorted TaskIds): what the listener is given."""
    conns, tasks = [], []
    for c, t in units:
        if t < 0:
            conns.append(c)
        else:
            tasks.append(TaskId(c, t))
    return sorted(conns), sorted(tasks)


def _owned_wire(units: Iterable[Unit]) -> m.ConnectGroupHeartbeatRequestConnectorsAndTasks:
    conns, tasks = split_units(units)
    by: dict[str, list[int]] = {}
    for t in tasks:
        by.setdefault(t.connector, []).append(t.task)
    return m.ConnectGroupHeartbeatRequestConnectorsAndTasks(
        connectors=conns, tasks=[m.ConnectGroupHeartbeatRequestConnectorTasks(
            connector=c, task_ids=ids) for c, ids in sorted(by.items())])


_REJOIN = (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID)
_FIND = (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)
_RETRY = (E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT, E.NETWORK_EXCEPTION)


@dataclass
class ConnectMemberState:
    group_id: str
    member_id: str
    worker_url: Optional[str] = None
    assignors: Sequence[AssignorSpec] = (AssignorSpec(),)
    instance_id: Optional[str] = None
    rebalance_timeout_ms: int = 60_000
    config_offset: int = -1                       # -1: no config state to send
    connectors: dict = field(default_factory=dict)  # name -> task count
    member_epoch: int = 0
    owned: frozenset = frozenset()
    phase: Phase = Phase.UNJOINED
    heartbeat_interval_ms: int = 3000
    # what the coordinator has been told (for deltas); None = must be sent
    _sent_assignors: Optional[tuple] = None
    _sent_config_offset: Optional[int] = None
    _sent_owned: Optional[frozenset] = None
    _full: bool = True
    _in_flight: Optional[dict] = None

    # -- requests ------------------------------------------------------------------------
    def heartbeat_request(self) -> m.ConnectGroupHeartbeatRequest:
        full = self._full or self.member_epoch == 0
        assignors = tuple(self.assignors)
        req = m.ConnectGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                             member_epoch=self.member_epoch)
        sent = {}
        if full:
            req.instance_id = self.instance_id
            req.worker_url = self.worker_url
            req.rebalance_timeout_ms = self.rebalance_timeout_ms
        if full or assignors != self._sent_assignors:
            req.client_assignors = [a.to_wire() for a in assignors]
            sent["assignors"] = assignors
        if self.config_offset >= 0 and (full or self.config_offset != self._sent_config_offset):
            req.config_state = self.config_state()
            sent["config"] = self.config_offset
        if full or self.owned != self._sent_owned:
            req.owned_connectors_and_tasks = _owned_wire(self.owned)
            sent["owned"] = self.owned
        self._in_flight = sent
        if self.phase is Phase.UNJOINED:
            self.phase = Phase.JOINING
        return req

    def keepalive_ready(self) -> bool:
        """Joined and nothing changed since the heartbeat the coordinator last accepted:
        heartbeat_request() would carry only group id, member id and epoch
        (keepalive_request()). A driver of many workers may then send one encoding of it per
        epoch and book it with try_keepalive() (benchmarks/loadgen.py)."""
        return (self.phase is Phase.STABLE and self.member_epoch > 0 and not self._full
                and tuple(self.assignors) == self._sent_assignors
                and (self.config_offset < 0 or self.config_offset == self._sent_config_offset)
                and self.owned == self._sent_owned)

    def keepalive_request(self) -> m.ConnectGroupHeartbeatRequest:
        """The identity-only heartbeat heartbeat_request() builds when keepalive_ready().
        Books nothing."""
        return m.ConnectGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                              member_epoch=self.member_epoch)

    def try_keepalive(self) -> bool:
        """If keepalive_ready(), book a keep-alive as sent, as heartbeat_request() would, and
        return True: send keepalive_request() (or an earlier encoding of it for the same
        epoch) and give its answer to on_response. Else False: use heartbeat_request()."""
        if not self.keepalive_ready():
            return False
        self._in_flight = {}
        return True

    def config_state(self) -> m.ConnectGroupHeartbeatRequestConfigState:
        return m.ConnectGroupHeartbeatRequestConfigState(
            config_offset=self.config_offset,
            connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(name=n, task_count=c)
                        for n, c in sorted(self.connectors.items())])

    def leave_request(self, temporary: bool = False) -> m.ConnectGroupHeartbeatRequest:
        """-1 (leave for good), or -2 (static member: leave temporarily, keep the work
        reserved until the session times out). -2 needs an instance id."""
        if temporary and self.instance_id is None:
            raise ValueError("a temporary leave (epoch -2) needs an instance id")
        epoch = STATIC_LEAVE_EPOCH if temporary else LEAVE_EPOCH
        return m.ConnectGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                              member_epoch=epoch, instance_id=self.instance_id)

    def on_request_failed(self) -> None:
        """The heartbeat got no answer: the next one must carry every field."""
        self._full = True
        self._in_flight = None

    def set_config(self, connectors: dict, offset: Optional[int] = None) -> int:
        self.connectors = dict(connectors)
        self.config_offset = self.config_offset + 1 if offset is None else offset
        return self.config_offset

    # -- responses -----------------------------------------------------------------------
    def on_response(self, resp: m.ConnectGroupHeartbeatResponse) -> Outcome:
        code = resp.error_code
        sent, self._in_flight = self._in_flight or {}, None
        if code in (0, E.COMPUTE_ASSIGNMENT):
            self._full = False
            if "assignors" in sent:
                self._sent_assignors = sent["assignors"]
            if "config" in sent:
                self._sent_config_offset = sent["config"]
            if "owned" in sent:
                self._sent_owned = sent["owned"]
            if resp.member_id:
                self.member_id = resp.member_id
            self.member_epoch = resp.member_epoch
            if resp.heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = resp.heartbeat_interval_ms
            self.phase = Phase.STABLE
            out = Outcome(Action.OK, compute=code == E.COMPUTE_ASSIGNMENT,
                          interval_ms=self.heartbeat_interval_ms)
            if resp.assignment is not None:
                target = units_of(resp.assignment.connectors_and_tasks)
                out.revoke = self.owned - target
                out.assign = target - self.owned
                out.assignment_error = resp.assignment.error
                # Report what we own next time even if it did not change: the coordinator may
                # believe otherwise (its answer went to a late copy of a request), and only an
                # owned set confirms an assignment or acknowledges a revocation.
                self._sent_owned = None
            return out
        msg = resp.error_message
        if code in _REJOIN:
            return self.abandon(code, msg)
        self._full = True
        if code in _FIND:
            return Outcome(Action.FIND_COORDINATOR, error=code, error_message=msg)
        if code in _RETRY:
            return Outcome(Action.RETRY, error=code, error_message=msg)
        if code == E.UNSUPPORTED_ASSIGNOR and self.phase is Phase.STABLE:
            # A group-level condition (no worker covers every range): joins and leaves are
            # still processed and the group recovers when membership changes. Keep beating.
            return Outcome(Action.RETRY, error=code, error_message=msg,
                           interval_ms=self.heartbeat_interval_ms)
        self.phase = Phase.FATAL
        return Outcome(Action.FATAL, revoke=self.owned, error=code, error_message=msg)

    def abandon(self, code: int = 0, msg: Optional[str] = None) -> Outcome:
        """Give up all work and rejoin (same member id, epoch 0)."""
        self.member_epoch = 0
        self.phase = Phase.UNJOINED
        self._full = True
        self._sent_owned = None
        return Outcome(Action.REJOIN, revoke=self.owned, error=code, error_message=msg)

    # -- reconciliation bookkeeping (after the listener ran) --------------------------------
    def revoked(self, units: Iterable[Unit]) -> None:
        self.owned = self.owned - frozenset(units)

    def assigned(self, units: Iterable[Unit]) -> None:
        self.owned = self.owned | frozenset(units)

    def left(self) -> None:
        self.phase = Phase.LEFT
        self.owned = frozenset()
