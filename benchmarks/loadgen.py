"""Load generator for `groupcoord serve`: many simulated group members over a few connections.

    PYTHONPATH=src python benchmarks/loadgen.py --bootstrap 127.0.0.1:9092 \
        --consumer-groups 10 --consumer-members 1000 --topics t0,t1 --seconds 10

Our own asyncio client (uvloop when installed), built on the project's native codec
(encode_request_frame / decode_response_frame / FrameSplitter). What each member does is
decided by the SDK's sans-I/O state machines (groupcoord.client: ConsumerMemberState,
ConnectMemberState, ClassicMemberState, and compute_install for the chosen Connect worker);
this module only does the I/O, the scheduling and the bookkeeping of the measurement:

* Connections pipeline requests: every request gets a correlation id, responses are matched by
  it, and everything queued during one loop iteration leaves in ONE transport.write.
* Members are multiplexed over the connections (member i uses connection i % connections), and
  each member has at most one heartbeat in flight, like a real client.
* Consumer members (ConsumerGroupHeartbeat v0 or v1, KIP-848) follow their epoch and
  assignment like a real member: an assignment in a response is reconciled at once (revoked
  partitions dropped first, new ones taken, no listener) and the owned partitions are
  reported in the next heartbeat, which is sent immediately; fenced / unknown members rejoin
  at epoch 0. A heartbeat with nothing to report (the state machine's keepalive_ready) is
  encoded once per member id and epoch and sent as a template.
* Connect workers (ConnectGroupHeartbeat), the same way; the worker the coordinator chooses
  answers COMPUTE_ASSIGNMENT with PrepareAssignment -> the SDK's compute_install (the
  incremental-cooperative assignor, sticky over the members' current work, no scheduled
  delay) -> InstallAssignment.
* Classic members: JoinGroup (v5, MEMBER_ID_REQUIRED round trip) -> SyncGroup (the leader
  assigns round robin over the topics its members subscribe, as ConsumerProtocolAssignment) ->
  Heartbeat; REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID make it rejoin.
  Each classic member has a connection of its own (see ClassicGroupSim.add); consumer and
  connect members share --connections connections.
* An error the state machine calls fatal stops the run (LoadGen.fatal) instead of retrying.

Modes (LoadGen.mode):
  life   each member heartbeats at its heartbeat interval (the server's
         heartbeat_interval_ms for consumer/connect, --classic-heartbeat-ms for classic), at
         once when it has something to report. Used to form groups and to time convergence.
  flood  closed loop: a member heartbeats again as soon as its previous heartbeat is answered,
         with at most --window requests in flight per connection. Measures throughput.
  paced  open loop at --rate heartbeats/s (token bucket, 1 ms ticks), members round robin,
         still at most --window in flight per connection. Measures latency at a given rate.

Latency = time.perf_counter() when the request is queued (the write happens in the same loop
iteration) to when its response frame is read, per heartbeat, recorded only inside a
measurement window. --echo points the same heartbeat frames at benchmarks/echo_server.py: the
echoed frame is matched by its correlation id and decoded (as a request) instead of as a
response; the members then stay as they are.

Security (LoadGen(ssl=..., sasl=...); --ssl-cafile, --sasl-mechanism on the command line): every
connection is opened over TLS with the given ssl.SSLContext, and/or authenticates with SASL
before its first group request: SaslHandshake v1, then SaslAuthenticate (the client side of
SCRAM-SHA-256/512 is the SDK's security/scram_client.py with PBKDF2 memoized, two round trips; PLAIN one). Only opening a
connection changes; the pipelined hot path is the same code whatever the listener.
"""
from __future__ import annotations

import abc
import argparse
import asyncio
import gc
import hashlib
import json
import os
import ssl
import struct
import sys
import time
from array import array
from collections import Counter, deque
from typing import Optional

import numpy as np

from groupcoord.assign.connect import connect_units
from groupcoord.client.connect_assignor import compute_install
from groupcoord.client.connect_member import Action, ConnectMemberState, Phase, split_units
from groupcoord.client.members_classic_state import (ASSIGNED, COORDINATOR, LOST, REJOIN, SYNC,
                                                     ClassicMemberState)
from groupcoord.client.members_classic_state import OK as C_OK
from groupcoord.client.members_classic_state import STABLE as C_STABLE
from groupcoord.client.members_classic_state import UNJOINED as C_UNJOINED
from groupcoord.client.members_consumer_state import (FATAL, LEFT, RECONCILING,
                                                      ConsumerMemberState)
from groupcoord.protocol import (FrameSplitter, decode_request_frame, decode_response_frame,
                                 encode_request_frame)
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groupcoord.security.scram import MECHANISMS as SCRAM_HASHES  # noqa: E402
from groupcoord.security.scram_client import ScramClient  # noqa: E402

_SALTED: dict = {}


