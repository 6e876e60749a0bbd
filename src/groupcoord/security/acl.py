"""Kafka's ACL model and its authorizer decision, with a per-request-shape decision cache.

Model. An ``AclBinding`` is a resource pattern (type, name, LITERAL or PREFIXED) and an entry
(principal "Type:name", host, operation, ALLOW/DENY); an ``AclFilter`` selects bindings as
Kafka's AclBindingFilter does (DescribeAcls / DeleteAcls). Codes are Kafka's wire numbers.

Decision (Kafka's StandardAuthorizerData.authorize / findAclRule / findResult, in order):
  1. a super user ("User:admin" in super.users) is allowed everything;
  2. the ACLs *on the resource* are the literal ones named exactly like it, the literal
     wildcard "*" of its type, and the prefixed ones whose name the resource name starts with;
  3. an ACL applies when its principal is the caller's or "User:*", its host is "*" or the
     caller's address, and its operation is ALL, the requested one or -- for ALLOW ACLs only
     -- one implying it (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
     DESCRIBE_CONFIGS; a DENY of READ does not deny DESCRIBE);
  4. an applying DENY denies; else an applying ALLOW allows; else, when no ACL at all is on
     the resource (any principal, any operation), allow.everyone.if.no.acl.found decides;
     otherwise deny.

Cost. ``authorize`` is one dict lookup keyed by the five request values when the decision is
cached (the common case: a member's heartbeats repeat the same question). A miss looks up
the literal ACLs by (type, name) and the prefixed ones by (type, name[:n]) for each distinct
length n of the prefixes of that type that start with the name's first character (never a
scan of all ACLs). ``set_acls`` builds a new index and an empty cache; the cache is cleared
whenever it reaches its bound, so clients naming ever new resources cannot grow it without
limit.
"""
from __future__ import annotations

import enum
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

__all__ = ["ResourceType", "PatternType", "AclOperation", "AclPermissionType", "AclBinding",
           "AclFilter", "Authorizer", "validate_binding", "validate_filter",
           "parse_resource_type", "parse_pattern_type", "parse_operation", "parse_permission",
           "kafka_name", "supported_operations", "operations_bitfield", "CLUSTER_NAME",
           "WILDCARD_RESOURCE", "WILDCARD_PRINCIPAL", "WILDCARD_HOST",
           "DEFAULT_CACHE_LIMIT"]

CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
DEFAULT_CACHE_LIMIT = 100_000


