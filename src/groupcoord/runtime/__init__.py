"""The shard runtime: the groups' state machines on the asyncio loop with durable logs.

    from groupcoord.runtime import RuntimeConfig, ShardSet
    shards = ShardSet(RuntimeConfig(data_dir="./data", shards=50), topics=catalog)
    await shards.start()
    response = await shards.submit(request, version, client_id, client_host)
    await shards.close()

See docs/runtime.md.
"""
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.shard_runtime import ShardRuntime, ShardState, wall_clock_ms
from groupcoord.runtime.shards import GROUP_APIS, ShardSet, java_string_hash, shard_for

__all__ = ["ShardSet", "RuntimeConfig", "ShardRuntime", "ShardState", "GROUP_APIS",
           "shard_for", "java_string_hash", "wall_clock_ms"]
