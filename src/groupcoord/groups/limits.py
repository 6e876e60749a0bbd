"""Bounds on what one request may make a shard store, checked before a handler runs.

Every record field that holds a string is an int16-length string (32,767 bytes at most), a
record batch is bounded by Kafka's message.max.bytes, and a shard's memory by what its
groups hold. A request that would cross one of these bounds is refused here, with the error
the API has for it and (where the response has a message) a message naming the bound; it is
never truncated. What the handlers cannot see cheaply (a classic group's GroupMetadata record
built from every member's metadata; the records of an event) is checked where it is built
(classic/handlers.py, ``handle_sync``) and, as the last safety net, by the runtime before
anything is applied (runtime/shard_runtime.py, ``ShardRuntime._process``).

The bounds (ShardConfig, settable with ``groupcoord serve --group-config NAME=VALUE``):
  * name.max.bytes (1024): UTF-8 bytes of a group id (INVALID_GROUP_ID), member id, instance
    id, rack, client id and host, protocol type and names, assignor names, subscription regex,
    connector names and worker URL (INVALID_REQUEST). Kafka bounds none of these; a record
    field holds 32,767 bytes and a classic member id is the client id plus 37 bytes.
  * Topic names written by a request (OffsetCommit) follow Kafka's topic rules: 1..249
    characters of [a-zA-Z0-9._-], not "." or ".." (INVALID_TOPIC_EXCEPTION per partition).
    Subscribed topic names are not checked for characters (a name that is no topic matches
    nothing) but one longer than 249 characters is refused (INVALID_REQUEST).
  * offset.metadata.max.bytes (4096, Kafka's): OFFSET_METADATA_TOO_LARGE per partition.
  * message.max.bytes (1,048,588, Kafka's): the records one OffsetCommit writes form one batch
    (INVALID_COMMIT_OFFSET_SIZE, as Kafka's coordinator maps a too large append for commits);
    any single record (UNKNOWN_SERVER_ERROR elsewhere, Kafka's mapping of
    RecordTooLargeException / MESSAGE_TOO_LARGE).
  * shard.max.groups (100,000): a request that would create a group on a full shard is
    refused POLICY_VIOLATION (see ``refuse_new_group``).
"""
from __future__ import annotations

import re
from typing import Optional

from groupcoord.groups.errors import error_response
from groupcoord.groups.records import encode_record
from groupcoord.groups.result import RequestContext, Result
from groupcoord.protocol import api_keys as K
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["check_request", "refuse_new_group", "validate_topic_name", "record_size",
           "over", "TOPIC_NAME_MAX_LENGTH", "BATCH_OVERHEAD", "RECORD_OVERHEAD_MAX",
           "RECORD_OVERHEAD_MIN", "GROUP_CREATING_APIS"]

# Kafka's topic name rules (Topic.validate).
TOPIC_NAME_MAX_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

# RecordBatch v2: the batch header, and one record's framing around its key and value
# (length, attributes, timestamp delta, offset delta, key length, value length, header
# count: seven varints of 1..5 bytes, the timestamp delta up to 10).
BATCH_OVERHEAD = 61
RECORD_OVERHEAD_MIN = 7
RECORD_OVERHEAD_MAX = 32

# APIs whose handlers may create a group (consumed by refuse_new_group).
GROUP_CREATING_APIS = frozenset((K.OFFSET_COMMIT, K.JOIN_GROUP, K.CONSUMER_GROUP_HEARTBEAT,
                                 K.CONNECT_GROUP_HEARTBEAT))


