"""The safety invariants, checked as the simulation runs (after every event that can break
them), and the liveness check of the calm phase.

Safety (each raises `InvariantViolation(name, detail)` at once):

* exclusive          no unit (partition, connector, task) is run by two live members of a
                     group at the same time; "run" is the member's own view (held from the
                     start of its assigned callback to the end of its revoked/lost callback).
* coordinator-exclusive  the coordinator never has a unit held (assigned or pending
                     revocation) by two members of a group (checked after each heartbeat).
* epoch              a member never runs units at an epoch (classic: generation) newer than
                     the newest the coordinator issued to it.
* durability         after every (re)load of a shard: the log holds everything the shard
                     acknowledged (recovered end >= highest offset an answer waited for), and
                     every record that was durable (fsynced) before the crash is still there
                     (per key: the same record, or a newer one; a tombstone may be compacted).
* offsets            a committed offset never goes backwards, except when the same member at
                     the same epoch wrote both values (its own commits reordered across
                     connections: the protocol does not order those). A lower value written by
                     another member, or by an older epoch, means a stale commit was accepted.
* no-internal-error  the coordinator never logs a handler/replay/timer exception, never
                     answers UNKNOWN_SERVER_ERROR, and every shard loads.
* operator           (with operator actions) DeleteGroups never deletes a group that has
                     members at the coordinator; OffsetDelete never deletes the offsets of a
                     topic the group's members subscribe to, and is refused NON_EMPTY_GROUP
                     by a connect group with members.

Cluster mode (cluster.py, over the simulated store of store.py), also:

* lease              a node answers for a shard only while the store says it holds the
                     shard's lease, unexpired by the store's clock, and nobody else was
                     granted it since the epoch the node loaded at (checked on every request a
                     node's shard runs).
* fencing            every write that commits in the store is made by the shard's lease
                     holder at its current epoch (the store's oracle, at the commit), and no two
                     writers ever write the same offsets (a unique violation).
* durability         at every load of a shard by any node: its rows reach at least the highest
                     offset any node's released answer waited for, and every acknowledged
                     offset commit is there (that value or a higher one; lower only when the
                     same member at the same epoch wrote it); at the end, again, from the store.

Liveness (`converged`): in the calm phase every group reaches a valid, balanced target: every
unit run by exactly one live member, every live member stable at the coordinator's epoch,
and per-member counts within one of each other.
"""
from __future__ import annotations

import logging
from collections import Counter

from groupcoord.client.members_common import TopicPartition
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.shards import shard_for

from tests.simulation.members import parse_meta

__all__ = ["InvariantViolation", "Checker", "ErrorLogWatcher", "converged"]

_HEARTBEATS = (m.ConsumerGroupHeartbeatRequest, m.ConnectGroupHeartbeatRequest,
               m.ConnectGroupInstallAssignmentRequest)


class InvariantViolation(AssertionError):
    def __init__(self, name: str, detail: str):
        super().__init__("%s: %s" % (name, detail))
        self.name = name
        self.detail = detail


