"""GroupAdmin: what `groupcoord groups` asks a cluster, over the SDK's Connection
(client/connection.py), routed the way Kafka's admin client routes it.

    admin = GroupAdmin([("127.0.0.1", 9092)], timeout_s=30)   # security=ClientSecurity(...)
    groups = await admin.list_groups(types={"consumer"}, states={"stable"})  # [ListedGroup]
    d = await admin.describe_group("g")            # GroupDescription; ResponseError if none
    committed = await admin.committed_offsets("g")                 # {(topic, p): offset}
    ends = await admin.list_offsets(list(committed), LATEST)       # {(topic, p): int | error}
    errors = await admin.commit_offsets("g", {("t", 0): 5})        # {(topic, p): code != 0}
    await admin.delete_group("g")
    await admin.close()

Routing:
  * Metadata and FindCoordinator go to the first bootstrap address that accepts a connection
    (none does: Unreachable at once, no retry);
  * ListGroups goes to every broker Metadata names (each lists the groups it coordinates) and
    the answers are merged;
  * the group APIs go to the group's coordinator. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
    COORDINATOR_LOAD_IN_PROGRESS or a lost connection: find it again and retry (the SDK's
    Backoff) until the deadline;
  * ListOffsets goes to each partition's leader.
Every request and retry is bounded by one deadline: `timeout_s` from construction. Every
connection is opened with `security` (client/security.py: TLS, SASL), the brokers and
coordinators Metadata and FindCoordinator name included (a node answers with the addresses
of the listener the request came in on).

Versions are the ones each Connection negotiated (ApiVersions). What an older broker lacks
is made up for:
  ListGroups < v5 (no TypesFilter / GroupType): each listed group's type is learnt from
    ConsumerGroupDescribe, then ConnectGroupDescribe, where the broker has them (answered
    without error: that type); the rest are classic (a broker without those APIs has only
    classic groups). The type filter is then applied here.
  ListGroups < v4 (no StatesFilter / GroupState): the states come from DescribeGroups.
  describe: ConsumerGroupDescribe -> ConnectGroupDescribe -> DescribeGroups, each only if the
    broker has it, the next asked when one says GROUP_ID_NOT_FOUND (Kafka 4's admin client
    does the first and the last). DescribeGroups v0-5 answer an unknown group "Dead" without
    an error: GROUP_ID_NOT_FOUND here too.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, NamedTuple, Optional, TypeVar

from groupcoord.client.connection import Backoff, Connection
from groupcoord.client.errors import (ClientError, ConnectionClosed, RequestTimeout,
                                      ResponseError, UnsupportedApi)
from groupcoord.client.security import ClientSecurity
from groupcoord.protocol import ProtocolError
from groupcoord.protocol import messages as m
from groupcoord.protocol.embedded import decode_assignment
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["GroupAdmin", "ListedGroup", "Member", "GroupDescription", "Broker", "Unreachable",
           "LATEST", "EARLIEST", "GROUP_TYPES"]

LATEST, EARLIEST = -1, -2            # ListOffsets timestamps
GROUP_TYPES = ("classic", "consumer", "connect")
CLIENT_ID = "groupcoord-groups"
_RETRY = frozenset({int(E.NOT_COORDINATOR), int(E.COORDINATOR_NOT_AVAILABLE),
                    int(E.COORDINATOR_LOAD_IN_PROGRESS)})
_CONSUMER_DESCRIBE = m.ConsumerGroupDescribeRequest.API_KEY
_CONNECT_DESCRIBE = m.ConnectGroupDescribeRequest.API_KEY
T = TypeVar("T")


class Unreachable(ClientError):
    """No bootstrap address accepted a connection."""


class Broker(NamedTuple):
    node_id: int
    host: str
    port: int


@dataclass
class ListedGroup:
    group_id: str
    type: Optional[str]          # classic | consumer | connect (ListGroups v5's GroupType)
    state: Optional[str]
    protocol_type: str


@dataclass
class Member:
    member_id: str
    instance_id: Optional[str]
    client_id: str
    host: str
    member_epoch: Optional[int] = None          # consumer and connect groups
    partitions: dict = field(default_factory=dict)          # {topic: [partition]}, owned
    target_partitions: Optional[dict] = None                # consumer groups
    connectors: list = field(default_factory=list)          # connect groups: owned work
    tasks: dict = field(default_factory=dict)               # {connector: [task id]}
    target_connectors: Optional[list] = None
    target_tasks: Optional[dict] = None
    worker_url: Optional[str] = None


@dataclass
class GroupDescription:
    group_id: str
    type: str                     # classic | consumer | connect
    state: str
    protocol_type: str
    assignor: str                 # classic: the chosen protocol; else the assignor's name
    coordinator: Broker
    members: list
    group_epoch: Optional[int] = None
    assignment_epoch: Optional[int] = None


@dataclass
class Metadata:
    brokers: dict                 # {node id: Broker}
    leaders: dict                 # {topic: {partition: leader node id}}
    topic_errors: dict            # {topic: error code}


class GroupAdmin:
    """One command's connections (pooled by address) and deadline. Override `_open` to change
    how a connection is made."""

    def __init__(self, bootstrap: list, client_id: str = CLIENT_ID, timeout_s: float = 30.0,
                 connect_timeout_s: float = 5.0, security: Optional[ClientSecurity] = None):
        self.bootstrap = [(h, int(p)) for h, p in bootstrap]     # [(host, port)]
        self.client_id = client_id
        self.security = security
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.deadline = time.monotonic() + timeout_s
        self._pool: dict = {}                    # (host, port) -> Connection
        self._coordinators: dict = {}            # group -> (Connection, Broker)
        self._closing: set = set()               # close() of dropped connections, awaited last

    # -- connections -----------------------------------------------------------------------
    def _left(self) -> float:
        return self.deadline - time.monotonic()

    async def _open(self, host: str, port: int) -> Connection:
        return await Connection.open(host, port, self.client_id,
                                     timeout_s=max(0.05, min(self.connect_timeout_s,
                                                             self._left())),
                                     request_timeout_s=None, security=self.security)

    async def _conn(self, host: str, port: int) -> Connection:
        c = self._pool.get((host, port))
        if c is None or c.closed:
            c = self._pool[(host, port)] = await self._open(host, port)
        return c

    def _drop(self, conn: Connection) -> None:
        for key, c in list(self._pool.items()):
            if c is conn:
                del self._pool[key]
        if not conn.closed:
            task = asyncio.ensure_future(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _bootstrap(self) -> Connection:
        last: Optional[BaseException] = None
        for host, port in self.bootstrap:
            try:
                return await self._conn(host, port)
            except (ConnectionClosed, RequestTimeout, UnsupportedApi) as e:
                last = e
        raise Unreachable("no bootstrap server answered (%s): %s"
                          % (", ".join("%s:%d" % a for a in self.bootstrap), last))

    async def _req(self, conn: Connection, req, version: Optional[int] = None):
        left = self._left()
        if left <= 0:
            raise RequestTimeout("%s to %s: the command's %.1f s deadline has passed"
                                 % (type(req).__name__, conn.address, self.timeout_s))
        return await conn.request(req, version, timeout_s=left)

    async def close(self) -> None:
        conns, self._pool = list(self._pool.values()), {}
        self._coordinators.clear()
        await asyncio.gather(*(c.close() for c in conns), *self._closing,
                             return_exceptions=True)

    async def _retrying(self, attempt: Callable[[], Awaitable[T]],
                        forget: Callable[[], None]) -> T:
        """attempt() until it returns, raises something not retriable, or the deadline
        passes (then its last error). `forget` runs before each retry."""
        backoff = Backoff(initial_s=0.05, max_s=1.0)
        while True:
            try:
                return await attempt()
            except ResponseError as e:
                if int(e.code) not in _RETRY:
                    raise
                last: BaseException = e
            except (ConnectionClosed, RequestTimeout) as e:
                last = e
            forget()
            left = self._left()
            if left <= backoff.initial_s:
                raise last
            await asyncio.sleep(min(backoff.next_delay(), left))

    # -- Metadata, FindCoordinator ---------------------------------------------------------
    async def metadata(self, topics: Optional[list] = None) -> Metadata:
        """Brokers, and the leaders of `topics` (None: every topic; []: none)."""
        conn = await self._bootstrap()
        v = conn.version(m.MetadataRequest.API_KEY)
        if topics is None:
            want = None if v >= 1 else []       # v0: an empty list means every topic
        else:
            want = [m.MetadataRequestTopic(name=t) for t in topics]
        resp = await self._req(conn, m.MetadataRequest(topics=want,
                                                       allow_auto_topic_creation=False), v)
        if resp.error_code:
            raise ResponseError(resp.error_code, None)
        md = Metadata({b.node_id: Broker(b.node_id, b.host, b.port) for b in resp.brokers},
                      {}, {})
        for t in resp.topics:
            if t.error_code:
                md.topic_errors[t.name] = t.error_code
            else:
                md.leaders[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        return md

    async def _find(self, group: str) -> tuple:
        conn = await self._bootstrap()
        v = conn.version(m.FindCoordinatorRequest.API_KEY)
        if v >= 4:
            resp = await self._req(conn, m.FindCoordinatorRequest(
                key_type=0, coordinator_keys=[group]), v)
            if resp.error_code:
                raise ResponseError(resp.error_code, resp.error_message or None)
            c = next((c for c in resp.coordinators if c.key == group), None)
            if c is None:
                raise ResponseError(E.COORDINATOR_NOT_AVAILABLE, "no answer for the group")
            code, msg, coord = c.error_code, c.error_message, Broker(c.node_id, c.host, c.port)
        else:
            resp = await self._req(conn, m.FindCoordinatorRequest(key=group, key_type=0), v)
            code, msg = resp.error_code, resp.error_message
            coord = Broker(resp.node_id, resp.host, resp.port)
        if code:
            raise ResponseError(code, msg or None)
        return await self._conn(coord.host, coord.port), coord

    async def _on_coordinator(self, group: str,
                              call: Callable[[Connection, Broker], Awaitable[T]]) -> T:
        state = {}

        async def attempt():
            found = self._coordinators.get(group)
            if found is None or found[0].closed:
                found = self._coordinators[group] = await self._find(group)
            state["conn"] = found[0]
            return await call(*found)

        def forget():
            self._coordinators.pop(group, None)
            if "conn" in state:
                self._drop(state.pop("conn"))

        return await self._retrying(attempt, forget)

    # -- ListGroups ------------------------------------------------------------------------
    async def list_groups(self, types=(), states=()) -> list:
        """Every group of every broker, sorted by id, filtered by type and state (lower-case
        names; empty: no filter)."""
        types = {t.lower() for t in types}
        states = {s.strip().lower() for s in states}
        md = await self.metadata([])
        brokers = sorted(md.brokers.values()) or [Broker(-1, *self.bootstrap[0])]
        merged: dict = {}
        for b in brokers:
            async def attempt(b=b):
                return await self._list_on(await self._conn(b.host, b.port), types, states)

            def forget(b=b):
                c = self._pool.get((b.host, b.port))
                if c is not None:
                    self._drop(c)

            for g in await self._retrying(attempt, forget):
                merged.setdefault(g.group_id, g)
        return [g for _, g in sorted(merged.items())
                if (not types or g.type in types)
                and (not states or (g.state or "").lower() in states)]

    async def _list_on(self, conn: Connection, types: set, states: set) -> list:
        v = conn.version(m.ListGroupsRequest.API_KEY)
        req = m.ListGroupsRequest(states_filter=sorted(states) if v >= 4 else [],
                                  types_filter=sorted(types) if v >= 5 else [])
        resp = await self._req(conn, req, v)
        if resp.error_code:
            raise ResponseError(resp.error_code, None)
        groups = [ListedGroup(g.group_id,
                              ((g.group_type or "").lower() or None) if v >= 5 else None,
                              (g.group_state or None) if v >= 4 else None, g.protocol_type)
                  for g in resp.groups]
        if any(g.type is None for g in groups):
            await self._learn_types(conn, [g for g in groups if g.type is None])
        if any(g.state is None for g in groups):
            await self._learn_states(conn, [g for g in groups if g.state is None])
        return groups

    async def _learn_types(self, conn: Connection, groups: list) -> None:
        left = {g.group_id: g for g in groups}
        for api, cls, typ in ((_CONSUMER_DESCRIBE, m.ConsumerGroupDescribeRequest, "consumer"),
                              (_CONNECT_DESCRIBE, m.ConnectGroupDescribeRequest, "connect")):
            if not left or not conn.supports(api):
                continue
            resp = await self._req(conn, cls(group_ids=sorted(left)))
            for d in resp.groups:
                if d.group_id not in left or d.error_code == E.GROUP_ID_NOT_FOUND:
                    continue
                g = left.pop(d.group_id)
                if not d.error_code:
                    g.type = typ
                    g.state = g.state or d.group_state
                # else (e.g. not authorized to describe it): its type stays unknown
        for g in left.values():
            g.type = "classic"

    async def _learn_states(self, conn: Connection, groups: list) -> None:
        by_id = {g.group_id: g for g in groups}
        resp = await self._req(conn, m.DescribeGroupsRequest(groups=sorted(by_id)))
        for d in resp.groups:
            if d.group_id in by_id and not d.error_code:
                by_id[d.group_id].state = d.group_state

    # -- describe --------------------------------------------------------------------------
    async def describe_group(self, group: str) -> GroupDescription:
        """ResponseError(GROUP_ID_NOT_FOUND) when there is no such group."""
        async def call(conn: Connection, coord: Broker):
            if conn.supports(_CONSUMER_DESCRIBE):
                resp = await self._req(conn, m.ConsumerGroupDescribeRequest(group_ids=[group]))
                d = _only(resp.groups, group)
                if not d.error_code:
                    return _consumer(d, coord)
                if d.error_code != E.GROUP_ID_NOT_FOUND:
                    raise ResponseError(d.error_code, d.error_message)
            if conn.supports(_CONNECT_DESCRIBE):
                resp = await self._req(conn, m.ConnectGroupDescribeRequest(group_ids=[group]))
                d = _only(resp.groups, group)
                if not d.error_code:
                    return _connect(d, coord)
                if d.error_code != E.GROUP_ID_NOT_FOUND:
                    raise ResponseError(d.error_code, d.error_message)
            v = conn.version(m.DescribeGroupsRequest.API_KEY)
            resp = await self._req(conn, m.DescribeGroupsRequest(groups=[group]), v)
            d = _only(resp.groups, group)
            if d.error_code:
                raise ResponseError(d.error_code, d.error_message if v >= 6 else None)
            if d.group_state == "Dead":
                raise ResponseError(E.GROUP_ID_NOT_FOUND, "Group %s not found." % group)
            return _classic(d, coord)

        return await self._on_coordinator(group, call)

    # -- offsets ---------------------------------------------------------------------------
    async def committed_offsets(self, group: str) -> dict:
        """{(topic, partition): committed offset} (partitions without one are left out)."""
        async def call(conn: Connection, coord: Broker):
            v = conn.version(m.OffsetFetchRequest.API_KEY)
            if v >= 8:
                req = m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(
                    group_id=group, topics=None)])
            else:
                req = m.OffsetFetchRequest(group_id=group, topics=None)
            resp = await self._req(conn, req, v)
            if v >= 8:
                g = _only(resp.groups, group)
                code, topics = g.error_code, g.topics
            else:
                code, topics = resp.error_code, resp.topics
            if code:
                raise ResponseError(code, None)
            return {(t.name, p.partition_index): p.committed_offset
                    for t in topics for p in t.partitions
                    if not p.error_code and p.committed_offset >= 0}

        return await self._on_coordinator(group, call)

    async def list_offsets(self, partitions, timestamp: int = LATEST) -> dict:
        """{(topic, partition): offset, or the ResponseError its leader (or Metadata)
        answered}, asked of each partition's leader."""
        partitions = sorted(set(partitions))
        out: dict = {}
        if not partitions:
            return out
        md = await self.metadata(sorted({t for t, _ in partitions}))
        by_leader: dict = {}
        for t, p in partitions:
            leaders = md.leaders.get(t)
            if leaders is None or p not in leaders:
                code = md.topic_errors.get(t, E.UNKNOWN_TOPIC_OR_PARTITION)
                out[(t, p)] = ResponseError(code, None)
            elif leaders[p] not in md.brokers:
                out[(t, p)] = ResponseError(E.LEADER_NOT_AVAILABLE, None)
            else:
                by_leader.setdefault(md.brokers[leaders[p]], []).append((t, p))
        for b, tps in sorted(by_leader.items()):
            conn = await self._conn(b.host, b.port)
            topics: dict = {}
            for t, p in tps:
                topics.setdefault(t, []).append(m.ListOffsetsRequestListOffsetsPartition(
                    partition_index=p, timestamp=timestamp))
            resp = await self._req(conn, m.ListOffsetsRequest(
                replica_id=-1, isolation_level=0,   # a consumer's view, READ_UNCOMMITTED
                topics=[m.ListOffsetsRequestListOffsetsTopic(name=t, partitions=ps)
                        for t, ps in topics.items()]))
            for rt in resp.topics:
                for rp in rt.partitions:
                    out[(rt.name, rp.partition_index)] = (
                        ResponseError(rp.error_code, None) if rp.error_code else rp.offset)
        for tp in partitions:
            out.setdefault(tp, ResponseError(E.UNKNOWN_SERVER_ERROR, "no answer"))
        return out

    async def commit_offsets(self, group: str, offsets: dict) -> dict:
        """OffsetCommit as an admin tool (generation -1, no member id): accepted by a group
        without members only. -> {(topic, partition): error code} for the refused ones."""
        topics: dict = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append(m.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_metadata=""))
        req = m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                    member_id="", group_instance_id=None, topics=[
                                        m.OffsetCommitRequestTopic(name=t, partitions=ps)
                                        for t, ps in topics.items()])

        async def call(conn: Connection, coord: Broker):
            resp = await self._req(conn, req)
            errors = {(t.name, p.partition_index): p.error_code
                      for t in resp.topics for p in t.partitions if p.error_code}
            moving = [c for c in errors.values() if c in _RETRY]
            if moving:      # the coordinator moved: commit everything again (idempotent)
                raise ResponseError(moving[0], None)
            return errors

        return await self._on_coordinator(group, call)

    # -- DeleteGroups ----------------------------------------------------------------------
    async def delete_group(self, group: str) -> None:
        async def call(conn: Connection, coord: Broker):
            resp = await self._req(conn, m.DeleteGroupsRequest(groups_names=[group]))
            r = next((r for r in resp.results if r.group_id == group), None)
            if r is None:
                raise ResponseError(E.UNKNOWN_SERVER_ERROR, "no result for the group")
            if r.error_code:
                raise ResponseError(r.error_code, None)

        await self._on_coordinator(group, call)


