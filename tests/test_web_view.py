"""The web view on the metrics port (server/web.py, server/group_view.py).

e2e: a real `groupcoord serve --metrics-port 0`, a KIP-848 group and a classic group formed by
the SDK members, and Debian's chromium (headless, driven by Selenium through chromedriver):
the group list shows both groups, each group page shows each member's partitions, and after a
member leaves, the page (refreshed by its own script, never reloaded) shows the rebalance in
the timeline. Screenshots of both pages are saved as test artefacts
($GROUPCOORD_TEST_ARTIFACTS, else <tmp>/groupcoord-test-artifacts).

integration: HTTP basic authentication against the node's SCRAM users on a node with a SASL
listener.

unit (in process, on a Shard driven through the coordinator harness or groups built by
replay's own mutators): hostile ids escaped everywhere, ids with '/', '?', '..' linked and read
back, the list and member pages bounded for 10k groups and a 10k-member group, the history
bounded, the timeline of a leave, rendering changes nothing of the groups, basic auth (cache,
credential change) and the ACL filter.
"""
import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from coord_harness import Harness
from coord_drivers import classic_join, connect_hb
from groupcoord.groups import lifecycle as lc
from groupcoord.groups.classic.group import Member as ClassicMemberState, new_empty_group
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.embedded import encode_assignment
from groupcoord.runtime.shard_state import ShardState
from groupcoord.security.acl import (AclBinding, AclOperation, AclPermissionType, PatternType,
                                     ResourceType)
from groupcoord.security.scram import make_credential
from groupcoord.server import group_view as gv
from groupcoord.server import web
from groupcoord.server.access import AuthFailureLog, NodeAccess
from groupcoord.server.http import HttpRequest
from groupcoord.server.listeners import SecurityConfig
from serve_proc import ServeProc, package_root, serve, wait_until  # noqa: F401 (fixture)

BOUND_S = 60.0                  # bound on every wait (no timing is asserted)
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE = '<script>alert("x")</script>\'"&<img src=x onerror=alert(1)>'


def artefacts_dir() -> str:
    d = os.environ.get("GROUPCOORD_TEST_ARTIFACTS") or os.path.join(
        tempfile.gettempdir(), "groupcoord-test-artifacts")
    os.makedirs(d, exist_ok=True)
    return d


def ranges(nums) -> str:
    """The test's own "0-2,5" (not the module's)."""
    nums = sorted(nums)
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else "%d-%d" % (nums[i], nums[j]))
        i = j + 1
    return ",".join(out)


def parts_text(tps) -> str:
    by = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return "; ".join("%s %s" % (t, ranges(ps)) for t, ps in sorted(by.items()))


# =========================================================================== in process
TOPICS = TopicCatalog.of(web=6)


class FakeRt:
    def __init__(self, shard, index=0):
        self.index, self.shard, self.state = index, shard, ShardState.ACTIVE


class FakeShards:
    """What group_view reads of a ShardSet: its runtimes and where a group lives."""

    def __init__(self, *shards):
        self.shards = [FakeRt(s, i) for i, s in enumerate(shards)]

    def shard_of(self, gid):
        for rt in self.shards:
            if gid in rt.shard.groups:
                return rt.index
        return 0


def req(path, peer="10.1.2.3:5555", headers=None, **query):
    return HttpRequest("GET", path, {k: [v] for k, v in query.items()}, headers or {}, peer)


def run(coro):
    return asyncio.run(coro)


class Recorder:
    """The harness, with the history fed as the runtime feeds it (after each apply)."""

    def __init__(self, clock):
        self.h = Harness(ShardConfig(consumer_assignment_interval_ms=0,
                                     group_initial_rebalance_delay_ms=0), TOPICS)
        self.history = gv.GroupHistory(clock=clock)
        self.rt = FakeRt(self.h.shard)
        apply = self.h._apply

        def fed(res):
            apply(res)
            if res.events:
                self.history.note(self.rt, res.events)
        self.h._apply = fed


