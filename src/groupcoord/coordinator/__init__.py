"""Coordinator core: deterministic group state machines (docs/coordinator.md). So far: the
durable record types."""
