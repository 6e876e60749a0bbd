"""BASELINE for APIs kafka-python lacks: a plain pure-Python struct.pack/unpack codec.

kafka-python 3.0.12 has no ConsumerGroupHeartbeat (API 68, KIP-848) and no
ConnectGroupHeartbeat (API 10000, this project's Connect protocol), so the codec benchmarks
compare groupcoord against this file for those rows instead. It is *not* used by groupcoord
itself; it exists only to be a fair, honest reference point:

* hand-written the way a competent Python developer would write it (pre-compiled
  ``struct.Struct`` objects, one ``bytearray`` per message, ``pack('>%di')`` for int32
  arrays, ``unpack_from`` with running offsets on decode; no per-field classes or
  reflection), i.e. roughly as fast as idiomatic pure Python gets;
* it encodes from and decodes into the *same* msgspec Struct classes groupcoord uses, so
  the benchmark can assert byte-for-byte and object-for-object equality with groupcoord
  before timing, and object construction cost is the same on both sides.

Wire format (flexible versions): compact strings / arrays (unsigned varint length + 1, 0 =
null), nullable struct = int8 -1 (null) or 1 followed by the struct, an empty tagged-field
section (varint 0) after every struct. Unknown tagged fields are skipped on decode.
"""
from struct import Struct, pack, unpack_from

import groupcoord.protocol as P

__all__ = [
    "encode_consumer_group_heartbeat_request_v1", "decode_consumer_group_heartbeat_request_v1",
    "encode_consumer_group_heartbeat_response_v1", "decode_consumer_group_heartbeat_response_v1",
    "encode_connect_group_heartbeat_request_v0", "decode_connect_group_heartbeat_request_v0",
]

_i8 = Struct(">b")
_i16 = Struct(">h")
_i32 = Struct(">i")
_i64 = Struct(">q")
_i32_i16 = Struct(">ih")          # throttle_time_ms, error_code
_i32_i32 = Struct(">ii")          # member_epoch, heartbeat_interval_ms
_i16_i16_b_i16 = Struct(">hhbh")  # assignor min/max version, reason, version

pack_i8, pack_i32, pack_i64 = _i8.pack, _i32.pack, _i64.pack
unpack_i8, unpack_i32, unpack_i64 = _i8.unpack_from, _i32.unpack_from, _i64.unpack_from

_NULL = b"\x00"          # null compact string / array
_NO_TAGS = b"\x00"       # empty tagged-field section
_NULL_STRUCT = b"\xff"   # int8 -1
_PRESENT_STRUCT = b"\x01"


# ----------------------------------------------------------------------------- primitives

def _uvarint(n):
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _w_str(buf, s):
    """compact (non-null) string"""
    b = s.encode("utf-8")
    buf += _uvarint(len(b) + 1)
    buf += b


def _w_nstr(buf, s):
    """compact nullable string"""
    if s is None:
        buf += _NULL
    else:
        b = s.encode("utf-8")
        buf += _uvarint(len(b) + 1)
        buf += b


def _w_bytes(buf, b):
    buf += _uvarint(len(b) + 1)
    buf += b


def _w_i32_array(buf, xs):
    n = len(xs)
    buf += _uvarint(n + 1)
    if n:
        buf += pack(">%di" % n, *xs)   # struct caches the compiled format


