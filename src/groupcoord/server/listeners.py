"""Listeners and their security: what `serve --listener PROTOCOL://HOST:PORT` means.

    PLAINTEXT       TCP; every client is User:ANONYMOUS
    SSL             TLS; the principal is User:<certificate subject> when the client sent a
                    certificate (--ssl-client-auth required|requested), else User:ANONYMOUS
    SASL_PLAINTEXT  TCP, then SASL (SaslHandshake + SaslAuthenticate) before any other request
    SASL_SSL        TLS, then SASL; the principal is the SASL user

As in Kafka, the listener name is its security protocol (so one listener per protocol), and
Metadata / FindCoordinator give a client the addresses of the listener it came in on.
Nothing here touches the event loop; server.py binds the sockets.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["Listener", "TlsConfig", "SecurityConfig", "parse_listener", "server_ssl_context",
           "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "ListenerError"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
CLIENT_AUTH = ("none", "requested", "required")


class ListenerError(ValueError):
    """A listener spec or TLS setting that cannot be used (the message says why)."""


@dataclass(frozen=True)
class Listener:
    protocol: str                      # one of SECURITY_PROTOCOLS; also the listener name
    host: str
    port: int
    advertised_host: Optional[str] = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (self.protocol, host, self.port)


def parse_listener(spec: str) -> Listener:
    """'SASL_SSL://127.0.0.1:9093' -> Listener; '[::1]:9093' for IPv6; an empty host
    listens on every interface (as Kafka)."""
    proto, sep, rest = spec.partition("://")
    if not sep:
        raise ListenerError("listener %r: expected PROTOCOL://HOST:PORT (e.g. "
                            "SASL_SSL://127.0.0.1:9093)" % spec)
    proto = proto.upper()
    if proto not in SECURITY_PROTOCOLS:
        raise ListenerError("listener %r: unknown security protocol %r (one of %s)"
                            % (spec, proto, ", ".join(SECURITY_PROTOCOLS)))
    if rest.startswith("["):
        host, sep, port = rest[1:].partition("]:")
    else:
        host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError("listener %r: expected a port 0..65535 after the host" % spec)
    return Listener(proto, host or "0.0.0.0", int(port))


@dataclass(frozen=True)
class TlsConfig:
    certfile: str
    keyfile: Optional[str] = None
    cafile: Optional[str] = None           # the CAs client certificates are checked against
    client_auth: str = "none"              # Kafka's ssl.client.auth
    password: Optional[str] = None         # of an encrypted key file


def server_ssl_context(cfg: TlsConfig) -> ssl.SSLContext:
    """The server side of every TLS listener: TLS 1.2+, client certificates per client_auth
    (checked against cafile, or the system's CAs when none is given)."""
    if cfg.client_auth not in CLIENT_AUTH:
        raise ListenerError("--ssl-client-auth must be one of %s" % ", ".join(CLIENT_AUTH))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.certfile, cfg.keyfile, password=cfg.password)
    except (OSError, ssl.SSLError) as e:
        raise ListenerError("cannot load the certificate %s%s: %s"
                            % (cfg.certfile, " / key %s" % cfg.keyfile if cfg.keyfile else "",
                               e)) from None
    if cfg.client_auth != "none":
        try:
            if cfg.cafile:
                ctx.load_verify_locations(cafile=cfg.cafile)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ssl.SSLError) as e:
            raise ListenerError("cannot load the CA file %s: %s" % (cfg.cafile, e)) from None
        ctx.verify_mode = (ssl.CERT_REQUIRED if cfg.client_auth == "required"
                           else ssl.CERT_OPTIONAL)
    return ctx


@dataclass(frozen=True)
class SecurityConfig:
    """What `serve` was given about security (main.py builds it from the flags)."""
    sasl_mechanisms: Sequence[str] = SASL_MECHANISMS
    super_users: Sequence[str] = ()
    # Kafka's allow.everyone.if.no.acl.found. True by default here, unlike Kafka's
    # authorizer (false): a node without ACLs keeps serving everybody, as it did before
    # security existed and as Kafka does without an authorizer (docs/security.md).
    allow_if_no_acl: bool = True
    reauth_ms: int = 0                     # Kafka's connections.max.reauth.ms (0: never)
    tls: Optional[TlsConfig] = None
    # A failed SASL exchange is answered this much later (Kafka's
    # connection.failed.authentication.delay.ms), then the connection closes.
    failed_auth_delay_ms: int = 100
