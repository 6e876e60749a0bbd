from typing import Optional

MAX_ARRAY_ELEMENTS: int

class ProtocolError(Exception): ...

class DecodeError(ProtocolError, ValueError):
    field: Optional[str]
    offset: Optional[int]
    header: object  # set by decode_request_frame once the header was read (or None)
    def __init__(self, message: str, field: Optional[str] = ..., offset: Optional[int] = ...) -> None: ...

class TruncatedError(DecodeError): ...
class InvalidUtf8Error(DecodeError): ...
class TooManyElementsError(DecodeError): ...

class UnsupportedVersionError(ProtocolError):
    api_key: Optional[int]
    api_version: Optional[int]
    correlation_id: int  # set by decode_request_frame
    def __init__(self, message: str, api_key: Optional[int] = ..., api_version: Optional[int] = ...) -> None: ...

class FrameTooLargeError(ProtocolError):
    size: Optional[int]
    limit: Optional[int]
    frames: list[bytes]  # complete frames that preceded the bad size in the same feed
    def __init__(self, message: str, size: Optional[int] = ..., limit: Optional[int] = ...) -> None: ...

class EncodeError(ProtocolError, ValueError):
    field: Optional[str]
    def __init__(self, message: str, field: Optional[str] = ...) -> None: ...
