"""What a classic member puts in JoinGroup metadata and SyncGroup assignments, and which
callbacks a rebalance means. Two protocols:

`ConsumerProtocol` (protocol type "consumer"): the embedded ConsumerProtocolSubscription /
ConsumerProtocolAssignment formats (groupcoord.protocol.embedded) and the client-side
assignors of groupcoord.assign.client, one JoinGroup protocol per assignor in preference
order (`range`, `roundrobin`, `sticky`, `cooperative-sticky`). The leader runs the chosen one
over every member's subscription (members in Kafka's order: static by instance id first).

  * eager (any assignor list that is not all cooperative, Kafka's rule): before every
    (re)join the member revokes everything it owns; after SyncGroup it is assigned the whole
    new assignment.
  * cooperative (`cooperative-sticky` only): the subscription reports the owned partitions
    and the generation they were assigned in (KIP-341's marker, in GenerationId and, for
    readers of older subscription versions, as a 4-byte generation in the user data). After
    SyncGroup the member revokes only what it lost, is assigned only what is new, and joins
    again at once if it revoked anything (the leader withheld those partitions from their
    new owners for this round).
  * eager `sticky` carries KIP-341's StickyAssignorUserData (previous assignment +
    generation).

`CustomProtocol` (any other protocol type): opaque metadata per protocol name, an `assign`
function the leader runs, and the assignment bytes handed to the listener's on_assigned
(eager: on_revoked before every rejoin).

The planning methods (`plan_sync`, `subscription`, `leader_assign`) are pure; the drivers run
the callbacks they name.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

from groupcoord.assign import classic as client_assign
from groupcoord.client.members_classic_state import JoinedMember
from groupcoord.client.members_common import TopicPartition
from groupcoord.protocol import embedded
from groupcoord.protocol.messages import (ConsumerProtocolSubscription,
                                          ConsumerProtocolSubscriptionTopicPartition,
                                          StickyAssignorUserData,
                                          StickyAssignorUserDataTopicPartitions)

__all__ = ["ConsumerProtocol", "CustomProtocol", "SyncPlan", "ClassicAssignment",
           "COOPERATIVE_ASSIGNORS", "SUBSCRIPTION_VERSION"]

COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})
SUBSCRIPTION_VERSION = 3


class SyncPlan(NamedTuple):
    """After SyncGroup: revoke `revoked` first, then assign `assigned`; `rejoin` at once."""
    revoked: list
    assigned: list
    rejoin: bool
    new_owned: frozenset


def _by_topic(tps: Iterable[TopicPartition]) -> list:
    out: dict = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return sorted(out.items())


class ConsumerProtocol:
    protocol_type = "consumer"

    def __init__(self, topics: Iterable[str], assignors: Sequence[str] = ("range",),
                 rack_id: Optional[str] = None):
        self.topics = sorted(set(topics))
        self.assignors = list(assignors)
        if not self.assignors:
            raise ValueError("at least one assignor")
        for a in self.assignors:
            if a not in assignors_module_names():
                raise ValueError("unknown assignor %r (known: %s)"
                                 % (a, ", ".join(assignors_module_names())))
        self.rack_id = rack_id
        self.cooperative = all(a in COOPERATIVE_ASSIGNORS for a in self.assignors)
        self.owned: frozenset = frozenset()        # TopicPartitions held now
        self.owned_generation = -1                 # generation `owned` was assigned in
        self.previous: frozenset = frozenset()     # last assignment (eager sticky's memory)

    # -- JoinGroup ---------------------------------------------------------------------
    def revoke_before_join(self) -> list:
        """Eager: everything owned is revoked before joining; cooperative: nothing."""
        return [] if self.cooperative else sorted(self.owned)

    def subscription(self, assignor: str,
                     joined_generation: int = -1) -> ConsumerProtocolSubscription:
        """joined_generation: the generation the member last joined (-1: none). Claims carry
        the newer of it and the generation they were assigned in, as Kafka's Java client
        reports its last joined generation: after a lost SyncGroup answer the member still
        holds its partitions, and claims at the older generation would be ignored as stale
        by the cooperative-sticky leader (KIP-341), which would give them away while it still
        runs them (found by tests/simulation, seed 67)."""
        claims = self.owned if self.cooperative else self.previous
        gen = self.owned_generation
        if self.owned and joined_generation > gen:
            gen = joined_generation
        user_data = None
        if assignor == "cooperative-sticky":
            user_data = gen.to_bytes(4, "big", signed=True)
        elif assignor == "sticky":
            user_data = embedded.encode_sticky_user_data(StickyAssignorUserData(
                previous_assignment=[StickyAssignorUserDataTopicPartitions(topic=t, partitions=ps)
                                     for t, ps in _by_topic(self.previous)],
                generation=gen))
        return ConsumerProtocolSubscription(
            topics=list(self.topics), user_data=user_data,
            owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=ps)
                              for t, ps in _by_topic(claims)],
            # The member's generation (Java's generation().generationId): the coordinator
            # tells a late copy of an older JoinGroup by it (handlers._stale_join).
            generation_id=max(gen, joined_generation), rack_id=self.rack_id)

    def protocols(self, joined_generation: int = -1) -> list:
        """[(assignor name, subscription bytes)] in preference order."""
        return [(a, embedded.encode_subscription(self.subscription(a, joined_generation),
                                                 SUBSCRIPTION_VERSION))
                for a in self.assignors]

    # -- leader ------------------------------------------------------------------------
    @staticmethod
    def topics_of(members: Sequence[JoinedMember]) -> list:
        subs, _ = client_assign.decode_members([x.metadata for x in members])
        return sorted({t for s in subs for t in s.topics})

    @staticmethod
    def leader_assign(protocol: str, members: Sequence[JoinedMember],
                      partitions: Mapping[str, int]) -> dict:
        """The leader's step: {member id: assignment bytes}. `partitions`: partition count
        of every subscribed topic the cluster knows."""
        order = client_assign.member_order([x.member_id for x in members],
                                       [x.instance_id for x in members])
        ordered = [members[i] for i in order]
        subs, versions = client_assign.decode_members([x.metadata for x in ordered])
        result = client_assign.assign(protocol, subs, partitions, versions=versions)
        return {x.member_id: embedded.encode_assignment(a, SUBSCRIPTION_VERSION)
                for x, a in zip(ordered, result)}

    # -- SyncGroup ---------------------------------------------------------------------
    @staticmethod
    def decode(data: bytes) -> frozenset:
        if not data:
            return frozenset()
        _, a = embedded.decode_assignment(data)
        return frozenset(TopicPartition(tp.topic, p) for tp in a.assigned_partitions
                         for p in tp.partitions)

    def plan_sync(self, data: bytes) -> SyncPlan:
        new = self.decode(data)
        revoked = sorted(self.owned - new)
        assigned = sorted(new - self.owned)
        return SyncPlan(revoked, assigned, bool(revoked) and self.cooperative, new)

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        self.owned = self.owned - frozenset(tps)

    def installed(self, plan: SyncPlan, generation: int) -> None:
        self.owned = plan.new_owned
        self.previous = plan.new_owned
        self.owned_generation = generation

    def lost(self) -> list:
        out = sorted(self.owned)
        self.owned = frozenset()
        self.owned_generation = -1
        return out


def assignors_module_names() -> tuple:
    return client_assign.ASSIGNORS


class ClassicAssignment(NamedTuple):
    """What a CustomProtocol member is given."""
    protocol: str
    data: bytes
    generation: int
    member_id: str
    leader: str


class CustomProtocol:
    """A custom classic protocol (Schema Registry / Connect style work sharding):
    `protocols` = [(name, metadata bytes)] in preference order; the leader calls
    `assign(protocol_name, [JoinedMember...])` -> {member_id: assignment bytes} (members
    left out get empty bytes)."""

    cooperative = False

    def __init__(self, protocol_type: str, protocols: Sequence[tuple],
                 assign: Callable[[str, list], Mapping[str, bytes]]):
        if protocol_type == "consumer":
            raise ValueError('use ConsumerProtocol for protocol type "consumer"')
        self.protocol_type = protocol_type
        self._protocols = [(n, bytes(md)) for n, md in protocols]
        self.assign = assign
        self.current: Optional[ClassicAssignment] = None

    def protocols(self, joined_generation: int = -1) -> list:
        return list(self._protocols)

    def set_metadata(self, protocols: Sequence[tuple]) -> None:
        self._protocols = [(n, bytes(md)) for n, md in protocols]

    def leader_assign(self, protocol: str, members: Sequence[JoinedMember],
                      partitions: Mapping[str, int]) -> dict:
        out = dict(self.assign(protocol, list(members)))
        return {k: bytes(v) for k, v in out.items()}

    @staticmethod
    def topics_of(members: Sequence[JoinedMember]) -> list:
        return []


def listener_names(protocol: Any) -> tuple:
    """(assigned, revoked, lost) callback names for a protocol's listener."""
    if isinstance(protocol, ConsumerProtocol):
        return ("on_partitions_assigned", "on_partitions_revoked", "on_partitions_lost")
    return ("on_assigned", "on_revoked", "on_lost")
