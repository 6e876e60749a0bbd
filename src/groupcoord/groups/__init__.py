"""Coordinator core: deterministic group state machines (docs/coordinator.md). So far: the
durable record types."""

# The codec's native module imports groupcoord.protocol; load the package first so that
# importing a coordinator module on its own never meets a half-initialised codec.
import groupcoord.protocol  # noqa: E402,F401