class Member:
    """A KIP-848 member reporting what it was last given."""

    def __init__(self, h, gid, mid, client="cli"):
        self.h, self.gid, self.mid, self.client = h, gid, mid, client
        self.epoch, self.owned = 0, []

    def hb(self, **kw):
        args = dict(group_id=self.gid, member_id=self.mid, member_epoch=self.epoch,
                    topic_partitions=self.owned)
        if self.epoch == 0:
            args.update(rebalance_timeout_ms=30_000, subscribed_topic_names=["web"],
                        topic_partitions=[])
        args.update(kw)
        q = m.ConsumerGroupHeartbeatRequest(**args)
        h = self.h
        res = h._pure(lambda: h.shard.handle(q, h.now, 1, self.client, "/10.0.0.1"))
        h._apply(res)
        r = res.response
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = [m.ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=tp.topic_id, partitions=list(tp.partitions))
                for tp in r.assignment.topic_partitions]
        return r


def converge(h, members, gid):
    for _ in range(10):
        for mb in members:
            mb.hb()
        if h.shard.groups[gid].state_name() == "Stable":
            return
    raise AssertionError("no convergence")


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of <script> elements."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in_script = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def assert_inert(html_text: str):
    """No markup but ours: one script (ours), no event handler attribute, no <img>."""
    p = Elements()
    p.feed(html_text)
    assert [t for t, _ in p.tags].count("script") <= 1
    assert all(s == web._SCRIPT for s in p.scripts)
    for tag, attrs in p.tags:
        assert tag != "img", attrs
        assert not any(k.lower().startswith("on") for k in attrs), (tag, attrs)
    assert "<script>alert" not in html_text and "<img src=x" not in html_text


@pytest.mark.unit
def test_hostile_ids_are_escaped_in_the_list_the_group_page_and_the_timeline():
    clock = [1_700_000_000.0]
    rec = Recorder(lambda: clock[0])
    h = rec.h
    gid = "g" + HOSTILE
    # A KIP-848 group whose id, member id, client id and instance id are hostile.
    a = Member(h, gid, "m1" + HOSTILE)
    a.hb(instance_id="i" + HOSTILE)
    converge(h, [a], gid)
    # and a classic group with a hostile id and member client ids
    classic_join(h, "c" + HOSTILE, topics=["web"])
    shards = FakeShards(h.shard)
    view = web.WebView(shards, rec.history)
    lst = run(view.list_page(req("/")))
    body = lst.body.decode()
    assert lst.status == 200 and "text/html" in lst.content_type
    assert_inert(body)
    assert web.esc("g" + HOSTILE) in body and web.esc("c" + HOSTILE) in body
    # the links carry the id percent-encoded, and lead back to the same group
    hrefs = re.findall(r'href="(/groups/[^"]+)"', body)
    assert len(hrefs) == 2
    for href in hrefs:
        path = web.html.unescape(href)
        page = run(view.group_page(req(unquote(path.split("?")[0]))))
        assert page.status == 200, page.body[:200]
        assert_inert(page.body.decode())
    page = run(view.group_page(req("/groups/" + gid))).body.decode()
    assert web.esc("m1" + HOSTILE) in page and web.esc("i" + HOSTILE) in page
    assert 'class="timeline"' in page and web.esc("m1" + HOSTILE) in page.split("<svg")[1]
    # the JSON is JSON (and the browser is told not to sniff it)
    api = run(view.group_api(req("/api/groups/" + gid)))
    assert api.headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(api.body)["group"]["group_id"] == gid
    # the page's CSP allows exactly its own script and style
    csp = lst.headers["Content-Security-Policy"]
    assert web._csp_hash(web._SCRIPT) in csp and "unsafe-inline" not in csp


@pytest.mark.unit
@pytest.mark.parametrize("gid", ["a/b", "x?y=1#z", "..", ".", "100%", "sp ace", "\u00e9t\u00e9"])
def test_group_ids_with_url_characters_are_linked_and_found(gid):
    sh = Harness(ShardConfig(), TOPICS).shard
    sh.groups[gid] = new_empty_group(gid)
    view = web.WebView(FakeShards(sh))
    href = web.group_href(gid)
    # what http.py makes of it: the path percent-decoded, the query parsed
    u = urlsplit(href)
    r = HttpRequest("GET", unquote(u.path), parse_qs(u.query, keep_blank_values=True), {}, "")
    assert view._group_id(r, "/groups/") == gid
    got = run(view.group_page(r))
    assert got.status == 200 and web.esc(gid) in got.body.decode()
    u = urlsplit(web.group_href(gid, api=True))
    r = HttpRequest("GET", unquote(u.path), parse_qs(u.query, keep_blank_values=True), {}, "")
    assert json.loads(run(view.group_api(r)).body)["group"]["group_id"] == gid


