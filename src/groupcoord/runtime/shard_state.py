"""The state of one shard runtime, and what a request gets while the shard cannot serve it."""
from __future__ import annotations

import enum

from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ShardState", "STATE_ERROR"]


class ShardState(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"        # a log write failed (reloading), or the log is corrupt (.corrupt)



# The error a request gets while the shard cannot serve it.
STATE_ERROR = {
    ShardState.UNLOADED: ErrorCode.NOT_COORDINATOR,
    ShardState.LOADING: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ShardState.FAILED: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}
