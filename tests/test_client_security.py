"""The SDK's side of issue 20: client/security.py (ClientSecurity, Kafka client properties),
security/scram_client.py (our SCRAM-SHA-256/512 and PLAIN client), Connection.open with TLS
and SASL, the members' `security=` and `groupcoord groups --command-config`.

Unit (marked unit): the properties syntax and the Kafka names (librdkafka's and Java's, with
sasl.jaas.config), missing values, the masked repr, the TLS context; the SCRAM client against
our own server side (security/scram.py ScramServer / PlainServer) for both mechanisms, user
names that need escaping, a server whose signature is wrong, and other bad server messages.

Integration: one real `groupcoord serve` with SASL_SSL, SSL and SASL_PLAINTEXT listeners
(tests/test_security_e2e.py's start_node: users made offline with `groupcoord users set`,
certificates from tests/tls_certs.py). A ConsumerMember joins, commits and reads back over
SASL_SSL with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, over SASL_PLAINTEXT, and over SSL with
a client certificate; a ClassicMember (SASL_SSL) and a ConnectWorker (SSL) get their work; a
wrong password is AuthenticationFailed (58) from Connection.open and from a member's start();
TLS failures are ConnectionClosed naming the reason; the groups CLI lists and describes over
SASL_SSL with --command-config. Every wait is bounded.
"""
import asyncio
import base64
import hmac
import os
import ssl
import sys

import pytest

from groupcoord.client import (AuthenticationFailed, ClassicMember, ConnectionClosed,
                               ConnectWorker, ConsumerMember, CoordinatorLink, TopicPartition)
from groupcoord.client.connection import Connection
from groupcoord.client.security import (ClientSecurity, load_properties, parse_jaas_config,
                                        parse_properties)
from groupcoord.protocol import FindCoordinatorRequest
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.security.scram import (MECHANISMS, AuthFailed, PlainServer, ScramServer,
                                       make_credential)
from groupcoord.security.scram_client import (PlainClient, SaslClientError, ScramClient,
                                              escape_saslname, sasl_client)
from serve_proc import package_root
from test_security_e2e import PASSWORDS, start_node, stop_node
from tls_certs import Pki
from waiting import until

SCRAMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
unit = pytest.mark.unit


# ============================================================================ properties
@unit
def test_properties_syntax():
    text = ("# a comment\n"
            "! another comment\n"
            "\n"
            "   plain=value with spaces  \n"
            "colon: v2\n"
            "space   v3\n"
            "empty=\n"
            "cont=first,\\\n"
            "      second,\\\n"
            "# not a comment: continued\n"
            "escaped.backslash=ends\\\\\n"
            "next=after\n"
            "esc\\=key\\:x=tab\\there\\nnl\\u0041\\q\n"
            "dup=1\r\n"
            "dup=2\r"
            "last=cont\\")
    assert parse_properties(text) == {
        "plain": "value with spaces  ", "colon": "v2", "space": "v3", "empty": "",
        "cont": "first,second,# not a comment: continued",
        "escaped.backslash": "ends\\", "next": "after",
        "esc=key:x": "tab\there\nnlAq", "dup": "2", "last": "cont"}
    with pytest.raises(ValueError, match="uxxxx"):
        parse_properties("k=\\u12G4")


@unit
def test_load_properties_reads_a_file(tmp_path):
    p = tmp_path / "client.properties"
    p.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                 "sasl.username=ünïcode\nsasl.password=p\\u00e4ss\n", encoding="utf-8")
    props = load_properties(str(p))
    assert props["sasl.username"] == "ünïcode" and props["sasl.password"] == "päss"
    with pytest.raises(OSError):
        load_properties(str(tmp_path / "missing.properties"))