@pytest.mark.unit
def test_the_list_of_10k_groups_is_paged_by_id_and_bounded():
    sh1, sh2 = Harness(ShardConfig(), TOPICS).shard, Harness(ShardConfig(), TOPICS).shard
    ids = ["grp-%05d" % i for i in range(10_000)]
    for i, gid in enumerate(ids):
        (sh1 if i % 2 else sh2).groups[gid] = new_empty_group(gid)
    shards = FakeShards(sh1, sh2)
    first = run(gv.list_groups(shards))
    assert len(first["groups"]) == gv.DEFAULT_LIMIT and first["total"] == 10_000
    assert first["counts"]["classic"]["Empty"] == 10_000
    assert [r["group_id"] for r in first["groups"]] == ids[:gv.DEFAULT_LIMIT]
    assert first["next_after"] == ids[gv.DEFAULT_LIMIT - 1]
    # every page, by the cursor: each id once, in order
    seen, after = [], ""
    while True:
        p = run(gv.list_groups(shards, after=after, limit=700))
        seen += [r["group_id"] for r in p["groups"]]
        if p["next_after"] is None:
            break
        after = p["next_after"]
    assert seen == ids
    # a limit beyond MAX_LIMIT is capped; filters
    assert len(run(gv.list_groups(shards, limit=10**9))["groups"]) == gv.MAX_LIMIT
    assert run(gv.list_groups(shards, limit=0))["limit"] == 1
    q = run(gv.list_groups(shards, q="GRP-0999"))
    assert [r["group_id"] for r in q["groups"]] == ["grp-%05d" % i for i in range(9990, 10_000)]
    assert run(gv.list_groups(shards, type_="consumer"))["matched"] == 0
    assert run(gv.list_groups(shards, state="Empty", limit=5))["matched"] == 10_000
    # the page shows one page and a link to the next
    view = web.WebView(shards)
    body = run(view.list_page(req("/", limit="50"))).body.decode()
    assert body.count("<tr data-group=") == 50 and 'id="next-page"' in body
    assert "after=grp-00049" in body


@pytest.mark.unit
def test_a_10k_member_group_page_shows_one_page_of_members():
    sh = Harness(ShardConfig(), TOPICS).shard
    g = sh.groups["big"] = ConsumerGroup("big", sh.config)
    for i in range(10_000):
        g.member("m%05d" % i)            # replay's own mutator: members with nothing yet
    hist = gv.GroupHistory()
    d = gv.group_detail(FakeShards(sh), "big", hist)
    assert d["members_total"] == 10_000 and d["pages"] == 100
    assert [x["member_id"] for x in d["members"]] == ["m%05d" % i for i in range(100)]
    d = gv.group_detail(FakeShards(sh), "big", hist, page=10**9, limit=10**9)
    assert d["limit"] == gv.MAX_LIMIT and d["page"] == 9 and len(d["members"]) == 1000
    assert d["members"][-1]["member_id"] == "m09999"
    # too many members to draw: sampled as "not drawn"
    assert hist.get("big").samples[-1][2] is None
    assert d["timeline"]["rows"] == [] and d["timeline"]["undrawn"]
    body = web.render_group(gv.group_detail(FakeShards(sh), "big", hist, page=3))
    assert body.count("<tr data-member=") == 100
    assert "members 301\u2013400 of 10000" in body and "page=2" in body and "page=4" in body