def _r_uvarint(data, pos):
    b = data[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result = b & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _r_str(data, pos):
    n, pos = _r_uvarint(data, pos)
    if n == 0:
        raise ValueError("null string in a non-nullable field")
    end = pos + n - 1
    return data[pos:end].decode("utf-8"), end


def _r_nstr(data, pos):
    n, pos = _r_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    return data[pos:end].decode("utf-8"), end


def _r_bytes(data, pos):
    n, pos = _r_uvarint(data, pos)
    end = pos + n - 1
    return data[pos:end], end


def _r_i32_array(data, pos):
    n, pos = _r_uvarint(data, pos)
    n -= 1
    if n <= 0:
        return [], pos
    end = pos + 4 * n
    return list(unpack_from(">%di" % n, data, pos)), end


def _r_str_array_nullable(data, pos):
    n, pos = _r_uvarint(data, pos)
    if n == 0:
        return None, pos
    out = []
    for _ in range(n - 1):
        s, pos = _r_str(data, pos)
        out.append(s)
    return out, pos


def _r_str_array(data, pos):
    out, pos = _r_str_array_nullable(data, pos)
    if out is None:
        raise ValueError("null array in a non-nullable field")
    return out, pos


def _skip_tags(data, pos):
    n, pos = _r_uvarint(data, pos)
    for _ in range(n):
        _, pos = _r_uvarint(data, pos)      # tag
        size, pos = _r_uvarint(data, pos)
        pos += size
    return pos


# -------------------------------------------------- ConsumerGroupHeartbeat (API 68) v1

def _w_topic_partitions(buf, tps):
    buf += _uvarint(len(tps) + 1)
    for tp in tps:
        buf += tp.topic_id
        _w_i32_array(buf, tp.partitions)
        buf += _NO_TAGS


def _r_topic_partitions(data, pos, cls):
    n, pos = _r_uvarint(data, pos)
    if n == 0:
        return None, pos
    out = []
    for _ in range(n - 1):
        tid = data[pos:pos + 16]
        parts, pos = _r_i32_array(data, pos + 16)
        pos = _skip_tags(data, pos)
        out.append(cls(topic_id=tid, partitions=parts))
    return out, pos


def encode_consumer_group_heartbeat_request_v1(m):
    buf = bytearray()
    _w_str(buf, m.group_id)
    _w_str(buf, m.member_id)
    buf += pack_i32(m.member_epoch)
    _w_nstr(buf, m.instance_id)
    _w_nstr(buf, m.rack_id)
    buf += pack_i32(m.rebalance_timeout_ms)
    names = m.subscribed_topic_names
    if names is None:
        buf += _NULL
    else:
        buf += _uvarint(len(names) + 1)
        for s in names:
            _w_str(buf, s)
    _w_nstr(buf, m.subscribed_topic_regex)
    _w_nstr(buf, m.server_assignor)
    if m.topic_partitions is None:
        buf += _NULL
    else:
        _w_topic_partitions(buf, m.topic_partitions)
    buf += _NO_TAGS
    return bytes(buf)


def decode_consumer_group_heartbeat_request_v1(data):
    data = bytes(data)
    group_id, pos = _r_str(data, 0)
    member_id, pos = _r_str(data, pos)
    (member_epoch,) = unpack_i32(data, pos)
    instance_id, pos = _r_nstr(data, pos + 4)
    rack_id, pos = _r_nstr(data, pos)
    (rebalance_timeout_ms,) = unpack_i32(data, pos)
    names, pos = _r_str_array_nullable(data, pos + 4)
    regex, pos = _r_nstr(data, pos)
    server_assignor, pos = _r_nstr(data, pos)
    tps, pos = _r_topic_partitions(data, pos, P.ConsumerGroupHeartbeatRequestTopicPartitions)
    pos = _skip_tags(data, pos)
    return P.ConsumerGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=member_epoch,
        instance_id=instance_id, rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=names, subscribed_topic_regex=regex,
        server_assignor=server_assignor, topic_partitions=tps)


def encode_consumer_group_heartbeat_response_v1(m):
    buf = bytearray(_i32_i16.pack(m.throttle_time_ms, m.error_code))
    _w_nstr(buf, m.error_message)
    _w_nstr(buf, m.member_id)
    buf += _i32_i32.pack(m.member_epoch, m.heartbeat_interval_ms)
    a = m.assignment
    if a is None:
        buf += _NULL_STRUCT
    else:
        buf += _PRESENT_STRUCT
        _w_topic_partitions(buf, a.topic_partitions)
        buf += _NO_TAGS
    buf += _NO_TAGS
    return bytes(buf)



def decode_consumer_group_heartbeat_response_v1(data):
    data = bytes(data)
    throttle, err = _i32_i16.unpack_from(data, 0)
    error_message, pos = _r_nstr(data, 6)
    member_id, pos = _r_nstr(data, pos)
    epoch, interval = _i32_i32.unpack_from(data, pos)
    pos += 8
    (present,) = unpack_i8(data, pos)
    pos += 1
    assignment = None
    if present >= 0:
        tps, pos = _r_topic_partitions(data, pos, P.ConsumerGroupHeartbeatResponseTopicPartitions)
        if tps is None:
            raise ValueError("null array in a non-nullable field")
        pos = _skip_tags(data, pos)
        assignment = P.ConsumerGroupHeartbeatResponseAssignment(topic_partitions=tps)
    pos = _skip_tags(data, pos)
    return P.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=throttle, error_code=err, error_message=error_message,
        member_id=member_id, member_epoch=epoch, heartbeat_interval_ms=interval,
        assignment=assignment)


# ----------------------------------------------- ConnectGroupHeartbeat (API 10000) v0

