"""Operator commands that speak the Kafka protocol to a running node (or to Apache Kafka).

    admin.py    GroupAdmin: the requests (Metadata, FindCoordinator, ListGroups, the three
                describes, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups) -> plain data
    groups.py   `groupcoord groups list|describe|reset-offsets|delete`: arguments, tables, JSON
"""