@pytest.mark.unit
def test_the_history_is_bounded():
    hist = gv.GroupHistory(max_groups=3)
    sh = Harness(ShardConfig(), TOPICS).shard
    rt = FakeRt(sh)
    for i in range(5):
        hist.note(rt, [lc.Event(kind=lc.MEMBER_JOINED, group="g%d" % i, type="classic")])
    assert len(hist) == 3 and hist.get("g0") is None and hist.get("g4") is not None
    many = [lc.Event(kind=lc.MEMBER_JOINED, group="g4", type="classic", member="m%d" % i)
            for i in range(gv.MAX_EVENTS * 3)]
    hist.note(rt, many)
    assert len(hist.get("g4").events) == gv.MAX_EVENTS
    # a group that changes at every event keeps MAX_SAMPLES samples
    sh.groups["g4"] = g = new_empty_group("g4")
    g.protocol, g._ptype = "range", "consumer"
    for i in range(gv.MAX_SAMPLES * 3):
        g.members = {"x": ClassicMemberState("x", client_id="c", assignment=encode_assignment(
            m.ConsumerProtocolAssignment(assigned_partitions=[
                m.ConsumerProtocolAssignmentTopicPartition(topic="web", partitions=[i])])))}
        hist.note(rt, [lc.Event(kind=lc.MEMBER_JOINED, group="g4", type="classic")])
    assert len(hist.get("g4").samples) == gv.MAX_SAMPLES
    # the hook never raises into the write path
    hist.note(None, [lc.Event(kind=lc.MEMBER_JOINED, group="g4", type="classic")])


@pytest.mark.unit
def test_the_timeline_shows_who_held_what_and_a_member_leaving_and_nothing_is_changed():
    clock = [1_700_000_000.0]
    rec = Recorder(lambda: clock[0])
    h = rec.h
    a, b = Member(h, "g", "A", "ca"), Member(h, "g", "B", "cb")
    a.hb()
    converge(h, [a], "g")
    clock[0] += 5
    b.hb()
    converge(h, [a, b], "g")
    clock[0] += 5
    shards = FakeShards(h.shard)
    before = h.shard.snapshot(durable=False)
    d = gv.group_detail(shards, "g", rec.history)
    body = web.render_group(d)
    assert h.shard.snapshot(durable=False) == before, "the view changed group state"
    owns = {x["member_id"]: x["owns"] for x in d["members"]}
    assert [x["owns_count"] for x in d["members"]] == [3, 3]
    held = sorted(int(p) for t in owns.values() for p in re.findall(r"\d+", t.replace("-", ",")))
    assert len(held) >= 4 and set(owns) == {"A", "B"}
    for mid, text in owns.items():
        assert re.search(r'<tr data-member="%s">.*?<td class="owns" title="3 in all">%s</td>'
                         % (mid, re.escape(text)), body)
    e_before = d["group"]["epoch"]
    # B leaves: A gets everything
    clock[0] += 5
    h.send(m.ConsumerGroupHeartbeatRequest(group_id="g", member_id="B", member_epoch=-1), 1)
    converge(h, [a], "g")
    d = gv.group_detail(shards, "g", rec.history)
    tl = d["timeline"]
    rows = {r["member"]: r for r in tl["rows"]}
    assert set(rows) == {"A", "B"}
    assert not rows["B"]["present"] and rows["A"]["present"]
    assert [mk["kind"] for mk in rows["B"]["marks"]] == [lc.MEMBER_JOINED, lc.MEMBER_LEFT]
    assert not any(bar["open"] for bar in rows["B"]["bars"])
    assert rows["A"]["bars"][-1]["owns"] == "web 0-5" and rows["A"]["bars"][-1]["open"]
    assert rows["A"]["label"] == "ca"
    done = [r for r in tl["rebalances"] if r["kind"] == lc.REBALANCE_COMPLETED]
    assert done[-1]["epoch"] > e_before
    svg = web.render_timeline(tl)
    assert 'data-kind="rebalance-completed" data-epoch="%d"' % done[-1]["epoch"] in svg
    assert re.search(r'<g class="row" data-member="B" data-present="false">.*?'
                     r'data-kind="member-left"', svg)
    assert 'data-owns="web 0-5"' in svg
    # the recent events, newest first, as the log writes them
    assert d["events"][0]["kind"] == lc.REBALANCE_COMPLETED
    assert any(e["text"].startswith("group g (consumer): member B left") for e in d["events"])


