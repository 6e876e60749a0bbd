"""ConnectGroupDescribe (api key 10003)."""
from __future__ import annotations


from groupcoord.groups.connect.group import NO_TARGET, lookup
from groupcoord.groups.connect.selection import select_assignor
from groupcoord.groups.result import Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E


def _describe(shard, req, ctx) -> Result:
    out = []
    G = m.ConnectGroupDescribeResponseDescribedGroup
    for gid in req.group_ids:
        g, why = lookup(shard, gid)
        if g is None:
            out.append(G(error_code=int(E.GROUP_ID_NOT_FOUND), error_message=why,
                         group_id=gid))
            continue
        name, _ = select_assignor(g.members)
        members = []
        for mid in sorted(g.members):
            meta = g.members[mid]
            members.append(m.ConnectGroupDescribeResponseMember(
                member_id=mid, instance_id=meta.instance_id, worker_url=meta.worker_url,
                client_id=meta.client_id, client_host=meta.client_host,
                member_epoch=g.current[mid].epoch,
                assignment=_describe_units(g, g.current[mid].assigned),
                target_assignment=_describe_units(g, g.target.get(mid, NO_TARGET).units)))
        out.append(G(group_id=gid, group_state=g.state_name(), group_epoch=g.epoch,
                     assignment_epoch=g.target_epoch, assignor_name=name or "",
                     config_offset=g.config_offset, members=members))
    return Result(m.ConnectGroupDescribeResponse(groups=out))


def _describe_units(g, units):
    conns, tasks = g.wire(units)
    T = m.ConnectGroupDescribeResponseConnectorTasks
    return m.ConnectGroupDescribeResponseConnectorsAndTasks(
        connectors=conns, tasks=[T(connector=c, task_ids=t) for c, t in tasks])
