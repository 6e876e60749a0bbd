"""Hostile loads, each run in a child process of its own (hostile_harness.LoadProc):

    python hostile_loads.py CASE HOST PORT '{"param": value, ...}'

The child prints one JSON line {"ready": {...}} once its load is under way, runs until a line
(or EOF) arrives on stdin, stops, and prints {"done": {...}} with what it saw. Cases:

    pipeline-readers     `conns` connections, each pipelining Metadata(all) requests (23-byte
                         frames) in writes of `batch` and reading every answer
    pipeline-nonreaders  `conns` connections writing the same frames as fast as the socket
                         takes them and never reading
    metadata-flood       one connection: `requests` Metadata(all) requests in ONE write, read
                         all answers, again
    commit-1m            one connection: OffsetCommit of `partitions` partitions of one topic
                         (one 18 MB frame), answer read, again
    partial-frames       `conns` connections each sending the size prefix of a `frame_mib`
                         MiB frame and then as much of its first half as the node takes;
                         ready once no connection makes progress; closed at stop
    oversize-names       one connection cycling through oversize_requests() (every string
                         field of every request that writes, far over name.max.bytes)

The oversize request list is shared with tests/hostile/test_hostile_names.py.
"""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import threading
import time

from groupcoord.protocol import decode_response_frame, encode_request_frame, messages as M

MIB = 1 << 20


# ------------------------------------------------------------------------------ frames
def metadata_all_frame(corr: int, version: int = 4, client_id: str = "pipe") -> bytes:
    """Metadata v4 for every topic (null topic list): 23 bytes with client id "pipe"."""
    return encode_request_frame(M.MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                version, corr, client_id)


def _read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 4 << 20))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return bytes(buf)


def read_frame(sock) -> bytes:
    size = struct.unpack(">i", _read_exact(sock, 4))[0]
    return _read_exact(sock, size)


def _connect(host, port, timeout=60.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# ------------------------------------------------------------------------------ loads
class Load:
    def __init__(self, host, port, params):
        self.host, self.port, self.p = host, port, params
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.info = {}
        self.lock = threading.Lock()

    def add(self, key, n=1):
        with self.lock:
            self.info[key] = self.info.get(key, 0) + n

    def note(self, key, value):
        with self.lock:
            self.info.setdefault(key, [])
            if len(self.info[key]) < 20:
                self.info[key].append(value)

    def threads(self, target, n):
        ts = [threading.Thread(target=self._guard(target), args=(i,), daemon=True)
              for i in range(n)]
        for t in ts:
            t.start()
        return ts

    def _guard(self, fn):
        def run(*a):
            try:
                fn(*a)
            except (OSError, ConnectionError) as e:
                self.note("connection_errors", "%s: %s" % (type(e).__name__, e))
            except Exception as e:      # reported in the summary, never swallowed
                self.note("errors", repr(e))
        return run


class PipelineReaders(Load):
    def run(self):
        ts = self.threads(self.reader, int(self.p.get("conns", 2)))
        self.ready.set()
        return ts

    def reader(self, i):
        batch = int(self.p.get("batch", 200))
        frames = b"".join(metadata_all_frame(c + 1) for c in range(batch))
        with _connect(self.host, self.port) as s:
            checked = False
            while not self.stop.is_set():
                s.sendall(frames)
                for k in range(batch):
                    raw = read_frame(s)
                    self.add("answers")
                    self.add("answer_bytes", len(raw) + 4)
                    if not checked:
                        corr, body = decode_response_frame(raw, 3, 4)
                        self.note("topics_per_answer", len(body.topics))
                        checked = True


class PipelineNonReaders(Load):
    def run(self):
        ts = self.threads(self.writer, int(self.p.get("conns", 2)))
        self.ready.set()
        return ts

    def writer(self, i):
        batch = int(self.p.get("batch", 1000))
        frames = b"".join(metadata_all_frame(c + 1) for c in range(batch))
        s = _connect(self.host, self.port)
        s.setblocking(False)
        view, off = memoryview(frames), 0
        try:
            while not self.stop.is_set():
                try:
                    n = s.send(view[off:])
                except BlockingIOError:
                    select.select([], [s], [], 0.05)
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    self.add("closed_by_server")
                    return
                self.add("bytes_sent", n)
                off += n
                if off >= len(frames):
                    off = 0
        finally:
            s.close()


class MetadataFlood(Load):
    def run(self):
        ts = self.threads(self.flood, int(self.p.get("conns", 1)))
        self.ready.set()
        return ts

    def flood(self, i):
        n = int(self.p.get("requests", 8))
        frames = b"".join(metadata_all_frame(c + 1, version=12) for c in range(n))
        with _connect(self.host, self.port, timeout=300) as s:
            while not self.stop.is_set():
                s.sendall(frames)
                for k in range(n):
                    raw = read_frame(s)
                    self.add("answer_bytes", len(raw) + 4)
                    if k == 0:
                        corr, body = decode_response_frame(raw, 3, 12)
                        self.note("topics_per_answer", len(body.topics))
                        self.note("partitions_per_answer",
                                  sum(len(t.partitions) for t in body.topics))
                self.add("rounds")


def commit_1m_request(partitions: int, group: str, topic: str):
    parts = [M.OffsetCommitRequestPartition(partition_index=i, committed_offset=i)
             for i in range(partitions)]
    return M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                 topics=[M.OffsetCommitRequestTopic(name=topic, partitions=parts)])