@pytest.mark.unit
def test_a_page_its_fragment_and_its_json_carry_one_revision_until_the_data_changes():
    rec = Recorder(lambda: 1_700_000_000.0)
    a = Member(rec.h, "g", "A")
    a.hb()
    converge(rec.h, [a], "g")
    view = web.WebView(FakeShards(rec.h.shard), rec.history)
    for page_path, api_path in (("/groups/g", "/api/groups/g"), ("/", "/api/groups")):
        handler = view.group_page if page_path != "/" else view.list_page
        api = view.group_api if page_path != "/" else view.list_api
        full = run(handler(req(page_path)))
        r = full.headers["X-Rev"]
        assert 'data-rev="%s"' % r in full.body.decode()
        assert run(handler(req(page_path, fragment="1"))).headers["X-Rev"] == r
        assert run(api(req(api_path))).headers["X-Rev"] == r
    before = run(view.group_api(req("/api/groups/g"))).headers["X-Rev"]
    Member(rec.h, "g", "B").hb()
    assert run(view.group_api(req("/api/groups/g"))).headers["X-Rev"] != before


@pytest.mark.unit
def test_a_classic_group_shows_each_members_decoded_assignment():
    h = Harness(ShardConfig(group_initial_rebalance_delay_ms=0), TOPICS)
    assignment = m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic="web", partitions=[0, 1, 2, 5])])
    mid, gen = classic_join(h, "k", topics=["web"], assignment=encode_assignment(assignment))
    d = gv.group_detail(FakeShards(h.shard), "k", gv.GroupHistory())
    assert d["group"]["protocol_type"] == "consumer" and d["group"]["leader"] == mid
    assert d["members"][0]["owns"] == "web 0-2,5" and d["members"][0]["owns_count"] == 4
    assert d["group"]["assignor"] == "range" and d["group"]["epoch"] == gen
    assert d["timeline"]["rows"][0]["bars"][-1]["owns"] == "web 0-2,5"
    assert "(leader)" in web.render_group(d)


@pytest.mark.unit
def test_a_connect_group_shows_connectors_and_tasks():
    rec = Recorder(lambda: 1_700_000_000.0)
    h = rec.h
    assert connect_hb(h, "wk", "w1", 0) == 0           # joins with connector A, 1 task
    # w1 is the worker chosen to compute: it prepares and installs A and its task 0 for itself
    p = h.send(m.ConnectGroupPrepareAssignmentRequest(group_id="wk", member_id="w1",
                                                      member_epoch=0))
    assert p.error_code == 0, p
    r = h.send(m.ConnectGroupInstallAssignmentRequest(
        group_id="wk", member_id="w1", member_epoch=0, group_epoch=p.group_epoch, error=0,
        rebalance_delay_ms=-1, assignor_state=None, members=[
            m.ConnectGroupInstallAssignmentRequestMember(
                member_id="w1",
                connectors_and_tasks=m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                    connectors=["A"], tasks=[m.ConnectGroupInstallAssignmentRequestConnectorTasks(
                        connector="A", task_ids=[0])]))]))
    assert r.error_code == 0, r
    d = gv.group_detail(FakeShards(h.shard), "wk", rec.history)
    (w,) = d["members"]
    assert (w["target"], w["target_count"], w["owns"]) == ("A (connector); A tasks 0", 2, "")
    assert w["awaiting"] == "A (connector); A tasks 0"
    # its next heartbeat gets them
    r = h.send(m.ConnectGroupHeartbeatRequest(group_id="wk", member_id="w1", member_epoch=0))
    assert r.error_code == 0, r
    d = gv.group_detail(FakeShards(h.shard), "wk", rec.history)
    (w,) = d["members"]
    assert (w["owns"], w["owns_count"], w["awaiting"]) == ("A (connector); A tasks 0", 2, "")
    assert d["group"]["type"] == "connect" and d["group"]["connectors"] == 1
    body = web.render_group(d)
    assert '<tr data-member="w1">' in body and "Owns (connectors / tasks)" in body
    assert d["timeline"]["rows"][0]["bars"][-1]["owns"] == "A (connector); A tasks 0"
    assert_inert(web.page("x", body, "/api/groups/wk", "/groups/wk?fragment=1"))