class Checker:
    def __init__(self, sim):
        self.sim = sim
        self.holders: dict = {}       # (group id, unit) -> member
        self.issued: dict = {}        # (group id, member id) -> newest epoch/generation issued
        self.acked: dict = {}         # shard index -> highest offset an answer waited for
        self.expected: dict = {}      # shard index -> {key: (offset, value)} known durable
        self.offsets: dict = {}       # (group id, topic, partition) -> (offset, metadata)
        self.checks = 0
        # cluster mode: (group id, topic, partition) -> (offset, metadata) last acknowledged
        self.acked_commits: dict = {}
        # (group id, topic, partition) -> the shard's log end after an operator deleted it: a
        # commit appended below it and acknowledged later was deleted after it was written
        self.deleted_at: dict = {}

    def violate(self, name: str, detail: str):
        raise InvariantViolation(name, detail)

    # ---------------------------------------------------------------- members' own view
    def acquire(self, member, units, epoch: int) -> None:
        self.checks += 1
        gid = member.group.group_id
        newest = self.issued.get((gid, member.member_id))
        if newest is None or epoch > newest:
            self.violate("epoch", "%s (%s) runs %s at epoch %d; the coordinator issued it %s"
                         % (member.name, member.member_id, sorted(units)[:4], epoch, newest))
        for u in units:
            other = self.holders.get((gid, u))
            if other is not None and other is not member:
                self.violate("exclusive", "group %s: unit %r run by %s (epoch %d) and %s "
                             "(epoch %d)" % (gid, u, other.name, other.epoch_of_own,
                                             member.name, epoch))
            self.holders[(gid, u)] = member

    def release(self, member, units) -> None:
        gid = member.group.group_id
        for u in units:
            if self.holders.get((gid, u)) is member:
                del self.holders[(gid, u)]

    # ---------------------------------------------------------------- at the node
    def observe_response(self, gid: str, req, resp) -> None:
        """What the coordinator issued: epochs (KIP-848 / connect) and generations."""
        if isinstance(resp, m.ConsumerGroupHeartbeatResponse):
            if resp.error_code == 0:
                self._issue(gid, resp.member_id or req.member_id, resp.member_epoch)
        elif isinstance(resp, m.ConnectGroupHeartbeatResponse):
            if resp.error_code in (0, E.COMPUTE_ASSIGNMENT):
                self._issue(gid, resp.member_id or req.member_id, resp.member_epoch)
        elif isinstance(resp, m.JoinGroupResponse):
            if resp.error_code == 0:
                self._issue(gid, resp.member_id, resp.generation_id)
        if getattr(resp, "error_code", 0) == E.UNKNOWN_SERVER_ERROR:
            self.sim.fail("no-internal-error: %s answered UNKNOWN_SERVER_ERROR (%s)"
                          % (type(req).__name__, getattr(resp, "error_message", "")))

    def _issue(self, gid, mid, epoch) -> None:
        k = (gid, mid)
        if epoch > self.issued.get(k, -1):
            self.issued[k] = epoch

    def after_request(self, rt, gid: str, req) -> None:
        shard = rt.shard
        if shard is None:
            return
        if isinstance(req, _HEARTBEATS):
            self.checks += 1
            g = shard.groups.get(gid)
            held = g.held_units() if g is not None else None
            if held:
                seen: dict = {}
                for mid, units in held.items():
                    for u in units:
                        o = seen.setdefault(u, mid)
                        if o != mid:
                            self.violate("coordinator-exclusive", "group %s: unit %r held by "
                                         "%s and %s" % (gid, u, o, mid))
        elif isinstance(req, m.OffsetCommitRequest):
            self.checks += 1
            self._offsets(gid, shard.offsets.get(gid) or {})

    def _offsets(self, gid: str, current: dict) -> None:
        for (topic, p), v in current.items():
            k = (gid, topic, p)
            prev = self.offsets.get(k)
            now = (v.offset, v.metadata)
            if prev is not None and now[0] < prev[0]:
                a, b = parse_meta(prev[1]), parse_meta(now[1])
                if a is None or b is None or a != b:
                    self.violate("offsets", "group %s %s-%d went back from %d (%s) to %d (%s)"
                                 % (gid, topic, p, prev[0], prev[1], now[0], now[1]))
            self.offsets[k] = now

    # ---------------------------------------------------------------- operator actions
    def after_operator(self, spec, req, members: bool, held: dict, shard,
                       log_end: int = None) -> None:
        """The shard applied the admin request at once: offsets it deleted leave the offsets
        invariant's memory (the group's members may start afresh below them). log_end: the
        shard's log end after it (its tombstones are below)."""
        gid = spec.group_id
        now = shard.offsets.get(gid) or {} if shard is not None else held
        for (topic, p) in held:
            if (topic, p) not in now:
                self.offsets.pop((gid, topic, p), None)
                self.acked_commits.pop((gid, topic, p), None)
                if log_end is not None:
                    self.deleted_at[(gid, topic, p)] = log_end

    def operator_answer(self, spec, req, resp, members: bool) -> None:
        self.checks += 1
        gid = spec.group_id
        if isinstance(req, m.DeleteGroupsRequest):
            (res,) = resp.results
            if res.error_code == E.UNKNOWN_SERVER_ERROR:
                self.sim.fail("no-internal-error: DeleteGroups answered UNKNOWN_SERVER_ERROR")
            elif res.error_code == 0 and members:
                self.violate("operator", "DeleteGroups deleted group %s, which had members"
                             % gid)
            elif res.error_code == 0:
                self.sim.stats["operator_groups_deleted"] += 1
            return
        if resp.error_code == E.UNKNOWN_SERVER_ERROR:
            self.sim.fail("no-internal-error: OffsetDelete answered UNKNOWN_SERVER_ERROR")
        self.sim.stats["operator_offset_partitions_ok"] += sum(
            1 for t in resp.topics for p in t.partitions if p.error_code == 0)
        if resp.error_code or not members:
            return
        if spec.kind == "connect":
            self.violate("operator", "OffsetDelete of connect group %s with members was not "
                         "refused" % gid)
        for t in resp.topics:
            if t.name not in spec.topics:
                continue
            for p in t.partitions:
                if p.error_code != E.GROUP_SUBSCRIBED_TO_TOPIC:
                    self.violate("operator", "OffsetDelete of %s-%d answered %d for group %s, "
                                 "whose members subscribe to %s" % (t.name, p.partition_index,
                                                                    p.error_code, gid, t.name))

    def note_ack(self, index: int, offset: int) -> None:
        if offset > self.acked.get(index, 0):
            self.acked[index] = offset

    # ---------------------------------------------------------------- durability
    def capture(self, rt) -> None:
        """Remember what the shard's log holds durably (before a crash or a failure): the last
        record of every key. The whole log is read, not only what is new, because compaction
        may have dropped tombstones (and what they deleted) meanwhile."""
        lg = rt.log
        if lg is None:
            return
        last = {}
        for off, key, value in lg.read(0):
            last[key] = (off, value)
        self.expected[rt.index] = last

    def on_loaded(self, rt) -> None:
        self.checks += 1
        i, lg = rt.index, rt.log
        acked = self.acked.get(i, 0)
        if lg.next_offset < acked:
            self.violate("durability", "shard %d acknowledged writes up to offset %d but its "
                         "recovered log ends at %d" % (i, acked, lg.next_offset))
        last = {}
        for off, key, value in lg.read(0):
            last[key] = (off, value)
        for key, (off, value) in self.expected.get(i, {}).items():
            got = last.get(key)
            if got is None:
                if value is None:
                    continue                    # a tombstone compaction may drop
                self.violate("durability", "shard %d lost the durable record at offset %d "
                             "(key %r)" % (i, off, key[:24]))
            if got[0] < off or (got[0] == off and got[1] != value):
                self.violate("durability", "shard %d: key %r was at offset %d, recovered at "
                             "%d%s" % (i, key[:24], off, got[0],
                                        " with another value" if got[0] == off else ""))
        # Whatever recovery kept is durable now (the crash image is the disk).
        self.expected[i] = last
        # Offsets as recovered are the new baseline (a lost unacknowledged commit is fine).
        for (gid, topic, p) in [k for k in self.offsets if k[0] in rt.shard.offsets
                                or k[0] in rt.shard.groups]:
            self.offsets.pop((gid, topic, p), None)
        for gid, tps in rt.shard.offsets.items():
            for (topic, p), v in tps.items():
                self.offsets[(gid, topic, p)] = (v.offset, v.metadata)


    # ---------------------------------------------------------------- cluster mode
    def on_serve(self, node, index: int, epoch: int) -> None:
        """A node's shard is about to run a request: the node must hold the lease."""
        self.checks += 1
        store = self.sim.node.store
        if not store.holds(node.node_id, index, epoch):
            owner, e, expires = store.rows[index]
            self.violate("lease", "node %d serves shard %d at epoch %d, but the store's lease "
                         "is %s at epoch %d%s (grants %s)" % (
                             node.node_id, index, epoch,
                             "nobody's" if owner is None else "node %d's" % owner, e,
                             "" if expires is None or expires > store.now_us
                             else ", expired %d ms ago" % ((store.now_us - expires) // 1000),
                             sorted(store.grants[index].items())[-4:]))

    def on_store_write(self, node_id: int, shard: int, epoch: int, what: str) -> None:
        """A write commits in the store: the writer must hold the shard at that epoch."""
        self.checks += 1
        owner, e, _x = self.sim.node.store.rows[shard]
        if owner != node_id or e != epoch:
            self.violate("fencing", "node %d committed a write (%s) to shard %d at epoch %d "
                         "while the store's lease is %s at epoch %d"
                         % (node_id, what, shard, epoch,
                            "nobody's" if owner is None else "node %d's" % owner, e))

    def on_store_conflict(self, node_id: int, shard: int, base: int) -> None:
        self.violate("fencing", "node %d wrote shard %d at offset %d, which another write "
                     "already holds (two writers)" % (node_id, shard, base))

    def note_commit_ack(self, gid: str, req, resp, log_end: int) -> None:
        """An OffsetCommit's answer was released: what it acknowledged must survive, unless
        an operator deleted it after it was appended (log_end: the shard's log end after the
        commit): a commit slow to become durable is answered after a delete applied since
        (cluster seed 8 with --operator --liveness --cluster 4)."""
        if not isinstance(req, m.OffsetCommitRequest):
            return
        ok = {(t.name, p.partition_index) for t in resp.topics or () for p in t.partitions
              if p.error_code == 0}
        for t in req.topics or ():
            for p in t.partitions:
                k = (gid, t.name, p.partition_index)
                if (t.name, p.partition_index) in ok and log_end > self.deleted_at.get(k, -1):
                    self.acked_commits[k] = (p.committed_offset, p.committed_metadata)

    def check_acked(self, index: int, shard, shards: int, where: str) -> None:
        """Every acknowledged commit of the groups on shard `index` is in `shard`'s state."""
        for (gid, topic, p), (off, meta) in self.acked_commits.items():
            if shard_for(gid, shards) != index:
                continue
            v = (shard.offsets.get(gid) or {}).get((topic, p))
            if v is None:
                self.violate("durability", "%s: shard %d lost group %s's acknowledged commit "
                             "of %s-%d at %d" % (where, index, gid, topic, p, off))
            if v.offset < off and (parse_meta(v.metadata) is None
                                   or parse_meta(v.metadata) != parse_meta(meta)):
                self.violate("durability", "%s: shard %d has group %s's %s-%d at %d (%s), "
                             "below the acknowledged %d (%s)" % (where, index, gid, topic, p,
                                                                 v.offset, v.metadata, off,
                                                                 meta))

    def on_cluster_loaded(self, rt, node) -> None:
        """A node loaded a shard from the store (a takeover, a hand-off, a reload)."""
        i, lg = rt.index, rt.log
        if not self.sim.node.store.holds(node.node_id, i, rt.epoch):
            # Loaded from a snapshot taken under the lease, which is gone by now (a pause, a
            # slow store): stale, and never served (the lease check holds that).
            self.sim.trace("check", "n%d's load of shard %d at epoch %d completed after its "
                           "lease" % (node.node_id, i, rt.epoch))
            return
        self.checks += 1
        acked = self.acked.get(i, 0)
        if lg.next_offset < acked:
            self.violate("durability", "node %d loaded shard %d at epoch %d: answers were "
                         "released for writes up to offset %d, but its rows end at %d"
                         % (node.node_id, i, rt.epoch, acked, lg.next_offset))
        self.check_acked(i, rt.shard, rt.config.shards, "node %d's load at epoch %d"
                         % (node.node_id, rt.epoch))
        # A delete above the loaded end was not durable: later appends reuse its offsets.
        for k in [k for k, end in self.deleted_at.items()
                  if end > lg.next_offset and shard_for(k[0], rt.config.shards) == i]:
            del self.deleted_at[k]
        # Offsets as loaded are the new baseline (an unacknowledged commit may be lost).
        for k in [k for k in self.offsets if k[0] in rt.shard.offsets
                  or k[0] in rt.shard.groups]:
            del self.offsets[k]
        for gid, tps in rt.shard.offsets.items():
            for (topic, p), v in tps.items():
                self.offsets[(gid, topic, p)] = (v.offset, v.metadata)


class ErrorLogWatcher(logging.Handler):
    """Turns the coordinator's internal-error log lines into simulation failures."""

    BAD = ("handler for ", "timer ", "replay failed", "assignor run", "compaction failed",
           "reload from")

    def __init__(self, sim):
        super().__init__(logging.ERROR)
        self.sim = sim

    def emit(self, record) -> None:
        try:
            msg = record.getMessage()
        except Exception:
            msg = str(record.msg)
        if "simulated" in msg:
            return          # an injected EIO reported as such (e.g. a compaction's fsync)
        if any(b in msg for b in self.BAD):
            self.sim.fail("no-internal-error: coordinator logged: %s%s" % (
                msg, " (%r)" % (record.exc_info[1],) if record.exc_info else ""))


# ====================================================================== liveness
def _balanced(counts: list) -> bool:
    return not counts or max(counts) - min(counts) <= 1


def converged(sim, spec) -> tuple:
    """-> (True, "") when the group reached a valid, balanced target, else (False, why)."""
    live = [x for x in spec.members if x.alive and x.fatal is None]
    node = sim.node
    rt = node.runtime_for(spec.group_id)
    if rt is None or rt.shard is None:
        return False, "shard not active"
    g = rt.shard.groups.get(spec.group_id)
    if not live:
        return True, ""
    if g is None:
        return False, "no group"
    if spec.kind == "connect":
        offset, conns = spec.config
        units = {(c, -1) for c in conns} | {(c, t) for c, n in conns.items() for t in range(n)}
    else:
        units = {TopicPartition(t, p) for t in spec.topics
                 for p in range(node.topics.get(t).partitions)}
    owned = Counter()
    for x in live:
        for u in x.own:
            owned[u] += 1
    if set(owned) != units or any(v != 1 for v in owned.values()):
        missing = len(units - set(owned))
        return False, "%d units not run, %d extra" % (missing, len(set(owned) - units))
    if spec.kind == "consumer":
        ids = {x.member_id for x in live}
        if set(g.members) != ids:
            return False, "coordinator members %d != live %d" % (len(g.members), len(ids))
        for x in live:
            if x.sm.state != "STABLE" or x.sm.epoch != g.epoch:
                return False, "%s %s at %d, group %d" % (x.name, x.sm.state, x.sm.epoch, g.epoch)
        if spec.assignor == "range":
            return _range_balanced(spec, live)
        return (_balanced([len(x.own) for x in live]), "unbalanced")
    if spec.kind == "connect":
        ids = {x.member_id for x in live}
        if set(g.members) != ids:
            return False, "coordinator members %d != live %d" % (len(g.members), len(ids))
        if g.epoch != g.target_epoch:
            return False, "target behind"
        for x in live:
            if x.st.member_epoch != g.epoch:
                return False, "%s at %d, group %d" % (x.name, x.st.member_epoch, g.epoch)
        if not _balanced([sum(1 for u in x.own if u[1] < 0) for x in live]):
            return False, "connectors unbalanced"
        return (_balanced([sum(1 for u in x.own if u[1] >= 0) for x in live]),
                "tasks unbalanced")
    # classic
    gens = {x.sm.generation for x in live}
    if any(x.sm.state != "STABLE" for x in live) or len(gens) != 1:
        return False, "members not stable in one generation"
    if g.state_name() != "Stable":
        return False, "group %s" % g.state_name()
    if spec.assignor == "range":
        return _range_balanced(spec, live)
    return (_balanced([len(x.own) for x in live]), "unbalanced")


def _range_balanced(spec, live) -> tuple:
    """Range balances each topic on its own (members differ overall by up to one per topic)."""
    for t in spec.topics:
        if not _balanced([sum(1 for u in x.own if u.topic == t) for x in live]):
            return False, "range unbalanced on %s" % t
    return True, ""
