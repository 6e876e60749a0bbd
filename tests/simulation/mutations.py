"""Known bugs planted (by monkeypatching, for the duration of one run) to check the checkers:
the simulator must find each within a stated number of seeds (test_simulation.py).

    grant-before-revoke  reconciliation hands a member units still held by another member
                         (ignores the holders map): two members run one unit.
    accept-stale-epoch   the coordinator accepts an older member epoch / generation: on
                         heartbeats (any older epoch passes the fencing check) and on
                         OffsetCommit, so a stale member's late commit overwrites a newer one.
    ack-before-fsync     the runtime answers as soon as a request is applied, before its
                         records are durable: a crash loses acknowledged writes.
    no-timer-rearm       a shard loaded from its log does not re-arm its timers: members that
                         died before a coordinator restart are never expired (liveness).

Fixed findings, planted back (docs/simulation.md, Findings): their regression tests, which
keep working when the simulator's trajectories change (a fixed seed may stop reaching the
interleaving; a mutation must still be found within N seeds).

    fenced-removes-worker  finding 1: a connect heartbeat at a stale epoch removes the worker
                         (the seed's rule): a late copy evicts a live worker.
    stale-claims-given   finding 3: the SDK's cooperative-sticky leader gives a unit that
                         only an older-generation member claims to someone else at once.
    rejoin-acks-revocation  finding 8: a connect heartbeat at epoch 0 from a known worker (a
                         late copy of its first join) acknowledges a pending revocation with
                         its stale owned set: the work goes to another worker while it runs.
    unconfirmed-forgotten  finding 9: a connect worker's assignment change travels in one
                         answer only (as Kafka's rule): when that answer went to a late copy
                         of a request, the worker never hears of the work (liveness).
    owned-unreported     finding 10: the SDK's consumer member reports its owned partitions
                         only when they changed (Kafka's rule), not after an answer with an
                         assignment equal to them: a revocation of partitions it never heard
                         of (given by an answer to a late copy) is never acknowledged, and the
                         revocation timeout gives the rest away while it runs them.
    consumer-unconfirmed-forgotten  finding 10, the coordinator's half: a consumer member's
                         assignment change travels in one answer only (liveness).
    kafka-rules-only     both halves of finding 10 (Kafka's rules on both sides): an answer
                         with partitions released to a member that went to a late copy of
                         its request reaches it neither by a repeat nor by a report (liveness).
    revoked-keeps-epoch  finding 11: a consumer member that acknowledges a revocation but
                         must revoke more (the target moved meanwhile) keeps its epoch instead
                         of moving to epoch + 1 (Kafka's rule): a late commit it sent before
                         it released partitions passes the epoch check and overwrites the
                         offsets of their new owner.
    append-without-epoch-check  (cluster mode) the store log's group commit skips the epoch
                         check (PgShardLog._check_epoch): a node that lost its lease (a zombie
                         after a pause) still commits writes.
    serve-after-lease-expiry  (cluster mode) a node keeps serving a shard past its lease
                         deadline (LeaseMachine.serving ignores it): a zombie answers from the
                         state it had before another node took the shard over.

    stale-join-counted   finding 12: a classic JoinGroup copy sent before the member synced
                         a newer generation (its subscription's generation is older) counts
                         as its rejoin: the generation completes without it and an eager
                         member's partitions go to others while it runs them.
"""
from __future__ import annotations

import contextlib

import numpy as np

from groupcoord.assign import classic as client_assign
from groupcoord.cluster import leases
from groupcoord.client import members_consumer_state as kst
from groupcoord.groups.connect import group as connect_group
from groupcoord.groups.connect import heartbeat as connect
from groupcoord.groups.consumer import group as consumer
from groupcoord.groups.classic import handlers as classic_handlers
from groupcoord.groups.classic.group import ClassicGroup
from groupcoord.groups.modern import reconcile
from groupcoord.groups.shard import Shard
from groupcoord.groups.tx import GroupTx
from groupcoord.runtime.shard_runtime import ShardRuntime
from groupcoord.storage.pg_log import PgShardLog

__all__ = ["MUTATIONS"]


@contextlib.contextmanager
def _patched(*triples):
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in triples]
    try:
        for obj, name, value in triples:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def grant_before_revoke():
    def _compute(cur, target_epoch, target, holders, me):
        assigned = cur.assigned
        revoke = assigned - target
        if revoke:
            return reconcile.MemberAssignment(cur.epoch, cur.epoch, reconcile.UNREVOKED,
                                              assigned & target, revoke)
        # BUG: every new unit is handed out at once, held by someone else or not.
        return reconcile.MemberAssignment(target_epoch, cur.epoch, reconcile.STABLE,
                                          assigned | target, reconcile.EMPTY_SET)
    return _patched((reconcile, "_compute", _compute))


def accept_stale_epoch():
    # Every group type checks through modern/membership.py, which calls
    # reconcile.check_member_epoch through the module: patching reconcile covers them all.
    orig = reconcile.check_member_epoch

    def check(cur, received, owned):
        if received < cur.epoch:
            return 0                                   # BUG: an older epoch is fine
        return orig(cur, received, owned)

    def consumer_commit(self, member_id, instance_id, epoch, version):
        mem = self.members.get(member_id)
        if mem is not None and 0 <= epoch < mem.a.epoch:
            return 0                                   # BUG
        return orig_consumer(self, member_id, instance_id, epoch, version)

    def classic_commit(self, member_id, instance_id, generation, version):
        if member_id in self.members and 0 <= generation < self.generation:
            return 0                                   # BUG
        return orig_classic(self, member_id, instance_id, generation, version)

    orig_consumer = consumer.ConsumerGroup.validate_offset_commit
    orig_classic = ClassicGroup.validate_offset_commit
    return _patched((reconcile, "check_member_epoch", check),
                    (consumer.ConsumerGroup, "validate_offset_commit", consumer_commit),
                    (ClassicGroup, "validate_offset_commit", classic_commit))


