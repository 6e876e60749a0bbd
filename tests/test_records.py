"""Coordinator records round-trip through the log's key/value bytes, with Kafka's layout."""
import pytest
from hypothesis import given, settings
import hypothesis.strategies as st

import groupcoord.protocol as P
from groupcoord.groups.record_types import RECORD_SCHEMAS, RecordType
from groupcoord.groups.records import Record, decode_record, encode_record
from groupcoord.protocol import messages as M
from schema_strategies import message_strategy

TYPES = [t for t in RecordType if t is not RecordType.LEGACY_OFFSET_COMMIT]


@pytest.mark.parametrize("rtype", TYPES, ids=[t.name for t in TYPES])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_record_type_round_trips(rtype, data):
    kname, vname, (lo, hi) = RECORD_SCHEMAS[rtype]
    key = data.draw(message_strategy(kname, 0))
    version = data.draw(st.integers(lo, hi))
    value = data.draw(st.one_of(st.none(), message_strategy(vname, version)))
    rec = Record(key, value)
    kb, vb = encode_record(rec, version)
    assert kb[:2] == int(rtype).to_bytes(2, "big")
    assert (vb is None) == (value is None)
    back = decode_record(kb, vb)
    assert back == rec and back.type is rtype


def test_offset_commit_layout_matches_kafka():
    rec = Record(M.OffsetCommitKey(group="g", topic="t", partition=3),
                 M.OffsetCommitValue(offset=42, leader_epoch=-1, metadata="",
                                     commit_timestamp=1000))
    kb, vb = encode_record(rec, 3)
    assert kb == bytes.fromhex("0001" "0001 67" "0001 74" "00000003".replace(" ", ""))
    assert vb[:2] == b"\x00\x03"
    # the legacy key type 0 reads as the same record
    assert decode_record(b"\x00\x00" + kb[2:], vb) == rec


def test_newer_value_version_reads_as_newest_known():
    rec = Record(M.ConsumerGroupMetadataKey(group_id="g"), M.ConsumerGroupMetadataValue(epoch=7))
    kb, vb = encode_record(rec)
    future = b"\x00\x05" + vb[2:] + b"more"
    assert decode_record(kb, future) == rec


def test_bad_records_are_typed_errors():
    with pytest.raises(P.DecodeError, match="unknown record type 77"):
        decode_record(b"\x00\x4d\x00", None)
    with pytest.raises(P.TruncatedError):
        decode_record(b"\x00", None)
    with pytest.raises(TypeError):
        encode_record(Record(M.GroupMetadataKey(group="g"), M.ConsumerGroupMetadataValue()))