def _cached_pbkdf2(hname: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """hashlib.pbkdf2_hmac, memoized: a real client runs PBKDF2 at every connection (~4 ms in
    CPython), which would make a handshake benchmark measure this process, not the node
    (the node never runs PBKDF2 for SCRAM)."""
    key = (hname, password, salt, iterations)
    out = _SALTED.get(key)
    if out is None:
        out = _SALTED[key] = hashlib.pbkdf2_hmac(hname, password, salt, iterations)
    return out

__all__ = ["LoadGen", "ConsumerGroupSim", "ConnectGroupSim", "ClassicGroupSim",
           "percentiles", "proc_cpu_seconds", "sasl_authenticate", "SaslError",
           "client_ssl_context"]

NONE = 0
JOIN_V, SYNC_V, HB_V = 5, 3, 3        # what aiokafka / librdkafka send (non-flexible)
CONNECT_V = 0
_I32 = struct.Struct(">i")
_perf = time.perf_counter


def percentiles(samples, ps=(50, 99, 99.9)) -> dict:
    """{p: milliseconds} of samples in seconds (nan when empty)."""
    if len(samples) == 0:
        return {p: float("nan") for p in ps}
    a = np.frombuffer(samples, dtype=np.float64) if isinstance(samples, array) \
        else np.asarray(samples, dtype=np.float64)
    return {p: float(v) * 1000.0 for p, v in zip(ps, np.percentile(a, ps))}


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/PID/stat, in seconds."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        data = f.read()
    fields = data[data.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple:
    """(busy, total) jiffies of the whole machine from /proc/stat (all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


class Stats:
    __slots__ = ("hb", "requests", "recording", "lat", "errors", "fenced", "rejoins")

    def __init__(self):
        self.hb = 0                    # heartbeats answered
        self.requests = 0              # every request answered
        self.recording = False
        self.lat = array("d")          # heartbeat latencies (s) while recording
        self.errors: Counter = Counter()   # (api, error code) -> count
        self.fenced = 0                # members that had to rejoin (fenced / unknown)
        self.rejoins = 0


# ----------------------------------------------------------------------------- connection
class Conn(asyncio.Protocol):
    """One pipelined client connection."""

    def __init__(self, lg: "LoadGen", index: int):
        self.lg = lg
        self.index = index
        self.loop = lg.loop
        self.stats = lg.stats
        self.echo = lg.echo
        self.splitter = FrameSplitter()
        self.pending: dict = {}            # corr -> (api key, version, callback, is hb, t0)
        self.out: list = []
        self.flush_scheduled = False
        self.corr = 0
        self.transport = None
        self.ready: deque = deque()        # members waiting for a send slot (flood/paced)
        self.inflight_hb = 0
        self.lost = False
        self.client_id = lg.client_id
        self.calls: set = set()            # futures of call() not answered yet

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.lost = True
        if not self.lg.closing:
            self.lg.fatal = "connection %d lost: %r (%d requests unanswered)" % (
                self.index, exc, len(self.pending))
        self.fail_calls(exc)

    def fail_calls(self, exc) -> None:
        """A setup request (e.g. Metadata on a TLS port spoken to in plain) must not wait
        for ever once the connection is gone: its caller gets the loss."""
        for fut in self.calls:
            if not fut.done():
                fut.set_exception(ConnectionError(
                    "connection %d closed by the node before answering (%r)" % (self.index,
                                                                                 exc)))
        self.calls.clear()

    def _next_corr(self) -> int:
        self.corr = c = (self.corr + 1) & 0x7FFFFFFF
        return c

    def send(self, req, version: int, cb, hb: bool = False) -> None:
        corr = self._next_corr()
        self._queue(encode_request_frame(req, version, corr, self.client_id), corr,
                    req.API_KEY, version, cb, hb)

    def send_template(self, tpl: tuple, cb) -> None:
        """A cached heartbeat frame (_template); the correlation id is patched in."""
        corr = self._next_corr()
        self._queue(tpl[0] + _I32.pack(corr) + tpl[1], corr, tpl[2], tpl[3], cb, True)

    def _queue(self, frame, corr, key, version, cb, hb):
        self.pending[corr] = (key, version, cb, hb, _perf())
        if hb:
            self.inflight_hb += 1
        self.out.append(frame)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self):
        self.flush_scheduled = False
        if self.out and not self.lost:
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def data_received(self, data):
        now = _perf()
        st = self.stats
        pending = self.pending
        for f in self.splitter.feed(data):
            if self.echo:
                header, _body = decode_request_frame(f)
                corr = header.correlation_id
            else:
                corr = _I32.unpack_from(f, 0)[0]
            key, ver, cb, hb, t0 = pending.pop(corr)
            st.requests += 1
            if hb:
                self.inflight_hb -= 1
                st.hb += 1
                if st.recording:
                    st.lat.append(now - t0)
            if self.echo:
                cb(None)
            else:
                cb(decode_response_frame(f, key, ver)[1])
        if self.ready:
            self.lg.pump(self)

    def call(self, req, version: int) -> asyncio.Future:
        """Send one request; a future of its response (setup and inspection)."""
        fut = self.loop.create_future()
        self.calls.add(fut)

        def answered(r):
            self.calls.discard(fut)
            if not fut.done():
                fut.set_result(r)
        self.send(req, version, answered)
        return fut


class SaslError(Exception):
    """The node refused the SASL exchange (the message has its error code and text)."""


SASL_HANDSHAKE_V, SASL_AUTHENTICATE_V = 1, 2     # what librdkafka and the Java client send


async def sasl_authenticate(conn: Conn, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v1 + SaslAuthenticate v2 on a fresh connection: SCRAM-SHA-256/512 in
    two round trips (the server's signature verified), PLAIN in one. SaslError if refused."""
    hs = await conn.call(m.SaslHandshakeRequest(mechanism=mechanism), SASL_HANDSHAKE_V)
    if hs.error_code:
        raise SaslError("SaslHandshake(%s): error %d (enabled: %s)"
                        % (mechanism, hs.error_code, ", ".join(hs.mechanisms)))

    async def step(token: bytes) -> bytes:
        r = await conn.call(m.SaslAuthenticateRequest(auth_bytes=token), SASL_AUTHENTICATE_V)
        if r.error_code:
            raise SaslError("SaslAuthenticate(%s, %s): error %d: %s"
                            % (mechanism, user, r.error_code, r.error_message))
        return r.auth_bytes

    if mechanism == "PLAIN":
        await step(b"\0" + user.encode("utf-8") + b"\0" + password.encode("utf-8"))
        return
    sc = ScramClient(mechanism, user, password, pbkdf2=_cached_pbkdf2)
    final = sc.step(await step(sc.initial()))
    sc.step(await step(final))          # checks the server's signature (SaslClientError)


def _template(req, version: int) -> tuple:
    """(head, tail, api key, version, the request): send_template patches the correlation
    id in between head and tail."""
    frame = encode_request_frame(req, version, 0, "loadgen")
    return (frame[:8], frame[12:], req.API_KEY, version, req)


# ----------------------------------------------------------------------------- members
# Every member's protocol logic is the SDK's sans-I/O state machine (groupcoord.client:
# ConsumerMemberState, ConnectMemberState, ClassicMemberState); what is here is the I/O and
# the scheduling. The steady keep-alive of a consumer or connect member is encoded once per
# member id and epoch and sent as a template (the state machine books it: try_keepalive).
class Member(abc.ABC):
    __slots__ = ("lg", "conn", "group", "inflight", "timer", "interval", "tpl", "tpl_key",
                 "req")

    def __init__(self, lg, conn, group):
        self.lg = lg
        self.conn = conn
        self.group = group
        self.inflight = False
        self.timer = None
        self.interval = 3.0
        self.tpl = None
        self.tpl_key = None
        self.req = None                # the request whose answer is awaited (consumer)

    # scheduling ----------------------------------------------------------------
    def schedule(self, urgent: bool = False, delay: Optional[float] = None) -> None:
        lg = self.lg
        if lg.closing:
            return
        if lg.mode == "life" or not self.steady():
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if urgent:
                self.heartbeat()
            else:
                self.timer = lg.loop.call_later(self.interval if delay is None else delay,
                                                self._fire)
        else:
            self.conn.ready.append(self)

    def _fire(self):
        self.timer = None
        self.heartbeat()

    def _next(self) -> None:
        """After an accepted answer. Life: heartbeat at the interval, or now when there is
        something to report. Flood / paced (the hot path): back to the ready queue at once;
        heartbeat() then sends a keep-alive or, rarely, a report."""
        lg = self.lg
        if lg.mode == "life":
            self.schedule(urgent=not self.sm.keepalive_ready())
        elif not lg.closing:
            self.conn.ready.append(self)

    def steady(self) -> bool:
        """The next request is a plain keep-alive (flood / paced modes queue it)."""
        return True

    def _error(self, api: str, code: int) -> None:
        self.lg.stats.errors[(api, code)] += 1

    def _fatal(self, api: str, code: int) -> None:
        # The SDK's state machine cannot go on (e.g. GROUP_MAX_SIZE_REACHED): stop the run
        # loudly rather than retry in silence.
        self.lg.fatal = "%s: %s answered fatal error %d to member %s" % (
            self.group, api, code, self.member_id)

    @abc.abstractmethod
    def heartbeat(self) -> None:
        """Send this member's next request (heartbeat, join, ...)."""


class _ModernMember(Member):
    """A consumer member or connect worker: heartbeats only, keep-alives sent as templates."""
    __slots__ = ("sm",)

    def steady(self) -> bool:
        return self.lg.echo or self.sm.keepalive_ready()

    def _send_keepalive(self, key, version: int) -> None:
        """A keep-alive is booked (or echo mode): send its encoding, made once per key."""
        if self.tpl_key != key:
            self.tpl = _template(self.sm.keepalive_request(), version)
            self.tpl_key = key
        self.req = self.tpl[4]
        self.inflight = True
        self.conn.send_template(self.tpl, self.on_response)


class ConsumerMember(_ModernMember):
    __slots__ = ("version",)

    def __init__(self, lg, conn, group, member_id: str, version: int, topics: list):
        super().__init__(lg, conn, group)
        self.version = version
        self.sm = ConsumerMemberState(group, topics=topics, version=version,
                                      member_id=member_id, rebalance_timeout_ms=60_000)
        self.sm.add_topic_names(lg.topic_names)
        self.interval = 5.0

    member_id = property(lambda self: self.sm.member_id)
    epoch = property(lambda self: self.sm.epoch)
    n_owned = property(lambda self: len(self.sm.owned))

    @property
    def owned(self) -> dict:
        """topic id -> sorted partitions."""
        out: dict = {}
        for t, p in self.sm.owned:
            out.setdefault(t, []).append(p)
        return {t: sorted(ps) for t, ps in out.items()}

    def heartbeat(self) -> None:
        if self.inflight or self.lg.closing:
            return
        sm = self.sm
        if self.lg.echo or sm.try_keepalive():
            self._send_keepalive((sm.member_id, sm.epoch), self.version)
            return
        if sm.state in (FATAL, LEFT):
            return
        self.inflight = True
        self.req = sm.heartbeat_request()
        self.conn.send(self.req, self.version, self.on_response, True)

    def on_response(self, resp) -> None:
        self.inflight = False
        if resp is None:                               # echo server
            self.schedule()
            return
        sm = self.sm
        out = sm.on_heartbeat_response(self.req, resp)
        if out.ok:
            if sm.heartbeat_interval_ms > 0:
                self.interval = sm.heartbeat_interval_ms / 1000.0
            # Reconcile at once (no listener): revoke first, then assign; the owned set is
            # reported by the next heartbeat, sent now. (STABLE: nothing to reconcile.)
            while sm.state == RECONCILING and (rec := sm.next_reconciliation()) is not None:
                if rec.missing_topic_ids:              # created after our Metadata request
                    sm.add_topic_names({t: t.hex() for t in rec.missing_topic_ids})
                    continue
                sm.revoke_done(rec)
                sm.assign_done(rec)
            self._next()
            return
        self._error("ConsumerGroupHeartbeat", resp.error_code)
        if out.rejoin:                     # fenced: partitions abandoned, join at epoch 0
            self.lg.stats.fenced += 1
            self.schedule(urgent=True)
        elif out.find_coordinator:
            self.schedule(delay=0.1)
        elif out.fatal is not None:
            self._fatal("ConsumerGroupHeartbeat", resp.error_code)
        else:
            self.schedule()


class ConnectWorker(_ModernMember):
    __slots__ = ("computing", "sim")

    def __init__(self, lg, conn, sim, worker_id: str, send_config: bool):
        super().__init__(lg, conn, sim.group)
        self.sim = sim
        self.computing = False
        self.sm = ConnectMemberState(sim.group, worker_id,
                                     worker_url="http://%s:8083" % worker_id,
                                     rebalance_timeout_ms=60_000)
        if send_config:
            self.sm.set_config(dict(zip(sim.names, sim.tc)), offset=1)
        self.interval = 3.0

    member_id = property(lambda self: self.sm.member_id)
    epoch = property(lambda self: self.sm.member_epoch)
    n_owned = property(lambda self: len(self.sm.owned))

    @property
    def owned(self) -> m.ConnectGroupHeartbeatRequestConnectorsAndTasks:
        """What the worker runs, in the heartbeat's wire form."""
        conns, tasks = split_units(self.sm.owned)
        by: dict = {}
        for t in tasks:
            by.setdefault(t.connector, []).append(t.task)
        return m.ConnectGroupHeartbeatRequestConnectorsAndTasks(
            connectors=conns, tasks=[m.ConnectGroupHeartbeatRequestConnectorTasks(
                connector=c, task_ids=ids) for c, ids in sorted(by.items())])

    def heartbeat(self) -> None:
        if self.inflight or self.lg.closing:
            return
        sm = self.sm
        if self.lg.echo or sm.try_keepalive():
            self._send_keepalive(sm.member_epoch, CONNECT_V)
            return
        if sm.phase in (Phase.FATAL, Phase.LEFT):
            return
        self.inflight = True
        self.conn.send(sm.heartbeat_request(), CONNECT_V, self.on_response, True)

    def on_response(self, resp) -> None:
        self.inflight = False
        if resp is None:
            self.schedule()
            return
        sm = self.sm
        out = sm.on_response(resp)
        if out.action is Action.OK:
            self.interval = out.interval_ms / 1000.0
            # Reconcile at once (no tasks to stop or start): revoke, then assign; the next
            # heartbeat, sent now, reports the owned work.
            if out.revoke:
                sm.revoked(out.revoke)
            if out.assign:
                sm.assigned(out.assign)
            if out.compute and not self.computing:
                self.compute()
            self._next()
            return
        self._error("ConnectGroupHeartbeat", resp.error_code)
        if out.action is Action.REJOIN:    # fenced: give up all work, join at epoch 0
            self.lg.stats.fenced += 1
            sm.revoked(out.revoke)
            self.schedule(urgent=True)
        elif out.action in (Action.FIND_COORDINATOR, Action.RETRY):
            self.schedule(delay=0.1)
        else:
            self._fatal("ConnectGroupHeartbeat", resp.error_code)

    # the chosen worker's role: the SDK's assignor step (compute_install) ---------------
    def compute(self) -> None:
        self.computing = True
        self.conn.send(m.ConnectGroupPrepareAssignmentRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch),
            CONNECT_V, self._prepared)

    def _prepared(self, p) -> None:
        if p.error_code != NONE:
            self._error("ConnectGroupPrepareAssignment", p.error_code)
            self.computing = False
            return
        # No scheduled delay: lost work is reassigned at once (the load converges).
        plan = compute_install(p, 0)
        self.sim.computes += 1
        self.conn.send(m.ConnectGroupInstallAssignmentRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            group_epoch=p.group_epoch, error=plan.error,
            rebalance_delay_ms=plan.rebalance_delay_ms, assignor_state=plan.assignor_state,
            members=plan.members), CONNECT_V, self._installed)

    def _installed(self, r) -> None:
        self.computing = False
        if r.error_code != NONE:
            # e.g. the group moved on while we computed: the next heartbeat asks again.
            self._error("ConnectGroupInstallAssignment", r.error_code)


