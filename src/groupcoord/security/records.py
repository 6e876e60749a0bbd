"""Security records (SCRAM credentials, ACL bindings) <-> the key/value bytes of the security
store (security/store.py), and SecurityState, what replaying them gives.

Layout (the coordinator records' convention, groups/records.py):
  key   = int16 record type | key fields (the type's <Name>Key schema, version 0, not flexible)
  value = int16 value version | value fields (<Name>Value schema at that version)
          or None: a tombstone, which deletes the key
Types (our numbering; Kafka keeps both in its metadata log, not in __consumer_offsets):
  120  UserScramCredentialKey (Name string, Mechanism int8)
       UserScramCredentialValue v0 (Salt bytes, StoredKey bytes, ServerKey bytes,
                                    Iterations int32)                 one per user+mechanism
  121  AclBindingKey (ResourceType int8, ResourceName string, PatternType int8, Principal
       string, Host string, Operation int8, PermissionType int8)
       AclBindingValue v0 (no field: the key is the binding)          one per binding
A reader of a newer value version than it knows reads the newest known one and ignores the
trailing bytes (as groups/records.py). Compaction keeps the last record per key bytes, so the
key encoding is canonical: equal bindings give equal keys, and a key with bytes after its
fields is refused.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, Optional, Tuple

# The codec's native module imports groupcoord.protocol: load the package first (as
# groups/__init__.py does) so that importing this module on its own works.
from groupcoord.protocol import messages
from groupcoord._native.codec import get_data_codec
from groupcoord._native.krpc import DecodeError
from groupcoord.security.acl import AclBinding
from groupcoord.security.scram import ScramCredential

__all__ = ["USER_SCRAM_CREDENTIAL", "ACL_BINDING", "SecurityRecordError",
           "UnknownRecordTypeError", "SecurityState", "credential_record",
           "credential_tombstone", "acl_record", "acl_tombstone", "decode_security_record"]

USER_SCRAM_CREDENTIAL = 120
ACL_BINDING = 121

_CRED_KEY = get_data_codec("UserScramCredentialKey", 0)
_CRED_VALUES = [get_data_codec("UserScramCredentialValue", 0)]     # by value version
_ACL_KEY = get_data_codec("AclBindingKey", 0)
_ACL_VALUES = [get_data_codec("AclBindingValue", 0)]
_CRED_PREFIX = USER_SCRAM_CREDENTIAL.to_bytes(2, "big")
_ACL_PREFIX = ACL_BINDING.to_bytes(2, "big")
_V0 = (0).to_bytes(2, "big")
_ACL_VALUE = _V0 + _ACL_VALUES[0].encode(messages.AclBindingValue())


class SecurityRecordError(ValueError):
    """A security record that cannot be read: malformed bytes or an unknown type."""


class UnknownRecordTypeError(SecurityRecordError):
    """A record whose type is not a security record type (``record_type`` says which): the
    store holds something this code does not know, e.g. written by a newer version."""

    def __init__(self, record_type: int):
        super().__init__("unknown security record type %d (known: %d user SCRAM credential, "
                         "%d ACL binding)" % (record_type, USER_SCRAM_CREDENTIAL, ACL_BINDING))
        self.record_type = record_type


# ---------------------------------------------------------------------- encoding
def credential_record(user: str, cred: ScramCredential) -> Tuple[bytes, bytes]:
    key = _CRED_PREFIX + _CRED_KEY.encode(
        messages.UserScramCredentialKey(name=user, mechanism=cred.mechanism))
    value = _V0 + _CRED_VALUES[0].encode(messages.UserScramCredentialValue(
        salt=bytes(cred.salt), stored_key=bytes(cred.stored_key),
        server_key=bytes(cred.server_key), iterations=cred.iterations))
    return key, value


def credential_tombstone(user: str, mechanism: int) -> Tuple[bytes, None]:
    return _CRED_PREFIX + _CRED_KEY.encode(
        messages.UserScramCredentialKey(name=user, mechanism=mechanism)), None


def _acl_key(b: AclBinding) -> bytes:
    return _ACL_PREFIX + _ACL_KEY.encode(messages.AclBindingKey(
        resource_type=int(b.resource_type), resource_name=b.name,
        pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
        operation=int(b.operation), permission_type=int(b.permission)))


def acl_record(b: AclBinding) -> Tuple[bytes, bytes]:
    return _acl_key(b), _ACL_VALUE


def acl_tombstone(b: AclBinding) -> Tuple[bytes, None]:
    return _acl_key(b), None


# ---------------------------------------------------------------------- decoding
def _value_fields(codecs: list, value: bytes, what: str):
    if len(value) < 2:
        raise SecurityRecordError("%s record value of %d byte(s) has no version"
                                  % (what, len(value)))
    ver = int.from_bytes(value[:2], "big", signed=True)
    if ver < 0:
        raise SecurityRecordError("%s record value version %d is negative" % (what, ver))
    v, _ = codecs[min(ver, len(codecs) - 1)].decode_from(value, 2)
    return v


def _key_fields(codec, key: bytes, what: str):
    # A key must be exactly its fields: compaction keeps the last record per key *bytes*, so
    # two encodings of one key would let an older value outlive a newer tombstone.
    k, end = codec.decode_from(key, 2)
    if end != len(key):
        raise SecurityRecordError("%s record key has %d byte(s) after its fields"
                                  % (what, len(key) - end))
    return k


def decode_security_record(key: bytes, value: Optional[bytes]):
    """-> (USER_SCRAM_CREDENTIAL, user, mechanism, ScramCredential or None) or
    (ACL_BINDING, AclBinding, present: bool). UnknownRecordTypeError for another type,
    SecurityRecordError for malformed bytes."""
    if len(key) < 2:
        raise SecurityRecordError("security record key of %d byte(s) has no type" % len(key))
    t = int.from_bytes(key[:2], "big", signed=True)
    try:
        if t == USER_SCRAM_CREDENTIAL:
            k = _key_fields(_CRED_KEY, key, "user SCRAM credential")
            if value is None:
                return t, k.name, k.mechanism, None
            v = _value_fields(_CRED_VALUES, value, "user SCRAM credential")
            return t, k.name, k.mechanism, ScramCredential(
                k.mechanism, v.salt, v.stored_key, v.server_key, v.iterations)
        if t == ACL_BINDING:
            k = _key_fields(_ACL_KEY, key, "ACL binding")
            if value is not None:
                _value_fields(_ACL_VALUES, value, "ACL binding")     # checks it is readable
            return t, AclBinding(k.resource_type, k.resource_name, k.pattern_type,
                                 k.principal, k.host, k.operation,
                                 k.permission_type), value is not None
    except DecodeError as e:
        raise SecurityRecordError("malformed security record of type %d: %s" % (t, e)) \
            from None
    raise UnknownRecordTypeError(t)


# ---------------------------------------------------------------------- state
class SecurityState:
    """The users' SCRAM credentials and the ACL bindings, as replaying the security records
    in store order gives them. ``apply`` is the only mutator; readers treat ``users`` (name ->
    mechanism -> ScramCredential) and ``acls`` as read-only. ``version`` grows by one per
    applied record (a cache key: an authorizer rebuilt at version v is current while the
    state stays at v)."""

    __slots__ = ("users", "_acls", "_acls_frozen", "version")

    def __init__(self):
        self.users: Dict[str, Dict[int, ScramCredential]] = {}
        self._acls: set = set()
        self._acls_frozen: Optional[FrozenSet[AclBinding]] = frozenset()
        self.version = 0

    @classmethod
    def replay(cls, records: Iterable[Tuple[bytes, Optional[bytes]]]) -> "SecurityState":
        state = cls()
        for key, value in records:
            state.apply(key, value)
        return state

    @property
    def acls(self) -> FrozenSet[AclBinding]:
        # Frozen on first read after a change: a replay of n bindings stays O(n).
        if self._acls_frozen is None:
            self._acls_frozen = frozenset(self._acls)
        return self._acls_frozen

    def apply(self, key: bytes, value: Optional[bytes]) -> None:
        """Apply one record (value None: a tombstone, which deletes its key; deleting what is
        not there changes nothing but the version). Errors as decode_security_record, and
        then the state is unchanged."""
        rec = decode_security_record(key, value)
        if rec[0] == USER_SCRAM_CREDENTIAL:
            _t, user, mechanism, cred = rec
            if cred is None:
                mechs = self.users.get(user)
                if mechs is not None:
                    mechs.pop(mechanism, None)
                    if not mechs:
                        del self.users[user]
            else:
                self.users.setdefault(user, {})[mechanism] = cred
        else:
            _t, binding, present = rec
            if present:
                if binding not in self._acls:
                    self._acls.add(binding)
                    self._acls_frozen = None
            elif binding in self._acls:
                self._acls.discard(binding)
                self._acls_frozen = None
        self.version += 1

    def credential(self, user: str, mechanism: int) -> Optional[ScramCredential]:
        mechs = self.users.get(user)
        return None if mechs is None else mechs.get(mechanism)
