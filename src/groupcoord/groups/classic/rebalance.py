"""The classic rebalance: the handlers' draft (``ClassicTx``), the join barrier and its
completion, member removal, protocol selection, the response and record builders, and the
three timers (session, barrier, pending sync). The response builders and the JoinGroup
timeout rules also serve the classic members of consumer and connect groups
(consumer/classic_members.py, the migration modules).

* PreparingRebalance is the join barrier. Every JoinGroup is parked (ParkKey kind "join")
  until all known members have rejoined and no MEMBER_ID_REQUIRED member is outstanding,
  or until the barrier deadline (the largest rebalance timeout of the members) passes;
  members that did not rejoin are then removed. A rebalance that starts in Empty waits
  group.initial.rebalance.delay.ms instead, and one more delay (capped by the rebalance
  timeout) each time the window closes with a new member having joined in it.
* Completing the barrier: generation + 1, the protocol is voted (each member votes for its
  most preferred protocol among those every member supports; most votes wins; a tie goes to
  the name that sorts first), the leader is the previous leader if still a member, else the
  first member in join order. Every parked JoinGroup is answered; only the leader gets the
  member list. No record is written: the generation becomes durable with the leader's sync.
* CompletingRebalance: followers' SyncGroups park (kind "sync") until the leader's SyncGroup
  (handlers.py), whose assignments are written as ONE GroupMetadataValue record. A member that
  has not sent SyncGroup within the rebalance timeout after the join completed is removed
  (Kafka's pending-sync timeout), in Stable as well.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups import limits
from groupcoord.groups.classic.events import (BarrierExtended, JoinCompleted, MemberRemoved,
                                              PendingMemberForgotten, RebalanceStarted,
                                              apply_to)
from groupcoord.groups.classic.group import (JOIN, SESSION, STATE_COMPLETING, STATE_EMPTY,
                                             STATE_PREPARING, STATE_STABLE, SYNC,
                                             ClassicGroup, group_record, session_deadline)
from groupcoord.groups.lifecycle import (MEMBER_EXPIRED, MEMBER_LEFT, REBALANCE_STARTED,
                                         Event)
from groupcoord.groups.records import Record
from groupcoord.groups.result import EMPTY, ParkKey, Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ClassicTx", "session_timeout_refused", "join_rebalance_timeout", "join_error",
           "join_response", "sync_response", "leave_response", "answer_parked", "group_value",
           "unwritable", "select_protocol", "drop_classic", "prepare_rebalance", "maybe_complete_join",
           "complete_join", "remove_member", "after_removal", "park_join", "partitions_moved"]


class ClassicTx(GroupTx):
    """A classic handler's GroupTx (tx.py) with a draft: each staged event is also applied to
    a copy of the group (never to the shard's), which the next steps read."""

    def __init__(self, shard, group_id: str, now: int):
        super().__init__(group_id, now)
        self.shard = shard
        self.gid = group_id
        g = shard.groups.get(group_id)
        self.g = g.copy() if isinstance(g, ClassicGroup) else ClassicGroup(group_id)

    def emit(self, item) -> None:
        apply_to(self.g, item)
        self.records.append(item)

    def timer(self, kind: str, member_id: str, deadline: Optional[int]) -> None:
        self.schedule(TimerKey(kind, self.gid, member_id), deadline)

    def session(self, member_id: str) -> None:
        self.timer(SESSION, member_id, session_deadline(self.g.members[member_id], self.now))

    def answer(self, member_id: str, kind: str, response) -> None:
        self.complete(ParkKey(self.gid, member_id, kind), response)


# --------------------------------------------------------------------------- responses
def session_timeout_refused(cfg, req: m.JoinGroupRequest) -> bool:
    """A JoinGroup's session timeout outside [group.min.session.timeout.ms, max] (the answer is
    INVALID_SESSION_TIMEOUT), whatever type of group the member joins."""
    return not cfg.group_min_session_timeout_ms <= req.session_timeout_ms \
        <= cfg.group_max_session_timeout_ms


def join_rebalance_timeout(req: m.JoinGroupRequest, version: int) -> int:
    """A JoinGroup's rebalance timeout: v0 has none, the session timeout plays both parts (as
    Kafka)."""
    return req.rebalance_timeout_ms if version >= 1 and req.rebalance_timeout_ms >= 0 \
        else req.session_timeout_ms


def join_error(version: int, code: int, member_id: str = "") -> m.JoinGroupResponse:
    return m.JoinGroupResponse(error_code=int(code), generation_id=-1, member_id=member_id,
                               protocol_name=None if version >= 7 else "")


def join_response(g: ClassicGroup, member_id: str, version: int, *,
                  with_members: Optional[bool] = None, skip: bool = False):
    """The current generation as member_id sees it; the leader gets the member list."""
    if with_members is None:
        with_members = member_id == g.leader
    members = [m.JoinGroupResponseMember(
        member_id=mb.member_id, group_instance_id=mb.instance_id if version >= 5 else None,
        metadata=mb.metadata(g.protocol)) for mb in g.members.values()] if with_members else []
    return m.JoinGroupResponse(
        error_code=0, generation_id=g.generation,
        protocol_type=g._ptype if version >= 7 else None, protocol_name=g.protocol,
        leader=g.leader or "", skip_assignment=skip and version >= 9, member_id=member_id,
        members=members)


def sync_response(g: ClassicGroup, version: int, code: int = 0, assignment: bytes = b""):
    v5 = version >= 5 and not code
    return m.SyncGroupResponse(error_code=int(code), assignment=assignment,
                               protocol_type=g._ptype if v5 else None,
                               protocol_name=g.protocol if v5 else None)


def leave_response(v: int, who, codes) -> m.LeaveGroupResponse:
    """v0-2 carry one top-level code; v3+ one result per (member id, instance id)."""
    if v < 3:
        return m.LeaveGroupResponse(error_code=int(codes[0]))
    return m.LeaveGroupResponse(error_code=0, members=[
        m.LeaveGroupResponseMemberResponse(member_id=mid, group_instance_id=iid,
                                           error_code=int(c))
        for (mid, iid), c in zip(who, codes)])


def answer_parked(tx: GroupTx, g: ClassicGroup, member_id: str, code: int) -> None:
    """Answer ``code`` to the member's parked JoinGroup and SyncGroup, if any (it is removed,
    fenced, or its group converted)."""
    mb = g.members[member_id]
    if mb.joined:
        tx.complete(ParkKey(g.group_id, member_id, "join"),
                    join_error(mb.join_version, code, member_id))
    if mb.sync_parked:
        tx.complete(ParkKey(g.group_id, member_id, "sync"),
                    sync_response(g, mb.sync_version, code))


def group_value(g: ClassicGroup, timestamp: int, assignments: Optional[dict] = None):
    """The GroupMetadataValue of the group as it stands (assignments: new ones, else the
    members' current ones)."""
    return m.GroupMetadataValue(
        protocol_type=g._ptype or "", generation=g.generation, protocol=g.protocol,
        leader=g.leader, current_state_timestamp=timestamp,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(g.protocol),
            assignment=mb.assignment if assignments is None
            else assignments.get(mb.member_id, b""))
            for mb in g.members.values()])


