"""groupcoord.integrations' assignors beside the client library's own, in the same run:
kafka-python 3.0.12 and aiokafka 0.14.0 (docs/embedding.md).

Opt-in only (the project's testpaths is tests/ and its addopts disable benchmarks):

    PYTHONPATH=src python -m pytest benchmarks/bench_integrations.py --benchmark-enable \\
        -p no:cacheprovider --benchmark-json=integrations.json
    python benchmarks/bench_integrations.py --table integrations.json   # markdown table

Shape: 10k partitions (100 topics x 100) x 1000 members, everyone subscribed to every topic,
member ids sorting as their index.
  * FULL      a new group: nobody owns anything.
  * JOIN_ONE  999 members own a balanced assignment received in generation 1 (the same one
              for every implementation: ours for 999 members), each reporting it the way its
              own assignor does (user data, owned partitions); member 1000 joins.

Timed: one ``assign(cluster, members)`` of the leader on the members' metadata as its client
decodes it off the wire (kafka-python: JoinGroup members with a decoded
ConsumerProtocolSubscription; aiokafka: member id -> decoded v0 metadata), assignment objects
out; so both sides decode their own user data inside the timing. ``moved``: partitions an
old member had before and not after (the partitions that change owner; cooperative
assignors withhold them this round, eager ones hand them over at once); "before" is the
previous assignment the members report (sticky family), or the same leader's answer for the
999 members alone (range and roundrobin, which read none).

Which own assignor each adapter is compared with: the same protocol name; for
groupcoord-optimal, the client's closest one (kafka-python: cooperative-sticky; aiokafka:
sticky), whose rows are reused by the table. kafka-python's and aiokafka's sticky executors
take 10-20 s per call here: one round each, ours 20-50 rounds.
"""
import json
import logging
import sys
from collections import namedtuple

import numpy as np
import pytest

