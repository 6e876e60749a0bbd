"""What the KIP-848 group types (consumer/group.py, connect/group.py) share as groups: Kafka's
state names and how they follow from the epochs, the OffsetCommit / OffsetFetch member-epoch
checks, the "answered but not confirmed" event, the DescribeGroups frame, and when a
rebalance starts and completes for the lifecycle log (``settle``). Reconciliation itself is
modern/reconcile.py's.

A modern group keeps ``members`` (member id -> its metadata, whatever the type keeps there),
``epoch`` (the group epoch), ``target_epoch`` and ``unconfirmed`` (member ids), and says
where a member's current assignment lives (``assignment_of``, ``assignments``).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Optional

from groupcoord.groups.group import Group
from groupcoord.groups.lifecycle import REBALANCE_COMPLETED, REBALANCE_STARTED, Event
from groupcoord.groups.modern.reconcile import STABLE, MemberAssignment
from groupcoord.groups.result import Volatile
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ModernGroup", "Unconfirmed", "RebalanceProgress", "described_member", "settle",
           "rebalance_started"]


class Unconfirmed(Volatile, frozen=True, gc=False):
    """A member was answered an assignment it has not confirmed yet (unconfirmed=True), or it
    has now reported exactly its assignment as owned (False). Decided by
    reconcile.reconcile_member for every modern group type."""
    group_id: str
    member_id: str
    unconfirmed: bool


class RebalanceProgress(Volatile, frozen=True, gc=False):
    """The group's rebalance as the lifecycle log follows it (``settle``): when the running
    one started (-1: none, or it started before a restart), the units its targets moved so
    far, and the group epoch the last completed one reached (-1: unknown)."""
    group_id: str
    since_ms: int
    moved: int
    completed_epoch: int


class ModernGroup(Group):
    members: dict
    epoch: int
    target_epoch: int
    unconfirmed: set

    # ---- where the type keeps a member's current assignment
    @abstractmethod
    def assignment_of(self, member_id: Optional[str]) -> Optional[MemberAssignment]:
        """The member's current assignment; None for a member the group does not know."""

    @abstractmethod
    def assignments(self):
        """Every member's current assignment."""

    # ---- for the lifecycle log, in memory only: RebalanceProgress's fields (volatile), and
    # how many members are STABLE at the target epoch, kept by replay (``track``,
    # ``recount``) so that "every member reached the target" costs O(1), not O(members).
    rebalance_since = -1
    units_moved = 0
    completed_epoch = -1
    _reconciled = 0
    _recount_due = False

    # the reconciled count (changed by replay; read by ``reconciled``)
    def track(self, old: Optional[MemberAssignment], new: Optional[MemberAssignment]) -> None:
        """A member's current assignment changed from ``old`` to ``new`` (None: none)."""
        if not self._recount_due:
            te = self.target_epoch
            self._reconciled += _at(new, te) - _at(old, te)

    def recount(self) -> None:
        """The target epoch changed: count again when next asked. Lazily, so that recovery
        replaying many target epochs of a large group does not count at each."""
        self._recount_due = True

    def reconciled(self) -> int:
        """How many members are STABLE at the target epoch. (A count cached by replay; the
        first read after a target change fills it, which changes nothing a reader sees.)"""
        if self._recount_due:
            te = self.target_epoch
            self._reconciled = sum(_at(a, te) for a in self.assignments())
            self._recount_due = False
        return self._reconciled

    def is_stable(self) -> bool:
        """state_name() == "Stable", in O(1)."""
        return bool(self.members) and self.epoch == self.target_epoch \
            and self.reconciled() == len(self.members)

    def lifecycle_state(self) -> tuple:
        """The state above, for snapshot(durable=False) (the purity check)."""
        return (self.rebalance_since, self.units_moved, self.completed_epoch,
                self.reconciled())

    def commit_protocol_error(self, member_id: str, epoch: int, version: int) -> Optional[int]:
        """An OffsetCommit rule of the member's protocol that decides before the epoch
        check (an ErrorCode value, 0 = accept), or None: the epoch check decides."""
        return None

    # ---- Group interface
    def state_name(self) -> str:
        # Kafka's ConsumerGroup/StreamsGroup states: the target behind the group epoch is
        # Assigning; any member not yet stable at the target epoch is Reconciling.
        if not self.members:
            return "Empty"
        if self.epoch > self.target_epoch:
            return "Assigning"
        te = self.target_epoch
        for a in self.assignments():
            if a.state != STABLE or a.epoch != te:
                return "Reconciling"
        return "Stable"

    def protocol_type(self) -> str:
        return self.TYPE                 # ListGroups: "consumer" / "connect"

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(self, member_id, instance_id, generation_or_epoch, version):
        if generation_or_epoch < 0 and not self.members:
            return 0                     # an admin tool or a simple consumer, group empty
        a = self.assignment_of(member_id)
        if a is None:
            return int(E.UNKNOWN_MEMBER_ID)
        err = self.commit_protocol_error(member_id, generation_or_epoch, version)
        if err is not None:
            return err
        return 0 if generation_or_epoch == a.epoch else int(E.STALE_MEMBER_EPOCH)

    def validate_offset_fetch(self, member_id, member_epoch):
        # Kafka: no member id and a negative epoch is an admin tool or a client that names
        # no member (offsets.py asks only when the request names one).
        if member_id is None and member_epoch < 0:
            return 0
        a = self.assignment_of(member_id)
        if a is None:
            return int(E.UNKNOWN_MEMBER_ID)
        return 0 if member_epoch == a.epoch else int(E.STALE_MEMBER_EPOCH)

    # ---- DescribeGroups (admin.py)
    def described(self, protocol_data: str, members: list):
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=0, group_id=self.group_id, group_state=self.state_name(),
            protocol_type=self.TYPE, protocol_data=protocol_data, members=members)


