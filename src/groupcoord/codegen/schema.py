"""The message-definition model: loads the JSON schemas (docs/schema-format.md).

Stdlib only: setup.py imports this at build time, before any dependency is installed.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

PRIMITIVES = {
    "bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
    "uuid", "string", "bytes", "records",
}
FIXED_SIZE = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
              "int64": 8, "float64": 8, "uuid": 16}
INT_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
              "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
              "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1)}
ZERO_UUID = b"\0" * 16


class SchemaError(ValueError):
    """A schema file that does not follow docs/schema-format.md."""


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: Optional[int]  # None = open ended; lo > hi (lo=1, hi=0) = no versions

    @classmethod
    def parse(cls, text) -> "Versions":
        if text is None:
            return NO_VERSIONS
        t = str(text).strip()
        if t == "none" or t == "":
            return NO_VERSIONS
        if t.endswith("+"):
            return cls(int(t[:-1]), None)
        if "-" in t:
            a, b = t.split("-", 1)
            return cls(int(a), int(b))
        return cls(int(t), int(t))

    def __contains__(self, v: int) -> bool:
        return v >= self.lo and (self.hi is None or v <= self.hi)

    def __str__(self) -> str:
        if self.hi is not None and self.lo > self.hi:
            return "none"
        if self.hi is None:
            return "%d+" % self.lo
        return "%d-%d" % (self.lo, self.hi) if self.lo != self.hi else str(self.lo)


NO_VERSIONS = Versions(1, 0)


def snake(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


@dataclass
class StructDef:
    type_name: str          # the name used in the schema ("Protocol")
    py_class: str           # the Python class name ("JoinGroupRequestProtocol")
    fields: list            # list[Field]
    versions: Versions


@dataclass
class Field:
    name: str
    py_name: str
    type: str               # as written: "int32", "[]string", "[]JoinGroupRequestProtocol"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: Optional[int]
    default: object         # raw default from the schema, or None when absent
    ignorable: bool
    struct: Optional[StructDef] = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present(self, v: int) -> bool:
        return v in self.versions

    def nullable(self, v: int) -> bool:
        return v in self.nullable_versions

    def tagged(self, v: int) -> bool:
        return self.tag is not None and v in self.tagged_versions

    def ever_nullable(self) -> bool:
        nv = self.nullable_versions
        return not (nv.hi is not None and nv.lo > nv.hi)

    # ---- defaults ----
    def default_value(self):
        """The Python value of the default (a fresh list/struct is built by callers)."""
        d = self.default
        if isinstance(d, str) and d == "null":
            return None
        if self.is_array:
            if d not in (None, "", "[]"):
                raise SchemaError("%s: unsupported array default %r" % (self.name, d))
            return []
        t = self.type
        if self.is_struct:
            return None if d == "null" else "STRUCT"
        if t == "bool":
            if d is None:
                return False
            if isinstance(d, bool):
                return d
            if str(d).lower() in ("true", "false"):
                return str(d).lower() == "true"
            raise SchemaError("%s: bad bool default %r" % (self.name, d))
        if t in INT_RANGES:
            if d is None or d == "":
                return 0
            v = d if isinstance(d, int) else int(str(d), 0)
            lo, hi = INT_RANGES[t]
            if not lo <= v <= hi:
                raise SchemaError("%s: default %r out of range for %s" % (self.name, d, t))
            return v
        if t == "float64":
            return float(d) if d not in (None, "") else 0.0
        if t == "string":
            return "" if d is None else str(d)
        if t in ("bytes", "records"):
            if d not in (None, ""):
                raise SchemaError("%s: unsupported bytes default %r" % (self.name, d))
            return b""
        if t == "uuid":
            return ZERO_UUID
        raise SchemaError("%s: no default rule for type %s" % (self.name, t))


@dataclass
class MessageSpec:
    name: str
    type: str                       # request / response / header / data
    api_key: Optional[int]
    valid_versions: Versions
    flexible_versions: Versions
    fields: list
    structs: dict = field(default_factory=dict)   # type name -> StructDef
    source: str = ""

    @property
    def versions(self) -> range:
        return range(self.valid_versions.lo, self.valid_versions.hi + 1)

    def flexible(self, v: int) -> bool:
        return v in self.flexible_versions

    def all_structs(self) -> list:
        """Every struct in definition order, innermost first."""
        out, seen = [], set()

        def visit(fields):
            for f in fields:
                if f.struct is not None and f.struct.py_class not in seen:
                    seen.add(f.struct.py_class)
                    visit(f.struct.fields)
                    out.append(f.struct)
        visit(self.fields)
        return out


def _class_name(msg_name: str, type_name: str) -> str:
    return type_name if type_name.startswith(msg_name) else msg_name + type_name


def _parse_fields(raw_fields, msg_name, structs, path, common) -> list:
    out = []
    names = set()
    for rf in raw_fields:
        try:
            name = rf["name"]
            typ = rf["type"]
            versions = Versions.parse(rf["versions"])
        except KeyError as e:
            raise SchemaError("%s: field without %s" % (path, e)) from None
        if name in names:
            raise SchemaError("%s: duplicate field %s" % (path, name))
        names.add(name)
        f = Field(
            name=name, py_name=snake(name), type=typ, versions=versions,
            nullable_versions=Versions.parse(rf.get("nullableVersions")),
            tagged_versions=Versions.parse(rf.get("taggedVersions")),
            tag=rf.get("tag"), default=rf.get("default"),
            ignorable=bool(rf.get("ignorable", False)),
        )
        if (f.tag is None) != (rf.get("taggedVersions") is None):
            raise SchemaError("%s.%s: tag and taggedVersions go together" % (path, name))
        elem = f.elem_type
        if elem not in PRIMITIVES:
            if elem in structs and "fields" not in rf:
                f.struct = structs[elem]
            elif "fields" in rf:
                if elem in structs:
                    raise SchemaError("%s.%s: struct %s defined twice" % (path, name, elem))
                sd = StructDef(elem, _class_name(msg_name, elem), [], versions)
                structs[elem] = sd
                sd.fields = _parse_fields(rf["fields"], msg_name, structs,
                                          path + "." + name, common)
                f.struct = sd
            elif elem in common:
                sd = StructDef(elem, _class_name(msg_name, elem), [],
                               Versions.parse(common[elem].get("versions", "0+")))
                structs[elem] = sd
                sd.fields = _parse_fields(common[elem]["fields"], msg_name, structs,
                                          path + "." + elem, common)
                f.struct = sd
            else:
                raise SchemaError("%s.%s: unknown type %s" % (path, name, typ))
        elif "fields" in rf:
            raise SchemaError("%s.%s: primitive type with fields" % (path, name))
        if f.ever_nullable() and not (f.is_array or f.is_struct
                                      or elem in ("string", "bytes", "records")):
            raise SchemaError("%s.%s: type %s cannot be nullable" % (path, name, typ))
        f.default_value()  # validates the default
        out.append(f)
    tags = [f.tag for f in out if f.tag is not None]
    if len(tags) != len(set(tags)):
        raise SchemaError("%s: duplicate tag" % path)
    return out


def load_schema(path: str) -> MessageSpec:
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    name = raw["name"]
    common = {c["name"]: c for c in raw.get("commonStructs", [])}
    structs: dict = {}
    fields = _parse_fields(raw["fields"], name, structs, name, common)
    valid = Versions.parse(raw["validVersions"])
    if valid.hi is None:
        raise SchemaError("%s: validVersions must be a closed range" % name)
    return MessageSpec(name=name, type=raw["type"], api_key=raw.get("apiKey"),
                       valid_versions=valid,
                       flexible_versions=Versions.parse(raw.get("flexibleVersions", "none")),
                       fields=fields, structs=structs, source=os.path.basename(path))


def load_all(schema_dir: str) -> dict:
    """All schemas in the directory, by message name."""
    out = {}
    for fn in sorted(os.listdir(schema_dir)):
        if fn.endswith(".json"):
            spec = load_schema(os.path.join(schema_dir, fn))
            if spec.name in out:
                raise SchemaError("message %s defined twice" % spec.name)
            out[spec.name] = spec
    return out


def api_groups(specs: dict) -> list:
    """[(api_name, request_spec, response_spec)] for every API key, by api key."""
    by_key: dict = {}
    for s in specs.values():
        if s.type in ("request", "response"):
            by_key.setdefault(s.api_key, {})[s.type] = s
    out = []
    for key in sorted(by_key):
        pair = by_key[key]
        if set(pair) != {"request", "response"}:
            raise SchemaError("api key %d lacks a request or a response schema" % key)
        req, resp = pair["request"], pair["response"]
        if req.valid_versions != resp.valid_versions:
            raise SchemaError("%s and %s disagree on validVersions" % (req.name, resp.name))
        api = req.name[:-len("Request")] if req.name.endswith("Request") else req.name
        out.append((api, req, resp))
    return out


def min_size(f: Field, v: int, flexible: bool) -> int:
    """Smallest number of bytes field f can take on the wire at version v (0 if absent or
    tagged)."""
    if not f.present(v) or f.tagged(v):
        return 0
    if f.is_array:
        return 1 if flexible else 4
    if f.is_struct:
        if f.nullable(v):
            return 1
        return struct_min_size(f.struct, v, flexible)
    t = f.type
    if t in FIXED_SIZE:
        return FIXED_SIZE[t]
    if t == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4   # bytes / records


def struct_min_size(sd: StructDef, v: int, flexible: bool) -> int:
    return sum(min_size(f, v, flexible) for f in sd.fields) + (1 if flexible else 0)


def elem_min_size(f: Field, v: int, flexible: bool) -> int:
    e = f.elem_type
    if f.is_struct:
        return struct_min_size(f.struct, v, flexible)
    if e in FIXED_SIZE:
        return FIXED_SIZE[e]
    if e == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4
