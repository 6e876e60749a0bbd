"""groupcoord's assignors inside other tools (docs/embedding.md).

* Kafka clients: ``groupcoord.integrations.kafka_python`` (kafka-python 3) and
  ``groupcoord.integrations.aiokafka`` (aiokafka), partition assignors to pass as
  ``partition_assignment_strategy``; each imports its client library, so neither is imported
  here. ``groupcoord.integrations.protocols`` holds what they share (wire formats per
  protocol name, the leader's step) and imports no client.
* Everything else: the numpy API below (``groupcoord.integrations.arrays``)::

    import numpy as np
    from groupcoord import integrations as gi

    # 3 workers, 2 pools of 4 and 2 units; worker 2 only takes pool 1
    a = gi.assign("sticky", [4, 2], [[0, 1], [0, 1], [1]])
    assert gi.validate(a.owner, 3, partitions_per_topic=[4, 2],
                       subscriptions=[[0, 1], [0, 1], [1]]).ok
"""
from groupcoord.integrations.arrays import (STRATEGIES, Assignment, Check, Diff, assign, csr,
                                            diff, topic_base, validate)
from groupcoord.integrations.protocols import OPTIMAL, PROTOCOLS

__all__ = ["STRATEGIES", "Assignment", "Check", "Diff", "assign", "csr", "diff", "validate",
           "topic_base", "OPTIMAL", "PROTOCOLS"]
