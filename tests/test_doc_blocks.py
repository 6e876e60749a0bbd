"""Every fenced code block of README.md and docs/*.md is run (issue 17, point 4).

The rule is mechanical, by the fence's info string:

    python, py                  written to block.py and run as `python block.py` in a fresh
                                temp dir, PYTHONPATH = the directory holding the imported
                                groupcoord package (src/ in a checkout), bounded; exit 0
    bash, sh, shell, console    each command run by bash from the repository root, bounded;
                                exit 0 (console: only the lines starting with "$ ")
    text                        not code (output samples, layouts, diagrams): not run
    anything else, or nothing   a failure: say what the block is

A block that cannot run in a test (a benchmark run of many minutes, `pip install` of the
package, the test suite itself) has a marker on the line right above its fence:

    <!-- doc-test: skip (why) -->

It is not run; its test checks what can be checked without running it: the repository files
it names (benchmarks/x.py, examples/y.py) exist and the Python ones compile. `grep -rn
"doc-test: skip" README.md docs` lists every such block with its reason.

Substitutions, the ones a reader makes for their own machine:
  * `groupcoord serve ...` in a shell block runs in the background, as in the reader's second
    terminal (tests/serve_proc.py): --port becomes 0, --data-dir a temp dir, --host 0.0.0.0
    127.0.0.1. It must print its listening line; at the end of the block it gets SIGTERM (by
    PID) and must exit 0. Port 9092 in the block's later commands becomes the port it printed.
  * A block that talks to 127.0.0.1:9092 without starting a server gets the port of one the
    test started (topics orders:12 and payments:6, as the README's serve command).
  * `groupcoord` is run as `python -m groupcoord.cli` (the console script's entry point, so
    the package under test runs); `PYTHONPATH=src` points at that package; `python` is the
    interpreter running the tests.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

import pytest

from serve_proc import ServeProc, package_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                              for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}
NOT_CODE = {"text"}
RUN_TIMEOUT_S = 180
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s*\((.+)\)$")
PORT = re.compile(r"\b9092\b")
SERVE_TOPICS = {"orders": 12, "payments": 6}
REPO_FILE = re.compile(r"(?<![\w/.-])((?:benchmarks|examples|tests|spark_bench|src)/[\w./-]*\w)")


@dataclass
class Block:
    path: str           # repository-relative
    line: int           # 1-based line of the opening fence
    lang: str
    text: str
    marker: str         # the doc-test marker right above the fence, or ""

    @property
    def id(self):
        return "%s:%d" % (self.path, self.line)


def extract(path):
    """The fenced blocks of one Markdown file, and the doc-test markers not followed by a
    fence (a misplaced marker is an error, not a silent no-op)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, stray = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            mk = MARKER.match(lines[i].strip())
            if mk and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
                stray.append("%s:%d: %s" % (path, i + 1, lines[i].strip()))
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not (lines[j].startswith(fence[0] * len(fence))
                                      and not lines[j].strip(fence[0]).strip()):
            j += 1
        above = MARKER.match(lines[i - 1].strip()) if i else None
        blocks.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:j]) + "\n",
                            above.group(1) if above else ""))
        i = j + 1
    return blocks, stray


ALL = [b for p in DOCS for b in extract(p)[0]]
# What is run or skipped (one test each); text blocks are only checked to be fenced so.
CODE = [b for b in ALL if b.marker or b.lang not in NOT_CODE]


def test_the_docs_have_blocks_and_every_marker_sits_on_a_fence():
    assert len(DOCS) > 10 and sum(b.path == "README.md" for b in CODE) >= 6
    stray = [s for p in DOCS for s in extract(p)[1]]
    assert not stray, "doc-test markers must be on the line right above a fence: %s" % stray


# ------------------------------------------------------------------------------- servers
class BlockServe(ServeProc):
    """A `groupcoord serve` command line from a block, with the reader's substitutions."""

    def __init__(self, argv, data_dir):
        super().__init__(data_dir)
        self.argv = argv

    def _argv(self):
        return self.argv


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """Started on first use: the node the blocks that say 127.0.0.1:9092 talk to."""
    made = []

    def get():
        if not made:
            made.append(ServeProc(tmp_path_factory.mktemp("doc-serve"),
                                  topics=SERVE_TOPICS).start())
        return made[0]

    yield get
    for s in made:
        rc = s.stop()
        s.close()
        assert rc == 0, "the shared server did not exit 0 on SIGTERM"


def _env():
    env = dict(os.environ)
    root = package_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _show(p):
    return "exit %s\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout[-6000:],
                                                       p.stderr[-6000:])


# ------------------------------------------------------------------------------- python
def run_python(block, get_server, tmp):
    code = block.text
    if PORT.search(code):
        code = PORT.sub(str(get_server().port), code)
    path = os.path.join(tmp, "block.py")
    with open(path, "w") as f:
        f.write(code)
    p = subprocess.run([sys.executable, path], cwd=tmp, env=_env(), capture_output=True,
                       text=True, timeout=RUN_TIMEOUT_S)
    assert p.returncode == 0, "%s (python) failed:\n%s" % (block.id, _show(p))


