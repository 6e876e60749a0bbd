"""`ConnectWorker`: an asyncio Kafka Connect worker on the connect group protocol.

    class Runner:                                   # a WorkerRebalanceListener
        async def on_assigned(self, connectors, tasks): ...   # start them (sync or async)
        async def on_revoked(self, connectors, tasks): ...    # stop them

    w = ConnectWorker("127.0.0.1:9092", "connect-cluster", listener=Runner(),
                      worker_url="http://host:8083", connectors={"orders": 6})
    await w.start()                       # joined (raises ResponseError if the group refuses)
    await w.update_config({"orders": 6, "audit": 2})     # a new ConfigState (offset + 1)
    await w.stop()                        # revoke everything, then leave (epoch -1)

The driver owns the timers and the I/O; the membership rules live in connect_member.py
(sans-I/O) and the chosen worker's assignor in connect_assignor.py.

Heartbeat loop (one heartbeat in flight at a time):
  * send `state.heartbeat_request()`; on success wait the interval the coordinator returned
    (or less: a config change, a revocation or stop() wakes the loop at once);
  * Response Handling (the seed): revoked work first -> stop it, `on_revoked`, and
    acknowledge with an immediate heartbeat; then new work -> `on_assigned`;
  * FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: `on_revoked` for everything, rejoin at epoch 0
    with the same member id;
  * COMPUTE_ASSIGNMENT: we are the chosen worker. A separate task runs PrepareAssignment ->
    assignor -> InstallAssignment while heartbeats continue. FENCED_MEMBER_EPOCH from either
    call: retried when the next heartbeat response (with our epoch) says COMPUTE_ASSIGNMENT
    again; any other error abandons the attempt (the coordinator asks again if we are still
    chosen). A response to a heartbeat sent before the last attempt ended never starts a new
    one (it may predate the install).
  * connection lost / request timeout / NOT_COORDINATOR: find the coordinator again (with
    backoff), then a full heartbeat with the epoch we have. If nothing was answered for
    `session_timeout_ms`, the coordinator has expired us: our work is stopped (`on_revoked`)
    before anybody else can be given it;
  * stop(): `on_revoked` for everything, then the leave heartbeat (-1, or -2 for a static
    member leaving temporarily). kill() just drops everything without a word (a crash).
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Optional, Protocol, Sequence, Union, runtime_checkable

from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E, error_name
from groupcoord.client.connection import Backoff, CoordinatorLink, DEFAULT_CLIENT_ID
from groupcoord.client.connect_assignor import AssignorSpec, InstallPlan, compute_install
from groupcoord.client.connect_member import (Action, ConnectMemberState, Outcome, Phase,
                                              TaskId, split_units)
from groupcoord.client.errors import (ConnectionClosed, RequestTimeout, ResponseError,
                                      UnsupportedApi, CoordinatorNotFound)
from groupcoord.client.member_driver import DriverTask
from groupcoord.client.members_common import call_listener
from groupcoord.client.security import ClientSecurity

__all__ = ["ConnectWorker", "WorkerRebalanceListener", "TaskId", "AssignorSpec"]

log = logging.getLogger("groupcoord.client.connect")


@runtime_checkable
class WorkerRebalanceListener(Protocol):
    """Called with sorted connector names and sorted TaskIds. Either method may be a plain
    function or a coroutine function; the worker waits for it before going on (so work is
    stopped before its revocation is acknowledged)."""

    def on_assigned(self, connectors: list[str], tasks: list[TaskId]) -> Union[None, Awaitable[None]]:
        ...

    def on_revoked(self, connectors: list[str], tasks: list[TaskId]) -> Union[None, Awaitable[None]]:
        ...


class ConnectWorker(DriverTask):
    """One Connect worker. See the module docstring.

    Arguments: `bootstrap` ("host:port", "h1:p1,h2:p2" or [(host, port)]) or a shared
    `link` (CoordinatorLink); `group_id`; `listener`; `worker_url`; `assignors` (preference
    order, default incremental-cooperative [0-2] then eager [0-2]); `connectors` + optional
    `config_offset`: the ConfigState this worker reports (None: it reports none);
    `member_id` (default a random uuid), `instance_id` (static membership);
    `rebalance_timeout_ms`; `scheduled_rebalance_max_delay_ms` (the incremental cooperative
    assignor's delay when this worker computes); `session_timeout_ms` (after this long without
    an answer the worker stops its work on its own); `request_timeout_s`; `security`
    (client/security.py ClientSecurity: TLS and SASL for the worker's own link; a shared
    `link` has its own).
    """
    _log = log

    def __init__(self, bootstrap: Any = None, group_id: str = "connect-cluster", *,
                 listener: Optional[WorkerRebalanceListener] = None,
                 worker_url: Optional[str] = None,
                 assignors: Optional[Sequence[AssignorSpec]] = None,
                 connectors: Optional[dict] = None, config_offset: Optional[int] = None,
                 member_id: Optional[str] = None, instance_id: Optional[str] = None,
                 rebalance_timeout_ms: int = 60_000,
                 scheduled_rebalance_max_delay_ms: int = 300_000,
                 session_timeout_ms: int = 45_000,
                 request_timeout_s: float = 30.0,
                 client_id: str = DEFAULT_CLIENT_ID,
                 link: Optional[CoordinatorLink] = None,
                 backoff: Optional[Backoff] = None,
                 security: Optional[ClientSecurity] = None):
        super().__init__()
        if link is None:
            if bootstrap is None:
                raise ValueError("give bootstrap or link")
            link = CoordinatorLink(bootstrap, group_id, client_id,
                                   request_timeout_s=request_timeout_s, security=security)
            self._own_link = True
        else:
            if security is not None:
                raise ValueError("give security to the shared link (CoordinatorLink("
                                 "..., security=...)), not to the worker")
            self._own_link = False
        self.link = link
        self.group_id = group_id
        self.listener = listener
        self.scheduled_delay_ms = scheduled_rebalance_max_delay_ms
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.request_timeout_s = request_timeout_s
        self.backoff = backoff or Backoff()
        if assignors is None:
            assignors = (AssignorSpec("incremental-cooperative", 0, 2), AssignorSpec("eager", 0, 2))
        self.state = ConnectMemberState(
            group_id=group_id, member_id=member_id or str(uuid.uuid4()),
            worker_url=worker_url, assignors=tuple(assignors), instance_id=instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms)
        if connectors is not None:
            self.state.set_config(connectors, 1 if config_offset is None else config_offset)
        self.last_compute: Optional[InstallPlan] = None
        self.computations = 0
        self.heartbeats = 0
        self._last_failure: Optional[BaseException] = None   # for start()'s timeout message
        self._compute_task: Optional[asyncio.Task] = None
        self._joined = asyncio.Event()
        self._hb_seq = 0               # heartbeats sent
        self._compute_floor = 0        # heartbeats sent when the last computation ended
        self._last_ok = time.monotonic()

    # -- public API ------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self.state.member_id

    @property
    def member_epoch(self) -> int:
        return self.state.member_epoch

    @property
    def owned(self) -> tuple[list[str], list[TaskId]]:
        """(connectors, tasks) this worker runs now."""
        return split_units(self.state.owned)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self, timeout_s: float = 30.0) -> "ConnectWorker":
        """Start the heartbeat loop; returns once the first heartbeat was answered. Raises the
        fatal error (ResponseError, e.g. UNSUPPORTED_ASSIGNOR) if the group refused us, or
        RequestTimeout."""
        if self._task is not None:
            raise RuntimeError("already started")
        self._task = asyncio.ensure_future(self._run())
        joined = asyncio.ensure_future(self._joined.wait())
        try:
            done, _ = await asyncio.wait({joined, self._task}, timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()
        if self.error is not None:
            raise self.error
        if not self._joined.is_set():
            await self.kill()
            # Name where we looked and why it failed: "did not join" alone reads like a
            # coordinator problem when nothing listens at the address.
            raise RequestTimeout("worker %s did not join within %.1f s via %s%s" % (
                self.member_id, timeout_s,
                ",".join("%s:%d" % a for a in self.link.bootstrap),
                " (last failure: %s)" % self._last_failure if self._last_failure else ""))
        return self

    async def update_config(self, connectors: dict, offset: Optional[int] = None) -> int:
        """Report a new ConfigState (connectors -> task counts) at `offset` (default: ours
        + 1); sent with the next heartbeat, which goes out now. Returns the offset."""
        off = self.state.set_config(connectors, offset)
        self._wake.set()
        return off

    def request_rebalance(self, reason: int = 1) -> None:
        """Change the Reason of our assignors (the seed's worker-side rebalance trigger): the
        coordinator bumps the group epoch and a new target is computed."""
        self.state.assignors = tuple(AssignorSpec(a.name, a.min_version, a.max_version,
                                                  a.version, reason, a.metadata)
                                     for a in self.state.assignors)
        self._wake.set()

    async def stop(self, temporary: bool = False, timeout_s: float = 10.0) -> None:
        """Graceful: stop all work (on_revoked), then leave: epoch -1, or -2 (`temporary`,
        static members only: the coordinator keeps our work for the same instance id until
        the session times out)."""
        if self._closing:
            return
        self._closing = True
        await self._cancel_tasks()
        await self._revoke(self.state.owned)
        if self.state.phase not in (Phase.FATAL, Phase.LEFT) and self.state.member_epoch > 0:
            req = self.state.leave_request(temporary)
            try:
                conn = await asyncio.wait_for(self.link.get(), timeout_s)
                resp = await conn.request(req, timeout_s=timeout_s)
                if resp.error_code:
                    log.info("worker %s: leave answered %s", self.member_id,
                             error_name(resp.error_code))
            except (ConnectionClosed, RequestTimeout, CoordinatorNotFound, UnsupportedApi,
                    asyncio.TimeoutError) as e:
                log.info("worker %s: leave not delivered: %s", self.member_id, e)
        self.state.left()
        if self._own_link:
            await self.link.close()

    async def kill(self) -> None:
        """Stop at once without callbacks or a leave (what a crash looks like to the group)."""
        self._closing = True
        await self._cancel_tasks()
        if self._own_link:
            await self.link.close()

    async def wait(self) -> None:
        """Until the heartbeat loop ends (stop, kill or a fatal error)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    # -- heartbeat loop -----------------------------------------------------------------------
    async def _cancel_tasks(self) -> None:
        for t in (self._compute_task, self._task):
            if t is not None and not t.done() and t is not asyncio.current_task():
                t.cancel()
        for t in (self._compute_task, self._task):
            if t is not None and t is not asyncio.current_task():
                await asyncio.gather(t, return_exceptions=True)

    def __repr__(self) -> str:
        return "<ConnectWorker %s/%s epoch=%d %s>" % (self.group_id, self.member_id,
                                                    self.member_epoch, self.state.phase.name)

    async def _after_failure(self) -> None:
        await self._revoke(self.state.owned)   # a bug or a listener failure: stop the work

    async def _loop(self) -> None:
        while not self._closing:
            await self._self_fence_if_expired()
            try:
                conn = await self.link.get()
            except CoordinatorNotFound as e:
                log.info("worker %s: %s", self.member_id, e)
                self._last_failure = e
                await self._backoff_sleep()
                continue
            req = self.state.heartbeat_request()
            self._hb_seq += 1
            seq = self._hb_seq
            try:
                resp = await conn.request(req, timeout_s=self.request_timeout_s)
            except (ConnectionClosed, RequestTimeout) as e:
                log.info("worker %s: heartbeat failed: %s", self.member_id, e)
                self._last_failure = e
                self.state.on_request_failed()
                self.link.invalidate(conn)
                await self._backoff_sleep()
                continue
            self.heartbeats += 1
            out = self.state.on_response(resp)
            delay = await self._handle(out, seq, conn)
            if delay is None:
                return
            if delay > 0:
                self._wake.clear()
            await self._sleep(delay)

    async def _handle(self, out: Outcome, seq: int, conn) -> Optional[float]:
        """Act on one heartbeat outcome; -> seconds until the next heartbeat (None: stop)."""
        if out.action is Action.OK:
            self._last_ok = time.monotonic()
            self.backoff.reset()
            acked_needed = bool(out.revoke)
            if out.revoke:
                await self._revoke(out.revoke)          # stop first, then acknowledge
            if out.assign:
                await self._assign(out.assign)
            self._joined.set()
            if out.compute and seq > self._compute_floor and \
                    (self._compute_task is None or self._compute_task.done()):
                self._compute_task = asyncio.ensure_future(self._compute(conn))
            return 0.0 if acked_needed else out.interval_ms / 1000.0
        if out.action is Action.REJOIN:
            log.info("worker %s: %s; giving up all work and rejoining", self.member_id,
                     error_name(out.error))
            self._last_ok = time.monotonic()
            await self._revoke(out.revoke)
            return 0.0
        if out.action is Action.FIND_COORDINATOR:
            self.link.invalidate(conn)
            return self.backoff.next_delay()
        if out.action is Action.RETRY:
            if out.error == E.UNSUPPORTED_ASSIGNOR:
                log.warning("worker %s: %s", self.member_id, out.error_message)
                return out.interval_ms / 1000.0 or self.backoff.next_delay()
            return self.backoff.next_delay()
        # FATAL
        self.error = ResponseError(out.error, out.error_message)
        log.error("worker %s: %s", self.member_id, self.error)
        await self._revoke(out.revoke)
        return None

    async def _self_fence_if_expired(self) -> None:
        if self.state.owned and time.monotonic() - self._last_ok > self.session_timeout_s:
            # The coordinator has expired us by now and may give our work to others.
            log.warning("worker %s: no heartbeat answered for %.1f s: stopping all work",
                        self.member_id, self.session_timeout_s)
            await self._revoke(self.state.owned)

    async def _revoke(self, units) -> None:
        units = frozenset(units) & self.state.owned
        if not units:
            return
        self.state.revoked(units)
        await call_listener(self.listener, "on_revoked", *split_units(units))

    async def _assign(self, units) -> None:
        units = frozenset(units) - self.state.owned
        if not units:
            return
        self.state.assigned(units)
        await call_listener(self.listener, "on_assigned", *split_units(units))

    # -- the chosen worker ------------------------------------------------------------------
    async def compute_plan(self, prepared: m.ConnectGroupPrepareAssignmentResponse) -> InstallPlan:
        """The assignor step (override to customise; may be a coroutine)."""
        return compute_install(prepared, self.scheduled_delay_ms)

    async def _compute(self, conn) -> None:
        epoch = self.state.member_epoch
        try:
            p = await conn.request(m.ConnectGroupPrepareAssignmentRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=epoch),
                timeout_s=self.request_timeout_s)
            if p.error_code:
                self._compute_failed("PrepareAssignment", p.error_code, p.error_message)
                return
            plan = await self.compute_plan(p)
            r = await conn.request(m.ConnectGroupInstallAssignmentRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                group_epoch=p.group_epoch, error=plan.error,
                rebalance_delay_ms=plan.rebalance_delay_ms, assignor_state=plan.assignor_state,
                members=plan.members), timeout_s=self.request_timeout_s)
            if r.error_code:
                self._compute_failed("InstallAssignment", r.error_code, r.error_message)
                return
            self.computations += 1
            self.last_compute = plan
            log.info("worker %s: installed %s target for group epoch %d (delay %d ms)",
                     self.member_id, plan.assignor, p.group_epoch, plan.rebalance_delay_ms)
        except (ConnectionClosed, RequestTimeout) as e:
            log.info("worker %s: assignment abandoned: %s", self.member_id, e)
        finally:
            self._compute_floor = self._hb_seq

    def _compute_failed(self, api: str, code: int, msg: Optional[str]) -> None:
        log.info("worker %s: %s: %s %s", self.member_id, api, error_name(code), msg or "")
        if code == E.FENCED_MEMBER_EPOCH:
            self._wake.set()   # the next heartbeat brings our epoch; retried if still chosen
