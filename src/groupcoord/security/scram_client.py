"""The client side of SASL SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) and PLAIN
(RFC 4616), as Kafka clients send them inside SaslAuthenticate (SaslHandshake v1). The
SDK's Connection runs these (client/connection.py); the keys come from security/scram.py
(`client_proof`), the same code the server checks them with.

SCRAM (H = SHA-256 or SHA-512; no channel binding, no authzid, as Kafka's clients):
    client-first   "n,," client-first-bare
                   client-first-bare = "n=" saslname ",r=" c-nonce
    server-first   "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations *("," ext)
    client-final   "c=biws,r=" c-nonce s-nonce ",p=" base64(ClientProof)
                   ("biws" = base64("n,,"), the gs2 header repeated as channel binding)
    server-final   "v=" base64(ServerSignature) *("," ext)   |   "e=" server-error-value
  AuthMessage = client-first-bare "," server-first "," client-final-without-proof
  saslname: "=" is written "=3D" and "," is written "=2C" (in that order).
  The exchange succeeds only when the server-final's signature is the one the password
  gives: a server that does not hold the user's ServerKey is refused (mutual authentication).

PLAIN: one message, [authzid] NUL username NUL password (no authzid sent); the server
answers empty bytes.

Each mechanism is a `SaslClient`: `initial()` is the first message; `step(server_bytes)`
returns the next message, or None once the exchange is complete (and, for SCRAM, the server
verified). `SaslClientError` says why the server's messages are refused; it never carries
the password. The password is dropped once it has been used.
"""
from __future__ import annotations

import abc
import base64
import binascii
import hmac
import re
import secrets
from typing import Optional

from groupcoord.security.scram import (MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS,
                                       client_proof)

__all__ = ["SaslClient", "ScramClient", "PlainClient", "SaslClientError", "sasl_client",
           "CLIENT_MECHANISMS", "escape_saslname"]

CLIENT_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode("ascii")).decode("ascii")   # "biws"
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")        # printable ASCII except ","


class SaslClientError(Exception):
    """The server's SASL messages make no valid exchange, or it refused (SCRAM "e=")."""


def escape_saslname(name: str) -> str:
    """RFC 5802's saslname: "=" first (so the "=" of "=2C" is not escaped again)."""
    return name.replace("=", "=3D").replace(",", "=2C")


class SaslClient(abc.ABC):
    """One exchange of one mechanism (see the module docstring)."""
    mechanism: str
    complete = False

    @abc.abstractmethod
    def initial(self) -> bytes:
        """The client's first message."""

    @abc.abstractmethod
    def step(self, server_bytes: bytes) -> Optional[bytes]:
        """The answer to a server message (None: nothing more to send)."""


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslClientError("the server's %s is not valid base64" % what) from None


def _attributes(text: str, where: str) -> list:
    """[(letter, value)] of a SCRAM message, in order."""
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 or not key.isalpha():
            raise SaslClientError("malformed SCRAM %s message from the server" % where)
        out.append((key, value))
    return out