class ClassicMember(Member):
    __slots__ = ("sm", "owned", "topics", "sim")

    def __init__(self, lg, conn, sim, topics):
        super().__init__(lg, conn, sim.group)
        self.sim = sim
        self.topics = topics
        self.sm = ClassicMemberState(sim.group, session_timeout_ms=45_000,
                                     rebalance_timeout_ms=60_000)
        self.owned: dict = {}          # topic -> partitions
        self.interval = sim.heartbeat_s

    member_id = property(lambda self: self.sm.member_id)
    generation = property(lambda self: self.sm.generation)
    n_owned = property(lambda self: sum(len(p) for p in self.owned.values()))

    def steady(self) -> bool:
        return self.sm.state == C_STABLE

    def heartbeat(self) -> None:
        if self.inflight or self.lg.closing:
            return
        sm = self.sm
        if sm.state == C_UNJOINED:
            self.join()
            return
        if sm.state != C_STABLE:       # FATAL, LEFT; JOINING / SYNCING are in flight
            return
        self.inflight = True
        key = (sm.generation, sm.member_id)
        if self.tpl_key != key:
            self.tpl = _template(sm.heartbeat_request(), HB_V)
            self.tpl_key = key
        self.conn.send_template(self.tpl, self._hb)

    def join(self) -> None:
        self.inflight = True
        sub = embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=self.topics),
                                           1)
        self.conn.send(self.sm.join_request("consumer", [("roundrobin", sub)]), JOIN_V,
                       self._joined)

    def _rejoin(self, lost: bool = False) -> None:
        self.lg.stats.rejoins += 1
        if lost:
            self.owned = {}
        self.schedule(urgent=True)

    def _joined(self, r) -> None:
        self.inflight = False
        out = self.sm.on_join_response(r)
        if out.kind == SYNC:
            assignments = self.sim.leader_assign(out.members) if self.sm.is_leader else {}
            self.inflight = True
            self.conn.send(self.sm.sync_request(assignments), SYNC_V, self._synced)
            return
        if out.code == ErrorCode.MEMBER_ID_REQUIRED:   # KIP-394: join again with the id
            self.schedule(urgent=True)
            return
        self._after_error("JoinGroup", out)

    def _synced(self, r) -> None:
        self.inflight = False
        out = self.sm.on_sync_response(r)
        if out.kind != ASSIGNED:
            self._after_error("SyncGroup", out)
            return
        self.owned = {}
        if out.assignment:
            _v, a = embedded.decode_assignment(out.assignment)
            self.owned = {tp.topic: list(tp.partitions) for tp in a.assigned_partitions
                          if tp.partitions}
        self.schedule()

    def _hb(self, r) -> None:
        self.inflight = False
        out = self.sm.on_heartbeat_response(r)
        if out.kind == C_OK:
            self.schedule()
            return
        if out.code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.lg.stats.fenced += 1
        self._after_error("Heartbeat", out)

    def _after_error(self, api: str, out) -> None:
        self._error(api, out.code)
        if out.kind == REJOIN:
            self._rejoin()
        elif out.kind == LOST:
            self._rejoin(lost=True)
        elif out.kind == COORDINATOR:
            self.schedule(delay=0.2)
        else:
            self._fatal(api, out.code)


