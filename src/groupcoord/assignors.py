"""The fast assignors for embedding in other tools (numpy arrays in, numpy arrays out).
An alias of the assignor functions in groupcoord.assign; see that package's docstring."""
from groupcoord.assign import (cooperative_sticky, eager, incremental_cooperative,  # noqa: F401
                               range_, range_assign, roundrobin, uniform)

__all__ = ["uniform", "range_", "eager", "incremental_cooperative", "range_assign",
           "roundrobin", "cooperative_sticky"]
