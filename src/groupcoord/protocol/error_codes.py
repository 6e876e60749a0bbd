"""Kafka protocol error codes (Kafka's numbers, -1 through 133 as of Kafka 4.x) plus our two
connect-group codes.

Each member carries `retriable` (True exactly when Kafka's Java client maps the code to a
subclass of `RetriableException`, directly or through `InvalidMetadataException`) and a one-line
`message`.

    >>> ErrorCode.NOT_COORDINATOR.retriable
    True
    >>> error_name(16), error_name(9999)
    ('NOT_COORDINATOR', 'UNKNOWN_CODE_9999')

Stdlib only.
"""
from __future__ import annotations

import enum

_R = True    # retriable
_F = False   # not retriable


@enum.unique
class ErrorCode(enum.IntEnum):
    """A Kafka error code; `.retriable` and `.message` describe it."""

    retriable: bool
    message: str

    def __new__(cls, code: int, retriable: bool, message: str):
        obj = int.__new__(cls, code)
        obj._value_ = code
        obj.retriable = retriable
        obj.message = message
        return obj

    UNKNOWN_SERVER_ERROR = (-1, _F, "The server experienced an unexpected error when processing the request.")
    NONE = (0, _F, "No error.")
    OFFSET_OUT_OF_RANGE = (1, _F, "The requested offset is not within the range of offsets maintained by the server.")
    CORRUPT_MESSAGE = (2, _R, "This message has failed its CRC checksum, exceeds the valid size, or is otherwise corrupt.")
    UNKNOWN_TOPIC_OR_PARTITION = (3, _R, "This server does not host this topic-partition.")
    INVALID_FETCH_SIZE = (4, _F, "The requested fetch size is invalid.")
    LEADER_NOT_AVAILABLE = (5, _R, "There is no leader for this topic-partition as we are in the middle of a leadership election.")
    NOT_LEADER_OR_FOLLOWER = (6, _R, "This broker is not the leader (or not a replica) of the topic-partition.")
    REQUEST_TIMED_OUT = (7, _R, "The request timed out.")
    BROKER_NOT_AVAILABLE = (8, _F, "The broker is not available.")
    REPLICA_NOT_AVAILABLE = (9, _R, "The replica is not available for the requested topic-partition.")
    MESSAGE_TOO_LARGE = (10, _F, "The request included a message larger than the max message size the server will accept.")
    STALE_CONTROLLER_EPOCH = (11, _F, "The controller moved to another broker.")
    OFFSET_METADATA_TOO_LARGE = (12, _F, "The metadata field of the offset request was too large.")
    NETWORK_EXCEPTION = (13, _R, "The server disconnected before a response was received.")
    COORDINATOR_LOAD_IN_PROGRESS = (14, _R, "The coordinator is loading and hence can't process requests.")
    COORDINATOR_NOT_AVAILABLE = (15, _R, "The coordinator is not available.")
    NOT_COORDINATOR = (16, _R, "This is not the correct coordinator.")
    INVALID_TOPIC_EXCEPTION = (17, _F, "The request attempted to perform an operation on an invalid topic.")
    RECORD_LIST_TOO_LARGE = (18, _F, "The request included a message batch larger than the configured segment size on the server.")
    NOT_ENOUGH_REPLICAS = (19, _R, "Messages are rejected since there are fewer in-sync replicas than required.")
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, _R, "Messages are written to the log, but to fewer in-sync replicas than required.")
    INVALID_REQUIRED_ACKS = (21, _F, "Produce request specified an invalid value for required acks.")
    ILLEGAL_GENERATION = (22, _F, "Specified group generation id is not valid.")
    INCONSISTENT_GROUP_PROTOCOL = (23, _F, "The group member's supported protocols are incompatible with those of existing members.")
    INVALID_GROUP_ID = (24, _F, "The group id is invalid.")
    UNKNOWN_MEMBER_ID = (25, _F, "The coordinator is not aware of this member.")
    INVALID_SESSION_TIMEOUT = (26, _F, "The session timeout is not within the range allowed by the broker.")
    # Not a RetriableException in Kafka (RebalanceInProgressException extends ApiException):
    # the member must rejoin, not resend the same request.
    REBALANCE_IN_PROGRESS = (27, _F, "The group is rebalancing, so a rejoin is needed.")
    INVALID_COMMIT_OFFSET_SIZE = (28, _F, "The committing offset data size is not valid.")
    TOPIC_AUTHORIZATION_FAILED = (29, _F, "Topic authorization failed.")
    GROUP_AUTHORIZATION_FAILED = (30, _F, "Group authorization failed.")
    CLUSTER_AUTHORIZATION_FAILED = (31, _F, "Cluster authorization failed.")
    INVALID_TIMESTAMP = (32, _F, "The timestamp of the message is out of acceptable range.")
    UNSUPPORTED_SASL_MECHANISM = (33, _F, "The broker does not support the requested SASL mechanism.")
    ILLEGAL_SASL_STATE = (34, _F, "Request is not valid given the current SASL state.")
    UNSUPPORTED_VERSION = (35, _F, "The version of API is not supported.")
    TOPIC_ALREADY_EXISTS = (36, _F, "Topic with this name already exists.")
    INVALID_PARTITIONS = (37, _F, "Number of partitions is below 1.")
    INVALID_REPLICATION_FACTOR = (38, _F, "Replication factor is below 1 or larger than the number of available brokers.")
    INVALID_REPLICA_ASSIGNMENT = (39, _F, "Replica assignment is invalid.")
    INVALID_CONFIG = (40, _F, "Configuration is invalid.")
    NOT_CONTROLLER = (41, _R, "This is not the correct controller for this cluster.")
    INVALID_REQUEST = (42, _F, "The request is malformed or was sent to an incompatible broker.")
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, _F, "The message format version on the broker does not support the request.")
    POLICY_VIOLATION = (44, _F, "Request parameters do not satisfy the configured policy.")
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, _F, "The broker received an out of order sequence number.")
    DUPLICATE_SEQUENCE_NUMBER = (46, _F, "The broker received a duplicate sequence number.")
    INVALID_PRODUCER_EPOCH = (47, _F, "Producer attempted to produce with an old epoch.")
    INVALID_TXN_STATE = (48, _F, "The producer attempted a transactional operation in an invalid state.")
    INVALID_PRODUCER_ID_MAPPING = (49, _F, "The producer id is not currently assigned to its transactional id.")
    INVALID_TRANSACTION_TIMEOUT = (50, _F, "The transaction timeout is larger than the maximum value allowed by the broker.")
    CONCURRENT_TRANSACTIONS = (51, _R, "Another concurrent operation on the same transaction is ongoing.")
    TRANSACTION_COORDINATOR_FENCED = (52, _F, "The transaction coordinator sending a WriteTxnMarker is no longer the current coordinator.")
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, _F, "Transactional Id authorization failed.")
    SECURITY_DISABLED = (54, _F, "Security features are disabled.")
    OPERATION_NOT_ATTEMPTED = (55, _F, "The broker did not attempt to execute this operation.")
    KAFKA_STORAGE_ERROR = (56, _R, "Disk error when trying to access log file on the disk.")
    LOG_DIR_NOT_FOUND = (57, _F, "The user-specified log directory is not found in the broker config.")
    SASL_AUTHENTICATION_FAILED = (58, _F, "SASL Authentication failed.")
    UNKNOWN_PRODUCER_ID = (59, _F, "The broker could not locate the producer metadata for this producer id.")
    REASSIGNMENT_IN_PROGRESS = (60, _F, "A partition reassignment is in progress.")
    DELEGATION_TOKEN_AUTH_DISABLED = (61, _F, "Delegation Token feature is not enabled.")
    DELEGATION_TOKEN_NOT_FOUND = (62, _F, "Delegation Token is not found on server.")
    DELEGATION_TOKEN_OWNER_MISMATCH = (63, _F, "Specified Principal is not valid Owner/Renewer.")
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = (64, _F, "Delegation Token requests are not allowed on this channel.")
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = (65, _F, "Delegation Token authorization failed.")
    DELEGATION_TOKEN_EXPIRED = (66, _F, "Delegation Token is expired.")
    INVALID_PRINCIPAL_TYPE = (67, _F, "Supplied principalType is not supported.")
    NON_EMPTY_GROUP = (68, _F, "The group is not empty.")
    GROUP_ID_NOT_FOUND = (69, _F, "The group id does not exist.")
    FETCH_SESSION_ID_NOT_FOUND = (70, _R, "The fetch session ID was not found.")
    INVALID_FETCH_SESSION_EPOCH = (71, _R, "The fetch session epoch is invalid.")
    LISTENER_NOT_FOUND = (72, _R, "There is no listener on the leader broker that matches the listener of the metadata request.")
    TOPIC_DELETION_DISABLED = (73, _F, "Topic deletion is disabled.")
    FENCED_LEADER_EPOCH = (74, _R, "The leader epoch in the request is older than the epoch on the broker.")
    UNKNOWN_LEADER_EPOCH = (75, _R, "The leader epoch in the request is newer than the epoch on the broker.")
    UNSUPPORTED_COMPRESSION_TYPE = (76, _F, "The requesting client does not support the compression type of given partition.")
    STALE_BROKER_EPOCH = (77, _F, "Broker epoch has changed.")
    OFFSET_NOT_AVAILABLE = (78, _R, "The leader high watermark has not caught up after a recent leader election.")
    MEMBER_ID_REQUIRED = (79, _F, "The group member needs a valid member id before actually entering a consumer group.")
    PREFERRED_LEADER_NOT_AVAILABLE = (80, _R, "The preferred leader was not available.")
    GROUP_MAX_SIZE_REACHED = (81, _F, "The group has reached its maximum size.")
    FENCED_INSTANCE_ID = (82, _F, "Another member with the same group.instance.id has registered with a different member.id.")
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (83, _R, "Eligible topic partition leaders are not available.")
    ELECTION_NOT_NEEDED = (84, _R, "Leader election not needed for topic partition.")
    NO_REASSIGNMENT_IN_PROGRESS = (85, _F, "No partition reassignment is in progress.")
    GROUP_SUBSCRIBED_TO_TOPIC = (86, _F, "Deleting offsets of a topic is forbidden while the consumer group is subscribed to it.")
    INVALID_RECORD = (87, _F, "This record has failed the validation on broker and hence will be rejected.")
    UNSTABLE_OFFSET_COMMIT = (88, _R, "There are unstable offsets that need to be cleared.")
    THROTTLING_QUOTA_EXCEEDED = (89, _R, "The throttling quota has been exceeded.")
    PRODUCER_FENCED = (90, _F, "There is a newer producer with the same transactionalId which fences the current one.")
    RESOURCE_NOT_FOUND = (91, _F, "A request illegally referred to a resource that does not exist.")
    DUPLICATE_RESOURCE = (92, _F, "A request illegally referred to the same resource twice.")
    UNACCEPTABLE_CREDENTIAL = (93, _F, "Requested credential would not meet criteria for acceptability.")
    INCONSISTENT_VOTER_SET = (94, _F, "The sender or recipient of a voter-only request is not one of the expected voters.")
    INVALID_UPDATE_VERSION = (95, _F, "The given update version was invalid.")
    FEATURE_UPDATE_FAILED = (96, _F, "Unable to update finalized features due to an unexpected server error.")
    PRINCIPAL_DESERIALIZATION_FAILURE = (97, _F, "Request principal deserialization failed during forwarding.")
    SNAPSHOT_NOT_FOUND = (98, _F, "Requested snapshot was not found.")
    POSITION_OUT_OF_RANGE = (99, _F, "Requested position is out of the range of the snapshot.")
    UNKNOWN_TOPIC_ID = (100, _R, "This server does not host this topic ID.")
    DUPLICATE_BROKER_REGISTRATION = (101, _F, "This broker ID is already in use.")
    BROKER_ID_NOT_REGISTERED = (102, _F, "The given broker ID was not registered.")
    INCONSISTENT_TOPIC_ID = (103, _R, "The log's topic ID did not match the topic ID in the request.")
    INCONSISTENT_CLUSTER_ID = (104, _F, "The clusterId in the request does not match that found on the server.")
    TRANSACTIONAL_ID_NOT_FOUND = (105, _F, "The transactionalId could not be found.")
    FETCH_SESSION_TOPIC_ID_ERROR = (106, _R, "The fetch session encountered inconsistent topic ID usage.")
    INELIGIBLE_REPLICA = (107, _F, "The new ISR contains at least one ineligible replica.")
    NEW_LEADER_ELECTED = (108, _F, "The AlterPartition request updated the partition state but the leader has changed.")
    OFFSET_MOVED_TO_TIERED_STORAGE = (109, _F, "The requested offset is moved to tiered storage.")
    FENCED_MEMBER_EPOCH = (110, _F, "The member epoch is fenced by the group coordinator; the member must abandon its work and rejoin.")
    UNRELEASED_INSTANCE_ID = (111, _F, "The instance ID is still used by another member of the group; that member must leave first.")
    UNSUPPORTED_ASSIGNOR = (112, _F, "The assignor or its version range is not supported by the group.")
    STALE_MEMBER_EPOCH = (113, _F, "The member epoch is stale; retry after receiving the updated member epoch via the heartbeat.")
    MISMATCHED_ENDPOINT_TYPE = (114, _F, "The request was sent to an endpoint of the wrong type.")
    UNSUPPORTED_ENDPOINT_TYPE = (115, _F, "This endpoint type is not supported yet.")
    UNKNOWN_CONTROLLER_ID = (116, _F, "This controller ID is not known.")
    UNKNOWN_SUBSCRIPTION_ID = (117, _F, "Client sent a push telemetry request with an invalid or outdated subscription ID.")
    TELEMETRY_TOO_LARGE = (118, _F, "Client sent a push telemetry request larger than the maximum size the broker will accept.")
    INVALID_REGISTRATION = (119, _F, "The controller has considered the broker registration to be invalid.")
    TRANSACTION_ABORTABLE = (120, _F, "The server encountered an error with the transaction; the client can abort it to continue.")
    INVALID_RECORD_STATE = (121, _F, "The record state is invalid; the acknowledgement of delivery could not be completed.")
    SHARE_SESSION_NOT_FOUND = (122, _R, "The share session was not found.")
    INVALID_SHARE_SESSION_EPOCH = (123, _R, "The share session epoch is invalid.")
    FENCED_STATE_EPOCH = (124, _F, "The share coordinator rejected the request because the share-group state epoch did not match.")
    INVALID_VOTER_KEY = (125, _F, "The voter key doesn't match the receiving replica's key.")
    DUPLICATE_VOTER = (126, _F, "The voter is already part of the set of voters.")
    VOTER_NOT_FOUND = (127, _F, "The voter is not part of the set of voters.")
    INVALID_REGULAR_EXPRESSION = (128, _F, "The regular expression is not valid.")
    REBOOTSTRAP_REQUIRED = (129, _F, "Client metadata is stale; the client should rebootstrap to obtain new metadata.")
    STREAMS_INVALID_TOPOLOGY = (130, _F, "The supplied topology is invalid.")
    STREAMS_INVALID_TOPOLOGY_EPOCH = (131, _F, "The supplied topology epoch is invalid.")
    STREAMS_TOPOLOGY_FENCED = (132, _F, "The supplied topology epoch is outdated.")
    SHARE_SESSION_LIMIT_REACHED = (133, _R, "The limit of share sessions has been reached.")

    # ---- Ours, not Kafka's: connect groups (DESIGN.md "Connect group specifics"). Chosen far
    # above Kafka's range (which grows by one per new error) so they cannot collide; int16.
    COMPUTE_ASSIGNMENT = (10000, _F, "The member was selected by the coordinator to compute the group's new target assignment.")
    INVALID_ASSIGNMENT = (10001, _F, "The installed assignment is invalid for the group state it was computed from.")


_BY_CODE = {int(e): e for e in ErrorCode}


def error_name(code: int) -> str:
    """The name of an error code; "UNKNOWN_CODE_<n>" for a code we do not know. Never raises."""
    e = _BY_CODE.get(code) if isinstance(code, int) else None
    return e.name if e is not None else "UNKNOWN_CODE_%s" % (code,)


class KafkaError(Exception):
    """An error that maps to a Kafka error code. `.code` is the ErrorCode when the number is known,
    else the plain int (so an unknown code received from a peer survives the round trip)."""

    def __init__(self, code: int, message: str | None = None):
        self.code = _BY_CODE.get(int(code), int(code))
        known = isinstance(self.code, ErrorCode)
        self.message = message if message is not None else (
            self.code.message if known else "Unknown error code %d." % self.code)
        super().__init__("%s: %s" % (error_name(int(self.code)), self.message))

    @property
    def retriable(self) -> bool:
        return isinstance(self.code, ErrorCode) and self.code.retriable