# ----------------------------------------------------------------------------- groups
def _balanced(counts) -> bool:
    return not counts or max(counts) - min(counts) <= 1


def _owned_once(members, units: int, unit_sets, balanced: bool = True) -> bool:
    """Every one of ``units`` units owned by exactly one member (``unit_sets``: each member's
    units; ``n_owned``: their count), counts within one of each other when ``balanced``."""
    counts = [x.n_owned for x in members]
    if sum(counts) != units or (balanced and not _balanced(counts)):
        return False
    seen: set = set()
    for us in unit_sets:
        seen.update(us)
    return len(seen) == units


class ConsumerGroupSim:
    kind = "consumer"

    def __init__(self, lg, group, n_members, topics, version=1, prefix="m"):
        self.lg, self.group, self.topics, self.version = lg, group, list(topics), version
        self.members: list = []
        self.add(n_members, prefix)

    def add(self, n, prefix="m") -> list:
        new = []
        base = len(self.members)
        for i in range(base, base + n):
            # v1: the client generates its member id (22 chars, like a UUID in base64)
            mid = ("%s-%s-%08d" % (prefix, self.group, i))[-22:].rjust(22, "0") \
                if self.version >= 1 or self.lg.echo else ""
            c = self.lg.next_conn()
            mem = ConsumerMember(self.lg, c, self.group, mid, self.version, self.topics)
            if self.lg.echo:
                mem.sm.epoch = 1           # the echo server never answers a join
            new.append(mem)
        self.members.extend(new)
        return new

    def units(self) -> int:
        return sum(self.lg.partitions[t] for t in self.topics)

    def converged(self) -> bool:
        """Client view: every member at the same epoch, holding what it was given, no
        partition held twice, every partition held, counts within one of each other."""
        ms = self.members
        if not ms:
            return True
        e = ms[0].epoch
        if e <= 0 or any(x.epoch != e for x in ms):
            return False
        return _owned_once(ms, self.units(), (x.sm.owned for x in ms))

    async def server_stable(self, conn) -> tuple:
        d = await conn.call(m.ConsumerGroupDescribeRequest(group_ids=[self.group]), 0)
        g = d.groups[0]
        return g.group_state, g.group_epoch, g.assignment_epoch, len(g.members)


