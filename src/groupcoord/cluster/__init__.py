"""Cluster mode: shard ownership by leases in a shared store (issue 19).

    leases.py     one node's view of its shard leases, a sans-I/O state machine
    balance.py    the target owner of every shard: spread evenly over the live nodes
    pg_leases.py  the lease and node-registry operations in PostgreSQL (asyncpg)
    status.py     `groupcoord cluster status`

Nothing is imported here: `groupcoord cluster status` needs neither numpy (balance.py) nor the
lease machine, and asyncpg only when it runs.
"""
