"""Placeholder until this module is written (see docs/coordinator.md)."""
API_HANDLERS: dict = {}
REPLAYERS: dict = {}
TIMER_KINDS: dict = {}