pytestmark = [pytest.mark.perf, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

T, P, M = 100, 100, 1000
TOPICS = ["t%03d" % t for t in range(T)]
OURS, THEIRS = "groupcoord", "client"
KMember = namedtuple("KMember", "member_id group_instance_id metadata")
GENERATION = 1

# (client, protocol) -> (the client's own assignor module path, class name) it is compared with
OWN = {
    ("kafka-python", "range"): ("kafka.coordinator.assignors.range", "RangePartitionAssignor"),
    ("kafka-python", "roundrobin"): ("kafka.coordinator.assignors.roundrobin",
                                     "RoundRobinPartitionAssignor"),
    ("kafka-python", "sticky"): ("kafka.coordinator.assignors.sticky.sticky_assignor",
                                 "StickyPartitionAssignor"),
    ("kafka-python", "cooperative-sticky"): ("kafka.coordinator.assignors.cooperative_sticky",
                                             "CooperativeStickyAssignor"),
    ("aiokafka", "range"): ("aiokafka.coordinator.assignors.range", "RangePartitionAssignor"),
    ("aiokafka", "roundrobin"): ("aiokafka.coordinator.assignors.roundrobin",
                                 "RoundRobinPartitionAssignor"),
    ("aiokafka", "sticky"): ("aiokafka.coordinator.assignors.sticky.sticky_assignor",
                             "StickyPartitionAssignor"),
}
CLOSEST = {("kafka-python", "groupcoord-optimal"): "cooperative-sticky",
           ("aiokafka", "groupcoord-optimal"): "sticky"}


class Cluster:
    def topics(self, exclude_internal_topics=True):
        return list(TOPICS)

    def partitions_for_topic(self, topic):
        return set(range(P)) if topic in TOPICS else None


def _own_class(client, protocol):
    import importlib
    mod, name = OWN[(client, protocol)]
    return getattr(importlib.import_module(mod), name)


def _our_class(client, protocol):
    if client == "kafka-python":
        from groupcoord.integrations import kafka_python as mod
    else:
        from groupcoord.integrations import aiokafka as mod
    return mod.ASSIGNORS[protocol]


def _mid(i):
    return "member-%04d" % i


_PREV = {}


def previous_runs():
    """The balanced assignment of 999 members every JOIN_ONE starts from, per member as sorted
    (topic, partitions) runs: ours (groupcoord.integrations.arrays, sticky, fresh)."""
    if "runs" not in _PREV:
        from groupcoord import integrations as gi
        owner = gi.assign("sticky", np.full(T, P), [list(range(T))] * (M - 1)).owner
        runs = [[] for _ in range(M - 1)]
        for u in np.argsort(owner, kind="stable"):
            m, t, p = int(owner[u]), int(u) // P, int(u) % P
            if runs[m] and runs[m][-1][0] == TOPICS[t]:
                runs[m][-1][1].append(p)
            else:
                runs[m].append((TOPICS[t], [p]))
        _PREV["runs"] = runs
    return _PREV["runs"]


def _encoded_metadata(client, cls, runs):
    """The JoinGroup metadata bytes a member sends after receiving ``runs`` (None: new)."""
    if client == "kafka-python":
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KA
        a = cls()
        if runs is not None:
            a.on_assignment(KA.decode(KA(0, runs, b"").encode()), GENERATION)
        md = a.metadata(set(TOPICS))
    else:
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment as AA
        a = cls()                 # aiokafka's own sticky keeps its state on the class
        if runs is not None:
            # (aiokafka never calls its own sticky's on_generation_assignment: it reports -1)
            a.on_assignment(AA(0, runs, GENERATION.to_bytes(4, "big")))
            md = a.metadata(set(TOPICS))
            if hasattr(cls, "member_assignment"):        # reset aiokafka's class state
                cls.member_assignment, cls.generation = None, -1
        else:
            md = a.metadata(set(TOPICS))
    return md if isinstance(md, bytes) else md.encode()


def members_for(client, cls, scenario):
    """The leader's input: every member's metadata decoded as its client decodes it."""
    prev = previous_runs() if scenario == "JOIN_ONE" else [None] * M
    raw = [_encoded_metadata(client, cls, prev[i] if i < len(prev) else None)
           for i in range(M)]
    if client == "kafka-python":
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KS
        return [KMember(_mid(i), None, KS.decode(r)) for i, r in enumerate(raw)]
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata as AM
    return {_mid(i): AM.decode(r) for i, r in enumerate(raw)}


def _runs_of(a):
    runs = getattr(a, "assigned_partitions", None)
    if runs is None:
        runs = a.assignment
    return [(t, list(p)) for t, p in runs]


def owners(out, n):
    """A leader's answer -> (counts per member, {(topic, partition): member})."""
    counts = np.zeros(n, np.int64)
    owner = {}
    for i in range(n):
        for t, ps in _runs_of(out[_mid(i)]):
            counts[i] += len(ps)
            for p in ps:
                assert (t, p) not in owner, "assigned twice"
                owner[(t, p)] = i
    return counts, owner


def before_join(protocol, leader, members):
    """What the 999 members had before the join, {(topic, partition): member}: for the sticky
    family the common previous assignment they report; range and roundrobin read no
    previous assignment, so theirs is the same leader's answer for the 999 alone."""
    if protocol in ("range", "roundrobin"):
        old = members[:M - 1] if isinstance(members, list) else dict(
            list(members.items())[:M - 1])
        return owners(leader.assign(Cluster(), old), M - 1)[1]
    return {(t, p): i for i, runs in enumerate(previous_runs()) for t, ps in runs for p in ps}


def outcome(out, scenario, prev):
    """-> (counts per member, moved): the result checked and the partitions that move."""
    counts, owner = owners(out, M)
    moved = 0
    if scenario == "JOIN_ONE":
        moved = sum(1 for tp, i in prev.items() if owner.get(tp) != i)
    return counts, moved


def _check(client, protocol, scenario, counts, moved, impl):
    if protocol == "range":         # 100 partitions a topic over 1000 members: the first 100
        assert counts[:100].tolist() == [100] * 100 and not counts[100:].any()
        assert moved == 0           # the newcomer sorts last: the ranges stay where they were
        return
    withheld = scenario == "JOIN_ONE" and (protocol == "cooperative-sticky" or (
        protocol == "groupcoord-optimal" and client == "kafka-python"))
    if withheld:                    # cooperative: what moves waits for its owner's revocation
        assert counts.sum() + moved == T * P and counts[-1] == 0
    else:
        assert counts.max() - counts.min() <= 1 and counts.sum() == T * P
    if impl == OURS and scenario == "JOIN_ONE" and protocol != "roundrobin":
        assert moved == T * P // M                  # the newcomer's share, and nothing else


CASES = [(c, p) for c, p in list(OWN) + list(CLOSEST)]


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)        # the clients' sticky executors log per conflict
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("scenario", ["FULL", "JOIN_ONE"])
@pytest.mark.parametrize("client,protocol", CASES, ids=lambda x: x)
def test_ours(benchmark, client, protocol, scenario):
    cls = _our_class(client, protocol)
    members = members_for(client, cls, scenario)
    leader = cls()
    prev = before_join(protocol, leader, members) if scenario == "JOIN_ONE" else None
    counts, moved = outcome(leader.assign(Cluster(), members), scenario, prev)
    _check(client, protocol, scenario, counts, moved, OURS)
    benchmark.group = "%s %s %s" % (client, protocol, scenario)
    benchmark.extra_info.update(impl=OURS, client=client, protocol=protocol,
                                scenario=scenario, moved=moved)
    benchmark.pedantic(leader.assign, args=(Cluster(), members), rounds=20, iterations=1,
                       warmup_rounds=2)


