"""Bounded waits on a condition, for tests that must wait for something to happen: waiting
on the event, never a fixed sleep (docs/testing.md). The interval is only how often the
condition is looked at; the timeout only stops a hang and fails the test."""
import asyncio
import time


async def until(pred, timeout, what, interval=0.01):
    """Await until pred() is truthy (looked at every `interval` s); returns its value. Fails
    after `timeout` s naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        await asyncio.sleep(interval)
