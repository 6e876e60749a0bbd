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

from groupcoord.groups import admin, offsets, routing
from groupcoord.groups.connect import describe as connect_describe
from groupcoord.groups.connect import heartbeat as connect_heartbeat
from groupcoord.groups.connect import install as connect_install
from groupcoord.groups.connect import replay as connect_replay
from groupcoord.groups.connect.group import ASSIGNMENT as CONNECT_ASSIGNMENT
from groupcoord.groups.connect.group import DELAYED as CONNECT_DELAYED
from groupcoord.groups.connect.group import REVOCATION as CONNECT_REVOCATION
from groupcoord.groups.connect.group import SESSION as CONNECT_SESSION
from groupcoord.groups.connect.group import Prepared
from groupcoord.groups.connect.selection import ChooseWorker
from groupcoord.groups.consumer import describe as consumer_describe
from groupcoord.groups.consumer import heartbeat as consumer_heartbeat
from groupcoord.groups.consumer import replay as consumer_replay
from groupcoord.groups.consumer import target as consumer_target
from groupcoord.groups.consumer.group import ASSIGNMENT_TIMER as CONSUMER_ASSIGNMENT
from groupcoord.groups.consumer.group import REVOCATION_TIMER as CONSUMER_REVOCATION
from groupcoord.groups.consumer.group import SESSION_TIMER as CONSUMER_SESSION
from groupcoord.groups.classic import events as classic_events
from groupcoord.groups.classic import group as classic_group
from groupcoord.groups.classic import rebalance as classic_rebalance
from groupcoord.groups.modern.group import (RebalanceProgress, Unconfirmed, replay_progress,
                                            replay_unconfirmed)
from groupcoord.groups.record_types import RecordType as RT
from groupcoord.protocol import api_keys as K

__all__ = ["API_HANDLERS", "REPLAYERS", "TIMER_KINDS"]

API_HANDLERS = {
    # offsets (offsets.py)
    K.OFFSET_COMMIT: offsets.handle_offset_commit,
    K.OFFSET_FETCH: offsets.handle_offset_fetch,
    # classic groups (classic/handlers.py), or the classic members of a consumer or connect group
    # holding the id (routing.py chooses)
    K.JOIN_GROUP: routing.join_group,
    K.HEARTBEAT: routing.heartbeat,
    K.LEAVE_GROUP: routing.leave_group,
    K.SYNC_GROUP: routing.sync_group,
    # KIP-848 consumer groups (consumer/)
    K.CONSUMER_GROUP_HEARTBEAT: consumer_heartbeat.consumer_group_heartbeat,
    K.CONSUMER_GROUP_DESCRIBE: consumer_describe.consumer_group_describe,
    # connect worker groups (connect/)
    K.CONNECT_GROUP_HEARTBEAT: connect_heartbeat._heartbeat,
    K.CONNECT_GROUP_PREPARE_ASSIGNMENT: connect_install._prepare,
    K.CONNECT_GROUP_INSTALL_ASSIGNMENT: connect_install._install,
    K.CONNECT_GROUP_DESCRIBE: connect_describe._describe,
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
    RT.GROUP_METADATA: classic_events._replay_group_metadata,
    RT.CONSUMER_GROUP_METADATA: consumer_replay._replay_group_metadata,
    RT.CONSUMER_GROUP_PARTITION_METADATA: consumer_replay._replay_partition_metadata,
    RT.CONSUMER_GROUP_MEMBER_METADATA: consumer_replay._replay_member_metadata,
    RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: consumer_replay._replay_target_member,
    RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: consumer_replay._replay_target_metadata,
    RT.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: consumer_replay._replay_current_assignment,
    RT.CONNECT_WORKER_GROUP_METADATA: connect_replay._replay_epoch,
    RT.CONNECT_WORKER_GROUP_MEMBER_METADATA: connect_replay._replay_member,
    RT.CONNECT_WORKER_GROUP_CONNECTORS_TASKS_METADATA: connect_replay._replay_config,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_METADATA: connect_replay._replay_target_meta,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_MEMBER: connect_replay._replay_target,
    RT.CONNECT_WORKER_GROUP_CURRENT_MEMBER_ASSIGNMENT: connect_replay._replay_current,
    RT.GROUP_CONFIG: admin._replay_group_config,
    # volatile events (in memory only, never written), by class
    offsets.RetentionProgress: offsets._replay_progress,
    classic_events.PendingMemberAdded: classic_events._replay_event,
    classic_events.PendingMemberForgotten: classic_events._replay_event,
    classic_events.MemberJoined: classic_events._replay_event,
    classic_events.StaticMemberReplaced: classic_events._replay_event,
    classic_events.RebalanceStarted: classic_events._replay_event,
    classic_events.BarrierExtended: classic_events._replay_event,
    classic_events.MemberRemoved: classic_events._replay_event,
    classic_events.JoinCompleted: classic_events._replay_event,
    classic_events.SyncReceived: classic_events._replay_event,
    Unconfirmed: replay_unconfirmed,    # consumer and connect groups
    RebalanceProgress: replay_progress,  # consumer and connect groups (lifecycle log)
    ChooseWorker: connect_replay._replay_choose,
    Prepared: connect_replay._replay_prepared,
}

TIMER_KINDS = {
    offsets.RETENTION: offsets._retention_check,
    classic_group.SESSION: classic_rebalance._fire_session,
    classic_group.JOIN: classic_rebalance._fire_join,
    classic_group.SYNC: classic_rebalance._fire_sync,
    CONSUMER_SESSION: consumer_heartbeat._session_expired,
    CONSUMER_REVOCATION: consumer_heartbeat._revocation_expired,
    CONSUMER_ASSIGNMENT: consumer_target._assignment_due,
    CONNECT_SESSION: connect_heartbeat._session_expired,
    CONNECT_REVOCATION: connect_heartbeat._revocation_expired,
    CONNECT_ASSIGNMENT: connect_install._assignment_expired,
    CONNECT_DELAYED: connect_install._delayed_rebalance,
}