class _KafkaEnum(enum.IntEnum):
    # Kafka's fromCode maps a code it does not know to UNKNOWN (which validation then
    # refuses); ResourceType(99) does the same here instead of raising.
    @classmethod
    def _missing_(cls, value):
        return cls.UNKNOWN if isinstance(value, int) else None


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Plain ints for the decision loop (comparisons against IntEnum members go through the enum
# class; these do not).
_ANY = 1
_MATCH, _LITERAL, _PREFIXED = 2, 3, 4
_ALL, _DESCRIBE, _DESCRIBE_CONFIGS = 2, 8, 10
_DENY, _ALLOW = 2, 3
# Which ALLOWed operations imply DESCRIBE / DESCRIBE_CONFIGS (Kafka's IMPLIES_DESCRIBE and
# IMPLIES_DESCRIBE_CONFIGS); the requested operation itself is included.
_IMPLIES_DESCRIBE = frozenset((8, 3, 4, 6, 7))          # DESCRIBE READ WRITE DELETE ALTER
_IMPLIES_DESCRIBE_CONFIGS = frozenset((10, 11))         # DESCRIBE_CONFIGS ALTER_CONFIGS

# The operations an "authorized operations" bitfield covers per resource type (Kafka's
# AclEntry.supportedOperations; GROUP gained DESCRIBE_CONFIGS/ALTER_CONFIGS with group configs).
_O = AclOperation
_SUPPORTED: Dict[int, Tuple[int, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}
_SUPPORTED = {int(k): tuple(int(o) for o in v) for k, v in _SUPPORTED.items()}
del _O


def supported_operations(resource_type: int) -> Tuple[int, ...]:
    """The operations Kafka reports in "authorized operations" for a resource type."""
    try:
        return _SUPPORTED[resource_type]
    except KeyError:
        raise ValueError("not a concrete resource type: %r" % (resource_type,)) from None


def operations_bitfield(operations: Iterable[int]) -> int:
    """Kafka's Utils.to32BitField: bit i set for operation code i."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


# ------------------------------------------------------------------------------ names
def _squash(s: str) -> str:
    return s.replace("_", "").replace("-", "").upper()


def _parser(cls):
    table = {_squash(m.name): m for m in cls}

    def parse(name: str):
        """Kafka's name for a value (Read, DescribeConfigs, TransactionalId, LITERAL, ...),
        any case, with or without _ or - between words. ValueError when unknown."""
        m = table.get(_squash(name.strip()))
        if m is None:
            raise ValueError("unknown %s %r (expected one of: %s)" % (
                cls.__name__, name, ", ".join(kafka_name(x) for x in cls
                                              if x.name != "UNKNOWN")))
        return m
    parse.__name__ = "parse_" + {"ResourceType": "resource_type", "PatternType": "pattern_type",
                                 "AclOperation": "operation",
                                 "AclPermissionType": "permission"}[cls.__name__]
    return parse


def kafka_name(value: enum.IntEnum) -> str:
    """The PascalCase name Kafka's tools print (DescribeConfigs, TransactionalId, Allow)."""
    return "".join(w.capitalize() for w in value.name.split("_"))


parse_resource_type = _parser(ResourceType)
parse_pattern_type = _parser(PatternType)
parse_operation = _parser(AclOperation)
parse_permission = _parser(AclPermissionType)


# ------------------------------------------------------------------------------ model
class AclBinding(NamedTuple):
    resource_type: int
    name: str
    pattern_type: int           # LITERAL or PREFIXED once stored
    principal: str              # "Type:name", e.g. "User:alice", "User:*"
    host: str                   # an address or "*"
    operation: int
    permission: int


class AclFilter(NamedTuple):
    resource_type: int          # ANY matches every type
    name: Optional[str]         # None matches every name
    pattern_type: int           # ANY, MATCH, LITERAL or PREFIXED
    principal: Optional[str]    # None matches every principal (no wildcard expansion)
    host: Optional[str]         # None matches every host (no wildcard expansion)
    operation: int              # ANY matches every operation
    permission: int             # ANY matches every permission

    def matches(self, b: AclBinding) -> bool:
        """Kafka's AclBindingFilter.matches: ResourcePatternFilter then AccessControlEntryFilter.

        With a name: ANY or an equal pattern type compares names exactly; MATCH selects the
        bindings that would apply to a resource of that name (literal equal, literal "*",
        prefixed by a prefix of the name). Principal and host compare exactly ("User:*" in a
        filter selects the wildcard bindings only)."""
        rt = self.resource_type
        if rt != _ANY and rt != b.resource_type:
            return False
        pt = self.pattern_type
        if pt != _ANY and pt != _MATCH and pt != b.pattern_type:
            return False
        name = self.name
        if name is not None:
            if pt == _ANY or pt == b.pattern_type:
                if name != b.name:
                    return False
            elif b.pattern_type == _LITERAL:
                if name != b.name and b.name != WILDCARD_RESOURCE:
                    return False
            elif b.pattern_type == _PREFIXED:
                if not name.startswith(b.name):
                    return False
            else:                   # Kafka throws; a stored binding is never of another type
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != _ANY and self.operation != b.operation:
            return False
        return self.permission == _ANY or self.permission == b.permission


def validate_binding(b: AclBinding) -> Optional[str]:
    """Why CreateAcls refuses b (INVALID_REQUEST), or None. Kafka's
    AclControlManager.validateNewAcl: its checks, order and messages."""
    rt = ResourceType(b.resource_type)
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resourceType %s" % rt.name
    pt = PatternType(b.pattern_type)
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType %s" % pt.name
    op = AclOperation(b.operation)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        return "Invalid operation %s" % op.name
    perm = AclPermissionType(b.permission)
    if perm not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return "Invalid permissionType %s" % perm.name
    if not b.name:
        return "Resource name should not be empty"
    if not b.principal or ":" not in b.principal:
        return ("Could not parse principal from `%s` (no colon is present separating the "
                "principal type from the principal name)" % (b.principal,))
    return None


def validate_filter(f: AclFilter) -> Optional[str]:
    """Why DeleteAcls refuses a filter (INVALID_REQUEST), or None: Kafka's
    AclControlManager.validateFilter (an UNKNOWN in the pattern or the entry part)."""
    if (ResourceType(f.resource_type) == ResourceType.UNKNOWN
            or PatternType(f.pattern_type) == PatternType.UNKNOWN):
        return "Unknown patternFilter."
    if (AclOperation(f.operation) == AclOperation.UNKNOWN
            or AclPermissionType(f.permission) == AclPermissionType.UNKNOWN):
        return "Unknown entryFilter."
    return None


# ------------------------------------------------------------------------------ authorizer
# One ACL as the decision loop reads it: (principal, host, operation, permission), plain ints.
_Entry = Tuple[str, str, int, int]


class _Index:
    """The ACLs of one set_acls, indexed for lookup by resource.

    literal[rt][name] and prefixed[rt][prefix] -> the entries of those bindings;
    lengths[rt][c] -> the distinct lengths, ascending, of the prefixes of type rt that start
    with character c, so a name probes only prefixes sharing its first character, one dict
    lookup per length up to its own (an empty prefix, which matches every name, sits under
    c = "" and is probed for every name)."""
    __slots__ = ("literal", "prefixed", "lengths", "count")

    def __init__(self, acls: Iterable[AclBinding]):
        literal: Dict[int, Dict[str, List[_Entry]]] = {}
        prefixed: Dict[int, Dict[str, List[_Entry]]] = {}
        seen = set()
        for b in acls:
            rt, name, pt, principal, host, op, perm = b
            if b in seen:                           # a set of bindings, as Kafka keeps them
                continue
            seen.add(b)
            e = (principal, host, int(op), int(perm))
            if pt == _LITERAL:
                table = literal
            elif pt == _PREFIXED:
                table = prefixed
            else:       # never stored (validate_binding refuses it), and never matches
                continue
            by_name = table.get(rt)
            if by_name is None:
                by_name = table[int(rt)] = {}
            entries = by_name.get(name)
            if entries is None:
                by_name[name] = [e]
            else:
                entries.append(e)
        self.literal = {rt: {k: tuple(v) for k, v in d.items()} for rt, d in literal.items()}
        self.prefixed = {rt: {k: tuple(v) for k, v in d.items()} for rt, d in prefixed.items()}
        self.lengths: Dict[int, Dict[str, Tuple[int, ...]]] = {}
        for rt, d in prefixed.items():
            by_first: Dict[str, set] = {}
            for prefix in d:
                by_first.setdefault(prefix[:1], set()).add(len(prefix))
            self.lengths[rt] = {c: tuple(sorted(ls)) for c, ls in by_first.items()}
        self.count = len(seen)


class Authorizer:
    """Kafka's StandardAuthorizer decision (module docstring) over a replaceable ACL set."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False, *,
                 cache_limit: int = DEFAULT_CACHE_LIMIT):
        # read-only after construction: cached decisions depend on them
        self._super_users: FrozenSet[str] = frozenset(super_users)
        self._allow_if_no_acl = bool(allow_if_no_acl)
        self.cache_limit = max(0, int(cache_limit))
        self._index = _Index(())
        self._cache: Dict[tuple, bool] = {}

    @property
    def super_users(self) -> FrozenSet[str]:
        return self._super_users

    @property
    def allow_if_no_acl(self) -> bool:
        return self._allow_if_no_acl

    @property
    def acl_count(self) -> int:
        return self._index.count

    def set_acls(self, acls: Iterable[AclBinding]) -> None:
        """Replace every ACL; decisions cached before are dropped."""
        index = _Index(acls)
        # index first, then the fresh cache: a decision taken concurrently with the old
        # index can only land in the old (discarded) cache
        self._index = index
        self._cache = {}

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        cache = self._cache
        try:
            return cache[key]           # a subscript is cheaper than .get on the hit path
        except KeyError:
            pass
        r = self.decide(principal, host, operation, resource_type, name)
        if len(cache) >= self.cache_limit:
            cache.clear()
            if not self.cache_limit:
                return r
        cache[key] = r
        return r

    def decide(self, principal: str, host: str, operation: int, resource_type: int,
               name: str) -> bool:
        """The decision without the cache (what authorize caches)."""
        if principal in self._super_users:
            return True
        idx = self._index
        found = []
        lit = idx.literal.get(resource_type)
        if lit:
            e = lit.get(name)
            if e:
                found.append(e)
            if name != WILDCARD_RESOURCE:
                e = lit.get(WILDCARD_RESOURCE)
                if e:
                    found.append(e)
        by_first = idx.lengths.get(resource_type)
        if by_first:
            pre = idx.prefixed[resource_type]
            e = pre.get("")                         # an empty prefix matches every name
            if e:
                found.append(e)
            lengths = by_first.get(name[:1])
            if lengths and name:
                n = len(name)
                for ln in lengths:
                    if ln > n:
                        break
                    e = pre.get(name[:ln])
                    if e:
                        found.append(e)
        if not found:
            return self._allow_if_no_acl        # no ACL at all on the resource
        allowed = False
        for entries in found:
            for p, h, op, perm in entries:
                if p != principal and p != WILDCARD_PRINCIPAL:
                    continue
                if h != WILDCARD_HOST and h != host:
                    continue
                if op != _ALL and op != operation:
                    # implication widens ALLOW ACLs only
                    if perm != _ALLOW:
                        continue
                    if operation == _DESCRIBE:
                        if op not in _IMPLIES_DESCRIBE:
                            continue
                    elif operation == _DESCRIBE_CONFIGS:
                        if op not in _IMPLIES_DESCRIBE_CONFIGS:
                            continue
                    else:
                        continue
                if perm != _ALLOW:              # Kafka: anything but ALLOW is a DENY
                    return False
                allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: int,
                              name: str) -> int:
        """The Describe* "authorized operations" bitfield: bit i set when operation i (of the
        operations supported on the resource type) is allowed."""
        bits = 0
        for op in supported_operations(resource_type):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits
