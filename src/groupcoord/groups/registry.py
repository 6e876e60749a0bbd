"""What the shard dispatches to, spelled out: API key -> handler, record type or volatile
event -> replayer, timer kind -> function. The shard (shard.py) reads these three tables and
nothing else, so "go to definition" on any entry lands on the code that runs.

    handler   fn(shard, request, ctx: RequestContext) -> Result        (pure)
    replayer  fn(shard, record key | volatile event, record value)     (the only mutator)
    timer     fn(shard, TimerKey, now_ms) -> Result                    (pure)

Most entries are module-private functions (a leading underscore): they are not an API of
their module, this table is their one caller. A new API, record type or timer is added here
and nowhere else; tests/test_api_keys.py checks that the runtime routes exactly the keys
that have a handler.
"""
from __future__ import annotations

from groupcoord.groups import admin, classic, connect, consumer, modern, offsets, routing
from groupcoord.groups.record_types import RecordType as RT
from groupcoord.protocol import api_keys as K

__all__ = ["API_HANDLERS", "REPLAYERS", "TIMER_KINDS"]

API_HANDLERS = {
    # offsets (offsets.py)
    K.OFFSET_COMMIT: offsets.handle_offset_commit,
    K.OFFSET_FETCH: offsets.handle_offset_fetch,
    # classic groups (classic.py), or the classic members of a consumer or connect group
    # holding the id (routing.py chooses)
    K.JOIN_GROUP: routing.join_group,
    K.HEARTBEAT: routing.heartbeat,
    K.LEAVE_GROUP: routing.leave_group,
    K.SYNC_GROUP: routing.sync_group,
    # KIP-848 consumer groups (consumer.py)
    K.CONSUMER_GROUP_HEARTBEAT: consumer.consumer_group_heartbeat,
    K.CONSUMER_GROUP_DESCRIBE: consumer.consumer_group_describe,
    # connect worker groups (connect.py)
    K.CONNECT_GROUP_HEARTBEAT: connect._heartbeat,
    K.CONNECT_GROUP_PREPARE_ASSIGNMENT: connect._prepare,
    K.CONNECT_GROUP_INSTALL_ASSIGNMENT: connect._install,
    K.CONNECT_GROUP_DESCRIBE: connect._describe,
    # group admin, for every group type (admin.py)
    K.DESCRIBE_GROUPS: admin.describe_groups,
    K.LIST_GROUPS: admin.list_groups,
    K.DESCRIBE_CONFIGS: admin.describe_configs,
    K.DELETE_GROUPS: admin.delete_groups,
    K.INCREMENTAL_ALTER_CONFIGS: admin.incremental_alter_configs,
    K.OFFSET_DELETE: admin.offset_delete,
}

REPLAYERS = {
    # durable records, by type
    RT.OFFSET_COMMIT: offsets._replay_offset,
    RT.LEGACY_OFFSET_COMMIT: offsets._replay_offset,
    RT.GROUP_METADATA: classic._replay_group_metadata,
    RT.CONSUMER_GROUP_METADATA: consumer._replay_group_metadata,
    RT.CONSUMER_GROUP_PARTITION_METADATA: consumer._replay_partition_metadata,
    RT.CONSUMER_GROUP_MEMBER_METADATA: consumer._replay_member_metadata,
    RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: consumer._replay_target_member,
    RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: consumer._replay_target_metadata,
    RT.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: consumer._replay_current_assignment,
    RT.CONNECT_WORKER_GROUP_METADATA: connect._replay_epoch,
    RT.CONNECT_WORKER_GROUP_MEMBER_METADATA: connect._replay_member,
    RT.CONNECT_WORKER_GROUP_CONNECTORS_TASKS_METADATA: connect._replay_config,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_METADATA: connect._replay_target_meta,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_MEMBER: connect._replay_target,
    RT.CONNECT_WORKER_GROUP_CURRENT_MEMBER_ASSIGNMENT: connect._replay_current,
    RT.GROUP_CONFIG: admin._replay_group_config,
    # volatile events (in memory only, never written), by class
    offsets.RetentionProgress: offsets._replay_progress,
    classic.PendingMemberAdded: classic._replay_event,
    classic.PendingMemberForgotten: classic._replay_event,
    classic.MemberJoined: classic._replay_event,
    classic.StaticMemberReplaced: classic._replay_event,
    classic.RebalanceStarted: classic._replay_event,
    classic.BarrierExtended: classic._replay_event,
    classic.MemberRemoved: classic._replay_event,
    classic.JoinCompleted: classic._replay_event,
    classic.SyncReceived: classic._replay_event,
    modern.Unconfirmed: modern._replay_unconfirmed,    # consumer and connect groups
    connect.ChooseWorker: connect._replay_choose,
    connect.Prepared: connect._replay_prepared,
}

TIMER_KINDS = {
    offsets.RETENTION: offsets._retention_check,
    classic.SESSION: classic._fire_session,
    classic.JOIN: classic._fire_join,
    classic.SYNC: classic._fire_sync,
    consumer.SESSION_TIMER: consumer._session_expired,
    consumer.REVOCATION_TIMER: consumer._revocation_expired,
    consumer.ASSIGNMENT_TIMER: consumer._assignment_due,
    connect.SESSION: connect._session_expired,
    connect.REVOCATION: connect._revocation_expired,
    connect.ASSIGNMENT: connect._assignment_expired,
    connect.DELAYED: connect._delayed_rebalance,
}
