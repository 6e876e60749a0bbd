"""Authorizer decision cost (security/acl.py): the cached hit a heartbeat pays, and the
uncached decision over 10k ACLs, beside baselines measured in the same run.

    PYTHONPATH=src python -m pytest benchmarks/bench_authorizer.py --benchmark-enable \\
        -p no:cacheprovider --benchmark-json=authorizer.json
    python benchmarks/bench_authorizer.py --table authorizer.json     # markdown table

ACLs (10,000): 5,000 literal GROUP READ ACLs (group-00000.. for User:u0000..), 2,000 literal
TOPIC READ ACLs, 2,500 prefixed GROUP ACLs in 8 forms (team-N-, app.N., ...; 13 distinct
prefix lengths), 495 prefixed TOPIC ACLs, 4 DENY ACLs and a wildcard literal TOPIC ACL.

Every timed call runs the same 1,000 heartbeat-shaped questions (principal, host, READ,
GROUP, group name): 1/3 literal hits, 1/3 prefixed hits, 1/3 denied (a principal without an
ACL on a covered group); the table divides by 1,000. Rows:
  loop only              the harness: iterate and unpack the 1,000 questions, nothing else
  dict.get (baseline)    the same loop building the 5-tuple key and looking it up in a dict
                         holding every answer: the floor for any cached decision
  authorize, cached      Authorizer.authorize, every answer already cached (the hot path)
  authorize, cache off   authorize with cache_limit=0: key + lookup + the full decision
  decide, 10k ACLs       the uncached decision (literal + wildcard + prefix probes)
  decide, miss           names no ACL covers (allow_if_no_acl): every prefix length probed
  decide, no ACLs        an Authorizer without ACLs, allow_if_no_acl=True: the no-ACL path
and set_acls(10k) (index build) per ACL in a group of its own.
"""
import json
import sys

import pytest

from groupcoord.security.acl import (AclBinding, AclOperation, AclPermissionType, Authorizer,
                                     PatternType, ResourceType)

pytestmark = pytest.mark.perf

N_QUERIES = 1000
HOST = "10.1.2.3"
RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, AclPermissionType
PREFIX_FORMS = ("t%d-", "team-%d-", "app.%d.", "svc_%03d_", "tenant-%04d/", "x%05d",
                "project-%d-grp-", "org.example.%d.")       # 13 distinct lengths in all


def make_acls():
    acls = []
    for i in range(5000):
        acls.append(AclBinding(RT.GROUP, "group-%05d" % i, PT.LITERAL, "User:u%04d" % (i % 2000),
                               "*", OP.READ, PERM.ALLOW))
    for i in range(2000):
        acls.append(AclBinding(RT.TOPIC, "topic-%05d" % i, PT.LITERAL, "User:u%04d" % i, "*",
                               OP.READ, PERM.ALLOW))
    for i in range(2500):
        acls.append(AclBinding(RT.GROUP, PREFIX_FORMS[i % 8] % i, PT.PREFIXED,
                               "User:p%04d" % i, "*", OP.READ, PERM.ALLOW))
    for i in range(495):
        acls.append(AclBinding(RT.TOPIC, "feed-%d-" % i, PT.PREFIXED, "User:p%04d" % i, "*",
                               OP.READ, PERM.ALLOW))
    acls += [AclBinding(RT.GROUP, "group-0000", PT.PREFIXED, "User:evil", "*", OP.ALL,
                        PERM.DENY),
             AclBinding(RT.GROUP, "team-", PT.PREFIXED, "User:evil", "*", OP.ALL, PERM.DENY),
             AclBinding(RT.TOPIC, "*", PT.LITERAL, "User:*", "*", OP.DESCRIBE, PERM.ALLOW),
             AclBinding(RT.CLUSTER, "kafka-cluster", PT.LITERAL, "User:evil", "*", OP.ALL,
                        PERM.DENY),
             AclBinding(RT.TOPIC, "topic-", PT.PREFIXED, "User:evil", "*", OP.ALL, PERM.DENY)]
    assert len(acls) == 10_000
    return acls


def make_queries():
    qs = []
    for j in range(N_QUERIES):
        i = (j * 7919) % 2500
        if j % 3 == 0:                      # literal hit
            g = i * 2
            qs.append(("User:u%04d" % (g % 2000), HOST, OP.READ, RT.GROUP, "group-%05d" % g))
        elif j % 3 == 1:                    # prefixed hit: a member group under the prefix
            qs.append(("User:p%04d" % i, HOST, OP.READ, RT.GROUP,
                       (PREFIX_FORMS[i % 8] % i) + "consumers"))
        else:                               # ACLs on the group, none for this principal
            qs.append(("User:nobody", HOST, OP.READ, RT.GROUP, "group-%05d" % i))
    return qs


