"""The coordinator node's TCP front end (the only layer with sockets and the event loop).

    connection.py  one asyncio.Protocol per client: framing, dispatch, in-order coalesced
                   responses, back-pressure, bad input
    node.py        the broker-level APIs answered by this node itself (ApiVersions, Metadata,
                   FindCoordinator, ListOffsets, Fetch, Produce, CreateTopics)
    catalog.py     topics.json and cluster-id in the data directory
    server.py      Server / ServerConfig: listening, limits, idle reaping, graceful shutdown

Group APIs are handed to the runtime's Coordinator (``coordinator.submit``). docs/server.md
describes the design and the behaviour on bad input.
"""
from groupcoord.server.server import Server, ServerConfig

__all__ = ["Server", "ServerConfig"]
