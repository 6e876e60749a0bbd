"""Kafka wire protocol: message classes, codecs, frames and error codes.

    from groupcoord.protocol import HeartbeatRequest, encode, decode
    body = encode(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4)
    msg = decode(HeartbeatRequest, body, 4)
"""
import importlib

from groupcoord.protocol import messages
from groupcoord.protocol.messages import *  # noqa: F401,F403  (the message classes)
from groupcoord._native.krpc import (DecodeError, EncodeError, FrameTooLargeError,
                                     InvalidUtf8Error, ProtocolError, TooManyElementsError,
                                     TruncatedError, UnsupportedVersionError)
from groupcoord._native.codec import (api_key_of, decode_request_frame, decode_response_frame,
                                      encode_request_frame, encode_response_frame, get_codec,
                                      get_data_codec, supported_versions)
from groupcoord._native.framing import DEFAULT_MAX_FRAME_BYTES, FrameSplitter

# Importing each generated module registers its (api_key, version) codecs.
for _m in messages.NATIVE_MODULES:
    importlib.import_module(_m)
del _m


def encode(msg, version: int) -> bytes:
    """Encode a message body (no header) at the given version."""
    t = type(msg)
    if getattr(t, "KIND", None) == "data":
        return get_data_codec(t.__name__, version).encode(msg)
    key = api_key_of(t)
    if key is None:
        raise EncodeError("%s is not a protocol message" % t.__name__)
    c = get_codec(key, version)
    return c.encode_request(msg) if t is c.request_type else c.encode_response(msg)


def decode(cls, data, version: int):
    """Decode a message body (no header) of class cls at the given version."""
    if getattr(cls, "KIND", None) == "data":
        return get_data_codec(cls.__name__, version).decode(data)
    key = api_key_of(cls)
    if key is None:
        raise TypeError("%s is not a protocol message class" % getattr(cls, "__name__", cls))
    c = get_codec(key, version)
    return c.decode_request(data) if cls is c.request_type else c.decode_response(data)
