"""Every file, function and test that README.md and docs/*.md name exists (issue 18, point 8).

A doc that names something renamed or removed sends the reader to nothing; this test reads the
docs for the forms below and fails on each one that does not resolve, with file and line.

Forms checked (all in prose, tables and fenced blocks alike, except where said):
  paths      src/..., tests/..., benchmarks/..., native/..., spark_bench/..., examples/...,
             docs/..., .ci/... (backticked or not; `*` is a glob that must match something);
             a package-relative groups/x.py, client/x.py, ... (under src/groupcoord).
             Not checked: absolute paths (/tmp/..., a URL's path) and paths inside a ```text
             block that draws a layout (a tree of names, not a reference to this checkout).
  files      a backticked bare file name (`routing.py`, `krpc.pxd`, `pyproject.toml`) names
             some file of the repository (not .json: `topics.json` is a data directory's file).
  tests      `tests/f.py::test_x` or `f.py::test_x` (f resolved under tests/), and
             "`test_x` in tests/f.py": f has `def test_x`. In a table with a "test" column,
             each backticked `test_x` there (`[id]` ignored) is a test somewhere under tests/;
             `test_x*` or `test_x...` one whose name starts so.
  code       a backticked `mod.name` whose mod is the file name of a module of src/groupcoord
             (`offsets.handle_offset_commit`): mod defines name (def, class or module-level
             assignment, or a name a package's __init__ imports by name; with two modules of that
             name, one of them does), or else mod read as an instance of its CamelCase class
             (`result.offload`: Result, `coordinator.submit`: Coordinator) has it; a backticked
             `groupcoord.pkg.mod.name` is imported and looked up (a public path: re-exports
             count); `path.py`'s `name` (path relative to the repo or src/groupcoord): that
             module defines name. A backticked `Class.attr` whose Class is defined in exactly one
             module of src/groupcoord: the class (or a base) has attr as method, class
             attribute, field or `self.attr` assignment; a camelCase attr is Kafka's Java and is
             skipped. In a table with a "code" column, each backticked plain `name` there is
             defined somewhere in src/groupcoord or native/.
"""
import ast
import glob
import importlib
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "src", "groupcoord")
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                              for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

PATH = re.compile(r"(?<![\w/.~:-])((?:src|tests|benchmarks|native|spark_bench|examples|docs|\.ci)"
                  r"(?:/[\w.*-]*)+)")
PKG_PATH = re.compile(r"(?<![\w/.~:-])((?:assign|client|codegen|coordinator|protocol|runtime|"
                      r"server|storage)/[\w/-]+\.py)\b")
TICK = re.compile(r"`([^`\n]+)`")
NODEID = re.compile(r"(?<![\w/.-])((?:tests/)?[\w/]*test_\w+\.py)::(test_\w+)")
IN_FILE = re.compile(r"(?<![\w`])`?(test_\w+)`?,? in `?(tests/[\w/]+\.py)")
OWNS = re.compile(r"`([\w/]+\.py)`'s `(\w+)")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")
TREE = re.compile(r"^\s*(?:[|`+\\]--|[├└│])|^\s*[\w.-]+/\s*(?:\(|#|$)")
CAMEL = re.compile(r"^[a-z]+[A-Z]")


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def doc_lines(rel):
    """(line number, text, in a layout block) for each line of a doc. A ```text block is a
    layout when some line of it draws a tree or names a directory alone on its line."""
    lines = _read(rel).split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            out.append((i + 1, lines[i], False))
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(m.group(1)):
            j += 1
        body = lines[i + 1:j]
        layout = m.group(2).lower() == "text" and any(TREE.match(b) for b in body)
        out += [(i + 2 + k, b, layout) for k, b in enumerate(body)]
        i = j + 1
    return out


# ------------------------------------------------------------------------- what exists
def _src_modules():
    """dotted name -> path of every module under src/groupcoord."""
    mods = {}
    for p in glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True):
        rel = os.path.relpath(p, os.path.join(ROOT, "src"))[:-3].replace(os.sep, ".")
        mods[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = p
    return mods


MODULES = _src_modules()
BY_NAME = {}
for _dotted in MODULES:
    BY_NAME.setdefault(_dotted.rsplit(".", 1)[-1], []).append(_dotted)


def _targets(node):
    for t in getattr(node, "targets", None) or [getattr(node, "target", None)]:
        for n in ast.walk(t) if t is not None else ():
            if isinstance(n, ast.Name):
                yield n.id


class ModuleIndex:
    def __init__(self, path):
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        self.names, self.classes, self.bases = set(), {}, {}
        package = os.path.basename(path) == "__init__.py"
        for node in tree.body:
            if package and isinstance(node, ast.ImportFrom):    # a package's public names
                self.names.update(a.asname or a.name for a in node.names)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                self.names.update(_targets(node))
            elif isinstance(node, (ast.If, ast.Try)):     # names defined under a guard
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                        self.names.add(sub.name)
                    elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                        self.names.update(_targets(sub))
            if isinstance(node, ast.ClassDef):
                attrs = set()
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        attrs.add(sub.name)
                    elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                        attrs.update(_targets(sub))
                for sub in ast.walk(node):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                            and isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                        attrs.add(sub.attr)
                    elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        attrs.add(sub.value)                # __slots__ entries
                self.classes[node.name] = attrs
                self.bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]


