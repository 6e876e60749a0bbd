"""security/admin.py: the planners of DescribeAcls (29), CreateAcls (30), DeleteAcls (31),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

Every call goes through the wire: the request is encoded as a real request frame and decoded
back (what the connection hands the planner), and the response must survive a response
frame at the same version. The records a change returns are applied to a SecurityState
(security/records.py), and describe then shows exactly the change. No planner mutates the
state it is given."""
import copy
import hashlib
import hmac

import pytest

import groupcoord.protocol as P
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security import admin as A
from groupcoord.security.acl import (AclBinding, AclOperation as Op,
                                     AclPermissionType as Perm, PatternType as Pat,
                                     ResourceType as RT)
from groupcoord.security.records import SecurityState

M = P.messages
ACL_VERSIONS = (1, 2, 3)
SHA256, SHA512 = 1, 2


# ---------------------------------------------------------------------- harness
def _snapshot(state):
    return (state.version, copy.deepcopy(state.users), frozenset(state.acls))


def call(fn, req, version, state, *extra):
    """-> (response as decoded from its frame, records or None)."""
    frame = P.encode_request_frame(req, version, correlation_id=41, client_id="admin")
    header, decoded = P.decode_request_frame(frame[4:])
    assert (header.api_version, header.correlation_id) == (version, 41)
    before = _snapshot(state)
    out = fn(decoded, header.api_version, state, *extra)
    assert _snapshot(state) == before, "a planner changed the state"
    resp, records = out if isinstance(out, tuple) else (out, None)
    wire = P.encode_response_frame(resp, version, 41)
    corr, back = P.decode_response_frame(wire[4:], header.api_key, version)
    assert corr == 41 and back == resp
    return back, records


class Store:
    """The records applied so far; ``state`` replays them (as a restart would)."""

    def __init__(self):
        self.log = []
        self.state = SecurityState()

    def apply(self, records):
        for key, value in records:
            self.state.apply(key, value)
            self.log.append((key, value))
        assert _snapshot(SecurityState.replay(self.log))[1:] == _snapshot(self.state)[1:]


def creation(rt=RT.GROUP, name="a-", pt=Pat.PREFIXED, principal="User:alice", host="*",
             op=Op.READ, perm=Perm.ALLOW):
    return M.CreateAclsRequestAclCreation(
        resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=principal,
        host=host, operation=op, permission_type=perm)


def binding(rt=RT.GROUP, name="a-", pt=Pat.PREFIXED, principal="User:alice", host="*",
            op=Op.READ, perm=Perm.ALLOW):
    return AclBinding(int(rt), name, int(pt), principal, host, int(op), int(perm))


def describe_req(rt=RT.ANY, name=None, pt=Pat.ANY, principal=None, host=None, op=Op.ANY,
                 perm=Perm.ANY):
    return M.DescribeAclsRequest(resource_type_filter=rt, resource_name_filter=name,
                                 pattern_type_filter=pt, principal_filter=principal,
                                 host_filter=host, operation=op, permission_type=perm)


def delete_filter(rt=RT.ANY, name=None, pt=Pat.ANY, principal=None, host=None, op=Op.ANY,
                  perm=Perm.ANY):
    return M.DeleteAclsRequestDeleteAclsFilter(
        resource_type_filter=rt, resource_name_filter=name, pattern_type_filter=pt,
        principal_filter=principal, host_filter=host, operation=op, permission_type=perm)


def described(resp):
    """DescribeAcls response -> the AclBindings it lists, in response order."""
    return [AclBinding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                       a.operation, a.permission_type)
            for r in resp.resources for a in r.acls]


def describe_all(state, version=3, **kw):
    resp, _ = call(A.describe_acls, describe_req(**kw), version, state)
    assert (resp.error_code, resp.error_message) == (0, None)
    return described(resp)


SAMPLE = [
    binding(),                                                   # group prefix a-
    binding(RT.TOPIC, "t", Pat.LITERAL),
    binding(RT.TOPIC, "*", Pat.LITERAL, "User:*", op=Op.DESCRIBE),
    binding(RT.GROUP, "a-1", Pat.LITERAL, "User:bob", "10.0.0.1", Op.READ, Perm.DENY),
    binding(RT.CLUSTER, "kafka-cluster", Pat.LITERAL, "User:admin", op=Op.ALTER),
]


