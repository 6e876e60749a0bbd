"""The asyncio glue of the SDK drivers, written once: `DriverTask` (ConnectWorker and both
members) and `MemberDriver` (ClassicMember and ConsumerMember).

    DriverTask    one driver task, `_run()` around the subclass's `_loop()`: an error that
                  escapes the loop is logged and kept in `.error` (the member stops visibly,
                  not silently); `_sleep()` waits for an interval or a wake-up (`_wake`:
                  a rejoin, a config change, close()); `_backoff_sleep()` paces a retry
                  and only close() cuts it short.
    MemberDriver  + the member's `MemberLink` and its state machine `sm`: start() / async
                  with / wait_closed(), close()'s first step (`_stop_driver`), listener calls
                  (a raising callback is logged and the member goes on: Kafka's rule) and
                  the retry rules of OffsetCommit / OffsetFetch (`_offsets_call`).

The decisions stay in the sans-I/O state machines (members_*_state.py, connect_member.py);
this module only waits, sends and calls back.
"""
from __future__ import annotations

import abc
import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Optional

from groupcoord.client.connection import Backoff
from groupcoord.client.errors import (ConnectionClosed, CoordinatorNotFound, RequestTimeout,
                                      ResponseError)
from groupcoord.client.members_common import (COORDINATOR_ERRORS, MemberLink, call_listener,
                                              retry_pause)
from groupcoord.client.security import ClientSecurity

__all__ = ["DriverTask", "MemberDriver", "NETWORK_ERRORS"]

# Failures after which a member finds its coordinator again and retries (MemberLink has
# already dropped the connection).
NETWORK_ERRORS = (ConnectionClosed, RequestTimeout, CoordinatorNotFound)