@unit
def test_from_properties_librdkafka_names(tmp_path):
    pki = Pki(tmp_path)
    cli = pki.client("alice")
    sec = ClientSecurity.from_properties({
        "bootstrap.servers": "h:1", "group.id": "g", "enable.auto.commit": "false",  # ignored
        "security.protocol": "sasl_ssl", "sasl.mechanisms": "scram-sha-256",
        "sasl.username": "alice", "sasl.password": "secret",
        "ssl.ca.location": pki.ca_pem, "ssl.certificate.location": cli.cert,
        "ssl.key.location": cli.key, "ssl.endpoint.identification.algorithm": "none"})
    assert sec == ClientSecurity("SASL_SSL", ssl_cafile=pki.ca_pem, ssl_certfile=cli.cert,
                                 ssl_keyfile=cli.key, ssl_check_hostname=False,
                                 sasl_mechanism="SCRAM-SHA-256", sasl_username="alice",
                                 sasl_password="secret")
    assert sec.uses_ssl and sec.uses_sasl
    assert ClientSecurity.from_properties({}) == ClientSecurity("PLAINTEXT")
    # Settings of a protocol not in use are ignored, as Kafka's clients do.
    plain = ClientSecurity.from_properties({"security.protocol": "PLAINTEXT",
                                            "sasl.mechanism": "GSSAPI",
                                            "ssl.truststore.type": "JKS"})
    assert plain.protocol == "PLAINTEXT" and plain.ssl_context() is None


@unit
def test_from_properties_java_names_and_jaas_config(tmp_path):
    pki = Pki(tmp_path)
    cli = pki.client("bob")
    keystore = tmp_path / "keystore.pem"             # Java's PEM keystore: key + chain
    keystore.write_bytes(open(cli.key, "rb").read() + open(cli.cert, "rb").read())
    props = parse_properties(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        "    username=\"bob\" \\\n"
        "    password=\"p\\\\\"w=;d\" tokenauth=false;\n"
        "ssl.truststore.location=%s\n"
        "ssl.keystore.type=PEM\n"
        "ssl.keystore.location=%s\n"
        "ssl.endpoint.identification.algorithm=\n" % (pki.ca_pem, keystore))
    sec = ClientSecurity.from_properties(props)
    assert (sec.sasl_username, sec.sasl_password) == ("bob", 'p"w=;d')
    assert sec.ssl_cafile == pki.ca_pem and sec.ssl_certfile == str(keystore)
    assert sec.ssl_keyfile is None and sec.ssl_check_hostname is False
    ctx = sec.ssl_context()                           # the key is read from the keystore
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname

    plain = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                            "required username=carol password=\"c-pw\";"})
    assert (plain.sasl_username, plain.sasl_password) == ("carol", "c-pw")
    # librdkafka's names win over the JAAS options when both are given.
    both = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "dave", "sasl.password": "d-pw",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                            'required username="x" password="y";'})
    assert (both.sasl_username, both.sasl_password) == ("dave", "d-pw")


@unit
def test_jaas_config_parser():
    assert parse_jaas_config('a.B required k="v 1" x=y ;') == ("a.B", {"k": "v 1", "x": "y"})
    assert parse_jaas_config('M optional k="tab\\tq\\"";') == ("M", {"k": 'tab\tq"'})
    for bad, why in (('M required k="v"', "end with"),
                     ('M maybe k="v";', "control flag"),
                     ('M required k;', "key=value"),
                     ('M required k="v"; N required;', "one login module"),
                     ('M required k="unterminated;', "cannot parse")):
        with pytest.raises(ValueError, match=why):
            parse_jaas_config(bad)