class ConnectGroupSim:
    kind = "connect"

    def __init__(self, lg, group, n_workers, n_connectors, tasks_per):
        self.lg, self.group = lg, group
        self.names = ["connector-%05d" % c for c in range(n_connectors)]
        self.tc = [tasks_per] * n_connectors
        self.computes = 0
        self.members: list = []
        self.add(n_workers)

    def add(self, n) -> list:
        base = len(self.members)
        new = []
        for i in range(base, base + n):
            w = ConnectWorker(self.lg, self.lg.next_conn(), self,
                              "worker-%s-%06d" % (self.group, i), send_config=(i == 0))
            if self.lg.echo:
                w.sm.member_epoch = 1
            new.append(w)
        self.members.extend(new)
        return new

    def units(self) -> int:
        return int(connect_units(self.tc)[-1])

    def converged(self) -> bool:
        """Every worker at the same epoch, every unit owned exactly once (Connect balances
        connectors and tasks separately: no balance check)."""
        ms = self.members
        e = ms[0].epoch
        if e <= 0 or any(x.epoch != e for x in ms):
            return False
        return _owned_once(ms, self.units(), (x.sm.owned for x in ms), balanced=False)

    async def server_stable(self, conn) -> tuple:
        d = await conn.call(m.ConnectGroupDescribeRequest(group_ids=[self.group]), 0)
        g = d.groups[0]
        return g.group_state, g.group_epoch, g.assignment_epoch, len(g.members)


