"""The assignment engine: integer units, owner arrays, diff/validate/reconcile kernels and the
assignors, all over numpy arrays (docs/assign.md). No server needed:

    import numpy as np
    from groupcoord import assign

    # 3 members all subscribed to 2 topics of 4 partitions each
    owner = assign.uniform([4, 4], np.array([0, 2, 4, 6]), np.array([0, 1] * 3))
    indptr, units = assign.members_csr(owner, 3)

Submodules: `kernels` (CSR, diff, validate, reconcile), `units` (interning, block remaps),
`consumer` (server-side uniform / range), `connect` (eager / incremental-cooperative),
`classic` (classic leader-side range / roundrobin / cooperative-sticky), and `many` (the
assignors and kernels over many groups per call; imported on its own: `from groupcoord.assign
import many`).
"""
from groupcoord.assign import classic, connect, consumer, kernels, units
from groupcoord.assign.classic import cooperative_sticky, range_assign, roundrobin
from groupcoord.assign.connect import eager, incremental_cooperative
from groupcoord.assign.consumer import range_, topic_base, uniform
from groupcoord.assign.kernels import (Diff, MemberState, Reconciliation, Validation,
                                       Violation, ViolationKind, concat_groups, diff, globalize, localize,
                                       members_csr, owner_from_csr, reconcile, validate)
from groupcoord.assign.units import Interner, blocks, remap_blocks

__all__ = [
    "classic", "connect", "consumer", "kernels", "units",
    "uniform", "range_", "topic_base", "eager", "incremental_cooperative",
    "range_assign", "roundrobin", "cooperative_sticky",
    "members_csr", "owner_from_csr", "diff", "validate", "reconcile", "concat_groups",
    "globalize", "localize",
    "Diff", "Validation", "Violation", "ViolationKind", "Reconciliation", "MemberState",
    "Interner", "blocks", "remap_blocks",
]