def unwritable(record: Record, limit: int) -> Optional[str]:
    """Why ``record`` cannot be written (a field over its size, or the record over
    message.max.bytes), or None."""
    try:
        size = limits.BATCH_OVERHEAD + limits.record_size(record)
    except ValueError as exc:               # the codec's EncodeError
        return str(exc)
    if size > limit:
        return ("its GroupMetadata record of %d bytes (every member's metadata and "
                "assignment) exceeds message.max.bytes %d" % (size, limit))
    return None


def partitions_moved(g: ClassicGroup, assignments: dict) -> int:
    """For the lifecycle log: how many partitions the leader's ``assignments`` (member id ->
    bytes) give to a member that did not hold them in the generation before; -1 unless the
    group's protocol type is "consumer" and every assignment parses."""
    if g._ptype != "consumer":
        return -1
    moved = 0
    for mid, mb in g.members.items():
        new, old = _partitions(assignments.get(mid, b"")), _partitions(mb.assignment)
        if new is None or old is None:
            return -1
        moved += len(new - old)
    return moved


def _partitions(blob: bytes):
    if not blob:
        return frozenset()
    try:
        a = embedded.decode_assignment(blob)[1]
    except ValueError:                  # the codec's DecodeError: not a consumer assignment
        return None
    return frozenset((tp.topic, p) for tp in a.assigned_partitions for p in tp.partitions)


