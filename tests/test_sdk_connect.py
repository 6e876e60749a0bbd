"""ConnectWorker (src/groupcoord/client/connect_worker.py) against a real `groupcoord serve`.

Issue 7's "Tests that must pass": the seed's four case studies end to end, mixed assignor
versions, the chosen worker dying during assignment, and 200 workers / 2,000 tasks. Workers are
asyncio tasks in this process; every listener call is logged with time.monotonic() and
`Ledger.check` replays the log to prove that no connector/task ever ran on two workers at once
(a killed worker's work ends at the instant it is killed).

Seed notation: AC0 = connector A, AT1/AT2 its tasks 0/1, BC0 / BT1 connector B and its task 0.
"""
import asyncio
import time

import pytest

from groupcoord.client import AssignorSpec, ConnectWorker, CoordinatorLink, ResponseError
from groupcoord.protocol import ConnectGroupDescribeRequest
from groupcoord.protocol.error_codes import ErrorCode as E

from serve_proc import serve  # noqa: F401  (fixture)
from waiting import until

HB_MS = 100
SESSION_MS = 1000
DELAY_MS = 2500           # scheduled.rebalance.max.delay.ms for the case studies
CONFIG = {"A": 2, "B": 1}
FAST = ["--group-config", "group.connect.heartbeat.interval.ms=%d" % HB_MS,
        "--group-config", "group.connect.session.timeout.ms=%d" % SESSION_MS,
        "--fsync", "unsafe-no-fsync", "--shards", "4"]


def label(u):
    c, t = u
    return "%sC0" % c if t < 0 else "%sT%d" % (c, t + 1)


class Ledger:
    """Every start/stop of work, with time.monotonic(), for all workers of a test."""

    def __init__(self):
        self.events = []            # (t, worker, "+"/"-", frozenset units)

    def listener(self, name):
        ledger = self

        class Listener:
            def on_assigned(self, connectors, tasks):
                ledger.events.append((time.monotonic(), name, "+", _units(connectors, tasks)))

            async def on_revoked(self, connectors, tasks):   # async on purpose: both kinds work
                await asyncio.sleep(0)
                ledger.events.append((time.monotonic(), name, "-", _units(connectors, tasks)))
        return Listener()

    def killed(self, name, worker):
        self.events.append((time.monotonic(), name, "-", frozenset(worker.state.owned)))

    def check(self):
        """Replay: no unit is started on a worker while another one runs it."""
        runs = {}
        last_t = float("-inf")
        for t, w, kind, units in self.events:
            assert t >= last_t
            last_t = t
            for u in units:
                if kind == "+":
                    assert u not in runs, "%s started on %s at %.3f while %s runs it" % (
                        label(u), w, t, runs.get(u))
                    runs[u] = w
                else:
                    assert runs.get(u) == w, "%s stopped on %s, not running there" % (label(u), w)
                    del runs[u]
        return runs

    def first_start(self, unit, worker, after=0.0):
        for t, w, kind, units in self.events:
            if t >= after and w == worker and kind == "+" and unit in units:
                return t
        return None


def _units(connectors, tasks):
    return frozenset([(c, -1) for c in connectors] + [(t.connector, t.task) for t in tasks])


def labels(worker):
    return sorted(label(u) for u in worker.state.owned)


def worker(srv, ledger, name, **kw):
    kw.setdefault("scheduled_rebalance_max_delay_ms", DELAY_MS)
    kw.setdefault("session_timeout_ms", 5 * SESSION_MS)
    kw.setdefault("request_timeout_s", 5.0)
    return ConnectWorker(srv.bootstrap, kw.pop("group", "cluster"),
                         listener=ledger.listener(name), member_id=name,
                         worker_url="http://%s:8083" % name, **kw)


def run(coro, timeout):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


ALL = ["AC0", "AT1", "AT2", "BC0", "BT1"]


async def _stop_all(ws):
    for w in ws:
        await w.stop()


