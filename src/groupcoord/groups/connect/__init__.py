"""Connect worker groups (seed: connect-on-new-rebalance-protocol.txt; docs/coordinator-connect.md).

A connect group is a KIP-848 group whose units of work are connectors and tasks and whose target
assignment is computed by one of its workers (a client-side assignor), not by the coordinator.

Epochs (as KIP-848):
  group epoch     bumped (one ConnectWorkerGroupMetadata record per request at most) when a
                  worker joins, changes its assignors (names, ranges, reason, version or
                  metadata), is removed (leave, session expiry, fencing, revocation timeout),
                  when the connectors or their task counts change (ConfigState with a higher
                  ConfigOffset), and when a delayed rebalance the assignor asked for is due.
  target epoch    the group epoch the installed target assignment was computed for.
  member epoch    each worker's, moved towards the target by modern/reconcile.py (reconcile_member).

Computing a target (group epoch > target epoch):
  1. The coordinator chooses a worker (Volatile ChooseWorker) whose version range of the
     selected assignor covers every other worker's, and arms a deadline timer at its rebalance
     timeout. No such worker: the group is stuck ("fatal"): heartbeats answer
     UNSUPPORTED_ASSIGNOR until membership changes.
  2. Every heartbeat of the chosen worker is processed normally and answers COMPUTE_ASSIGNMENT
     (the response still carries its epoch and assignment).
  3. The worker calls PrepareAssignment: it gets the group epoch, the assignor name, the
     coordinator's clock, the stored AssignorState, the connectors and every worker's metadata
     and current target. The coordinator remembers what it handed out (Volatile Prepared).
  4. The worker calls InstallAssignment: validated against the prepared metadata, then the
     target is written at the prepared epoch (member records only for changed targets, then the
     target metadata with AssignorState and the delayed-rebalance deadline).
  The deadline passing, or the chosen worker leaving, makes the coordinator choose again.

Reconciliation, fencing, static-member rules and expiry are modern/'s (reconcile.py,
membership.py), as for consumer groups.

State: durable fields come from records (replay only); ``computing``, ``leader`` and
``prepared`` are volatile (lost on restart: the next heartbeat chooses a worker again).

Modules: group.py (ConnectGroup, its records, the classic Connect protocol view),
selection.py (assignor and worker selection), heartbeat.py (ConnectGroupHeartbeat, leave, expiry),
install.py (PrepareAssignment / InstallAssignment, the chosen worker's deadline, delayed
rebalances), describe.py (ConnectGroupDescribe), replay.py, classic_members.py (workers
using the classic protocol inside a connect group).
"""
