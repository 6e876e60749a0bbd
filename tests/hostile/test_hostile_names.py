"""Oversize names in every string field of every request that writes (issue 16, "State is
applied before its record is encoded"): each is refused with a clear error code (never
UNKNOWN_SERVER_ERROR, never a closed connection), no ghost member appears in the groups they
aim at (the good groups keep their assignment; the Connect group keeps its one worker; no
offset is stored), and a kill -9 restart shows exactly the state from before it."""
import msgspec
import pytest

from hostile_harness import (GROUP_CLASSIC, MIB, Case, Wire, describe_848,
                             describe_classic, offset_fetch, node_serves)
from hostile_loads import (CONNECT_GROUP, OFFSETS_GROUP, connect_join, oversize_requests,
                           response_codes)
from groupcoord.protocol import messages as M

pytestmark = pytest.mark.hostile

# 1025: one byte over name.max.bytes (1024); 40,000: over what a record field holds (32,767),
# the size that left ghosts in the issue.
SIZES = (1025, 40_000)


def connect_config():
    return M.ConnectGroupHeartbeatRequestConfigState(
        config_offset=1, connectors=[M.ConnectGroupHeartbeatRequestConnectorConfig(
            name="conn-a", task_count=1)])


def describe_connect(host, port):
    with Wire(host, port) as w:
        return w.call(M.ConnectGroupDescribeRequest(group_ids=[CONNECT_GROUP]), 0).groups[0]


def list_groups(host, port):
    """[(group id, state)] sorted."""
    with Wire(host, port) as w:
        r = w.call(M.ListGroupsRequest(), 4)
    assert r.error_code == 0, r
    return sorted((g.group_id, g.group_state) for g in r.groups)


def state(host, port):
    """Everything the oversize requests could have touched, as plain data. An Empty group
    with no offsets is left out: a JoinGroup that got MEMBER_ID_REQUIRED leaves one in memory
    only, as Kafka does (nothing of it is durable, so a restart forgets it)."""
    offsets = {gid: sorted(offset_fetch(host, port, gid).items())
               for gid, _ in list_groups(host, port)}
    return msgspec.to_builtins({
        "groups": [(gid, st) for gid, st in list_groups(host, port)
                   if st != "Empty" or offsets[gid]],
        "848": describe_848(host, port), "classic": describe_classic(host, port),
        "connect": describe_connect(host, port),
        "offsets": {gid: o for gid, o in offsets.items() if o},
    })


def test_oversize_names_are_refused_without_a_trace(node, good_group):
    # The Connect worker W1 must outlive the test (its session is not what is tested).
    n = node(group_config=("group.connect.session.timeout.ms=300000",))
    g = good_group(n)
    with Wire(n.host, n.port) as w:
        r = w.call(connect_join("W1", config_state=connect_config()), 0)
        # Joined; as the only worker it is asked to compute the assignment (code 10000).
        assert r.error_code in (0, 10000), r
    assert [m.member_id for m in describe_connect(n.host, n.port).members] == ["W1"]
    refused, wrong = [], []
    with Case(n, g) as case:
        w = Wire(n.host, n.port)
        try:
            for size in SIZES:
                for o in oversize_requests(size):
                    try:
                        body = w.call(o.request, o.version, client_id=o.client_id)
                    except (ConnectionError, OSError) as e:
                        wrong.append((o.label, size, "connection closed: %s" % e))
                        w.close()
                        w = Wire(n.host, n.port)
                        continue
                    codes = response_codes(body)
                    msg = getattr(body, "error_message", None)
                    if not codes or any(c not in o.expected for c in codes):
                        wrong.append((o.label, size, codes, msg))
                    else:
                        refused.append((o.label, size, codes, msg))
        finally:
            w.close()
    for r in refused:
        print("refused: %s (%d bytes): %s %s" % r)
    case.check(64 * MIB)
    assert not wrong, "not refused with a clear error code:\n" + "\n".join(map(str, wrong))
    # No ghost: the Connect group still has its one worker, no offset was stored, no group
    # has an oversize id.
    assert [m.member_id for m in describe_connect(n.host, n.port).members] == ["W1"]
    assert offset_fetch(n.host, n.port, OFFSETS_GROUP) == {}
    assert offset_fetch(n.host, n.port, GROUP_CLASSIC) == {}
    assert all(len(gid) <= 1024 for gid, _ in list_groups(n.host, n.port))

    # A kill -9 restart shows the same state (nothing lived only in memory). The good
    # consumers leave first, so that nothing changes but the restart.
    g.close()
    before = state(n.host, n.port)
    assert CONNECT_GROUP in [gid for gid, _ in before["groups"]], before["groups"]
    assert before["848"]["group_epoch"] > 0, before["848"]
    n.restart(kill9=True)
    after = state(n.host, n.port)
    assert after == before
    assert node_serves(n.host, n.port)
