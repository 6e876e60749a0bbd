"""Lifecycle log lines (runtime/lifecycle_log.py) as an operator reads them.

* A real `groupcoord serve --log-format text` and `--log-format json`: a KIP-848 group and a
  classic group formed by the member SDK (src/groupcoord/client/), one member of each leaving;
  the lines on the server's stderr say who joined and left, each rebalance started (and why)
  and completed (epoch or generation, duration, members, partitions moved).
* The rate limit: a join storm of 10,000 members through a real shard runtime (the pure core
  and the write path that hands each Result's events to the writer) writes a bounded number
  of lines and a summary of the rest; so does one join in each of 1,000 groups.
"""
import asyncio
import json
import logging
import re

import pytest

from groupcoord.client import ClassicMember, ConsumerMember
from groupcoord.groups import lifecycle as lc
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.lifecycle_log import JsonFormatter, LifecycleLog, render
from groupcoord.runtime.shards import ShardSet
from serve_proc import serve  # noqa: F401  (fixture)
from waiting import until

FAST = ["--group-config", "group.consumer.heartbeat.interval.ms=200",
        "--group-config", "group.initial.rebalance.delay.ms=0",
        "--group-config", "group.min.session.timeout.ms=1000",
        "--group-config", "group.consumer.assignment.interval.ms=0"]
CLASSIC_KW = dict(session_timeout_ms=3000, rebalance_timeout_ms=5000, heartbeat_interval_ms=100)


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def two_groups_form_and_one_member_each_leaves(srv):
    """KIP-848 group "kc" (consumer members a, b) and classic group "kl" (c, d) on t6; b and
    d leave once both groups are stable with 3 partitions each. -> member ids by name."""
    a = ConsumerMember(srv.bootstrap, "kc", topics=["t6"], rebalance_timeout_ms=10_000)
    b = ConsumerMember(srv.bootstrap, "kc", topics=["t6"], rebalance_timeout_ms=10_000)
    c = ClassicMember(srv.bootstrap, "kl", topics=["t6"], assignors=["range"], **CLASSIC_KW)
    d = ClassicMember(srv.bootstrap, "kl", topics=["t6"], assignors=["range"], **CLASSIC_KW)
    members = (a, b, c, d)
    try:
        await a.start()
        await until(lambda: a.stable and len(a.assignment) == 6, 20, "a owns t6")
        await b.start()
        await until(lambda: a.stable and b.stable and len(a.assignment) == 3
                    and len(b.assignment) == 3, 20, "a and b own 3 each")
        await c.start()
        await until(lambda: c.state == "STABLE" and len(c.assignment) == 6, 20, "c owns t6")
        await d.start()
        await until(lambda: c.state == d.state == "STABLE" and c.generation == d.generation
                    and len(c.assignment) == len(d.assignment) == 3, 20, "c and d own 3 each")
        ids = {"a": a.member_id, "b": b.member_id, "c": c.member_id, "d": d.member_id,
               "kl_gen": c.generation, "kc_epoch": a.epoch}
        await b.close()
        await d.close()
        await until(lambda: a.stable and len(a.assignment) == 6, 20, "a owns t6 again")
        await until(lambda: c.state == "STABLE" and len(c.assignment) == 6, 20, "c alone")
        return ids
    finally:
        for mb in members:
            await mb.close()