# ------------------------------------------------------------------------------- shell
SERVE_CMD = re.compile(r"^(?:\w+=\S*\s+)*(?:groupcoord|python\d*\s+-m\s+groupcoord\.cli)\s+serve\b")


def commands(block):
    """Logical commands of a shell block: continuation lines joined, comments and blank
    lines dropped; console blocks: only the "$ " lines (and their continuations)."""
    out, cur, prompt = [], "", block.lang != "console"
    for ln in block.text.split("\n"):
        if block.lang == "console" and not cur:
            prompt = ln.startswith("$ ")
            ln = ln[2:] if prompt else ""
        if not prompt:
            continue
        if ln.rstrip().endswith("\\"):
            cur += ln.rstrip()[:-1] + " "
            continue
        cur += ln
        if cur.strip() and not cur.strip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    return out


# serve options the reader changes for their machine: value -> what the test uses
def serve_argv(cmd, data_dir):
    """`[ENV=..] groupcoord serve ARGS` -> argv of `python -m groupcoord.cli serve ARGS'`:
    --port 0 (the listening line tells the port), --data-dir a temp dir, a wildcard --host
    127.0.0.1; everything else as written."""
    toks = shlex.split(cmd, comments=True)
    args = toks[toks.index("serve") + 1:]
    out = []
    i = 0
    while i < len(args):
        key, eq, value = args[i].partition("=")
        if key in ("--port", "--data-dir", "--host"):
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            if key == "--port":
                value = "0"
            elif key == "--data-dir":
                value = data_dir
            elif value in ("0.0.0.0", "::"):
                value = "127.0.0.1"
            out += [key, value]
        else:
            out.append(args[i])
        i += 1
    if "--data-dir" not in out:
        out += ["--data-dir", data_dir]
    if "--port" not in out:
        out += ["--port", "0"]
    return [sys.executable, "-m", "groupcoord.cli", "serve"] + out


def _subst(cmd, port):
    cmd = re.sub(r"(^|\s)PYTHONPATH=src(?=\s)", r"\1PYTHONPATH=" + shlex.quote(package_root()),
                 cmd)
    cmd = re.sub(r"^((?:\w+=\S*\s+)*)groupcoord\b", r"\1python -m groupcoord.cli", cmd)
    if port is not None:
        cmd = PORT.sub(str(port), cmd)
    return cmd


def run_shell(block, get_server, tmp):
    served = []
    try:
        for n, cmd in enumerate(commands(block)):
            if SERVE_CMD.match(cmd):
                s = BlockServe(serve_argv(cmd, os.path.join(tmp, "data-%d" % n)),
                               os.path.join(tmp, "data-%d" % n))
                served.append(s)
                s.start()
                continue
            port = None
            if PORT.search(cmd):
                port = served[-1].port if served else get_server().port
            p = subprocess.run(["bash", "-c", "set -eo pipefail\n" + _subst(cmd, port)],
                               cwd=ROOT, env=_env(), capture_output=True, text=True,
                               timeout=RUN_TIMEOUT_S)
            assert p.returncode == 0, "%s: `%s` failed:\n%s" % (block.id, cmd, _show(p))
    finally:
        bad = []
        for s in served:
            rc = s.stop()
            if rc != 0:
                bad.append("exit %s after SIGTERM\n%s" % (rc, s.describe()))
            s.close()
    assert not bad, "%s: a server the block started did not stop cleanly: %s" % (block.id, bad)


# ------------------------------------------------------------------------------- the test
@pytest.mark.parametrize("block", CODE, ids=[b.id for b in CODE])
def test_doc_block(block, shared_server, tmp_path):
    if block.marker:
        m = SKIP.match(block.marker)
        assert m, "%s: unknown doc-test marker %r (known: skip (reason))" % (block.id,
                                                                            block.marker)
        missing = [f for f in REPO_FILE.findall(block.text)
                   if not os.path.exists(os.path.join(ROOT, f))]
        assert not missing, "%s: the block not run names files that do not exist: %s" % (
            block.id, missing)
        # Not run (its reason: m.group(1)); what it can be checked for without running it is:
        # the files it names exist (above) and the Python ones among them compile.
        for f in REPO_FILE.findall(block.text):
            if f.endswith(".py"):
                with open(os.path.join(ROOT, f), encoding="utf-8") as src:
                    compile(src.read(), f, "exec")
        return
    if block.lang in PYTHON:
        run_python(block, shared_server, str(tmp_path))
    elif block.lang in SHELL:
        run_shell(block, shared_server, str(tmp_path))
    else:
        pytest.fail("%s: a block fenced %r: fence code as python or bash (it is run), "
                    "anything else as text, or put <!-- doc-test: skip (reason) --> above it"
                    % (block.id, "```" + block.lang))