class Commit1M(Load):
    def run(self):
        ts = self.threads(self.commit, 1)
        self.ready.set()
        return ts

    def commit(self, i):
        n = int(self.p.get("partitions", 1_000_000))
        frame = encode_request_frame(commit_1m_request(n, self.p.get("group", "hostile-commit"),
                                                       self.p.get("topic", "good")), 7, 1,
                                     "commit-1m")
        with _connect(self.host, self.port, timeout=300) as s:
            while not self.stop.is_set():
                t0 = time.monotonic()
                s.sendall(frame)
                corr, body = decode_response_frame(read_frame(s), 8, 7)
                codes = {}
                count = 0
                for t in body.topics:
                    for p in t.partitions:
                        codes[p.error_code] = codes.get(p.error_code, 0) + 1
                        count += 1
                self.note("answers", {"partitions": count, "codes": codes,
                                      "seconds": round(time.monotonic() - t0, 3)})
                self.add("commits")


class PartialFrames(Load):
    """Half frames on `conns` connections; ready once nothing moves for `quiet_s`."""

    def run(self):
        conns = int(self.p.get("conns", 20))
        frame = int(self.p.get("frame_mib", 50)) * MIB
        half = frame // 2
        quiet = float(self.p.get("quiet_s", 1.0))
        deadline = time.monotonic() + float(self.p.get("fill_s", 20.0))
        socks, sent = [], []
        chunk = memoryview(b"\0" * MIB)
        for i in range(conns):
            s = _connect(self.host, self.port)
            s.setblocking(False)
            socks.append(s)
            sent.append(0)
            s.send(struct.pack(">i", frame))
        last_move = time.monotonic()
        closed = set()
        while time.monotonic() < deadline and time.monotonic() - last_move < quiet:
            moved = False
            for i, s in enumerate(socks):
                if i in closed or sent[i] >= half:
                    continue
                try:
                    n = s.send(chunk[:min(len(chunk), half - sent[i])])
                except BlockingIOError:
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    closed.add(i)
                    continue
                sent[i] += n
                moved = True
            if moved:
                last_move = time.monotonic()
            else:
                time.sleep(0.01)
        self.info.update({"bytes_sent": sum(sent), "per_connection": sent,
                          "closed_by_server": len(closed)})
        self.socks = socks
        self.ready.set()
        return []

    def finish(self):
        for s in self.socks:
            s.close()


class OversizeNames(Load):
    def run(self):
        ts = self.threads(self.send, 1)
        self.ready.set()
        return ts

    def send(self, i):
        cases = oversize_requests(int(self.p.get("size", 40_000)))
        corr = 0
        with _connect(self.host, self.port) as s:
            while not self.stop.is_set():
                for c in cases:
                    corr += 1
                    s.sendall(encode_request_frame(c.request, c.version, corr, c.client_id))
                    got, body = decode_response_frame(read_frame(s), c.request.API_KEY,
                                                      c.version)
                    self.add("answers")
                    if -1 in response_codes(body):
                        self.note("unknown_server_error", c.label)


