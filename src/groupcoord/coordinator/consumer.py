"""Placeholder until this module is written (see docs/coordinator.md)."""
API_HANDLERS: dict = {}
REPLAYERS: dict = {}
TIMER_KINDS: dict = {}


def on_topics_changed(shard, now_ms):
    from groupcoord.coordinator.result import EMPTY
    return EMPTY
