"""RecordBatch v2 codec: the native implementation (native/recordbatch.pyx; the layout and the
cursor that reads it, shared with the shard loader, in native/recordbatch.pxd). Its
pure-Python oracle lives with the tests (tests/batch_oracle.py).

    encode_batch([(key, value | None)], base_offset, timestamp_ms) -> bytes
    decode(buf) -> ([(offset, key, value)], next_pos)     # CRC and every length verified
    scan(buf) -> (batch infos, stop, reason, truncated)   # validation without decoding
"""
from groupcoord._native.recordbatch import (BATCH_OVERHEAD, LENGTH_OVERHEAD, MAX_BATCH_BYTES,
                                            CorruptBatchError, TruncatedBatchError, decode,
                                            decode_batches, encode_batch,
                                            encode_batch_explicit, find_valid_batch, scan)

__all__ = ["CorruptBatchError", "TruncatedBatchError", "encode_batch", "encode_batch_explicit",
           "decode", "decode_batches", "scan", "find_valid_batch", "BATCH_OVERHEAD",
           "LENGTH_OVERHEAD", "MAX_BATCH_BYTES"]
