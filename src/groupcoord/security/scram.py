"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616) server mechanisms,
as Kafka's brokers run them, and the stored credential both check against.

Credential (what the store keeps; never a password; H = SHA-256 or SHA-512):
    SaltedPassword = PBKDF2-HMAC-H(UTF-8(password), salt, iterations)
    StoredKey = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey = HMAC(SaltedPassword, "Server Key")
  Passwords are UTF-8 encoded without SASLprep, as Kafka's ScramFormatter does.

SCRAM exchange (two SaslAuthenticate round trips; no PBKDF2 on this side, stored keys only):
    client-first   gs2-header client-first-bare
                   gs2-header        = "n," ["a=" saslname] ","
                   client-first-bare = "n=" saslname ",r=" c-nonce *("," ext "=" value)
    server-first   "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
    client-final   "c=" base64(gs2-header) ",r=" c-nonce s-nonce *("," ext "=" value)
                   ",p=" base64(ClientProof)
    server-final   "v=" base64(ServerSignature)     (on failure: "e=" server-error-value)
  AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
  ClientSignature = HMAC(StoredKey, AuthMessage); ClientKey = ClientProof XOR ClientSignature
  accepted when H(ClientKey) == StoredKey;  ServerSignature = HMAC(ServerKey, AuthMessage)
  saslname: "=2C" stands for ",", "=3D" for "=", any other "=" is malformed.

PLAIN (one round trip): [authzid] NUL username NUL password, answered with empty bytes. The
password is checked against the user's SCRAM credential (SCRAM-SHA-512 preferred, else
SCRAM-SHA-256): PBKDF2 with the stored salt and iterations, then StoredKey compared.

Where this differs from Kafka (each on purpose):
  - An unknown user gets a server-first with a made-up salt (stable per user name for the life
    of the process) and fails at the proof, as RFC 5802 section 9 suggests; Kafka fails at the
    client-first, which tells a prober the user does not exist. PLAIN does the same PBKDF2
    work against a dummy credential for an unknown user.
  - The client-final channel binding must be base64 of the client's gs2-header ("biws" for
    "n,,"), as RFC 5802 requires; Kafka does not compare it.
  - A mandatory extension "m=" (anywhere) is refused (RFC 5802); Kafka ignores it.
  - User names may be any Unicode (RFC 5802); Kafka's parser takes ASCII only.
  Like Kafka: gs2 flags "y" and "p" (channel binding) are refused; extensions other than
  "tokenauth" are ignored; "tokenauth=true" fails, as there are no delegation tokens here.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from typing import Callable, NamedTuple, Optional

__all__ = [
    "MECHANISMS", "MECHANISM_NAMES", "MIN_ITERATIONS", "MAX_ITERATIONS", "ScramCredential",
    "make_credential", "credential_from_salted", "verify_password", "AuthFailed",
    "ScramServer", "PlainServer", "client_proof",
]

log = logging.getLogger("groupcoord.security")

MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}     # Kafka's ScramMechanism codes
MECHANISM_NAMES = {code: name for name, code in MECHANISMS.items()}
MIN_ITERATIONS = 4096          # Kafka's bounds for both mechanisms
MAX_ITERATIONS = 16384
DEFAULT_SALT_BYTES = 32
_HASH = {1: "sha256", 2: "sha512"}

# A non-empty list of UTF-8 chars other than NUL, "," and "=", or the two escapes.
_SASLNAME = re.compile(r"(?:[^\x00,=]|=2C|=3D)+")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")        # printable ASCII except ","
_EXT_KEY = re.compile(r"[A-Za-z]+")
_EXT_VALUE = re.compile(r"[\x01-\x2b\x2d-\x7f]+")   # Kafka's VALUE: ASCII except NUL and ","


class ScramCredential(NamedTuple):
    mechanism: int          # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


Lookup = Callable[[str, int], Optional[ScramCredential]]


def _hash_name(mechanism: int) -> str:
    try:
        return _HASH[mechanism]
    except KeyError:
        raise ValueError("unknown SCRAM mechanism %r" % (mechanism,)) from None


def _check_params(mechanism: int, salt: bytes, iterations: int) -> str:
    name = _hash_name(mechanism)
    if not isinstance(salt, (bytes, bytearray)) or not salt:
        raise ValueError("salt must be non-empty bytes")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError("iterations must be between %d and %d, got %r"
                         % (MIN_ITERATIONS, MAX_ITERATIONS, iterations))
    return name


