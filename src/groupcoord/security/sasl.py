"""One connection's SASL state: what SaslHandshake (17) and SaslAuthenticate (36) answer, as
Kafka's SaslServerAuthenticator (and KafkaApis, once authenticated) answer them, with
re-authentication (KIP-368, ``connections.max.reauth.ms``).

    handshake ──SaslHandshake(enabled mechanism)──> authenticate ──last step ok──> done
        │                                              │ refused                    │
        └── unknown mechanism (33) ──> failed <────────┘ (58)                      │
                                          ^          SaslHandshake, reauth_ms > 0 ─┘
                                          └── re-authentication as another user (58)

Answers, and whether the session fails (``failed``: the caller closes the connection, as
Kafka does; every later step is refused with ILLEGAL_SASL_STATE):
  SaslHandshake  not an enabled mechanism             33, fails
                 during an exchange                   34, fails
                 after success, reauth_ms == 0 or a
                 re-authentication began < 1 s ago    34, stays authenticated (KafkaApis)
                 after success otherwise              0: a re-authentication; a mechanism
                                                      other than the first one is accepted
                                                      here and refused (58) at the next
                                                      SaslAuthenticate, as Kafka does
  SaslAuthenticate  before a handshake                34, fails
                 after success                        34, stays authenticated (KafkaApis)
                 credentials refused                  58, fails; the message is Kafka's
                 (for SCRAM the reply carries RFC 5802's "e=<error>"; clients ignore it)

A completed exchange sets ``principal`` ("User:<name>") and ``session_lifetime_ms``
(= reauth_ms when > 0, else 0: no expiry). ``expired(now)`` says whether the authenticated
session has outlived it; the caller closes such a connection, as Kafka does.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional, Sequence

from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.security.principal import USER_TYPE
from groupcoord.security.scram import MECHANISMS, AuthFailed, Lookup, PlainServer, ScramServer

__all__ = ["SaslSession", "SaslStep", "SUPPORTED_MECHANISMS"]

SUPPORTED_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
MIN_REAUTH_INTERVAL_S = 1.0     # Kafka: at most one re-authentication start per second

_NONE = int(ErrorCode.NONE)
_UNSUPPORTED = int(ErrorCode.UNSUPPORTED_SASL_MECHANISM)    # 33
_ILLEGAL_STATE = int(ErrorCode.ILLEGAL_SASL_STATE)          # 34
_AUTH_FAILED = int(ErrorCode.SASL_AUTHENTICATION_FAILED)    # 58

_HANDSHAKE, _AUTHENTICATE, _DONE, _FAILED = "handshake", "authenticate", "done", "failed"


class SaslStep(NamedTuple):
    """What one SaslAuthenticate answers."""
    error_code: int
    error_message: Optional[str]
    reply: bytes                    # auth_bytes of the response
    done: bool                      # the exchange completed successfully with this step
    session_lifetime_ms: int        # on the completing step; 0 otherwise or without expiry


class SaslSession:
    """The SASL state of one connection. ``enabled``: the mechanisms offered (a subset of
    SUPPORTED_MECHANISMS, in the order the handshake response lists them); ``lookup(user,
    mechanism)``: the stored ScramCredential or None; ``reauth_ms``: connections.max.reauth.ms
    (0: sessions never expire and re-authentication is not offered); ``now``: a clock in
    seconds (time.monotonic).

    Also readable, for the caller's log: ``mechanism`` (of the last handshake), ``failed``,
    ``failure_reason`` (why, never a secret), ``attempted_user`` (the user name the client
    claimed, None before it parsed)."""

    def __init__(self, enabled: Sequence[str], lookup: Lookup, *, reauth_ms: int = 0,
                 now: Callable[[], float] = time.monotonic):
        names = list(dict.fromkeys(enabled))
        if not names:
            raise ValueError("No SASL mechanisms are enabled")
        unknown = [n for n in names if n not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError("unsupported SASL mechanism(s) %s; supported: %s"
                             % (", ".join(unknown), ", ".join(SUPPORTED_MECHANISMS)))
        if reauth_ms < 0:
            raise ValueError("reauth_ms must be >= 0")
        self.enabled = names
        self.reauth_ms = int(reauth_ms)
        self._lookup = lookup
        self._now = now
        self.principal: Optional[str] = None
        self.session_lifetime_ms = 0
        self.mechanism: Optional[str] = None
        self.failed = False
        self.failure_reason: Optional[str] = None
        self.attempted_user: Optional[str] = None
        self._state = _HANDSHAKE
        self._exchange = None
        self._reauth = False                # the exchange under way re-authenticates
        self._bad_reauth: Optional[str] = None
        self._expires_at: Optional[float] = None
        self._reauth_started: Optional[float] = None

    @property
    def authenticating(self) -> bool:
        """An exchange (first or re-authentication) is under way."""
        return self._state == _AUTHENTICATE

    def expired(self, now: Optional[float] = None) -> bool:
        """Whether the authenticated session has outlived its lifetime (never when
        reauth_ms is 0). ``now`` on the session's clock, read when not given."""
        if self.principal is None or self._expires_at is None:
            return False
        return (self._now() if now is None else now) > self._expires_at

    # ------------------------------------------------------------------ handshake
    def handshake(self, mechanism: str) -> tuple[int, list[str]]:
        enabled = list(self.enabled)
        state = self._state
        if state == _FAILED:
            return _ILLEGAL_STATE, enabled
        if state == _AUTHENTICATE:
            self._fail("SaslHandshake during an exchange")
            return _ILLEGAL_STATE, enabled
        if state == _DONE:
            now = self._now()
            if self._expires_at is None or (self._reauth_started is not None and
                                            now - self._reauth_started < MIN_REAUTH_INTERVAL_S):
                return _ILLEGAL_STATE, enabled      # KafkaApis' answer; still authenticated
            if mechanism not in self.enabled:
                self._fail("re-authentication with an unsupported mechanism")
                return _UNSUPPORTED, enabled
            self._reauth_started = now
            self._reauth = True
            self._state = _AUTHENTICATE
            if mechanism != self.mechanism:
                self._exchange = None
                self._bad_reauth = (
                    "SASL mechanism '%s' requested by client is not supported for "
                    "re-authentication of mechanism '%s'" % (mechanism, self.mechanism))
                return _NONE, enabled
            self._exchange = self._new_exchange(mechanism)
            return _NONE, enabled
        if mechanism not in self.enabled:
            self._fail("unsupported SASL mechanism requested")
            return _UNSUPPORTED, enabled
        self.mechanism = mechanism
        self._exchange = self._new_exchange(mechanism)
        self._state = _AUTHENTICATE
        return _NONE, enabled

    def _new_exchange(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainServer(self._lookup)
        return ScramServer(MECHANISMS[mechanism], self._lookup)

    # --------------------------------------------------------------- authenticate
    def authenticate(self, auth_bytes: bytes) -> SaslStep:
        state = self._state
        if state == _FAILED:
            return SaslStep(_ILLEGAL_STATE, "SASL authentication already failed on this "
                            "connection", b"", False, 0)
        if state == _HANDSHAKE:
            self._fail("SaslAuthenticate before SaslHandshake")
            return SaslStep(_ILLEGAL_STATE, "Unexpected Kafka request of type "
                            "SASL_AUTHENTICATE during SASL handshake.", b"", False, 0)
        if state == _DONE:
            return SaslStep(_ILLEGAL_STATE, "SaslAuthenticate request received after "
                            "successful authentication", b"", False, 0)
        if self._bad_reauth is not None:
            message = self._bad_reauth
            self._fail("re-authentication with another mechanism")
            return SaslStep(_AUTH_FAILED, message, b"", False, 0)
        exchange = self._exchange
        try:
            reply, complete = exchange.step(b"" if auth_bytes is None else auth_bytes)
        except AuthFailed as e:
            self.attempted_user = exchange.username
            self._fail(e.reason)
            message = e.client_message or (
                "Authentication failed during %s due to invalid credentials with SASL "
                "mechanism %s" % ("re-authentication" if self._reauth else "authentication",
                                  exchange.name))
            reply = b"e=" + e.rfc_error.encode("ascii") if e.rfc_error else b""
            return SaslStep(_AUTH_FAILED, message, reply, False, 0)
        self.attempted_user = exchange.username
        if not complete:
            return SaslStep(_NONE, None, reply, False, 0)
        principal = "%s:%s" % (USER_TYPE, exchange.username)
        if self._reauth and principal != self.principal:
            message = "Cannot change principals during re-authentication from %s.%s: %s.%s" % (
                USER_TYPE, self.principal.partition(":")[2], USER_TYPE, exchange.username)
            self._fail("re-authentication as another user")
            return SaslStep(_AUTH_FAILED, message, b"", False, 0)
        self.principal = principal
        self._state = _DONE
        self._exchange = None
        self._reauth = False
        lifetime = self.reauth_ms
        self.session_lifetime_ms = lifetime
        self._expires_at = self._now() + lifetime / 1000.0 if lifetime > 0 else None
        return SaslStep(_NONE, None, reply, True, lifetime)

    def _fail(self, reason: str) -> None:
        self._state = _FAILED
        self.failed = True
        self.failure_reason = reason
        self.principal = None
        self._exchange = None
