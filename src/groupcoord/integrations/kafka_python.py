"""kafka-python 3 partition assignors backed by groupcoord's native assignors
(docs/embedding.md). Pass the classes as kafka-python's own::

    from kafka import KafkaConsumer
    from groupcoord.integrations.kafka_python import CooperativeStickyAssignor

    consumer = KafkaConsumer("orders", group_id="billing",
                             partition_assignment_strategy=[CooperativeStickyAssignor])

=========================  ======================  ===========  ===============================
class                      protocol name           rebalance    kernel (groupcoord.assign.classic)
=========================  ======================  ===========  ===============================
RangeAssignor              range                   eager        range_assign
RoundRobinAssignor         roundrobin              eager        roundrobin
StickyAssignor             sticky                  eager        sticky_assign
CooperativeStickyAssignor  cooperative-sticky      cooperative  cooperative_sticky (withheld)
OptimalAssignor            groupcoord-optimal      cooperative  cooperative_sticky
=========================  ======================  ===========  ===============================

Each speaks its protocol name's wire format (groupcoord.integrations.protocols), so a group
may mix these members with kafka-python's, aiokafka's or Java's own members of the same name
(rolling upgrades). kafka-python 3.0.12 runs KIP-429 cooperative rebalancing for assignors
whose ``supported_protocols()`` is ``[COOPERATIVE]``, as its own CooperativeStickyAssignor's
is; like that one, ours cannot also run eager (the assignor is not told the mode), so a
consumer lists cooperative assignors only, or eager ones only.

kafka-python instantiates each class per consumer (``klass()``), so member state (the last
assignment and its generation) is per consumer.
"""
from __future__ import annotations

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol
from kafka.protocol.consumer.metadata import (ConsumerProtocolAssignment,
                                              ConsumerProtocolSubscription)

from groupcoord.integrations import protocols as P

__all__ = ["RangeAssignor", "RoundRobinAssignor", "StickyAssignor",
           "CooperativeStickyAssignor", "OptimalAssignor", "ASSIGNORS"]

_SubTP = ConsumerProtocolSubscription.TopicPartition


def _pairs(entries) -> list:
    """Topic-partitions entries -> (topic, partitions): decoded ones, hand-built ones (which
    kafka-python cannot iterate without a version) and plain tuples."""
    return [(e.topic, e.partitions) if hasattr(e, "topic") else tuple(e) for e in entries]


def member_meta(member) -> P.MemberMeta:
    """kafka-python's JoinGroup member (``member_id``, ``group_instance_id``, ``metadata`` = a
    decoded ConsumerProtocolSubscription) -> the adapters' MemberMeta."""
    md = member.metadata
    v = md.version or 0
    # fields newer than the decoded version are not read (kafka-python's fallback is slow)
    owned = _pairs(md.owned_partitions or ()) if v >= 1 else ()
    return P.MemberMeta(member.member_id, getattr(member, "group_instance_id", None),
                        md.topics, md.user_data, owned,
                        md.generation_id if v >= 2 and md.generation_id is not None else -1, v)


class _Assignor(AbstractPartitionAssignor):
    name = None
    _epoch_generation = False     # groupcoord-optimal: claims carry the leader's epoch

    def __init__(self):
        self._held = None         # the last assignment as sorted (topic, partitions) runs
        self._generation = -1     # the coordinator's generation it came with
        self._epoch = -1          # groupcoord-optimal: the epoch our leader wrote with it

    def supported_protocols(self):
        return [RebalanceProtocol.COOPERATIVE if self.name in P.COOPERATIVE
                else RebalanceProtocol.EAGER]

    def metadata(self, topics):
        s = P.subscription(self.name, topics, self._held,
                           self._epoch if self._epoch_generation else self._generation,
                           holding=True, generation_id=self._generation)
        if s.version == 0:
            return ConsumerProtocolSubscription(version=0, topics=s.topics,
                                                user_data=s.user_data)
        return ConsumerProtocolSubscription(
            version=s.version, topics=s.topics, user_data=s.user_data,
            owned_partitions=[_SubTP(topic=t, partitions=p) for t, p in s.owned],
            generation_id=s.generation, rack_id=None)

    def assign(self, cluster, members):
        with P.paused_gc():
            plan = P.leader_assign(self.name, [member_meta(m) for m in members],
                                   cluster.partitions_for_topic)
            return {mid: ConsumerProtocolAssignment(plan.version, runs, plan.user_data)
                    for mid, runs in zip(plan.member_ids, plan.runs)}

    def on_assignment(self, assignment, generation):
        self._held = sorted((t, sorted(p)) for t, p in _pairs(assignment.assigned_partitions))
        self._generation = generation
        epoch = P.epoch_of(assignment.user_data)
        if epoch is not None:
            self._epoch = epoch


class RangeAssignor(_Assignor):
    """Kafka's range (per topic, consecutive ranges in member order)."""
    name = P.RANGE


class RoundRobinAssignor(_Assignor):
    """Kafka's roundrobin (all partitions dealt over the members subscribed to each)."""
    name = P.ROUNDROBIN


class StickyAssignor(_Assignor):
    """Kafka's eager sticky (KIP-54): StickyAssignorUserData v1 with the generation
    (KIP-341) in the subscription user data, byte for byte Kafka's and kafka-python's."""
    name = P.STICKY


class CooperativeStickyAssignor(_Assignor):
    """Kafka's cooperative-sticky (KIP-429): owned partitions and GenerationId in a v3
    subscription, the generation also as Kafka's 4-byte user data; a partition that changes
    owner is withheld for one round while its owner revokes it."""
    name = P.COOPERATIVE_STICKY


class OptimalAssignor(_Assignor):
    """``groupcoord-optimal``: the most balanced assignment the subscriptions allow, with the
    fewest moves (cooperative); may share a group with aiokafka's OptimalAssignor."""
    name = P.OPTIMAL
    _epoch_generation = True


ASSIGNORS = {c.name: c for c in (RangeAssignor, RoundRobinAssignor, StickyAssignor,
                                 CooperativeStickyAssignor, OptimalAssignor)}
