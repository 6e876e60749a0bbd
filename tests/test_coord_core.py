"""Unit tests of the coordinator's shared pieces: reconciliation, timers, topic catalog,
shard dispatch and error responses."""
import pytest

from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.ids import generated_id
from groupcoord.groups.result import Result, TimerKey
from groupcoord.groups.shard import Shard, error_response
from groupcoord.groups.timers import Timers
from groupcoord.groups.topics import TopicCatalog, topic_id_for
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

U = [rc.unit(0, p) for p in range(8)]


def fs(*idx):
    return frozenset(U[i] for i in idx)


def ma(epoch, prev, state, assigned, pending=()):
    return rc.MemberAssignment(epoch, prev, state, fs(*assigned), fs(*pending))


# ----------------------------------------------------------------------------- units
def test_unit_keys_round_trip_and_order():
    assert rc.unit_parts(rc.unit(7, 0)) == (7, 0)
    assert rc.unit_parts(rc.unit(3, 2**31 - 1)) == (3, 2**31 - 1)
    assert rc.unit(0, 5) < rc.unit(1, 0)


# --------------------------------------------------------------------- reconciliation
def test_stable_at_target_epoch_is_unchanged_object():
    cur = ma(5, 4, rc.STABLE, [0, 1])
    assert rc.next_assignment(cur, 5, fs(0, 1), None, {}, "a") is cur


def test_stable_to_stable_new_epoch_all_free():
    cur = ma(5, 4, rc.STABLE, [0])
    nxt = rc.next_assignment(cur, 6, fs(0, 1), None, {U[0]: "a"}, "a")
    assert nxt == ma(6, 5, rc.STABLE, [0, 1])


def test_stable_to_unrevoked_keeps_epoch_and_withholds_new():
    cur = ma(5, 4, rc.STABLE, [0, 1])
    nxt = rc.next_assignment(cur, 6, fs(0, 2), None, {U[0]: "a", U[1]: "a"}, "a")
    # revoke before assign: unit 2 is free but not given while 1 is being revoked
    assert nxt == ma(5, 5, rc.UNREVOKED, [0], [1])


def test_unrevoked_waits_for_owned_report():
    cur = ma(5, 5, rc.UNREVOKED, [0], [1])
    holders = {U[0]: "a", U[1]: "a"}
    assert rc.next_assignment(cur, 6, fs(0, 2), None, holders, "a") is cur
    assert rc.next_assignment(cur, 6, fs(0, 2), fs(0, 1), holders, "a") is cur


def test_unrevoked_to_stable_after_ack():
    cur = ma(5, 5, rc.UNREVOKED, [0], [1])
    holders = {U[0]: "a", U[1]: "a"}
    nxt = rc.next_assignment(cur, 6, fs(0, 2), fs(0), holders, "a")
    assert nxt == ma(6, 5, rc.STABLE, [0, 2])


def test_unrevoked_to_unreleased_when_new_unit_still_held():
    cur = ma(5, 5, rc.UNREVOKED, [0], [1])
    holders = {U[0]: "a", U[1]: "a", U[2]: "b"}
    nxt = rc.next_assignment(cur, 6, fs(0, 2), fs(0), holders, "a")
    assert nxt == ma(6, 5, rc.UNRELEASED, [0])


def test_unreleased_stays_then_becomes_stable():
    cur = ma(6, 5, rc.UNRELEASED, [0])
    assert rc.next_assignment(cur, 6, fs(0, 2), None, {U[0]: "a", U[2]: "b"}, "a") is cur
    nxt = rc.next_assignment(cur, 6, fs(0, 2), None, {U[0]: "a"}, "a")
    assert nxt == ma(6, 5, rc.STABLE, [0, 2])


def test_unreleased_partial_release_keeps_previous_epoch():
    cur = ma(6, 5, rc.UNRELEASED, [0])
    nxt = rc.next_assignment(cur, 6, fs(0, 2, 3), None, {U[3]: "b"}, "a")
    assert nxt == ma(6, 5, rc.UNRELEASED, [0, 2])


def test_unreleased_target_moves_again_with_revocation():
    cur = ma(6, 5, rc.UNRELEASED, [0, 1])
    nxt = rc.next_assignment(cur, 7, fs(1), None, {U[0]: "a", U[1]: "a"}, "a")
    assert nxt == ma(6, 6, rc.UNREVOKED, [1], [0])


def test_stable_to_unreleased():
    cur = ma(1, 0, rc.STABLE, [])
    nxt = rc.next_assignment(cur, 2, fs(0, 1), None, {U[1]: "b"}, "a")
    assert nxt == ma(2, 1, rc.UNRELEASED, [0])


