from typing import Optional

from groupcoord.protocol.messages import RequestHeader

OFFSET_COMMIT: int
VERSIONS: tuple[int, int]

def scan_offset_commit(
    frame: bytes | bytearray | memoryview,
) -> tuple[RequestHeader, str, int, str, Optional[str], int, list[tuple[str, int, int]]]: ...
def offset_commit_error_frame(frame: bytes | bytearray | memoryview, code: int) -> bytes: ...