# -- responses -> GroupDescription ---------------------------------------------------------
def _only(described: list, group: str):
    for d in described:
        if d.group_id == group:
            return d
    raise ResponseError(E.UNKNOWN_SERVER_ERROR, "the answer does not name group %r" % group)


def _partitions(assignment) -> dict:
    out: dict = {}
    for tp in assignment.topic_partitions:
        out.setdefault(tp.topic_name, []).extend(tp.partitions)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def _consumer(d, coord: Broker) -> GroupDescription:
    members = [Member(x.member_id, x.instance_id, x.client_id, x.client_host,
                      member_epoch=x.member_epoch, partitions=_partitions(x.assignment),
                      target_partitions=_partitions(x.target_assignment))
               for x in d.members]
    return GroupDescription(d.group_id, "consumer", d.group_state, "consumer", d.assignor_name,
                            coord, members, d.group_epoch, d.assignment_epoch)


def _work(a) -> tuple:
    return sorted(a.connectors), {t.connector: sorted(t.task_ids) for t in a.tasks}


def _connect(d, coord: Broker) -> GroupDescription:
    members = []
    for x in d.members:
        conns, tasks = _work(x.assignment)
        tconns, ttasks = _work(x.target_assignment)
        members.append(Member(x.member_id, x.instance_id, x.client_id, x.client_host,
                              member_epoch=x.member_epoch, connectors=conns, tasks=tasks,
                              target_connectors=tconns, target_tasks=ttasks,
                              worker_url=x.worker_url))
    return GroupDescription(d.group_id, "connect", d.group_state, "connect", d.assignor_name,
                            coord, members, d.group_epoch, d.assignment_epoch)


def _classic(d, coord: Broker) -> GroupDescription:
    # A consumer-protocol member's assignment bytes are a ConsumerProtocolAssignment (empty
    # until the group is Stable); other protocol types' bytes mean nothing here.
    consumer = d.protocol_type in ("consumer", "")
    members = []
    for x in d.members:
        parts: dict = {}
        if consumer and x.member_assignment:
            try:
                _, a = decode_assignment(x.member_assignment)
                for tp in a.assigned_partitions:
                    parts.setdefault(tp.topic, []).extend(tp.partitions)
            except ProtocolError:
                parts = {}
        members.append(Member(x.member_id, x.group_instance_id, x.client_id, x.client_host,
                              partitions={t: sorted(ps) for t, ps in sorted(parts.items())}))
    return GroupDescription(d.group_id, "classic", d.group_state, d.protocol_type,
                            d.protocol_data, coord, members)