def described_member(member_id: str, meta, metadata: bytes, assignment: bytes):
    """One member as DescribeGroups shows it; ``meta`` has instance_id, client_id and
    client_host (both types' member metadata records do)."""
    return m.DescribeGroupsResponseDescribedGroupMember(
        member_id=member_id, group_instance_id=meta.instance_id, client_id=meta.client_id,
        client_host=meta.client_host, member_metadata=metadata, member_assignment=assignment)


def _at(a: Optional[MemberAssignment], target_epoch: int) -> int:
    """1 when ``a`` is STABLE at the target epoch (the member reached the target), else 0."""
    return 1 if a is not None and a.state == STABLE and a.epoch == target_epoch else 0


def rebalance_started(tx, group_type: str, epoch: int, why: tuple, members: int) -> None:
    """The lifecycle event of an epoch bump to ``epoch`` for ``why`` = (reason, member id),
    noted where the bump is staged; none when the change leaves no member (nothing to
    rebalance). settle() starts the run's clock."""
    if members:
        tx.note(Event(kind=REBALANCE_STARTED, group=tx.group_id, type=group_type, epoch=epoch,
                      reason=why[0], member=why[1] or "", members=members))


def settle(tx, g: Optional[ModernGroup], group_type: str, *, epoch: int, target_epoch: int,
           members: int, changed: dict, why: Optional[tuple] = None, moved: int = 0,
           unit: str = "partitions") -> None:
    """The lifecycle events of one change of a modern group, staged in ``tx`` (a GroupTx):
    g is the group before the change (None: new); epoch, target_epoch and members (a count)
    are what the change leaves; ``changed`` maps the members whose current assignment it sets
    to their new one (None: removed); ``why`` = (reason, member id) when it bumped the group
    epoch; ``moved``: units the targets it computed gave to another member.

    A rebalance starts with each epoch bump that leaves members (rebalance_started: one
    event per bump) and completes when every member is STABLE at the target epoch and the
    target epoch is the group epoch (Kafka's Stable state) at a new epoch:
    "rebalance-completed" with the duration since the first bump of the run and the units its
    targets moved. The run is kept in RebalanceProgress (volatile: after a restart the
    duration is unknown)."""
    gid = tx.group_id
    before = ((g.rebalance_since, g.units_moved, g.completed_epoch) if g is not None
              else (-1, 0, -1))
    since, total, done = before
    if why is not None and members and (since < 0 or g.is_stable()):
        since, total = tx.now, 0            # a new run (or a stale one: it was Stable)
    total += moved
    if not members:
        since, total = -1, 0                # nobody left to reconcile: the run ends
    elif epoch == target_epoch and done != epoch \
            and not (g is not None and g.epoch == epoch and g.is_stable()):
        if g is None or g.target_epoch != target_epoch:
            # Nobody else can be at a target epoch this change sets.
            n = sum(_at(a, target_epoch) for a in changed.values())
        else:
            n = g.reconciled()
            for mid, a in changed.items():
                n += _at(a, target_epoch) - _at(g.assignment_of(mid), target_epoch)
        if n == members:
            tx.note(Event(kind=REBALANCE_COMPLETED, group=gid, type=group_type, epoch=epoch,
                          duration_ms=tx.now - since if since >= 0 else -1, members=members,
                          units_moved=total if since >= 0 else -1, unit=unit))
            since, total, done = -1, 0, epoch
    if (since, total, done) != before:
        tx.emit(RebalanceProgress(gid, since, total, done))


def replay_progress(shard, ev: RebalanceProgress, _) -> None:
    g = shard.groups.get(ev.group_id)
    if isinstance(g, ModernGroup):
        g.rebalance_since, g.units_moved, g.completed_epoch = \
            ev.since_ms, ev.moved, ev.completed_epoch


def replay_unconfirmed(shard, ev, _) -> None:
    g = shard.groups.get(ev.group_id)
    if isinstance(g, ModernGroup) and ev.member_id in g.members:
        if ev.unconfirmed:
            g.unconfirmed.add(ev.member_id)
        else:
            g.unconfirmed.discard(ev.member_id)