def ack_before_fsync():
    def _release(self, w):
        if not w.future.done():
            w.future.set_result(w.response)            # BUG: durable or not
    return _patched((ShardRuntime, "_release", _release))


def no_timer_rearm():
    return _patched((Shard, "rearm", lambda self, now_ms: None))


def fenced_removes_worker():
    orig = connect._join_or_heartbeat

    def join_or_heartbeat(g, req, ctx, cfg):
        res = orig(g, req, ctx, cfg)
        if res.response.error_code == int(connect.E.FENCED_MEMBER_EPOCH) \
                and req.member_id in g.members:
            # BUG (the seed's rule): the member is also removed from the group.
            tx = GroupTx(g.group_id, ctx.now_ms)
            connect.remove_worker(tx, g, req.member_id, cfg)
            return tx.result(res.response)
        return res
    return _patched((connect, "_join_or_heartbeat", join_or_heartbeat))


def stale_claims_given():
    orig = client_assign.cooperative_sticky

    def cooperative_sticky(ppt, sip, subs, oip, owned, generation, **kw):
        r = orig(ppt, sip, subs, oip, owned, generation, **kw)
        gen = np.asarray(generation)
        top = gen.max() if gen.size else 0
        current = np.zeros(r.final_owner.size, bool)     # units a top-generation member claims
        for m in np.flatnonzero(gen == top):
            u = np.asarray(owned[oip[m]:oip[m + 1]])
            current[u[(u >= 0) & (u < current.size)]] = True
        target = r.target_owner.copy()
        free = (target == -1) & (r.final_owner >= 0) & ~current
        target[free] = r.final_owner[free]             # BUG: stale claims withhold nothing
        return client_assign.StickyResult(target, r.final_owner)
    return _patched((client_assign, "cooperative_sticky", cooperative_sticky))


def rejoin_acks_revocation():
    # BUG: any owned set acknowledges.
    return _patched((reconcile, "acknowledging", lambda owned, rejoin: owned))


class _Forgetful(set):
    def add(self, _item):
        pass                                           # BUG: nothing is ever unconfirmed


def unconfirmed_forgotten():
    orig = connect_group.ConnectGroup.__init__

    def init(self, group_id):
        orig(self, group_id)
        self.unconfirmed = _Forgetful()
    return _patched((connect_group.ConnectGroup, "__init__", init))


def consumer_unconfirmed_forgotten():
    orig = consumer.ConsumerGroup.__init__

    def init(self, group_id, config):
        orig(self, group_id, config)
        self.unconfirmed = _Forgetful()
    return _patched((consumer.ConsumerGroup, "__init__", init))


def owned_unreported():
    orig = kst.ConsumerMemberState.on_heartbeat_response

    def on_heartbeat_response(self, req, resp):
        in_flight = self._in_flight
        out = orig(self, req, resp)
        if self._sent is not None and "owned" in self._sent and self._sent["owned"] is None:
            self._sent = in_flight             # BUG: owned reported only when it changed
        return out
    return _patched((kst.ConsumerMemberState, "on_heartbeat_response", on_heartbeat_response))


def kafka_rules_only():
    # Both halves of finding 10 at once: each alone is enough for some seeds (204972).
    cm = contextlib.ExitStack()
    cm.enter_context(consumer_unconfirmed_forgotten())
    cm.enter_context(owned_unreported())
    return cm


def revoked_keeps_epoch():
    # BUG: the epoch stays where it was until the last revocation is acknowledged.
    return _patched((reconcile, "revoked_moves_epoch", lambda cur, nxt, target_epoch: nxt))


def stale_join_counted():
    # BUG: no late JoinGroup copy is recognised (Kafka's classic coordinator has no check).
    return _patched((classic_handlers, "_stale_join", lambda mb, ptype, protocols: False))


def append_without_epoch_check():
    async def _check_epoch(self, conn):
        return None                                    # BUG: whoever holds the lease
    return _patched((PgShardLog, "_check_epoch", _check_epoch))


def serve_after_lease_expiry():
    def serving(self, shard, now):
        return self._shards[shard].state is leases.State.OWNED     # BUG: deadline ignored
    return _patched((leases.LeaseMachine, "serving", serving))


MUTATIONS = {
    "grant-before-revoke": grant_before_revoke,
    "accept-stale-epoch": accept_stale_epoch,
    "ack-before-fsync": ack_before_fsync,
    "no-timer-rearm": no_timer_rearm,
    "fenced-removes-worker": fenced_removes_worker,
    "stale-claims-given": stale_claims_given,
    "rejoin-acks-revocation": rejoin_acks_revocation,
    "unconfirmed-forgotten": unconfirmed_forgotten,
    "consumer-unconfirmed-forgotten": consumer_unconfirmed_forgotten,
    "owned-unreported": owned_unreported,
    "kafka-rules-only": kafka_rules_only,
    "revoked-keeps-epoch": revoked_keeps_epoch,
    "stale-join-counted": stale_join_counted,
    "append-without-epoch-check": append_without_epoch_check,
    "serve-after-lease-expiry": serve_after_lease_expiry,
}