def validate_topic_name(name: str) -> Optional[str]:
    """Kafka's rules for a topic name; the reason it is invalid, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return "topic name is longer than %d characters" % TOPIC_NAME_MAX_LENGTH
    if not _LEGAL_TOPIC.match(name):
        return ("topic name %r has characters other than ASCII alphanumerics, '.', '_' "
                "and '-'" % name)
    return None


def over(s: Optional[str], limit: int) -> bool:
    """Whether ``s`` takes more than ``limit`` bytes in UTF-8 (without encoding a string that
    is clearly within or clearly over it)."""
    if s is None:
        return False
    n = len(s)
    if n > limit:
        return True
    if 4 * n <= limit:              # at most 4 bytes a character
        return False
    return len(s.encode("utf-8", "surrogatepass")) > limit


def record_size(rec) -> int:
    """Bytes ``rec`` takes in a batch (an upper bound of its framing). Raises the codec's
    EncodeError when a field cannot hold its value."""
    k, v = encode_record(rec)
    return len(k) + (len(v) if v is not None else 0) + RECORD_OVERHEAD_MAX


# ------------------------------------------------------------------------ request checks
class _Bad(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = int(code)
        self.message = message


def _name(value: Optional[str], what: str, limit: int) -> None:
    if over(value, limit):
        raise _Bad(E.INVALID_REQUEST, "%s is longer than %d bytes (name.max.bytes)"
                   % (what, limit))


def _group_id(req, limit: int) -> None:
    if over(req.group_id, limit):
        raise _Bad(E.INVALID_GROUP_ID, "group id is longer than %d bytes (name.max.bytes)"
                   % limit)


def _client(ctx: RequestContext, limit: int) -> None:
    # Stored in the member's records (and the prefix of a classic member id).
    _name(ctx.client_id, "client id", limit)
    _name(ctx.client_host, "client host", limit)


def _check_join(req, ctx, cfg) -> None:
    lim = cfg.name_max_bytes
    _group_id(req, lim)
    _name(req.member_id, "member id", lim)
    _name(req.group_instance_id, "group instance id", lim)
    _name(req.protocol_type, "protocol type", lim)
    for p in req.protocols:
        _name(p.name, "protocol name", lim)
    _client(ctx, lim)


def _check_group_only(req, ctx, cfg) -> None:
    _group_id(req, cfg.name_max_bytes)


def _check_consumer_heartbeat(req, ctx, cfg) -> None:
    lim = cfg.name_max_bytes
    _group_id(req, lim)
    _name(req.member_id, "member id", lim)
    _name(req.instance_id, "instance id", lim)
    _name(req.rack_id, "rack id", lim)
    _name(req.server_assignor, "server assignor", lim)
    _name(req.subscribed_topic_regex, "subscribed topic regex", lim)
    names = req.subscribed_topic_names
    if names:
        total = 0
        for t in names:
            if len(t) > TOPIC_NAME_MAX_LENGTH:
                raise _Bad(E.INVALID_REQUEST, "subscribed topic name of %d characters: a "
                           "topic name has at most %d" % (len(t), TOPIC_NAME_MAX_LENGTH))
            total += len(t) + 2
        # The subscription is one field of the member's record: refuse it as Kafka's runtime
        # refuses a record over message.max.bytes (RecordTooLargeException).
        if total > cfg.message_max_bytes:
            raise _Bad(E.UNKNOWN_SERVER_ERROR, "the subscription of %d topic names (%d bytes) "
                       "does not fit in one record of message.max.bytes %d"
                       % (len(names), total, cfg.message_max_bytes))
    _client(ctx, lim)


def _connectors(cat, lim: int) -> None:
    if cat is None:
        return
    for c in cat.connectors or ():
        _name(c, "connector name", lim)
    for t in cat.tasks or ():
        _name(t.connector, "connector name", lim)


def _blob(n: int, what: str, cfg) -> None:
    # Bytes a client sends to be stored whole in one record: refused as Kafka's runtime
    # refuses a record over message.max.bytes (RecordTooLargeException: UNKNOWN_SERVER_ERROR).
    if n > cfg.message_max_bytes:
        raise _Bad(E.UNKNOWN_SERVER_ERROR, "%s of %d bytes does not fit in one record of "
                   "message.max.bytes %d" % (what, n, cfg.message_max_bytes))


def _check_connect_heartbeat(req, ctx, cfg) -> None:
    lim = cfg.name_max_bytes
    _group_id(req, lim)
    _name(req.member_id, "member id", lim)
    _name(req.instance_id, "instance id", lim)
    _name(req.worker_url, "worker url", lim)
    _name(req.server_assignor, "server assignor", lim)
    blob = 0
    for a in req.client_assignors or ():
        _name(a.name, "client assignor name", lim)
        blob += len(a.metadata or b"")
    _blob(blob, "the client assignors' metadata", cfg)
    if req.config_state is not None:
        for c in req.config_state.connectors or ():
            _name(c.name, "connector name", lim)
    _connectors(req.owned_connectors_and_tasks, lim)
    _client(ctx, lim)


def _check_connect_install(req, ctx, cfg) -> None:
    lim = cfg.name_max_bytes
    _group_id(req, lim)
    _blob(len(req.assignor_state or b""), "the assignor state", cfg)
    for mb in req.members or ():
        _connectors(mb.connectors_and_tasks, lim)
        _blob(len(mb.metadata or b""), "a member's assignment metadata", cfg)


_CHECKS = {
    K.OFFSET_COMMIT: _check_group_only,   # topics and metadata: offsets.handle_offset_commit
    K.JOIN_GROUP: _check_join,
    K.HEARTBEAT: _check_group_only,
    K.LEAVE_GROUP: _check_group_only,
    K.SYNC_GROUP: _check_group_only,
    K.CONSUMER_GROUP_HEARTBEAT: _check_consumer_heartbeat,
    K.CONNECT_GROUP_HEARTBEAT: _check_connect_heartbeat,
    K.CONNECT_GROUP_PREPARE_ASSIGNMENT: _check_group_only,
    K.CONNECT_GROUP_INSTALL_ASSIGNMENT: _check_connect_install,
}


def check_request(shard, req, ctx: RequestContext) -> Optional[Result]:
    """A Result refusing ``req`` when a field is over its bound, else None. Member ids,
    instance ids and the like that a request only looks up (SyncGroup, Heartbeat, LeaveGroup)
    are not checked: no member has such an id, so the handler's own error answers them."""
    fn = _CHECKS.get(type(req).API_KEY)
    if fn is None:
        return None
    try:
        fn(req, ctx, shard.config)
    except _Bad as bad:
        return Result(error_response(req, ctx.version, bad.code, bad.message))
    return None


def refuse_new_group(shard, req, ctx: RequestContext, result: Result) -> Optional[Result]:
    """The refusal of a Result that would create a group on a shard that holds
    shard.max.groups groups, else None.

    POLICY_VIOLATION (44): not retriable (a client retrying would only load the node), and
    what Kafka answers when an operator policy refuses a request; the message names the
    setting. COORDINATOR_NOT_AVAILABLE would be retried forever, GROUP_MAX_SIZE_REACHED is
    about members of one group."""
    gid = getattr(req, "group_id", None)
    if gid is None or gid in shard.groups or len(shard.groups) < shard.config.shard_max_groups:
        return None
    if not (result.records or result.park is not None):
        return None                         # refused or answered without creating anything
    return Result(error_response(
        req, ctx.version, E.POLICY_VIOLATION,
        "the coordinator shard of group %r holds %d groups (shard.max.groups): no new group "
        "can be created on it" % (gid[:64], len(shard.groups))))
