"""TEST DOUBLE of the runtime's ShardSet (groupcoord.runtime.ShardSet), for the server's
unit tests: exactly the interface the server may call (start, serves, submit, submit_nowait,
shard_of, topics, set_topics, close) over ONE in-memory ``groups.shard.Shard``. No log,
no fsync, no loading state. Timers fire from a 5 ms polling task on the wall clock.

Test hooks (not part of the interface): ``submitted`` records (api_key, version) of every
submit; ``delay`` makes every submit sleep that many seconds first (a slow coordinator).
"""
from __future__ import annotations

import asyncio
import time

from groupcoord.groups.shard import Shard, error_response
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol.error_codes import ErrorCode

SERVED = frozenset((8, 9, 11, 12, 13, 14, 15, 16, 68, 69, 10000, 10001, 10002, 10003))


def java_string_hash(s: str) -> int:
    h = 0
    b = s.encode("utf-16-be")
    for i in range(0, len(b), 2):          # over UTF-16 code units, as Java does
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class ShardSetDouble:
    def __init__(self, topics: TopicCatalog | None = None, config=None, shards: int = 1):
        self.topics = topics if topics is not None else TopicCatalog()
        self.shard = Shard(config, self.topics)
        self.n_shards = shards
        self._parked: dict = {}          # ParkKey -> (future, request, version)
        self._ticker = None
        self.started = False
        self.closed = False
        self.submitted: list = []
        self.delay = 0.0

    @staticmethod
    def _now() -> int:
        return int(time.time() * 1000)

    async def start(self):
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        self.started = True

    def serves(self, api_key: int) -> bool:
        return api_key in SERVED

    def shard_of(self, group_id: str) -> int:
        return (java_string_hash(group_id) & 0x7FFFFFFF) % self.n_shards

    async def submit(self, request, version, client_id="", client_host=""):
        self.submitted.append((type(request).API_KEY, version))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.closed:
            return error_response(request, version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        res = self.shard.handle(request, self._now(), version, client_id, client_host)
        self._apply(res)
        if res.park is None:
            return res.response
        fut = asyncio.get_running_loop().create_future()
        self._parked[res.park] = (fut, request, version)
        return await fut

    def submit_nowait(self, request, version, client_id="", client_host=""):
        return asyncio.ensure_future(self.submit(request, version, client_id, client_host))

    async def set_topics(self, catalog: TopicCatalog):
        self.topics = catalog
        self._apply(self.shard.update_topics(catalog, self._now()))

    async def close(self):
        self.closed = True
        if self._ticker is not None:
            self._ticker.cancel()
        for key, (fut, req, ver) in list(self._parked.items()):
            if not fut.done():
                fut.set_result(error_response(req, ver, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        self._parked.clear()

    # ---- internals
    def _apply(self, res):
        self.shard.apply(res)
        for key, resp in res.completions:
            item = self._parked.pop(key, None)
            if item is not None and not item[0].done():
                item[0].set_result(resp)

    async def _tick(self):
        while True:
            await asyncio.sleep(0.005)
            now = self._now()
            for key in self.shard.due(now):
                self._apply(self.shard.fire(key, now))
