"""Virtual time: an asyncio event loop whose clock is simulated, and the coordinator's clock.

`SimLoop` is a real asyncio loop (the coordinator's `ShardRuntime`, its futures, tasks,
`call_later` timers and `asyncio.sleep` all run on it unchanged) with two differences:

* `time()` is virtual (integer microseconds, starting at 0);
* the selector never blocks: when nothing is ready it advances the virtual clock straight to
  the next scheduled callback. There are no file descriptors and no threads, so the order in
  which callbacks run is a function of the program and the seed alone.

When nothing at all is scheduled the simulation has nothing left to do: `select` raises
`SimIdle` (the runner always keeps its own end-of-run timer, so this means a bug).

`CoordinatorClock` is the node's wall clock in ms: virtual time plus a fixed base plus an
offset that the clock-jump fault moves within configured bounds.
"""
from __future__ import annotations

import asyncio
import math
from asyncio import base_events

__all__ = ["SimLoop", "SimIdle", "CoordinatorClock", "BASE_WALL_MS"]

# Virtual time 0 is this wall-clock instant (2024-01-01), so timestamps in records look real.
BASE_WALL_MS = 1_704_067_200_000


class SimIdle(RuntimeError):
    """Nothing is scheduled: the simulated world stopped by itself."""


class _Selector:
    """Stands in for the loop's selector: no I/O, time jumps to the next timer."""

    def __init__(self, loop: "SimLoop"):
        self._loop = loop

    def select(self, timeout):
        if timeout is None:
            raise SimIdle("no callback is scheduled")
        if timeout > 0:
            # Round up so that the timer the loop is waiting for is due when we return.
            self._loop.now_us += max(1, math.ceil(timeout * 1e6))
        return []

    def close(self):
        pass


class SimLoop(base_events.BaseEventLoop):
    def __init__(self):
        super().__init__()
        self.now_us = 0
        self._selector = _Selector(self)
        self.errors: list = []             # exceptions that reached the loop's handler
        self.set_exception_handler(self._on_error)

    # -- virtual clock
    def time(self) -> float:
        return self.now_us / 1e6

    @property
    def now_ms(self) -> int:
        return self.now_us // 1000

    # -- what BaseEventLoop leaves to subclasses
    def _process_events(self, event_list):
        pass

    def _write_to_self(self):
        pass                                # single-threaded: nothing to wake up

    def _on_error(self, loop, context):
        exc = context.get("exception")
        msg = context.get("message", "")
        # A task cancelled at teardown whose exception nobody retrieved is not an error.
        if isinstance(exc, asyncio.CancelledError):
            return
        self.errors.append("%s: %r" % (msg, exc))


class CoordinatorClock:
    """The coordinator node's wall clock (ms): virtual time + BASE_WALL_MS + offset."""

    def __init__(self, loop: SimLoop):
        self.loop = loop
        self.offset_ms = 0

    def __call__(self) -> int:
        return BASE_WALL_MS + self.loop.now_ms + self.offset_ms
