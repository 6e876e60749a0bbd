from typing import Optional

from groupcoord._native.krpc import FrameTooLargeError

DEFAULT_MAX_FRAME_BYTES: int

class FrameSplitter:
    max_frame_bytes: int
    frames_split: int
    error: Optional[FrameTooLargeError]
    def __init__(self, max_frame_bytes: int = ...) -> None: ...
    def raise_limit(self, max_frame_bytes: int) -> None: ...
    @property
    def pending(self) -> int: ...
    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]: ...
