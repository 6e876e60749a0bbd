"""security/acl.py: Kafka's ACL codes and names, AclFilter matching (AclBindingFilter), CreateAcls
validation (validateNewAcl), and the Authorizer's decisions (StandardAuthorizerData): super
users, DENY over ALLOW, implied operations (ALLOW only), "User:*", hosts, literal / wildcard /
prefixed resources, allow.everyone.if.no.acl.found, authorized-operations bitfields, the cache
(dropped by set_acls, bounded), and a seeded random cross-check of the indexed, cached
authorizer against a naive reading of Kafka's rules written here.

GROUPCOORD_TEST_SEED (default below) seeds the cross-check; it is printed with each test.
"""
from __future__ import annotations

import itertools
import os
import random

import pytest

from groupcoord.security.acl import (CLUSTER_NAME, AclBinding, AclFilter, AclOperation,
                                     AclPermissionType, Authorizer, PatternType, ResourceType,
                                     kafka_name, operations_bitfield, parse_operation,
                                     parse_pattern_type, parse_permission, parse_resource_type,
                                     supported_operations, validate_binding, validate_filter)

SEED = int(os.environ.get("GROUPCOORD_TEST_SEED", "20200529"))

RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, AclPermissionType
LIT, PRE = PT.LITERAL, PT.PREFIXED
ALLOW, DENY = PERM.ALLOW, PERM.DENY
ALICE, BOB = "User:alice", "User:bob"
H1, H2 = "10.0.0.1", "10.0.0.2"


@pytest.fixture(autouse=True)
def _show_seed():
    print("seed %d (GROUPCOORD_TEST_SEED)" % SEED)


def acl(rt, name, pt=LIT, principal=ALICE, host="*", op=OP.READ, perm=ALLOW):
    return AclBinding(rt, name, pt, principal, host, op, perm)


def authz(*acls, super_users=(), allow_if_no_acl=False, **kw):
    a = Authorizer(super_users, allow_if_no_acl, **kw)
    a.set_acls(acls)
    return a