@unit
def test_missing_and_unsupported_values_are_clear_errors(tmp_path):
    sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    with pytest.raises(ValueError, match="needs a user name.*sasl.username"):
        ClientSecurity.from_properties(dict(sasl, **{"sasl.password": "x"}))
    with pytest.raises(ValueError, match="needs a password for user 'u'.*sasl.password"):
        ClientSecurity.from_properties(dict(sasl, **{"sasl.username": "u"}))
    with pytest.raises(ValueError, match="needs sasl.mechanism"):
        ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT",
                                        "sasl.username": "u", "sasl.password": "p"})
    with pytest.raises(ValueError, match="GSSAPI' is not supported"):
        ClientSecurity("SASL_SSL", sasl_mechanism="GSSAPI", sasl_username="u",
                       sasl_password="p")
    with pytest.raises(ValueError, match="security.protocol 'TLS'"):
        ClientSecurity.from_properties({"security.protocol": "TLS"})
    with pytest.raises(ValueError, match="login module .*Krb5LoginModule"):
        ClientSecurity.from_properties(dict(sasl, **{
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}))
    with pytest.raises(ValueError, match="identification.algorithm 'ldap'"):
        ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.endpoint.identification.algorithm": "ldap"})
    with pytest.raises(ValueError, match="ssl.truststore.type=JKS is not supported"):
        ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": "/x.jks",
                                        "ssl.truststore.type": "JKS"})
    binary = tmp_path / "store.p12"
    binary.write_bytes(b"\x30\x82\x01\x00 not pem")
    with pytest.raises(ValueError, match="is not a PEM file"):
        ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": str(binary)})
    with pytest.raises(ValueError, match="cannot read"):
        ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": str(tmp_path / "none")})
    with pytest.raises(ValueError, match="needs its certificate"):
        ClientSecurity("SSL", ssl_keyfile="k.pem")
    with pytest.raises(ValueError, match="cannot load the CA file"):
        ClientSecurity("SSL", ssl_cafile=str(tmp_path / "none.pem")).ssl_context()


@unit
def test_repr_and_errors_never_show_the_password():
    sec = ClientSecurity("SASL_SSL", sasl_mechanism="PLAIN", sasl_username="alice",
                         sasl_password="hunter2-secret", ssl_key_password="key-secret")
    for text in (repr(sec), str(sec), "%s" % (sec,), repr([sec])):
        assert "hunter2-secret" not in text and "key-secret" not in text
        assert "sasl_password=********" in text and "sasl_username='alice'" in text
    client = ScramClient("SCRAM-SHA-256", "alice", "hunter2-secret")
    assert "hunter2-secret" not in repr(client)
    assert "hunter2-secret" not in repr(PlainClient("alice", "hunter2-secret"))
    with pytest.raises(ValueError) as e:      # the user name is named, the password never
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL",
                                        "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                                        'org.apache.kafka.common.security.plain.PlainLoginModule'
                                        ' required password="hunter2-secret" username=;'})
    assert "hunter2-secret" not in str(e.value)


@unit
def test_ssl_context_is_verified_tls12_and_shared(tmp_path):
    pki = Pki(tmp_path)
    cli = pki.client("alice")
    sec = ClientSecurity("SSL", ssl_cafile=pki.ca_pem, ssl_certfile=cli.cert,
                         ssl_keyfile=cli.key)
    ctx = sec.ssl_context()
    assert ctx is sec.ssl_context()           # made once, shared by every connection
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ClientSecurity("SSL").ssl_context().verify_mode == ssl.CERT_REQUIRED  # system CAs
    other = Pki(tmp_path / "other").client("x")
    with pytest.raises(ValueError, match="cannot load the client certificate"):
        ClientSecurity("SSL", ssl_certfile=cli.cert, ssl_keyfile=other.key).ssl_context()


# ============================================================================ SCRAM client
def _exchange(mechanism, user, password, stored_user=None, stored_password=None):
    """Our client against our ScramServer; returns (client, server)."""
    code = MECHANISMS[mechanism]
    cred = make_credential(code, stored_password or password)
    server = ScramServer(code, lambda u, m: cred if u == (stored_user or user) else None)
    client = ScramClient(mechanism, user, password)
    reply, done = server.step(client.initial())
    assert not done
    final = client.step(reply)
    reply, done = server.step(final)
    assert done
    assert client.step(reply) is None
    return client, server


