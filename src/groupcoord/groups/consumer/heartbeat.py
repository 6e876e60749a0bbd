"""ConsumerGroupHeartbeat (api 68): the steps of one heartbeat (validate -> find member ->
update member -> group epoch -> target -> reconcile -> answer), leaving (epochs -1, -2), and
the session and revocation deadlines. The KIP-848 rules themselves are modern/'s
(reconcile.reconcile_member, membership.py); this module supplies a consumer's units.
"""
from __future__ import annotations

import re
from typing import Optional

from groupcoord.groups import group_config, ids
from groupcoord.groups.consumer import migration
from groupcoord.groups.consumer.group import (EMPTY_META, JOIN_EPOCH, ConsumerGroup, Member,
                                              _MetaValue, _revocation_key)
from groupcoord.groups.consumer.target import ensure_target
from groupcoord.groups.consumer.tx import ConsumerTx
from groupcoord.groups.errors import Reject
from groupcoord.groups.lifecycle import (MEMBER_EXPIRED, MEMBER_FENCED, MEMBER_JOINED,
                                         MEMBER_LEFT, STATIC_REPLACED, Event)
from groupcoord.groups.modern import membership
from groupcoord.groups.modern.membership import LEAVE_EPOCH, STATIC_LEAVE_EPOCH
from groupcoord.groups.modern.reconcile import EMPTY_SET, STABLE, units_of_index
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.groups.timers import CONSUMER_SESSION as SESSION_TIMER
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as _E

__all__ = ["consumer_group_heartbeat", "validate_heartbeat", "find_member", "update_member",
           "heartbeat_response", "check_group_size", "note_joined", "fenced_event"]