# -------------------------------------------------------------- rebalance machinery
def select_protocol(members) -> str:
    """Each member votes for its most preferred protocol that every member supports; most
    votes wins, a tie goes to the name that sorts first."""
    members = list(members)
    common = set(n for n, _ in members[0].protocols)
    for mb in members[1:]:
        common &= set(n for n, _ in mb.protocols)
    votes: dict = {}
    for mb in members:
        for name, _ in mb.protocols:
            if name in common:
                votes[name] = votes.get(name, 0) + 1
                break
    return min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def prepare_rebalance(tx: ClassicTx, sync_error: int = E.REBALANCE_IN_PROGRESS,
                      why: tuple = ("", "")) -> None:
    """Start a rebalance (no-op in PreparingRebalance). Parked syncs are answered
    ``sync_error``: their generation will never be stored. ``why``: (reason, member id) for
    the lifecycle log (lifecycle.REASONS)."""
    g = tx.g
    if g.state == STATE_PREPARING:
        return
    if g.members:
        tx.note(Event(kind=REBALANCE_STARTED, group=tx.gid, type="classic",
                      epoch=g.generation + 1, reason=why[0], member=why[1],
                      members=len(g.members)))
    answered = [mid for mid, mb in g.members.items() if mb.sync_parked]
    for mid in answered:
        tx.answer(mid, "sync", sync_response(g, g.members[mid].sync_version, sync_error))
    rt = max((mb.rebalance_timeout for mb in g.members.values()), default=0)
    delay = tx.shard.config.group_initial_rebalance_delay_ms
    if g.state == STATE_EMPTY and delay > 0:
        deadline, cap = tx.now + delay, tx.now + max(rt, delay)
    else:
        deadline, cap = tx.now + rt, -1
    tx.emit(RebalanceStarted(tx.gid, deadline, cap, tx.now))
    tx.timer(JOIN, "", deadline)
    tx.timer(SYNC, "", None)
    for mid in answered:
        tx.session(mid)          # no longer parked: its session runs again


def maybe_complete_join(tx: ClassicTx, requester: Optional[str] = None):
    """Complete the barrier if everyone it waits for has joined (never during the initial
    delay: that phase ends by its timer). Returns the requester's join response, if any."""
    g = tx.g
    if g.state != STATE_PREPARING or g.delay_cap is not None or g.pending:
        return None
    if g.num_joined < len(g.members):
        return None
    return complete_join(tx, requester)


def complete_join(tx: ClassicTx, requester: Optional[str] = None):
    """Close the barrier: members that did not rejoin are removed; then the next generation
    (every parked join answered) or, with nobody left, the group's Empty record."""
    g = tx.g
    for mid in [mid for mid, mb in g.members.items() if not mb.joined]:
        remove_member(tx, mid, MEMBER_EXPIRED, "rebalance-timeout")
    tx.timer(JOIN, "", None)
    if not g.members:
        # Kafka stores the group going Empty: next generation, no protocol, no members.
        tx.emit(group_record(g, m.GroupMetadataValue(
            protocol_type=g._ptype or "", generation=g.generation + 1, protocol=None,
            leader=None, current_state_timestamp=tx.now, members=[])))
        tx.timer(SYNC, "", None)
        return None
    leader = g.leader if g.leader in g.members else next(iter(g.members))
    versions = {mid: mb.join_version for mid, mb in g.members.items()}
    tx.emit(JoinCompleted(tx.gid, g.generation + 1, select_protocol(g.members.values()),
                          leader, tx.now))
    direct = None
    for mid in g.members:
        resp = join_response(g, mid, versions[mid])
        if mid == requester:
            direct = resp
        else:
            tx.answer(mid, "join", resp)
        tx.session(mid)
    tx.timer(SYNC, "", tx.now + max(mb.rebalance_timeout for mb in g.members.values()))
    return direct


