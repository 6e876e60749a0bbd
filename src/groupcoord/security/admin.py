"""The security admin APIs, planned purely: DescribeAcls (29), CreateAcls (30), DeleteAcls
(31), DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

Each function reads a SecurityState (security/records.py) and returns the response -- and,
for the three that change something, the records that make the change: (response, records).
Nothing here mutates the state; the caller (server/access.py) appends the records durably,
applies them and only then answers. The caller has checked CLUSTER DESCRIBE / ALTER.

Semantics and messages are Kafka's (KRaft: AclApis, AclControlManager, ScramControlManager,
ScramImage), per entry:
  CreateAcls    one result per creation, in order. INVALID_REQUEST for a CLUSTER resource not
                named "kafka-cluster", an empty name, or what acl.validate_binding refuses
                (UNKNOWN/ANY types, MATCH/ANY patterns, a principal without "Type:"); creating
                a binding that exists (or twice in one request) succeeds with no new record.
  DeleteAcls    one result per filter, in order, listing every binding it matched; a binding
                matched by several filters is listed by each and deleted once (Kafka does the
                same). An UNKNOWN in a filter: INVALID_REQUEST for that filter only.
  DescribeAcls  the bindings the filter matches, grouped by resource pattern; an UNKNOWN in
                the filter: INVALID_REQUEST for the request (Kafka refuses such a request).
  DescribeUserScramCredentials   null/empty users: every user with a credential; a user named
                twice: DUPLICATE_RESOURCE; a user without credential: RESOURCE_NOT_FOUND.
                Only mechanisms and iterations are shown, never salts or keys.
  AlterUserScramCredentials      one result per user. A user named twice (deletions and
                upsertions together): DUPLICATE_RESOURCE; an empty name or iterations outside
                [4096, 16384]: UNACCEPTABLE_CREDENTIAL; a mechanism other than SCRAM-SHA-256/512:
                UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not exist:
                RESOURCE_NOT_FOUND. The SaltedPassword is turned into StoredKey/ServerKey
                here (scram.credential_from_salted); it is never stored.
Output order is deterministic (request order, or sorted where Kafka iterates a hash map).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security.acl import (CLUSTER_NAME, AclBinding, AclFilter, ResourceType,
                                     validate_binding, validate_filter)
from groupcoord.security.records import (SecurityState, acl_record, acl_tombstone,
                                         credential_record, credential_tombstone)
from groupcoord.security.scram import (MAX_ITERATIONS, MECHANISM_NAMES, MIN_ITERATIONS,
                                       credential_from_salted)

__all__ = ["describe_acls", "create_acls", "delete_acls", "describe_user_scram_credentials",
           "alter_user_scram_credentials"]

_OK = 0
_INVALID_REQUEST = int(E.INVALID_REQUEST)
_CLUSTER_AUTH = int(E.CLUSTER_AUTHORIZATION_FAILED)
_NOT_FOUND = int(E.RESOURCE_NOT_FOUND)
_DUPLICATE = int(E.DUPLICATE_RESOURCE)
_UNACCEPTABLE = int(E.UNACCEPTABLE_CREDENTIAL)
_UNSUPPORTED_MECHANISM = int(E.UNSUPPORTED_SASL_MECHANISM)

Records = List[Tuple[bytes, Optional[bytes]]]


# ---------------------------------------------------------------------- ACLs
def _filter(f) -> AclFilter:
    """The AclFilter of a DescribeAclsRequest or a DeleteAclsRequest filter (same fields)."""
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)


def describe_acls(req, version: int, state: SecurityState, authz_ok: bool = True):
    """authz_ok False: the caller lacks DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED,
    nothing listed)."""
    if not authz_ok:
        return m.DescribeAclsResponse(error_code=_CLUSTER_AUTH,
                                      error_message="Authorization failed.", resources=[])
    flt = _filter(req)
    why = validate_filter(flt)
    if why is not None:
        return m.DescribeAclsResponse(error_code=_INVALID_REQUEST, error_message=why,
                                      resources=[])
    by_pattern: dict = {}
    for b in state.acls:
        if flt.matches(b):
            by_pattern.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    resources = []
    for rt, name, pt in sorted(by_pattern):
        acls = [m.DescribeAclsResponseAclDescription(
                    principal=b.principal, host=b.host, operation=b.operation,
                    permission_type=b.permission)
                for b in sorted(by_pattern[(rt, name, pt)])]
        resources.append(m.DescribeAclsResponseDescribeAclsResource(
            resource_type=rt, resource_name=name, pattern_type=pt, acls=acls))
    return m.DescribeAclsResponse(error_code=_OK, resources=resources)


def _creation_problem(b: AclBinding) -> Optional[str]:
    # AclApis' checks first (the CLUSTER name, an empty name), then the controller's.
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    if not b.name:
        return "Invalid empty resource name"
    return validate_binding(b)


def create_acls(req, version: int, state: SecurityState):
    existing = state.acls
    added = set()
    results, records = [], []
    for c in req.creations:
        b = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                       c.host, c.operation, c.permission_type)
        why = _creation_problem(b)
        if why is not None:
            results.append(m.CreateAclsResponseAclCreationResult(
                error_code=_INVALID_REQUEST, error_message=why))
            continue
        if b not in existing and b not in added:
            added.add(b)
            records.append(acl_record(b))
        results.append(m.CreateAclsResponseAclCreationResult(error_code=_OK))
    return m.CreateAclsResponse(results=results), records


def _matching(b: AclBinding):
    return m.DeleteAclsResponseDeleteAclsMatchingAcl(
        error_code=_OK, resource_type=b.resource_type, resource_name=b.name,
        pattern_type=b.pattern_type, principal=b.principal, host=b.host,
        operation=b.operation, permission_type=b.permission)


def delete_acls(req, version: int, state: SecurityState):
    acls = sorted(state.acls)
    deleted = set()
    results, records = [], []
    for f in req.filters:
        flt = _filter(f)
        why = validate_filter(flt)
        if why is not None:
            results.append(m.DeleteAclsResponseDeleteAclsFilterResult(
                error_code=_INVALID_REQUEST, error_message=why, matching_acls=[]))
            continue
        matched = [b for b in acls if flt.matches(b)]
        for b in matched:
            if b not in deleted:
                deleted.add(b)
                records.append(acl_tombstone(b))
        results.append(m.DeleteAclsResponseDeleteAclsFilterResult(
            error_code=_OK, matching_acls=[_matching(b) for b in matched]))
    return m.DeleteAclsResponse(filter_results=results), records


# ---------------------------------------------------------------------- SCRAM credentials
_DescribeResult = m.DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult
_AlterResult = m.AlterUserScramCredentialsResponseAlterUserScramCredentialsResult


def describe_user_scram_credentials(req, version: int, state: SecurityState):
    if not req.users:
        named = {u: 1 for u in sorted(state.users)}
    else:
        named = {}                                  # first-appearance order, with counts
        for u in req.users:
            named[u.name] = named.get(u.name, 0) + 1
    results = []
    for user, count in named.items():
        if count > 1:
            results.append(_DescribeResult(
                user=user, error_code=_DUPLICATE, credential_infos=[],
                error_message="Cannot describe SCRAM credentials for the same user twice "
                              "in a single request: " + user))
            continue
        creds = state.users.get(user)
        if not creds:
            results.append(_DescribeResult(
                user=user, error_code=_NOT_FOUND, credential_infos=[],
                error_message="Attempt to describe a user credential that does not exist: "
                              + user))
            continue
        infos = [m.DescribeUserScramCredentialsResponseCredentialInfo(
                     mechanism=mech, iterations=creds[mech].iterations)
                 for mech in sorted(creds)]
        results.append(_DescribeResult(user=user, error_code=_OK, credential_infos=infos))
    return m.DescribeUserScramCredentialsResponse(error_code=_OK, results=results)


def _name_and_mechanism_problem(name: str, mechanism: int) -> Optional[Tuple[int, str]]:
    if not name:
        return _UNACCEPTABLE, "Username must not be empty"
    if mechanism not in MECHANISM_NAMES:
        return _UNSUPPORTED_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _deletion_problem(d, state: SecurityState) -> Optional[Tuple[int, str]]:
    problem = _name_and_mechanism_problem(d.name, d.mechanism)
    if problem is None and state.credential(d.name, d.mechanism) is None:
        problem = _NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return problem


def _upsertion_problem(u) -> Optional[Tuple[int, str]]:
    problem = _name_and_mechanism_problem(u.name, u.mechanism)
    if problem is None:
        if u.iterations < MIN_ITERATIONS:
            problem = _UNACCEPTABLE, "Too few iterations"
        elif u.iterations > MAX_ITERATIONS:
            problem = _UNACCEPTABLE, "Too many iterations"
    return problem


def alter_user_scram_credentials(req, version: int, state: SecurityState):
    """Kafka's ScramControlManager.alterCredentials: a user's first failed entry decides its
    error and later entries for it are not looked at; a user altered twice (two deletions, a
    deletion and an upsertion, two upsertions -- even of different mechanisms) fails with
    DUPLICATE_RESOURCE and none of its entries is applied."""
    twice = (_DUPLICATE, "A user credential cannot be altered twice in the same request")
    order: dict = {}                    # user -> None, in first-appearance order
    errors: dict = {}                   # user -> (code, message)
    deletions: dict = {}                # user -> the deletion entry
    upsertions: dict = {}               # user -> the upsertion entry
    for d in req.deletions:
        order.setdefault(d.name)
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = twice
            continue
        problem = _deletion_problem(d, state)
        if problem is not None:
            errors[d.name] = problem
        else:
            deletions[d.name] = d
    for u in req.upsertions:
        order.setdefault(u.name)
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = twice
            continue
        problem = _upsertion_problem(u)
        if problem is not None:
            errors[u.name] = problem
        else:
            upsertions[u.name] = u
    records: Records = []
    for user in order:
        if user in deletions:
            records.append(credential_tombstone(user, deletions[user].mechanism))
        elif user in upsertions:
            u = upsertions[user]
            try:
                cred = credential_from_salted(u.mechanism, bytes(u.salt),
                                              bytes(u.salted_password), u.iterations)
            except ValueError as e:     # an empty salt or salted password
                errors[user] = _UNACCEPTABLE, str(e)
                continue
            records.append(credential_record(user, cred))
    results = []
    for user in order:
        code, message = errors.get(user, (_OK, None))
        results.append(_AlterResult(user=user, error_code=code, error_message=message))
    return m.AlterUserScramCredentialsResponse(results=results), records
