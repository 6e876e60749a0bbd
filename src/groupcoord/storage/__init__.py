"""The durable record log: Kafka RecordBatch v2 segments with group commit, crash recovery and
compaction (docs/storage.md).

    log = Log(directory)                       # recovery happens here
    offsets = log.append([(key, value), ...])  # buffered
    durable_end = log.flush()                  # one write + one fsync for everything buffered
    for offset, key, value in log.read(0): ...
    log.compact(retention_ms)                  # closed segments; may run in a worker thread
"""
from groupcoord.storage.batch import (CorruptBatchError, TruncatedBatchError, decode,
                                      decode_batches, encode_batch, scan)
from groupcoord.storage.log import CorruptLogError, Log, LogFailedError
from groupcoord.storage.segment import Segment, segment_name

__all__ = ["Log", "Segment", "segment_name", "CorruptBatchError", "TruncatedBatchError",
           "CorruptLogError", "LogFailedError", "encode_batch", "decode", "decode_batches",
           "scan"]