def test_check_member_epoch_rules():
    cur = ma(6, 5, rc.STABLE, [0, 1])
    assert rc.check_member_epoch(cur, 6, None) == 0
    assert rc.check_member_epoch(cur, 7, None) == ErrorCode.FENCED_MEMBER_EPOCH
    # lost response: previous epoch with owned a subset of the assignment is accepted
    assert rc.check_member_epoch(cur, 5, fs(0)) == 0
    assert rc.check_member_epoch(cur, 5, None) == ErrorCode.FENCED_MEMBER_EPOCH
    assert rc.check_member_epoch(cur, 5, fs(0, 3)) == ErrorCode.FENCED_MEMBER_EPOCH
    assert rc.check_member_epoch(cur, 4, fs(0)) == ErrorCode.FENCED_MEMBER_EPOCH


def test_update_holders():
    h = {}
    a1 = ma(1, 0, rc.STABLE, [0, 1])
    rc.update_holders(h, "a", None, a1)
    assert h == {U[0]: "a", U[1]: "a"}
    a2 = ma(1, 1, rc.UNREVOKED, [0], [1])
    rc.update_holders(h, "a", a1, a2)
    assert h == {U[0]: "a", U[1]: "a"}
    rc.update_holders(h, "b", None, ma(2, 1, rc.STABLE, [2]))
    rc.update_holders(h, "a", a2, None)
    assert h == {U[2]: "b"}


# ------------------------------------------------------------------------------ timers
def test_timers_fire_in_deadline_order_and_reschedule_replaces():
    t = Timers()
    a, b, c = TimerKey("x", "g", "a"), TimerKey("x", "g", "b"), TimerKey("y", "g")
    t.apply([(a, 30), (b, 10), (c, 20)])
    t.schedule(b, 40)                     # replaces 10
    t.apply([(c, None)])                  # cancel
    assert t.next_deadline() == 30
    assert t.pop_due(29) is None
    assert t.pop_due(100) == a
    assert t.pop_due(100) == b
    assert t.pop_due(100) is None
    assert len(t) == 0


def test_timers_lazy_heap_stays_bounded():
    t = Timers()
    k = TimerKey("session", "g", "m")
    for i in range(10_000):
        t.schedule(k, i)
    assert len(t._heap) <= 64 * 4 + 1
    assert t.pop_due(10**9) == k


def test_timers_equal_deadlines_fire_in_scheduling_order():
    t = Timers()
    keys = [TimerKey("s", "g", str(i)) for i in range(5)]
    for k in reversed(keys):
        t.schedule(k, 7)
    assert [t.pop_due(7) for _ in keys] == list(reversed(keys))


def test_timers_heartbeat_reschedules_do_not_grow_the_heap():
    # The hot path: a later deadline changes only the table (O(1)); the one live heap entry
    # is deferred when it surfaces.
    t = Timers()
    ks = [TimerKey("session", "g", str(i)) for i in range(100)]
    for now in range(0, 10_000, 10):
        for k in ks:
            t.schedule(k, now + 450)
        assert len(t._heap) == len(ks)
        assert t.pop_due(now) is None
    assert t.next_deadline() == 9_990 + 450


def test_timers_match_a_sorted_table_model():
    """Seeded random schedules, cancels and pops against the obvious model: the table, and
    the due key = min (deadline, seq of the schedule that set it)."""
    import random
    seed = random.randrange(2**32)
    print("seed", seed)
    rnd = random.Random(seed)
    t, model, seq = Timers(), {}, 0
    keys = [TimerKey("k", "g", str(i)) for i in range(40)]
    now = 0
    for _ in range(20_000):
        op = rnd.random()
        k = rnd.choice(keys)
        if op < 0.55:
            d = now + rnd.choice([0, 1, 5, 50, rnd.randrange(-3, 200)])
            t.schedule(k, d)
            if model.get(k, (None,))[0] != d:
                seq += 1
                model[k] = (d, seq)
        elif op < 0.65:
            t.apply([(k, None)])
            model.pop(k, None)
        elif op < 0.8:
            exp = min(model.values()) if model else None
            assert t.next_deadline() == (exp[0] if exp else None), seed
        else:
            now += rnd.randrange(0, 30)
            due = sorted((v, kk) for kk, v in model.items() if v[0] <= now)
            for v, kk in due:
                assert t.pop_due(now) == kk, seed
                del model[kk]
            assert t.pop_due(now) is None, seed
        assert len(t) == len(model) and t.get(k) == model.get(k, (None,))[0], seed
        assert len(t._heap) <= max(64, 4 * len(model)) + 1, seed


