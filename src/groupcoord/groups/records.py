"""Coordinator records <-> the key/value bytes of the durable log.

Layout (as Kafka's __consumer_offsets):
  key   = int16 record type | key fields (the type's <Name>Key schema, version 0)
  value = int16 value version | value fields (<Name>Value schema at that version)
          or None: a tombstone, which deletes the key at compaction
A reader of a newer value version than it knows reads the newest known version and ignores the
trailing bytes (the same forward-compatibility rule as the embedded formats).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from groupcoord._native.codec import get_data_codec
from groupcoord._native.krpc import DecodeError, TruncatedError
from groupcoord.groups.record_types import RECORD_SCHEMAS, RecordType
from groupcoord.protocol import messages

_BY_KEY_CLASS = {}
for _t, (_k, _v, _r) in RECORD_SCHEMAS.items():
    if _t is not RecordType.LEGACY_OFFSET_COMMIT:        # read-only alias of type 1
        _BY_KEY_CLASS[getattr(messages, _k)] = _t


class Record(NamedTuple):
    """One state change: the key struct and the value struct (None = tombstone)."""
    key: Any
    value: Optional[Any]

    @property
    def type(self) -> RecordType:
        return _BY_KEY_CLASS[type(self.key)]


def encode_record(rec: Record, value_version: Optional[int] = None) -> tuple:
    """-> (key bytes, value bytes or None). The value is written at its newest version unless
    value_version says otherwise."""
    rtype = _BY_KEY_CLASS.get(type(rec.key))
    if rtype is None:
        raise TypeError("%s is not a coordinator record key" % type(rec.key).__name__)
    kname, vname, (lo, hi) = RECORD_SCHEMAS[rtype]
    key = int(rtype).to_bytes(2, "big") + get_data_codec(kname, 0).encode(rec.key)
    if rec.value is None:
        return key, None
    if type(rec.value) is not getattr(messages, vname):
        raise TypeError("record type %s takes a %s value, got %s"
                        % (rtype.name, vname, type(rec.value).__name__))
    v = hi if value_version is None else value_version
    if value_version is None and rtype is RecordType.OFFSET_COMMIT \
            and rec.value.expire_timestamp >= 0:
        v = 1       # an explicit expire timestamp: v1 is the only version holding it (Kafka's)
    return key, v.to_bytes(2, "big") + get_data_codec(vname, v).encode(rec.value)


# record type number -> (RecordType, key codec, lowest value version, value codecs by version);
# built once so that decoding a record is two dict/list lookups and two native decodes.
_DECODE: dict = {}
for _t, (_k, _v, (_lo, _hi)) in RECORD_SCHEMAS.items():
    _DECODE[int(_t)] = (_t, get_data_codec(_k, 0),
                        _lo, [get_data_codec(_v, x) for x in range(_hi + 1)])


def decode_record(key: bytes, value: Optional[bytes]) -> Record:
    """The inverse of encode_record; DecodeError for an unknown type or malformed bytes."""
    if len(key) < 2:
        raise TruncatedError("record key of %d byte(s) has no type" % len(key),
                             "<record type>", 0)
    t = int.from_bytes(key[:2], "big", signed=True)
    entry = _DECODE.get(t)
    if entry is None:
        raise DecodeError("unknown record type %d" % t, "<record type>", 0)
    rtype, kcodec, lo, vcodecs = entry
    k = kcodec.decode(memoryview(key)[2:])
    if value is None:
        return Record(k, None)
    if len(value) < 2:
        raise TruncatedError("record value of %d byte(s) has no version" % len(value),
                             "<value version>", 0)
    ver = int.from_bytes(value[:2], "big", signed=True)
    if ver < lo:
        raise DecodeError("record type %s: value version %d is below %d"
                          % (rtype.name, ver, lo), "<value version>", 0)
    v, _ = vcodecs[min(ver, len(vcodecs) - 1)].decode_from(value, 2)
    return Record(k, v)


def decode_table() -> dict:
    """{record type number: (key codec, lowest value version, [value codec by version])}:
    the table decode_record uses, for decoders that read records in bulk
    (runtime/load.py). A reader applying it must do exactly what decode_record does."""
    return {t: (kc, lo, list(vcs)) for t, (_rt, kc, lo, vcs) in _DECODE.items()}
