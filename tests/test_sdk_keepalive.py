"""The SDK state machines' keep-alive calls (keepalive_ready / keepalive_request /
try_keepalive), which benchmarks/loadgen.py uses to send one encoded heartbeat per epoch:
whenever they say "ready", the keep-alive is byte for byte what heartbeat_request() would
have built, and booking it leaves the state machine exactly where heartbeat_request() would
(a twin driven the ordinary way is compared field by field); whenever there is something to
send they refuse and book nothing."""
from __future__ import annotations

import copy

from coord_harness import Harness

from groupcoord.client.connect_member import ConnectMemberState
from groupcoord.client.members_consumer_state import ConsumerMemberState
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import encode_request_frame
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

CATALOG = TopicCatalog.of(t12=12, t3=3)
CFG = ShardConfig(consumer_assignment_interval_ms=0)


def frame(req, version):
    return encode_request_frame(req, version, 7, "keepalive-test")


def keepalive_like_heartbeat_request(st, version, respond, handle):
    """Book and send a keep-alive while a twin sends heartbeat_request() and gets the same
    answer (respond: request -> response; handle: (state, request, response) -> outcome):
    same bytes on the wire, same state after."""
    twin = copy.deepcopy(st)
    full = twin.heartbeat_request()
    ka = st.keepalive_request()
    assert frame(ka, version) == frame(full, version)
    assert st.try_keepalive()
    assert vars(st) == vars(twin)
    resp = respond(ka)
    out = handle(st, ka, resp)
    assert out == handle(twin, full, resp)
    assert vars(st) == vars(twin)
    return out


def refuses(st):
    """Something to send: not ready, and try_keepalive books nothing."""
    before = copy.deepcopy(vars(st))
    assert not st.keepalive_ready()
    assert not st.try_keepalive()
    assert vars(st) == before


# ------------------------------------------------------------------------------ consumer

def c_beat(h, sm):
    req = sm.heartbeat_request()
    return sm.on_heartbeat_response(req, h.send(req, 1))


def c_reconcile(sm):
    while (rec := sm.next_reconciliation()) is not None:
        if rec.missing_topic_ids:
            sm.add_topic_names({t: CATALOG.by_id[t].name for t in rec.missing_topic_ids})
            continue
        sm.revoke_done(rec)
        sm.assign_done(rec)


def c_keepalive_like_heartbeat_request(h, sm):
    return keepalive_like_heartbeat_request(
        sm, 1, lambda req: h.send(req, 1),
        lambda st, req, resp: st.on_heartbeat_response(req, resp))


def test_consumer_keepalive_only_when_nothing_to_send():
    h = Harness(CFG, CATALOG)
    sm = ConsumerMemberState("g", topics=["t12"], instance_id="i1")
    refuses(sm)                                   # not joined
    assert c_beat(h, sm).ok                         # the join, answered with an assignment
    refuses(sm)                                   # owned must be reported
    c_reconcile(sm)
    refuses(sm)                                   # the ack is due
    assert c_beat(h, sm).ok
    assert sm.keepalive_ready() and len(sm.owned) == 12
    for _ in range(3):
        assert c_keepalive_like_heartbeat_request(h, sm).ok
        assert sm.keepalive_ready()
    assert sm.keepalive_request().instance_id == "i1"
    sm.subscribe(["t12", "t3"])                     # a changed field
    refuses(sm)
    assert c_beat(h, sm).ok
    c_reconcile(sm)
    assert c_beat(h, sm).ok
    assert sm.keepalive_ready() and len(sm.owned) == 15
    c_keepalive_like_heartbeat_request(h, sm)
    sm.heartbeat_lost()                             # no answer: everything next time
    refuses(sm)
    assert c_beat(h, sm).ok and sm.keepalive_ready()


def test_consumer_keepalive_refused_after_a_fence_and_at_a_second_member_s_revocation():
    h = Harness(CFG, CATALOG)
    a = ConsumerMemberState("g", topics=["t12"])
    for _ in range(3):
        c_beat(h, a)
        c_reconcile(a)
    assert a.keepalive_ready()
    b = ConsumerMemberState("g", topics=["t12"])
    c_beat(h, b)                                    # b joins: a must give up half
    out = c_keepalive_like_heartbeat_request(h, a)  # the keep-alive brings the revocation
    assert out.ok and a.next_reconciliation() is not None
    refuses(a)
    c_reconcile(a)
    refuses(a)                                    # the release must be reported
    resp = m.ConsumerGroupHeartbeatResponse(error_code=E.FENCED_MEMBER_EPOCH)
    req = a.heartbeat_request()
    assert a.on_heartbeat_response(req, resp).rejoin
    refuses(a)


# ------------------------------------------------------------------------------ connect

def answer(connectors=None, epoch=1, code=0):
    a = None if connectors is None else m.ConnectGroupHeartbeatResponseAssignment(
        connectors_and_tasks=m.ConnectGroupHeartbeatResponseConnectorsAndTasks(
            connectors=connectors, tasks=[]))
    return m.ConnectGroupHeartbeatResponse(error_code=code, member_id="W1", member_epoch=epoch,
                                           heartbeat_interval_ms=3000, assignment=a)


def k_keepalive_like_heartbeat_request(st, resp):
    return keepalive_like_heartbeat_request(st, 0, lambda req: resp,
                                            lambda st, req, r: st.on_response(r))


def test_connect_keepalive_only_when_nothing_to_send():
    st = ConnectMemberState("g", "W1", worker_url="http://w1")
    st.set_config({"A": 2}, offset=1)
    refuses(st)                                   # not joined
    st.heartbeat_request()
    out = st.on_response(answer(["A"]))
    refuses(st)                                   # the assignment must be confirmed
    st.assigned(out.assign)
    st.heartbeat_request()
    st.on_response(answer())
    assert st.keepalive_ready()
    for _ in range(3):
        out = k_keepalive_like_heartbeat_request(st, answer(epoch=1))
        assert not out.assign and not out.revoke and st.keepalive_ready()
    k_keepalive_like_heartbeat_request(st, answer(epoch=2))   # a new epoch: new keep-alive
    assert st.keepalive_request().member_epoch == 2
    st.set_config({"A": 3})                         # a new config state to send
    refuses(st)
    st.heartbeat_request()
    st.on_response(answer(epoch=2))
    assert st.keepalive_ready()
    k_keepalive_like_heartbeat_request(st, answer(["A", "B"], epoch=3))
    refuses(st)                                   # a new assignment: owned to report
    st.heartbeat_request()
    st.on_response(answer(epoch=3))
    assert st.keepalive_ready()
    st.on_request_failed()                          # no answer: full heartbeat next
    refuses(st)
    st.heartbeat_request()
    st.on_response(answer(epoch=3))
    assert st.keepalive_ready()
    k_keepalive_like_heartbeat_request(st, answer(code=E.FENCED_MEMBER_EPOCH))
    refuses(st)                                   # fenced: rejoin at epoch 0