def validate_heartbeat(config, req, version: int) -> None:
    """Kafka's request checks, in Kafka's order."""
    epoch = req.member_epoch
    if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and _blank(req.member_id):
        raise Reject(_E.INVALID_REQUEST, "MemberId can't be empty.")
    if _blank(req.group_id):
        raise Reject(_E.INVALID_REQUEST, "GroupId can't be empty.")
    if req.instance_id is not None and _blank(req.instance_id):
        raise Reject(_E.INVALID_REQUEST, "InstanceId can't be empty.")
    if req.rack_id is not None and _blank(req.rack_id):
        raise Reject(_E.INVALID_REQUEST, "RackId can't be empty.")
    if epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise Reject(_E.INVALID_REQUEST,
                         "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise Reject(_E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise Reject(_E.INVALID_REQUEST, "Either SubscribedTopicNames or "
                         "SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise Reject(_E.INVALID_REQUEST, "InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise Reject(_E.INVALID_REQUEST, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in config.consumer_assignors:
        raise Reject(_E.UNSUPPORTED_ASSIGNOR, "ServerAssignor %s is not supported. Supported "
                     "assignors: %s." % (req.server_assignor,
                                         ", ".join(config.consumer_assignors)))
    rx = req.subscribed_topic_regex
    if rx:
        try:
            re.compile(rx)
        except re.error as exc:
            raise Reject(_E.INVALID_REGULAR_EXPRESSION,
                         "SubscribedTopicRegex `%s` is not a valid regular expression: %s."
                         % (rx, exc)) from None


def _blank(s: Optional[str]) -> bool:
    return s is None or not s.strip()


def check_group_size(tx: ConsumerTx, member_id: str) -> None:
    g = tx.group
    limit = tx.shard.config.consumer_max_size
    if g is not None and len(g.members) >= limit and (not member_id
                                                      or member_id not in g.members):
        raise Reject(_E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                     "capacity of %d members." % limit)


def new_member_id(tx: ConsumerTx) -> str:
    """v0: the coordinator names a joining member (deterministically, see ids.py)."""
    g = tx.group
    return ids.generated_id(tx.group_id, tx.now, g.epoch if g else 0,
                            len(g.members) if g else 0)


def find_member(tx: ConsumerTx, member_id: str, epoch: int, instance_id: Optional[str],
                owned: Optional[frozenset]):
    """The member's metadata before this heartbeat (None: a new member). Checks its epoch;
    replaces a departed static member when a new member id takes its instance id."""
    g = tx.group
    mem = g.members.get(member_id) if g is not None else None
    if instance_id is None:
        if mem is None:
            if epoch != JOIN_EPOCH:
                raise Reject(_E.UNKNOWN_MEMBER_ID, "Member %s is not a member of group %s."
                             % (member_id, tx.group_id))
            return None
        membership.check_epoch(mem.a, epoch, owned)
        return mem.meta
    holder_id = g.static.get(instance_id) if g is not None else None
    holder = g.members[holder_id] if holder_id is not None else None
    if epoch == JOIN_EPOCH:
        if holder is None:
            if mem is not None:
                membership.check_epoch(mem.a, epoch, owned)
                return mem.meta
            return None
        membership.check_instance_free(holder_id, holder.a, instance_id)
        replace_static_member(tx, holder, member_id)
        return holder.meta
    membership.check_instance_holder(holder_id, member_id, instance_id)
    membership.check_epoch(holder.a, epoch, owned)
    return holder.meta


def replace_static_member(tx: ConsumerTx, old: Member, new_id: str) -> None:
    """Kafka's static replacement: the new member id takes over the old member's metadata,
    target and current assignment (member epoch 0), the old member is removed, and no
    rebalance happens (the subscription does not change)."""
    old_id = old.member_id
    target = tx.target(old_id)
    if old_id != new_id:
        tx.remove(old_id)
    tx.fresh.add(new_id)
    tx.stage_meta(new_id, old.meta)
    tx.assignments[new_id] = old.a._replace(epoch=0, previous_epoch=0)
    if target is not None and old_id != new_id:
        tx.put_target(new_id, target)


def updated_meta(base, req, ctx):
    """The member's metadata after this heartbeat: null request fields leave a value as it
    was; an empty regex means no regex; topic names are kept sorted and unique."""
    b = base if base is not None else EMPTY_META
    names = b.subscribed_topic_names
    if req.subscribed_topic_names is not None:
        names = sorted(set(req.subscribed_topic_names))
    regex = b.subscribed_topic_regex
    if req.subscribed_topic_regex is not None:
        regex = req.subscribed_topic_regex or None
    return _MetaValue(
        instance_id=req.instance_id if req.instance_id is not None else b.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else b.rack_id,
        client_id=ctx.client_id, client_host=ctx.client_host,
        subscribed_topic_names=names, subscribed_topic_regex=regex,
        rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                              else b.rebalance_timeout_ms),
        server_assignor=(req.server_assignor if req.server_assignor is not None
                         else b.server_assignor),
        classic_member_metadata=b.classic_member_metadata)


def update_member(tx: ConsumerTx, member_id: str, base, meta, replaced: bool) -> None:
    """Write the metadata if it changed; bump the group epoch when a member joins (not a
    static replacement) or changes what the assignment depends on."""
    tx.put_meta(member_id, meta)
    tx.why = ("join" if base is None else "subscription", member_id)
    if base is None:
        bump = not replaced
    else:
        bump = (base.subscribed_topic_names != meta.subscribed_topic_names
                or base.subscribed_topic_regex != meta.subscribed_topic_regex
                or base.server_assignor != meta.server_assignor
                or base.rack_id != meta.rack_id)
    if bump:
        tx.refresh_subscriptions()
        tx.bump()


def note_joined(tx: ConsumerTx, at: int, member_id: str, previous: Optional[str],
                ctx) -> None:
    """The lifecycle event of a member new to the group, once update_member staged it: it
    joined, or it took over the instance id of static member ``previous``, which is fenced.
    Placed at ``at`` in tx.events (their length before update_member), before the
    rebalance it starts."""
    meta = tx.meta(member_id)
    tx.events.insert(at, Event(kind=STATIC_REPLACED if previous is not None else MEMBER_JOINED,
                  group=tx.group_id, type="consumer", member=member_id,
                  instance=meta.instance_id, epoch=tx.epoch, client=ctx.client_id,
                  host=ctx.client_host, previous=previous or ""))


def fenced_event(shard, group_id: str, member_id: str, instance_id: Optional[str],
                 member_epoch: int, code: int) -> tuple:
    """The lifecycle event of a request refused because its member is fenced (a stale
    member epoch, or an instance id another member holds), as Result.events; () for any
    other refusal."""
    if code == _E.FENCED_MEMBER_EPOCH:
        reason = "stale-epoch"
    elif code == _E.FENCED_INSTANCE_ID:
        reason = "instance-taken"
    else:
        return ()
    g = shard.groups.get(group_id)
    return (Event(kind=MEMBER_FENCED, group=group_id, type=g.TYPE if g is not None else "",
                  member=member_id or "", instance=instance_id,
                  epoch=getattr(g, "epoch", getattr(g, "generation", -1)), reason=reason,
                  member_epoch=member_epoch),)


def heartbeat_response(tx: ConsumerTx, member_id: str, step) -> m.ConsumerGroupHeartbeatResponse:
    assignment = None
    if step.send:
        assignment = m.ConsumerGroupHeartbeatResponseAssignment(
            topic_partitions=tx.topic_partitions(
                step.nxt.assigned, m.ConsumerGroupHeartbeatResponseTopicPartitions))
    return m.ConsumerGroupHeartbeatResponse(
        member_id=member_id, member_epoch=step.nxt.epoch,
        heartbeat_interval_ms=group_config.consumer_intervals(tx.shard, tx.group_id)[1],
        assignment=assignment)


def consumer_group_heartbeat(shard, req, ctx) -> Result:
    fast = _steady_heartbeat(shard, req, ctx)
    if fast is not None:
        return fast
    try:
        validate_heartbeat(shard.config, req, ctx.version)
        if req.member_epoch < 0:
            return _leave(shard, req, ctx)
        return _heartbeat(shard, req, ctx)
    except Reject as rej:
        return Result(m.ConsumerGroupHeartbeatResponse(error_code=rej.code,
                                                       error_message=rej.message),
                      events=fenced_event(shard, req.group_id, req.member_id, req.instance_id,
                                          req.member_epoch, rej.code))


def _steady_heartbeat(shard, req, ctx) -> Optional[Result]:
    """The hot path: a STABLE member at the target epoch that changes nothing (optional
    fields null or equal to what the coordinator has; owned partitions, if reported, exactly
    its assignment). A few dict and attribute reads, one response, one session-timer op, no
    record. Anything else takes the general path, which gives the same answer."""
    g = shard.groups.get(req.group_id)
    if g.__class__ is not ConsumerGroup:
        return None
    mem = g.members.get(req.member_id)
    if mem is None:
        return None
    a = mem.a
    epoch = a.epoch
    if (req.member_epoch != epoch or epoch != g.target_epoch or g.epoch != epoch
            or a.state != STABLE or req.member_id in g.unconfirmed):
        return None
    owned = req.topic_partitions
    if owned is not None and not _owns_exactly(g.topic_ix, owned, a.assigned):
        return None                    # the response must carry the assignment
    meta = mem.meta
    if ((req.subscribed_topic_names is not None
         and req.subscribed_topic_names != meta.subscribed_topic_names)
            or (req.subscribed_topic_regex is not None
                and req.subscribed_topic_regex != (meta.subscribed_topic_regex or ""))
            or (req.instance_id is not None and req.instance_id != meta.instance_id)
            or (req.rack_id is not None and req.rack_id != meta.rack_id)
            or (req.server_assignor is not None and req.server_assignor != meta.server_assignor)
            or (req.rebalance_timeout_ms != -1
                and req.rebalance_timeout_ms != meta.rebalance_timeout_ms)
            or ctx.client_id != meta.client_id or ctx.client_host != meta.client_host):
        return None
    # The group's own settings (admin.py, IncrementalAlterConfigs) or the node's.
    session, interval = group_config.consumer_intervals(shard, req.group_id)
    return Result(m.ConsumerGroupHeartbeatResponse(
        member_id=req.member_id, member_epoch=epoch, heartbeat_interval_ms=interval),
        (), ((mem.session_key, ctx.now_ms + session),))


def _owns_exactly(topic_ix: dict, owned, assigned: frozenset) -> bool:
    units = []
    for tp in owned:
        ix = topic_ix.get(tp.topic_id)
        if ix is None:
            if tp.partitions:
                return False
            continue
        units.extend(units_of_index(ix, tp.partitions))
    return len(units) == len(assigned) and frozenset(units) == assigned


def _heartbeat(shard, req, ctx) -> Result:
    epoch = req.member_epoch
    joining = epoch == JOIN_EPOCH
    tx = ConsumerTx.open(shard, req.group_id, ctx.now_ms, create=joining)
    check_group_size(tx, req.member_id)
    member_id = req.member_id or new_member_id(tx)
    owned = EMPTY_SET if joining else tx.owned_units(req.topic_partitions)
    holder = tx.group.static.get(req.instance_id) if tx.group is not None \
        and req.instance_id is not None else None
    base = find_member(tx, member_id, epoch, req.instance_id, owned)
    replaced = member_id in tx.fresh
    at = len(tx.events)
    update_member(tx, member_id, base, updated_meta(base, req, ctx), replaced)
    if base is None or replaced:
        note_joined(tx, at, member_id, holder if replaced else None, ctx)
    ensure_target(tx)
    step = tx.reconcile(member_id, owned, joining, known=base is not None and not replaced)
    tx.timers.append((TimerKey(SESSION_TIMER, tx.group_id, member_id),
                        ctx.now_ms + group_config.consumer_session_ms(shard, tx.group_id)))
    return tx.result(heartbeat_response(tx, member_id, step))


def _leave(shard, req, ctx) -> Result:
    """Epoch -1: the member leaves (removed, epoch bump). Epoch -2: a static member leaves
    for a while: it keeps its assignment (pending revocations dropped) at epoch -2."""
    tx = ConsumerTx.open(shard, req.group_id, ctx.now_ms, create=False)
    g = tx.group
    if req.instance_id is None:
        mem = g.members.get(req.member_id)
        if mem is None:
            raise Reject(_E.UNKNOWN_MEMBER_ID, "Member %s is not a member of group %s."
                         % (req.member_id, req.group_id))
    else:
        holder_id = g.static.get(req.instance_id)
        membership.check_instance_holder(holder_id, req.member_id, req.instance_id)
        mem = g.members[holder_id]
    mid = mem.member_id
    if req.member_epoch == STATIC_LEAVE_EPOCH:
        tx.put_assignment(mid, mem.a._replace(epoch=STATIC_LEAVE_EPOCH,
                                                pending_revocation=EMPTY_SET))
        tx.timers.append((_revocation_key(tx.group_id, mid), None))
    else:
        tx.fence(mid)
        _after_fence(tx, mid)
    # First among the events: the rebalance it starts follows.
    tx.events.insert(0, Event(
        kind=MEMBER_LEFT, group=tx.group_id, type="consumer", member=mid,
        instance=mem.meta.instance_id, epoch=tx.epoch,
        reason="static-leave" if req.member_epoch == STATIC_LEAVE_EPOCH else ""))
    return tx.result(m.ConsumerGroupHeartbeatResponse(member_id=mid,
                                                        member_epoch=req.member_epoch))


def _after_fence(tx: ConsumerTx, member_id: str) -> None:
    """The last member using the consumer protocol left: maybe downgrade (consumer/migration.py)."""
    migration.maybe_downgrade(tx, member_id)


def _member_timer(shard, key: TimerKey, now_ms: int, want_unrevoked: bool) -> Result:
    """A member's session or revocation deadline passed: it is fenced (then maybe the group
    downgrades), unless it is gone or, for the revocation timer, no longer revoking."""
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ConsumerGroup):
        return EMPTY
    mem = g.members.get(key.member_id)
    if not membership.expiry_removes(mem.a if mem is not None else None, want_unrevoked):
        return EMPTY
    tx = ConsumerTx(shard, key.group_id, g, now_ms)
    reason = "revocation-timeout" if want_unrevoked else "session-expired"
    tx.fence(key.member_id, reason)
    _after_fence(tx, key.member_id)
    tx.events.insert(0, Event(kind=MEMBER_EXPIRED, group=key.group_id, type="consumer",
                              member=mem.member_id, instance=mem.meta.instance_id,
                              epoch=tx.epoch, reason=reason))
    return tx.result(None)


def _session_expired(shard, key: TimerKey, now_ms: int) -> Result:
    return _member_timer(shard, key, now_ms, False)


def _revocation_expired(shard, key: TimerKey, now_ms: int) -> Result:
    return _member_timer(shard, key, now_ms, True)
