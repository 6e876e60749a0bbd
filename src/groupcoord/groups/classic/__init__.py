"""Classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup; docs/coordinator-classic.md).

    group.py      ClassicGroup, Member, state names, timer kinds (the state)
    events.py     the Volatile events, the functions that apply them, the replayers
    rebalance.py  ClassicTx (a handler's draft), the join barrier, removals, protocol choice,
                  response and record builders (also used by the migration modules), the
                  timers
    handlers.py   the four APIs, rebalance_for_topics

Import each name from the module that defines it; this package re-exports nothing.
"""
