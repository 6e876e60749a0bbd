"""The target owner of every shard: shards spread evenly over the live nodes.

The shards are the partitions of one topic that every live node subscribes, and Kafka's
``uniform`` assignor (assign/consumer.py) places them, sticky to the current owners: every node
gets shards // n or shards // n + 1; a node joining takes only its quota from the others, a node
leaving (or dead) has only its own shards moved. Every node computes the same target from the
same inputs (the node list and the owners in the store), so no node has to hand targets out.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set

import numpy as np

from groupcoord.assign.consumer import uniform

__all__ = ["target", "shards_of"]


def target(shards: int, live_nodes: Sequence[int], current: Sequence[Optional[int]]
           ) -> List[Optional[int]]:
    """The target owner (a node id) of each shard 0..shards-1, None when no node is live.

    current[i] is shard i's owner now (None: none); an owner that is not live counts as
    none, so its shards are moved.
    """
    if len(current) != shards:
        raise ValueError("current has %d owners for %d shards" % (len(current), shards))
    nodes = sorted(set(live_nodes))
    if not nodes or shards == 0:
        return [None] * shards
    # Members in ascending node id: the assignor's tie-breaks follow member order, and every
    # node sorts the same way, so all of them compute the same target.
    member = {node: i for i, node in enumerate(nodes)}
    cur = np.fromiter((-1 if o is None else member.get(o, -1) for o in current),
                      dtype=np.int32, count=shards)
    m = len(nodes)
    owners = uniform(np.array([shards], dtype=np.int32), np.arange(m + 1, dtype=np.int64),
                     np.zeros(m, dtype=np.int32), cur)
    return [nodes[i] for i in owners.tolist()]


def shards_of(node: int, owners: Sequence[Optional[int]]) -> Set[int]:
    """The shards a target (or the store's owner list) gives to node."""
    return {i for i, o in enumerate(owners) if o == node}
