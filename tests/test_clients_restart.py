"""Groups survive a restart of `groupcoord serve`.

A KIP-848 consumer group survives `kill -9` of `groupcoord serve` and a restart on the same
data dir and port: the members keep their member ids and epochs (ConsumerGroupDescribe
before and after, sent with our own codec), and the librdkafka consumers carry on without a
rebalance (no assign/revoke/lost callback, rebalance count unchanged) and can still commit
with their member epoch. A classic group (kafka-python BaseCoordinator members) survives the
same way: same member ids and generation, heartbeats answered NONE, no rejoin.
See docs/clients.md."""
import json
import time

import pytest

from serve_proc import RawClient, describe_consumer_group, serve  # noqa: F401  (fixture)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402

from test_clients_confluent import (Recorder, kip848_consumer, poll_all,  # noqa: E402
                                    stable_ownership)

TOPIC = "rs-six"
GROUP = "rs-848"


class Stats:
    """librdkafka statistics (statistics.interval.ms) per consumer: the latest JSON."""

    def __init__(self):
        self.latest = {}

    def cb(self, name):
        def on_stats(raw):
            self.latest[name] = json.loads(raw)
        return on_stats

    def rebalances(self, name):
        return self.latest[name]["cgrp"]["rebalance_cnt"]

    def coordinator(self, name):
        return self.latest[name]["brokers"]["GroupCoordinator"]

    def heartbeats(self, name):
        """ConsumerGroupHeartbeat requests sent to the coordinator. librdkafka's per-type
        table ("req") has no entry for that API, so: all requests sent ("tx") less the
        ones the table counts."""
        b = self.coordinator(name)
        return b["tx"] - sum(b["req"].values())

    def connects(self, name):
        return self.coordinator(name)["connects"]


def _members(group):
    return {m.member_id: m.member_epoch for m in group.members}


def test_kip848_group_survives_kill9_restart(serve):
    srv = serve(topics={TOPIC: 6})
    rec, stats = Recorder(), Stats()
    consumers, names = [], ["r-%d" % i for i in range(3)]
    try:
        for name in names:
            c = kip848_consumer(srv.bootstrap, GROUP, name, rec, TOPIC,
                                extra={"statistics.interval.ms": 200,
                                       "stats_cb": stats.cb(name)})
            consumers.append(c)
        owned = stable_ownership(consumers, 6, TOPIC, [2, 2, 2], what="3 members balanced")
        poll_all(consumers, until=lambda: all(n in stats.latest for n in names),
                 timeout=10, what="statistics")

        before = describe_consumer_group(srv.host, srv.port, GROUP)
        assert before.error_code == 0, before
        members_before = _members(before)
        assert len(members_before) == 3
        assert all(e > 0 for e in members_before.values())
        rebalances_before = {n: stats.rebalances(n) for n in names}
        events_before = len(rec.events)

        srv.restart(kill9=True)

        after = describe_consumer_group(srv.host, srv.port, GROUP)
        assert after.error_code == 0, after
        assert _members(after) == members_before          # same ids, same epochs
        assert after.group_epoch == before.group_epoch
        assert after.assignment_epoch == before.assignment_epoch

        # the clients reconnect and heartbeat again with their old ids and epochs
        # (one right after the reconnect, one a heartbeat interval later)
        hb0 = {n: stats.heartbeats(n) for n in names}
        conn0 = {n: stats.connects(n) for n in names}
        poll_all(consumers, timeout=30, what="heartbeats after the restart",
                 until=lambda: all(stats.connects(n) > conn0[n]
                                   and stats.heartbeats(n) >= hb0[n] + 2 for n in names))
        # a commit carries the member id and epoch: the restarted coordinator accepts it
        for c, parts in zip(consumers, owned):
            c.commit(offsets=[TopicPartition(TOPIC, p, 500 + p) for p in parts],
                     asynchronous=False)
        poll_all(consumers, seconds=1.0)

        assert len(rec.events) == events_before, rec.events[events_before:]
        assert {n: stats.rebalances(n) for n in names} == rebalances_before
        assert owned_now(consumers) == owned
        final = describe_consumer_group(srv.host, srv.port, GROUP)
        assert _members(final) == members_before
        got = consumers[0].committed([TopicPartition(TOPIC, p) for p in range(6)], timeout=10)
        assert [tp.offset for tp in got] == [500 + p for p in range(6)]
    finally:
        for c in consumers:
            c.close()


def owned_now(consumers):
    return [frozenset(tp.partition for tp in c.assignment()) for c in consumers]


def _describe_classic(host, port, group, timeout=10.0):
    from groupcoord.protocol import DescribeGroupsRequest
    deadline = time.monotonic() + timeout
    while True:
        try:
            with RawClient(host, port) as c:
                g = c.call(DescribeGroupsRequest(groups=[group]), 5).groups[0]
            if g.error_code not in (14, 15) or time.monotonic() > deadline:
                return g
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def test_classic_group_survives_kill9_restart(serve):
    from test_clients_kafka_python import Member, _wait_converged
    srv = serve()
    members = []
    try:
        for name in ("a", "b", "c"):
            members.append(Member(srv.bootstrap, "work-restart", name))
        gen = _wait_converged(members, 3)
        ids = sorted(m.coord.last_join()[1] for m in members)
        joins = [len(m.coord.joins) for m in members]
        before = _describe_classic(srv.host, srv.port, "work-restart")
        assert before.error_code == 0 and before.group_state == "Stable", before
        assert sorted(x.member_id for x in before.members) == ids

        srv.restart(kill9=True)
        t_up = time.monotonic()

        after = _describe_classic(srv.host, srv.port, "work-restart")
        assert after.error_code == 0 and after.group_state == "Stable", after
        assert sorted(x.member_id for x in after.members) == ids
        # every member heartbeats the restarted node with its old id and generation: NONE
        deadline = time.monotonic() + 20
        while not all(sum(1 for t, e in m.coord.heartbeats if t > t_up and e == 0) >= 2
                      for m in members):
            assert time.monotonic() < deadline, [m.coord.heartbeats[-5:] for m in members]
            time.sleep(0.05)
        for m in members:
            assert [e for t, e in m.coord.heartbeats if t > t_up] == \
                [0] * len([t for t, e in m.coord.heartbeats if t > t_up])
            assert m.error is None
        assert [len(m.coord.joins) for m in members] == joins     # no rejoin
        assert _converged(members) == gen
    finally:
        for m in members:
            m.close()


def _converged(members):
    from test_clients_kafka_python import _converged as conv
    return conv(members, len(members))