def encode_connect_group_heartbeat_request_v0(m):
    buf = bytearray()
    _w_str(buf, m.group_id)
    _w_str(buf, m.member_id)
    buf += pack_i32(m.member_epoch)
    _w_nstr(buf, m.instance_id)
    _w_nstr(buf, m.worker_url)
    buf += pack_i32(m.rebalance_timeout_ms)
    _w_nstr(buf, m.server_assignor)
    ca = m.client_assignors
    if ca is None:
        buf += _NULL
    else:
        buf += _uvarint(len(ca) + 1)
        for a in ca:
            _w_str(buf, a.name)
            buf += _i16_i16_b_i16.pack(a.minimum_version, a.maximum_version, a.reason, a.version)
            _w_bytes(buf, a.metadata)
            buf += _NO_TAGS
    cs = m.config_state
    if cs is None:
        buf += _NULL_STRUCT
    else:
        buf += _PRESENT_STRUCT
        buf += pack_i64(cs.config_offset)
        buf += _uvarint(len(cs.connectors) + 1)
        for c in cs.connectors:
            _w_str(buf, c.name)
            buf += pack_i32(c.task_count)
            buf += _NO_TAGS
        buf += _NO_TAGS
    ct = m.owned_connectors_and_tasks
    if ct is None:
        buf += _NULL_STRUCT
    else:
        buf += _PRESENT_STRUCT
        buf += _uvarint(len(ct.connectors) + 1)
        for s in ct.connectors:
            _w_str(buf, s)
        buf += _uvarint(len(ct.tasks) + 1)
        for t in ct.tasks:
            _w_str(buf, t.connector)
            _w_i32_array(buf, t.task_ids)
            buf += _NO_TAGS
        buf += _NO_TAGS
    buf += _NO_TAGS
    return bytes(buf)


def decode_connect_group_heartbeat_request_v0(data):
    data = bytes(data)
    group_id, pos = _r_str(data, 0)
    member_id, pos = _r_str(data, pos)
    (member_epoch,) = unpack_i32(data, pos)
    instance_id, pos = _r_nstr(data, pos + 4)
    worker_url, pos = _r_nstr(data, pos)
    (rebalance_timeout_ms,) = unpack_i32(data, pos)
    server_assignor, pos = _r_nstr(data, pos + 4)
    n, pos = _r_uvarint(data, pos)
    client_assignors = None
    if n:
        client_assignors = []
        for _ in range(n - 1):
            name, pos = _r_str(data, pos)
            lo, hi, reason, ver = _i16_i16_b_i16.unpack_from(data, pos)
            md, pos = _r_bytes(data, pos + 7)
            pos = _skip_tags(data, pos)
            client_assignors.append(P.ConnectGroupHeartbeatRequestAssignor(
                name=name, minimum_version=lo, maximum_version=hi, reason=reason,
                version=ver, metadata=md))
    (present,) = unpack_i8(data, pos)
    pos += 1
    config_state = None
    if present >= 0:
        (offset,) = unpack_i64(data, pos)
        n, pos = _r_uvarint(data, pos + 8)
        conns = []
        for _ in range(n - 1):
            name, pos = _r_str(data, pos)
            (tc,) = unpack_i32(data, pos)
            pos = _skip_tags(data, pos + 4)
            conns.append(P.ConnectGroupHeartbeatRequestConnectorConfig(name=name, task_count=tc))
        pos = _skip_tags(data, pos)
        config_state = P.ConnectGroupHeartbeatRequestConfigState(config_offset=offset,
                                                                  connectors=conns)
    (present,) = unpack_i8(data, pos)
    pos += 1
    owned = None
    if present >= 0:
        connectors, pos = _r_str_array(data, pos)
        n, pos = _r_uvarint(data, pos)
        tasks = []
        for _ in range(n - 1):
            conn, pos = _r_str(data, pos)
            ids, pos = _r_i32_array(data, pos)
            pos = _skip_tags(data, pos)
            tasks.append(P.ConnectGroupHeartbeatRequestConnectorTasks(connector=conn, task_ids=ids))
        pos = _skip_tags(data, pos)
        owned = P.ConnectGroupHeartbeatRequestConnectorsAndTasks(connectors=connectors,
                                                                 tasks=tasks)
    pos = _skip_tags(data, pos)
    return P.ConnectGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=member_epoch,
        instance_id=instance_id, worker_url=worker_url,
        rebalance_timeout_ms=rebalance_timeout_ms, server_assignor=server_assignor,
        client_assignors=client_assignors, config_state=config_state,
        owned_connectors_and_tasks=owned)
