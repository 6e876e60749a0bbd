"""The web view on the metrics port (``serve --metrics-port``; docs/operations.md, "Web view"):
a page listing the node's groups and a page per group (its members, what each owns, is
revoking and is to get, a timeline of its recent rebalances and its recent lifecycle events),
refreshed live, and the same data as JSON.

    register_web_routes(http, server, args)     # main.py, once the metrics port is bound

Routes (GET and HEAD, as every route of http.py):

    /                        the groups: ?type=classic|consumer|connect &state=S &q=substring
                             &after=<group id> (the page after it) &limit=N (<= MAX_LIMIT)
    /groups/<id>             one group (the id percent-encoded; /groups/?id=<id> for any id,
                             "." and ".." included): ?page=N &limit=N pages its members
    /api/groups              the list as JSON, same parameters (group_view.list_groups)
    /api/groups/<id>         one group as JSON (group_view.group_detail), ?id= as above

Server-rendered HTML; ``?fragment=1`` answers the live part of a page alone. The page's one
inline script polls the page's JSON every POLL_MS and, when its revision (``rev``: a hash of
the data, header X-Rev) differs from the one shown, fetches the fragment and swaps it in.
Every id is HTML-escaped where it is shown and percent-encoded where it is linked; the
Content-Security-Policy allows only that script and the page's style (by hash), so markup
that slipped through escaping would not run.

Read-only: the handlers read group state (server/group_view.py) and change nothing.
Authentication (``--web-auth``): with ``auto`` (the default), when the node has a SASL
listener the pages ask for HTTP basic authentication, checked against the SCRAM credentials
of the node's security store as PLAIN checks them (security/scram.py ``verify_password``;
a user with only a SCRAM-SHA-256 credential too); ``basic`` always asks; ``none`` never
does. A principal (``User:<name>``, else ``User:ANONYMOUS``) sees the groups the ACLs let it
DESCRIBE, as ListGroups does (every group when nothing is checked: server/access.py
``NodeAccess.open``). /metrics, /healthz and /readyz stay open (scrapers). The metrics port
has no TLS: a password sent to it crosses the network in clear (docs/operations.md).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import html
import json
import logging
import secrets
import time
import zlib
from typing import Optional
from urllib.parse import quote, urlencode

from groupcoord.security.acl import AclOperation, ResourceType
from groupcoord.security.scram import MIN_ITERATIONS, ScramCredential, verify_password
from groupcoord.server import group_view as gv
from groupcoord.server.authz import CLUSTER_NAME
from groupcoord.server.http import HttpRequest, HttpResponse

__all__ = ["register_web_routes", "add_web_arguments", "WebView", "BasicAuth", "rev",
           "render_list", "render_group", "render_timeline", "page", "group_href",
           "POLL_MS", "WEB_AUTH_MODES"]

log = logging.getLogger("groupcoord.web")

POLL_MS = 2000
WEB_AUTH_MODES = ("auto", "basic", "none")
_DESCRIBE = int(AclOperation.DESCRIBE)
_GROUP, _CLUSTER = int(ResourceType.GROUP), int(ResourceType.CLUSTER)
_MAX_SHOWN_ID = 200             # characters of an id shown in a cell (the link has it whole)


def add_web_arguments(parser) -> None:
    """`serve --web-auth` (main.py's serve parser)."""
    parser.add_argument(
        "--web-auth", choices=WEB_AUTH_MODES, default="auto",
        help="the web view on the metrics port (/, /groups/..., /api/...): 'basic' asks for "
             "HTTP basic authentication checked against the SCRAM users of the node "
             "(groupcoord users), 'none' never asks, 'auto' (default) asks when the node has "
             "a SASL listener. /metrics and the health pages never ask")


# =========================================================================== HTML
def esc(s) -> str:
    return html.escape(str(s), quote=True)


def _short(s: str, n: int = _MAX_SHOWN_ID) -> str:
    return s if len(s) <= n else s[:n] + "\u2026"


def group_href(group_id: str, api: bool = False, **params) -> str:
    """The path of a group's page (or its JSON); "." and ".." (which a browser would resolve
    away as path segments) and "" go in the query."""
    base = "/api/groups/" if api else "/groups/"
    q = {k: v for k, v in params.items() if v not in (None, "")}
    if group_id in ("", ".", ".."):
        q = {"id": group_id, **q}
        return base + "?" + urlencode(q)
    return base + quote(group_id, safe="") + ("?" + urlencode(q) if q else "")


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:8px 20px;display:flex;gap:16px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:600}
header .live{margin-left:auto;font-size:12px;color:#b9c3d0}
main{padding:12px 20px 40px}
h1{font-size:20px;margin:8px 0 12px}h2{font-size:16px;margin:22px 0 8px}
code,.id{font-family:ui-monospace,monospace;font-size:13px;word-break:break-all}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #dde2e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}
td.num{text-align:right}
.muted{color:#6b7685;font-size:12px}
.state-Stable{color:#17803d}.state-Empty{color:#6b7685}
.state-PreparingRebalance,.state-CompletingRebalance{color:#b35c00}
.state-Assigning,.state-Reconciling{color:#b35c00}
.pending{color:#b00020}.await{color:#6b7685}
form.filters{display:flex;gap:8px;align-items:center;margin-bottom:10px}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:0}
dl.summary dt{color:#6b7685}dl.summary dd{margin:0}
nav.pages{margin:8px 0}
ol.events{font-family:ui-monospace,monospace;font-size:12px;background:#fff;
border:1px solid #dde2e8;padding:8px 8px 8px 40px}
svg.timeline{background:#fff;border:1px solid #dde2e8;max-width:100%;height:auto}
svg.timeline text{font:11px system-ui,sans-serif;fill:#1d2430}
svg.timeline .axis text{fill:#6b7685}
svg.timeline text.epoch{font-weight:600}
.legend{font-size:12px;color:#6b7685;margin:4px 0}
"""

_SCRIPT = """
(function () {
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live || !window.fetch) { return; }
  var api = live.getAttribute("data-api"), part = live.getAttribute("data-fragment");
  var every = parseInt(live.getAttribute("data-poll"), 10) || 2000;
  var rev = live.getAttribute("data-rev");
  function say(text) { if (status) { status.textContent = text; } }
  function get(url) {
    return fetch(url, {cache: "no-store", credentials: "same-origin"}).then(function (r) {
      if (!r.ok && r.status !== 404 && r.status !== 403) { throw new Error("HTTP " + r.status); }
      return r.text().then(function (t) { return {text: t, rev: r.headers.get("X-Rev")}; });
    });
  }
  function tick() {
    if (document.hidden) { setTimeout(tick, every); return; }
    get(api).then(function (a) {
      if (a.rev && a.rev === rev) { return; }
      return get(part).then(function (f) { live.innerHTML = f.text; rev = f.rev; });
    }).then(function () {
      say("live \\u00b7 checked " + new Date().toLocaleTimeString());
    }, function (e) {
      say("live \\u00b7 refresh failed: " + e.message);
    }).then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


_CSP = ("default-src 'none'; script-src %s; style-src %s; connect-src 'self'; img-src data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        % (_csp_hash(_SCRIPT), _csp_hash(_STYLE)))
_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}


def page(title: str, body: str, api: str, fragment: str, who: str = "", rev: str = "") -> str:
    """A whole page: ``body`` is the live part (what ``fragment`` answers alone), polled
    through ``api``; ``rev`` names the data it shows (rev())."""
    user = ('<span class="muted">%s</span>' % esc(who)) if who else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width\">"
            "<link rel=\"icon\" href=\"data:,\"><title>%s \u00b7 groupcoord</title>"
            "<style>%s</style></head><body>"
            "<header><a href=\"/\">groupcoord</a><span>groups</span>%s"
            "<span class=\"live\" id=\"live-status\">live</span></header>"
            "<main id=\"live\" data-api=\"%s\" data-fragment=\"%s\" data-poll=\"%d\" "
            "data-rev=\"%s\">%s</main><script>%s</script></body></html>\n"
            % (esc(title), _STYLE, user, esc(api), esc(fragment), POLL_MS, esc(rev), body,
               _SCRIPT))


def rev(data) -> str:
    """The revision of a page's data: a hash of its JSON. The JSON answer and the page (or
    fragment) of the same data carry the same one (header X-Rev), so the page's script
    swaps its live part in only when the data changed."""
    return hashlib.sha256(_dump(data).encode()).hexdigest()[:24]


def _dump(data) -> str:
    return json.dumps(data, sort_keys=True)


def _state(st: str) -> str:
    return '<span class="state-%s">%s</span>' % (esc(st), esc(st))


def _list_query(type_, state, q, limit) -> dict:
    return {"type": type_ or None, "state": state or None, "q": q or None,
            "limit": limit if limit != gv.DEFAULT_LIMIT else None}


def render_list(data: dict, type_: str = "", state: str = "", q: str = "",
                after: str = "") -> str:
    """The live part of the group list page (group_view.list_groups' dict)."""
    out = ["<h1>Groups</h1>"]
    out.append('<form class="filters" method="get" action="/">'
               '<label>type <select name="type"><option value="">any</option>%s</select></label>'
               '<label>state <select name="state"><option value="">any</option>%s</select></label>'
               '<label>id contains <input name="q" value="%s" size="24"></label>'
               '<button type="submit">Filter</button></form>' % (
                   "".join('<option%s>%s</option>' % (" selected" if t == type_ else "", t)
                           for t in gv.TYPES),
                   "".join('<option%s>%s</option>' % (" selected" if s == state else "", s)
                           for s in sorted({s for ss in gv.STATES.values() for s in ss})),
                   esc(q)))
    parts = []
    for typ in gv.TYPES:
        by = data["counts"].get(typ, {})
        n = sum(by.values())
        if n:
            parts.append("%s: %d (%s)" % (typ, n, ", ".join(
                "%d %s" % (c, s) for s, c in sorted(by.items()) if c)))
    out.append('<p class="summary">%d group%s on this node%s. %s</p>' % (
        data["total"], "" if data["total"] == 1 else "s",
        (": " + "; ".join(parts)) if parts else "",
        ("%d match the filters." % data["matched"]) if (type_ or state or q) else ""))
    rows = data["groups"]
    if not rows:
        out.append('<p class="muted" id="no-groups">No group%s.</p>'
                   % (" matches" if (type_ or state or q or after) else " yet"))
    else:
        out.append('<table id="groups"><thead><tr><th>Group</th><th>Type</th><th>State</th>'
                   '<th>Epoch / generation</th><th>Members</th><th>Assignor</th>'
                   '<th>Shard</th></tr></thead><tbody>')
        for r in rows:
            gid = r["group_id"]
            out.append('<tr data-group="%s"><td class="id"><a href="%s">%s</a></td>'
                       '<td>%s</td><td>%s</td><td class="num">%d</td><td class="num">%d</td>'
                       '<td>%s</td><td class="num">%d</td></tr>' % (
                           esc(gid), esc(group_href(gid)), esc(_short(gid)), esc(r["type"]),
                           _state(r["state"]), r["epoch"], r["members"], esc(r["assignor"]),
                           r["shard"]))
        out.append("</tbody></table>")
    nav = []
    if after:
        nav.append('<a href="/?%s">first page</a>' % esc(urlencode(
            {k: v for k, v in _list_query(type_, state, q, data["limit"]).items() if v})))
    if data["next_after"] is not None:
        qd = _list_query(type_, state, q, data["limit"])
        qd["after"] = data["next_after"]
        nav.append('<a id="next-page" href="/?%s">next %d \u2192</a>' % (
            esc(urlencode({k: v for k, v in qd.items() if v})), data["limit"]))
    if nav:
        out.append('<nav class="pages">%s <span class="muted">(%d per page, in group id '
                   'order)</span></nav>' % (" \u00b7 ".join(nav), data["limit"]))
    return "".join(out)


def _dd(name: str, value) -> str:
    return "<dt>%s</dt><dd>%s</dd>" % (esc(name), value)


def _cell(text: str, count: int, cls: str = "") -> str:
    if not text:
        return '<td class="%s"></td>' % cls
    if not count:
        return '<td class="%s">%s</td>' % (cls, esc(text))
    return '<td class="%s" title="%d in all">%s</td>' % (cls, count, esc(text))


def render_group(d: dict) -> str:
    """The live part of a group's page (group_view.group_detail's dict)."""
    g = d["group"]
    gid, typ = g["group_id"], g["type"]
    modern = typ != "classic"
    out = ['<p><a href="/">\u2190 all groups</a></p>',
           '<h1>Group <code id="group-id">%s</code></h1>' % esc(gid)]
    info = [_dd("type", esc(typ)), _dd("state", _state(g["state"]))]
    if modern:
        info.append(_dd("group epoch", g["epoch"]))
        info.append(_dd("assignment epoch", g["assignment_epoch"]))
    else:
        info.append(_dd("generation", g["epoch"]))
        info.append(_dd("protocol type", esc(g.get("protocol_type") or "")))
        info.append(_dd("leader", '<span class="id">%s</span>' % esc(g.get("leader") or "")))
    info.append(_dd("assignor", esc(g["assignor"])))
    info.append(_dd("members", g["members"]))
    if "topics" in g:
        info.append(_dd("subscribed topics", esc(", ".join(g["topics"]))))
    if "connectors" in g:
        info.append(_dd("connectors", g["connectors"]))
    info.append(_dd("shard", g["shard"]))
    out.append('<dl class="summary">%s</dl>' % "".join(info))

    out.append("<h2>Members</h2>")
    members = d["members"]
    if not members:
        out.append('<p class="muted">No members.</p>')
    elif modern:
        unit = "connectors / tasks" if typ == "connect" else "partitions"
        out.append('<table id="members"><thead><tr><th>Member</th><th>Protocol</th>'
                   '<th>Epoch</th><th>State</th><th>Owns (%s)</th><th>Pending revocation'
                   '</th><th>Target</th><th>Waiting for</th><th>Subscription</th></tr>'
                   '</thead><tbody>' % unit)
        for m in members:
            out.append('<tr data-member="%s"><td>%s</td><td>%s</td><td class="num">%d</td>'
                       '<td>%s</td>%s%s%s%s<td>%s</td></tr>' % (
                           esc(m["member_id"]), _member_cell(m), esc(m["protocol"]),
                           m["epoch"], esc(m["state"]),
                           _cell(m["owns"], m["owns_count"], "owns"),
                           _cell(m["pending_revocation"], m["pending_count"], "pending"),
                           _cell(m["target"], m["target_count"], "target"),
                           _cell(m["awaiting"], m["awaiting_count"], "await"),
                           esc(m["subscription"])))
        out.append("</tbody></table>")
    else:
        out.append('<table id="members"><thead><tr><th>Member</th><th>Assignment '
                   '(generation %d)</th><th>Owned, as reported at its join</th>'
                   '<th>Subscription</th></tr></thead><tbody>' % g["epoch"])
        for m in members:
            out.append('<tr data-member="%s"><td>%s%s</td>%s%s<td>%s</td></tr>' % (
                esc(m["member_id"]), _member_cell(m),
                ' <span class="muted">(leader)</span>' if m.get("leader") else "",
                _cell(m["owns"], m["owns_count"], "owns"),
                _cell(m.get("reported_owned", ""), 0, "reported"), esc(m["subscription"])))
        out.append("</tbody></table>")
    if d["pages"] > 1:
        nav = []
        for p, label in ((d["page"] - 1, "\u2190 previous"), (d["page"] + 1, "next \u2192")):
            if 0 <= p < d["pages"]:
                nav.append('<a href="%s">%s</a>' % (esc(group_href(
                    gid, page=p, limit=d["limit"] if d["limit"] != gv.DEFAULT_LIMIT else None)),
                    label))
        out.append('<nav class="pages">members %d\u2013%d of %d \u00b7 %s</nav>' % (
            d["page"] * d["limit"] + 1, min(d["members_total"], (d["page"] + 1) * d["limit"]),
            d["members_total"], " \u00b7 ".join(nav)))
    if modern:
        out.append('<p class="muted">Owns: its current assignment. Pending revocation: '
                   'what it still owns but was asked to give up. Target: what the group\'s '
                   'target assignment gives it; waiting for: the part of the target another '
                   'member still owns, or that it has not been sent yet.</p>')
    else:
        out.append('<p class="muted">A classic group\'s members revoke on their own side: '
                   'the coordinator knows the assignment its leader made for each member and, '
                   'from cooperative members, what each reported it still owns when it '
                   'joined.</p>')

    out.append("<h2>Timeline</h2>")
    tl = d.get("timeline")
    if tl:
        out.append(render_timeline(tl, typ))
    else:
        out.append('<p class="muted">No history yet.</p>')
    out.append("<h2>Recent events (UTC)</h2>")
    if d["events"]:
        out.append('<ol class="events" id="events" reversed>%s</ol>' % "".join(
            '<li data-kind="%s">%s %s</li>' % (esc(e["kind"]), _clock(e["t_ms"]),
                                               esc(e["text"]))
            for e in d["events"]))
    else:
        out.append('<p class="muted">No lifecycle event since this node loaded the group.</p>')
    return "".join(out)


def _member_cell(m: dict) -> str:
    extra = []
    if m.get("client_id"):
        extra.append("client " + esc(m["client_id"]))
    if m.get("instance_id"):
        extra.append("instance " + esc(m["instance_id"]))
    if m.get("client_host"):
        extra.append(esc(m["client_host"]))
    if m.get("worker_url"):
        extra.append(esc(m["worker_url"]))
    return '<span class="id">%s</span><br><span class="muted">%s</span>' % (
        esc(_short(m["member_id"])), " \u00b7 ".join(extra))


def _clock(t_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t_ms / 1000.0)) + ".%03d" % (t_ms % 1000)


# --------------------------------------------------------------------------- the timeline
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#e15759",
            "#9c755f", "#86bcb6", "#d37295", "#a0cbe8", "#8cd17d")
_W, _LEFT, _RIGHT, _TOP, _ROW, _BAR = 1100, 190, 24, 40, 30, 20
_CHAR_PX = 6.2          # an 11 px character, roughly: text that does not fit is cut


def _color(text: str) -> str:
    return _PALETTE[zlib.crc32(text.encode("utf-8", "replace")) % len(_PALETTE)]


def _fit(text: str, px: float) -> str:
    n = int(px / _CHAR_PX)
    if n < 3:
        return ""
    return text if len(text) <= n else text[:n - 1] + "\u2026"


def render_timeline(tl: dict, group_type: str = "consumer") -> str:
    """The timeline as an inline SVG: a row per member (y), time on x, a bar per span the
    member held one set of units (its text on it, the full text in a tooltip), a hatched
    band over a bar while some of it was pending revocation, vertical lines where
    rebalances started (dashed), targets were computed (dotted) and rebalances completed
    (solid, labelled with the epoch or generation), and a mark where a member joined (o) or
    left, expired or was fenced (x)."""
    rows = tl["rows"]
    t0, t1 = tl["t0"], tl["t1"]
    span = max(1, t1 - t0)
    width = _W - _LEFT - _RIGHT
    height = _TOP + max(1, len(rows)) * _ROW + 26

    def x(t) -> float:
        return round(_LEFT + (min(max(t, t0), t1) - t0) * width / span, 1)

    epoch_word = "generation" if group_type == "classic" else "epoch"
    o = ['<svg class="timeline" id="timeline" xmlns="http://www.w3.org/2000/svg" '
         'width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="rebalance '
         'timeline">' % (_W, height, _W, height),
         '<defs><pattern id="hatch" patternUnits="userSpaceOnUse" width="6" height="6">'
         '<path d="M0,6 l6,-6" stroke="#b00020" stroke-width="1.6"/></pattern>'
         '<pattern id="undrawn" patternUnits="userSpaceOnUse" width="8" height="8">'
         '<path d="M0,8 l8,-8" stroke="#c8ced6" stroke-width="1"/></pattern></defs>']
    for i in range(len(rows)):
        if i % 2 == 0:
            o.append('<rect x="0" y="%d" width="%d" height="%d" fill="#f3f5f8"/>'
                     % (_TOP + i * _ROW, _W, _ROW))
    for u in tl.get("undrawn", ()):
        o.append('<rect class="undrawn" x="%s" y="%d" width="%s" height="%d" '
                 'fill="url(#undrawn)"><title>more than %d members: not drawn</title></rect>'
                 % (x(u["t0"]), _TOP, max(1, x(u["t1"]) - x(u["t0"])),
                    max(1, len(rows)) * _ROW, gv.MAX_DRAWN))
    # the time axis: ticks at round seconds
    o.append('<g class="axis">')
    ax_y = _TOP + max(1, len(rows)) * _ROW
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#9aa5b1"/>'
             % (_LEFT, ax_y, _W - _RIGHT, ax_y))
    step = _tick_step(span)
    t = -(-t0 // step) * step
    while t <= t1:
        o.append('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#9aa5b1"/>'
                 '<text x="%s" y="%d" text-anchor="middle">%s</text>'
                 % (x(t), ax_y, x(t), ax_y + 4, x(t), ax_y + 16,
                    time.strftime("%H:%M:%S", time.gmtime(t / 1000.0))))
        t += step
    o.append('<text x="%d" y="%d">UTC</text></g>' % (_LEFT - 40, ax_y + 16))
    # the members' rows
    for i, r in enumerate(rows):
        y = _TOP + i * _ROW
        mid = r["member"]
        label = r["label"] or ""
        # a classic member id is "<client id>-<uuid>": the uuid tells it apart
        short = mid[len(label) + 1:] if label and mid.startswith(label + "-") else mid
        name = ("%s \u00b7 %s" % (label, short[:8])) if label else mid
        o.append('<g class="row" data-member="%s" data-present="%s">' % (
            esc(mid), "true" if r["present"] else "false"))
        o.append('<text x="6" y="%d"%s>%s<title>member %s%s</title></text>' % (
            y + _ROW // 2 + 4, "" if r["present"] else ' fill="#6b7685"',
            esc(_fit(name, _LEFT - 12)), esc(mid),
            (" (client %s)" % esc(label)) if label else ""))
        for b in r["bars"]:
            bx, bw = x(b["t0"]), max(2.0, round(x(b["t1"]) - x(b["t0"]), 1))
            owns, pending = b["owns"], b["pending"]
            if not owns and not pending:
                o.append('<rect class="hold empty" data-owns="" x="%s" y="%d" width="%s" '
                         'height="4" fill="#c8ced6"><title>holds nothing</title></rect>'
                         % (bx, y + _ROW // 2 - 2, bw))
                continue
            tip = "owns %s" % (owns or "nothing") + (
                "; pending revocation: %s" % pending if pending else "")
            o.append('<rect class="hold" data-owns="%s" data-pending="%s" x="%s" y="%d" '
                     'width="%s" height="%d" rx="3" fill="%s" stroke="#fff"><title>%s'
                     '</title></rect>' % (esc(owns), esc(pending), bx, y + (_ROW - _BAR) // 2,
                                          bw, _BAR, _color(owns or pending), esc(tip)))
            if pending:
                o.append('<rect class="revoking" x="%s" y="%d" width="%s" height="%d" '
                         'fill="url(#hatch)"><title>pending revocation: %s</title></rect>'
                         % (bx, y + (_ROW - _BAR) // 2, bw, _BAR, esc(pending)))
            shown = _fit(owns + (" (revoking %s)" % pending if pending else ""), bw - 8)
            if shown:
                o.append('<text x="%s" y="%d" fill="#fff">%s</text>'
                         % (round(bx + 4, 1), y + _ROW // 2 + 4, esc(shown)))
            if b.get("open"):
                o.append('<path d="M%s,%d l6,%d l-6,%d z" fill="%s"/>' % (
                    round(bx + bw, 1), y + (_ROW - _BAR) // 2, _BAR // 2, _BAR // 2,
                    _color(owns or pending)))
        for mk in r["marks"]:
            mx, my = x(mk["t"]), y + _ROW // 2
            what = mk["kind"] + (" (%s)" % mk["reason"] if mk["reason"] else "")
            if mk["kind"] in ("member-joined", "static-member-replaced"):
                o.append('<g class="mark" data-kind="%s"><circle cx="%s" cy="%d" r="4" '
                         'fill="#fff" stroke="#17803d" stroke-width="2"/><title>%s at %s'
                         '</title></g>' % (esc(mk["kind"]), mx, my, esc(what), _clock(mk["t"])))
            else:
                o.append('<g class="mark" data-kind="%s"><path d="M%s,%d l8,8 m0,-8 l-8,8" '
                         'stroke="#b00020" stroke-width="2.5"/><title>%s at %s</title></g>'
                         % (esc(mk["kind"]), round(mx - 4, 1), my - 4, esc(what),
                            _clock(mk["t"])))
        o.append("</g>")
    # the rebalances, over the rows
    styles = {"rebalance-started": ('stroke="#f28e2b" stroke-dasharray="5,3"', 26),
              "assignment-computed": ('stroke="#4e79a7" stroke-dasharray="1,3"', 0),
              "rebalance-completed": ('stroke="#17803d"', 13)}
    for rb in tl["rebalances"]:
        stroke, label_y = styles[rb["kind"]]
        rx = x(rb["t"])
        why = rb["reason"] + (" " + rb["member"] if rb["member"] else "")
        o.append('<g class="rebalance" data-kind="%s" data-epoch="%d"><line x1="%s" y1="%d" '
                 'x2="%s" y2="%d" %s stroke-width="1.5"/><title>%s: %s %d%s at %s</title>' % (
                     esc(rb["kind"]), rb["epoch"], rx, _TOP - 8, rx, ax_y, stroke,
                     esc(rb["kind"]), epoch_word, rb["epoch"],
                     (" (%s)" % esc(why)) if rb["reason"] else "", _clock(rb["t"])))
        if label_y:
            o.append('<text class="epoch" x="%s" y="%d" text-anchor="middle" fill="%s">%s</text>'
                     % (rx, label_y, "#17803d" if label_y == 13 else "#b35c00",
                        ("%s %d" % ("g" if group_type == "classic" else "e", rb["epoch"]))
                        if label_y == 13 else "\u25be"))
        o.append("</g>")
    o.append("</svg>")
    legend = ('<p class="legend">Rows: members (client id \u00b7 member id); x: time (UTC). '
              'A bar: what the member held (same text, same colour); hatched: pending '
              'revocation; \u25b8 still held. Lines: rebalance started (orange, dashed), '
              'target computed (blue, dotted), completed (green, with the %s). '
              '\u25cb joined, \u2715 left, expired or fenced.%s</p>' % (
                  epoch_word, (" %d more members are not drawn." % tl["hidden_rows"])
                  if tl.get("hidden_rows") else ""))
    return "".join(o) + legend


def _tick_step(span_ms: int) -> int:
    for s in (1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
              900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000):
        if span_ms / s <= 10:
            return s
    return 86_400_000 * (1 + span_ms // (86_400_000 * 10))


# =========================================================================== authentication
class BasicAuth:
    """HTTP basic authentication (RFC 7617) against the node's SCRAM credentials, as PLAIN
    checks a password (security/scram.py): the SCRAM-SHA-512 credential if the user has one,
    else SCRAM-SHA-256; an unknown user costs the same PBKDF2. The PBKDF2 runs in a thread
    (not on the loop), one at a time. A header that verified is remembered for
    CACHE_TTL_S (by an HMAC of it under a per-process key, never the password), so a page
    polling every 2 s does not cost a PBKDF2 each time; a remembered entry is dropped as soon
    as the user's credential changes. A refusal is logged as the Kafka listeners log one
    (server/access.py AuthFailureLog) and answered 401 after the node's failed-authentication
    delay."""

    CACHE_TTL_S = 60.0
    CACHE_MAX = 256
    REALM = "groupcoord"

    def __init__(self, access, delay_ms: int = 100):
        self.access = access
        self.delay_s = max(0, delay_ms) / 1000.0
        self._key = secrets.token_bytes(32)
        self._cache: dict = {}          # hmac(header) -> (user, mechanism, stored key, until)
        self._sem: Optional[asyncio.Semaphore] = None
        self._dummy = ScramCredential(2, secrets.token_bytes(32), secrets.token_bytes(64),
                                      secrets.token_bytes(64), MIN_ITERATIONS)

    def challenge(self) -> dict:
        return {"WWW-Authenticate": 'Basic realm="%s", charset="UTF-8"' % self.REALM}

    async def user(self, req: HttpRequest) -> Optional[str]:
        """The authenticated user name, or None (refused; already logged and delayed)."""
        header = req.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token.strip():
            return None                 # no credentials yet: the browser asks the user
        key = hmac.digest(self._key, header.encode("latin-1", "replace"), "sha256")
        hit = self._cache.get(key)
        if hit is not None:
            user, mech, stored, until = hit
            cred = self.access.lookup(user, mech)
            if time.monotonic() < until and cred is not None and cred.stored_key == stored:
                return user
            del self._cache[key]
        try:
            raw = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return await self._refuse(req, None, "malformed basic credentials")
        user, sep, password = raw.partition(":")
        if not sep or not user:
            return await self._refuse(req, user or None, "malformed basic credentials")
        cred = self.access.lookup(user, 2) or self.access.lookup(user, 1)
        known = cred is not None
        if self._sem is None:
            self._sem = asyncio.Semaphore(1)
        async with self._sem:
            ok = await asyncio.get_running_loop().run_in_executor(
                None, verify_password, cred if known else self._dummy, password)
        if not (known and ok):
            return await self._refuse(req, user, "unknown user" if not known
                                      else "wrong password")
        if len(self._cache) >= self.CACHE_MAX:
            self._cache.clear()
        self._cache[key] = (user, cred.mechanism, cred.stored_key,
                            time.monotonic() + self.CACHE_TTL_S)
        return user

    async def _refuse(self, req: HttpRequest, user: Optional[str], why: str) -> None:
        self.access.failures.note(req.peer, "HTTP (web view)", "BASIC", user, why)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return None


# =========================================================================== the handlers
class WebView:
    """The web view of one node: ``shards`` (ShardSet), its ``history``, ``access``
    (NodeAccess: credentials and ACLs) and ``auth`` (BasicAuth, or None: open)."""

    def __init__(self, shards, history: Optional[gv.GroupHistory] = None, access=None,
                 auth: Optional[BasicAuth] = None):
        self.shards = shards
        self.history = history if history is not None else gv.GroupHistory()
        self.access = access
        self.auth = auth

    def routes(self, http) -> None:
        http.route("/", self.list_page)
        http.route("/groups/", self.group_page, prefix=True)
        http.route("/api/groups", self.list_api)
        http.route("/api/groups/", self.group_api, prefix=True)

    # ------------------------------------------------------------------ who is asking
    async def _who(self, req: HttpRequest):
        """-> (principal, None) or (None, the 401 to answer)."""
        if self.auth is None:
            return "User:ANONYMOUS", None
        user = await self.auth.user(req)
        if user is None:
            return None, HttpResponse(401, b"authentication required\n",
                                      headers=self.auth.challenge())
        return "User:" + user, None

    def _visible(self, principal: str, req: HttpRequest):
        """-> None (every group) or a predicate group id -> may this principal see it."""
        acc = self.access
        if acc is None or acc.open:
            return None
        host = req.peer.rpartition(":")[0] or req.peer
        az = acc.authorizer
        if az.authorize(principal, host, _DESCRIBE, _CLUSTER, CLUSTER_NAME):
            return None
        return lambda gid: az.authorize(principal, host, _DESCRIBE, _GROUP, gid)

    # ------------------------------------------------------------------ the list
    def _list_args(self, req: HttpRequest) -> dict:
        type_ = req.arg("type", "") or ""
        state = req.arg("state", "") or ""
        return {"type_": type_ if type_ in gv.TYPES else "", "state": state[:64],
                "q": (req.arg("q", "") or "")[:256], "after": req.arg("after", "") or "",
                "limit": _int(req.arg("limit"), gv.DEFAULT_LIMIT)}

    async def _list(self, req: HttpRequest):
        principal, refused = await self._who(req)
        if refused is not None:
            return None, None, refused
        a = self._list_args(req)
        data = await gv.list_groups(self.shards, visible=self._visible(principal, req), **a)
        return a, data, principal

    async def list_page(self, req: HttpRequest) -> HttpResponse:
        a, data, who = await self._list(req)
        if a is None:
            return who
        body = render_list(data, a["type_"], a["state"], a["q"], a["after"])
        r = rev(data)
        if req.arg("fragment"):
            return _html(body, rev=r)
        qs = urlencode({k: v for k, v in (("type", a["type_"]), ("state", a["state"]),
                                           ("q", a["q"]), ("after", a["after"]),
                                           ("limit", req.arg("limit"))) if v})
        api = "/api/groups" + ("?" + qs if qs else "")
        frag = "/?" + (qs + "&" if qs else "") + "fragment=1"
        return _html(page("Groups", body, api, frag, _who_label(who), r), rev=r)

    async def list_api(self, req: HttpRequest) -> HttpResponse:
        a, data, who = await self._list(req)
        if a is None:
            return who
        return _json(200, data)

    # ------------------------------------------------------------------ one group
    def _group_id(self, req: HttpRequest, prefix: str) -> str:
        rest = req.path[len(prefix):]
        return req.arg("id", "") if rest == "" and req.arg("id") is not None else rest

    async def _group(self, req: HttpRequest, prefix: str):
        principal, refused = await self._who(req)
        if refused is not None:
            return None, None, refused
        gid = self._group_id(req, prefix)
        visible = self._visible(principal, req)
        if visible is not None and not visible(gid):
            return gid, None, ("not authorized to describe group %s" % gid, 403, principal)
        d = gv.group_detail(self.shards, gid, self.history,
                            page=_int(req.arg("page"), 0),
                            limit=_int(req.arg("limit"), gv.DEFAULT_LIMIT))
        if d is None:
            return gid, None, ("no group %s on this node" % gid, 404, principal)
        return gid, d, principal

    async def group_page(self, req: HttpRequest) -> HttpResponse:
        gid, d, who = await self._group(req, "/groups/")
        if gid is None:
            return who
        if d is None:
            msg, status, principal = who
            body = ('<p><a href="/">\u2190 all groups</a></p><h1>%s</h1>' % esc(msg))
            r = rev({"error": msg, "group_id": gid})
            if req.arg("fragment"):
                return _html(body, status, r)
            return _html(page("Group", body, group_href(gid, api=True),
                              group_href(gid, fragment=1), _who_label(principal), r),
                         status, r)
        body = render_group(d)
        r = rev(d)
        if req.arg("fragment"):
            return _html(body, rev=r)
        params = {"page": req.arg("page"), "limit": req.arg("limit")}
        return _html(page("Group %s" % _short(gid, 60), body,
                          group_href(gid, api=True, **params),
                          group_href(gid, fragment=1, **params), _who_label(who), r), rev=r)

    async def group_api(self, req: HttpRequest) -> HttpResponse:
        gid, d, who = await self._group(req, "/api/groups/")
        if gid is None:
            return who
        if d is None:
            msg, status, _ = who
            return _json(status, {"error": msg, "group_id": gid})
        return _json(200, d)


def _who_label(principal) -> str:
    return "" if not principal or principal == "User:ANONYMOUS" else principal


def _int(v: Optional[str], default: int) -> int:
    try:
        return int(v) if v is not None and len(v) < 12 else default
    except ValueError:
        return default


def _html(body: str, status: int = 200, rev: str = "") -> HttpResponse:
    headers = dict(_HEADERS)
    if rev:
        headers["X-Rev"] = rev
    return HttpResponse(status, body.encode("utf-8"), "text/html; charset=utf-8", headers)


def _json(status: int, data) -> HttpResponse:
    text = _dump(data)
    return HttpResponse(status, (text + "\n").encode(), "application/json",
                        {"X-Content-Type-Options": "nosniff",
                         "X-Rev": hashlib.sha256(text.encode()).hexdigest()[:24]})


# =========================================================================== wiring
def auth_for(mode: str, server) -> Optional[BasicAuth]:
    """The BasicAuth that --web-auth asks for on this server, or None."""
    sasl = any(b.listener.sasl for b in getattr(server, "bound", ()))
    if mode == "basic" or (mode == "auto" and sasl):
        cfg = server.access.config
        return BasicAuth(server.access, getattr(cfg, "failed_auth_delay_ms", 100))
    if sasl:
        log.warning("web view: --web-auth none on a node with SASL listeners: the group "
                    "pages on the metrics port are open to anybody who can reach it")
    return None


def register_web_routes(http, server, args=None) -> WebView:
    """Serve the web view on ``http`` (the metrics port's HttpServer) for ``server``'s shards,
    and hook the group history into every shard runtime (their ``history``)."""
    mode = getattr(args, "web_auth", "auto") if args is not None else "auto"
    view = WebView(server.shards, gv.GroupHistory(), server.access, auth_for(mode, server))
    for rt in server.shards.shards:
        rt.history = view.history
    view.routes(http)
    if view.auth is not None and not server.access.state.users:
        log.warning("web view: HTTP basic authentication is on but the node has no SCRAM "
                     "user: nobody can log in (groupcoord users set ...)")
    log.info("web view on http://%s:%d/ (%s)", *http.address[:2],
             "HTTP basic authentication against the SCRAM users" if view.auth is not None
             else "no authentication")
    return view