class ClassicGroupSim:
    kind = "classic"

    def __init__(self, lg, group, n_members, topics, heartbeat_ms=3000):
        self.lg, self.group, self.topics = lg, group, list(topics)
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.members: list = []
        self.assigns = 0
        self.add(n_members)

    def add(self, n) -> list:
        # A classic member gets a connection of its own (LoadGen.start opens it), as a Kafka
        # client has: a JoinGroup parked at the barrier holds back every response queued
        # after it on its connection (responses go in request order), so members sharing a
        # connection would never see the heartbeat that tells them to rejoin.
        new = [ClassicMember(self.lg, None, self, self.topics) for _ in range(n)]
        self.members.extend(new)
        return new

    def units(self) -> int:
        return sum(self.lg.partitions[t] for t in self.topics)

    def leader_assign(self, members) -> dict:
        """Round robin over every (topic, partition) the members subscribe, members sorted
        by id (Kafka's RoundRobinAssignor for identical subscriptions): member id ->
        ConsumerProtocolAssignment bytes."""
        self.assigns += 1
        topics = set()
        for mem in members:
            _v, sub = embedded.decode_subscription(mem.metadata)
            topics.update(sub.topics)
        ids = sorted(mem.member_id for mem in members)
        per = {i: {} for i in ids}
        k = 0
        n = len(ids)
        for t in sorted(topics):
            for p in range(self.lg.partitions.get(t, 0)):
                per[ids[k % n]].setdefault(t, []).append(p)
                k += 1
        return {i: embedded.encode_assignment(m.ConsumerProtocolAssignment(
            assigned_partitions=[m.ConsumerProtocolAssignmentTopicPartition(topic=t,
                                                                            partitions=ps)
                                 for t, ps in per[i].items()]), 1) for i in ids}

    def converged(self) -> bool:
        ms = self.members
        g = ms[0].generation
        if any(x.sm.state != C_STABLE or x.generation != g for x in ms):
            return False
        return _owned_once(ms, self.units(), (((t, p) for t, ps in x.owned.items() for p in ps)
                                              for x in ms))

    async def server_stable(self, conn) -> tuple:
        d = await conn.call(m.DescribeGroupsRequest(groups=[self.group]), 0)
        g = d.groups[0]
        return g.group_state, None, None, len(g.members)