LOADS = {"pipeline-readers": PipelineReaders, "pipeline-nonreaders": PipelineNonReaders,
         "metadata-flood": MetadataFlood, "commit-1m": Commit1M,
         "partial-frames": PartialFrames, "oversize-names": OversizeNames}


# ------------------------------------------------------------------------------ oversize names
class Oversize:
    """One request with one string field far over its bound: `label` names the field,
    `expected` the error codes a clear refusal may carry, `group` the group it aims at."""

    __slots__ = ("label", "request", "version", "client_id", "expected", "group")

    def __init__(self, label, request, version, expected, group, client_id="hostile"):
        self.label, self.request, self.version = label, request, version
        self.expected, self.group, self.client_id = frozenset(expected), group, client_id

    def __repr__(self):
        return "Oversize(%s)" % self.label


# Error codes (Kafka's numbers).
INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION = 24, 25, 22
INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, OFFSET_METADATA_TOO_LARGE = 42, 17, 12
INCONSISTENT_GROUP_PROTOCOL, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS = 23, 82, 27
FENCED_MEMBER_EPOCH = 110
# A field a request only looks up (the member a Heartbeat names): no member has that id, so
# the handler's own "who are you" error is the clear answer.
LOOKUP = (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
          FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS, FENCED_MEMBER_EPOCH, INVALID_REQUEST)

CONSUMER_GROUP = "good-848"          # hostile_harness.GROUP_848
CLASSIC_GROUP = "good-classic"       # hostile_harness.GROUP_CLASSIC
CONNECT_GROUP = "side-connect"       # one legit worker "W1" joins it first (the test)
OFFSETS_GROUP = "side-offsets"       # no members: simple commits (generation -1)
ICA = "incremental-cooperative"


def connect_assignor(name=ICA):
    return M.ConnectGroupHeartbeatRequestAssignor(name=name, minimum_version=0,
                                                  maximum_version=2, version=2)


def connect_join(member, group=CONNECT_GROUP, **kw):
    kw.setdefault("client_assignors", [connect_assignor()])
    kw.setdefault("worker_url", "http://w:8083")
    return M.ConnectGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                          rebalance_timeout_ms=60_000, **kw)