@unit
@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_client_against_our_server(mechanism):
    for user in ("alice", "a,b=c", "=2C", "ünï"):
        client, server = _exchange(mechanism, user, "pw-" + user)
        assert client.complete and server.complete and server.username == user
    first = ScramClient(mechanism, "a,b=c", "pw", nonce="fixed").initial()
    assert first == b"n,,n=a=2Cb=3Dc,r=fixed"
    assert escape_saslname("=2C") == "=3D2C"
    with pytest.raises(AuthFailed, match="wrong password"):
        _exchange(mechanism, "alice", "wrong", stored_password="right")


@unit
def test_scram_client_message_layout():
    """client-final = c=biws,r=<nonce>,p=<proof of the right length>."""
    code = MECHANISMS["SCRAM-SHA-512"]
    cred = make_credential(code, "pw")
    server = ScramServer(code, lambda u, m: cred, server_nonce="SRV")
    client = ScramClient("SCRAM-SHA-512", "u", "pw", nonce="CLI")
    server_first, _ = server.step(client.initial())
    final = client.step(server_first).decode()
    parts = final.split(",")
    assert parts[:2] == ["c=biws", "r=CLISRV"] and parts[2].startswith("p=")
    assert len(base64.b64decode(parts[2][2:])) == 64
    assert client._password is None           # dropped once the proof is made


@unit
@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_client_refuses_a_wrong_server_signature(mechanism):
    code = MECHANISMS[mechanism]
    hname = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    cred = make_credential(code, "pw")
    # A server holding other keys (the same password under another salt would do) signs the
    # same AuthMessage with its own ServerKey.
    impostor = make_credential(code, "pw")
    for tamper in ("flip", "impostor", "error", "missing"):
        server = ScramServer(code, lambda u, m: cred)
        client = ScramClient(mechanism, "u", "pw")
        first = client.initial()
        server_first, _ = server.step(first)
        final = client.step(server_first)
        reply, done = server.step(final)
        assert done
        sig = base64.b64decode(reply[2:])
        if tamper == "flip":
            reply = b"v=" + base64.b64encode(bytes([sig[0] ^ 1]) + sig[1:])
        elif tamper == "impostor":
            auth = b",".join((first[3:], server_first, final[:final.rfind(b",p=")]))
            assert hmac.digest(cred.server_key, auth, hname) == sig    # the real one
            reply = b"v=" + base64.b64encode(hmac.digest(impostor.server_key, auth, hname))
        elif tamper == "error":
            reply = b"e=invalid-proof"
        else:
            reply = b"x=1"
        with pytest.raises(SaslClientError, match="signature does not match|e=|no v="):
            client.step(reply)
        assert not client.complete
        with pytest.raises(SaslClientError):      # refused for good
            client.step(reply)


@unit
def test_scram_client_refuses_bad_server_first_messages():
    salt = base64.b64encode(b"salt").decode()
    cases = {
        "r=OTHERnonce,s=%s,i=4096" % salt: "does not extend",
        "r=CLI,s=%s,i=4096" % salt: "does not extend",          # our nonce, not extended
        "r=CLIx,s=%s,i=4095" % salt: "iterations",             # a downgrade
        "r=CLIx,s=%s,i=1000000" % salt: "iterations",
        "r=CLIx,s=%s,i=abc" % salt: "not a number",
        "r=CLIx,s=!!,i=4096": "base64",
        "r=CLIx,i=4096,s=%s" % salt: "want r=, s=, i=",
        "m=x,r=CLIx,s=%s,i=4096" % salt: "mandatory extension",
        "e=unknown-user": "refused the client-first",
        "garbage": "malformed",
    }
    for message, why in cases.items():
        client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="CLI")
        client.initial()
        with pytest.raises(SaslClientError, match=why):
            client.step(message.encode())
    client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="CLI")
    with pytest.raises(SaslClientError):                      # step before initial
        client.step(b"r=CLIx,s=%s,i=4096" % salt.encode())
    with pytest.raises(ValueError):
        ScramClient("SCRAM-SHA-1", "u", "pw")
    with pytest.raises(ValueError):
        sasl_client("GSSAPI", "u", "pw")