# ----------------------------------------------------------------------------- driver
class LoadGen:
    def __init__(self, host: str, port: int, connections: int = 8, window: int = 64,
                 echo: bool = False, client_id: str = "loadgen", ssl=None,
                 sasl: Optional[tuple] = None, server_hostname: Optional[str] = None):
        """ssl: an ssl.SSLContext (TLS on every connection; server_hostname, default host,
        is what the certificate is checked against); sasl: (mechanism, user, password),
        authenticated on every connection before its first request."""
        self.host, self.port = host, port
        self.ssl = ssl
        self.sasl = sasl
        self.server_hostname = server_hostname
        self.n_conns = connections
        self.window = window
        self.echo = echo
        self.client_id = client_id
        self.loop = None
        self.conns: list = []
        self._rr = 0
        self.stats = Stats()
        self.mode = "life"
        self.closing = False
        self.fatal: Optional[str] = None
        self.groups: list = []
        self.partitions: dict = {}     # topic name -> partitions (from Metadata)
        self.topic_names: dict = {}    # topic id -> name (from Metadata)

    async def open_conn(self, index: int) -> Conn:
        """A new connection (TLS and SASL as configured), not yet in self.conns."""
        if self.ssl is None:
            _t, c = await self.loop.create_connection(lambda: Conn(self, index), self.host,
                                                      self.port)
        else:
            _t, c = await self.loop.create_connection(
                lambda: Conn(self, index), self.host, self.port, ssl=self.ssl,
                server_hostname=self.server_hostname or self.host)
        if self.sasl is not None:
            await sasl_authenticate(c, *self.sasl)
        return c

    async def connect(self) -> None:
        self.loop = asyncio.get_running_loop()
        for i in range(self.n_conns):
            self.conns.append(await self.open_conn(i))
        if not self.echo:
            md = await self.conns[0].call(m.MetadataRequest(topics=None), 12)
            self.partitions = {t.name: len(t.partitions) for t in md.topics}
            self.topic_names = {t.topic_id: t.name for t in md.topics}

    def next_conn(self) -> Conn:
        c = self.conns[self._rr % len(self.conns)]
        self._rr += 1
        return c

    def consumer_group(self, group, n, topics, version=1) -> ConsumerGroupSim:
        g = ConsumerGroupSim(self, group, n, topics, version)
        self.groups.append(g)
        return g

    def connect_group(self, group, n, connectors, tasks_per) -> ConnectGroupSim:
        g = ConnectGroupSim(self, group, n, connectors, tasks_per)
        self.groups.append(g)
        return g

    def classic_group(self, group, n, topics, heartbeat_ms=3000) -> ClassicGroupSim:
        g = ClassicGroupSim(self, group, n, topics, heartbeat_ms)
        self.groups.append(g)
        return g

    def all_members(self):
        for g in self.groups:
            yield from g.members

    async def start(self, members) -> None:
        """Open the dedicated connections members need (classic), then every member sends
        its first request (join) in the same loop iteration."""
        members = list(members)
        for x in members:
            if x.conn is None:
                x.conn = await self.open_conn(len(self.conns))
                self.conns.append(x.conn)
        for x in members:
            x.schedule(urgent=True)

    async def wait_converged(self, groups, timeout: float, poll: float = 0.005) -> float:
        """Seconds until every group's client view has converged (raises on timeout)."""
        t0 = _perf()
        while True:
            if self.fatal:
                raise RuntimeError(self.fatal)
            if all(g.converged() for g in groups):
                return _perf() - t0
            if _perf() - t0 > timeout:
                bad = [g for g in groups if not g.converged()]
                raise TimeoutError("%d group(s) not converged after %.1f s; first: %s" % (
                    len(bad), timeout, json.dumps(await self.diagnose(bad[0]))))
            await asyncio.sleep(poll)

    async def diagnose(self, g) -> dict:
        """What a group looks like from both sides (for error messages)."""
        ms = g.members
        epochs = Counter(getattr(x, "epoch", getattr(x, "generation", None)) for x in ms)
        owned = [x.n_owned for x in ms]
        out = {"group": g.group, "kind": g.kind, "members": len(ms),
               "member_epochs": dict(epochs.most_common(5)),
               "owned_total": sum(owned), "units": g.units(),
               "owned_min": min(owned), "owned_max": max(owned),
               "inflight": sum(1 for x in ms if x.inflight),
               "errors": {"%s:%s" % k: v for k, v in self.stats.errors.items()}}
        try:
            out["server"] = await asyncio.wait_for(g.server_stable(self.conns[0]), 5)
        except Exception as e:          # noqa: BLE001 (diagnostics only)
            out["server"] = repr(e)
        return out

    # ------------------------------------------------------------------ modes
    def set_mode(self, mode: str) -> None:
        assert mode in ("life", "flood", "paced")
        old, self.mode = self.mode, mode
        if mode == old:
            return
        if mode == "life":
            for c in self.conns:
                ready, c.ready = c.ready, deque()
                for x in ready:
                    x.schedule()
            return
        for x in self.all_members():
            if x.timer is not None:
                x.timer.cancel()
                x.timer = None
            if not x.inflight:
                if x.steady():
                    x.conn.ready.append(x)
                else:
                    x.schedule(urgent=True)
        if mode == "flood":
            for c in self.conns:
                self.pump(c)

    def pump(self, c: Conn, budget: int = 1 << 30) -> int:
        if self.mode == "paced" and budget == 1 << 30:
            return 0
        ready = c.ready
        room = min(self.window - c.inflight_hb, budget)
        n = 0
        while n < room and ready:
            x = ready.popleft()
            if x.inflight:
                continue
            x.heartbeat()
            n += 1
        return n

    async def measure(self, seconds: float, rate: float = 0.0,
                      server_pid: Optional[int] = None, warmup: float = 1.0) -> dict:
        """Run flood (rate 0) or paced (rate > 0) heartbeats; measure over ``seconds`` after
        ``warmup``. -> throughput, latency percentiles, errors, CPU of both processes."""
        st = self.stats
        # The client's own garbage collector must not pause the measurement: everything
        # built so far is frozen out of the collector, and collection is off meanwhile.
        gc.collect()
        gc.freeze()
        gc_was = gc.isenabled()
        gc.disable()
        self.set_mode("paced" if rate > 0 else "flood")
        ticker = None
        if rate > 0:
            ticker = self.loop.create_task(self._pace(rate))
        await asyncio.sleep(warmup)
        errors0 = Counter(st.errors)
        fenced0 = st.fenced
        st.lat = array("d")
        hb0 = st.hb
        cpu0 = time.process_time()
        scpu0 = proc_cpu_seconds(server_pid) if server_pid else None
        mb0, mt0 = machine_cpu()
        t0 = _perf()
        st.recording = True
        await asyncio.sleep(seconds)
        st.recording = False
        dt = _perf() - t0
        hb = st.hb - hb0
        cpu = time.process_time() - cpu0
        scpu = proc_cpu_seconds(server_pid) - scpu0 if server_pid else None
        mb1, mt1 = machine_cpu()
        if ticker is not None:
            ticker.cancel()
        self.set_mode("life")
        if gc_was:
            gc.enable()
        gc.unfreeze()
        if self.fatal:
            raise RuntimeError(self.fatal)
        pct = percentiles(st.lat)
        err = Counter(st.errors)
        err.subtract(errors0)
        return {"heartbeats": hb, "seconds": dt, "rate": hb / dt, "target_rate": rate,
                "p50_ms": pct[50], "p99_ms": pct[99], "p999_ms": pct[99.9],
                "errors": {"%s:%s" % k: v for k, v in err.items() if v},
                "fenced": st.fenced - fenced0,
                "client_cpu": cpu / dt,
                # busy fraction of ALL cores x cores: what the machine as a whole did
                "machine_cpu": (mb1 - mb0) / max(1, mt1 - mt0) * (os.cpu_count() or 1), "server_cpu": (scpu / dt) if scpu is not None else None,
                "connections": self.n_conns, "window": self.window,
                "members": sum(len(g.members) for g in self.groups)}

    async def _pace(self, rate: float) -> None:
        conns = self.conns
        credit = 0.0
        last = _perf()
        i = 0
        while True:
            await asyncio.sleep(0.001)
            now = _perf()
            credit = min(credit + (now - last) * rate, rate * 0.01 + len(conns))
            last = now
            n = int(credit)
            if n <= 0:
                continue
            sent = 0
            per = max(1, n // len(conns))
            for _ in range(len(conns)):
                c = conns[i % len(conns)]
                i += 1
                sent += self.pump(c, min(per, n - sent))
                if sent >= n:
                    break
            credit -= sent

    async def close(self) -> None:
        self.closing = True
        for x in self.all_members():
            if x.timer is not None:
                x.timer.cancel()
        for c in self.conns:
            if c.transport is not None:
                c.transport.close()
        await asyncio.sleep(0)


def new_event_loop():
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:           # pragma: no cover
        return asyncio.new_event_loop()


# ----------------------------------------------------------------------------- CLI
def _parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="loadgen", description="Simulate many Kafka group members against a groupcoord "
        "node (or the echo server): form the groups, wait until they converge, then measure "
        "heartbeat throughput and latency. Prints one JSON object.")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="HOST:PORT")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--window", type=int, default=64,
                   help="heartbeats in flight per connection in flood/paced mode")
    p.add_argument("--consumer-groups", type=int, default=0)
    p.add_argument("--consumer-members", type=int, default=100, help="per consumer group")
    p.add_argument("--consumer-version", type=int, default=1, choices=(0, 1),
                   help="ConsumerGroupHeartbeat version (v0: the server generates member ids)")
    p.add_argument("--topics", default="",
                   help="comma-separated topics the consumer/classic members subscribe "
                   "(default: every topic of the node's catalog)")
    p.add_argument("--connect-groups", type=int, default=0)
    p.add_argument("--connect-workers", type=int, default=100, help="per connect group")
    p.add_argument("--connectors", type=int, default=100, help="per connect group")
    p.add_argument("--tasks-per-connector", type=int, default=9)
    p.add_argument("--classic-groups", type=int, default=0)
    p.add_argument("--classic-members", type=int, default=100, help="per classic group")
    p.add_argument("--classic-heartbeat-ms", type=int, default=3000)
    p.add_argument("--converge-timeout", type=float, default=120.0)
    p.add_argument("--seconds", type=float, default=5.0, help="measurement window (0: none)")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--rate", type=float, default=0.0,
                   help="heartbeats/s in paced mode (0: flood, closed loop)")
    p.add_argument("--server-pid", type=int, default=None,
                   help="also report this process's CPU (from /proc)")
    p.add_argument("--echo", action="store_true",
                   help="the target is benchmarks/echo_server.py: consumer members only, no "
                   "joins; the same steady heartbeat frames")
    p.add_argument("--group-prefix", default="lg")
    p.add_argument("--ssl", action="store_true",
                   help="TLS on every connection, the server checked against the system's CAs "
                   "(or --ssl-cafile)")
    p.add_argument("--ssl-cafile", default=None, metavar="PEM",
                   help="TLS on every connection, the server certificate checked against "
                   "these CAs (implies --ssl)")
    p.add_argument("--ssl-server-hostname", default=None,
                   help="the name the server certificate must carry (default: the bootstrap "
                   "host)")
    p.add_argument("--sasl-mechanism", default=None,
                   choices=sorted(SCRAM_HASHES) + ["PLAIN"],
                   help="authenticate every connection with SASL (SaslHandshake v1 + "
                   "SaslAuthenticate) before its first request")
    p.add_argument("--sasl-user", default=None)
    p.add_argument("--sasl-password", default=None,
                   help="default: the environment variable LOADGEN_SASL_PASSWORD")
    return p.parse_args(argv)