def test_text_lines_for_a_consumer_and_a_classic_group(serve):  # noqa: F811
    srv = serve(topics={"t6": 6}, extra_args=FAST + ["--log-format", "text"])
    ids = run(two_groups_form_and_one_member_each_leaves(srv))
    a, b, c, d = (re.escape(ids[n]) for n in "abcd")

    def lines():
        return [ln.split(" groupcoord.groups: ", 1)[1] for ln in srv.stderr_text().splitlines()
                if " INFO groupcoord.groups: " in ln]

    want = [
        # KIP-848: a joins alone, b joins, b leaves
        r"group kc \(consumer\): member %s joined \(epoch 1, client groupcoord-\S+, host \S+\)$"
        % a,
        r"group kc \(consumer\): rebalance started: epoch 1 \(member %s joined\), 1 member$" % a,
        r"group kc \(consumer\): target assignment computed: epoch 1 by assignor uniform, "
        r"1 member, 6 partitions moved$",
        r"group kc \(consumer\): rebalance completed: epoch 1 in \d+ ms, 1 member, "
        r"6 partitions moved$",
        r"group kc \(consumer\): member %s joined \(epoch 2, " % b,
        r"group kc \(consumer\): rebalance started: epoch 2 \(member %s joined\), 2 members$" % b,
        r"group kc \(consumer\): rebalance completed: epoch 2 in \d+ ms, 2 members, "
        r"3 partitions moved$",
        r"group kc \(consumer\): member %s left \(epoch 3\)$" % b,
        r"group kc \(consumer\): rebalance started: epoch 3 \(member %s left\), 1 member$" % b,
        r"group kc \(consumer\): rebalance completed: epoch 3 in \d+ ms, 1 member, "
        r"3 partitions moved$",
        # classic: c forms generation 1, d joins (generation 2), d leaves (generation 3)
        r"group kl \(classic\): member %s joined \(generation 0, client groupcoord-\S+, "
        r"host \S+\)$" % c,
        r"group kl \(classic\): rebalance started: generation 1 \(member %s joined\), "
        r"1 member$" % c,
        r"group kl \(classic\): rebalance completed: generation 1 in \d+ ms, 1 member, "
        r"6 partitions moved$",
        r"group kl \(classic\): member %s joined \(generation 1, " % d,
        r"group kl \(classic\): rebalance started: generation 2 \(member %s joined\), "
        r"2 members$" % d,
        r"group kl \(classic\): rebalance completed: generation %d in \d+ ms, 2 members, "
        r"3 partitions moved$" % ids["kl_gen"],
        r"group kl \(classic\): member %s left \(generation %d\)$" % (d, ids["kl_gen"]),
        r"group kl \(classic\): rebalance started: generation %d \(member %s left\), "
        r"1 member$" % (ids["kl_gen"] + 1, d),
        r"group kl \(classic\): rebalance completed: generation %d in \d+ ms, 1 member, "
        r"3 partitions moved$" % (ids["kl_gen"] + 1),
    ]

    def found():
        got = lines()
        return all(any(re.match(w, ln) for ln in got) for w in want)
    run(until(found, 20, "the lifecycle lines"))
    got = lines()
    # In the order they happened, within each group.
    for grp in ("kc", "kl"):
        mine = [w for w in want if w.startswith(r"group %s " % grp)]
        at = [next(i for i, ln in enumerate(got) if re.match(w, ln)) for w in mine]
        assert at == sorted(at), (grp, got)


def test_json_lines_carry_the_event_fields(serve):  # noqa: F811
    srv = serve(topics={"t6": 6}, extra_args=FAST + ["--log-format", "json"])
    ids = run(two_groups_form_and_one_member_each_leaves(srv))

    def objs():
        out = []
        for ln in srv.stderr_text().splitlines():
            o = json.loads(ln)                      # every line is one JSON object
            assert {"ts", "level", "logger", "message"} <= set(o), o
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["ts"])
            out.append(o)
        return out

    def has(**kw):
        return any(all(o.get(k) == v for k, v in kw.items()) for o in objs())

    wanted = [
        dict(kind="member-joined", group="kc", type="consumer", member=ids["a"], epoch=1),
        dict(kind="rebalance-started", group="kc", type="consumer", epoch=2, reason="join",
             member=ids["b"], members=2),
        dict(kind="rebalance-completed", group="kc", type="consumer", epoch=2, members=2,
             units_moved=3, unit="partitions"),
        dict(kind="member-left", group="kc", type="consumer", member=ids["b"], epoch=3),
        dict(kind="rebalance-started", group="kc", epoch=3, reason="leave", member=ids["b"]),
        dict(kind="member-joined", group="kl", type="classic", member=ids["d"], generation=1),
        dict(kind="rebalance-completed", group="kl", type="classic",
             generation=ids["kl_gen"], members=2, units_moved=3),
        dict(kind="member-left", group="kl", type="classic", member=ids["d"],
             generation=ids["kl_gen"]),
        dict(kind="rebalance-started", group="kl", type="classic",
             generation=ids["kl_gen"] + 1, reason="leave", member=ids["d"], members=1),
    ]
    run(until(lambda: all(has(**w) for w in wanted), 20, "the lifecycle objects"))
    for o in objs():
        if o["logger"] == "groupcoord.groups" and "kind" in o:
            assert o["level"] == "INFO" and o["message"].startswith(
                "group %s (%s): " % (o["group"], o["type"]))
            assert isinstance(o.get("duration_ms", 0), int)
            if o["type"] == "classic":
                assert "epoch" not in o
    # Other loggers' lines are JSON too (the listening line's logger, for one).
    assert any(o["logger"] != "groupcoord.groups" for o in objs())


# ============================================================================ rate limit
class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def writer(**kw):
    """A LifecycleLog on a private logger (INFO) whose records are kept."""
    lg = logging.getLogger("test.lifecycle.%d" % id(kw))
    lg.propagate = False
    lg.setLevel(logging.INFO)
    lines = Lines()
    lg.handlers[:] = [lines]
    return LifecycleLog(lg, **kw), lines


def storm_join(group, i):
    return m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="m-%05d" % i, member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], topic_partitions=[])