@pytest.mark.parametrize("scenario", ["FULL", "JOIN_ONE"])
@pytest.mark.parametrize("client,protocol", list(OWN), ids=lambda x: x)
def test_theirs(benchmark, client, protocol, scenario):
    cls = _own_class(client, protocol)
    members = members_for(client, cls, scenario)
    leader = cls()
    result = {}

    def run():
        result["out"] = leader.assign(Cluster(), members)
    slow = protocol in ("sticky", "cooperative-sticky")
    benchmark.group = "%s %s %s" % (client, protocol, scenario)
    benchmark.extra_info.update(impl=THEIRS, client=client, protocol=protocol,
                                scenario=scenario, own=cls.__name__)
    benchmark.pedantic(run, rounds=1 if slow else 5, iterations=1)
    prev = before_join(protocol, leader, members) if scenario == "JOIN_ONE" else None
    counts, moved = outcome(result["out"], scenario, prev)
    _check(client, protocol, scenario, counts, moved, THEIRS)
    benchmark.extra_info["moved"] = moved


# ----------------------------------------------------------------------------- table

def table(path: str) -> str:
    """Markdown table from a --benchmark-json file: per (client, protocol, scenario) ours
    median (min), the client's own median, their ratio, and the partitions moved by each."""
    data = json.load(open(path))
    rows = {}
    for b in data["benchmarks"]:
        e = b["extra_info"]
        rows.setdefault((e["client"], e["protocol"], e["scenario"]), {})[e["impl"]] = (
            b["stats"], e)

    def t(v):
        return "%.2f s" % v if v >= 1 else "%.1f ms" % (v * 1e3)
    out = ["| client | assignor | scenario | ours median (min) | client's own | own median "
           "| ratio | moved ours | moved own |",
           "|---|---|---|---:|---|---:|---:|---:|---:|"]
    for key in sorted(rows, key=lambda k: (k[0], [p for _, p in CASES].index(k[1]), k[2])):
        client, protocol, scenario = key
        ours = rows[key].get(OURS)
        theirs = rows[key].get(THEIRS) or rows.get(
            (client, CLOSEST.get((client, protocol)), scenario), {}).get(THEIRS)
        if ours is None:
            continue
        so, eo = ours
        cells = [client, protocol, scenario, "%s (%s)" % (t(so["median"]), t(so["min"]))]
        if theirs is not None:
            st, et = theirs
            cells += [et["own"], t(st["median"]), "%.0fx" % (st["median"] / so["median"])]
        else:
            cells += ["", "", ""]
        cells += [str(eo["moved"]) if scenario == "JOIN_ONE" else "",
                  str(theirs[1]["moved"]) if theirs and scenario == "JOIN_ONE" else ""]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    else:
        print(__doc__)
