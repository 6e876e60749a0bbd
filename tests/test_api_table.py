"""The API tables of docs/server.md and README.md list exactly what ApiVersions advertises:
every served API key with its version range, nothing else (a doc that names an API this node
does not serve, or misses one it does, fails here)."""
import os
import re

from groupcoord.protocol import supported_versions
from groupcoord.runtime.shards import ShardSet
from groupcoord.server import node as N

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def advertised() -> dict:
    return {k: (lo, hi) for k, (lo, hi)
            in N.node_api_ranges(supported_versions(), ShardSet.serves).items()}


def _range(text: str) -> tuple:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_server_md_api_table_is_what_is_advertised():
    text = _read("docs/server.md")
    section = text[text.index("\n## APIs"):]
    section = section[:section.index("\n## ", 1)]
    rows = re.findall(r"^\| (\w+) \((\d+)\) \| ([\d-]+) \|", section, re.M)
    got = {int(k): _range(v) for _, k, v in rows}
    assert len(got) == len(rows), "an API key appears twice in the table"
    assert got == advertised()


def test_readme_api_table_is_what_is_advertised():
    text = _read("README.md")
    rows = re.findall(r"^\| (\d+) \| (\w+) \| ([\d-]+) \|$", text, re.M)
    got = {int(k): _range(v) for k, _, v in rows}
    assert len(got) == len(rows)
    assert got == advertised()
