"""Durable record types of the coordinator log and their key/value schemas.

On disk every state change is one record of the log (Kafka RecordBatch v2, as in
``__consumer_offsets``). The record key is an int16 record type (big-endian) followed by the
fields of the type's key schema (``<Name>Key``, schema version 0, non-flexible encoding). The
record value is an int16 value version followed by the fields of the type's value schema
(``<Name>Value``) encoded at that version; a null value is a tombstone that deletes the key.
The two int16 prefixes are written and read by code, not by the schemas, so the key schemas
carry ``validVersions`` "0" and the value schemas their real version ranges. Types 0-8 are
Kafka's own numbering (0 is the legacy, identically encoded form of the offset commit key:
read, never written); types 100-105 are this project's connect worker group records, which
Kafka does not define; type 110 is a group's dynamic configuration (IncrementalAlterConfigs on
a GROUP resource), which Kafka keeps in its metadata log's config store instead
(docs/decisions.md). Compaction keeps the last record per (type, key fields).
"""
from enum import IntEnum

__all__ = ["RecordType", "RECORD_SCHEMAS", "WRITE_OFFSET_COMMIT"]


class RecordType(IntEnum):
    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONNECT_WORKER_GROUP_METADATA = 100
    CONNECT_WORKER_GROUP_MEMBER_METADATA = 101
    CONNECT_WORKER_GROUP_CONNECTORS_TASKS_METADATA = 102
    CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_METADATA = 103
    CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_MEMBER = 104
    CONNECT_WORKER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 105
    GROUP_CONFIG = 110


# The type written for offset commits; LEGACY_OFFSET_COMMIT is only read.
WRITE_OFFSET_COMMIT = RecordType.OFFSET_COMMIT

# RecordType -> (key schema name, value schema name, (lowest, highest) value version).
RECORD_SCHEMAS = {
    RecordType.LEGACY_OFFSET_COMMIT: ("OffsetCommitKey", "OffsetCommitValue", (0, 4)),
    RecordType.OFFSET_COMMIT: ("OffsetCommitKey", "OffsetCommitValue", (0, 4)),
    RecordType.GROUP_METADATA: ("GroupMetadataKey", "GroupMetadataValue", (0, 4)),
    RecordType.CONSUMER_GROUP_METADATA:
        ("ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue", (0, 0)),
    RecordType.CONSUMER_GROUP_PARTITION_METADATA:
        ("ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue", (0, 0)),
    RecordType.CONSUMER_GROUP_MEMBER_METADATA:
        ("ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue", (0, 0)),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        ("ConsumerGroupTargetAssignmentMetadataKey",
         "ConsumerGroupTargetAssignmentMetadataValue", (0, 0)),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        ("ConsumerGroupTargetAssignmentMemberKey",
         "ConsumerGroupTargetAssignmentMemberValue", (0, 0)),
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        ("ConsumerGroupCurrentMemberAssignmentKey",
         "ConsumerGroupCurrentMemberAssignmentValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_METADATA:
        ("ConnectWorkerGroupMetadataKey", "ConnectWorkerGroupMetadataValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_MEMBER_METADATA:
        ("ConnectWorkerGroupMemberMetadataKey", "ConnectWorkerGroupMemberMetadataValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_CONNECTORS_TASKS_METADATA:
        ("ConnectWorkerGroupConnectorsTasksMetadataKey",
         "ConnectWorkerGroupConnectorsTasksMetadataValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_METADATA:
        ("ConnectWorkerGroupTargetAssignmentMetadataKey",
         "ConnectWorkerGroupTargetAssignmentMetadataValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        ("ConnectWorkerGroupTargetAssignmentMemberKey",
         "ConnectWorkerGroupTargetAssignmentMemberValue", (0, 0)),
    RecordType.CONNECT_WORKER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        ("ConnectWorkerGroupCurrentMemberAssignmentKey",
         "ConnectWorkerGroupCurrentMemberAssignmentValue", (0, 0)),
    RecordType.GROUP_CONFIG: ("GroupConfigKey", "GroupConfigValue", (0, 0)),
}
