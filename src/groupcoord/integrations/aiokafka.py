"""aiokafka partition assignors backed by groupcoord's native assignors (docs/embedding.md)::

    from aiokafka import AIOKafkaConsumer
    from groupcoord.integrations.aiokafka import StickyAssignor

    consumer = AIOKafkaConsumer("orders", group_id="billing",
                                partition_assignment_strategy=[StickyAssignor()])

=====================  ==================  ========  =====================================
class                  protocol name       rebalance kernel (groupcoord.assign.classic)
=====================  ==================  ========  =====================================
RangeAssignor          range               eager     range_assign
RoundRobinAssignor     roundrobin          eager     roundrobin
StickyAssignor         sticky              eager     sticky_assign
OptimalAssignor        groupcoord-optimal  eager     cooperative_sticky (final assignment)
=====================  ==================  ========  =====================================

aiokafka 0.14.0 implements the eager protocol only: every member revokes all of its
partitions before each JoinGroup. Its leader decodes member metadata with a v0 struct
(topics and user data), so owned partitions and GenerationId (v1+ fields) never reach an
aiokafka leader: cooperative-sticky, whose claims live in those fields, is not offered (an
aiokafka leader could hand out a partition a cooperative member still holds).
groupcoord-optimal keeps its claims in the user data, so aiokafka members may share such a
group with kafka-python's cooperative OptimalAssignor members.

aiokafka does not tell an assignor its generation; our sticky and groupcoord-optimal leaders
write an epoch into the assignment user data (groupcoord.integrations.protocols), which these
members report back as their generation (KIP-341).

aiokafka calls its assignors as configured: pass an instance per consumer
(``StickyAssignor()``), whose state is its own; a class works too, like aiokafka's own
assignors, with the state on the class (one consumer per class per process).
"""
from __future__ import annotations

import types

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (ConsumerProtocolMemberAssignment,
                                           ConsumerProtocolMemberMetadata)

from groupcoord.integrations import protocols as P
from groupcoord.protocol import embedded
from groupcoord.protocol.messages import (ConsumerProtocolSubscription,
                                          ConsumerProtocolSubscriptionTopicPartition)

__all__ = ["RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "OptimalAssignor",
           "ASSIGNORS"]


class _either:
    """A method bound to the instance when called on one, else to the class (aiokafka calls
    ``assignor.assign(...)`` on whatever it was given)."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        return types.MethodType(self.fn, cls if obj is None else obj)


def member_meta(member_id: str, md) -> P.MemberMeta:
    """aiokafka's decoded member metadata (``version``, ``subscription``, ``user_data``)."""
    return P.MemberMeta(member_id, None, md.subscription, md.user_data, (), -1, md.version)


class _Assignor(AbstractPartitionAssignor):
    name = None
    _held = None                  # the last assignment as sorted (topic, partitions) runs
    _generation = -1              # the epoch our leader wrote with it

    @_either
    def metadata(self, topics):
        s = P.subscription(self.name, topics, self._held, self._generation, holding=False)
        if s.version == 0:
            return ConsumerProtocolMemberMetadata(0, s.topics, s.user_data)
        # v3 (groupcoord-optimal): aiokafka sends bytes as they are
        return embedded.encode_subscription(ConsumerProtocolSubscription(
            topics=s.topics, user_data=s.user_data,
            owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=p)
                              for t, p in s.owned],
            generation_id=s.generation), s.version)

    @_either
    def assign(self, cluster, members):
        with P.paused_gc():
            plan = P.leader_assign(self.name, [member_meta(mid, md)
                                               for mid, md in members.items()],
                                   cluster.partitions_for_topic)
            return {mid: ConsumerProtocolMemberAssignment(plan.version, runs, plan.user_data)
                    for mid, runs in zip(plan.member_ids, plan.runs)}

    @_either
    def on_assignment(self, assignment):
        self._held = sorted((t, sorted(p)) for t, p in assignment.assignment)
        epoch = P.epoch_of(assignment.user_data)
        if epoch is not None:
            self._generation = epoch


class RangeAssignor(_Assignor):
    """Kafka's range (per topic, consecutive ranges in member order)."""
    name = P.RANGE


class RoundRobinAssignor(_Assignor):
    """Kafka's roundrobin (all partitions dealt over the members subscribed to each)."""
    name = P.ROUNDROBIN


class StickyAssignor(_Assignor):
    """Kafka's eager sticky (KIP-54/341), byte-compatible with aiokafka's and Kafka's own."""
    name = P.STICKY


class OptimalAssignor(_Assignor):
    """``groupcoord-optimal``, eager: the most balanced assignment the subscriptions allow,
    with the fewest moves."""
    name = P.OPTIMAL


ASSIGNORS = {c.name: c for c in (RangeAssignor, RoundRobinAssignor, StickyAssignor,
                                 OptimalAssignor)}
