"""Schema parity with Kafka's own message definitions.

kafka-python 3.0.12 (a test dependency) bundles Kafka's message JSON in
kafka/protocol/schemas/resources/. For every Kafka API we serve (request and response, not our
Connect group APIs 10000+ nor the coordinator records) and every version we serve, this test
compares our schema with Kafka's, field by field: name, type, position, the versions a field
is present in, nullability, tags, and which versions are flexible. Both files are read as raw
JSON with the version-range rule written here, so a bug in our codegen's schema model cannot
make both sides agree.

Kafka's files are read from site-packages at test time; none is copied into the tree.
"""
import json
import os

import pytest

SCHEMA_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "src", "groupcoord",
                          "protocol", "schemas")
KAFKA_VERSION_REQUIRED = "3.0.12"


def _kafka_dir():
    kafka = pytest.importorskip("kafka")
    assert kafka.__version__ == KAFKA_VERSION_REQUIRED, kafka.__version__
    return os.path.join(os.path.dirname(kafka.__file__), "protocol", "schemas", "resources")


def strip_comments(text):
    """Kafka's JSON has // comments; drop them, leaving string literals ("http://...") alone."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def test_strip_comments():
    text = '// head\n{"a": "http://x//y", // tail\n "b": 1}\n// end'
    assert json.loads(strip_comments(text)) == {"a": "http://x//y", "b": 1}


def in_range(spec, v):
    """Kafka's version-range rule: "none", "N", "N+", "N-M"; absent = none."""
    if spec is None:
        return False
    s = str(spec).strip()
    if s in ("", "none"):
        return False
    if s.endswith("+"):
        return v >= int(s[:-1])
    if "-" in s:
        lo, hi = s.split("-")
        return int(lo) <= v <= int(hi)
    return v == int(s)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.loads(strip_comments(f.read()))


def _structs(doc):
    """Struct type name -> fields, from commonStructs and from every inline definition."""
    out = {c["name"]: c["fields"] for c in doc.get("commonStructs", [])}

    def visit(fields):
        for f in fields:
            if "fields" in f:
                out.setdefault(f["type"].removeprefix("[]"), f["fields"])
                visit(f["fields"])
    visit(doc["fields"])
    for c in doc.get("commonStructs", []):
        visit(c["fields"])
    return out


def norm_default(d):
    """A default as a comparable value: Kafka writes "false" or false, "-1" or -1."""
    if d is None:
        return None
    s = str(d)
    if s.lower() in ("true", "false"):
        return s.lower()
    try:
        return int(s, 0)
    except ValueError:
        return s


def layout(fields, structs, v, flexible):
    """The wire layout of `fields` at version v: an ordered list of the fields in the body
    (name, type, nullable, nested layout), the tagged fields (tag, name, type, nullable,
    default, nested layout) by tag, and the fields the version lacks (name, default): a
    decoder fills those with the default. ("ignorable" is not compared: it only says whether
    our encoder may drop a value the version cannot carry, a choice that never changes the
    bytes.)"""
    body, tagged, absent = [], [], []
    for f in fields:
        if not in_range(f["versions"], v):
            absent.append((f["name"], norm_default(f.get("default"))))
            continue
        t = f["type"]
        elem = t.removeprefix("[]")
        nested = None
        if elem[:1].isupper():            # a struct, defined inline or elsewhere in the file
            nested = layout(f.get("fields") or structs[elem], structs, v, flexible)
        nullable = in_range(f.get("nullableVersions"), v)
        if flexible and in_range(f.get("taggedVersions"), v):
            tagged.append((f["tag"], f["name"], t, nullable, norm_default(f.get("default")),
                           nested))
        else:
            body.append((f["name"], t, nullable, nested))
    return body, sorted(tagged, key=lambda x: x[0]), sorted(absent)


def _diff(ours, theirs, path):
    """Human-readable differences between two layouts."""
    out = []
    (ob, ot, oa), (tb, tt, ta) = ours, theirs
    if [f[0] for f in ob] != [f[0] for f in tb]:
        out.append("%s: fields %s, Kafka %s" % (path, [f[0] for f in ob], [f[0] for f in tb]))
    for o, t in zip(ob, tb):
        if o[0] != t[0]:
            continue
        where = "%s.%s" % (path, o[0])
        if o[1] != t[1]:
            out.append("%s: type %s, Kafka %s" % (where, o[1], t[1]))
        if o[2] != t[2]:
            out.append("%s: nullable %s, Kafka %s" % (where, o[2], t[2]))
        if o[3] is not None and t[3] is not None:
            out += _diff(o[3], t[3], where)
    if [x[:5] for x in ot] != [x[:5] for x in tt]:
        out.append("%s: tagged fields %s, Kafka %s" % (path, [x[:5] for x in ot],
                                                       [x[:5] for x in tt]))
    for o, t in zip(ot, tt):
        if o[0] == t[0] and o[5] is not None and t[5] is not None:
            out += _diff(o[5], t[5], "%s.%s" % (path, o[1]))
    # A field Kafka has only at versions above ours is not in our schema: compared where both
    # define it.
    both = {a[0] for a in oa} & {a[0] for a in ta}
    oa, ta = [a for a in oa if a[0] in both], [a for a in ta if a[0] in both]
    if oa != ta:
        out.append("%s: absent fields (name, default) %s, Kafka %s"
                   % (path, oa, ta))
    return out


