"""The coordinator node's TCP front end (the only layer with sockets and the event loop).

    stream.py          FrameStream, one asyncio.Protocol per client: framing, flow control
                       and back-pressure, in-order coalesced responses
    connection.py      ServerConnection, its subclass: decode, dispatch, bad input
    node.py            the broker-level APIs answered by this node itself (ApiVersions,
                       Metadata, DescribeCluster, FindCoordinator, ListOffsets, Fetch, Produce)
    topic_admin.py     CreateTopics, CreatePartitions, DeleteTopics, planned purely
    metadata_cache.py  Metadata answers as cached bytes
    flow.py            RequestBytesPool: request memory across connections
    catalog.py         topics.json and cluster-id in the data directory; catalog changes
    server.py          Server / ServerConfig: listening, limits, idle reaping, graceful shutdown
    main.py            `groupcoord serve`

Group APIs are handed to the runtime's shards (``ShardSet.submit_nowait``). docs/server.md
describes the design and the behaviour on bad input.
"""
from groupcoord.server.server import Server, ServerConfig

__all__ = ["Server", "ServerConfig"]
