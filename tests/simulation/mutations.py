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
"""
from __future__ import annotations

import contextlib

from groupcoord.coordinator import classic, consumer, reconcile
from groupcoord.coordinator.shard import Shard
from groupcoord.runtime.shard_runtime import ShardRuntime

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
    # connect.py calls rc.check_member_epoch through the module: patching reconcile covers it;
    # consumer.py imported the function by name: patched there too.
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
    orig_classic = classic.ClassicGroup.validate_offset_commit
    return _patched((reconcile, "check_member_epoch", check),
                    (consumer, "check_member_epoch", check),
                    (consumer.ConsumerGroup, "validate_offset_commit", consumer_commit),
                    (classic.ClassicGroup, "validate_offset_commit", classic_commit))


def ack_before_fsync():
    def _release(self, w):
        if not w.future.done():
            w.future.set_result(w.response)            # BUG: durable or not
    return _patched((ShardRuntime, "_release", _release))


def no_timer_rearm():
    return _patched((Shard, "rearm", lambda self, now_ms: None))


MUTATIONS = {
    "grant-before-revoke": grant_before_revoke,
    "accept-stale-epoch": accept_stale_epoch,
    "ack-before-fsync": ack_before_fsync,
    "no-timer-rearm": no_timer_rearm,
}
