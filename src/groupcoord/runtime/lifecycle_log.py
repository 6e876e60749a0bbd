"""Lifecycle log lines: the runtime's writer of the events a Result carries (groups/lifecycle.py),
one INFO line each on the logger "groupcoord.groups", rate-limited; and the JSON formatter of
``groupcoord serve --log-format json`` (docs/operations.md, "Lifecycle logs").

    group g1 (consumer): member m-1 joined (epoch 3, instance i-1, client c, host h)
    group g1 (consumer): rebalance started: epoch 4 (member m-2 joined), 3 members
    group g1 (consumer): rebalance completed: epoch 4 in 120 ms, 3 members, 7 partitions moved

Rate limit: at most ``per_group`` lines per group and kind, and ``overall`` lines in all, per
window of ``window_s`` seconds; the lines over it are counted, and summed up when the window
ends (a timer on the running loop, else the next write or ``flush``):

    group g1 (consumer): 9995 more "member-joined" lines suppressed (rate limit: ...)

so a join storm of 10k members writes a few lines and a summary, not 20k lines. The writer
only reads the events: nothing it does changes the groups, and with INFO disabled on the
logger it returns at once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable, Optional

import msgspec

from groupcoord.groups import lifecycle as lc

__all__ = ["LifecycleLog", "JsonFormatter", "render", "fields", "DEFAULT", "LOGGER_NAME"]

LOGGER_NAME = "groupcoord.groups"

# How a member left, expired or was fenced, in a member line.
_MEMBER_REASONS = {
    "session-expired": "session expired",
    "revocation-timeout": "did not revoke what it was asked to in time",
    "rebalance-timeout": "did not rejoin in time",
    "sync-timeout": "did not sync in time",
    "static-leave": "temporarily: a static member, epoch -2",
    "stale-epoch": "stale member epoch",
    "instance-taken": "its instance id is held by another member",
}
_MAX_ID = 256           # longer ids are cut in text lines (JSON carries them whole)
_MAX_TOPICS = 10        # topics named in an offsets-expired line


def _q(s) -> str:
    """An id as a text line shows it: as it is when it is plain, else quoted with escapes
    (a group id with a newline must not forge a line)."""
    s = str(s)
    if s and len(s) <= _MAX_ID and s.isprintable() and " " not in s and '"' not in s:
        return s
    return json.dumps(s[:_MAX_ID] + ("..." if len(s) > _MAX_ID else ""))


def _epoch(ev) -> str:
    return "%s %d" % ("generation" if ev.type == "classic" else "epoch", ev.epoch)


def _details(ev, *extra) -> str:
    parts = [_epoch(ev)] if ev.epoch >= 0 else []
    if ev.instance is not None:
        parts.append("instance %s" % _q(ev.instance))
    parts.extend(p for p in extra if p)
    return " (%s)" % ", ".join(parts) if parts else ""


def _why(ev, member_line: bool = False) -> str:
    """The reason's words: a member line's own, else lifecycle.REASONS' (with the member)."""
    if member_line and ev.reason in _MEMBER_REASONS:
        return _MEMBER_REASONS[ev.reason]
    phrase = lc.REASONS.get(ev.reason)
    if phrase is None:
        return ev.reason or "unknown"
    return phrase.replace("{member}", _q(ev.member) if ev.member else "?")


def render(ev: lc.Event) -> str:
    """The text of one event's line."""
    head = "group %s (%s): " % (_q(ev.group), ev.type or "?")
    k = ev.kind
    if k == lc.MEMBER_JOINED:
        return head + "member %s joined%s" % (_q(ev.member), _details(
            ev, ev.client and "client %s" % _q(ev.client), ev.host and "host %s" % _q(ev.host)))
    if k == lc.MEMBER_LEFT:
        return head + "member %s left%s" % (_q(ev.member), _details(
            ev, ev.reason and _why(ev, True)))
    if k == lc.MEMBER_EXPIRED:
        return head + "member %s removed: %s%s" % (_q(ev.member), _why(ev, True), _details(ev))
    if k == lc.MEMBER_FENCED:
        sent = "request epoch %d" % ev.member_epoch if ev.member_epoch >= 0 else ""
        return head + "member %s fenced: %s%s" % (_q(ev.member), _why(ev, True),
                                                  _details(ev, sent))
    if k == lc.STATIC_REPLACED:
        return head + "static member %s replaced: member %s took over from %s, which is " \
            "fenced (%s, client %s, host %s)" % (
                _q(ev.instance), _q(ev.member), _q(ev.previous), _epoch(ev), _q(ev.client),
                _q(ev.host))
    if k == lc.REBALANCE_STARTED:
        return head + "rebalance started: %s (%s), %d member%s" % (
            _epoch(ev), _why(ev), ev.members, "" if ev.members == 1 else "s")
    if k == lc.REBALANCE_COMPLETED:
        took = (" in %d ms" % ev.duration_ms if ev.duration_ms >= 0
                else " (duration unknown: it started before this node loaded the group)")
        moved = ", %d %s moved" % (ev.units_moved, ev.unit) if ev.units_moved >= 0 else ""
        return head + "rebalance completed: %s%s, %d member%s%s" % (
            _epoch(ev), took, ev.members, "" if ev.members == 1 else "s", moved)
    if k == lc.ASSIGNMENT_COMPUTED:
        if ev.worker:
            what = "target assignment installed: %s, computed by worker %s with assignor %s" % (
                _epoch(ev), _q(ev.worker), _q(ev.assignor or "?"))
        else:
            what = "target assignment computed: %s by assignor %s" % (
                _epoch(ev), _q(ev.assignor or "?"))
        err = ", assignor error %d (the target is kept)" % ev.error if ev.error else ""
        return head + "%s, %d member%s, %d %s moved%s" % (
            what, ev.members, "" if ev.members == 1 else "s", ev.units_moved, ev.unit, err)
    if k == lc.OFFSETS_EXPIRED:
        names = ", ".join(_q(t) for t in ev.topics[:_MAX_TOPICS])
        more = " and %d more" % (len(ev.topics) - _MAX_TOPICS) \
            if len(ev.topics) > _MAX_TOPICS else ""
        return head + "%d offset%s expired (topic%s %s%s)" % (
            ev.offsets, "" if ev.offsets == 1 else "s", "" if len(ev.topics) == 1 else "s",
            names, more)
    if k == lc.GROUP_DELETED:
        return head + "group deleted (%s%s)" % (
            _why(ev),
            ", with %d offset%s" % (ev.offsets, "" if ev.offsets == 1 else "s")
            if ev.offsets > 0 else "")
    return head + "%s %s" % (k, msgspec.json.encode(ev).decode())


