"""The simulated network between the members and the coordinator node.

A member talks over one `Connection` at a time (TCP-like): requests on a connection reach
the node in the order they were sent, and the node answers them in that order. Faults, all
drawn from the seed:

* delay: every message takes a base latency plus jitter, and sometimes a long spike;
* loss: a lost message breaks its connection (what loss looks like under TCP: a reset or a
  stall). The member's waiting requests fail (None) when it notices (a short delay, or its
  request timeout); the request itself may still reach the node (a "ghost": processed, its
  answer never comes back);
* duplication: a request is delivered twice when the client sent it twice: its connection
  stalls and breaks before the answer, the client retries (it sees the call fail, as for a
  loss), and the first copy still reaches the node, up to `dup_delay_ms` late -- possibly
  after the retry and the member's newer requests. A request the client got its answer for
  is never delivered again (TCP does not duplicate; clients retry only what failed: a second
  copy of an answered request is not a failure mode of Kafka's clients, and for requests with
  no idempotency key -- a static member's JoinGroup with an empty member id -- it would look
  like a new incarnation replacing the member);
* reordering across connections: after a member reconnects, ghosts and duplicates of its
  old requests can reach the node after its new ones;
* partitions: a set of members is cut off from the node for a while (both directions;
  messages in flight are dropped when they arrive);
* node crash: every connection is reset (members notice after a short delay).

Cluster mode (cluster.py): each connection goes to one node, the one the member's
FindCoordinator named (`node.connect(member)`; the single node returns itself); an answer
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS makes the member find
the coordinator again before its next request (`refind`, as Kafka's clients do); a node crash
resets only that node's connections.

`call(member, request, version, timeout_s)` is what members await: the response, or None
when the request failed (connection lost, reset, timed out).
"""
from __future__ import annotations

from typing import Optional

__all__ = ["Network", "Connection", "NetParams", "error_codes"]

# Answers after which a client finds the coordinator again (cluster mode).
_REFIND = (14, 15, 16)    # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def error_codes(resp):
    """Every error code of a response: top level, per group, per partition."""
    c = getattr(resp, "error_code", None)
    if c is not None:
        yield c
    for g in getattr(resp, "groups", None) or ():
        c = getattr(g, "error_code", None)
        if c is not None:
            yield c
    for t in getattr(resp, "topics", None) or ():
        for p in getattr(t, "partitions", None) or ():
            c = getattr(p, "error_code", None)
            if c is not None:
                yield c


def _brief(req) -> str:
    """Epoch and owned work of a heartbeat, for the trace."""
    epoch = getattr(req, "member_epoch", None)
    if epoch is None:
        return ""
    owned = getattr(req, "owned_connectors_and_tasks", None)
    if owned is None:
        owned = getattr(req, "topic_partitions", None)
    return " epoch %d owned %s" % (epoch, "null" if owned is None else "set")


class NetParams:
    """Per-seed network behaviour (drawn by faults.draw_mix)."""

    def __init__(self, *, base_ms=1.0, jitter_ms=4.0, spike_p=0.0, spike_ms=400.0,
                 loss_p=0.0, ghost_p=0.5, dup_p=0.0, dup_delay_ms=800.0):
        self.base_ms = base_ms
        self.jitter_ms = jitter_ms
        self.spike_p = spike_p
        self.spike_ms = spike_ms
        self.loss_p = loss_p
        self.ghost_p = ghost_p
        self.dup_p = dup_p
        self.dup_delay_ms = dup_delay_ms

    def calm(self) -> "NetParams":
        """The same latency without faults (liveness phase)."""
        return NetParams(base_ms=self.base_ms, jitter_ms=self.jitter_ms)


class Connection:
    __slots__ = ("cid", "member", "alive", "ghost", "node_incarnation", "next_seq",
                 "waiting", "last_arrival_us", "last_resp_us", "responses", "next_resp", "node")

    def __init__(self, cid: int, member, node_incarnation: int, ghost: bool = False,
                 node=None):
        self.cid = cid
        self.member = member
        self.node = node               # the node this connection reaches
        self.alive = True              # as the member sees it
        self.ghost = ghost             # carries duplicates: nobody reads its answers
        self.node_incarnation = node_incarnation
        self.next_seq = 0
        self.waiting: dict = {}        # seq -> future (member side)
        self.last_arrival_us = 0       # FIFO towards the node
        self.last_resp_us = 0          # FIFO back to the member
        self.responses: dict = {}      # seq -> response ready at the node, not yet sent
        self.next_resp = 0             # the next seq the node may answer on this connection