INDEX = {m: ModuleIndex(p) for m, p in MODULES.items()}
CLASS_HOME = {}
for _m, _ix in INDEX.items():
    for _c in _ix.classes:
        CLASS_HOME.setdefault(_c, []).append(_m)
DEFINED = set().union(*(ix.names for ix in INDEX.values()),
                      *(a for ix in INDEX.values() for a in ix.classes.values()))
NATIVE_DEF = re.compile(r"^\s*(?:c?p?def|cdef\s+class|class|ctypedef)\s+(?:[\w\[\], *]+\s+)?"
                        r"\*?(\w+)\s*[(:]", re.M)
for _p in glob.glob(os.path.join(ROOT, "native", "*.p*")):
    DEFINED.update(NATIVE_DEF.findall(open(_p, encoding="utf-8").read()))

TEST_FILES = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True))
TEST_DEFS = {os.path.relpath(p, ROOT): set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)",
                                                     open(p, encoding="utf-8").read(), re.M))
             for p in TEST_FILES}
ALL_TESTS = set().union(*TEST_DEFS.values())
REPO_BASENAMES = {f for _d, _s, fs in os.walk(ROOT) for f in fs
                  if not _d.startswith(os.path.join(ROOT, "build"))}


def class_has(cls, attr, seen=()):
    (mod,) = CLASS_HOME[cls]
    ix = INDEX[mod]
    if attr in ix.classes[cls]:
        return True
    return any(b not in seen and len(CLASS_HOME.get(b, ())) == 1
               and class_has(b, attr, seen + (cls,)) for b in ix.bases[cls])


def module_has(dotted, name):
    ix = INDEX.get(dotted)
    return ix is not None and (name in ix.names or name in ix.classes)


# ------------------------------------------------------------------------- the checks
def check_path(p):
    p = p.rstrip(".,;:")
    full = os.path.join(ROOT, p)
    if "*" in p:
        return bool(glob.glob(full))
    return os.path.exists(full)


def check_code(ref):
    """None when the reference is not one of the resolvable forms; else whether it exists."""
    ref = ref[:-2] if ref.endswith("()") else ref
    parts = ref.split(".")
    if len(parts) < 2 or not all(re.fullmatch(r"\w+", x) for x in parts):
        return None
    if parts[0] == "groupcoord":     # the public path: import it and look the rest up
        if ref in MODULES:
            return True
        for k in range(len(parts) - 1, 0, -1):
            mod = ".".join(parts[:k])
            if mod in MODULES:
                obj = importlib.import_module(mod)
                for attr in parts[k:]:
                    if not hasattr(obj, attr):
                        return False
                    obj = getattr(obj, attr)
                return True
        return None
    if len(parts) != 2:
        return None
    head, name = parts
    if head in BY_NAME:
        if any(module_has(m, name) for m in BY_NAME[head]):
            return True
        # `result.offload`, `coordinator.submit`: an instance named after its class
        cls = "".join(w.capitalize() for w in head.split("_"))
        return len(CLASS_HOME.get(cls, ())) == 1 and class_has(cls, name)
    if len(CLASS_HOME.get(head, ())) == 1 and not CAMEL.match(name):
        return class_has(head, name)
    return None


def check_owned(path, name):
    for base in (ROOT, PKG):
        full = os.path.normpath(os.path.join(base, path))
        for dotted, p in MODULES.items():
            if os.path.normpath(p) == full:
                return module_has(dotted, name)
    cands = [m for m, p in MODULES.items() if p.endswith(os.sep + path)]
    return None if not cands else any(module_has(m, name) for m in cands)


def resolve_test_file(name):
    """tests/x.py or x.py -> repository-relative path of the test file, or None."""
    if name in TEST_DEFS:
        return name
    hits = [p for p in TEST_DEFS if os.path.basename(p) == os.path.basename(name)]
    return hits[0] if len(hits) == 1 else None


