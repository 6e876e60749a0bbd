"""Startup checks of `groupcoord serve` (server/main.py): a data or catalog directory that is
writable, the open files limit against what the node may hold open, and the one-line
startup error they raise."""
from __future__ import annotations

import logging
import os
from typing import Optional

__all__ = ["StartupError", "check_data_dir", "check_open_files_limit", "os_error",
           "FD_MARGIN", "MAX_CONNECTIONS_CAP"]

log = logging.getLogger("groupcoord.serve")


class StartupError(Exception):
    """Why the node cannot start: printed as one line, exit status ``status`` (1; 2 for a
    node id that another running node holds)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


# Descriptors besides connections and segment files: listening sockets, stdio, the event
# loop's own (epoll, self-pipe), the catalog and cluster-id files, log handlers.
FD_MARGIN = 64
# The default --max-connections: whatever the descriptors allow, up to this. A fixed default
# (it was 10,000) refused the 10,000th member of a big group plus any admin connection on a
# machine that could hold far more; Kafka's max.connections is unbounded.
MAX_CONNECTIONS_CAP = 1_000_000


def check_open_files_limit(max_connections: Optional[int], shards: int,
                           data_dir: Optional[str]) -> int:
    """Compare RLIMIT_NOFILE with what this node may hold open: every connection, one
    descriptor per segment file (each segment keeps its read descriptor), and per shard its
    write descriptor plus one for a segment roll or a compaction's output. Raise the soft
    limit towards the hard one where it is short; log one line saying what was done (a
    warning when still short: a roll that cannot open its file fails its shard).
    max_connections None (the default of --max-connections): raise the soft limit to the
    hard one and allow every descriptor the logs leave, up to MAX_CONNECTIONS_CAP. Returns
    the max connections to enforce. data_dir None: no segment files (cluster mode)."""
    try:
        import resource
    except ImportError:                 # pragma: no cover - not on Windows
        return MAX_CONNECTIONS_CAP if max_connections is None else max_connections
    segments = 0
    try:
        for name in os.listdir(data_dir) if data_dir is not None else ():
            d = os.path.join(data_dir, name)
            if name.startswith("__consumer_offsets-") and os.path.isdir(d):
                segments += sum(1 for f in os.listdir(d) if f.endswith(".log"))
    except OSError:
        pass                            # no data yet: only the margin below counts
    if max_connections is None:
        return _connections_from_limit(resource, segments, shards)
    need = max_connections + segments + 2 * shards + FD_MARGIN
    what = ("%d connections + %d segment files + %d shards x 2 + %d"
            % (max_connections, segments, shards, FD_MARGIN))
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == inf or soft >= need:
        log.info("open files limit %s covers the %d this node may use (%s)",
                 "unlimited" if soft == inf else soft, need, what)
        return max_connections
    raised = None
    for target in ([hard] if hard != inf else []) + [need]:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):   # e.g. the hard limit is above fs.nr_open
            continue
        raised = target
        break
    new = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    hard_s = "unlimited" if hard == inf else str(hard)
    if raised is not None and (new == inf or new >= need):
        log.info("open files limit: raised the soft limit from %d to %s (hard limit %s) for "
                 "the %d this node may use (%s)", soft, new, hard_s, need, what)
    else:
        log.warning("open files limit %d (hard limit %s%s) is below the %d this node may use "
                    "(%s): connections beyond it are refused and a shard whose segment roll "
                    "cannot open its file fails and reloads; raise the limit (ulimit -n) or "
                    "lower --max-connections", new, hard_s,
                    "; soft limit raised from %d" % soft if new != soft else "", need, what)
    return max_connections


def _connections_from_limit(resource, segments: int, shards: int) -> int:
    """The default --max-connections: the soft RLIMIT_NOFILE raised to the hard limit, less
    the descriptors the logs need, capped. One log line says what was chosen."""
    inf = resource.RLIM_INFINITY
    reserved = segments + 2 * shards + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_CONNECTIONS_CAP + reserved
    if soft != inf and soft < want and soft != hard:
        for target in ([hard] if hard != inf else []) + [want]:
            if hard != inf and target > hard:
                continue
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                break
            except (ValueError, OSError):   # e.g. the hard limit is above fs.nr_open
                continue
    new = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    conns = MAX_CONNECTIONS_CAP if new == inf else max(1, min(MAX_CONNECTIONS_CAP,
                                                              new - reserved))
    how = ("max connections %d: the open files limit %s%s less %d for the logs (%d segment "
           "files + %d shards x 2 + %d)" % (conns, "unlimited" if new == inf else new,
                                            " (raised from %d)" % soft if new != soft else "",
                                            reserved, segments, shards, FD_MARGIN))
    if conns < 1024:
        log.warning("%s: few; raise the open files limit (ulimit -n) or give "
                    "--max-connections", how)
    else:
        log.info("%s", how)
    return conns


def check_data_dir(path: str, what: str = "data directory") -> None:
    """Create the data directory (cluster mode: the catalog directory) if missing and prove
    it writable (a probe file), so that a path that is a file, a parent we may not write, or
    a read-only directory is one line at startup (StartupError) rather than a traceback from
    the first write."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise StartupError("%s %s exists but is not a directory" % (what, path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise StartupError("cannot create %s %s: %s" % (what, path, os_error(e))) from None
    probe = os.path.join(path, ".groupcoord-write-probe-%d" % os.getpid())
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise StartupError("%s %s is not writable: %s" % (what, path, os_error(e))) \
            from None


def os_error(e: OSError) -> str:
    """'Permission denied: /a/b' from an OSError (its str() repeats the errno)."""
    what = e.strerror or str(e)
    return "%s: %s" % (what, e.filename) if e.filename else what
