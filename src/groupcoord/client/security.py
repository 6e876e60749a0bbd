"""How the SDK secures a connection: TLS, SASL (SCRAM-SHA-256/512, PLAIN), or both, as a
Kafka client does (security.protocol PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL).

    sec = ClientSecurity("SASL_SSL", ssl_cafile="ca.pem", sasl_mechanism="SCRAM-SHA-512",
                         sasl_username="alice", sasl_password="...")
    sec = ClientSecurity.from_properties(load_properties("client.properties"))
    conn = await Connection.open(host, port, security=sec)
    member = ConsumerMember(bootstrap, "g", topics=["t"], security=sec)

Properties (`from_properties`): the Kafka client names, Java's and librdkafka's, so one
client.properties serves kafka-consumer-groups, a librdkafka client and this SDK. Keys not
listed are ignored (such files hold other clients' settings too).

    security.protocol                     PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL (any case)
    sasl.mechanism (sasl.mechanisms)      SCRAM-SHA-512 | SCRAM-SHA-256 | PLAIN
    sasl.username, sasl.password          librdkafka
    sasl.jaas.config                      Java: `...ScramLoginModule required username="u"
                                          password="p";` (or PlainLoginModule); sasl.username /
                                          sasl.password win when both are given
    ssl.ca.location                       librdkafka: the CAs (PEM) the server is checked with
    ssl.truststore.location               Java: the same, when it is a PEM file
    ssl.certificate.location, ssl.key.location   librdkafka: the client certificate and key
    ssl.keystore.location                 Java: a PEM file holding the key and the chain
    ssl.key.password                      the client key's password, if it is encrypted
    ssl.endpoint.identification.algorithm "https" (default) checks the server's name; "" or
                                          "none" does not (the certificate is still verified)

Without a CA file the system's CAs are used. TLS is 1.2 or later. A SASL protocol without a
mechanism, user name or password is a ValueError naming the missing property (Kafka's
default mechanism, GSSAPI, is not supported). The password is never printed: repr() masks it.

`load_properties(path)` reads Java's .properties syntax (groupcoord/properties.py, shared
with the server's --config; re-exported here): `key=value`, `key: value` or `key value`; lines
starting with # or ! are comments; a line ending in an odd number of backslashes continues on
the next (its leading blanks dropped); escapes \\t \\n \\r \\f \\uXXXX, and a backslash
before any other character stands for that character. The file is read as UTF-8 (Java's
Properties.load reads ISO-8859-1: the same for ASCII and \\u escapes).
"""
from __future__ import annotations

import dataclasses
import re
import ssl
from dataclasses import dataclass
from typing import Mapping, Optional

from groupcoord.properties import load_properties, parse_properties  # noqa: F401 (re-export)
from groupcoord.security.scram_client import CLIENT_MECHANISMS