@unit
def test_plain_client_against_our_server():
    cred = make_credential(MECHANISMS["SCRAM-SHA-512"], "pw")
    server = PlainServer(lambda u, m: cred if u == "alice" else None)
    client = sasl_client("PLAIN", "alice", "pw")
    first = client.initial()
    assert first == b"\0alice\0pw"
    reply, done = server.step(first)
    assert done and client.step(reply) is None and client.complete
    refused = PlainServer(lambda u, m: cred)
    with pytest.raises(AuthFailed):
        refused.step(PlainClient("alice", "wrong").initial())
    other = PlainClient("a", "b")
    other.initial()
    with pytest.raises(SaslClientError, match="challenge"):
        other.step(b"more?")


# ============================================================================ a real node
HOST = "127.0.0.1"
TOPIC, PARTS = "t", 3


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.server_cert = p.server(dns=())            # 127.0.0.1 only: "localhost" mismatches
    p.client_cert = p.client("sdk-client")
    return p


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    """SASL_SSL, SSL (client certificates requested) and SASL_PLAINTEXT; alice has
    SCRAM-SHA-512 and SCRAM-SHA-256 credentials (PLAIN checks against them); no ACLs and
    --allow-if-no-acl true: authentication is what is tested here."""
    n = start_node(tmp_path_factory.mktemp("node"), pki, pki.server_cert,
                   ("SASL_SSL", "SSL", "SASL_PLAINTEXT"), ("alice",), {TOPIC: PARTS},
                   allow_if_no_acl=True)
    try:
        yield n
    finally:
        stop_node(n)


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def sasl(pki, mechanism, password=None, protocol="SASL_SSL"):
    return ClientSecurity(protocol, ssl_cafile=pki.ca_pem, sasl_mechanism=mechanism,
                          sasl_username="alice",
                          sasl_password=password if password is not None else PASSWORDS["alice"])


async def _join_commit_read_back(bootstrap, group, security):
    member = ConsumerMember(bootstrap, group, topics=[TOPIC], security=security,
                            bootstrap_timeout_s=20)
    try:
        await member.start()
        await until(lambda: member.stable and len(member.assignment) == PARTS, 30,
                    "%s to own every partition of %s" % (group, TOPIC))
        conn = member.link.connection
        assert conn is not None and conn.security is security
        tp = TopicPartition(TOPIC, 1)
        await member.commit({tp: 42})
        assert await member.committed([tp]) == {tp: (42, "")}
    finally:
        await member.close()


@pytest.mark.parametrize("protocol,mechanism", [("SASL_SSL", "SCRAM-SHA-512"),
                                                ("SASL_SSL", "SCRAM-SHA-256"),
                                                ("SASL_SSL", "PLAIN"),
                                                ("SASL_PLAINTEXT", "SCRAM-SHA-512")])
def test_member_joins_over_sasl(node, pki, protocol, mechanism):
    run(_join_commit_read_back(node.bootstrap(protocol), "sdk-%s-%s" % (protocol, mechanism),
                               sasl(pki, mechanism, protocol=protocol)))


def test_member_joins_over_ssl_with_a_client_certificate(node, pki):
    sec = ClientSecurity("SSL", ssl_cafile=pki.ca_pem, ssl_certfile=pki.client_cert.cert,
                         ssl_keyfile=pki.client_cert.key)
    run(_join_commit_read_back(node.bootstrap("SSL"), "sdk-ssl", sec))


