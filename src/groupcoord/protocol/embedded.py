"""Formats that ride inside opaque bytes fields: consumer subscriptions and assignments
(JoinGroup/SyncGroup metadata), Kafka Connect worker metadata and assignments, and the
sticky assignor's user data (KIP-341).

Layouts:
  ConsumerProtocol* / ConnectWorker*   int16 version | body of that version
  StickyAssignorUserData               body only: v0 = PreviousAssignment;
                                       v1 = v0 + int32 Generation

Forward compatibility follows Kafka: a version newer than we know is read with the newest
format we know and its trailing bytes are ignored; a negative version is an error.
"""
from groupcoord._native.codec import get_data_codec
from groupcoord._native.krpc import DecodeError, TruncatedError
from groupcoord.protocol.messages import (ConnectWorkerAssignment, ConnectWorkerMetadata,
                                          ConsumerProtocolAssignment,
                                          ConsumerProtocolSubscription, StickyAssignorUserData)

_I16 = 2


def _encode_versioned(msg, version: int) -> bytes:
    return version.to_bytes(2, "big", signed=True) + get_data_codec(type(msg).__name__,
                                                                    version).encode(msg)


def _decode_versioned(cls, data):
    if len(data) < _I16:
        raise TruncatedError("%s: %d byte(s) is too short for the version prefix"
                             % (cls.__name__, len(data)), cls.__name__ + ".<version>", 0)
    version = int.from_bytes(bytes(data[:2]), "big", signed=True)
    if version < 0:
        raise DecodeError("%s: negative version %d" % (cls.__name__, version),
                          cls.__name__ + ".<version>", 0)
    use = min(version, cls.VERSIONS[1])
    msg, _ = get_data_codec(cls.__name__, use).decode_from(data, _I16)
    return version, msg


def encode_subscription(sub: ConsumerProtocolSubscription, version: int = 3) -> bytes:
    return _encode_versioned(sub, version)


def decode_subscription(data) -> tuple:
    """-> (version on the wire, ConsumerProtocolSubscription)."""
    return _decode_versioned(ConsumerProtocolSubscription, data)


def encode_assignment(a: ConsumerProtocolAssignment, version: int = 3) -> bytes:
    return _encode_versioned(a, version)


def decode_assignment(data) -> tuple:
    return _decode_versioned(ConsumerProtocolAssignment, data)


def encode_connect_metadata(m: ConnectWorkerMetadata, version: int) -> bytes:
    return _encode_versioned(m, version)


def decode_connect_metadata(data) -> tuple:
    return _decode_versioned(ConnectWorkerMetadata, data)


def encode_connect_assignment(a: ConnectWorkerAssignment, version: int) -> bytes:
    return _encode_versioned(a, version)


def decode_connect_assignment(data) -> tuple:
    return _decode_versioned(ConnectWorkerAssignment, data)


def encode_sticky_user_data(u: StickyAssignorUserData, version: int = 1) -> bytes:
    return get_data_codec("StickyAssignorUserData", version).encode(u)


def decode_sticky_user_data(data) -> tuple:
    """-> (version, StickyAssignorUserData). KIP-341: read as v1 (with the generation); if the
    bytes end after the assignment, it is v0 and the generation is -1. Trailing bytes are
    ignored (forward compatibility)."""
    v0, end = get_data_codec("StickyAssignorUserData", 0).decode_from(data, 0)
    if len(data) - end >= 4:
        v1, _ = get_data_codec("StickyAssignorUserData", 1).decode_from(data, 0)
        return 1, v1
    return 0, v0