def test_a_join_storm_writes_a_bounded_number_of_lines_and_a_summary(tmp_path):
    n = 10_000
    out, lines = writer(per_group=5, overall=100, window_s=3600)

    async def main():
        # Assignment batching on (Kafka's default interval): a storm computes few targets.
        shards = ShardSet(RuntimeConfig(data_dir=str(tmp_path), shards=1, fsync="unsafe-no-fsync",
                                        shard_config=ShardConfig()),
                          topics=TopicCatalog.of(t=64))
        await shards.start()
        try:
            for rt in shards.shards:
                rt.lifecycle = out          # the write path hands it every Result's events
            resps = await asyncio.gather(*(shards.submit(storm_join("storm", i), 1)
                                           for i in range(n)))
            assert all(r.error_code == 0 for r in resps)
        finally:
            await shards.close()
    run(main(), timeout=300)
    written = [r for r in lines.records if "lifecycle" in r.__dict__]
    joined = [r for r in written if r.lifecycle.get("kind") == lc.MEMBER_JOINED]
    started = [r for r in written if r.lifecycle.get("kind") == lc.REBALANCE_STARTED]
    assert len(joined) == 5 and len(started) == 5
    assert len(written) <= 5 * len(lc.KINDS)
    out.flush()                                     # the window's end: the summary
    summary = {r.lifecycle["kind"]: r.lifecycle["suppressed"] for r in lines.records
               if "suppressed" in r.lifecycle}
    assert summary[lc.MEMBER_JOINED] == n - 5 and summary[lc.REBALANCE_STARTED] == n - 5
    msgs = [r.getMessage() for r in lines.records]
    assert 'group storm (consumer): %d more "member-joined" lines suppressed (rate limit: 5 ' \
           'lines per group and kind, 100 in all, per 3600 s)' % (n - 5) in msgs
    assert out.lines + out.suppressed == len(written) + sum(summary.values())
    assert len(lines.records) <= 5 * len(lc.KINDS) + len(lc.KINDS)


def test_one_join_in_each_of_many_groups_is_capped_overall():
    out, lines = writer(per_group=5, overall=100, window_s=3600)
    out.write([lc.Event(kind=lc.MEMBER_JOINED, group="g%04d" % i, type="consumer",
                        member="m", epoch=1) for i in range(1000)])
    assert out.lines == 100 and out.suppressed == 900
    out.flush()
    tail = [r.getMessage() for r in lines.records[100:]]
    # The 20 largest counts by name, then one line for the rest.
    assert len(tail) == LifecycleLog.MAX_SUMMARIES + 1
    assert tail[-1].startswith("lifecycle log: 880 more lines of 880 more groups and kinds "
                               "suppressed")
    # A new window writes again.
    out.write([lc.Event(kind=lc.MEMBER_LEFT, group="g0000", type="consumer", member="m")])
    assert out.lines == 101


def test_the_summary_comes_when_the_window_ends_on_a_running_loop():
    out, lines = writer(per_group=1, overall=100, window_s=0.05)

    async def main():
        out.write([lc.Event(kind=lc.MEMBER_JOINED, group="g", type="consumer", member=str(i))
                   for i in range(3)])
        assert out.suppressed == 2
        await until(lambda: any("suppressed" in r.getMessage() for r in lines.records), 10,
                    "the summary line")
    run(main())
    assert lines.records[-1].getMessage().startswith(
        'group g (consumer): 2 more "member-joined" lines suppressed')


def test_nothing_is_written_or_counted_below_info():
    out, lines = writer()
    out.logger.setLevel(logging.WARNING)
    out.write([lc.Event(kind=lc.MEMBER_JOINED, group="g", type="consumer", member="m")] * 50)
    assert lines.records == [] and out.lines == out.suppressed == 0


def test_json_formatter_and_hostile_ids():
    ev = lc.Event(kind=lc.MEMBER_JOINED, group='evil\ngroup "x"', type="classic", member="m 1",
                  epoch=4, instance="i", client="c", host="/h")
    out, lines = writer()
    out.write([ev])
    rec = lines.records[0]
    text = rec.getMessage()
    assert "\n" not in text and text.startswith('group "evil\\ngroup \\"x\\"" (classic): '
                                                'member "m 1" joined (generation 4, instance i')
    o = json.loads(JsonFormatter(node=2).format(rec))
    assert o["group"] == 'evil\ngroup "x"' and o["generation"] == 4 and o["node"] == 2
    assert o["logger"] == out.logger.name and o["level"] == "INFO" and o["message"] == text
    assert "epoch" not in o and "duration_ms" not in o          # defaults are left out


@pytest.mark.parametrize("kind", lc.KINDS)
def test_every_kind_has_its_own_words(kind):
    ev = lc.Event(kind=kind, group="g", type="connect", member="w", epoch=2, members=2,
                  units_moved=1, unit="connectors/tasks", worker="w", assignor="a",
                  offsets=2, topics=("t",), duration_ms=5, reason="leave", instance="i",
                  previous="w0", client="c", host="h")
    text = render(ev)
    # Not the fallback (the kind's name and the event as JSON).
    assert text.startswith("group g (connect): ") and kind not in text and "{" not in text
