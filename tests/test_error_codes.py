"""Kafka error codes: numbers are protocol facts (DESIGN.md "Error codes")."""
import pytest

from groupcoord.protocol.error_codes import ErrorCode, KafkaError, error_name

# DESIGN.md, "Error codes (Kafka's numbers)".
DESIGN_CODES = {
    "NONE": 0, "UNKNOWN_SERVER_ERROR": -1, "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16, "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23, "INVALID_GROUP_ID": 24, "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26, "REBALANCE_IN_PROGRESS": 27, "GROUP_AUTHORIZATION_FAILED": 30,
    "UNSUPPORTED_VERSION": 35, "INVALID_REQUEST": 42, "GROUP_ID_NOT_FOUND": 69,
    "MEMBER_ID_REQUIRED": 79, "GROUP_MAX_SIZE_REACHED": 81, "FENCED_INSTANCE_ID": 82,
    "UNKNOWN_TOPIC_ID": 100, "FENCED_MEMBER_EPOCH": 110, "UNRELEASED_INSTANCE_ID": 111,
    "UNSUPPORTED_ASSIGNOR": 112, "STALE_MEMBER_EPOCH": 113,
}

# Kafka's Java client: these map to RetriableException subclasses ...
RETRIABLE = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
             "UNKNOWN_TOPIC_ID"}
# ... and these do not. REBALANCE_IN_PROGRESS is an ApiException in Kafka (rejoin, not retry).
NOT_RETRIABLE = set(DESIGN_CODES) - RETRIABLE


@pytest.mark.parametrize("name,code", sorted(DESIGN_CODES.items(), key=lambda kv: kv[1]))
def test_design_numbers(name, code):
    assert ErrorCode[name] == code
    assert ErrorCode(code).name == name
    assert error_name(code) == name


@pytest.mark.parametrize("name", sorted(RETRIABLE))
def test_retriable(name):
    assert ErrorCode[name].retriable is True


@pytest.mark.parametrize("name", sorted(NOT_RETRIABLE))
def test_not_retriable(name):
    assert ErrorCode[name].retriable is False


def test_other_retriable_examples():
    for code in (2, 3, 5, 6, 7, 9, 13, 19, 20, 41, 51, 56, 70, 71, 74, 75, 78, 88, 89, 103, 106,
                 122, 123, 133):
        assert ErrorCode(code).retriable, error_name(code)
    for code in (1, 8, 10, 29, 47, 59, 90, 120, 129):
        assert not ErrorCode(code).retriable, error_name(code)


def test_connect_group_codes_are_ours_and_fit_int16():
    assert ErrorCode.COMPUTE_ASSIGNMENT == 10000
    assert ErrorCode.INVALID_ASSIGNMENT == 10001
    for e in ErrorCode:
        assert -(1 << 15) <= e < (1 << 15)
    assert not ErrorCode.INVALID_ASSIGNMENT.retriable


def test_kafka_range_is_contiguous():
    kafka = sorted(int(e) for e in ErrorCode if e < 10000)
    assert kafka == list(range(-1, kafka[-1] + 1))
    assert kafka[-1] >= 133   # SHARE_SESSION_LIMIT_REACHED, Kafka 4.x


def test_codes_and_names_unique():
    members = list(ErrorCode.__members__.values())
    assert len(members) == len(ErrorCode)            # no aliases
    assert len({int(e) for e in ErrorCode}) == len(ErrorCode)
    assert len({e.name for e in ErrorCode}) == len(ErrorCode)


def test_every_code_has_a_one_line_message():
    for e in ErrorCode:
        assert isinstance(e.message, str) and e.message.strip()
        assert "\n" not in e.message
        assert isinstance(e.retriable, bool)


@pytest.mark.parametrize("code", [134, 999, 9999, -2, 32767, -32768])
def test_error_name_unknown(code):
    assert error_name(code) == "UNKNOWN_CODE_%d" % code


def test_error_name_never_raises_on_odd_input():
    assert error_name(ErrorCode.NOT_COORDINATOR) == "NOT_COORDINATOR"
    assert error_name(None).startswith("UNKNOWN_CODE_")
    assert error_name("16").startswith("UNKNOWN_CODE_")


def test_int_enum_interop():
    assert ErrorCode.NOT_COORDINATOR == 16
    assert ErrorCode(16) is ErrorCode.NOT_COORDINATOR
    assert int(ErrorCode.UNKNOWN_SERVER_ERROR) == -1
    with pytest.raises(ValueError):
        ErrorCode(9999)


def test_kafka_error():
    err = KafkaError(ErrorCode.STALE_MEMBER_EPOCH)
    assert err.code is ErrorCode.STALE_MEMBER_EPOCH
    assert err.code == 113 and not err.retriable
    assert "STALE_MEMBER_EPOCH" in str(err)

    err = KafkaError(15, "coordinator moving")
    assert err.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert err.retriable and err.message == "coordinator moving"
    assert isinstance(err, Exception)

    err = KafkaError(4242)
    assert err.code == 4242 and not isinstance(err.code, ErrorCode)
    assert not err.retriable
    assert "UNKNOWN_CODE_4242" in str(err)

    with pytest.raises(KafkaError) as info:
        raise KafkaError(ErrorCode.INVALID_ASSIGNMENT)
    assert info.value.code == 10001