def _ours():
    docs = {}
    for fn in sorted(os.listdir(SCHEMA_DIR)):
        if fn.endswith(".json"):
            doc = load(os.path.join(SCHEMA_DIR, fn))
            if doc["type"] in ("request", "response") and doc["apiKey"] < 10000:
                docs[doc["name"]] = doc
    return docs


OURS = _ours()
# Kafka APIs we serve whose definitions kafka-python 3.0.12 does not bundle (it implements no
# KIP-848 consumer group API). Heartbeat v0-1 and Describe v0 were compared with this same
# code against apache/kafka's files (equal); Describe v1 adds MemberType (KIP-1099).
NOT_BUNDLED = {"ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
               "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse"}


def _versions(doc):
    lo, hi = doc["validVersions"].split("-") if "-" in doc["validVersions"] else (
        doc["validVersions"],) * 2
    return range(int(lo), int(hi) + 1)


def test_every_served_kafka_api_is_compared():
    kdir = _kafka_dir()
    missing = {n for n in OURS if not os.path.exists(os.path.join(kdir, n + ".json"))}
    assert missing == NOT_BUNDLED
    assert len(OURS) - len(NOT_BUNDLED) >= 30


@pytest.mark.parametrize("name", sorted(set(OURS) - NOT_BUNDLED))
def test_schema_matches_kafka(name):
    ours = OURS[name]
    theirs = load(os.path.join(_kafka_dir(), name + ".json"))
    assert (ours["apiKey"], ours["type"]) == (theirs["apiKey"], theirs["type"])
    os_, ts = _structs(ours), _structs(theirs)
    problems = []
    for v in _versions(ours):
        if v not in _versions(theirs):
            problems.append("v%d: Kafka does not define this version (%s)"
                            % (v, theirs["validVersions"]))
            continue
        flex = in_range(ours.get("flexibleVersions"), v)
        if flex != in_range(theirs.get("flexibleVersions"), v):
            problems.append("v%d: flexible %s, Kafka %s" % (v, flex, not flex))
            continue
        problems += ["v%d %s" % (v, p) for p in
                     _diff(layout(ours["fields"], os_, v, flex),
                           layout(theirs["fields"], ts, v, flex), name)]
    assert not problems, "\n".join(problems)


def _mutations():
    # Each edit of a copy of Kafka's MetadataRequest/Response must show up as a difference.
    def field(doc, *names):
        fields = doc["fields"]
        for n in names[:-1]:
            fields = next(f for f in fields if f["name"] == n)["fields"]
        return next(f for f in fields if f["name"] == names[-1])
    yield "MetadataRequest", lambda d: field(d, "AllowAutoTopicCreation").update(type="int8")
    yield "MetadataRequest", lambda d: field(d, "Topics", "Name").update(nullableVersions="9+")
    yield "MetadataRequest", lambda d: field(d, "Topics", "TopicId").update(versions="11+")
    yield "MetadataRequest", lambda d: field(d, "AllowAutoTopicCreation").update(default=False)
    yield "MetadataRequest", lambda d: d["fields"].reverse()
    yield "MetadataRequest", lambda d: d.update(flexibleVersions="10+")
    yield "MetadataResponse", lambda d: field(d, "Brokers", "Rack").update(name="RackId")
    yield "MetadataResponse", lambda d: field(d, "ClusterId").update(
        taggedVersions="9+", tag=0)


@pytest.mark.parametrize("case", range(len(list(_mutations()))))
def test_a_changed_definition_is_reported(case):
    import copy
    name, mutate = list(_mutations())[case]
    theirs = load(os.path.join(_kafka_dir(), name + ".json"))
    changed = copy.deepcopy(theirs)
    mutate(changed)
    found = []
    for v in range(13):
        flex = in_range(theirs.get("flexibleVersions"), v)
        if flex != in_range(changed.get("flexibleVersions"), v):
            found.append(v)
            continue
        if _diff(layout(changed["fields"], _structs(changed), v, flex),
                 layout(theirs["fields"], _structs(theirs), v, flex), name):
            found.append(v)
    assert found
