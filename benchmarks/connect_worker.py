"""A crowd of simulated Connect workers driving a connect group in-process (benchmarks).

The chosen worker answers COMPUTE_ASSIGNMENT with PrepareAssignment, the
incremental-cooperative assignor from scratch over the prepared members, and
InstallAssignment; every worker reports its owned work after each change, as a worker does.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from groupcoord.assign.connect import connect_units, incremental_cooperative, to_wire
from groupcoord.groups.result import is_durable
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

ICA = "incremental-cooperative"


class WorkerSim:
    def __init__(self, shard, group, n_workers, n_connectors, tasks_per):
        self.shard, self.group = shard, group
        self.ids = ["worker-%06d" % i for i in range(n_workers)]
        self.epoch = dict.fromkeys(self.ids, 0)
        self.owned: dict = {}
        self.report = dict.fromkeys(self.ids, False)
        self.names = ["connector-%06d" % c for c in range(n_connectors)]
        self.tc = [tasks_per] * n_connectors
        self.n_units = int(connect_units(self.tc)[-1])
        self.records = 0

    def _send(self, req, now):
        r = self.shard.apply(self.shard.handle(req, now, 0))
        self.records += sum(1 for x in r.records if is_durable(x))
        return r.response

    def join(self, now):
        cs = m.ConnectGroupHeartbeatRequestConfigState(
            config_offset=1, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
                name=n, task_count=t) for n, t in zip(self.names, self.tc)])
        for i, w in enumerate(self.ids):
            resp = self._send(m.ConnectGroupHeartbeatRequest(
                group_id=self.group, member_id=w, member_epoch=0, rebalance_timeout_ms=60_000,
                worker_url="http://%s:8083" % w,
                client_assignors=[m.ConnectGroupHeartbeatRequestAssignor(
                    name=ICA, minimum_version=0, maximum_version=2, version=2)],
                config_state=cs if i == 0 else None), now)
            self._absorb(w, resp, now)

    def _absorb(self, w, resp, now):
        if resp.error_code not in (0, ErrorCode.COMPUTE_ASSIGNMENT):
            raise RuntimeError("%s: %s %s" % (w, resp.error_code, resp.error_message))
        self.epoch[w] = resp.member_epoch
        if resp.assignment is not None:
            ct = resp.assignment.connectors_and_tasks
            self.owned[w] = m.ConnectGroupHeartbeatRequestConnectorsAndTasks(
                connectors=list(ct.connectors),
                tasks=[m.ConnectGroupHeartbeatRequestConnectorTasks(
                    connector=t.connector, task_ids=list(t.task_ids)) for t in ct.tasks])
            self.report[w] = True
        if resp.error_code == ErrorCode.COMPUTE_ASSIGNMENT:
            self.compute(w, now)

    def compute(self, w, now):
        p = self._send(m.ConnectGroupPrepareAssignmentRequest(
            group_id=self.group, member_id=w, member_epoch=self.epoch[w]), now)
        assert p.error_code == 0, p
        names = [c.name for c in p.connectors]
        tc = [c.task_count for c in p.connectors]
        cur = np.full(int(connect_units(tc)[-1]), -1, dtype=np.int32)
        res = incremental_cooperative(tc, cur, len(p.members), p.coordinator_time_ms, 0)
        members = []
        for mem, wa in zip(p.members, to_wire(res.owner, tc, len(p.members))):
            members.append(m.ConnectGroupInstallAssignmentRequestMember(
                member_id=mem.member_id,
                connectors_and_tasks=m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                    connectors=[names[c] for c in wa.connectors],
                    tasks=[m.ConnectGroupInstallAssignmentRequestConnectorTasks(
                        connector=names[c], task_ids=ids) for c, ids in wa.tasks])))
        r = self._send(m.ConnectGroupInstallAssignmentRequest(
            group_id=self.group, member_id=w, member_epoch=self.epoch[w],
            group_epoch=p.group_epoch, members=members), now)
        assert r.error_code == 0, r

    def round(self, now):
        for w in self.ids:
            req = m.ConnectGroupHeartbeatRequest(
                group_id=self.group, member_id=w, member_epoch=self.epoch[w],
                owned_connectors_and_tasks=self.owned.get(w) if self.report[w] else None)
            self.report[w] = False
            self._absorb(w, self._send(req, now), now)

    def stable(self) -> bool:
        d = self.shard.handle(m.ConnectGroupDescribeRequest(group_ids=[self.group]), 0)
        return d.response.groups[0].group_state == "Stable"

    def converge(self, now, max_rounds=20):
        self.join(now)
        return self.converge_joined(now, max_rounds)

    def converge_joined(self, now, max_rounds=20):
        """Heartbeat rounds after join() until Stable; -> (rounds, seconds)."""
        rounds = 0
        t0 = time.perf_counter()
        while not self.stable():
            rounds += 1
            if rounds > max_rounds:
                raise RuntimeError("connect group did not converge")
            self.round(now)
        return rounds, time.perf_counter() - t0

    def bench_noop(self, seconds, now) -> float:
        reqs = [m.ConnectGroupHeartbeatRequest(group_id=self.group, member_id=w,
                                               member_epoch=self.epoch[w]) for w in self.ids]
        return noop_rate(self.shard, reqs, 0, seconds, now)


def noop_rate(shard, reqs, version, seconds, now) -> float:
    """Heartbeats handled + applied per second, cycling through ``reqs`` (each checked to be
    a no-op first: no record, no error, no assignment)."""
    handle, apply = shard.handle, shard.apply
    r = handle(reqs[0], now, version)
    assert r.records == () and r.response.error_code == 0 and r.response.assignment is None, r
    n = 0
    gc.disable()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for q in reqs:
            apply(handle(q, now, version))
        n += len(reqs)
        if time.perf_counter() >= deadline:
            break
    dt = time.perf_counter() - t0
    gc.enable()
    return n / dt

def stable_records(group, n_workers, n_connectors, tasks_per):
    """The records of a stable connect group (what its log holds after convergence): every
    worker at epoch 1 holding its incremental-cooperative target. -> (records, WorkerSim
    factory taking the shard)."""
    from groupcoord.groups.records import Record
    names = ["connector-%06d" % c for c in range(n_connectors)]
    tc = [tasks_per] * n_connectors
    ids = ["worker-%06d" % i for i in range(n_workers)]
    res = incremental_cooperative(tc, np.full(int(connect_units(tc)[-1]), -1, np.int32),
                                  n_workers, 0, 0)
    wire = to_wire(res.owner, tc, n_workers)
    A = m.ConnectWorkerGroupMemberMetadataValueAssignor
    recs = [Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=group),
                   m.ConnectWorkerGroupConnectorsTasksMetadataValue(
                       config_offset=1, connectors=[
                           m.ConnectWorkerGroupConnectorsTasksMetadataValueConnector(
                               name=n, task_count=t) for n, t in zip(names, tc)]))]
    for w in ids:
        recs.append(Record(m.ConnectWorkerGroupMemberMetadataKey(group_id=group, member_id=w),
                           m.ConnectWorkerGroupMemberMetadataValue(
                               worker_url="http://%s:8083" % w, rebalance_timeout_ms=60_000,
                               client_assignors=[A(name=ICA, minimum_version=0,
                                                   maximum_version=2, version=2)])))
    recs.append(Record(m.ConnectWorkerGroupMetadataKey(group_id=group),
                       m.ConnectWorkerGroupMetadataValue(epoch=1)))
    TT = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    CT = m.ConnectWorkerGroupCurrentMemberAssignmentValueConnectorTasks
    for w, wa in zip(ids, wire):
        recs.append(Record(m.ConnectWorkerGroupTargetAssignmentMemberKey(group_id=group,
                                                                         member_id=w),
                           m.ConnectWorkerGroupTargetAssignmentMemberValue(
                               connectors=[names[c] for c in wa.connectors],
                               tasks=[TT(connector=names[c], task_ids=t) for c, t in wa.tasks])))
    recs.append(Record(m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=group),
                       m.ConnectWorkerGroupTargetAssignmentMetadataValue(
                           assignment_epoch=1, assignor_name=ICA)))
    for w, wa in zip(ids, wire):
        recs.append(Record(m.ConnectWorkerGroupCurrentMemberAssignmentKey(group_id=group,
                                                                          member_id=w),
                           m.ConnectWorkerGroupCurrentMemberAssignmentValue(
                               member_epoch=1, previous_member_epoch=0, state=0,
                               connectors=[names[c] for c in wa.connectors],
                               tasks=[CT(connector=names[c], task_ids=t) for c, t in wa.tasks])))

    def sim_for(shard):
        sim = WorkerSim(shard, group, n_workers, n_connectors, tasks_per)
        sim.epoch = dict.fromkeys(ids, 1)
        return sim
    return recs, sim_for