# ------------------------------------------------------------------------- case studies
def test_case_studies_w1_joins_w2_joins(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        w1 = worker(srv, ledger, "W1", connectors=CONFIG)
        await w1.start()
        # W1 joins: it is chosen, computes, and gets everything.
        await until(lambda: labels(w1) == ALL, 5, "W1 to run everything")
        assert w1.computations >= 1
        w2 = worker(srv, ledger, "W2")
        await w2.start()
        # W2 joins: W1 revokes (ack'd before W2 may start anything), W2 gets its share.
        await until(lambda: w2.state.owned and w1.member_epoch == w2.member_epoch
                    and len(w1.state.owned) + len(w2.state.owned) == 5, 5, "W2's share")
        assert sorted(labels(w1) + labels(w2)) == ALL
        assert {len(labels(w1)), len(labels(w2))} == {2, 3}
        for u in w2.state.owned:          # what W2 runs now was stopped on W1 first
            stopped = [t for t, w, k, us in ledger.events if w == "W1" and k == "-" and u in us]
            assert stopped and stopped[0] <= ledger.first_start(u, "W2")
        await _stop_all([w2, w1])
    run(go(), 30)
    assert ledger.check() == {}


async def _three_workers(srv, ledger):
    ws = [worker(srv, ledger, "W%d" % i, connectors=CONFIG if i == 1 else None)
          for i in (1, 2, 3)]
    for w in ws:
        await w.start()
    await until(lambda: sum(len(w.state.owned) for w in ws) == 5
                and len({w.member_epoch for w in ws}) == 1
                and all(w.state.owned for w in ws), 8, "3 workers to share 5 units")
    return ws


def test_case_study_worker_leaves(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        w1, w2, w3 = await _three_workers(srv, ledger)
        lost = frozenset(w2.state.owned)
        t_kill = time.monotonic()
        await w2.kill()
        ledger.killed("W2", w2)
        # Held for the scheduled delay (after the session expires), then reassigned.
        await until(lambda: lost <= (w1.state.owned | w3.state.owned), 15, "W2's work moved")
        t_moved = min(ledger.first_start(u, w, t_kill) or 1e18 for u in lost for w in ("W1", "W3"))
        waited = t_moved - t_kill
        assert waited >= (SESSION_MS + DELAY_MS) / 1000 * 0.8, waited
        assert sorted(labels(w1) + labels(w3)) == ALL
        await _stop_all([w1, w3])
    run(go(), 40)
    assert ledger.check() == {}


def test_case_study_worker_bounces(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        w1, w2, w3 = await _three_workers(srv, ledger)
        held = frozenset(w2.state.owned)
        others = {u: w for w in (w1, w3) for u in w.state.owned}
        t_kill = time.monotonic()
        await w2.kill()
        ledger.killed("W2", w2)
        # The subject: away longer than the session (expired), back within the delay.
        await asyncio.sleep(SESSION_MS / 1000 * 1.5)
        w2b = worker(srv, ledger, "W2")                 # same member id, comes back
        await w2b.start()
        await until(lambda: w2b.state.owned == held, DELAY_MS / 1000, "W2 to get its work back")
        assert time.monotonic() - t_kill < (SESSION_MS + DELAY_MS) / 1000
        assert {u: w for w in (w1, w3) for u in w.state.owned} == others   # nothing moved
        await _stop_all([w1, w2b, w3])
    run(go(), 30)
    assert ledger.check() == {}


def test_static_member_temporary_leave_keeps_its_work(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        w1 = worker(srv, ledger, "W1", connectors=CONFIG)
        w2 = worker(srv, ledger, "W2", instance_id="host-2")
        for w in (w1, w2):
            await w.start()
        await until(lambda: w2.state.owned and len(w1.state.owned | w2.state.owned) == 5
                    and w1.member_epoch == w2.member_epoch, 8, "two workers sharing")
        held = frozenset(w2.state.owned)
        await w2.stop(temporary=True)                   # epoch -2: work stays reserved
        beats = w1.heartbeats                           # W1 is answered three times more
        await until(lambda: w1.heartbeats >= beats + 3, 5, "three heartbeats of W1")
        assert not (held & w1.state.owned)
        w2b = worker(srv, ledger, "W2-restarted", instance_id="host-2")
        await w2b.start()
        await until(lambda: w2b.state.owned == held, 5, "the same instance to get its work")
        await _stop_all([w1, w2b])
    run(go(), 30)
    assert ledger.check() == {}


# ------------------------------------------------------------------------- assignor versions
def test_mixed_assignor_versions_select_the_covering_worker(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        ranges = {"B": (3, 4), "C": (2, 4), "A": (1, 5)}   # A joins last and is still chosen
        ws = {}
        for n, (lo, hi) in ranges.items():
            ws[n] = worker(srv, ledger, n, connectors=CONFIG if n == "B" else None,
                           assignors=[AssignorSpec("incremental-cooperative", lo, hi)])
            await ws[n].start()
        await until(lambda: sum(len(w.state.owned) for w in ws.values()) == 5
                    and all(w.state.owned for w in ws.values())
                    and len({w.member_epoch for w in ws.values()}) == 1, 8, "convergence")
        before = {n: w.computations for n, w in ws.items()}
        ws["B"].request_rebalance(reason=1)              # a new target, computed by A
        await until(lambda: ws["A"].computations > before["A"], 5, "A to compute")
        assert ws["B"].computations == before["B"] and ws["C"].computations == before["C"]
        bad = worker(srv, ledger, "D", assignors=[AssignorSpec("incremental-cooperative", 6, 7)])
        with pytest.raises(ResponseError) as ei:
            await bad.start()
        assert ei.value.code == E.UNSUPPORTED_ASSIGNOR
        await bad.stop()
        await _stop_all(ws.values())
    run(go(), 30)
    assert ledger.check() == {}


# ------------------------------------------------------------------------- chosen worker dies
class HangingWorker(ConnectWorker):
    """Prepares, then never installs (the process 'dies' in the middle of the assignment)."""
    prepared = None

    async def compute_plan(self, prepared):
        self.prepared = prepared
        await asyncio.Event().wait()


def test_chosen_worker_dies_during_assignment(serve):
    srv = serve(extra_args=FAST)
    ledger = Ledger()

    async def go():
        dying = HangingWorker(srv.bootstrap, "cluster", listener=ledger.listener("W0"),
                              member_id="W0", connectors=CONFIG, session_timeout_ms=60_000)
        await dying.start()
        await until(lambda: dying.prepared is not None, 5, "W0 to be chosen and prepare")
        others = [worker(srv, ledger, "W%d" % i) for i in (1, 2)]
        for w in others:
            await w.start()
        await dying.kill()
        ledger.killed("W0", dying)
        await until(lambda: sum(len(w.state.owned) for w in others) == 5
                    and all(w.state.owned for w in others)
                    and others[0].member_epoch == others[1].member_epoch, 10, "convergence")
        assert sum(w.computations for w in others) >= 1
        assert sorted(labels(others[0]) + labels(others[1])) == ALL
        await _stop_all(others)
    run(go(), 30)
    assert ledger.check() == {}


# ------------------------------------------------------------------------- scale
def test_200_workers_2000_tasks_converge_balanced(serve):
    hb_ms = 250
    srv = serve(extra_args=["--group-config", "group.connect.heartbeat.interval.ms=%d" % hb_ms,
                            "--group-config", "group.connect.session.timeout.ms=20000",
                            "--fsync", "unsafe-no-fsync", "--shards", "4"])
    ledger = Ledger()
    n_workers, n_conn, per = 200, 20, 100
    config = {"conn-%02d" % c: per for c in range(n_conn)}

    async def go():
        links = [CoordinatorLink(srv.bootstrap, "big", request_timeout_s=20) for _ in range(4)]
        ws = [ConnectWorker(group_id="big", link=links[i % 4], listener=ledger.listener(i),
                            member_id="w%03d" % i, rebalance_timeout_ms=60_000,
                            scheduled_rebalance_max_delay_ms=0, session_timeout_ms=20_000,
                            request_timeout_s=20) for i in range(n_workers)]
        await asyncio.gather(*(w.start(timeout_s=30) for w in ws))
        t0 = time.monotonic()
        await ws[0].update_config(config)

        def balanced():
            tasks = [sum(1 for u in w.state.owned if u[1] >= 0) for w in ws]
            conns = [sum(1 for u in w.state.owned if u[1] < 0) for w in ws]
            return (sum(tasks) == n_conn * per and sum(conns) == n_conn
                    and max(tasks) - min(tasks) <= 1 and max(conns) - min(conns) <= 1
                    and len({w.member_epoch for w in ws}) == 1)
        await until(balanced, 40, "a balanced assignment")
        took = time.monotonic() - t0
        intervals = took / (hb_ms / 1000)
        print("200 workers / 2000 tasks balanced after %.2f s = %.1f heartbeat intervals"
              % (took, intervals))
        assert intervals <= 10, intervals
        owners = {}
        for w in ws:
            for u in w.state.owned:
                assert u not in owners
                owners[u] = w.member_id
        await asyncio.gather(*(w.kill() for w in ws))
        for i, w in enumerate(ws):
            ledger.killed(i, w)
        for link in links:
            await link.close()
    run(go(), 60)
    assert ledger.check() == {}


def test_owned_work_is_reported_after_every_answer_with_an_assignment():
    """The coordinator repeats an assignment until the worker reports it as owned, and only an
    owned set acknowledges a revocation (docs/decisions.md, simulation findings 8 and 9): the
    heartbeat after an answer that carried an assignment reports the owned work even when the
    answer changed nothing for the worker; other heartbeats omit it."""
    from groupcoord.client.connect_member import ConnectMemberState
    from groupcoord.protocol import messages as m

    def answer(connectors=None):
        a = None if connectors is None else m.ConnectGroupHeartbeatResponseAssignment(
            connectors_and_tasks=m.ConnectGroupHeartbeatResponseConnectorsAndTasks(
                connectors=connectors, tasks=[]))
        return m.ConnectGroupHeartbeatResponse(member_id="W1", member_epoch=1,
                                               heartbeat_interval_ms=HB_MS, assignment=a)

    st = ConnectMemberState("g", "W1", worker_url="http://w1")
    assert st.heartbeat_request().owned_connectors_and_tasks is not None     # the join
    out = st.on_response(answer(["A"]))
    assert out.assign == {("A", -1)}
    st.assigned(out.assign)
    assert st.heartbeat_request().owned_connectors_and_tasks.connectors == ["A"]
    st.on_response(answer())
    assert st.heartbeat_request().owned_connectors_and_tasks is None
    out = st.on_response(answer(["A"]))          # the same assignment again: nothing to do
    assert not out.assign and not out.revoke
    assert st.heartbeat_request().owned_connectors_and_tasks.connectors == ["A"]
