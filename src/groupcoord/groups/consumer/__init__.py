"""KIP-848 consumer groups: ConsumerGroupHeartbeat (api 68) and ConsumerGroupDescribe (api 69).

The coordinator assigns. Three epochs drive a group (docs/coordinator-consumer.md):

  group epoch    bumped (one ConsumerGroupMetadata record) when the membership or what the
                 members subscribe to changes: a member joins, leaves, is fenced or expires,
                 changes its topic names / regex / server assignor / rack, or the catalog
                 changes the subscribed topics (ids, partition counts, regex matches).
  target epoch   the group epoch the target assignment was computed for. A heartbeat that
                 finds group epoch > target epoch computes the new target at once with the
                 group's assignor and writes only the members whose target changed, then the
                 ConsumerGroupTargetAssignmentMetadata record.
  member epoch   each member converges to the target through modern/reconcile.py (reconcile_member):

        STABLE --target moved, nothing to revoke--> STABLE (new epoch) or UNRELEASED
        STABLE --target moved, must revoke-------> UNREVOKED (same epoch, revoke first)
        UNREVOKED --owned reports the revocation--> STABLE / UNRELEASED / UNREVOKED
        UNRELEASED --others released units------> STABLE

     A member that stays UNREVOKED past its rebalance timeout is fenced; a member whose
     session (no heartbeat for consumer_session_timeout_ms) expires is removed. A static
     member (InstanceId) may leave temporarily with epoch -2: it keeps its assignment until
     its session expires or a new member id takes its instance id over (no rebalance).

Member epoch -1 leaves; -2 is the static temporary leave; 0 joins (or resends a lost join).

Handlers only read. Every change is a Record replayed by the replayers (registry.py; also on
recovery); a heartbeat is computed on a ``ConsumerTx``: a view of the group with this heartbeat's
edits layered on top, which accumulates the records and timer operations. The heartbeat is a
chain of small steps (validate -> find member -> update member -> group epoch -> target ->
reconcile -> response) so that classic-protocol members can later reuse them.

Topic partitions are units ``reconcile.unit(topic_index, partition)``; topic indices come from
a per-group registry that replay fills from the topic ids in records. Handlers only look up;
a topic new to the group gets a provisional index inside the ConsumerTx that never leaves it
(records carry topic ids), so recovery may number topics differently without harm.

Modules: group.py (ConsumerGroup, Member), tx.py (ConsumerTx), target.py (the target
assignment), heartbeat.py (api 68, leave, expiry), describe.py (api 69), replay.py,
classic_members.py (members using the classic protocol inside a consumer group).
"""
