"""aiokafka AIOKafkaConsumer (classic group protocol) against `groupcoord serve`: 3 consumers
on a 6-partition topic, one leaves, committed offsets read back. See docs/clients.md."""
import asyncio
import time

import pytest

from serve_proc import serve  # noqa: F401  (fixture)

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer  # noqa: E402
from aiokafka.structs import OffsetAndMetadata, TopicPartition  # noqa: E402

TOPIC = "aio-six"
DEADLINE_S = 30.0


def _consumer(bootstrap, name):
    return AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id="aio-group", client_id=name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=6000, heartbeat_interval_ms=200, max_poll_interval_ms=10000,
        rebalance_timeout_ms=10000, request_timeout_ms=20000, retry_backoff_ms=50,
        fetch_max_wait_ms=100, metadata_max_age_ms=5000)


async def _poller(c, stop):
    # Keep each consumer polling, as an application would (max_poll_interval liveness).
    while not stop.is_set():
        try:
            await c.getmany(timeout_ms=50)
        except asyncio.CancelledError:
            raise
        except Exception:
            await asyncio.sleep(0.05)


async def _owned(consumers, n_parts, sizes=None, stable_s=0.3, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    since, last = None, None
    while time.monotonic() < deadline:
        owned = [frozenset(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for o in owned for p in o)
        ok = flat == list(range(n_parts)) and all(owned) and (
            sizes is None or sorted(len(o) for o in owned) == sorted(sizes))
        if ok and owned == last:
            if time.monotonic() - since >= stable_s:
                return owned
        elif ok:
            since = time.monotonic()
        last = owned if ok else None
        await asyncio.sleep(0.02)
    raise AssertionError("partitions not owned exactly once within %.0f s: %r"
                         % (timeout, [sorted(c.assignment()) for c in consumers]))


async def _scenario(bootstrap):
    consumers, tasks, stop = [], [], asyncio.Event()
    try:
        for name in ("aio-1", "aio-2", "aio-3"):
            c = _consumer(bootstrap, name)
            consumers.append(c)
            await asyncio.wait_for(c.start(), 20)
            tasks.append(asyncio.ensure_future(_poller(c, stop)))
        owned = await _owned(consumers, 6, [2, 2, 2])

        for c, parts in zip(consumers, owned):
            await asyncio.wait_for(c.commit(
                {TopicPartition(TOPIC, p): OffsetAndMetadata(200 + p, "a%d" % p)
                 for p in parts}), 10)
        for c in consumers:
            for p in range(6):
                assert await asyncio.wait_for(c.committed(TopicPartition(TOPIC, p)), 10) \
                    == 200 + p

        # one consumer stops (LeaveGroup): the remaining two own all 6
        tasks.pop(0).cancel()
        await asyncio.wait_for(consumers.pop(0).stop(), 10)
        owned = await _owned(consumers, 6, [3, 3])
        for p in range(6):
            assert await asyncio.wait_for(consumers[1].committed(TopicPartition(TOPIC, p)), 10) \
                == 200 + p
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in consumers:
            try:
                await asyncio.wait_for(c.stop(), 10)
            except Exception:
                pass


def test_aiokafka_consumer_group(serve):
    srv = serve(topics={TOPIC: 6})
    asyncio.run(asyncio.wait_for(_scenario(srv.bootstrap), 90))