def remove_member(tx: ClassicTx, member_id: str, kind: str = MEMBER_LEFT,
                  reason: str = "") -> None:
    """Remove a member; its parked requests are answered UNKNOWN_MEMBER_ID. ``kind`` and
    ``reason``: its lifecycle event (left, or expired and why)."""
    g = tx.g
    tx.note(Event(kind=kind, group=tx.gid, type="classic", member=member_id,
                  instance=g.members[member_id].instance_id, epoch=g.generation,
                  reason=reason))
    answer_parked(tx, tx.g, member_id, E.UNKNOWN_MEMBER_ID)
    tx.emit(MemberRemoved(tx.gid, member_id))
    tx.timer(SESSION, member_id, None)


def after_removal(tx: ClassicTx, why: tuple) -> None:
    """After members left (``why``: the first one's reason and id, for the lifecycle log): a
    settled group rebalances; a barrier may now be complete."""
    g = tx.g
    if g.state in (STATE_STABLE, STATE_COMPLETING):
        prepare_rebalance(tx, why=why)
    maybe_complete_join(tx)


def park_join(tx: ClassicTx, member_id: str, reason: str = "join") -> Result:
    """The member has joined (MemberJoined applied): start or continue the barrier, and
    answer at once if this join completes it. ``reason``: why a rebalance it starts does
    (lifecycle.REASONS)."""
    prepare_rebalance(tx, why=(reason, member_id))
    direct = maybe_complete_join(tx, member_id)
    if direct is not None:
        return tx.result(direct)
    tx.session(member_id)
    return tx.result(None, park=ParkKey(tx.gid, member_id, "join"))


# ------------------------------------------------------------------------------- timers
def _fire_session(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup):
        return EMPTY
    tx = ClassicTx(shard, key.group_id, now)
    if key.member_id in g.members:
        remove_member(tx, key.member_id, MEMBER_EXPIRED, "session-expired")
        after_removal(tx, ("session-expired", key.member_id))
    elif key.member_id in g.pending:
        tx.emit(PendingMemberForgotten(key.group_id, key.member_id))
        maybe_complete_join(tx)
    else:
        return EMPTY
    return tx.result()


def _fire_join(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup) or g.state != STATE_PREPARING \
            or g.barrier_deadline is None or now < g.barrier_deadline:
        return EMPTY
    tx = ClassicTx(shard, key.group_id, now)
    if g.delay_cap is not None and g.new_member_added and now < g.delay_cap:
        # Someone joined during this window: wait one more delay (Kafka's InitialDelayedJoin)
        deadline = min(now + shard.config.group_initial_rebalance_delay_ms, g.delay_cap)
        tx.emit(BarrierExtended(key.group_id, deadline))
        tx.timer(JOIN, "", deadline)
        return tx.result()
    complete_join(tx)
    return tx.result()


def _fire_sync(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup) or g.state not in (STATE_COMPLETING, STATE_STABLE) \
            or not g.pending_sync:
        return EMPTY
    tx = ClassicTx(shard, key.group_id, now)
    late = list(g.pending_sync)
    for mid in late:
        remove_member(tx, mid, MEMBER_EXPIRED, "sync-timeout")
    after_removal(tx, ("sync-timeout", late[0]))
    return tx.result()


def drop_classic(tx, g) -> None:
    """Stage in ``tx`` (a GroupTx) the end of the classic group ``g``: its tombstone; its
    parked requests answered REBALANCE_IN_PROGRESS (the members rejoin the new group); its
    timers cancelled. Both upgrades start with it (consumer/migration.py,
    connect/migration.py)."""
    gid = g.group_id
    tx.emit(Record(m.GroupMetadataKey(group=gid), None))
    for mid in g.members:
        answer_parked(tx, g, mid, E.REBALANCE_IN_PROGRESS)
        tx.schedule(TimerKey(SESSION, gid, mid), None)
    for mid in g.pending:
        tx.schedule(TimerKey(SESSION, gid, mid), None)
    tx.schedule(TimerKey(JOIN, gid), None)
    tx.schedule(TimerKey(SYNC, gid), None)