class DriverTask(abc.ABC):
    """One asyncio task runs `_loop()` until `_closing`; subclasses set `backoff`."""
    _log = logging.getLogger("groupcoord.client")
    backoff: Backoff

    def __init__(self) -> None:
        self.error: Optional[BaseException] = None
        self._task: Optional[asyncio.Task] = None
        self._wake = asyncio.Event()
        self._closing = False

    @abc.abstractmethod
    async def _loop(self) -> None:
        """The driver: request, apply the answer, call back, sleep; returns to stop."""

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException as e:   # a bug or a callback's BaseException: stop visibly
            self._log.exception("%s: driver stopped", self)
            self.error = e
            await self._after_failure()
        finally:
            await self._after_run()

    async def _after_failure(self) -> None:
        """Runs once `_loop` failed (`self.error` is set); by default nothing more."""

    async def _after_run(self) -> None:
        """Runs whenever the task ends, cancelled too; by default nothing."""

    async def _sleep(self, delay: float) -> None:
        """Wait `delay` s or until woken (not at all once closing); consumes the wake-up."""
        if delay > 0 and not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
        self._wake.clear()

    async def _backoff_sleep(self) -> None:
        """The backoff's next delay before a retry: only close() ends it early (a wake-up
        for anything else changes nothing before the retry)."""
        try:
            await asyncio.wait_for(self._closing_wait(), self.backoff.next_delay())
        except asyncio.TimeoutError:
            pass

    async def _closing_wait(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()


class MemberDriver(DriverTask):
    """A group member over one MemberLink; `sm` is its state machine. Subclasses define
    close() (starting with `_stop_driver`) and the `_loop`."""
    sm: Any

    def __init__(self, bootstrap: Any, group_id: str, client_id: str, *, listener: Any,
                 request_timeout_s: float, bootstrap_timeout_s: float,
                 backoff: Optional[Backoff],
                 security: Optional[ClientSecurity] = None) -> None:
        super().__init__()
        self.listener = listener
        self.request_timeout_s = request_timeout_s
        self.backoff = backoff or Backoff()
        self.bootstrap_timeout_s = bootstrap_timeout_s
        self.link = MemberLink(bootstrap, group_id, client_id,
                               request_timeout_s=request_timeout_s, backoff=self.backoff,
                               find_timeout_s=bootstrap_timeout_s, security=security)

    @property
    def group_id(self) -> str:
        return self.sm.group_id

    @property
    def member_id(self) -> str:
        return self.sm.member_id

    @property
    def state(self) -> str:
        return self.sm.state

    # ------------------------------------------------------------------ lifecycle
    async def start(self):
        """Find the group's coordinator through the bootstrap addresses, then start the
        driver. Raises CoordinatorNotFound, naming the addresses and the last failure, when
        none answered within `bootstrap_timeout_s`: a member that cannot reach any node
        fails loudly instead of retrying in silence. Once started, a lost coordinator is
        found again by the driver, without a deadline."""
        if self._task is None:
            try:
                await self.link.get()
            except CoordinatorNotFound as e:
                await self.link.close()
                where = ",".join("%s:%d" % a for a in self.link.bootstrap)
                err = CoordinatorNotFound(
                    "%s: cannot reach the coordinator of group %r via %s (bootstrap timeout "
                    "%.1f s): %s" % (type(self).__name__, self.link.group_id, where,
                                     self.bootstrap_timeout_s, e.last or e), e.last)
                self.error = err
                raise err from e
            if self._task is None:
                self._task = asyncio.ensure_future(self._run())
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the driver, release what is owned, leave the group, close the link."""

    async def wait_closed(self) -> None:
        """Wait for the member to stop; raises the error that stopped it, if any."""
        if self._task is not None:
            await asyncio.shield(self._task)
        if self.error is not None:
            raise self.error

    async def _stop_driver(self, timeout_s: float, cancel: bool) -> bool:
        """close()'s first step: wake the driver and wait up to `timeout_s` for it to end,
        cancelling it at once (`cancel`: it may be parked at a barrier) or at the timeout.
        False when close() ran before."""
        if self._closing:
            return False
        self._closing = True
        self._wake.set()
        if self._task is not None:
            if cancel:
                self._task.cancel()
            try:
                await asyncio.wait_for(self._task if cancel else asyncio.shield(self._task),
                                       timeout_s)
            except asyncio.TimeoutError:
                self._task.cancel()
            except BaseException:
                pass
        return True

    # ------------------------------------------------------------------ callbacks
    async def _call(self, name: str, *args: Any) -> None:
        try:
            await call_listener(self.listener, name, *args)
        except Exception:
            # Kafka logs a failing callback and carries on; the member state moves anyway.
            self._log.exception("%s: %s raised", self, name)

    # ------------------------------------------------------------------ offsets
    def _check_usable(self) -> None:
        """Raise what makes an offsets call pointless now; subclasses add their states."""
        if self.error is not None:
            raise self.error

    @staticmethod
    def _left(deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestTimeout("deadline passed")
        return left

    async def _offsets_call(self, timeout_s: float,
                            send: Callable[[float], Awaitable[Any]],
                            judge: Callable[[Any, float], Awaitable[tuple[int, Any]]]) -> Any:
        """The retry rules OffsetCommit and OffsetFetch share, until `timeout_s` has passed.
        `send(deadline)` sends one request; a lost connection or a timeout pauses (backoff)
        and sends again. `judge(sent, deadline)` -> (code, result): 0 returns result; a
        coordinator error finds the coordinator again, pauses and sends again; any other
        code sends again at once (judge waited for what makes it worth it, e.g. the next
        heartbeat's epoch); what cannot be retried judge raises."""
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(initial_s=self.backoff.initial_s, max_s=self.backoff.max_s)
        while True:
            self._check_usable()
            try:
                sent = await send(deadline)
            except NETWORK_ERRORS as e:
                await retry_pause(backoff, deadline, e)
                continue
            code, result = await judge(sent, deadline)
            if not code:
                return result
            if code in COORDINATOR_ERRORS:
                self.link.invalidate()
                await retry_pause(backoff, deadline, ResponseError(code))