def oversize_requests(size: int = 40_000) -> list:
    """Every string field of every request that writes, `size` characters long (ASCII, so
    bytes), in a request that would otherwise be valid. The client id travels in the
    request header's int16 string: at most 32,767 bytes. Requests aim at the good groups
    where a member-level field is oversize (a ghost member would rebalance them) and at
    fresh group ids where the group id is."""
    big = "x" * size
    cid = "c" * min(size, 32_767)
    fresh = lambda what: "z" * size                       # noqa: E731  (an oversize group id)
    out = []

    # JoinGroup v9 (flexible): the good classic group, a new member.
    def join(**kw):
        base = dict(group_id=CLASSIC_GROUP, session_timeout_ms=6000, rebalance_timeout_ms=10000,
                    member_id="", protocol_type="consumer",
                    protocols=[M.JoinGroupRequestProtocol(name="range", metadata=b"")])
        base.update(kw)
        return M.JoinGroupRequest(**base)
    out += [
        Oversize("JoinGroup.GroupId", join(group_id=fresh("join")), 9, [INVALID_GROUP_ID], None),
        Oversize("JoinGroup.MemberId", join(member_id=big), 9, [INVALID_REQUEST], CLASSIC_GROUP),
        Oversize("JoinGroup.GroupInstanceId", join(group_instance_id=big), 9,
                 [INVALID_REQUEST], CLASSIC_GROUP),
        Oversize("JoinGroup.ProtocolType", join(protocol_type=big), 9,
                 [INVALID_REQUEST], CLASSIC_GROUP),
        Oversize("JoinGroup.Protocols.Name", join(protocols=[M.JoinGroupRequestProtocol(
            name=big, metadata=b"")]), 9, [INVALID_REQUEST], CLASSIC_GROUP),
        Oversize("JoinGroup.ClientId", join(), 9, [INVALID_REQUEST], CLASSIC_GROUP,
                 client_id=cid),
        # The reason is logged, never stored: refused, or a plain first join of a member
        # (MEMBER_ID_REQUIRED, 79) to a group of its own.
        Oversize("JoinGroup.Reason", join(group_id="side-join-reason", reason=big), 9,
                 [INVALID_REQUEST, 79], "side-join-reason"),
    ]
    # SyncGroup v5, Heartbeat v4, LeaveGroup v5: look-ups of a member of the classic group.
    sync = lambda **kw: M.SyncGroupRequest(**{**dict(                          # noqa: E731
        group_id=CLASSIC_GROUP, generation_id=1, member_id="nobody", protocol_type="consumer",
        protocol_name="range", assignments=[]), **kw})
    out += [
        Oversize("SyncGroup.GroupId", sync(group_id=fresh("sync")), 5, [INVALID_GROUP_ID], None),
        Oversize("SyncGroup.MemberId", sync(member_id=big), 5, LOOKUP, CLASSIC_GROUP),
        Oversize("SyncGroup.GroupInstanceId", sync(group_instance_id=big), 5, LOOKUP,
                 CLASSIC_GROUP),
        Oversize("SyncGroup.ProtocolType", sync(protocol_type=big), 5, LOOKUP, CLASSIC_GROUP),
        Oversize("SyncGroup.ProtocolName", sync(protocol_name=big), 5, LOOKUP, CLASSIC_GROUP),
        Oversize("SyncGroup.Assignments.MemberId", sync(assignments=[
            M.SyncGroupRequestAssignment(member_id=big, assignment=b"")]), 5, LOOKUP,
            CLASSIC_GROUP),
    ]
    hb = lambda **kw: M.HeartbeatRequest(**{**dict(                               # noqa: E731
        group_id=CLASSIC_GROUP, generation_id=1, member_id="nobody"), **kw})
    out += [
        Oversize("Heartbeat.GroupId", hb(group_id=fresh("hb")), 4, [INVALID_GROUP_ID], None),
        Oversize("Heartbeat.MemberId", hb(member_id=big), 4, LOOKUP, CLASSIC_GROUP),
        Oversize("Heartbeat.GroupInstanceId", hb(group_instance_id=big), 4, LOOKUP,
                 CLASSIC_GROUP),
    ]
    leave = lambda **kw: M.LeaveGroupRequest(group_id=CLASSIC_GROUP, members=[      # noqa: E731
        M.LeaveGroupRequestMemberIdentity(**{**dict(member_id="nobody"), **kw})])
    out += [
        Oversize("LeaveGroup.GroupId", M.LeaveGroupRequest(group_id=fresh("leave"), members=[
            M.LeaveGroupRequestMemberIdentity(member_id="nobody")]), 5, [INVALID_GROUP_ID],
            None),
        Oversize("LeaveGroup.Members.MemberId", leave(member_id=big), 5, LOOKUP,
                 CLASSIC_GROUP),
        Oversize("LeaveGroup.Members.GroupInstanceId", leave(member_id="",
                                                             group_instance_id=big), 5,
                 LOOKUP, CLASSIC_GROUP),
        Oversize("LeaveGroup.Members.Reason", leave(reason=big), 5, LOOKUP, CLASSIC_GROUP),
    ]
    # OffsetCommit v8 (flexible): simple commits (generation -1) to a group with no members.
    def commit(group=OFFSETS_GROUP, topic="good", metadata="", **kw):
        return M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                     topics=[M.OffsetCommitRequestTopic(name=topic, partitions=[
                                         M.OffsetCommitRequestPartition(
                                             partition_index=0, committed_offset=7,
                                             committed_metadata=metadata)])], **kw)
    out += [
        Oversize("OffsetCommit.GroupId", commit(group=fresh("commit")), 8, [INVALID_GROUP_ID],
                 None),
        Oversize("OffsetCommit.Topics.Name", commit(topic=big), 8, [INVALID_TOPIC_EXCEPTION],
                 OFFSETS_GROUP),
        Oversize("OffsetCommit.Topics.Name(250)", commit(topic="t" * 250), 8,
                 [INVALID_TOPIC_EXCEPTION], OFFSETS_GROUP),
        Oversize("OffsetCommit.CommittedMetadata", commit(metadata="m" * max(size, 4097)), 8,
                 [OFFSET_METADATA_TOO_LARGE], OFFSETS_GROUP),
        # (over offset.metadata.max.bytes, 4096, at any size)
        # A member of the classic group that does not exist: refused as unknown.
        Oversize("OffsetCommit.MemberId", M.OffsetCommitRequest(
            group_id=CLASSIC_GROUP, generation_id_or_member_epoch=1, member_id=big,
            topics=[M.OffsetCommitRequestTopic(name="good", partitions=[
                M.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]), 8,
            LOOKUP, CLASSIC_GROUP),
        Oversize("OffsetCommit.GroupInstanceId", M.OffsetCommitRequest(
            group_id=CLASSIC_GROUP, generation_id_or_member_epoch=1, member_id="nobody",
            group_instance_id=big, topics=[M.OffsetCommitRequestTopic(name="good", partitions=[
                M.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]), 8,
            LOOKUP, CLASSIC_GROUP),
    ]
    # ConsumerGroupHeartbeat v1: a new member of the good KIP-848 group.
    def cgh(**kw):
        base = dict(group_id=CONSUMER_GROUP, member_id="new-member-0001", member_epoch=0,
                    rebalance_timeout_ms=10000, subscribed_topic_names=["good"],
                    topic_partitions=[])
        base.update(kw)
        return M.ConsumerGroupHeartbeatRequest(**base)
    out += [
        Oversize("ConsumerGroupHeartbeat.GroupId", cgh(group_id=fresh("cgh")), 1,
                 [INVALID_GROUP_ID], None),
        Oversize("ConsumerGroupHeartbeat.MemberId", cgh(member_id=big), 1, [INVALID_REQUEST],
                 CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.InstanceId", cgh(instance_id=big), 1,
                 [INVALID_REQUEST], CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.RackId", cgh(rack_id=big), 1, [INVALID_REQUEST],
                 CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.SubscribedTopicNames", cgh(
            subscribed_topic_names=["good", big]), 1, [INVALID_REQUEST], CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.SubscribedTopicRegex", cgh(
            subscribed_topic_names=None, subscribed_topic_regex=big), 1, [INVALID_REQUEST],
            CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.ServerAssignor", cgh(server_assignor=big), 1,
                 [INVALID_REQUEST], CONSUMER_GROUP),
        Oversize("ConsumerGroupHeartbeat.ClientId", cgh(), 1, [INVALID_REQUEST],
                 CONSUMER_GROUP, client_id=cid),
    ]
    # Connect (10000-10002): a second worker of a group whose one worker "W1" is live.
    config = M.ConnectGroupHeartbeatRequestConfigState(
        config_offset=1, connectors=[M.ConnectGroupHeartbeatRequestConnectorConfig(
            name="conn-a", task_count=1)])
    out += [
        Oversize("ConnectGroupHeartbeat.GroupId", connect_join("W2", group=fresh("connect")),
                 0, [INVALID_GROUP_ID], None),
        Oversize("ConnectGroupHeartbeat.MemberId", connect_join(big), 0, [INVALID_REQUEST],
                 CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.InstanceId", connect_join("W2", instance_id=big), 0,
                 [INVALID_REQUEST], CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.WorkerUrl", connect_join("W2", worker_url=big), 0,
                 [INVALID_REQUEST], CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.ServerAssignor", connect_join(
            "W2", server_assignor=big, client_assignors=None), 0, [INVALID_REQUEST],
            CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.ClientAssignors.Name", connect_join(
            "W2", client_assignors=[connect_assignor(big)]), 0, [INVALID_REQUEST],
            CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.ConfigState.Connectors.Name", connect_join(
            "W2", config_state=M.ConnectGroupHeartbeatRequestConfigState(
                config_offset=2, connectors=[M.ConnectGroupHeartbeatRequestConnectorConfig(
                    name=big, task_count=1)])), 0, [INVALID_REQUEST], CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.OwnedConnectorsAndTasks.Connectors", connect_join(
            "W2", config_state=config,
            owned_connectors_and_tasks=M.ConnectGroupHeartbeatRequestConnectorsAndTasks(
                connectors=[big], tasks=[])), 0, [INVALID_REQUEST], CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.OwnedConnectorsAndTasks.Tasks.Connector", connect_join(
            "W2", config_state=config,
            owned_connectors_and_tasks=M.ConnectGroupHeartbeatRequestConnectorsAndTasks(
                connectors=[], tasks=[M.ConnectGroupHeartbeatRequestConnectorTasks(
                    connector=big, task_ids=[0])])), 0, [INVALID_REQUEST], CONNECT_GROUP),
        Oversize("ConnectGroupHeartbeat.ClientId", connect_join("W2"), 0, [INVALID_REQUEST],
                 CONNECT_GROUP, client_id=cid),
        Oversize("ConnectGroupPrepareAssignment.GroupId", M.ConnectGroupPrepareAssignmentRequest(
            group_id=fresh("prepare"), member_id="W1"), 0, [INVALID_GROUP_ID], None),
        Oversize("ConnectGroupPrepareAssignment.MemberId", M.ConnectGroupPrepareAssignmentRequest(
            group_id=CONNECT_GROUP, member_id=big), 0, LOOKUP, CONNECT_GROUP),
    ]

    def install(**kw):
        base = dict(group_id=CONNECT_GROUP, member_id="W1", member_epoch=1, group_epoch=1,
                    members=[])
        base.update(kw)
        return M.ConnectGroupInstallAssignmentRequest(**base)
    out += [
        Oversize("ConnectGroupInstallAssignment.GroupId", install(group_id=fresh("install")), 0,
                 [INVALID_GROUP_ID], None),
        Oversize("ConnectGroupInstallAssignment.MemberId", install(member_id=big), 0, LOOKUP,
                 CONNECT_GROUP),
        Oversize("ConnectGroupInstallAssignment.Members.MemberId", install(members=[
            M.ConnectGroupInstallAssignmentRequestMember(member_id=big)]), 0, LOOKUP,
            CONNECT_GROUP),
        Oversize("ConnectGroupInstallAssignment.Members.Connectors", install(members=[
            M.ConnectGroupInstallAssignmentRequestMember(
                member_id="W1", connectors_and_tasks=(
                    M.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                        connectors=[big], tasks=[])))]), 0, LOOKUP, CONNECT_GROUP),
        Oversize("ConnectGroupInstallAssignment.Members.Tasks.Connector", install(members=[
            M.ConnectGroupInstallAssignmentRequestMember(
                member_id="W1", connectors_and_tasks=(
                    M.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                        connectors=[], tasks=[
                            M.ConnectGroupInstallAssignmentRequestConnectorTasks(
                                connector=big, task_ids=[0])])))]), 0, LOOKUP,
            CONNECT_GROUP),
    ]
    return out


