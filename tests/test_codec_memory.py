"""The decoders build Structs directly and keep decoded lists out of the cyclic GC; check that
nothing leaks: objects, type references, or memory, over many decodes."""
import gc
import sys
import tracemalloc

import groupcoord.protocol as P
from groupcoord.protocol import messages as M


def _cgh_request():
    tps = [M.ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=bytes([t]) * 16,
                                                          partitions=list(range(10)))
           for t in range(10)]
    return P.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m" * 22, member_epoch=3,
                                           subscribed_topic_names=["t%d" % i for i in range(10)],
                                           topic_partitions=tps)


def test_decoded_structs_equal_constructed_ones_and_are_not_gc_tracked():
    msg = _cgh_request()
    back = P.decode(P.ConsumerGroupHeartbeatRequest, P.encode(msg, 1), 1)
    assert back == msg and repr(back) == repr(msg)
    assert not gc.is_tracked(back)
    assert not gc.is_tracked(back.topic_partitions)
    # Still ordinary, mutable Structs.
    back.member_epoch = 4
    back.topic_partitions.append(back.topic_partitions[0])
    assert back.member_epoch == 4 and len(back.topic_partitions) == 11


def test_repeated_decodes_leak_nothing():
    msg = _cgh_request()
    body = P.encode(msg, 1)
    codec = P.get_codec(68, 1)
    for _ in range(1000):       # warm caches (string/uuid decode caches, freelists)
        codec.decode_request(body)
    types = [M.ConsumerGroupHeartbeatRequest, M.ConsumerGroupHeartbeatRequestTopicPartitions]
    refs = [sys.getrefcount(t) for t in types]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(20000):
        codec.decode_request(body)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, "decoding grew memory by %d bytes" % grown
    assert [sys.getrefcount(t) for t in types] == refs
