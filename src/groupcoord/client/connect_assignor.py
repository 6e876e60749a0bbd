"""The chosen worker's job: PrepareAssignment response -> the group's new target (sans-I/O).

    plan = compute_install(prepared, scheduled_delay_ms=300_000)
    InstallAssignment(..., group_epoch=prepared.group_epoch, error=plan.error,
                      rebalance_delay_ms=plan.rebalance_delay_ms,
                      assignor_state=plan.assignor_state, members=plan.members)

The coordinator names the selected assignor (`assignor_name`); we run it from the assignment
engine (`groupcoord.assign.connect`):

* "incremental-cooperative" (KIP-415, Connect's `compatible`/`sessioned` protocols): sticky;
  work whose owner left is held unassigned for `scheduled_delay_ms` (the coordinator then runs
  a delayed rebalance: InstallAssignment's RebalanceDelayMs) unless its owner comes back or a
  new worker can take it.
* "eager": Connect's round robin from scratch, no delay.

Any other name gets an install with Error=1 (the coordinator keeps the current target).

How lost work is recognised: the coordinator stores our opaque AssignorState with the target
and hands it back in the next PrepareAssignment. We keep in it (msgpack, by connector name, so
it survives configuration changes) the pending deadline, the units held for departed workers,
and every unit the target assigned. A unit assigned last time that no current member's target
holds now belonged to a worker that left: it is LOST for the assignor.

Indices: members sorted by member id (Connect's tie-break order), connectors sorted by name;
unit `base[c]` is connector c, `base[c] + 1 + t` its task t.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import msgspec
import numpy as np

from groupcoord.assign.connect import (LOST, IcaState, connect_units, eager,
                                       incremental_cooperative, to_wire)
from groupcoord.protocol import messages as m

__all__ = ["ICA", "EAGER", "KNOWN_ASSIGNORS", "AssignorSpec", "AssignorState", "InstallPlan",
           "compute_install", "ASSIGNMENT_ERROR_UNKNOWN_ASSIGNOR"]

ICA = "incremental-cooperative"
EAGER = "eager"
KNOWN_ASSIGNORS = (ICA, EAGER)
ASSIGNMENT_ERROR_UNKNOWN_ASSIGNOR = 1


@dataclass(frozen=True)
class AssignorSpec:
    """One client-side assignor a worker offers: name and metadata version range. `version`
    (the version our metadata is encoded in) defaults to `max_version`; `reason` is the seed's
    Reason field (changing it makes the coordinator bump the group epoch)."""
    name: str = ICA
    min_version: int = 0
    max_version: int = 2
    version: Optional[int] = None
    reason: int = 0
    metadata: bytes = b""

    def to_wire(self) -> m.ConnectGroupHeartbeatRequestAssignor:
        return m.ConnectGroupHeartbeatRequestAssignor(
            name=self.name, minimum_version=self.min_version, maximum_version=self.max_version,
            reason=self.reason,
            version=self.max_version if self.version is None else self.version,
            metadata=self.metadata)


class AssignorState(msgspec.Struct):
    """Our AssignorState bytes (msgpack): units as [connector, task] with task -1 for the
    connector itself."""
    deadline_ms: int = -1
    lost: list[tuple[str, int]] = []
    assigned: list[tuple[str, int]] = []


@dataclass
class InstallPlan:
    """What to send in InstallAssignment. `owners` maps member id -> set of (connector, task)
    for logs and tests."""
    members: list
    rebalance_delay_ms: int = -1
    assignor_state: Optional[bytes] = None
    error: int = 0
    moved: int = 0
    assignor: str = ""
    owners: Optional[dict] = None


def _decode_state(data: Optional[bytes]) -> AssignorState:
    if not data:
        return AssignorState()
    try:
        return msgspec.msgpack.decode(data, type=AssignorState)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return AssignorState()  # written by another assignor implementation: start afresh


def compute_install(prepared: m.ConnectGroupPrepareAssignmentResponse,
                    scheduled_delay_ms: int) -> InstallPlan:
    """The new target for the prepared group state (pure function)."""
    name = prepared.assignor_name
    if name not in KNOWN_ASSIGNORS:
        return InstallPlan(members=[], error=ASSIGNMENT_ERROR_UNKNOWN_ASSIGNOR, assignor=name)
    connectors = sorted(prepared.connectors, key=lambda c: c.name)
    names = [c.name for c in connectors]
    tc = [c.task_count for c in connectors]
    base = connect_units(tc)
    index = {n: i for i, n in enumerate(names)}
    members = sorted(prepared.members, key=lambda x: x.member_id)

    def unit(conn: str, task: int) -> Optional[int]:
        c = index.get(conn)
        if c is None or task >= tc[c] or task < -1:
            return None
        return int(base[c]) + 1 + task

    n_units = int(base[-1])
    if name == EAGER:
        owner = eager(len(members), tc)
        delay, next_state, moved = -1, AssignorState(), 0
    else:
        cur = np.full(n_units, -1, dtype=np.int32)
        for w, mem in enumerate(members):
            ct = mem.connectors_and_tasks
            for c in ct.connectors:
                u = unit(c, -1)
                if u is not None:
                    cur[u] = w
            for t in ct.tasks:
                for i in t.task_ids:
                    u = unit(t.connector, i)
                    if u is not None:
                        cur[u] = w
        st = _decode_state(prepared.assignor_state)
        for conn, task in st.assigned:
            u = unit(conn, task)
            if u is not None and cur[u] == -1:
                cur[u] = LOST                # its owner is no longer a member
        lost = sorted({u for u in (unit(c, t) for c, t in st.lost) if u is not None})
        ica = IcaState(st.deadline_ms, np.array(lost, dtype=np.int32))
        res = incremental_cooperative(tc, cur, len(members), prepared.coordinator_time_ms,
                                      scheduled_delay_ms, ica)
        owner, delay, moved = res.owner, res.rebalance_delay_ms, res.moved
        label = [(names[c], u - int(base[c]) - 1) for c in range(len(names))
                 for u in range(int(base[c]), int(base[c + 1]))]
        next_state = AssignorState(res.next_state.deadline_ms,
                                   [label[u] for u in res.next_state.lost.tolist()],
                                   [label[u] for u in np.flatnonzero(owner >= 0).tolist()])
    CT = m.ConnectGroupInstallAssignmentRequestConnectorTasks
    out, owners = [], {}
    for mem, wa in zip(members, to_wire(owner, tc, len(members))):
        conns = [names[c] for c in wa.connectors]
        tasks = [CT(connector=names[c], task_ids=list(ids)) for c, ids in wa.tasks]
        out.append(m.ConnectGroupInstallAssignmentRequestMember(
            member_id=mem.member_id,
            connectors_and_tasks=m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                connectors=conns, tasks=tasks),
            version=mem.assignor.version))
        owners[mem.member_id] = {(c, -1) for c in conns} | {
            (t.connector, i) for t in tasks for i in t.task_ids}
    return InstallPlan(members=out, rebalance_delay_ms=int(delay),
                       assignor_state=msgspec.msgpack.encode(next_state), moved=int(moved),
                       assignor=name, owners=owners)