def make_misses():
    return [("User:u%04d" % j, HOST, OP.READ, RT.GROUP, "free-group-%05d" % j)
            for j in range(N_QUERIES)]


@pytest.fixture(scope="module")
def world():
    acls = make_acls()
    az = Authorizer(["User:admin"], allow_if_no_acl=False)
    az.set_acls(acls)
    qs = make_queries()
    answers = [az.decide(*q) for q in qs]
    # the questions are the intended mix: two thirds allowed, one third denied
    assert sum(answers) == sum(1 for j in range(N_QUERIES) if j % 3 != 2)
    return acls, az, qs, answers


def loop_only(qs):
    for p, h, op, rt, n in qs:
        pass


def loop_dict(get, qs):
    for p, h, op, rt, n in qs:
        get((p, h, op, rt, n))


def loop_call(fn, qs):
    for p, h, op, rt, n in qs:
        fn(p, h, op, rt, n)


def _bench(benchmark, name, fn, *args):
    benchmark.group = "per 1,000 decisions"
    benchmark.extra_info.update(case=name, per=N_QUERIES)
    benchmark.pedantic(fn, args=args, rounds=200, iterations=1, warmup_rounds=5)


def test_loop_only(benchmark, world):
    _bench(benchmark, "loop only", loop_only, world[2])


def test_dict_get_baseline(benchmark, world):
    _, _, qs, answers = world
    d = {q: a for q, a in zip(qs, answers)}
    _bench(benchmark, "dict.get (baseline)", loop_dict, d.get, qs)


def test_authorize_cached(benchmark, world):
    _, az, qs, answers = world
    assert [az.authorize(*q) for q in qs] == answers          # warm and check the cache
    _bench(benchmark, "authorize, cached", loop_call, az.authorize, qs)
    assert len(az._cache) == N_QUERIES


def test_authorize_cache_off(benchmark, world):
    acls, _, qs, answers = world
    az = Authorizer(["User:admin"], cache_limit=0)
    az.set_acls(acls)
    assert [az.authorize(*q) for q in qs] == answers
    _bench(benchmark, "authorize, cache off (10k ACLs)", loop_call, az.authorize, qs)


def test_decide(benchmark, world):
    _, az, qs, answers = world
    assert [az.decide(*q) for q in qs] == answers
    _bench(benchmark, "decide, 10k ACLs", loop_call, az.decide, qs)


def test_decide_miss(benchmark, world):
    acls = world[0]
    az = Authorizer(allow_if_no_acl=True)
    az.set_acls(acls)
    misses = make_misses()
    assert all(az.decide(*q) for q in misses)                 # allowed: no ACL on them
    _bench(benchmark, "decide, miss (no ACL on the group, 10k ACLs)", loop_call, az.decide,
           misses)


def test_decide_no_acls(benchmark, world):
    az = Authorizer(allow_if_no_acl=True)
    assert all(az.decide(*q) for q in world[2])
    _bench(benchmark, "decide, no ACLs (allow_if_no_acl)", loop_call, az.decide, world[2])


def test_set_acls(benchmark, world):
    acls = world[0]
    az = Authorizer()
    benchmark.group = "set_acls"
    benchmark.extra_info.update(case="set_acls(10k ACLs)", per=len(acls))
    benchmark.pedantic(az.set_acls, args=(acls,), rounds=20, iterations=1, warmup_rounds=1)
    assert az.acl_count == len(acls)


# ----------------------------------------------------------------------------- table

def table(path: str) -> str:
    """Markdown table from a --benchmark-json file: ns per decision (median, min) and the
    ratio of each median to the dict.get baseline's."""
    data = json.load(open(path))
    rows = {b["extra_info"]["case"]: b for b in data["benchmarks"]}
    base = rows["dict.get (baseline)"]
    base_ns = base["stats"]["median"] / base["extra_info"]["per"] * 1e9
    out = ["| case | ns / decision, median (min) | vs dict.get baseline |",
           "|---|---:|---:|"]
    for case, b in rows.items():
        per = b["extra_info"]["per"]
        med = b["stats"]["median"] / per * 1e9
        lo = b["stats"]["min"] / per * 1e9
        unit = "per ACL" if b["group"] == "set_acls" else ""
        ratio = "" if unit else "%.2fx" % (med / base_ns)
        out.append("| %s | %.0f (%.0f)%s | %s |" % (case, med, lo, " " + unit if unit else "",
                                                    ratio))
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    else:
        print(__doc__)
