"""Shared pieces of the server tests: event loop runner (uvloop / stock asyncio), a started
Server over the real runtime ShardSet (or the test double), small request builders."""
from __future__ import annotations

import asyncio
import contextlib
import struct

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as M
from groupcoord.server import Server, ServerConfig
from server_double import ShardSetDouble

try:
    from groupcoord.runtime import RuntimeConfig, ShardSet
except ImportError:  # pragma: no cover - before the runtime landed
    ShardSet = RuntimeConfig = None

LOOPS = ("uvloop", "asyncio")
TOPICS = TopicCatalog.of(orders=3, payments=1)


def run_on(loop_kind: str, coro_fn, timeout: float = 30.0):
    """Run coro_fn() on a fresh loop of the given kind, bounded in time."""
    factory = None
    if loop_kind == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as r:
        return r.run(asyncio.wait_for(coro_fn(), timeout))


def make_shards(kind: str, data_dir, topics=TOPICS, shard_config=None):
    # No join delay and no assignment batching: the tests drive exact protocol sequences.
    shard_config = shard_config or ShardConfig(group_initial_rebalance_delay_ms=0,
                                               consumer_assignment_interval_ms=0)
    if kind == "real":
        assert ShardSet is not None, "groupcoord.runtime is not importable"
        return ShardSet(RuntimeConfig(data_dir=str(data_dir), shards=3,
                                      fsync="unsafe-no-fsync", shard_config=shard_config),
                        topics=topics)
    return ShardSetDouble(topics, shard_config)


@contextlib.asynccontextmanager
async def serving(shards, store=None, **cfg):
    """A started Server on 127.0.0.1 (free port) over shards; shut down on exit."""
    await shards.start()
    srv = Server(ServerConfig(host="127.0.0.1", port=0, **cfg), shards, store=store)
    try:
        await srv.start()
    except BaseException:
        await shards.close()
        raise
    try:
        yield srv
    finally:
        await srv.shutdown()


def raw_frame(api_key: int, version: int, corr: int, body: bytes = b"",
              client_id: bytes = b"t") -> bytes:
    """A request frame with a v1 header (non-flexible) and an arbitrary body."""
    payload = (struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id + body)
    return struct.pack(">i", len(payload)) + payload


def join_request(group="g", member_id="", protocol_type="consumer"):
    return M.JoinGroupRequest(group_id=group, session_timeout_ms=30_000,
                              rebalance_timeout_ms=30_000, member_id=member_id,
                              protocol_type=protocol_type,
                              protocols=[M.JoinGroupRequestProtocol(name="range", metadata=b"")])


class WriteCounter:
    """Wraps a transport and counts write() calls (the coalescing tests)."""

    def __init__(self, transport):
        self._t = transport
        self.writes = 0
        self.bytes = 0

    def write(self, data):
        self.writes += 1
        self.bytes += len(data)
        self._t.write(data)

    def __getattr__(self, name):
        return getattr(self._t, name)