class FakeAccess:
    def __init__(self):
        self.users = {}
        self.failures = AuthFailureLog()
        self.open = True

    def lookup(self, user, mech):
        return self.users.get((user, mech))


def basic(user, password):
    return {"authorization": "Basic " + base64.b64encode(
        ("%s:%s" % (user, password)).encode()).decode()}


@pytest.mark.unit
def test_basic_auth_checks_the_scram_credential_and_remembers_a_verified_header(monkeypatch):
    acc = FakeAccess()
    acc.users[("alice", 2)] = make_credential(2, "s3cret")
    acc.users[("bob", 1)] = make_credential(1, "hunter2")       # SCRAM-SHA-256 only
    auth = web.BasicAuth(acc, delay_ms=0)
    view = web.WebView(FakeShards(Harness(ShardConfig(), TOPICS).shard), access=acc,
                       auth=auth)
    r = run(view.list_page(req("/")))
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert run(view.list_api(req("/api/groups", headers=basic("alice", "nope")))).status == 401
    assert run(view.list_page(req("/", headers=basic("carol", "x")))).status == 401
    assert run(view.list_page(req("/", headers={"authorization": "Basic !!!"}))).status == 401
    assert acc.failures.total == 3
    ok = run(view.list_page(req("/", headers=basic("alice", "s3cret"))))
    assert ok.status == 200 and "User:alice" in ok.body.decode()
    assert run(view.list_page(req("/", headers=basic("bob", "hunter2")))).status == 200
    # remembered: no PBKDF2 the second time
    calls = []
    real = web.verify_password
    monkeypatch.setattr(web, "verify_password", lambda c, p: calls.append(1) or real(c, p))
    assert run(view.list_page(req("/", headers=basic("alice", "s3cret")))).status == 200
    assert calls == []
    # ... until the credential changes: the old password is refused at once
    acc.users[("alice", 2)] = make_credential(2, "n3w")
    assert run(view.list_page(req("/", headers=basic("alice", "s3cret")))).status == 401
    assert calls == [1]


@pytest.mark.unit
def test_a_principal_sees_the_groups_it_may_describe():
    sh = Harness(ShardConfig(), TOPICS).shard
    for gid in ("a-1", "a-2", "b-1"):
        sh.groups[gid] = new_empty_group(gid)
    acc = NodeAccess(SecurityConfig(allow_if_no_acl=False))
    acc.authorizer.set_acls([AclBinding(int(ResourceType.GROUP), "a-", int(PatternType.PREFIXED),
                                        "User:ANONYMOUS", "*", int(AclOperation.DESCRIBE),
                                        int(AclPermissionType.ALLOW))])
    acc.open = False
    view = web.WebView(FakeShards(sh), access=acc)
    got = json.loads(run(view.list_api(req("/api/groups"))).body)
    assert [r["group_id"] for r in got["groups"]] == ["a-1", "a-2"] and got["total"] == 2
    assert run(view.group_page(req("/groups/b-1"))).status == 403
    assert run(view.group_api(req("/api/groups/a-1"))).status == 200
    assert run(view.group_api(req("/api/groups/nope"))).status == 403     # says nothing more
    # DESCRIBE on the cluster: every group
    acc.authorizer.set_acls([AclBinding(int(ResourceType.CLUSTER), "kafka-cluster",
                                        int(PatternType.LITERAL), "User:ANONYMOUS", "*",
                                        int(AclOperation.DESCRIBE),
                                        int(AclPermissionType.ALLOW))])
    assert json.loads(run(view.list_api(req("/api/groups"))).body)["total"] == 3


# =========================================================================== a real node
def web_url(srv) -> str:
    found = wait_until(lambda: re.search(r"web view on (http://[\d.]+:\d+)/",
                                         open(srv.stderr_path, errors="replace").read()),
                       20, what="the web view log line")
    return found.group(1)