def store_with(bindings, version=3):
    s = Store()
    req = M.CreateAclsRequest(creations=[creation(*b) for b in bindings])
    resp, records = call(A.create_acls, req, version, s.state)
    assert [r.error_code for r in resp.results] == [0] * len(bindings)
    s.apply(records)
    return s


# ---------------------------------------------------------------------- CreateAcls
@pytest.mark.parametrize("v", ACL_VERSIONS)
def test_create_then_describe_shows_the_bindings_grouped_by_resource(v):
    s = Store()
    req = M.CreateAclsRequest(creations=[creation(*b) for b in SAMPLE])
    resp, records = call(A.create_acls, req, v, s.state)
    assert [(r.error_code, r.error_message) for r in resp.results] == [(0, None)] * 5
    assert len(records) == 5 and all(value is not None for _, value in records)
    s.apply(records)
    assert s.state.acls == frozenset(SAMPLE)
    resp, _ = call(A.describe_acls, describe_req(), v, s.state)
    assert sorted(described(resp)) == sorted(SAMPLE)
    patterns = [(r.resource_type, r.resource_name, r.pattern_type) for r in resp.resources]
    assert len(patterns) == len(set(patterns)) == 5            # one entry per pattern
    # a second pattern's binding joins its group
    more = M.CreateAclsRequest(creations=[creation(principal="User:carol")])
    resp, records = call(A.create_acls, more, v, s.state)
    s.apply(records)
    resp, _ = call(A.describe_acls, describe_req(RT.GROUP, "a-", Pat.PREFIXED), v, s.state)
    assert len(resp.resources) == 1
    assert sorted(a.principal for a in resp.resources[0].acls) == ["User:alice", "User:carol"]


def test_describe_output_is_sorted_and_stable():
    s = store_with(list(reversed(SAMPLE)))
    first = describe_all(s.state)
    assert first == sorted(first)
    assert describe_all(SecurityState.replay(list(reversed(s.log)))) == first


def test_creating_an_existing_binding_succeeds_without_a_record():
    s = store_with(SAMPLE[:1])
    req = M.CreateAclsRequest(creations=[creation(), creation(RT.TOPIC, "u", Pat.LITERAL),
                                         creation(RT.TOPIC, "u", Pat.LITERAL)])
    resp, records = call(A.create_acls, req, 3, s.state)
    assert [r.error_code for r in resp.results] == [0, 0, 0]
    assert len(records) == 1                    # the existing one and the repeat add nothing
    s.apply(records)
    assert s.state.acls == {SAMPLE[0], binding(RT.TOPIC, "u", Pat.LITERAL)}