def response_codes(body) -> list:
    """The error codes that answer a request: per partition (OffsetCommit), per member where
    the top level says 0 (LeaveGroup v3+, as Kafka answers a batch of members), else the
    top-level code."""
    parts = [p.error_code for t in getattr(body, "topics", None) or ()
             for p in getattr(t, "partitions", None) or ()]
    if parts:
        return parts
    top = getattr(body, "error_code", None)
    members = [m.error_code for m in getattr(body, "members", None) or ()
               if hasattr(m, "error_code")]
    if top == 0 and members:
        return members
    return [] if top is None else [top]


# ------------------------------------------------------------------------------ main
def main(argv):
    case, host, port, params = argv[1], argv[2], int(argv[3]), json.loads(argv[4])
    load = LOADS[case](host, port, params)
    t0 = time.monotonic()
    threads = load.run()
    load.ready.wait()
    print(json.dumps({"ready": load.info}), flush=True)
    sys.stdin.readline()                # "stop" or EOF
    load.stop.set()
    for t in threads:
        t.join(float(params.get("join_s", 10.0)))
    if hasattr(load, "finish"):
        load.finish()
    load.info["seconds"] = round(time.monotonic() - t0, 3)
    load.info["stuck_threads"] = sum(t.is_alive() for t in threads)
    print(json.dumps({"done": load.info}), flush=True)
    os._exit(0)                         # threads blocked on a socket must not hold the exit


if __name__ == "__main__":
    main(sys.argv)