def _keys(hname: str, salted_password: bytes) -> tuple[bytes, bytes]:
    client_key = hmac.digest(salted_password, b"Client Key", hname)
    return (hashlib.new(hname, client_key).digest(),
            hmac.digest(salted_password, b"Server Key", hname))


def credential_from_salted(mechanism: int, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    """The credential for a SaltedPassword computed elsewhere (AlterUserScramCredentials
    carries salt, SaltedPassword and iterations, never the password). ValueError on an unknown
    mechanism, an empty salt or salted password, or iterations outside Kafka's bounds."""
    hname = _check_params(mechanism, salt, iterations)
    if not isinstance(salted_password, (bytes, bytearray)) or not salted_password:
        raise ValueError("salted password must be non-empty bytes")
    stored_key, server_key = _keys(hname, bytes(salted_password))
    return ScramCredential(mechanism, bytes(salt), stored_key, server_key, iterations)


def make_credential(mechanism: int, password: str, salt: Optional[bytes] = None,
                    iterations: int = 4096) -> ScramCredential:
    """The credential for a password (a fresh random salt unless given). The password is
    used here and dropped; only salt, keys and iterations are kept."""
    if salt is None:
        salt = secrets.token_bytes(DEFAULT_SALT_BYTES)
    hname = _check_params(mechanism, salt, iterations)
    salted = hashlib.pbkdf2_hmac(hname, password.encode("utf-8"), bytes(salt), iterations)
    stored_key, server_key = _keys(hname, salted)
    return ScramCredential(mechanism, bytes(salt), stored_key, server_key, iterations)


def verify_password(cred: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``cred``'s StoredKey (one PBKDF2 at the credential's
    iterations; the comparison is constant-time)."""
    hname = _hash_name(cred.mechanism)
    salted = hashlib.pbkdf2_hmac(hname, password.encode("utf-8"), cred.salt, cred.iterations)
    client_key = hmac.digest(salted, b"Client Key", hname)
    return hmac.compare_digest(hashlib.new(hname, client_key).digest(), cred.stored_key)


def client_proof(mechanism: int, password: str, salt: bytes, iterations: int,
                 auth_message: bytes, pbkdf2=hashlib.pbkdf2_hmac) -> tuple[bytes, bytes]:
    """The client's side of the keys above (security/scram_client.py): (ClientProof, the
    ServerSignature to expect) for a password, the server-first's salt and iterations and
    the AuthMessage. One PBKDF2 (``pbkdf2``, hashlib's signature: a load generator passes a
    memoized one so that its connection rate measures the server); nothing is kept."""
    hname = _hash_name(mechanism)
    salted = pbkdf2(hname, password.encode("utf-8"), bytes(salt), iterations)
    client_key = hmac.digest(salted, b"Client Key", hname)
    stored_key, server_key = _keys(hname, salted)
    proof = _xor(client_key, hmac.digest(stored_key, auth_message, hname))
    return proof, hmac.digest(server_key, auth_message, hname)


class AuthFailed(Exception):
    """An exchange refused.

    ``reason``: what happened, for the server's log (never a password or key).
    ``client_message``: the message Kafka sends for this case when it is specific (Kafka's
    SaslAuthenticationException wording), else None: the session sends Kafka's generic
    "invalid credentials" message, which tells the client nothing about why.
    ``rfc_error``: RFC 5802's server-error-value, sent as "e=<value>" (SCRAM only)."""

    def __init__(self, reason: str, *, client_message: Optional[str] = None,
                 rfc_error: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.client_message = client_message
        self.rfc_error = rfc_error


# Secrets of this process for unknown users (never match: the flag below decides anyway).
_FAKE_SALT_KEY = secrets.token_bytes(32)
_FAKE_KEYS: dict = {}          # mechanism -> (stored_key, server_key), made on first use
# PLAIN's stand-in for an unknown user: the work of the common credential (SHA-512, 4096).
_PLAIN_DUMMY = ScramCredential(2, secrets.token_bytes(DEFAULT_SALT_BYTES),
                               secrets.token_bytes(64), secrets.token_bytes(64), MIN_ITERATIONS)


def _unknown_user_credential(mechanism: int, username: str) -> ScramCredential:
    # The same salt for the same name every time, so repeated probes look like a real user.
    salt = hmac.digest(_FAKE_SALT_KEY, b"%d\0" % mechanism + username.encode("utf-8"),
                       "sha256")
    keys = _FAKE_KEYS.get(mechanism)
    if keys is None:
        size = hashlib.new(_hash_name(mechanism)).digest_size
        keys = _FAKE_KEYS[mechanism] = (secrets.token_bytes(size), secrets.token_bytes(size))
    stored_key, server_key = keys
    return ScramCredential(mechanism, salt, stored_key, server_key, MIN_ITERATIONS)


def _saslname(text: str, what: str) -> str:
    if not _SASLNAME.fullmatch(text):
        raise AuthFailed("malformed %s in SCRAM client-first message" % what,
                         rfc_error="invalid-username-encoding")
    # "=2C" first: the name "=2C" is sent as "=3D2C" and must not come back as ",".
    return text.replace("=2C", ",").replace("=3D", "=")


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AuthFailed("%s is not valid base64" % what, rfc_error="invalid-encoding") from None


def _extensions(attrs: list, where: str) -> dict:
    out = {}
    for a in attrs:
        key, sep, value = a.partition("=")
        if not sep or not _EXT_KEY.fullmatch(key) or not _EXT_VALUE.fullmatch(value):
            raise AuthFailed("malformed extension in SCRAM %s message" % where,
                             rfc_error="other-error")
        if key == "m":                      # RFC 5802: reserved; its presence must fail
            raise AuthFailed("client sent a mandatory extension (m=)",
                             rfc_error="extensions-not-supported")
        out[key] = value
    return out


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


class ScramServer:
    """One SCRAM-SHA-256/512 exchange. ``step(data)`` takes the client's message and returns
    (reply, complete); it raises AuthFailed on any refusal and then refuses every later
    step. ``username`` is the claimed user name once the client-first parsed (for logs),
    the authenticated one when complete."""

    def __init__(self, mechanism: int, lookup: Lookup, *, server_nonce: Optional[str] = None):
        self.mechanism = mechanism
        self.name = MECHANISM_NAMES.get(mechanism, "SCRAM-%d" % mechanism)
        self._hname = _hash_name(mechanism)
        self._digest_size = hashlib.new(self._hname).digest_size
        self._lookup = lookup
        self._server_nonce = server_nonce       # tests pin it; else random per exchange
        self._state = 0                         # 0 first, 1 final, 2 complete, 3 failed
        self.username: Optional[str] = None
        self.complete = False
        self._cred: Optional[ScramCredential] = None
        self._unknown = False
        self._gs2 = self._first_bare = self._server_first = self._nonce = ""

    def step(self, data: bytes) -> tuple[bytes, bool]:
        state = self._state
        self._state = 3                         # failed unless a step below completes
        if state == 0:
            reply = self._first(data)
            self._state = 1
            return reply, False
        if state == 1:
            reply = self._final(data)
            self._state = 2
            self.complete = True
            return reply, True
        raise AuthFailed("SCRAM exchange already finished", rfc_error="other-error")

    def _text(self, data: bytes, where: str) -> str:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthFailed("SCRAM %s message is not UTF-8" % where,
                             rfc_error="invalid-encoding") from None

    def _first(self, data: bytes) -> bytes:
        text = self._text(data, "client-first")
        if text.startswith("p="):
            raise AuthFailed("client requested channel binding (gs2 flag p)",
                             rfc_error="channel-binding-not-supported")
        if text.startswith("y,"):
            raise AuthFailed("client offered channel binding (gs2 flag y); only n is accepted",
                             rfc_error="other-error")
        end = text.find(",", 2)
        if not text.startswith("n,") or end < 0:
            raise AuthFailed("malformed SCRAM client-first message (gs2 header)",
                             rfc_error="other-error")
        authz = text[2:end]
        self._gs2 = text[:end + 1]
        bare = text[end + 1:]
        authzid = None
        if authz:
            if not authz.startswith("a="):
                raise AuthFailed("malformed SCRAM gs2 header", rfc_error="other-error")
            authzid = _saslname(authz[2:], "authorization id")
        attrs = bare.split(",")
        if attrs[0].startswith("m="):
            raise AuthFailed("client sent a mandatory extension (m=)",
                             rfc_error="extensions-not-supported")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise AuthFailed("malformed SCRAM client-first message", rfc_error="other-error")
        username = _saslname(attrs[0][2:], "user name")
        self.username = username
        client_nonce = attrs[1][2:]
        if not _NONCE.fullmatch(client_nonce):
            raise AuthFailed("malformed client nonce", rfc_error="other-error")
        ext = _extensions(attrs[2:], "client-first")
        if ext.get("tokenauth", "").lower() == "true":
            raise AuthFailed("delegation token authentication requested (no tokens here)",
                             rfc_error="other-error")
        # Checked before the lookup, so the answer does not depend on whether the user exists.
        if authzid is not None and authzid != username:
            raise AuthFailed(
                "authorization id differs from user name", rfc_error="other-error",
                client_message="Authentication failed: Client requested an authorization id "
                               "that is different from username")
        try:
            cred = self._lookup(username, self.mechanism)
        except Exception as e:                  # the store's problem, not the client's
            log.warning("SCRAM credential lookup for a user failed: %r", e)
            raise AuthFailed("credentials could not be obtained", rfc_error="other-error") from None
        fake = _unknown_user_credential(self.mechanism, username)   # made either way: same work
        if cred is None or cred.mechanism != self.mechanism or cred.iterations < MIN_ITERATIONS:
            self._unknown = True                # fails at the proof, after the same work
            cred = fake
        self._cred = cred
        self._nonce = client_nonce + (self._server_nonce or secrets.token_urlsafe(24))
        self._first_bare = bare
        self._server_first = "r=%s,s=%s,i=%d" % (
            self._nonce, base64.b64encode(cred.salt).decode("ascii"), cred.iterations)
        return self._server_first.encode("ascii")

    def _final(self, data: bytes) -> bytes:
        text = self._text(data, "client-final")
        cut = text.rfind(",p=")
        if cut < 0:
            raise AuthFailed("malformed SCRAM client-final message (no proof)",
                             rfc_error="other-error")
        without_proof = text[:cut]
        attrs = without_proof.split(",")
        if len(attrs) < 2 or not attrs[0].startswith("c=") or not attrs[1].startswith("r="):
            raise AuthFailed("malformed SCRAM client-final message", rfc_error="other-error")
        _extensions(attrs[2:], "client-final")  # validated, ignored (as Kafka)
        if _b64(attrs[0][2:], "channel binding") != self._gs2.encode("utf-8"):
            raise AuthFailed("channel binding does not repeat the gs2 header",
                             rfc_error="channel-bindings-dont-match")
        if not hmac.compare_digest(attrs[1][2:].encode("utf-8"), self._nonce.encode("ascii")):
            raise AuthFailed("client-final nonce differs from the exchange's nonce",
                             rfc_error="other-error")
        proof = _b64(text[cut + 3:], "client proof")
        if len(proof) != self._digest_size:
            raise AuthFailed("client proof has the wrong length", rfc_error="invalid-proof")
        cred = self._cred
        auth_message = ("%s,%s,%s" % (self._first_bare, self._server_first, without_proof)
                        ).encode("utf-8")
        signature = hmac.digest(cred.stored_key, auth_message, self._hname)
        computed = hashlib.new(self._hname, _xor(proof, signature)).digest()
        matched = hmac.compare_digest(computed, cred.stored_key)
        if self._unknown or not matched:
            reason = "unknown user" if self._unknown else "invalid proof (wrong password)"
            raise AuthFailed(reason, rfc_error="invalid-proof")
        server_signature = hmac.digest(cred.server_key, auth_message, self._hname)
        self._cred = None                       # nothing of the credential outlives the exchange
        return b"v=" + base64.b64encode(server_signature)


class PlainServer:
    """One PLAIN exchange (RFC 4616 as Kafka's PlainSaslServer parses it), checked against
    the stored SCRAM credential. Same ``step`` / ``username`` / ``complete`` as ScramServer;
    the password is never kept."""

    name = "PLAIN"

    def __init__(self, lookup: Lookup):
        self._lookup = lookup
        self._done = False
        self.username: Optional[str] = None
        self.complete = False

    def step(self, data: bytes) -> tuple[bytes, bool]:
        if self._done:
            raise AuthFailed("PLAIN exchange already finished")
        self._done = True
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthFailed("PLAIN message is not UTF-8") from None
        # Kafka splits at the first two NULs: a third stays in the password.
        tokens = (text.split("\0", 2) + ["", ""])[:3]
        authzid, username, password = tokens
        self.username = username or None
        if not username:
            raise AuthFailed("Authentication failed: username not specified")
        if not password:
            raise AuthFailed("Authentication failed: password not specified")
        try:
            cred = self._lookup(username, 2) or self._lookup(username, 1)
        except Exception as e:
            log.warning("PLAIN credential lookup for a user failed: %r", e)
            raise AuthFailed("credentials could not be obtained", client_message=(
                "Authentication failed: credentials for user could not be verified")) from None
        known = cred is not None and cred.mechanism in _HASH
        ok = verify_password(cred if known else _PLAIN_DUMMY, password)
        if not (known and ok):
            raise AuthFailed("unknown user" if not known else "wrong password", client_message=(
                "Authentication failed: Invalid username or password"))
        if authzid and authzid != username:
            raise AuthFailed("authorization id differs from user name", client_message=(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"))
        self.complete = True
        return b"", True
