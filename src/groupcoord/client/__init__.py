"""groupcoord member SDK: asyncio clients that join groups on a groupcoord (or Kafka) node.

    from groupcoord.client import Connection, find_coordinator, ConnectWorker

Layers: connection (bytes, correlation ids, versions, retries) -> member state machines ->
asyncio drivers -> this public API. One import line per module below.
"""
from groupcoord.client.errors import *  # noqa: F401,F403
from groupcoord.client.connection import Connection, find_coordinator, Backoff, CoordinatorLink, negotiate_versions  # noqa: F401
from groupcoord.client.security import ClientSecurity, load_properties  # noqa: F401
from groupcoord.client.connect_worker import ConnectWorker, WorkerRebalanceListener, TaskId, AssignorSpec  # noqa: F401
from groupcoord.client.members_common import TopicPartition, CommitFailed  # noqa: F401
from groupcoord.client.consumer_member import ConsumerMember  # noqa: F401
from groupcoord.client.classic_member import ClassicMember  # noqa: F401
from groupcoord.client.members_classic_protocol import ConsumerProtocol, CustomProtocol, ClassicAssignment  # noqa: F401