__all__ = ["ClientSecurity", "load_properties", "parse_properties", "parse_jaas_config",
           "PROTOCOLS", "SASL_MECHANISMS"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = CLIENT_MECHANISMS
_LOGIN_MODULES = ("org.apache.kafka.common.security.scram.ScramLoginModule",
                  "org.apache.kafka.common.security.plain.PlainLoginModule")
_MASK = "********"


@dataclass(frozen=True)
class ClientSecurity:
    """What a connection does before its first request: TLS (SSL, SASL_SSL) and SASL
    (SASL_PLAINTEXT, SASL_SSL). Checked when made: ValueError on an unknown protocol or
    mechanism, or a missing user name or password for SASL."""
    protocol: str = "PLAINTEXT"
    ssl_cafile: Optional[str] = None
    ssl_certfile: Optional[str] = None
    ssl_keyfile: Optional[str] = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Optional[str] = None
    sasl_username: Optional[str] = None
    sasl_password: Optional[str] = dataclasses.field(default=None, repr=False)
    ssl_key_password: Optional[str] = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        protocol = str(self.protocol).upper()
        if protocol not in PROTOCOLS:
            raise ValueError("security.protocol %r is not one of %s"
                             % (self.protocol, ", ".join(PROTOCOLS)))
        object.__setattr__(self, "protocol", protocol)
        if self.uses_sasl:
            mech = self.sasl_mechanism
            if not mech:
                raise ValueError("%s needs sasl.mechanism (one of %s; Kafka's default GSSAPI "
                                 "is not supported)" % (protocol, ", ".join(SASL_MECHANISMS)))
            mech = mech.upper()
            if mech not in SASL_MECHANISMS:
                raise ValueError("sasl.mechanism %r is not supported (one of %s)"
                                 % (self.sasl_mechanism, ", ".join(SASL_MECHANISMS)))
            object.__setattr__(self, "sasl_mechanism", mech)
            if not self.sasl_username:
                raise ValueError("%s with %s needs a user name (sasl.username, or username=\"...\""
                                 " in sasl.jaas.config)" % (protocol, mech))
            if not self.sasl_password:
                raise ValueError("%s with %s needs a password for user %r (sasl.password, or "
                                 "password=\"...\" in sasl.jaas.config)"
                                 % (protocol, mech, self.sasl_username))
        if self.uses_ssl and self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("a client key (ssl.key.location) needs its certificate "
                             "(ssl.certificate.location)")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        shown = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            shown.append("%s=%s" % (f.name, _MASK if not f.repr else repr(v)))
        return "ClientSecurity(%s)" % ", ".join(shown)

    __str__ = __repr__

    def ssl_context(self) -> Optional[ssl.SSLContext]:
        """The TLS context of SSL / SASL_SSL (None otherwise), made on first use and kept:
        every connection shares it, so the CA and key files are read once (make a new
        ClientSecurity to pick up renewed files). ValueError when a file cannot be used."""
        if not self.uses_ssl:
            return None
        ctx = self.__dict__.get("_ssl_context")
        if ctx is None:
            ctx = self._make_context()
            object.__setattr__(self, "_ssl_context", ctx)
        return ctx

    def _make_context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        except (OSError, ssl.SSLError) as e:
            raise ValueError("cannot load the CA file %r: %s" % (self.ssl_cafile, e)) from None
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = bool(self.ssl_check_hostname)   # the certificate is verified anyway
        if self.ssl_certfile:
            try:
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile,
                                    password=self.ssl_key_password)
            except (OSError, ssl.SSLError) as e:
                raise ValueError("cannot load the client certificate %r / key %r: %s"
                                 % (self.ssl_certfile, self.ssl_keyfile, e)) from None
        return ctx

    # ------------------------------------------------------------------ properties
    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "ClientSecurity":
        """From Kafka client properties (module docstring); unknown keys are ignored."""
        def get(*names: str) -> Optional[str]:
            for n in names:
                v = props.get(n)
                if v is not None and v.strip() != "":
                    return v.strip()
            return None

        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        kw: dict = {"protocol": protocol}
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            kw["sasl_mechanism"] = get("sasl.mechanism", "sasl.mechanisms")
            user = props.get("sasl.username") or None
            password = props.get("sasl.password") or None
            jaas = get("sasl.jaas.config")
            if jaas is not None and (user is None or password is None):
                module, options = parse_jaas_config(jaas)
                if module not in _LOGIN_MODULES:
                    raise ValueError("sasl.jaas.config: login module %r is not supported "
                                     "(ScramLoginModule or PlainLoginModule)" % module)
                user = user or options.get("username") or None
                password = password or options.get("password") or None
            kw["sasl_username"] = user
            kw["sasl_password"] = password
        if protocol in ("SSL", "SASL_SSL"):
            kw["ssl_cafile"] = get("ssl.ca.location") or _pem_store(
                props, "ssl.truststore.location", "ssl.truststore.type")
            cert = get("ssl.certificate.location")
            key = get("ssl.key.location")
            if cert is None and key is None:
                # A PEM keystore holds the key and the chain: load_cert_chain reads both.
                cert = _pem_store(props, "ssl.keystore.location", "ssl.keystore.type")
            kw["ssl_certfile"], kw["ssl_keyfile"] = cert, key
            kw["ssl_key_password"] = props.get("ssl.key.password") or None
            algorithm = props.get("ssl.endpoint.identification.algorithm")
            if algorithm is not None:
                algorithm = algorithm.strip().lower()
                if algorithm not in ("", "none", "https"):
                    raise ValueError("ssl.endpoint.identification.algorithm %r: give https, "
                                     "none or an empty value" % algorithm)
                kw["ssl_check_hostname"] = algorithm == "https"
        return cls(**kw)


def _pem_store(props: Mapping[str, str], location_key: str, type_key: str) -> Optional[str]:
    """A Java trust/key store path, accepted when it is PEM (JKS and PKCS12 are not read)."""
    path = (props.get(location_key) or "").strip()
    if not path:
        return None
    kind = (props.get(type_key) or "").strip().upper()
    if kind and kind != "PEM":
        raise ValueError("%s=%s is not supported (only PEM files; convert it with keytool / "
                         "openssl)" % (type_key, kind))
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise ValueError("%s: cannot read %r: %s" % (location_key, path, e.strerror)) from None
    if b"-----BEGIN " not in head:
        raise ValueError("%s: %r is not a PEM file (JKS and PKCS12 stores are not supported; "
                         "set %s=PEM with a PEM file)" % (location_key, path, type_key))
    return path


# ---------------------------------------------------------------------- sasl.jaas.config
_JAAS_TOKEN = re.compile(r'\s*(?:(;)|"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=))', re.S)


def parse_jaas_config(text: str) -> tuple[str, dict]:
    """`LoginModuleClass controlFlag key=value ... ;` -> (class, {key: value}). Values are
    quoted strings (with backslash escapes) or bare words. One login module, as Kafka's
    sasl.jaas.config takes. ValueError on anything else (the message never holds a value)."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise ValueError("sasl.jaas.config: cannot parse it at character %d" % pos)
        pos = m.end()
        if m.group(1):
            tokens.append((";", None))
        elif m.group(2) is not None:
            tokens.append(("value", _unescape_quoted(m.group(2))))
        elif m.group(3) is not None:
            tokens.append(("word", m.group(3)))
        else:
            tokens.append(("=", None))
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise ValueError("sasl.jaas.config: want `LoginModule required key=\"value\" ... ;`")
    module, flag = tokens[0][1], tokens[1][1]
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError("sasl.jaas.config: %r is not a control flag (required, requisite, "
                         "sufficient, optional)" % flag)
    options: dict = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "value")):
            raise ValueError("sasl.jaas.config: options are key=value or key=\"value\"")
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
    if i >= len(tokens):
        raise ValueError("sasl.jaas.config: the login module must end with ';'")
    if i + 1 != len(tokens):
        raise ValueError("sasl.jaas.config: one login module only")
    return module, options


def _unescape_quoted(s: str) -> str:
    # Java's StreamTokenizer inside quotes: \" \\ \n \t \r \b \f and any other char as itself.
    table = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), s, flags=re.S)
