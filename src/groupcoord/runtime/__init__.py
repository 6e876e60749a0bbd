"""The shard runtime: coordinator state machines on the asyncio loop with durable logs.

    from groupcoord.runtime import Coordinator, RuntimeConfig
    coord = Coordinator(RuntimeConfig(data_dir="./data", shards=50), topics=catalog)
    await coord.start()
    response = await coord.submit(request, version, client_id, client_host)
    await coord.close()

See docs/runtime.md.
"""
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.coordinator import GROUP_APIS, Coordinator, java_string_hash, shard_for
from groupcoord.runtime.shard_runtime import ShardRuntime, ShardState, wall_clock_ms

__all__ = ["Coordinator", "RuntimeConfig", "ShardRuntime", "ShardState", "GROUP_APIS",
           "shard_for", "java_string_hash", "wall_clock_ms"]