def test_classic_member_and_connect_worker_take_security(node, pki):
    """The other SDK members: a classic member over SASL_SSL (SCRAM-SHA-256) and a Connect
    worker over SSL with a client certificate each get their group's work."""
    async def main():
        classic = ClassicMember(node.bootstrap("SASL_SSL"), "sdk-classic", topics=[TOPIC],
                                security=sasl(pki, "SCRAM-SHA-256"), bootstrap_timeout_s=20)
        worker = ConnectWorker(node.bootstrap("SSL"), "sdk-connect", connectors={"c": 2},
                               security=ClientSecurity(
                                   "SSL", ssl_cafile=pki.ca_pem,
                                   ssl_certfile=pki.client_cert.cert,
                                   ssl_keyfile=pki.client_cert.key))
        try:
            await classic.start()
            await worker.start(timeout_s=20)
            await until(lambda: classic.state == "STABLE" and len(classic.assignment) == PARTS,
                        30, "the classic member to own %s" % TOPIC)
            await until(lambda: len(worker.owned[0]) == 1 and len(worker.owned[1]) == 2, 30,
                        "the worker to run connector c and its 2 tasks")
            assert worker.link.connection.security.protocol == "SSL"
        finally:
            await classic.close()
            await worker.stop()
    run(main())


@unit
def test_a_shared_link_carries_its_own_security():
    link = CoordinatorLink("127.0.0.1:1", "g", security=ClientSecurity("SSL"))
    assert link.security == ClientSecurity("SSL")
    with pytest.raises(ValueError, match="shared link"):
        ConnectWorker(group_id="g", link=link, security=ClientSecurity("SSL"))


def test_connection_open_authenticates_and_records_the_session(node, pki):
    async def main():
        host, port = node.addr("SASL_SSL")
        conn = await Connection.open(host, port, security=sasl(pki, "SCRAM-SHA-512"),
                                     timeout_s=20)
        try:
            assert conn.session_lifetime_ms == 0       # the node runs without reauth
            # Served after authentication, and answered with this listener's address.
            resp = await conn.request(FindCoordinatorRequest(key_type=0,
                                                             coordinator_keys=["g"]))
            assert [(c.error_code, c.host, c.port) for c in resp.coordinators] == [
                (0, host, port)]
        finally:
            await conn.close()
    run(main())


@pytest.mark.parametrize("mechanism", ("SCRAM-SHA-512", "PLAIN"))
def test_wrong_password_is_authentication_failed_58(node, pki, mechanism):
    async def main():
        host, port = node.addr("SASL_SSL")
        bad = sasl(pki, mechanism, password="not-the-password")
        with pytest.raises(AuthenticationFailed) as e:
            await Connection.open(host, port, security=bad, timeout_s=20)
        assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
        assert e.value.mechanism == mechanism and "not-the-password" not in str(e.value)
        assert "Authentication failed" in e.value.message     # the server's words
        # A member fails at start() with the same error, not after its bootstrap timeout.
        member = ConsumerMember(node.bootstrap("SASL_SSL"), "sdk-refused", topics=[TOPIC],
                                security=bad, bootstrap_timeout_s=60)
        with pytest.raises(AuthenticationFailed) as e:
            await member.start()
        assert e.value.code == 58
        await member.close()
        # An unknown user fails the same way.
        with pytest.raises(AuthenticationFailed) as e:
            await Connection.open(host, port, security=ClientSecurity(
                "SASL_SSL", ssl_cafile=pki.ca_pem, sasl_mechanism=mechanism,
                sasl_username="nobody", sasl_password="x"), timeout_s=20)
        assert e.value.code == 58
    run(main())