# ------------------------------------------------------------------------------ codes, names
def test_codes_are_kafkas():
    assert [(m.name, int(m)) for m in RT] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [(m.name, int(m)) for m in PT] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert [(m.name, int(m)) for m in OP] == [
        ("UNKNOWN", 0), ("ANY", 1), ("ALL", 2), ("READ", 3), ("WRITE", 4), ("CREATE", 5),
        ("DELETE", 6), ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9),
        ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11), ("IDEMPOTENT_WRITE", 12),
        ("CREATE_TOKENS", 13), ("DESCRIBE_TOKENS", 14)]
    assert [(m.name, int(m)) for m in PERM] == [
        ("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]
    assert CLUSTER_NAME == "kafka-cluster"


def test_unknown_code_reads_as_unknown_like_kafkas_fromcode():
    assert RT(99) is RT.UNKNOWN and OP(-1) is OP.UNKNOWN and PERM(7) is PERM.UNKNOWN
    assert PT(5) is PT.UNKNOWN
    with pytest.raises(ValueError):
        RT("TOPIC")


@pytest.mark.parametrize("parse,text,want", [
    (parse_operation, "Read", OP.READ),
    (parse_operation, "read", OP.READ),
    (parse_operation, "DescribeConfigs", OP.DESCRIBE_CONFIGS),
    (parse_operation, "describeconfigs", OP.DESCRIBE_CONFIGS),
    (parse_operation, "DESCRIBE_CONFIGS", OP.DESCRIBE_CONFIGS),
    (parse_operation, "describe-configs", OP.DESCRIBE_CONFIGS),
    (parse_operation, "IdempotentWrite", OP.IDEMPOTENT_WRITE),
    (parse_operation, "ClusterAction", OP.CLUSTER_ACTION),
    (parse_operation, "All", OP.ALL),
    (parse_operation, " alter ", OP.ALTER),
    (parse_resource_type, "Topic", RT.TOPIC),
    (parse_resource_type, "GROUP", RT.GROUP),
    (parse_resource_type, "cluster", RT.CLUSTER),
    (parse_resource_type, "TransactionalId", RT.TRANSACTIONAL_ID),
    (parse_resource_type, "transactional-id", RT.TRANSACTIONAL_ID),
    (parse_resource_type, "DelegationToken", RT.DELEGATION_TOKEN),
    (parse_pattern_type, "literal", PT.LITERAL),
    (parse_pattern_type, "Prefixed", PT.PREFIXED),
    (parse_pattern_type, "MATCH", PT.MATCH),
    (parse_pattern_type, "any", PT.ANY),
    (parse_permission, "Allow", ALLOW),
    (parse_permission, "deny", DENY),
])
def test_parse_names(parse, text, want):
    assert parse(text) is want


@pytest.mark.parametrize("parse,text", [
    (parse_operation, "Reed"), (parse_operation, ""), (parse_resource_type, "Topics"),
    (parse_pattern_type, "suffixed"), (parse_permission, "maybe")])
def test_parse_unknown_name_raises(parse, text):
    with pytest.raises(ValueError, match="unknown"):
        parse(text)


def test_kafka_names():
    assert kafka_name(OP.DESCRIBE_CONFIGS) == "DescribeConfigs"
    assert kafka_name(RT.TRANSACTIONAL_ID) == "TransactionalId"
    assert kafka_name(ALLOW) == "Allow"
    for cls, parse in ((OP, parse_operation), (RT, parse_resource_type),
                       (PT, parse_pattern_type), (PERM, parse_permission)):
        for m in cls:
            if m.name != "UNKNOWN":
                assert parse(kafka_name(m)) is m


# ------------------------------------------------------------------------------ filters
def filt(rt=RT.ANY, name=None, pt=PT.ANY, principal=None, host=None, op=OP.ANY, perm=PERM.ANY):
    return AclFilter(rt, name, pt, principal, host, op, perm)


B_LIT = acl(RT.TOPIC, "foo")
B_STAR = acl(RT.TOPIC, "*")
B_PRE = acl(RT.TOPIC, "fo", PRE)
B_GROUP = acl(RT.GROUP, "foo", principal=BOB, host=H1, op=OP.DESCRIBE, perm=DENY)


@pytest.mark.parametrize("f,b,want", [
    # everything ANY / None matches every binding
    (filt(), B_LIT, True), (filt(), B_PRE, True), (filt(), B_GROUP, True),
    # resource type
    (filt(RT.TOPIC), B_LIT, True), (filt(RT.GROUP), B_LIT, False),
    (filt(RT.UNKNOWN), B_LIT, False),
    # pattern type without a name
    (filt(pt=LIT), B_LIT, True), (filt(pt=LIT), B_PRE, False), (filt(pt=PRE), B_PRE, True),
    (filt(pt=PT.MATCH), B_PRE, True), (filt(pt=PT.UNKNOWN), B_LIT, False),
    # ANY with a name: exact name, any pattern type
    (filt(name="foo"), B_LIT, True), (filt(name="foo"), B_STAR, False),
    (filt(name="fo"), B_PRE, True), (filt(name="foo"), B_PRE, False),
    # LITERAL / PREFIXED with a name: exact name and type
    (filt(name="foo", pt=LIT), B_LIT, True), (filt(name="*", pt=LIT), B_STAR, True),
    (filt(name="foo", pt=LIT), B_STAR, False), (filt(name="fo", pt=PRE), B_PRE, True),
    (filt(name="foo", pt=PRE), B_PRE, False), (filt(name="fo", pt=LIT), B_PRE, False),
    # MATCH: the bindings that apply to a resource of that name
    (filt(name="foo", pt=PT.MATCH), B_LIT, True),
    (filt(name="foo", pt=PT.MATCH), B_STAR, True),
    (filt(name="foo", pt=PT.MATCH), B_PRE, True),
    (filt(name="fox", pt=PT.MATCH), B_PRE, True),
    (filt(name="fox", pt=PT.MATCH), B_LIT, False),
    (filt(name="f", pt=PT.MATCH), B_PRE, False),
    (filt(name="foobar", pt=PT.MATCH), B_LIT, False),
    (filt(RT.GROUP, "foo", PT.MATCH), B_LIT, False),
    # entry: exact principal and host (no wildcard expansion), ANY operation / permission
    (filt(principal=BOB), B_GROUP, True), (filt(principal=ALICE), B_GROUP, False),
    (filt(principal="User:*"), B_GROUP, False),
    (filt(host=H1), B_GROUP, True), (filt(host="*"), B_GROUP, False),
    (filt(host="*"), B_LIT, True),
    (filt(op=OP.DESCRIBE), B_GROUP, True), (filt(op=OP.READ), B_GROUP, False),
    (filt(op=OP.ALL), B_GROUP, False),
    (filt(perm=DENY), B_GROUP, True), (filt(perm=ALLOW), B_GROUP, False),
    (filt(RT.GROUP, "foo", LIT, BOB, H1, OP.DESCRIBE, DENY), B_GROUP, True),
])
def test_filter_matches(f, b, want):
    assert f.matches(b) is want


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("b,why", [
    (acl(RT.UNKNOWN, "t"), "Invalid resourceType UNKNOWN"),
    (acl(RT.ANY, "t"), "Invalid resourceType ANY"),
    (acl(42, "t"), "Invalid resourceType UNKNOWN"),
    (acl(RT.TOPIC, "t", PT.MATCH), "Invalid patternType MATCH"),
    (acl(RT.TOPIC, "t", PT.ANY), "Invalid patternType ANY"),
    (acl(RT.TOPIC, "t", PT.UNKNOWN), "Invalid patternType UNKNOWN"),
    (acl(RT.TOPIC, "t", op=OP.ANY), "Invalid operation ANY"),
    (acl(RT.TOPIC, "t", op=OP.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(RT.TOPIC, "t", perm=PERM.ANY), "Invalid permissionType ANY"),
    (acl(RT.TOPIC, "t", perm=PERM.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (acl(RT.TOPIC, ""), "Resource name should not be empty"),
    (acl(RT.TOPIC, "t", principal="alice"),
     "Could not parse principal from `alice` (no colon is present separating the principal "
     "type from the principal name)"),
    (acl(RT.TOPIC, "t", principal=""), "Could not parse principal from ``"),
    # Kafka checks in this order: the resource type first
    (AclBinding(RT.ANY, "", PT.MATCH, "x", "*", OP.ANY, PERM.ANY), "Invalid resourceType ANY"),
])
def test_validate_binding_refuses(b, why):
    got = validate_binding(b)
    assert got is not None and got.startswith(why)


@pytest.mark.parametrize("b", [
    acl(RT.TOPIC, "t"), acl(RT.GROUP, "a-", PRE, op=OP.ALL, perm=DENY),
    acl(RT.CLUSTER, CLUSTER_NAME, op=OP.ALTER), acl(RT.TOPIC, "*", principal="User:*"),
    acl(RT.TRANSACTIONAL_ID, "tx", op=OP.WRITE), acl(RT.USER, "u", op=OP.CREATE_TOKENS),
    acl(RT.TOPIC, "t", principal="Group:ops", host=H1), acl(RT.TOPIC, "t", principal=":"),
])
def test_validate_binding_accepts(b):
    assert validate_binding(b) is None


def test_validate_filter():
    assert validate_filter(filt()) is None
    assert validate_filter(filt(RT.GROUP, "g", PT.MATCH, ALICE, H1, OP.READ, ALLOW)) is None
    assert validate_filter(filt(rt=RT.UNKNOWN)) == "Unknown patternFilter."
    assert validate_filter(filt(pt=PT.UNKNOWN)) == "Unknown patternFilter."
    assert validate_filter(filt(op=OP.UNKNOWN)) == "Unknown entryFilter."
    assert validate_filter(filt(perm=PERM.UNKNOWN)) == "Unknown entryFilter."


# ------------------------------------------------------------------------------ decisions
def test_super_user_allowed_everything_even_denied():
    a = authz(acl(RT.GROUP, "g", principal="User:admin", op=OP.ALL, perm=DENY),
              acl(RT.GROUP, "g", principal="User:*", op=OP.ALL, perm=DENY),
              super_users=["User:admin"])
    for op in supported_operations(RT.GROUP):
        assert a.authorize("User:admin", H1, op, RT.GROUP, "g")
        assert not a.authorize(ALICE, H1, op, RT.GROUP, "g")
    assert a.authorize("User:admin", H1, OP.ALTER, RT.CLUSTER, CLUSTER_NAME)
    assert not a.authorize("User:Admin", H1, OP.READ, RT.GROUP, "g")    # names are exact


@pytest.mark.parametrize("deny", [
    acl(RT.GROUP, "g", perm=DENY),                                  # same ACL key
    acl(RT.GROUP, "g", principal="User:*", perm=DENY),              # wildcard principal
    acl(RT.GROUP, "*", perm=DENY),                                  # wildcard resource
    acl(RT.GROUP, "", PRE, perm=DENY),                              # prefix of every name
    acl(RT.GROUP, "g", PRE, host=H1, op=OP.ALL, perm=DENY),          # prefix, host, ALL
])
def test_deny_wins_over_allow(deny):
    a = authz(acl(RT.GROUP, "g", op=OP.ALL), acl(RT.GROUP, "*"), deny)
    assert not a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")


def test_deny_of_other_host_or_principal_does_not_deny():
    a = authz(acl(RT.GROUP, "g"), acl(RT.GROUP, "g", host=H2, perm=DENY),
              acl(RT.GROUP, "g", principal=BOB, perm=DENY))
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert not a.authorize(ALICE, H2, OP.READ, RT.GROUP, "g")
    assert not a.authorize(BOB, H1, OP.READ, RT.GROUP, "g")


@pytest.mark.parametrize("granted", [OP.READ, OP.WRITE, OP.DELETE, OP.ALTER, OP.DESCRIBE])
def test_allow_implies_describe(granted):
    a = authz(acl(RT.TOPIC, "t", op=granted))
    assert a.authorize(ALICE, H1, OP.DESCRIBE, RT.TOPIC, "t")
    assert not a.authorize(ALICE, H1, OP.DESCRIBE_CONFIGS, RT.TOPIC, "t")


@pytest.mark.parametrize("granted", [OP.CREATE, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS,
                                     OP.CLUSTER_ACTION, OP.IDEMPOTENT_WRITE])
def test_describe_not_implied_by_others(granted):
    a = authz(acl(RT.CLUSTER, CLUSTER_NAME, op=granted))
    assert not a.authorize(ALICE, H1, OP.DESCRIBE, RT.CLUSTER, CLUSTER_NAME)


def test_alter_configs_implies_describe_configs_only():
    a = authz(acl(RT.GROUP, "g", op=OP.ALTER_CONFIGS))
    assert a.authorize(ALICE, H1, OP.DESCRIBE_CONFIGS, RT.GROUP, "g")
    assert a.authorize(ALICE, H1, OP.ALTER_CONFIGS, RT.GROUP, "g")
    assert not a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")
    assert not a.authorize(ALICE, H1, OP.ALTER, RT.GROUP, "g")


def test_implication_is_one_way():
    a = authz(acl(RT.TOPIC, "t", op=OP.DESCRIBE), acl(RT.TOPIC, "t", op=OP.DESCRIBE_CONFIGS))
    for op in (OP.READ, OP.WRITE, OP.DELETE, OP.ALTER, OP.ALTER_CONFIGS):
        assert not a.authorize(ALICE, H1, op, RT.TOPIC, "t")
    b = authz(acl(RT.TOPIC, "t", op=OP.READ))
    assert not b.authorize(ALICE, H1, OP.WRITE, RT.TOPIC, "t")


def test_all_implies_every_operation():
    a = authz(acl(RT.TOPIC, "t", op=OP.ALL))
    for op in OP:
        if op not in (OP.UNKNOWN, OP.ANY):
            assert a.authorize(ALICE, H1, op, RT.TOPIC, "t"), op


def test_deny_does_not_imply():
    # Kafka: implication widens ALLOW ACLs only; a DENY of READ leaves DESCRIBE allowed
    a = authz(acl(RT.GROUP, "g", op=OP.ALL), acl(RT.GROUP, "g", op=OP.READ, perm=DENY),
              acl(RT.GROUP, "g", op=OP.ALTER_CONFIGS, perm=DENY))
    assert not a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")
    assert not a.authorize(ALICE, H1, OP.ALTER_CONFIGS, RT.GROUP, "g")
    assert a.authorize(ALICE, H1, OP.DESCRIBE_CONFIGS, RT.GROUP, "g")
    # a DENY of ALL denies every operation, DESCRIBE included
    b = authz(acl(RT.GROUP, "g", op=OP.ALL), acl(RT.GROUP, "g", op=OP.ALL, perm=DENY))
    assert not b.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")
    # a DENY of DESCRIBE does not deny READ
    c = authz(acl(RT.GROUP, "g", op=OP.READ), acl(RT.GROUP, "g", op=OP.DESCRIBE, perm=DENY))
    assert c.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert not c.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")


def test_principal_wildcard_is_user_star_only():
    a = authz(acl(RT.GROUP, "g", principal="User:*"))
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert a.authorize("Group:ops", H1, OP.READ, RT.GROUP, "g")   # Kafka: User:* matches all
    b = authz(acl(RT.GROUP, "g", principal="Group:*"), acl(RT.GROUP, "g", principal="*"))
    assert not b.authorize("Group:ops", H1, OP.READ, RT.GROUP, "g")
    assert not b.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    c = authz(acl(RT.GROUP, "g", principal=ALICE))
    assert not c.authorize(BOB, H1, OP.READ, RT.GROUP, "g")
    assert not c.authorize("Group:alice", H1, OP.READ, RT.GROUP, "g")


def test_hosts():
    a = authz(acl(RT.GROUP, "g", host=H1), acl(RT.GROUP, "h", host="*"))
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert not a.authorize(ALICE, H2, OP.READ, RT.GROUP, "g")
    assert a.authorize(ALICE, H2, OP.READ, RT.GROUP, "h")
    assert a.authorize(ALICE, "::1", OP.READ, RT.GROUP, "h")


@pytest.mark.parametrize("binding,name,want", [
    (acl(RT.GROUP, "a-1"), "a-1", True),
    (acl(RT.GROUP, "a-1"), "a-10", False),          # a literal that is a prefix: no match
    (acl(RT.GROUP, "a-1"), "a-", False),
    (acl(RT.GROUP, "*"), "anything", True),
    (acl(RT.GROUP, "*"), "*", True),
    (acl(RT.GROUP, "a-", PRE), "a-1", True),
    (acl(RT.GROUP, "a-", PRE), "a-", True),
    (acl(RT.GROUP, "a-", PRE), "a", False),
    (acl(RT.GROUP, "a-", PRE), "b-a-1", False),
    (acl(RT.GROUP, "*", PRE), "x", False),          # a prefixed "*" is no wildcard
    (acl(RT.GROUP, "*", PRE), "*x", True),
    (acl(RT.TOPIC, "a-1"), "a-1", False),           # another resource type
    (acl(RT.TOPIC, "*"), "a-1", False),
    (acl(RT.TOPIC, "a-", PRE), "a-1", False),
])
def test_resource_name_match(binding, name, want):
    assert authz(binding).authorize(ALICE, H1, OP.READ, RT.GROUP, name) is want


@pytest.mark.parametrize("acls,want", [
    ((), True),
    ((acl(RT.GROUP, "other"),), True),                           # ACLs elsewhere only
    ((acl(RT.TOPIC, "g"),), True),                               # same name, other type
    ((acl(RT.GROUP, "g-x", PRE),), True),                        # a longer prefix
    ((acl(RT.GROUP, "g", principal=BOB),), False),               # another principal's ACL
    ((acl(RT.GROUP, "g", op=OP.DELETE),), False),                # another operation's ACL
    ((acl(RT.GROUP, "g", host=H2),), False),                     # another host's ACL
    ((acl(RT.GROUP, "*", principal=BOB),), False),               # wildcard covers it
    ((acl(RT.GROUP, "g", PRE, principal=BOB),), False),          # a prefix covers it
    ((acl(RT.GROUP, "gg", LIT, principal=BOB),), True),
])
def test_allow_if_no_acl_only_when_no_acl_on_resource(acls, want):
    a = authz(*acls, allow_if_no_acl=True)
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g") is want
    # without the option, nothing is allowed to alice here
    assert not authz(*acls).authorize(ALICE, H1, OP.READ, RT.GROUP, "g")


def test_deny_applies_even_with_allow_if_no_acl():
    a = authz(acl(RT.GROUP, "g", perm=DENY), allow_if_no_acl=True)
    assert not a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    # a DENY of READ is an ACL on the resource: DESCRIBE falls to the default deny
    assert not a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")


def test_issue_scenario():
    # alice: READ on group prefix a- and topic t; bob: nothing
    a = authz(acl(RT.GROUP, "a-", PRE), acl(RT.TOPIC, "t"))
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "a-1")
    assert a.authorize(ALICE, H1, OP.READ, RT.TOPIC, "t")
    assert a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "a-1")
    assert not a.authorize(ALICE, H1, OP.DELETE, RT.GROUP, "a-1")
    assert not a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "b-1")
    assert not a.authorize(ALICE, H1, OP.DELETE, RT.GROUP, "b-1")
    assert not a.authorize(BOB, H1, OP.READ, RT.GROUP, "a-1")
    assert authz(allow_if_no_acl=True).authorize(BOB, H1, OP.READ, RT.GROUP, "open")


# ------------------------------------------------------------------------------ bitfields
def bits(*ops):
    return sum(1 << int(o) for o in ops)


def test_supported_operations_are_kafkas():
    assert set(supported_operations(RT.GROUP)) == {
        OP.READ, OP.DESCRIBE, OP.DELETE, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS}
    assert set(supported_operations(RT.TOPIC)) == {
        OP.READ, OP.WRITE, OP.CREATE, OP.DESCRIBE, OP.DELETE, OP.ALTER, OP.DESCRIBE_CONFIGS,
        OP.ALTER_CONFIGS}
    assert set(supported_operations(RT.CLUSTER)) == {
        OP.CREATE, OP.CLUSTER_ACTION, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS,
        OP.IDEMPOTENT_WRITE, OP.ALTER, OP.DESCRIBE}
    assert set(supported_operations(RT.TRANSACTIONAL_ID)) == {OP.DESCRIBE, OP.WRITE}
    for rt in (RT.UNKNOWN, RT.ANY, 99):
        with pytest.raises(ValueError):
            supported_operations(rt)
    assert operations_bitfield([OP.READ, OP.DESCRIBE]) == 0b100001000


def test_authorized_operations():
    a = authz(acl(RT.GROUP, "g"), acl(RT.CLUSTER, CLUSTER_NAME, op=OP.ALTER),
              acl(RT.TOPIC, "t", op=OP.ALL), acl(RT.TOPIC, "t", op=OP.WRITE, perm=DENY),
              super_users=["User:admin"])
    assert a.authorized_operations(ALICE, H1, RT.GROUP, "g") == bits(OP.READ, OP.DESCRIBE)
    assert a.authorized_operations(ALICE, H1, RT.CLUSTER, CLUSTER_NAME) == bits(
        OP.ALTER, OP.DESCRIBE)
    assert a.authorized_operations(ALICE, H1, RT.TOPIC, "t") == bits(
        *(o for o in supported_operations(RT.TOPIC) if o != OP.WRITE))
    assert a.authorized_operations(BOB, H1, RT.GROUP, "g") == 0
    for rt in (RT.GROUP, RT.TOPIC, RT.CLUSTER):
        assert a.authorized_operations("User:admin", H1, rt, "x") == operations_bitfield(
            supported_operations(rt))
    assert authz(allow_if_no_acl=True).authorized_operations(BOB, H1, RT.GROUP, "g") == bits(
        *supported_operations(RT.GROUP))
    with pytest.raises(ValueError):
        a.authorized_operations(ALICE, H1, RT.ANY, "g")


# ------------------------------------------------------------------------------ cache
def test_set_acls_drops_cached_decisions():
    a = authz(acl(RT.GROUP, "g"))
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")          # now cached
    a.set_acls([acl(RT.GROUP, "g", principal=BOB)])
    assert not a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert a.authorize(BOB, H1, OP.READ, RT.GROUP, "g")
    a.set_acls([acl(RT.GROUP, "g"), acl(RT.GROUP, "g", PRE, principal=BOB, perm=DENY)])
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert not a.authorize(BOB, H1, OP.READ, RT.GROUP, "g")
    a.set_acls([])
    assert a.acl_count == 0
    assert not a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")


def test_configuration_is_read_only():
    # cached decisions depend on it: changing it means a new Authorizer
    a = authz(super_users=["User:admin"], allow_if_no_acl=True)
    assert a.super_users == frozenset({"User:admin"}) and a.allow_if_no_acl is True
    with pytest.raises(AttributeError):
        a.super_users = frozenset()
    with pytest.raises(AttributeError):
        a.allow_if_no_acl = False


def test_cache_is_bounded():
    a = authz(acl(RT.GROUP, "g-", PRE), cache_limit=10)
    for i in range(100):
        assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g-%d" % i)
        assert not a.authorize(BOB, H1, OP.READ, RT.GROUP, "g-%d" % i)
        assert len(a._cache) <= 10
    assert a._cache                                                    # still caching


def test_cache_limit_zero_never_caches():
    a = authz(acl(RT.GROUP, "g"), cache_limit=0)
    assert a.authorize(ALICE, H1, OP.READ, RT.GROUP, "g")
    assert not a.authorize(BOB, H1, OP.READ, RT.GROUP, "g")
    assert a._cache == {}


def test_enum_and_int_arguments_agree_and_share_the_cache():
    a = authz(acl(int(RT.GROUP), "g", int(LIT), ALICE, "*", int(OP.READ), int(ALLOW)))
    assert a.authorize(ALICE, H1, OP.DESCRIBE, RT.GROUP, "g")
    assert a.authorize(ALICE, H1, 8, 3, "g")
    assert len(a._cache) == 1


def test_duplicate_and_enum_typed_bindings_count_once():
    b = acl(RT.GROUP, "g")
    a = authz(b, b, AclBinding(*(int(x) if not isinstance(x, str) else x for x in b)))
    assert a.acl_count == 1


# ------------------------------------------------------------------------------ cross-check
def naive_authorize(acls, super_users, allow_if_no_acl, principal, host, op, rt, name):
    """Kafka's rules read literally, over a plain list of bindings."""
    if principal in super_users:
        return True
    on_resource = [b for b in acls if b.resource_type == rt and (
        (b.pattern_type == LIT and (b.name == name or b.name == "*"))
        or (b.pattern_type == PRE and name.startswith(b.name)))]
    if not on_resource:
        return allow_if_no_acl
    verdicts = set()
    for b in on_resource:
        if b.principal not in (principal, "User:*") or b.host not in ("*", host):
            continue
        if b.operation == OP.ALL or b.operation == op:
            verdicts.add(b.permission)
        elif b.permission == ALLOW and (
                (op == OP.DESCRIBE and b.operation in (OP.READ, OP.WRITE, OP.DELETE, OP.ALTER))
                or (op == OP.DESCRIBE_CONFIGS and b.operation == OP.ALTER_CONFIGS)):
            verdicts.add(ALLOW)
    return DENY not in verdicts and ALLOW in verdicts


PRINCIPALS = [ALICE, BOB, "User:*", "User:admin", "Group:ops"]
HOSTS = ["*", H1, H2]
NAMES = ["", "a", "b", "aa", "ab", "ba", "aab", "abb", "*", "*a"]
TYPES = [RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID]
OPS = [o for o in OP if o not in (OP.UNKNOWN, OP.ANY)]


def random_acls(rng, n):
    out = []
    for _ in range(n):
        pt = rng.choice([LIT, LIT, PRE])
        name = rng.choice(NAMES[1:]) if pt == LIT else rng.choice(NAMES)
        out.append(AclBinding(rng.choice(TYPES), name, pt, rng.choice(PRINCIPALS[:3] + [
            "Group:ops"]), rng.choice(HOSTS), rng.choice(OPS),
            rng.choice([ALLOW, ALLOW, DENY])))
    return out


@pytest.mark.parametrize("round_", range(8))
def test_cross_check_against_naive_reference(round_):
    rng = random.Random(SEED * 1000 + round_)
    super_users = {"User:admin"} if rng.random() < 0.5 else set()
    allow_if_no_acl = rng.random() < 0.5
    a = Authorizer(super_users, allow_if_no_acl, cache_limit=rng.choice([7, 1000, 100_000]))
    queries = list(itertools.product(PRINCIPALS, HOSTS[1:], OPS, TYPES[:3], NAMES[1:]))
    outcomes = set()
    # set_acls again and again: the cache must follow (a small set, then larger ones)
    for size in (rng.choice([0, 1, 5]), rng.choice([20, 60]), rng.choice([20, 60])):
        acls = random_acls(rng, size)
        a.set_acls(acls)
        checked = 0
        for q in rng.sample(queries, 1500):
            want = naive_authorize(acls, super_users, allow_if_no_acl, *q)
            assert a.decide(*q) is want, (q, acls)
            assert a.authorize(*q) is want, (q, acls)
            assert a.authorize(*q) is want, (q, acls)          # the cached answer
            outcomes.add(want)
            checked += 1
        for p, h, rt, name in rng.sample(list(itertools.product(
                PRINCIPALS, HOSTS[1:], TYPES[:3], NAMES[1:])), 40):
            want = operations_bitfield(
                o for o in supported_operations(rt)
                if naive_authorize(acls, super_users, allow_if_no_acl, p, h, o, rt, name))
            assert a.authorized_operations(p, h, rt, name) == want
        assert checked == 1500
    assert outcomes == {True, False}