class Network:
    def __init__(self, loop, rng, params: NetParams, trace):
        self.loop = loop
        self.rng = rng
        self.params = params
        self.trace = trace
        self.node = None               # set by the runner (runner.Node)
        self.cut: dict = {}            # member name -> virtual us until which it is cut off
        self._cids = 0
        self.conns: list = []
        self.frozen = False            # the run is over: nothing reaches the node any more
        self.refind = False            # cluster mode: re-find the coordinator on its errors
        # counters
        self.sent = 0
        self.lost = 0
        self.duplicated = 0
        self.ghosts = 0
        self.timeouts = 0

    # ---------------------------------------------------------------- helpers
    def _delay_us(self) -> int:
        p, r = self.params, self.rng
        d = p.base_ms + r.random() * p.jitter_ms
        if p.spike_p and r.random() < p.spike_p:
            d += r.random() * p.spike_ms
        return int(d * 1000)

    def is_cut(self, name: str) -> bool:
        until = self.cut.get(name)
        return until is not None and self.loop.now_us < until

    def partition(self, names, duration_ms: int) -> None:
        until = self.loop.now_us + duration_ms * 1000
        for n in names:
            self.cut[n] = max(self.cut.get(n, 0), until)
        self.trace("net", "partition %s for %d ms" % (",".join(sorted(names)), duration_ms))

    def _new_conn(self, member, ghost=False, node=None) -> Connection:
        self._cids += 1
        if node is None:
            node = self.node.connect(member)
        c = Connection(self._cids, member, node.incarnation, ghost, node)
        if not ghost:
            self.conns.append(c)
        return c

    def _break(self, conn: Connection, notice_us: int) -> None:
        """The connection is dead; its waiting requests fail after notice_us."""
        if not conn.alive:
            return
        conn.alive = False
        waiting = sorted(conn.waiting.items())
        conn.waiting = {}
        if waiting:
            self.loop.call_later(notice_us / 1e6, self._fail_waiters, waiting)

    @staticmethod
    def _fail_waiters(waiting) -> None:
        for _seq, fut in waiting:
            if not fut.done():
                fut.set_result(None)

    # ---------------------------------------------------------------- member side
    async def call(self, member, request, version: int, timeout_s: float):
        conn: Optional[Connection] = member.conn
        if conn is None or not conn.alive:
            conn = member.conn = self._new_conn(member)
        fut = self.loop.create_future()
        seq = conn.next_seq
        conn.next_seq += 1
        conn.waiting[seq] = fut
        self.sent += 1
        self._send(conn, seq, request, version)
        timer = self.loop.call_later(timeout_s, self._timeout, conn, seq)
        try:
            resp = await fut
        finally:
            timer.cancel()
            conn.waiting.pop(seq, None)
        if self.refind and resp is not None and member.conn is conn \
                and any(c in _REFIND for c in error_codes(resp)):
            member.conn = None          # FindCoordinator again before the next request
        return resp

    def _timeout(self, conn: Connection, seq: int) -> None:
        if seq in conn.waiting:
            self.timeouts += 1
            self._break(conn, 0)        # a client closes a connection whose request timed out

    def _send(self, conn: Connection, seq: int, request, version: int) -> None:
        p, r, now = self.params, self.rng, self.loop.now_us
        name = conn.member.name
        node = conn.node
        if not node.up:
            self._break(conn, r.randint(1_000, 50_000))     # connection refused / reset
            return
        if self.is_cut(name):
            return                                          # vanishes: the member times out
        if p.loss_p and r.random() < p.loss_p:
            self.lost += 1
            self._break(conn, r.randint(1_000, 200_000))
            if r.random() < p.ghost_p:
                self.ghosts += 1
                g = self._new_conn(conn.member, ghost=True, node=node)
                self._schedule_arrival(g, 0, request, version, now + self._delay_us())
            return
        if p.dup_p and r.random() < p.dup_p:
            # A stalled connection: the client gives up on it and retries; the first copy
            # arrives late (see the module docstring).
            self.duplicated += 1
            self._break(conn, r.randint(1_000, 200_000))
            g = self._new_conn(conn.member, ghost=True, node=node)
            self._schedule_arrival(g, 0, request, version,
                                   now + int(r.random() * p.dup_delay_ms * 1000)
                                   + self._delay_us())
            return
        at = max(now + self._delay_us(), conn.last_arrival_us + 1)
        conn.last_arrival_us = at
        self._schedule_arrival(conn, seq, request, version, at)

    def _schedule_arrival(self, conn, seq, request, version, at_us: int) -> None:
        self.loop.call_at(at_us / 1e6, self._arrive, conn, seq, request, version)

    # ---------------------------------------------------------------- node side
    def _arrive(self, conn: Connection, seq: int, request, version: int) -> None:
        node = conn.node
        if self.frozen or not node.up or conn.node_incarnation != node.incarnation:
            return                                  # the node that accepted it is gone
        if not conn.ghost and self.is_cut(conn.member.name):
            return
        if conn.ghost:
            self.trace("net", "ghost %s from %s%s" % (
                type(request).__name__, conn.member.name, _brief(request)))
        node.receive(conn, seq, request, version, self._respond)

    def _respond(self, conn: Connection, seq: int, response) -> None:
        """The node's answer to request seq is ready: send answers in request order."""
        if conn.ghost or conn.node_incarnation != conn.node.incarnation:
            return
        conn.responses[seq] = response
        while conn.next_resp in conn.responses:
            resp = conn.responses.pop(conn.next_resp)
            s = conn.next_resp
            conn.next_resp += 1
            p, r = self.params, self.rng
            if p.loss_p and r.random() < p.loss_p:
                self.lost += 1
                self._break(conn, r.randint(1_000, 200_000))
                continue
            at = max(self.loop.now_us + self._delay_us(), conn.last_resp_us + 1)
            conn.last_resp_us = at
            self.loop.call_at(at / 1e6, self._deliver, conn, s, resp)

    def _deliver(self, conn: Connection, seq: int, response) -> None:
        if not conn.alive or self.is_cut(conn.member.name):
            return
        fut = conn.waiting.get(seq)
        if fut is not None and not fut.done():
            fut.set_result(response)

    def node_crashed(self, node=None) -> None:
        """A node died: its connections (every one in single-node mode) are reset."""
        for c in self.conns:
            if node is None or c.node is node:
                self._break(c, self.rng.randint(1_000, 50_000))
        self.conns = [c for c in self.conns if c.alive]

    def prune(self) -> None:
        self.conns = [c for c in self.conns if c.alive]
