"""The security flags of `groupcoord serve` (listeners, TLS, SASL, ACL defaults) and what
they build: the listeners and the SecurityConfig (listeners.py). Kafka's setting names are
in each help text; docs/security.md has the walk-through."""
from __future__ import annotations

import argparse

from groupcoord.security.principal import parse_principal
from groupcoord.server.listeners import (SASL_MECHANISMS, Listener, ListenerError,
                                         SecurityConfig, TlsConfig, parse_listener)

__all__ = ["add_security_args", "security_from_args", "uses_security"]


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "yes", "1", "on"):
        return True
    if t in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError("expected true or false, not %r" % text)


def add_security_args(s) -> None:
    g = s.add_argument_group(
        "security", "Listeners, TLS, SASL and ACLs (docs/security.md). Without --listener the "
        "node has one PLAINTEXT listener on --host:--port.")
    g.add_argument("--listener", action="append", default=[], metavar="PROTOCOL://HOST:PORT",
                   help="a listener (repeatable; Kafka's listeners): PLAINTEXT, SSL, "
                        "SASL_PLAINTEXT or SASL_SSL, e.g. SASL_SSL://127.0.0.1:9093. One per "
                        "protocol; port 0 picks a free one. Clients are told the addresses of "
                        "the listener they came in on. Replaces --host/--port")
    g.add_argument("--ssl-certfile", default=None, metavar="PEM",
                   help="the server certificate chain (PEM) of the SSL/SASL_SSL listeners "
                        "(Kafka's ssl.keystore.location)")
    g.add_argument("--ssl-keyfile", default=None, metavar="PEM",
                   help="its private key (PEM), if not in --ssl-certfile")
    g.add_argument("--ssl-cafile", default=None, metavar="PEM",
                   help="the CA certificates client certificates are checked against "
                        "(Kafka's ssl.truststore.location)")
    g.add_argument("--ssl-client-auth", choices=("required", "requested", "none"),
                   default="none",
                   help="client certificates (Kafka's ssl.client.auth; default %(default)s). "
                        "On an SSL listener the principal is then User:<certificate subject "
                        "as an RFC 2253 name>, else User:ANONYMOUS")
    g.add_argument("--sasl-mechanism", action="append", default=[], metavar="MECHANISM",
                   help="a SASL mechanism of the SASL listeners (repeatable; Kafka's "
                        "sasl.enabled.mechanisms): %s. Default: all three"
                        % ", ".join(SASL_MECHANISMS))
    g.add_argument("--super-user", action="append", default=[], metavar="User:NAME",
                   help="a principal allowed everything whatever the ACLs say (repeatable; "
                        "Kafka's super.users)")
    g.add_argument("--allow-if-no-acl", type=_bool, default=True, metavar="true|false",
                   help="allow a request when no ACL at all binds its resource (Kafka's "
                        "allow.everyone.if.no.acl.found). Default true, so a node without "
                        "ACLs serves everybody as before; secured deployments give false")
    g.add_argument("--connections-max-reauth-ms", type=int, default=0, metavar="MS",
                   help="SASL sessions last this long; a client must re-authenticate on the "
                        "same connection before (KIP-368) or is disconnected (Kafka's "
                        "connections.max.reauth.ms; default 0: no limit)")
    g.add_argument("--failed-authentication-delay-ms", type=int, default=100, metavar="MS",
                   help="a failed SASL authentication is answered and the connection closed "
                        "after this delay (Kafka's connection.failed.authentication.delay.ms; "
                        "default %(default)s)")


def uses_security(args) -> bool:
    """Any security flag given (not the defaults)."""
    return bool(args.listener or args.ssl_certfile or args.sasl_mechanism or args.super_user
                or not args.allow_if_no_acl or args.connections_max_reauth_ms)


def security_from_args(args) -> tuple:
    """-> (listeners tuple, SecurityConfig); ListenerError with the reason otherwise."""
    listeners = tuple(parse_listener(x) for x in args.listener)
    protos = [lst.protocol for lst in listeners]
    dup = sorted({p for p in protos if protos.count(p) > 1})
    if dup:
        raise ListenerError("one listener per security protocol (the listener name is the "
                            "protocol): %s given more than once" % ", ".join(dup))
    if args.advertised_host:
        listeners = tuple(Listener(lst.protocol, lst.host, lst.port, args.advertised_host)
                          for lst in listeners)
    mechs = []
    for mech in args.sasl_mechanism:
        mu = mech.upper()
        if mu not in SASL_MECHANISMS:
            raise ListenerError("unknown SASL mechanism %r (one of %s)"
                                % (mech, ", ".join(SASL_MECHANISMS)))
        if mu not in mechs:
            mechs.append(mu)
    for p in args.super_user:
        try:
            parse_principal(p)
        except ValueError as e:
            raise ListenerError("--super-user %r: %s" % (p, e)) from None
    if args.connections_max_reauth_ms < 0 or args.failed_authentication_delay_ms < 0:
        raise ListenerError("--connections-max-reauth-ms and --failed-authentication-delay-ms "
                            "must be >= 0")
    tls = None
    if any(lst.tls for lst in listeners):
        if not args.ssl_certfile:
            raise ListenerError("an SSL or SASL_SSL listener needs --ssl-certfile (and "
                                "--ssl-keyfile unless the key is in it)")
        tls = TlsConfig(args.ssl_certfile, args.ssl_keyfile, args.ssl_cafile,
                        args.ssl_client_auth)
    elif args.ssl_certfile:
        raise ListenerError("--ssl-certfile given but no SSL or SASL_SSL --listener")
    if args.ssl_client_auth != "none" and tls is None:
        raise ListenerError("--ssl-client-auth needs an SSL or SASL_SSL --listener")
    cfg = SecurityConfig(sasl_mechanisms=tuple(mechs) or SASL_MECHANISMS,
                         super_users=tuple(args.super_user),
                         allow_if_no_acl=args.allow_if_no_acl,
                         reauth_ms=args.connections_max_reauth_ms, tls=tls,
                         failed_auth_delay_ms=args.failed_authentication_delay_ms)
    return listeners, cfg