BAD_CREATIONS = [
    (dict(rt=RT.CLUSTER, name="my-cluster", pt=Pat.LITERAL),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (dict(rt=RT.CLUSTER, name="", pt=Pat.LITERAL),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (dict(name=""), "Invalid empty resource name"),
    (dict(rt=RT.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (dict(rt=RT.ANY), "Invalid resourceType ANY"),
    (dict(rt=99), "Invalid resourceType UNKNOWN"),
    (dict(pt=Pat.MATCH), "Invalid patternType MATCH"),
    (dict(pt=Pat.ANY), "Invalid patternType ANY"),
    (dict(pt=Pat.UNKNOWN), "Invalid patternType UNKNOWN"),
    (dict(op=Op.ANY), "Invalid operation ANY"),
    (dict(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (dict(op=-5), "Invalid operation UNKNOWN"),
    (dict(perm=Perm.ANY), "Invalid permissionType ANY"),
    (dict(perm=Perm.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (dict(principal="alice"),
     "Could not parse principal from `alice` (no colon is present separating the principal "
     "type from the principal name)"),
]


@pytest.mark.parametrize("v", ACL_VERSIONS)
@pytest.mark.parametrize("bad,message", BAD_CREATIONS,
                         ids=[m[:30] + str(i) for i, (_, m) in enumerate(BAD_CREATIONS)])
def test_an_invalid_creation_fails_alone(v, bad, message):
    s = Store()
    req = M.CreateAclsRequest(creations=[creation(RT.TOPIC, "t", Pat.LITERAL),
                                         creation(**bad), creation()])
    resp, records = call(A.create_acls, req, v, s.state)
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (0, None), (int(E.INVALID_REQUEST), message), (0, None)]
    s.apply(records)
    assert s.state.acls == {binding(RT.TOPIC, "t", Pat.LITERAL), binding()}


def test_other_resource_types_are_stored_like_kafka():
    b = binding(RT.TRANSACTIONAL_ID, "tx-", Pat.PREFIXED, op=Op.WRITE)
    s = store_with([b])
    assert describe_all(s.state, rt=RT.TRANSACTIONAL_ID) == [b]


# ---------------------------------------------------------------------- DescribeAcls
DESCRIBE_CASES = [
    (dict(), SAMPLE),
    (dict(rt=RT.TOPIC), [SAMPLE[1], SAMPLE[2]]),
    # LITERAL / PREFIXED / ANY with a name: that exact name
    (dict(rt=RT.GROUP, name="a-1", pt=Pat.LITERAL), [SAMPLE[3]]),
    (dict(rt=RT.GROUP, name="a-", pt=Pat.PREFIXED), [SAMPLE[0]]),
    (dict(rt=RT.GROUP, name="a-", pt=Pat.LITERAL), []),
    (dict(name="t", pt=Pat.ANY), [SAMPLE[1]]),
    # MATCH: what applies to a resource of that name (literal, wildcard, prefixes)
    (dict(rt=RT.GROUP, name="a-1", pt=Pat.MATCH), [SAMPLE[0], SAMPLE[3]]),
    (dict(rt=RT.TOPIC, name="t", pt=Pat.MATCH), [SAMPLE[1], SAMPLE[2]]),
    (dict(rt=RT.TOPIC, name="other", pt=Pat.MATCH), [SAMPLE[2]]),
    (dict(principal="User:alice"), [SAMPLE[0], SAMPLE[1]]),
    (dict(principal="User:*"), [SAMPLE[2]]),
    (dict(host="10.0.0.1"), [SAMPLE[3]]),
    (dict(op=Op.ALTER), [SAMPLE[4]]),
    (dict(perm=Perm.DENY), [SAMPLE[3]]),
    (dict(rt=RT.CLUSTER, name="kafka-cluster", pt=Pat.MATCH, op=Op.ALTER, perm=Perm.ALLOW),
     [SAMPLE[4]]),
]


@pytest.mark.parametrize("v", ACL_VERSIONS)
@pytest.mark.parametrize("case", range(len(DESCRIBE_CASES)))
def test_describe_filters_as_kafka_does(v, case):
    flt, want = DESCRIBE_CASES[case]
    s = store_with(SAMPLE)
    assert sorted(describe_all(s.state, v, **flt)) == sorted(want)


BAD_FILTERS = [
    (dict(rt=RT.UNKNOWN), "Unknown patternFilter."),
    (dict(rt=42), "Unknown patternFilter."),
    (dict(pt=Pat.UNKNOWN), "Unknown patternFilter."),
    (dict(op=Op.UNKNOWN), "Unknown entryFilter."),
    (dict(perm=Perm.UNKNOWN), "Unknown entryFilter."),
    (dict(perm=9), "Unknown entryFilter."),
]


@pytest.mark.parametrize("v", ACL_VERSIONS)
@pytest.mark.parametrize("bad,message", BAD_FILTERS)
def test_describe_with_an_unknown_filter_element_is_an_invalid_request(v, bad, message):
    s = store_with(SAMPLE)
    resp, _ = call(A.describe_acls, describe_req(**bad), v, s.state)
    assert (resp.error_code, resp.error_message, resp.resources) == (
        int(E.INVALID_REQUEST), message, [])


def test_describe_without_cluster_describe_lists_nothing():
    s = store_with(SAMPLE)
    resp, _ = call(A.describe_acls, describe_req(), 2, s.state, False)
    assert (resp.error_code, resp.resources) == (int(E.CLUSTER_AUTHORIZATION_FAILED), [])
    resp, _ = call(A.describe_acls, describe_req(), 2, s.state, True)
    assert sorted(described(resp)) == sorted(SAMPLE)


def test_describe_of_an_empty_state():
    assert describe_all(SecurityState()) == []


# ---------------------------------------------------------------------- DeleteAcls
def matched(result):
    return [AclBinding(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                       a.operation, a.permission_type) for a in result.matching_acls]


@pytest.mark.parametrize("v", ACL_VERSIONS)
def test_delete_lists_each_filters_matches_and_deletes_them_once(v):
    s = store_with(SAMPLE)
    req = M.DeleteAclsRequest(filters=[
        delete_filter(principal="User:alice"),                          # SAMPLE 0, 1
        delete_filter(rt=RT.GROUP, name="a-1", pt=Pat.MATCH),           # SAMPLE 0, 3
        delete_filter(rt=RT.TOPIC, name="nothing", pt=Pat.LITERAL),     # none
    ])
    resp, records = call(A.delete_acls, req, v, s.state)
    r0, r1, r2 = resp.filter_results
    assert [(r.error_code, r.error_message) for r in resp.filter_results] == [(0, None)] * 3
    assert sorted(matched(r0)) == sorted([SAMPLE[0], SAMPLE[1]])
    assert sorted(matched(r1)) == sorted([SAMPLE[0], SAMPLE[3]])    # listed by both filters
    assert matched(r2) == []
    assert all(a.error_code == 0 and a.error_message is None
               for r in resp.filter_results for a in r.matching_acls)
    assert len(records) == 3 and all(value is None for _, value in records)   # tombstones
    s.apply(records)
    assert sorted(describe_all(s.state, v)) == sorted([SAMPLE[2], SAMPLE[4]])


@pytest.mark.parametrize("v", ACL_VERSIONS)
@pytest.mark.parametrize("bad,message", BAD_FILTERS)
def test_delete_refuses_an_unknown_filter_alone(v, bad, message):
    s = store_with(SAMPLE)
    req = M.DeleteAclsRequest(filters=[delete_filter(**bad), delete_filter(rt=RT.CLUSTER)])
    resp, records = call(A.delete_acls, req, v, s.state)
    bad_r, ok_r = resp.filter_results
    assert (bad_r.error_code, bad_r.error_message, bad_r.matching_acls) == (
        int(E.INVALID_REQUEST), message, [])
    assert (ok_r.error_code, matched(ok_r)) == (0, [SAMPLE[4]])
    s.apply(records)
    assert sorted(describe_all(s.state)) == sorted(SAMPLE[:4])


def test_delete_everything_then_nothing_is_left():
    s = store_with(SAMPLE)
    resp, records = call(A.delete_acls, M.DeleteAclsRequest(filters=[delete_filter()]), 3,
                         s.state)
    assert sorted(matched(resp.filter_results[0])) == sorted(SAMPLE)
    s.apply(records)
    assert s.state.acls == frozenset() and describe_all(s.state) == []
    resp, records = call(A.delete_acls, M.DeleteAclsRequest(filters=[delete_filter()]), 3,
                         s.state)
    assert matched(resp.filter_results[0]) == [] and records == []


def test_delete_with_no_filter():
    resp, records = call(A.delete_acls, M.DeleteAclsRequest(filters=[]), 3,
                         store_with(SAMPLE).state)
    assert resp.filter_results == [] and records == []


# ---------------------------------------------------------------------- SCRAM credentials
def salted(password: bytes, salt: bytes, iterations: int, mechanism: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 with the mechanism's hash, as a KIP-554 client computes it."""
    return hashlib.pbkdf2_hmac("sha256" if mechanism == SHA256 else "sha512", password, salt,
                               iterations)


def upsertion(name, mechanism=SHA512, iterations=4096, password=b"secret",
              salt=b"salt-16-bytes!!!"):
    return M.AlterUserScramCredentialsRequestScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt,
        salted_password=salted(password, salt, max(iterations, 1), mechanism)
        if mechanism in (SHA256, SHA512) else b"x" * 32)


def deletion(name, mechanism=SHA512):
    return M.AlterUserScramCredentialsRequestScramCredentialDeletion(name=name,
                                                                     mechanism=mechanism)


def alter(state, deletions=(), upsertions=()):
    req = M.AlterUserScramCredentialsRequest(deletions=list(deletions),
                                             upsertions=list(upsertions))
    resp, records = call(A.alter_user_scram_credentials, req, 0, state)
    return [(r.user, r.error_code, r.error_message) for r in resp.results], records


def describe_users(state, names):
    users = None if names is None else [
        M.DescribeUserScramCredentialsRequestUserName(name=n) for n in names]
    resp, _ = call(A.describe_user_scram_credentials,
                   M.DescribeUserScramCredentialsRequest(users=users), 0, state)
    assert (resp.error_code, resp.error_message) == (0, None)
    return [(r.user, r.error_code, r.error_message,
             [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in resp.results]


NOT_FOUND, DUPLICATE = int(E.RESOURCE_NOT_FOUND), int(E.DUPLICATE_RESOURCE)
UNACCEPTABLE, NO_MECH = int(E.UNACCEPTABLE_CREDENTIAL), int(E.UNSUPPORTED_SASL_MECHANISM)


def users_store():
    s = Store()
    results, records = alter(s.state, upsertions=[
        upsertion("alice", SHA512, 8192, b"alice-pw"), upsertion("bob", SHA256, 4096),
        upsertion("carol", SHA512, 16384)])
    assert results == [("alice", 0, None), ("bob", 0, None), ("carol", 0, None)]
    s.apply(records)
    results, records = alter(s.state, upsertions=[upsertion("carol", SHA256, 5000)])
    s.apply(records)
    return s


def test_upserted_credentials_are_derived_from_the_salted_password():
    s = users_store()
    cred = s.state.credential("alice", SHA512)
    salt = b"salt-16-bytes!!!"
    sp = salted(b"alice-pw", salt, 8192, SHA512)
    client_key = hmac.new(sp, b"Client Key", "sha512").digest()
    assert cred.salt == salt and cred.iterations == 8192
    assert cred.stored_key == hashlib.sha512(client_key).digest()
    assert cred.server_key == hmac.new(sp, b"Server Key", "sha512").digest()
    sp256 = salted(b"secret", salt, 4096, SHA256)
    assert s.state.credential("bob", SHA256).server_key == \
        hmac.new(sp256, b"Server Key", "sha256").digest()
    # nothing of the salted password itself is kept
    assert all(sp not in bytes(v) for _k, v in s.log)


@pytest.mark.parametrize("names", [None, []])
def test_describe_all_users(names):
    assert describe_users(users_store().state, names) == [
        ("alice", 0, None, [(SHA512, 8192)]),
        ("bob", 0, None, [(SHA256, 4096)]),
        ("carol", 0, None, [(SHA256, 5000), (SHA512, 16384)])]


def test_describe_named_users_unknown_and_duplicate():
    got = describe_users(users_store().state, ["bob", "zoe", "alice", "bob", "bob", ""])
    assert got == [
        ("bob", DUPLICATE, "Cannot describe SCRAM credentials for the same user twice in a "
                           "single request: bob", []),
        ("zoe", NOT_FOUND, "Attempt to describe a user credential that does not exist: zoe",
         []),
        ("alice", 0, None, [(SHA512, 8192)]),
        ("", NOT_FOUND, "Attempt to describe a user credential that does not exist: ", [])]


def test_describe_with_no_user_at_all():
    assert describe_users(SecurityState(), None) == []
    assert describe_users(SecurityState(), ["a"])[0][1] == NOT_FOUND


def test_deleting_credentials():
    s = users_store()
    results, records = alter(s.state, deletions=[deletion("carol", SHA256),
                                                 deletion("alice", SHA512)])
    assert results == [("carol", 0, None), ("alice", 0, None)]
    assert [v for _, v in records] == [None, None]
    s.apply(records)
    assert describe_users(s.state, ["carol", "alice"]) == [
        ("carol", 0, None, [(SHA512, 16384)]),
        ("alice", NOT_FOUND, "Attempt to describe a user credential that does not exist: "
                             "alice", [])]
    assert sorted(s.state.users) == ["bob", "carol"]


def test_replacing_a_credential():
    s = users_store()
    results, records = alter(s.state, upsertions=[upsertion("bob", SHA256, 10000, b"new")])
    assert results == [("bob", 0, None)]
    old = s.state.credential("bob", SHA256)
    s.apply(records)
    new = s.state.credential("bob", SHA256)
    assert new.iterations == 10000 and new.stored_key != old.stored_key
    assert describe_users(s.state, ["bob"]) == [("bob", 0, None, [(SHA256, 10000)])]


ALTER_ERRORS = [
    # (deletions, upsertions, the result for "x" (or ""))
    ([], [upsertion("", SHA512)], ("", UNACCEPTABLE, "Username must not be empty")),
    ([deletion("", SHA512)], [], ("", UNACCEPTABLE, "Username must not be empty")),
    ([], [upsertion("", 7)], ("", UNACCEPTABLE, "Username must not be empty")),
    ([], [upsertion("x", 0)], ("x", NO_MECH, "Unknown SCRAM mechanism")),
    ([], [upsertion("x", 3)], ("x", NO_MECH, "Unknown SCRAM mechanism")),
    ([deletion("x", 3)], [], ("x", NO_MECH, "Unknown SCRAM mechanism")),
    ([], [upsertion("x", SHA256, 4095)], ("x", UNACCEPTABLE, "Too few iterations")),
    ([], [upsertion("x", SHA512, 0)], ("x", UNACCEPTABLE, "Too few iterations")),
    ([], [upsertion("x", SHA512, 16385)], ("x", UNACCEPTABLE, "Too many iterations")),
    ([deletion("x", SHA512)], [],
     ("x", NOT_FOUND, "Attempt to delete a user credential that does not exist")),
    # bob has SCRAM-SHA-256 only
    ([deletion("bob", SHA512)], [],
     ("bob", NOT_FOUND, "Attempt to delete a user credential that does not exist")),
    ([deletion("bob", SHA256), deletion("bob", SHA256)], [],
     ("bob", DUPLICATE, "A user credential cannot be altered twice in the same request")),
    ([deletion("bob", SHA256)], [upsertion("bob", SHA512)],
     ("bob", DUPLICATE, "A user credential cannot be altered twice in the same request")),
    ([], [upsertion("x", SHA256), upsertion("x", SHA512)],
     ("x", DUPLICATE, "A user credential cannot be altered twice in the same request")),
    # three times: still the duplicate error (the user already failed)
    ([], [upsertion("x"), upsertion("x"), upsertion("x")],
     ("x", DUPLICATE, "A user credential cannot be altered twice in the same request")),
    # the first entry's own error stands; later entries for the user are not looked at
    ([deletion("x", SHA512)], [upsertion("x")],
     ("x", NOT_FOUND, "Attempt to delete a user credential that does not exist")),
    ([], [upsertion("x", SHA512, 100), upsertion("x")],
     ("x", UNACCEPTABLE, "Too few iterations")),
    ([], [upsertion("x", salt=b"")], ("x", UNACCEPTABLE, None)),        # scram.py's message
]


@pytest.mark.parametrize("case", range(len(ALTER_ERRORS)))
def test_alter_errors_fail_their_user_only(case):
    dels, ups, want = ALTER_ERRORS[case]
    s = users_store()
    before = describe_users(s.state, None)
    # an unrelated valid change in the same request goes through
    results, records = alter(s.state, deletions=dels,
                             upsertions=list(ups) + [upsertion("dave", SHA256, 4096)])
    assert len(results) == 2 and results[1] == ("dave", 0, None)
    user, code, message = results[0]
    assert (user, code) == want[:2]
    if want[2] is not None:
        assert message == want[2]
    else:
        assert message                          # says why, without the secret
    s.apply(records)
    assert describe_users(s.state, None) == sorted(before + [("dave", 0, None,
                                                              [(SHA256, 4096)])])


@pytest.mark.parametrize("iterations", [4096, 16384])
def test_iteration_bounds_are_inclusive(iterations):
    s = Store()
    results, records = alter(s.state, upsertions=[upsertion("x", SHA512, iterations)])
    assert results == [("x", 0, None)]
    s.apply(records)
    assert describe_users(s.state, ["x"]) == [("x", 0, None, [(SHA512, iterations)])]


def test_one_result_per_user_in_request_order():
    s = users_store()
    results, records = alter(
        s.state, deletions=[deletion("carol", SHA256), deletion("nobody")],
        upsertions=[upsertion("eve", SHA256), upsertion("carol"), upsertion("fay")])
    assert [(u, c) for u, c, _ in results] == [
        ("carol", DUPLICATE), ("nobody", NOT_FOUND), ("eve", 0), ("fay", 0)]
    assert len(records) == 2
    s.apply(records)
    assert [u for u, *_ in describe_users(s.state, None)] == [
        "alice", "bob", "carol", "eve", "fay"]
    assert describe_users(s.state, ["carol"])[0][3] == [(SHA256, 5000), (SHA512, 16384)]


def test_an_empty_alter_does_nothing():
    s = users_store()
    assert alter(s.state) == ([], [])
