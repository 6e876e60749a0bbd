"""A group's own settings: Kafka's dynamic group configs for consumer groups (KIP-848,
Kafka's GroupConfig), set with IncrementalAlterConfigs on a GROUP resource (admin.py).

    consumer.session.timeout.ms      default: the node's group.consumer.session.timeout.ms
    consumer.heartbeat.interval.ms   default: the node's group.consumer.heartbeat.interval.ms

State: ``shard.group_configs[group_id] = {name: int}``, the overrides only, changed only by
replaying the group's GROUP_CONFIG record (admin.py). A group id needs no group to have
settings (Kafka keeps them apart from the group too, and DeleteGroups leaves them).

Validation is Kafka's (GroupConfig.validate), every failure INVALID_CONFIG: a known name, an
int32 of at least 1, each within the node's bounds group.consumer.{min,max}.session.timeout.ms
(45 s, 60 s) and group.consumer.{min,max}.heartbeat.interval.ms (5 s, 15 s), and the
session timeout above the heartbeat interval. One difference, because this node accepts
node defaults outside those bounds (Kafka refuses to start): each bound is widened to take
in the node's own default, so a group can always be given back what it had.
The values take effect for a member at its next heartbeat (Kafka's rule): the session timer
that heartbeat arms and the interval its answer carries.
"""
from __future__ import annotations

import re
__all__ = ["SESSION_TIMEOUT", "HEARTBEAT_INTERVAL", "NAMES", "DOCS", "ConfigError",
           "consumer_intervals", "consumer_session_ms", "defaults", "validate"]

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
NAMES = (HEARTBEAT_INTERVAL, SESSION_TIMEOUT)          # sorted: the order they are listed in
DOCS = {
    SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer group "
                     "protocol.",
    HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a consumer group.",
}
_INT32_MAX = 2**31 - 1
_INT = re.compile(r"[+-]?[0-9]+\Z")        # what Java's Integer.parseInt takes (after trim)


class ConfigError(Exception):
    """An alteration refused: the error code (INVALID_CONFIG here) and Kafka's message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = int(code)
        self.message = message


# ------------------------------------------------------------------------------ reading
def consumer_intervals(shard, group_id: str) -> tuple:
    """(session timeout ms, heartbeat interval ms) a consumer group's members are given."""
    cfg = shard.config
    over = shard.group_configs.get(group_id)
    if over is None:
        return cfg.consumer_session_timeout_ms, cfg.consumer_heartbeat_interval_ms
    return (over.get(SESSION_TIMEOUT, cfg.consumer_session_timeout_ms),
            over.get(HEARTBEAT_INTERVAL, cfg.consumer_heartbeat_interval_ms))


def consumer_session_ms(shard, group_id: str) -> int:
    return consumer_intervals(shard, group_id)[0]


def defaults(cfg) -> dict:
    """name -> the node's value, what a group without an override gets."""
    return {SESSION_TIMEOUT: cfg.consumer_session_timeout_ms,
            HEARTBEAT_INTERVAL: cfg.consumer_heartbeat_interval_ms}


# ------------------------------------------------------------------------------ checking
def _parse(name: str, value: str) -> int:
    s = value.strip()
    if not _INT.match(s) or not -2**31 <= int(s) <= _INT32_MAX:
        raise ConfigError(40, "Invalid value %s for configuration %s: Not a number of type "
                              "INT" % (value, name))
    v = int(s)
    if v < 1:
        raise ConfigError(40, "Invalid value %s for configuration %s: Value must be at least 1"
                          % (value, name))
    return v


def _bounds(cfg, lo: str, hi: str, default: int) -> tuple:
    return min(getattr(cfg, lo), default), max(getattr(cfg, hi), default)


def validate(overrides: dict, cfg) -> dict:
    """{name: text value} (a group's overrides after an alteration) -> {name: int}; raises
    ConfigError (INVALID_CONFIG, Kafka's messages, in Kafka's order of checks)."""
    for name in overrides:
        if name not in DOCS:
            raise ConfigError(40, "Unknown group config name: %s" % name)
    out = {name: _parse(name, v) for name, v in sorted(overrides.items())}
    eff = defaults(cfg)
    eff.update(out)
    hb, session = eff[HEARTBEAT_INTERVAL], eff[SESSION_TIMEOUT]
    hb_lo, hb_hi = _bounds(cfg, "consumer_min_heartbeat_interval_ms",
                           "consumer_max_heartbeat_interval_ms",
                           cfg.consumer_heartbeat_interval_ms)
    s_lo, s_hi = _bounds(cfg, "consumer_min_session_timeout_ms",
                         "consumer_max_session_timeout_ms", cfg.consumer_session_timeout_ms)
    checks = ((hb < hb_lo, HEARTBEAT_INTERVAL, "greater than or equal to",
               "group.consumer.min.heartbeat.interval.ms", hb_lo),
              (hb > hb_hi, HEARTBEAT_INTERVAL, "less than or equal to",
               "group.consumer.max.heartbeat.interval.ms", hb_hi),
              (session < s_lo, SESSION_TIMEOUT, "greater than or equal to",
               "group.consumer.min.session.timeout.ms", s_lo),
              (session > s_hi, SESSION_TIMEOUT, "less than or equal to",
               "group.consumer.max.session.timeout.ms", s_hi))
    for bad, name, rel, bound, value in checks:
        if bad:
            raise ConfigError(40, "%s must be %s %s (%d)" % (name, rel, bound, value))
    if session <= hb:
        raise ConfigError(40, "%s must be greater than %s (%d <= %d)"
                          % (SESSION_TIMEOUT, HEARTBEAT_INTERVAL, session, hb))
    return out
