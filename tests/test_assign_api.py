"""The public assignment API imports without a server and works end to end on a tiny group."""
import numpy as np

from groupcoord import assign, assignors


def test_readme_example():
    owner = assign.uniform([4, 4], np.array([0, 2, 4, 6]), np.array([0, 1, 0, 1, 0, 1]))
    assert owner.dtype == np.int32 and sorted(np.bincount(owner).tolist()) == [2, 3, 3]
    indptr, units = assign.members_csr(owner, 3)
    v = assign.validate(indptr, units, n_units=8)
    assert v.ok and np.array_equal(v.owner, owner)
    # one member leaves: only its units move
    two = assign.uniform([4, 4], np.array([0, 2, 4]), np.array([0, 1, 0, 1]),
                         current=np.where(owner == 2, -1, owner))
    d = assign.diff(owner, two, 3)
    assert d.revoke(2).size == np.count_nonzero(owner == 2)
    assert d.revoke(0).size == 0 and d.revoke(1).size == 0


def test_assignors_alias_exposes_every_assignor():
    for name in ("uniform", "range_", "eager", "incremental_cooperative", "range_assign",
                 "roundrobin", "cooperative_sticky"):
        assert callable(getattr(assignors, name))
    eager = assignors.eager(2, [1, 2])          # connectors with 1 and 2 tasks -> 5 units
    assert eager.tolist().count(-1) == 0 and len(eager) == 5