class ScramClient(SaslClient):
    """SCRAM-SHA-256 or SCRAM-SHA-512 for `username` / `password`. `nonce` is for tests
    (default: 32 random bytes, URL-safe base64)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: Optional[str] = None, pbkdf2=None):
        code = MECHANISMS.get(mechanism)
        if code is None:
            raise ValueError("not a SCRAM mechanism: %r (%s)" % (mechanism, ", ".join(MECHANISMS)))
        if not username:
            raise ValueError("%s needs a user name" % mechanism)
        if not password:
            raise ValueError("%s needs a password" % mechanism)
        nonce = nonce if nonce is not None else secrets.token_urlsafe(32)
        if not _NONCE.fullmatch(nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self.mechanism = mechanism
        self._code = code
        self._password: Optional[str] = password
        self._nonce = nonce
        self._first_bare = "n=%s,r=%s" % (escape_saslname(username), nonce)
        self._expected_signature: Optional[bytes] = None
        self._pbkdf2 = pbkdf2             # None: hashlib's (scram.client_proof)
        self._state = 0                 # 0 initial, 1 sent first, 2 sent final, 3 done

    def __repr__(self) -> str:          # never the password
        return "<ScramClient %s state=%d>" % (self.mechanism, self._state)

    def initial(self) -> bytes:
        if self._state != 0:
            raise SaslClientError("SCRAM exchange already started")
        self._state = 1
        return (_GS2_HEADER + self._first_bare).encode("utf-8")

    def step(self, server_bytes: bytes) -> Optional[bytes]:
        state, self._state = self._state, 3     # refused for good unless a step succeeds
        try:
            text = bytes(server_bytes).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslClientError("the server's SCRAM message is not UTF-8") from None
        if state == 1:
            out = self._final(text)
            self._state = 2
            return out
        if state == 2:
            self._verify(text)
            self.complete = True
            return None
        raise SaslClientError("no SCRAM message was expected from the server now")

    def _final(self, server_first: str) -> bytes:
        attrs = _attributes(server_first, "server-first")
        if attrs[0][0] == "e":
            raise SaslClientError("the server refused the client-first message: e=%s"
                                  % attrs[0][1])
        if attrs[0][0] == "m":
            raise SaslClientError("the server sent a mandatory extension (m=)")
        if len(attrs) < 3 or [k for k, _ in attrs[:3]] != ["r", "s", "i"]:
            raise SaslClientError("malformed SCRAM server-first message (want r=, s=, i=)")
        nonce, salt_text, iterations_text = (v for _, v in attrs[:3])
        # The server's nonce must extend ours by something: else it replays our own.
        if (not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce)
                or not _NONCE.fullmatch(nonce)):
            raise SaslClientError("the server's nonce does not extend the client nonce")
        salt = _b64(salt_text, "salt")
        if not salt:
            raise SaslClientError("the server sent an empty salt")
        if not iterations_text.isdigit():
            raise SaslClientError("the server's iteration count is not a number")
        iterations = int(iterations_text)
        # Kafka's bounds for both mechanisms: fewer is a downgrade (Kafka's client refuses
        # it too); more is no Kafka server, and would stall this event loop in PBKDF2.
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslClientError("the server asks for %d iterations; accepted: %d to %d"
                                  % (iterations, MIN_ITERATIONS, MAX_ITERATIONS))
        without_proof = "c=%s,r=%s" % (_CHANNEL_BINDING, nonce)
        auth_message = ("%s,%s,%s" % (self._first_bare, server_first, without_proof)
                        ).encode("utf-8")
        password, self._password = self._password, None
        kw = {} if self._pbkdf2 is None else {"pbkdf2": self._pbkdf2}
        proof, self._expected_signature = client_proof(self._code, password, salt,
                                                       iterations, auth_message, **kw)
        return ("%s,p=%s" % (without_proof, base64.b64encode(proof).decode("ascii"))
                ).encode("ascii")

    def _verify(self, server_final: str) -> None:
        attrs = _attributes(server_final, "server-final")
        key, value = attrs[0]
        if key == "e":
            raise SaslClientError("the server refused the proof: e=%s" % value)
        if key != "v":
            raise SaslClientError("malformed SCRAM server-final message (no v=)")
        signature = _b64(value, "server signature")
        expected, self._expected_signature = self._expected_signature, None
        if expected is None or not hmac.compare_digest(signature, expected):
            raise SaslClientError("the server's signature does not match: it does not hold "
                                  "this user's SCRAM credential")


class PlainClient(SaslClient):
    """PLAIN: the password goes in clear (use it over TLS)."""
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str):
        if not username or "\0" in username:
            raise ValueError("PLAIN needs a user name without NUL")
        if not password or "\0" in password:
            raise ValueError("PLAIN needs a password without NUL")
        self._message: Optional[bytes] = ("\0%s\0%s" % (username, password)).encode("utf-8")
        self._sent = False

    def __repr__(self) -> str:
        return "<PlainClient sent=%s>" % self._sent

    def initial(self) -> bytes:
        if self._message is None or self._sent:
            raise SaslClientError("PLAIN exchange already started")
        self._sent = True
        message, self._message = self._message, None
        return message

    def step(self, server_bytes: bytes) -> Optional[bytes]:
        if not self._sent or self.complete:
            raise SaslClientError("no PLAIN message was expected from the server now")
        if server_bytes:
            raise SaslClientError("the server answered PLAIN with a challenge")
        self.complete = True
        return None


def sasl_client(mechanism: str, username: str, password: str) -> SaslClient:
    """The client of `mechanism` (one of CLIENT_MECHANISMS); ValueError for any other."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError("unsupported SASL mechanism %r (supported: %s)"
                     % (mechanism, ", ".join(CLIENT_MECHANISMS)))
