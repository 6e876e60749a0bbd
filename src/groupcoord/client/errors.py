"""Typed errors raised by the member SDK (`groupcoord.client`).

    ClientError                      base of everything the SDK raises on purpose
    ├── ConnectionClosed             the TCP connection closed (or could not be opened)
    │                                before the response arrived; also a ConnectionError
    ├── RequestTimeout               no response within the request's deadline; also a
    │                                TimeoutError. The connection stays usable: a late
    │                                response is matched by correlation id and dropped
    ├── UnsupportedApi               the server does not speak an API (or no version both
    │                                sides know); also a KeyError, as `Connection.version`
    │                                promises
    ├── CoordinatorNotFound          find_coordinator gave up (deadline passed)
    └── ResponseError                a response carried an error code; also a
        │                            `groupcoord.protocol.error_codes.KafkaError`, so
        │                            `.code` is the ErrorCode and `.retriable` is Kafka's
        └── AuthenticationFailed     SASL refused (SaslHandshake / SaslAuthenticate's code:
                                     SASL_AUTHENTICATION_FAILED 58, UNSUPPORTED_SASL_MECHANISM
                                     33, ILLEGAL_SASL_STATE 34, and the server's message), or
                                     the server failed to prove itself (SCRAM: 58). Not
                                     retried: a member's start() raises it
"""
from __future__ import annotations

from groupcoord.protocol.error_codes import ErrorCode, KafkaError, error_name

__all__ = ["ClientError", "ConnectionClosed", "RequestTimeout", "UnsupportedApi",
           "CoordinatorNotFound", "ResponseError", "AuthenticationFailed", "raise_for_error",
           "ErrorCode", "KafkaError", "error_name"]


class ClientError(Exception):
    """Base of the SDK's own errors."""


class ConnectionClosed(ClientError, ConnectionError):
    """The connection is closed (peer closed it, it was never opened, or close() was called)."""


class RequestTimeout(ClientError, TimeoutError):
    """A request got no response within its deadline."""


class UnsupportedApi(ClientError, KeyError):
    """The peer lacks an API key, or no version is known to both sides."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unsupported api"


class CoordinatorNotFound(ClientError):
    """No coordinator could be found before the deadline; `.last` holds the last cause."""

    def __init__(self, message: str, last: BaseException | None = None):
        super().__init__(message)
        self.last = last


class ResponseError(ClientError, KafkaError):
    """A response's error code, raised. `.code` (ErrorCode or int), `.message`, `.retriable`."""


class AuthenticationFailed(ResponseError):
    """SASL authentication failed. `.code` the server's error code (58 when the client
    refused the server's messages), `.message` the server's message (or why the client
    refused), `.mechanism` the SASL mechanism. Never holds a password."""

    def __init__(self, code: int, message: str | None = None, mechanism: str | None = None):
        super().__init__(code, message)
        self.mechanism = mechanism


def raise_for_error(code: int, message: str | None = None) -> None:
    """Raise ResponseError unless `code` is 0 (NONE)."""
    if code:
        raise ResponseError(code, message)