def client_ssl_context(cafile: Optional[str] = None):
    """TLS 1.2+ client context checking the server's certificate and name (against cafile,
    else the system's CAs)."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def _main(a) -> dict:
    host, _, port = a.bootstrap.rpartition(":")
    ctx = client_ssl_context(a.ssl_cafile) if (a.ssl or a.ssl_cafile) else None
    sasl = None
    if a.sasl_mechanism:
        password = a.sasl_password if a.sasl_password is not None else os.environ.get(
            "LOADGEN_SASL_PASSWORD")
        if not a.sasl_user or password is None:
            raise SystemExit("--sasl-mechanism needs --sasl-user and a password "
                             "(--sasl-password or LOADGEN_SASL_PASSWORD)")
        sasl = (a.sasl_mechanism, a.sasl_user, password)
    lg = LoadGen(host, int(port), a.connections, a.window, echo=a.echo, ssl=ctx, sasl=sasl,
                 server_hostname=a.ssl_server_hostname)
    await lg.connect()
    try:
        topics = [t for t in a.topics.split(",") if t] or sorted(lg.partitions)
        if not a.echo:
            missing = [t for t in topics if t not in lg.partitions]
            if missing:
                raise SystemExit("topics not in the node's catalog: %s" % missing)
        for i in range(a.consumer_groups):
            lg.consumer_group("%s-consumer-%d" % (a.group_prefix, i), a.consumer_members,
                              topics, a.consumer_version)
        if not a.echo:
            for i in range(a.connect_groups):
                lg.connect_group("%s-connect-%d" % (a.group_prefix, i), a.connect_workers,
                                 a.connectors, a.tasks_per_connector)
            for i in range(a.classic_groups):
                lg.classic_group("%s-classic-%d" % (a.group_prefix, i), a.classic_members,
                                 topics, a.classic_heartbeat_ms)
        out: dict = {"members": sum(len(g.members) for g in lg.groups)}
        t0 = _perf()
        if not a.echo:
            await lg.start(lg.all_members())
            out["converge_s"] = await lg.wait_converged(lg.groups, a.converge_timeout)
            out["join_and_converge_s"] = _perf() - t0
        if a.seconds > 0:
            out.update(await lg.measure(a.seconds, a.rate, a.server_pid, a.warmup))
        return out
    finally:
        await lg.close()


def main(argv=None) -> int:
    a = _parse_args(argv)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        out = loop.run_until_complete(_main(a))
    finally:
        loop.close()
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
