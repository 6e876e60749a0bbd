"""Golden bytes, written out by hand from Kafka's protocol guide, with the layout annotated."""
import pytest

import groupcoord.protocol as P
from groupcoord.protocol import messages as M


def h(s: str) -> bytes:
    """Hex with spaces and | separators, for readability."""
    return bytes.fromhex(s.replace("|", " "))


def test_heartbeat_request_v0():
    msg = P.HeartbeatRequest(group_id="g", generation_id=3, member_id="m")
    golden = h("0001 67"        # group_id: int16 length 1, "g"
               "| 00000003"     # generation_id
               "| 0001 6d")     # member_id: "m"
    assert P.encode(msg, 0) == golden
    assert P.decode(P.HeartbeatRequest, golden, 0) == msg


def test_heartbeat_request_v4_flexible():
    msg = P.HeartbeatRequest(group_id="g", generation_id=3, member_id="m",
                             group_instance_id=None)
    golden = h("02 67"          # group_id: compact string, uvarint(len + 1) = 2
               "| 00000003"     # generation_id
               "| 02 6d"        # member_id
               "| 00"           # group_instance_id: compact nullable, 0 = null
               "| 00")          # tagged fields: none
    assert P.encode(msg, 4) == golden
    assert P.decode(P.HeartbeatRequest, golden, 4) == msg


def test_api_versions_request_frame_v3_uses_request_header_v2():
    msg = P.ApiVersionsRequest(client_software_name="x", client_software_version="1")
    frame = P.encode_request_frame(msg, 3, correlation_id=9, client_id="c")
    golden = h("00000011"       # size = 17
               "| 0012 0003"    # api_key 18, api_version 3
               "| 00000009"     # correlation_id
               "| 0001 63"      # client_id: ALWAYS an int16-length string, even in header v2
               "| 00"           # header tagged fields (header v2)
               "| 02 78 | 02 31"  # client_software_name "x", client_software_version "1"
               "| 00")          # body tagged fields
    assert frame == golden
    header, body = P.decode_request_frame(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id,
            header.client_id) == (18, 3, 9, "c")
    assert body == msg


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_always_uses_response_header_v0(version):
    msg = P.ApiVersionsResponse(error_code=0, api_keys=[
        M.ApiVersionsResponseApiVersion(api_key=18, min_version=0, max_version=4)])
    frame = P.encode_response_frame(msg, version, correlation_id=7)
    # header v0: the correlation id, then the body at once (no tagged-field byte)
    assert frame[4:8] == h("00000007")
    assert frame[8:] == P.encode(msg, version)
    assert P.get_codec(18, version).response_header_version == 0
    assert P.decode_response_frame(frame[4:], 18, version) == (7, msg)


def test_api_versions_response_v3_golden():
    msg = P.ApiVersionsResponse(error_code=0, api_keys=[
        M.ApiVersionsResponseApiVersion(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0)
    golden = h("00000013"             # size = 19
               "| 00000007"           # correlation id; header v0: no tagged fields
               "| 0000"               # error_code
               "| 02"                 # api_keys: compact array of 1
               "| 0012 0000 0004 00"  # api_key 18, min 0, max 4, tagged fields
               "| 00000000"           # throttle_time_ms
               "| 00")                # tagged fields (none: features at defaults)
    assert P.encode_response_frame(msg, 3, 7) == golden


def test_other_flexible_responses_use_response_header_v1():
    msg = P.HeartbeatResponse(throttle_time_ms=0, error_code=27)
    frame = P.encode_response_frame(msg, 4, correlation_id=5)
    assert frame == h("0000000c | 00000005 | 00"  # size 12, correlation id, header tags
                      "| 00000000 | 001b | 00")   # throttle, REBALANCE_IN_PROGRESS, tags
    assert P.get_codec(12, 4).response_header_version == 1
    assert P.get_codec(12, 3).response_header_version == 0


def test_unsupported_api_versions_version_is_reported_with_its_correlation_id():
    # A client newer than us sends ApiVersions v9; the server must answer with a v0 body
    # carrying UNSUPPORTED_VERSION (35) and its ranges. The codec reports what to answer.
    frame = h("0012 0009 0000002a 0001 63 00 00")
    with pytest.raises(P.UnsupportedVersionError) as e:
        P.decode_request_frame(frame)
    assert (e.value.api_key, e.value.api_version, e.value.correlation_id) == (18, 9, 42)
    answer = P.encode_response_frame(P.ApiVersionsResponse(error_code=35, api_keys=[
        M.ApiVersionsResponseApiVersion(api_key=18, min_version=0, max_version=4)]), 0, 42)
    assert answer == h("00000010 | 0000002a | 0023"   # size 16, correlation id, error 35
                       "| 00000001 | 0012 0000 0004")  # int32 array of 1: key 18, 0..4


def test_consumer_group_heartbeat_response_nullable_struct():
    tp = M.ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=bytes(range(16)),
                                                         partitions=[0, 5])
    msg = P.ConsumerGroupHeartbeatResponse(
        error_code=0, member_id="m", member_epoch=2, heartbeat_interval_ms=5000,
        assignment=M.ConsumerGroupHeartbeatResponseAssignment(topic_partitions=[tp]))
    golden = h("00000000 | 0000 | 00"            # throttle, error_code, error_message null
               "| 02 6d | 00000002 | 00001388"   # member_id "m", epoch 2, interval 5000
               "| 01"                            # assignment: nullable struct, 1 = present
               "| 02"                            # topic_partitions: compact array of 1
               "| 000102030405060708090a0b0c0d0e0f"  # topic_id (uuid, 16 raw bytes)
               "| 03 00000000 00000005 | 00"      # partitions [0, 5], struct tags
               "| 00"                            # assignment tags
               "| 00")                           # response tags
    assert P.encode(msg, 1) == golden
    assert P.decode(P.ConsumerGroupHeartbeatResponse, golden, 1) == msg


def test_sticky_user_data_generation_marker_kip341():
    from groupcoord.protocol import embedded
    tp = M.StickyAssignorUserDataTopicPartitions(topic="t", partitions=[1])
    v1 = embedded.encode_sticky_user_data(
        M.StickyAssignorUserData(previous_assignment=[tp], generation=7), 1)
    assert v1 == h("00000001 | 0001 74 | 00000001 00000001 | 00000007")
    assert embedded.decode_sticky_user_data(v1) == (1, M.StickyAssignorUserData([tp], 7))
    # v0 bytes (an old client): no generation; it reads as generation -1
    v0 = v1[:-4]
    assert embedded.decode_sticky_user_data(v0) == (0, M.StickyAssignorUserData([tp], -1))


def test_newer_subscription_version_reads_as_newest_known_ignoring_trailing_bytes():
    from groupcoord.protocol import embedded
    sub = M.ConsumerProtocolSubscription(topics=["a"], user_data=None, generation_id=4,
                                         rack_id="r")
    future = h("0009") + embedded.encode_subscription(sub, 3)[2:] + b"future fields"
    assert embedded.decode_subscription(future) == (9, sub)