def test_tls_failures_are_connection_closed_with_the_reason(node, pki, tmp_path):
    async def main():
        host, port = node.addr("SSL")
        stranger = Pki(tmp_path / "stranger")          # a CA that did not sign the server
        with pytest.raises(ConnectionClosed, match="TLS handshake .*CERTIFICATE_VERIFY_FAILED"):
            await Connection.open(host, port, security=ClientSecurity(
                "SSL", ssl_cafile=stranger.ca_pem), timeout_s=20)
        # The server's certificate names 127.0.0.1 only: "localhost" is refused unless the
        # name check is off (ssl.endpoint.identification.algorithm=none).
        with pytest.raises(ConnectionClosed, match="CERTIFICATE_VERIFY_FAILED.*localhost"):
            await Connection.open("localhost", port, security=ClientSecurity(
                "SSL", ssl_cafile=pki.ca_pem), timeout_s=20)
        conn = await Connection.open("localhost", port, security=ClientSecurity(
            "SSL", ssl_cafile=pki.ca_pem, ssl_check_hostname=False), timeout_s=20)
        await conn.close()
        # A TLS client on the SASL_PLAINTEXT port, a plaintext one on the SSL port.
        sp_host, sp_port = node.addr("SASL_PLAINTEXT")
        with pytest.raises(ConnectionClosed):
            await Connection.open(sp_host, sp_port, security=sasl(pki, "PLAIN"), timeout_s=20)
        with pytest.raises(ConnectionClosed):
            await Connection.open(host, port, timeout_s=20)
    run(main())


# ============================================================================ groups CLI
async def _groups_cli(*argv):
    """`groupcoord groups ARGV...` as a child process -> (exit status, stdout, stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root() + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "groupcoord.cli", "groups", *[str(a) for a in argv],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


def _java_properties(path, pki, password):
    # The file kafka-consumer-groups.sh --command-config takes (Java's names).
    path.write_text(
        "# kafka-consumer-groups --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        "    username=\"alice\" \\\n"
        "    password=\"%s\";\n"
        "ssl.truststore.type=PEM\n"
        "ssl.truststore.location=%s\n"
        "request.timeout.ms=30000\n" % (password, pki.ca_pem), encoding="utf-8")
    return path


def test_groups_cli_lists_and_describes_with_command_config(node, pki, tmp_path):
    bs = node.bootstrap("SASL_SSL")
    good = _java_properties(tmp_path / "client.properties", pki, PASSWORDS["alice"])
    wrong = _java_properties(tmp_path / "wrong.properties", pki, "wrong-secret")
    incomplete = tmp_path / "incomplete.properties"
    incomplete.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                          "sasl.password=some-secret\n")

    async def main():
        member = ConsumerMember(bs, "cli-app", topics=[TOPIC], security=sasl(pki, "PLAIN"),
                                bootstrap_timeout_s=20)
        try:
            await member.start()
            await until(lambda: member.stable and len(member.assignment) == PARTS, 30,
                        "cli-app to own %s" % TOPIC)
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "--command-config",
                                             good, "list")
            assert (rc, err) == (0, ""), err
            assert ["cli-app", "Consumer", "Stable"] in [ln.split() for ln in
                                                         out.splitlines()[1:]]
            # --command-config after the subcommand works too.
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "describe", "--group",
                                             "cli-app", "--members", "--command-config", good)
            assert (rc, err) == (0, ""), err
            rows = [ln.split() for ln in out.splitlines()[1:]]
            assert [(r[0], r[1], r[-1]) for r in rows] == [("cli-app", member.member_id,
                                                            str(PARTS))]
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "--command-config",
                                             wrong, "list")
            assert (rc, out) == (1, "")
            assert "SASL_AUTHENTICATION_FAILED (58)" in err and "wrong-secret" not in err
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "--command-config",
                                             incomplete, "list")
            assert (rc, out) == (2, "")
            assert "needs a user name" in err and "some-secret" not in err
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "--command-config",
                                             tmp_path / "missing.properties", "list")
            assert rc == 2 and "cannot read" in err
            # Without it, the SASL_SSL listener closes the plaintext connection.
            rc, out, err = await _groups_cli("--bootstrap-server", bs, "--timeout", "5", "list")
            assert rc == 1 and "PLAINTEXT" in err
        finally:
            await member.close()
    run(main())
