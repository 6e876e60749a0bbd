"""Hypothesis strategies that build random, valid messages of any schema at any version.

Fields a version does not have keep their default, so decode(encode(m, v), v) == m must hold.
"""
import os

import hypothesis.strategies as st

import groupcoord.protocol as P
from groupcoord.codegen.schema import INT_RANGES, Field, load_all

SCHEMA_DIR = os.path.join(os.path.dirname(P.__file__), "schemas")
SPECS = load_all(SCHEMA_DIR)

_text = st.text(max_size=12)
_bytes = st.binary(max_size=24)


def _scalar(t: str, flexible: bool):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]),
                         st.integers(lo, hi))
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return _text
    if t in ("bytes", "records"):
        return _bytes
    if t == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(t)


def _default(f: Field):
    d = f.default_value()
    if f.is_array:
        return [] if d is not None else None
    if d == "STRUCT":
        return getattr(P.messages, f.struct.py_class)()
    return d


def _field(f: Field, v: int, flexible: bool, depth: int):
    if f.is_struct:
        inner = struct_strategy(f.struct.py_class, f.struct.fields, v, flexible, depth + 1)
    else:
        inner = _scalar(f.elem_type, flexible)
    if f.is_array:
        inner = st.lists(inner, max_size=3 if depth < 2 else 1)
    if f.nullable(v):
        inner = st.one_of(st.none(), inner)
    return inner


def struct_strategy(cls_name: str, fields, v: int, flexible: bool, depth: int = 0):
    cls = getattr(P.messages, cls_name)
    kwargs = {}
    for f in fields:
        if f.present(v):
            kwargs[f.py_name] = _field(f, v, flexible, depth)
        else:
            kwargs[f.py_name] = st.just(_default(f))
    return st.builds(cls, **kwargs)


def message_strategy(name: str, v: int):
    spec = SPECS[name]
    return struct_strategy(name, spec.fields, v, spec.flexible(v))


def all_message_versions():
    """[(message name, version)] for every message and every version it supports."""
    out = []
    for spec in sorted(SPECS.values(), key=lambda s: s.name):
        for v in spec.versions:
            out.append((spec.name, v))
    return out
