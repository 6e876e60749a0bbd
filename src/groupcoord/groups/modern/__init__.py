"""The KIP-848 group model that consumer and connect groups share (Kafka's ``modern/``).

group.py      ModernGroup: state names, offset checks, the Unconfirmed event, DescribeGroups.
reconcile.py  units, MemberAssignment, and the one reconciliation step every modern group
              type runs per heartbeat (next assignment, epoch rule, revocation timer,
              send-assignment rule).
membership.py the membership rules: static members (who holds an instance id), fencing,
              expiry of session and revocation timers.
"""