class MemberLoop:
    """An asyncio loop in a thread, for the SDK members (the browser test is synchronous)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="sdk-members")
        self.thread.start()

    def run(self, coro, timeout=BOUND_S):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def chrome():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail("the web view test needs Debian's chromium and chromium-driver "
                    "(%s, %s): apt-get install chromium chromium-driver (.ci/run installs "
                    "them)" % (CHROMIUM, CHROMEDRIVER))
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def full_screenshot(driver, path):
    """The whole page, beyond the window (Chrome DevTools' Page.captureScreenshot), as a
    PNG."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000),
                 "scale": 1}})
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    return path


def settle(wait, what, read, expected):
    """Wait (bounded) until read(driver) == expected. The page's script swaps its live part
    in when the data changes, so an element found a moment ago may be gone (stale): it is
    read again at the next try."""
    from selenium.common.exceptions import TimeoutException
    seen = []

    def check(d):
        seen[:] = [read(d)]
        return seen[0] == expected
    try:
        wait.until(check)
    except TimeoutException:
        raise AssertionError("%s: expected %r, last read %r" % (what, expected, seen)) from None


@pytest.mark.e2e
def test_web_view_in_a_headless_browser(serve):  # noqa: F811
    pytest.importorskip("selenium")
    from groupcoord.client import ClassicMember, ConsumerMember
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    srv = serve(topics={"web": 6}, shards=2, extra_args=["--metrics-port", "0"])
    url = web_url(srv)
    boot = "%s:%d" % (srv.host, srv.port)
    members = MemberLoop()
    driver = None
    consumers = [ConsumerMember(boot, "orders-848", topics=["web"], client_id="web-c%d" % i)
                 for i in (1, 2)]
    classics = [ClassicMember(boot, "legacy-classic", topics=["web"], client_id="web-k%d" % i,
                              heartbeat_interval_ms=300, session_timeout_ms=10_000)
                for i in (1, 2)]

    def css(sel):
        return lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, sel)]

    def attr(sel, name):
        return lambda d: [e.get_attribute(name) for e in d.find_elements(By.CSS_SELECTOR, sel)]

    def click(wait, link_text):
        # (a link found just before the page's script swapped its part is stale: again)
        wait.until(lambda d: d.find_element(By.LINK_TEXT, link_text).click() is None)

    def completed_epochs(d):
        return [int(e) for e in attr('svg#timeline g.rebalance[data-kind="rebalance-completed"]',
                                     "data-epoch")(d)]

    try:
        for mb in consumers + classics:
            members.run(mb.start())

        def formed():
            c = [x.assignment for x in consumers]
            k = [x.assignment for x in classics]
            return (all(x.stable for x in consumers) and all(c) and all(k)
                    and sorted(tp.partition for a in c for tp in a) == list(range(6))
                    and sorted(tp.partition for a in k for tp in a) == list(range(6)))
        wait_until(formed, BOUND_S, what="both groups formed, 3 partitions per member")

        driver = chrome()
        wait = WebDriverWait(driver, BOUND_S, ignored_exceptions=(
            StaleElementReferenceException,))
        out = artefacts_dir()

        # -- the list: both groups with their type, state, members and assignor
        driver.get(url + "/")

        def table(d):
            return {r.get_attribute("data-group"): [td.text for td in
                                                    r.find_elements(By.TAG_NAME, "td")][1:6]
                    for r in d.find_elements(By.CSS_SELECTOR, "#groups tbody tr")}
        settle(wait, "the group list", table, {
            "orders-848": ["consumer", "Stable", str(consumers[0].epoch), "2", "uniform"],
            "legacy-classic": ["classic", "Stable", str(classics[0].generation), "2",
                               "range"]})
        list_png = full_screenshot(driver, os.path.join(out, "web-view-list.png"))

        # -- the classic group's page: each member's partitions, as each member holds them
        click(wait, "legacy-classic")
        for k in classics:
            settle(wait, "classic member %s" % k.sm.member_id,
                   css('tr[data-member="%s"] td.owns' % k.sm.member_id),
                   [parts_text(k.assignment)])
        classic_png = full_screenshot(driver, os.path.join(out, "web-view-classic.png"))

        # -- the KIP-848 group's page: owns = target = what each member holds, and the
        # timeline's last bar of each member says the same
        driver.get(url + "/")
        click(wait, "orders-848")
        for c in consumers:
            mine = parts_text(c.assignment)
            row = 'tr[data-member="%s"] ' % c.sm.member_id
            settle(wait, "member %s owns" % c.sm.member_id, css(row + "td.owns"), [mine])
            settle(wait, "member %s target" % c.sm.member_id, css(row + "td.target"), [mine])
            settle(wait, "member %s's last bar" % c.sm.member_id,
                   lambda d, c=c: attr('g.row[data-member="%s"] rect.hold'
                                       % c.sm.member_id, "data-owns")(d)[-1:], [mine])
        before = wait.until(lambda d: max(completed_epochs(d) or [0]))
        driver.execute_script("window.__sameDocument = 42;")

        # -- a member leaves: the page (not reloaded) shows the rebalance
        leaver, stayer = consumers
        members.run(leaver.close())
        wait_until(lambda: stayer.stable and len(stayer.assignment) == 6, BOUND_S,
                   what="the remaining member owning every partition")
        wait.until(lambda d: max(completed_epochs(d) or [0]) > before)
        wait.until(lambda d: d.find_elements(
            By.CSS_SELECTOR, 'g.row[data-member="%s"][data-present="false"] '
            'g.mark[data-kind="member-left"]' % leaver.sm.member_id))
        settle(wait, "the remaining member", css('#members tbody td.owns'), ["web 0-5"])
        settle(wait, "the remaining member's last bar",
               lambda d: attr('g.row[data-member="%s"] rect.hold' % stayer.sm.member_id,
                              "data-owns")(d)[-1:], ["web 0-5"])
        assert driver.execute_script("return window.__sameDocument;") == 42, \
            "the page was reloaded: the live refresh did not update it"
        after = wait.until(lambda d: max(completed_epochs(d) or [0]))
        events = wait.until(lambda d: d.find_element(By.ID, "events").text)
        assert "member %s left" % leaver.sm.member_id in events
        assert "rebalance completed: epoch %d" % after in events
        group_png = full_screenshot(driver, os.path.join(out, "web-view-group.png"))
        for p in (list_png, classic_png, group_png):
            with open(p, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        print("web view screenshots: %s, %s, %s" % (list_png, classic_png, group_png))
        if os.environ.get("GROUPCOORD_WEB_DOCS_IMG"):      # refresh docs/img (by hand)
            dst = os.environ["GROUPCOORD_WEB_DOCS_IMG"]
            shutil.copy(list_png, os.path.join(dst, "web-view-list.png"))
            shutil.copy(group_png, os.path.join(dst, "web-view-group.png"))
    finally:
        if driver is not None:
            driver.quit()
        for mb in consumers + classics:
            try:
                members.run(mb.close(), timeout=20)
            except Exception:
                pass
        members.close()


# =========================================================================== basic auth, real node
def _env():
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root() + (os.pathsep + old if old else "")
    return env


def fetch(url, headers=None):
    r = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.mark.integration
def test_web_view_asks_for_basic_auth_on_a_node_with_a_sasl_listener(tmp_path):
    data = tmp_path / "node"
    data.mkdir()
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "users", "set", "viewer",
                        "--password-stdin", "--mechanism", "SCRAM-SHA-256",
                        "--data-dir", str(data)], input=b"look-only", env=_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 0, r.stderr
    with ServeProc(data, topics={"web": 2}, extra_args=[
            "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--metrics-port", "0"]) as srv:
        url = web_url(srv)
        status, headers, _ = fetch(url + "/")
        assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="')
        assert fetch(url + "/api/groups", basic("viewer", "wrong"))[0] == 401
        status, _, body = fetch(url + "/api/groups", basic("viewer", "look-only"))
        assert status == 200 and json.loads(body)["total"] == 0
        status, _, body = fetch(url + "/", basic("viewer", "look-only"))
        assert status == 200 and b"User:viewer" in body
        assert fetch(url + "/metrics")[0] == 200            # scrapers are not asked
        log = open(srv.stderr_path, errors="replace").read()
        assert "failed authentication from 127.0.0.1" in log and "BASIC" in log
        assert "HTTP basic authentication against the SCRAM users" in log