# ------------------------------------------------------------------------------ topics
def test_topic_catalog_ids_are_stable_and_validated():
    c = TopicCatalog.of(orders=3, pay=6)
    assert c.get("orders").partitions == 3
    assert c.get("orders").topic_id == topic_id_for("orders") != bytes(16)
    assert c.by_id[topic_id_for("pay")].name == "pay"
    c2 = c.with_topics(("orders", 5))
    assert c2.get("orders").partitions == 5 and c.get("orders").partitions == 3
    with pytest.raises(ValueError):
        TopicCatalog([("a", 1), ("a", 2)])
    with pytest.raises(ValueError):
        TopicCatalog([("a", -1)])
    with pytest.raises(ValueError):
        TopicCatalog([("a", 1, bytes(16))])


def test_generated_ids_are_deterministic_and_distinct():
    a = generated_id("g", 1, 0)
    assert a == generated_id("g", 1, 0) and len(a) == 22
    assert a != generated_id("g", 1, 1)


# ------------------------------------------------------------------------------- shard
REQUEST_CLASSES = [getattr(m, n) for n in m.__all__
                   if n.endswith("Request") and getattr(getattr(m, n), "KIND", "") == "request"]


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda c: c.__name__)
def test_error_response_for_every_api_encodes(cls):
    from groupcoord.protocol import encode
    lo, hi = cls.VERSIONS
    for v in range(lo, hi + 1):
        resp = error_response(cls(), v, ErrorCode.NOT_COORDINATOR, "moved")
        if isinstance(resp, m.FindCoordinatorResponse) and v >= 4:
            assert resp.coordinators == []          # batched: errors are per key
        elif "error_code" in type(resp).__struct_fields__:
            assert resp.error_code == ErrorCode.NOT_COORDINATOR
        encode(resp, v)            # every version of the error response is encodable


def test_unserved_api_answers_unsupported_version():
    s = Shard(strict=True)
    res = s.handle(m.ProduceRequest(), 0)
    assert res.records == () and res.response.__class__ is m.ProduceResponse


def test_handler_exception_answers_unknown_server_error_and_changes_nothing(monkeypatch):
    s = Shard()

    def boom(shard, req, ctx):
        raise RuntimeError("bug")
    s._handlers[m.HeartbeatRequest.API_KEY] = boom
    before = s.snapshot(False)
    res = s.handle(m.HeartbeatRequest(group_id="g"), 0)
    assert res.response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert res.records == () and s.snapshot(False) == before
    s.strict = True
    with pytest.raises(RuntimeError):
        s.handle(m.HeartbeatRequest(group_id="g"), 0)


def test_apply_rejects_unknown_items():
    s = Shard()
    with pytest.raises(TypeError):
        s.apply(Result(None, records=(object(),)))



@pytest.mark.parametrize("touch", ["consumer holders", "consumer name counts",
                                   "connect signatures"])
def test_the_purity_check_sees_a_handler_touch_a_derived_index(coord, touch):
    """snapshot(durable=False) carries the indexes replay derives (holders, counters), so the
    harness's purity check fails a handler that changes one, though no durable field moved."""
    h = coord(topics=TopicCatalog.of(t=4))
    h.send(m.ConsumerGroupHeartbeatRequest(
        group_id="c", member_id="m1", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], topic_partitions=[]), 1)
    h.send(m.ConnectGroupHeartbeatRequest(
        group_id="k", member_id="w1", member_epoch=0, rebalance_timeout_ms=30_000,
        client_assignors=[m.ConnectGroupHeartbeatRequestAssignor(
            name="incremental", minimum_version=0, maximum_version=0, reason=0, version=0,
            metadata=b"")]))
    consumer_group, connect_group = h.shard.groups["c"], h.shard.groups["k"]

    def touching(shard, req, ctx):
        if touch == "consumer holders":
            consumer_group.holders[0] = "someone else"       # t-0, held by m1
        elif touch == "consumer name counts":
            consumer_group.name_counts["t"] += 1
        else:
            connect_group.members.sigs[("another",)] += 1
        return Result(m.HeartbeatResponse(error_code=0))
    h.shard._handlers[m.HeartbeatRequest.API_KEY] = touching
    with pytest.raises(AssertionError, match="a handler mutated group state"):
        h.send(m.HeartbeatRequest(group_id="c", generation_id=1, member_id="m1"))
    # (the harness's replay check at teardown would see the touched index too: restore it)
    h.shard.groups["c"], h.shard.groups["k"] = h.replayed().groups["c"], \
        h.replayed().groups["k"]