def table_columns(cells):
    cols = [c.strip().lower() for c in cells]
    return ([i for i, c in enumerate(cols) if c == "test" or c.startswith("test ")],
            [i for i, c in enumerate(cols) if c == "code" or c.startswith("code ")])


def split_row(line):
    return line.strip().strip("|").split("|")


def problems(rel):
    out, counts = [], {"paths": 0, "files": 0, "tests": 0, "code": 0}
    tcols = ccols = ()
    for n, line, layout in doc_lines(rel):
        where = "%s:%d" % (rel, n)
        if not layout:
            for p in PATH.findall(line):
                counts["paths"] += 1
                if not check_path(p):
                    out.append("%s: path %s does not exist" % (where, p))
            for p in PKG_PATH.findall(line):
                counts["paths"] += 1
                if not os.path.exists(os.path.join(PKG, p)):
                    out.append("%s: path %s does not exist under src/groupcoord" % (where, p))
        for f, t in NODEID.findall(line) + [(b, a) for a, b in IN_FILE.findall(line)]:
            counts["tests"] += 1
            tf = resolve_test_file(f)
            if tf is None or t not in TEST_DEFS[tf]:
                out.append("%s: test %s::%s does not exist" % (where, f, t))
        for p, name in OWNS.findall(line):
            r = check_owned(p, name)
            if r is not None:
                counts["code"] += 1
                if not r:
                    out.append("%s: %s has no %s" % (where, p, name))
        for tok in TICK.findall(line):
            if re.fullmatch(r"[\w-]+\.(?:py|pyx|pxd|md|toml)", tok):
                counts["files"] += 1
                if tok not in REPO_BASENAMES:
                    out.append("%s: no file named %s in the repository" % (where, tok))
                continue
            if re.fullmatch(r"[\w-]+\.(?:json|txt|log|csv|ya?ml|ini|cfg)", tok):
                continue                                    # a data file, not code
            r = check_code(tok)
            if r is not None:
                counts["code"] += 1
                if not r:
                    out.append("%s: %s is not defined where it says" % (where, tok))
        # tables with a test and/or code column
        if not line.lstrip().startswith("|"):
            tcols = ccols = ()
            continue
        cells = split_row(line)
        if set("".join(cells).strip()) <= set("-: "):
            continue
        if not tcols and not ccols and not any("`" in c for c in cells):
            tcols, ccols = table_columns(cells)
            continue
        for i in tcols:
            for tok in TICK.findall(cells[i] if i < len(cells) else ""):
                m = re.fullmatch(r"(test_\w+)(\*|\.\.\.)?(?:\[[^\]]*\])?", tok)
                if not m:
                    continue
                counts["tests"] += 1
                ok = (any(t.startswith(m.group(1)) for t in ALL_TESTS) if m.group(2)
                      else m.group(1) in ALL_TESTS)
                if not ok:
                    out.append("%s: no test %s under tests/" % (where, tok))
        for i in ccols:
            for tok in TICK.findall(cells[i] if i < len(cells) else ""):
                if re.fullmatch(r"\w+(?:\(\))?", tok):
                    counts["code"] += 1
                    if tok.rstrip("()") not in DEFINED:
                        out.append("%s: %s is defined nowhere in src/groupcoord or native/"
                                   % (where, tok))
    return out, counts


RESULTS = {rel: problems(rel) for rel in DOCS}


def test_the_checker_sees_references_and_catches_a_stale_one():
    total = {k: sum(c[k] for _o, c in RESULTS.values()) for k in ("paths", "files", "tests",
                                                                 "code")}
    assert total["paths"] > 100 and total["tests"] > 50 and total["code"] > 100, total
    # Each form resolves what exists and refuses what does not.
    assert check_path("tests/conftest.py") and not check_path("tests/no_such_file.py")
    assert check_code("limits.check_request") and check_code("limits.no_such_function") is False
    assert check_code("groupcoord.groups.limits.check_request")
    assert check_code("groupcoord.groups.limits.nope") is False
    assert check_owned("groups/limits.py", "check_request")
    assert check_owned("groups/limits.py", "nope") is False
    assert check_code("time.monotonic") is None and check_code("uuid.UUID") is None


@pytest.mark.parametrize("rel", DOCS)
def test_doc_names_only_what_exists(rel):
    out, _counts = RESULTS[rel]
    assert not out, "%d stale reference(s):\n  %s" % (len(out), "\n  ".join(out))