def fields(ev: lc.Event) -> dict:
    """The event's fields as a JSON line carries them (defaults left out; a classic group's
    epoch is called generation)."""
    out = msgspec.to_builtins(ev)
    if ev.type == "classic" and "epoch" in out:
        out["generation"] = out.pop("epoch")
    if "topics" in out:
        out["topics"] = list(out["topics"])
    return out


class LifecycleLog:
    """Writes events as log lines under the rate limit (module docstring). One per process
    (DEFAULT) serves every shard: the limits are the node's."""

    MAX_KEYS = 10_000               # (group, kind) pairs counted as suppressed per window
    MAX_SUMMARIES = 20              # summary lines per window; the rest in one line

    def __init__(self, logger: Optional[logging.Logger] = None, per_group: int = 5,
                 overall: int = 100, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.per_group = per_group
        self.overall = overall
        self.window_s = window_s
        self.clock = clock
        self._t0 = -1.0                 # the current window's start
        self._written: dict = {}        # (group, type, kind) -> lines written in the window
        self._total = 0
        self._dropped: dict = {}        # (group, type, kind) -> lines suppressed
        self._dropped_other = 0         # suppressed beyond MAX_KEYS keys
        self._timer = None              # the summary's call_later, and its loop
        self._timer_loop = None
        self.lines = 0                  # counters (tests, benchmarks)
        self.suppressed = 0

    def write(self, events) -> None:
        lg = self.logger
        if not lg.isEnabledFor(logging.INFO):
            return
        now = self.clock()
        if now - self._t0 >= self.window_s:
            self.flush()
            self._t0 = now
        for ev in events:
            key = (ev.group, ev.type, ev.kind)
            n = self._written.get(key, 0)
            if n >= self.per_group or self._total >= self.overall:
                self._suppress(key)
                continue
            self._written[key] = n + 1
            self._total += 1
            self.lines += 1
            try:
                lg.info(render(ev), extra={"lifecycle": fields(ev)})
            except Exception:
                # A bug here must not fail the write path that called (the Result is applied).
                lg.exception("lifecycle event %r could not be written", ev)

    def _suppress(self, key) -> None:
        self.suppressed += 1
        if key in self._dropped or len(self._dropped) < self.MAX_KEYS:
            self._dropped[key] = self._dropped.get(key, 0) + 1
        else:
            self._dropped_other += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return                      # no loop: the next write or flush() sums up
        if self._timer is not None and self._timer_loop is loop:
            return
        if self._timer is not None:     # armed on a loop that has gone (tests make many)
            self._timer.cancel()
        delay = max(0.0, self._t0 + self.window_s - self.clock())
        self._timer = loop.call_later(delay, self._window_ended)
        self._timer_loop = loop

    def _window_ended(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write the summary of the lines suppressed in the window so far, and start a new
        window."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        dropped, other = self._dropped, self._dropped_other
        self._written, self._total, self._dropped, self._dropped_other = {}, 0, {}, 0
        self._t0 = self.clock()
        if not dropped and not other:
            return
        lg = self.logger
        limits = "rate limit: %d lines per group and kind, %d in all, per %g s" % (
            self.per_group, self.overall, self.window_s)
        ranked = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
        for (group, gtype, kind), n in ranked[:self.MAX_SUMMARIES]:
            lg.info('group %s (%s): %d more "%s" line%s suppressed (%s)', _q(group), gtype, n,
                    kind, "" if n == 1 else "s", limits,
                    extra={"lifecycle": {"group": group, "type": gtype, "kind": kind,
                                         "suppressed": n}})
        rest = ranked[self.MAX_SUMMARIES:]
        n_rest = sum(n for _, n in rest) + other
        if n_rest:
            lg.info("lifecycle log: %d more line%s of %s%d more group%s and kinds suppressed "
                    "(%s)", n_rest, "" if n_rest == 1 else "s", "at least " if other else "",
                    len(rest), "" if len(rest) == 1 else "s", limits,
                    extra={"lifecycle": {"suppressed": n_rest}})


DEFAULT = LifecycleLog()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601, ms), level, logger, message, node (a
    --processes child), exc (a traceback), and a lifecycle line's event fields (fields())."""

    def __init__(self, node: Optional[int] = None):
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + ".%03dZ" % int(record.msecs),
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if self.node is not None:
            out["node"] = self.node
        extra = getattr(record, "lifecycle", None)
        if extra:
            for k, v in extra.items():
                out.setdefault(k, v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return msgspec.json.encode(out).decode()
