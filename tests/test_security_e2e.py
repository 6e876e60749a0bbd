"""Security end to end (issue 20, "Tests that must pass"): real `groupcoord serve` processes
with TLS, SASL and ACLs, driven by real clients and by a raw socket client of our own.

- Transport x mechanism matrix: confluent-kafka consumers (classic and group.protocol=
  consumer), kafka-python and aiokafka over SASL_SSL with SCRAM-SHA-512, SCRAM-SHA-256 and
  PLAIN, and over SSL with client certificates (the principal is the certificate subject):
  each forms a group, commits offsets and reads them back. One SASL_PLAINTEXT client too.
- Every listener advertises itself in Metadata and FindCoordinator.
- ACLs through confluent-kafka's AdminClient (create_acls, describe_acls, delete_acls) as the
  super user admin: alice with READ on group prefix `a-` and topic `t` forms `a-1`; bob
  without ACLs gets GROUP_AUTHORIZATION_FAILED; alice cannot describe, delete or list `b-1`;
  DENY wins; after the topic ACL is deleted alice's commit gets TOPIC_AUTHORIZATION_FAILED.
- A wrong password fails authentication; a PLAINTEXT client on the SASL_SSL port fails
  cleanly while others are served; with --allow-if-no-acl true an ACL-less group is open
  (and --ssl-client-auth required refuses a TLS client without a certificate).
- kill -9 and restart: users (from the CLI and from AlterUserScramCredentials) and ACLs
  survive. Cluster mode (PostgreSQL, two nodes): a user and ACLs created through one node
  are used on the other.
- Bad input on the SASL path (raw socket): truncated and oversized SaslAuthenticate, wrong
  SCRAM nonce, wrong proof, handshake replay, requests before authentication: an error
  answer where Kafka gives one, the connection closed, no traceback, and an authenticated
  connection opened before keeps being served.

Nodes are shared per scenario (module fixtures), so the file runs in about 40 s. Every
wait is bounded; every process is stopped by its PID; 127.0.0.1 only.
"""
import asyncio
import base64
import hashlib
import hmac
import json
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest

from groupcoord.protocol import decode_response_frame, encode_request_frame
from groupcoord.protocol import messages as M
from groupcoord.runtime import shard_for
from pg_server import pg_server  # noqa: F401 (fixture)
from serve_proc import ServeProc, package_root, wait_until
from tls_certs import Pki

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError,
                             KafkaException, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
import kafka.errors
from kafka import KafkaConsumer
from kafka import OffsetAndMetadata as KOffsetAndMetadata
from kafka import TopicPartition as KTopicPartition
from aiokafka import AIOKafkaConsumer
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import OffsetAndMetadata as AOffsetAndMetadata
from aiokafka.structs import TopicPartition as ATopicPartition

DEADLINE_S = 40.0           # a group forms / an error shows within this
CLOSE_S = 5.0               # a refused connection is closed within this
HOST = "127.0.0.1"
MECHS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
PASSWORDS = {"admin": "admin-secret", "app": "app-secret", "alice": "alice-secret",
             "bob": "bob-secret", "carol": "carol-secret", "dave": "dave-secret"}

# Kafka's error codes (the wire numbers).
GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
INVALID_REQUEST = 42
SASL_AUTHENTICATION_FAILED = 58

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3


# ============================================================================ processes
def _env():
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root() + (os.pathsep + old if old else "")
    return env


def users_set(name, store_args, mechanisms=("SCRAM-SHA-512", "SCRAM-SHA-256")):
    """`groupcoord users set NAME --password-stdin` (offline: before the node starts)."""
    argv = [sys.executable, "-m", "groupcoord.cli", "users", "set", name, "--password-stdin"]
    for mech in mechanisms:
        argv += ["--mechanism", mech]
    r = subprocess.run(argv + list(store_args), input=PASSWORDS[name].encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), timeout=60)
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return r.stdout.decode()


def users_list(store_args):
    argv = [sys.executable, "-m", "groupcoord.cli", "users", "list", "--json"]
    r = subprocess.run(argv + list(store_args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=_env(), timeout=60)
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return {(u["name"], u["mechanism"]) for u in json.loads(r.stdout)}


def security_args(pki, server_cert, protocols, allow_if_no_acl=False, client_auth="requested"):
    argv = []
    for proto in protocols:
        argv += ["--listener", "%s://%s:0" % (proto, HOST)]
    if any(p in ("SSL", "SASL_SSL") for p in protocols):
        argv += ["--ssl-certfile", server_cert.cert, "--ssl-keyfile", server_cert.key,
                 "--ssl-cafile", pki.ca_pem, "--ssl-client-auth", client_auth]
    for mech in MECHS:
        argv += ["--sasl-mechanism", mech]
    # (ServeProc and cluster_procs' NodeProc add the fast group configs.)
    return argv + ["--super-user", "User:admin",
                   "--allow-if-no-acl", "true" if allow_if_no_acl else "false"]


def listeners_of(proc):
    """{protocol: (host, port)} from the node's listening line ("...; listeners: P://h:p,
    ...")."""
    for line in proc._stdout_lines:
        m = re.search(r"; listeners: (.*)\)\s*$", line)
        if m and line.startswith("groupcoord: listening on "):
            out = {}
            for item in m.group(1).split(", "):
                proto, _, addr = item.partition("://")
                host, _, port = addr.rpartition(":")
                out[proto] = (host, int(port))
            return out
    raise AssertionError("no listeners in the listening line:\n" + proc.describe())


class Node:
    """A started node (ServeProc) with its listeners, PKI and where its store is."""

    def __init__(self, proc, pki, store_args):
        self.proc = proc
        self.pki = pki
        self.store_args = store_args
        self.listeners = listeners_of(proc)

    def refresh(self):
        self.listeners = listeners_of(self.proc)

    def addr(self, protocol):
        return self.listeners[protocol]

    def bootstrap(self, protocol):
        return "%s:%d" % self.listeners[protocol]

    def alive(self):
        return self.proc.proc is not None and self.proc.proc.poll() is None


def start_node(tmp, pki, server_cert, protocols, users, topics, allow_if_no_acl=False,
               client_auth="requested"):
    data = os.path.join(str(tmp), "data")
    for u in users:
        users_set(u, ["--data-dir", data])
    proc = ServeProc(data, topics=topics,
                     extra_args=security_args(pki, server_cert, protocols, allow_if_no_acl,
                                              client_auth))
    proc.start()
    return Node(proc, pki, ["--data-dir", data])


def stop_node(node):
    rc = node.proc.stop()
    text = node.proc.stderr_text(10 ** 7)
    node.proc.close()
    assert rc == 0, "exit status %s after SIGTERM\n%s" % (rc, text[-5000:])
    assert "Traceback" not in text, text[-8000:]


# ============================================================================ credentials
class Cred:
    """How a client connects: protocol, SASL mechanism and user, or a client certificate."""

    def __init__(self, protocol, mechanism=None, user=None, password=None, cert=None):
        self.protocol = protocol
        self.mechanism = mechanism
        self.user = user
        self.password = password if password is not None else PASSWORDS.get(user)
        self.cert = cert

    def __repr__(self):
        return "%s/%s/%s" % (self.protocol, self.mechanism or "-",
                             self.user or (self.cert.principal if self.cert else "-"))


def sasl_ssl(user, mechanism="SCRAM-SHA-512", password=None):
    return Cred("SASL_SSL", mechanism, user, password)


def ck_conf(node, cred, **more):
    c = {"bootstrap.servers": node.bootstrap(cred.protocol), "broker.address.family": "v4",
         "security.protocol": cred.protocol, "reconnect.backoff.ms": 50,
         "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50,
         "socket.timeout.ms": 20000}
    if cred.protocol.startswith("SASL_"):
        c.update({"sasl.mechanisms": cred.mechanism, "sasl.username": cred.user,
                  "sasl.password": cred.password})
    if cred.protocol in ("SSL", "SASL_SSL"):
        # Hostname verification stays on (librdkafka's default): the certificate names
        # 127.0.0.1 in its subjectAltName.
        c.update({"ssl.ca.location": node.pki.ca_pem,
                  "ssl.endpoint.identification.algorithm": "https"})
    if cred.cert is not None:
        c.update({"ssl.certificate.location": cred.cert.cert,
                  "ssl.key.location": cred.cert.key})
    c.update(more)
    return c


def consumer_conf(node, cred, group, protocol="classic", errors=None):
    c = ck_conf(node, cred, **{"group.id": group, "client.id": "sec-" + group,
                               "enable.auto.commit": False, "auto.offset.reset": "earliest",
                               "fetch.wait.max.ms": 100,
                               "topic.metadata.refresh.interval.ms": 5000})
    if protocol == "consumer":
        c["group.protocol"] = "consumer"
    if errors is not None:
        c["error_cb"] = errors.append
    return c


def admin(node, cred, errors=None):
    c = ck_conf(node, cred)
    if errors is not None:
        c["error_cb"] = errors.append
    return AdminClient(c)


def kp_conf(node, cred):
    c = {"bootstrap_servers": node.bootstrap(cred.protocol),
         "security_protocol": cred.protocol}
    if cred.protocol.startswith("SASL_"):
        c.update(sasl_mechanism=cred.mechanism, sasl_plain_username=cred.user,
                 sasl_plain_password=cred.password)
    if cred.protocol in ("SSL", "SASL_SSL"):
        c.update(ssl_cafile=node.pki.ca_pem, ssl_check_hostname=True)
    if cred.cert is not None:
        c.update(ssl_certfile=cred.cert.cert, ssl_keyfile=cred.cert.key)
    return c


def aio_conf(node, cred):
    c = {"bootstrap_servers": node.bootstrap(cred.protocol),
         "security_protocol": cred.protocol}
    if cred.protocol.startswith("SASL_"):
        c.update(sasl_mechanism=cred.mechanism, sasl_plain_username=cred.user,
                 sasl_plain_password=cred.password)
    if cred.protocol in ("SSL", "SASL_SSL"):
        c["ssl_context"] = create_ssl_context(
            cafile=node.pki.ca_pem, certfile=cred.cert.cert if cred.cert else None,
            keyfile=cred.cert.key if cred.cert else None)
    return c


def wait_all(futures, timeout=30.0):
    """{key: result or the exception} of a dict of futures (AdminClient's answers)."""
    out = {}
    for k, f in futures.items():
        try:
            out[k] = f.result(timeout=timeout)
        except Exception as e:           # the per-item error is the point of the test
            out[k] = e
    return out


def kafka_error_code(exc):
    assert isinstance(exc, KafkaException), repr(exc)
    return exc.args[0].code()


# ============================================================================ the clients
def offsets_for(group, parts):
    # Distinct per group, so reading back someone else's offsets cannot pass.
    base = 1000 + sum(group.encode()) % 997
    return {p: base + p for p in range(parts)}


def _check_error(err, what):
    if err is not None and err.code() != KafkaError._PARTITION_EOF:
        raise AssertionError("%s: consumer error %s" % (what, err))


def confluent_group(node, cred, group, topic, parts, protocol="classic"):
    """A confluent-kafka consumer forms `group` on `topic`, commits offsets and reads them
    back. -> the offsets read back."""
    errors = []
    c = Consumer(consumer_conf(node, cred, group, protocol, errors))
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(c.assignment()) < parts:
            msg = c.poll(0.05)
            if msg is not None:
                _check_error(msg.error(), "%r %s" % (cred, group))
            fatal = [e for e in errors if e.fatal() or e.code() in (
                KafkaError._AUTHENTICATION, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.TOPIC_AUTHORIZATION_FAILED)]
            assert not fatal, fatal
            assert time.monotonic() < deadline, (
                "%r %s: not assigned %d partitions within %.0f s (assignment %s; %d errors, "
                "the last: %s)" % (cred, group, parts, DEADLINE_S, c.assignment(),
                                   len(errors), errors[-3:]))
        want = offsets_for(group, parts)
        done = c.commit(offsets=[TopicPartition(topic, p, o, metadata="by " + repr(cred))
                                 for p, o in want.items()], asynchronous=False)
        assert all(tp.error is None for tp in done), done
        got = c.committed([TopicPartition(topic, p) for p in want], timeout=20)
        assert {tp.partition: tp.offset for tp in got} == want, got
        assert all(tp.error is None for tp in got), got
        return want
    finally:
        c.close()


def kafka_python_group(node, cred, group, topic, parts):
    c = KafkaConsumer(topic, group_id=group, client_id="sec-" + group,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=6000, heartbeat_interval_ms=200,
                      max_poll_interval_ms=10000, request_timeout_ms=20000,
                      fetch_max_wait_ms=100, reconnect_backoff_ms=50, retry_backoff_ms=50,
                      metadata_max_age_ms=5000, **kp_conf(node, cred))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(c.assignment()) < parts:
            c.poll(timeout_ms=100)
            assert time.monotonic() < deadline, (
                "%r %s: not assigned %d partitions (%s)" % (cred, group, parts, c.assignment()))
        want = offsets_for(group, parts)
        c.commit({KTopicPartition(topic, p): KOffsetAndMetadata(o, "kp", -1)
                  for p, o in want.items()})
        got = {p: c.committed(KTopicPartition(topic, p)) for p in want}
        assert got == want, got
        return want
    finally:
        c.close()


async def _aiokafka_group(node, cred, group, topic, parts):
    c = AIOKafkaConsumer(topic, group_id=group, client_id="sec-" + group,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         session_timeout_ms=6000, heartbeat_interval_ms=200,
                         max_poll_interval_ms=10000, rebalance_timeout_ms=10000,
                         request_timeout_ms=20000, retry_backoff_ms=50, fetch_max_wait_ms=100,
                         metadata_max_age_ms=5000, **aio_conf(node, cred))
    await asyncio.wait_for(c.start(), DEADLINE_S)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(c.assignment()) < parts:
            await c.getmany(timeout_ms=100)
            assert time.monotonic() < deadline, (
                "%r %s: not assigned %d partitions (%s)" % (cred, group, parts, c.assignment()))
        want = offsets_for(group, parts)
        await c.commit({ATopicPartition(topic, p): AOffsetAndMetadata(o, "aio")
                        for p, o in want.items()})
        got = {p: await c.committed(ATopicPartition(topic, p)) for p in want}
        assert got == want, got
        return want
    finally:
        await asyncio.wait_for(c.stop(), 30)


def aiokafka_group(node, cred, group, topic, parts):
    return asyncio.run(_aiokafka_group(node, cred, group, topic, parts))


CLIENTS = {
    "confluent-classic": lambda *a: confluent_group(*a, protocol="classic"),
    "confluent-consumer": lambda *a: confluent_group(*a, protocol="consumer"),
    "kafka-python": kafka_python_group,
    "aiokafka": aiokafka_group,
}


def confluent_refused(node, cred, group, topic, code, timeout=DEADLINE_S):
    """A confluent-kafka consumer of `group` gets error `code` (from poll or error_cb) and is
    never assigned anything. -> the KafkaError."""
    errors = []
    c = Consumer(consumer_conf(node, cred, group, errors=errors))
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while True:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
            assert not c.assignment(), (cred, group, c.assignment())
            hit = [e for e in errors if e.code() == code]
            if hit:
                return hit[0]
            assert time.monotonic() < deadline, (
                "%r %s: no error %d within %.0f s (%d errors, the last: %s)"
                % (cred, group, code, timeout, len(errors), errors[-3:]))
    finally:
        c.close()


# ============================================================================ raw client
class Closed(Exception):
    pass


def _hmac(key, msg, h):
    return hmac.new(key, msg, h).digest()


def salted_password(mechanism, password, salt, iterations):
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    return hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)


class ScramClient:
    """The client side of RFC 5802 (as Kafka's clients speak it: no channel binding)."""

    def __init__(self, mechanism, user, password):
        self.mechanism = mechanism
        self.h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.user, self.password = user, password
        self.cnonce = os.urandom(16).hex()
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.first_bare = "n=%s,r=%s" % (name, self.cnonce)
        self.server_first = None
        self.server_signature = None

    def first(self):
        return ("n,," + self.first_bare).encode()

    def final(self, server_first, nonce=None, password=None):
        """The client-final message for `server_first` (with another nonce or password to
        make it wrong)."""
        self.server_first = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in self.server_first.split(","))
        assert attrs["r"].startswith(self.cnonce), self.server_first
        salt, iters = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = salted_password(self.mechanism, password or self.password, salt, iters)
        client_key = _hmac(salted, b"Client Key", self.h)
        stored_key = hashlib.new(self.h, client_key).digest()
        without_proof = "c=biws,r=" + (attrs["r"] if nonce is None else nonce)
        auth = ",".join((self.first_bare, self.server_first, without_proof)).encode()
        sig = _hmac(stored_key, auth, self.h)
        proof = bytes(a ^ b for a, b in zip(client_key, sig))
        self.server_signature = _hmac(_hmac(salted, b"Server Key", self.h), auth, self.h)
        return (without_proof + ",p=" + base64.b64encode(proof).decode()).encode()


class Raw:
    """One blocking connection speaking our codec, over TLS when `tls` (with the node's CA,
    and a client certificate when given)."""

    def __init__(self, node, protocol, cert=None, timeout=10.0):
        host, port = node.addr(protocol)
        s = socket.create_connection((host, port), timeout=timeout)
        if protocol in ("SSL", "SASL_SSL"):
            ctx = ssl.create_default_context(cafile=node.pki.ca_pem)
            if cert is not None:
                ctx.load_cert_chain(cert.cert, cert.key)
            s = ctx.wrap_socket(s, server_hostname=host)
        self.sock = s
        self.corr = 0
        self.buf = b""

    def send(self, req, version):
        self.corr += 1
        self.sock.sendall(encode_request_frame(req, version, self.corr, "security-e2e"))
        return self.corr

    def send_bytes(self, data):
        self.sock.sendall(data)

    def _fill(self, n):
        while len(self.buf) < n:
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as e:
                raise Closed(repr(e)) from None
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk

    def recv_frame(self):
        self._fill(4)
        size = struct.unpack(">i", self.buf[:4])[0]
        self._fill(4 + size)
        body, self.buf = self.buf[4:4 + size], self.buf[4 + size:]
        return body

    def recv(self, api_key, version):
        corr, resp = decode_response_frame(self.recv_frame(), api_key, version)
        return corr, resp

    def call(self, req, version):
        corr = self.send(req, version)
        got, resp = self.recv(type(req).API_KEY, version)
        assert got == corr, (got, corr)
        return resp

    def outcome(self, api_key, version, timeout=CLOSE_S):
        """What the server does next: -> (the response or None, bytes left unread). Asserts
        that the connection is closed within `timeout` (the response, if any, first)."""
        self.sock.settimeout(timeout)
        resp = None
        try:
            body = self.recv_frame()
            resp = decode_response_frame(body, api_key, version)[1]
            self._fill(len(self.buf) + 1)      # nothing more must come: only the close
            raise AssertionError("more bytes after the answer: %r" % self.buf[:200])
        except Closed:
            return resp, self.buf
        except socket.timeout:
            raise AssertionError("the connection was not closed within %.0f s (answer %r)"
                                 % (timeout, resp)) from None

    def authenticate(self, mechanism, user, password, version=2):
        """SaslHandshake v1 + SaslAuthenticate: -> the last SaslAuthenticate response."""
        hs = self.call(M.SaslHandshakeRequest(mechanism=mechanism), 1)
        assert hs.error_code == 0, hs
        if mechanism == "PLAIN":
            token = b"\0" + user.encode() + b"\0" + password.encode()
            return self.call(M.SaslAuthenticateRequest(auth_bytes=token), version)
        sc = ScramClient(mechanism, user, password)
        r1 = self.call(M.SaslAuthenticateRequest(auth_bytes=sc.first()), version)
        assert r1.error_code == 0, r1
        r2 = self.call(M.SaslAuthenticateRequest(auth_bytes=sc.final(r1.auth_bytes)), version)
        if r2.error_code == 0:
            assert r2.auth_bytes == b"v=" + base64.b64encode(sc.server_signature), r2
        return r2

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def raw_admin(node, protocol="SASL_SSL", user="admin", mechanism="SCRAM-SHA-512"):
    r = Raw(node, protocol)
    resp = r.authenticate(mechanism, user, PASSWORDS[user])
    assert resp.error_code == 0, resp
    return r


def metadata_v12():
    return M.MetadataRequest(topics=None, allow_auto_topic_creation=False)


def served(conn):
    """The connection still gets answers (ApiVersions and Metadata)."""
    av = conn.call(M.ApiVersionsRequest(client_software_name="security-e2e",
                                        client_software_version="1"), 3)
    assert av.error_code == 0, av
    md = conn.call(metadata_v12(), 12)
    assert md.brokers, md
    return md


# ============================================================================ fixtures
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.server_cert = p.server()
    p.app_cert = p.client("app-cert")          # has ACLs on the main node
    p.nobody_cert = p.client("nobody-cert", ou="no-acls")
    return p


MAIN_TOPIC = "m"          # the matrix clients' topic; their groups are m-*
MAIN_PARTS = 3


@pytest.fixture(scope="module")
def main_node(tmp_path_factory, pki):
    """Every listener protocol, --allow-if-no-acl false, super user admin; users admin, app,
    alice, bob (SCRAM-SHA-512 and -256, made offline); User:app and the app-cert principal
    may READ groups m-* and topic m."""
    node = start_node(tmp_path_factory.mktemp("main"), pki, pki.server_cert,
                      ("SASL_SSL", "SSL", "SASL_PLAINTEXT", "PLAINTEXT"),
                      ("admin", "app", "alice", "bob"), {MAIN_TOPIC: MAIN_PARTS, "t": 3})
    try:
        a = admin(node, sasl_ssl("admin"))
        acls = []
        for principal in ("User:app", pki.app_cert.principal):
            acls += [AclBinding(ResourceType.GROUP, "m-", ResourcePatternType.PREFIXED,
                                principal, "*", AclOperation.READ, AclPermissionType.ALLOW),
                     AclBinding(ResourceType.TOPIC, MAIN_TOPIC, ResourcePatternType.LITERAL,
                                principal, "*", AclOperation.READ, AclPermissionType.ALLOW)]
        res = wait_all(a.create_acls(acls))
        assert all(v is None for v in res.values()), res
        yield node
    finally:
        stop_node(node)


# ============================================================================ the matrix
MATRIX = [(client, mech) for client in CLIENTS for mech in MECHS]


@pytest.mark.parametrize("client,mechanism", MATRIX)
def test_sasl_ssl_client_forms_group_and_commits(main_node, client, mechanism):
    group = "m-%s-%s" % (client, mechanism.lower())
    CLIENTS[client](main_node, Cred("SASL_SSL", mechanism, "app"), group, MAIN_TOPIC,
                    MAIN_PARTS)


@pytest.mark.parametrize("client", list(CLIENTS))
def test_ssl_client_certificate_forms_group_and_commits(main_node, pki, client):
    # The ACLs name the certificate's subject: the group forms only if the node maps the
    # certificate to User:CN=app-cert,O=groupcoord-tests (Kafka's default mapping).
    assert pki.app_cert.principal == "User:CN=app-cert,O=groupcoord-tests"
    CLIENTS[client](main_node, Cred("SSL", cert=pki.app_cert), "m-ssl-" + client,
                    MAIN_TOPIC, MAIN_PARTS)


def test_ssl_certificate_without_acls_is_refused(main_node, pki):
    confluent_refused(main_node, Cred("SSL", cert=pki.nobody_cert), "m-nobody", MAIN_TOPIC,
                      GROUP_AUTHORIZATION_FAILED)
    # --ssl-client-auth requested: no certificate is User:ANONYMOUS, which has no ACL; the
    # app certificate's principal has one.
    for cert, code in ((None, GROUP_AUTHORIZATION_FAILED), (pki.nobody_cert,
                                                            GROUP_AUTHORIZATION_FAILED),
                       (pki.app_cert, 0)):
        with Raw(main_node, "SSL", cert=cert) as r:
            fc = r.call(M.FindCoordinatorRequest(key_type=0, coordinator_keys=["m-x"]), 4)
            assert fc.coordinators[0].error_code == code, (cert, fc)


def test_sasl_plaintext_listener(main_node):
    kafka_python_group(main_node, Cred("SASL_PLAINTEXT", "SCRAM-SHA-256", "app"),
                       "m-sasl-plaintext", MAIN_TOPIC, MAIN_PARTS)


def test_each_listener_advertises_itself(main_node, pki):
    """Metadata and FindCoordinator name the listener the request came in on."""
    creds = {"SASL_SSL": ("app", None), "SASL_PLAINTEXT": ("app", None),
             "SSL": (None, pki.app_cert), "PLAINTEXT": (None, None)}
    for proto, (user, cert) in creds.items():
        with Raw(main_node, proto, cert=cert) as r:
            if user:
                assert r.authenticate("SCRAM-SHA-512", user, PASSWORDS[user]).error_code == 0
            md = r.call(metadata_v12(), 12)
            assert [(b.host, b.port) for b in md.brokers] == [main_node.addr(proto)], (proto, md)
            if proto == "PLAINTEXT":
                continue        # User:ANONYMOUS may not describe any group here
            fc = r.call(M.FindCoordinatorRequest(key_type=0, coordinator_keys=["m-x"]), 4)
            co = fc.coordinators[0]
            assert co.error_code == 0 and (co.host, co.port) == main_node.addr(proto), (proto, fc)


# ============================================================================ ACLs
def _binding_set(bindings):
    return {(b.restype.value, b.name, b.resource_pattern_type.value, b.principal, b.host,
             b.operation.value, b.permission_type.value) for b in bindings}


def test_acls_through_admin_client(main_node):
    node = main_node
    adm = admin(node, sasl_ssl("admin"))
    allow_group = AclBinding(ResourceType.GROUP, "a-", ResourcePatternType.PREFIXED,
                             "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    allow_topic = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL,
                             "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    deny_group = AclBinding(ResourceType.GROUP, "a-denied", ResourcePatternType.LITERAL,
                            "User:alice", "*", AclOperation.READ, AclPermissionType.DENY)
    res = wait_all(adm.create_acls([allow_group, allow_topic, deny_group]))
    assert all(v is None for v in res.values()), res

    alice_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                    "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    got = adm.describe_acls(alice_filter).result(timeout=20)
    assert _binding_set(got) == _binding_set([allow_group, allow_topic, deny_group]), got
    # MATCH: the bindings that apply to group a-1 (the prefix; not the literal a-denied).
    match = AclBindingFilter(ResourceType.GROUP, "a-1", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert _binding_set(adm.describe_acls(match).result(timeout=20)) == _binding_set(
        [allow_group])

    # A principal that is not a super user may not change ACLs.
    alice_adm = admin(node, sasl_ssl("alice"))
    res = wait_all(alice_adm.create_acls([AclBinding(
        ResourceType.GROUP, "b-", ResourcePatternType.PREFIXED, "User:alice", "*",
        AclOperation.ALL, AclPermissionType.ALLOW)]))
    (err,) = res.values()
    assert kafka_error_code(err) == CLUSTER_AUTHORIZATION_FAILED, err

    # b-1 exists: the super user commits an offset in it.
    c = Consumer(consumer_conf(node, sasl_ssl("admin"), "b-1"))
    try:
        done = c.commit(offsets=[TopicPartition("t", 0, 5)], asynchronous=False)
        assert all(tp.error is None for tp in done), done
    finally:
        c.close()

    # alice: READ on a-* and t -> forms a-1 and commits.
    confluent_group(node, sasl_ssl("alice"), "a-1", "t", 3)
    # DENY wins over the prefixed ALLOW.
    confluent_refused(node, sasl_ssl("alice"), "a-denied", "t", GROUP_AUTHORIZATION_FAILED)
    # bob has no ACL at all.
    confluent_refused(node, sasl_ssl("bob", "SCRAM-SHA-256"), "b-1", "t",
                      GROUP_AUTHORIZATION_FAILED)

    # alice can neither describe nor delete b-1, nor see it listed; a-1 she can.
    res = wait_all(alice_adm.describe_consumer_groups(["b-1", "a-1"]))
    assert kafka_error_code(res["b-1"]) == GROUP_AUTHORIZATION_FAILED, res
    assert res["a-1"].group_id == "a-1", res
    res = wait_all(alice_adm.delete_consumer_groups(["b-1"]))
    assert kafka_error_code(res["b-1"]) == GROUP_AUTHORIZATION_FAILED, res
    listed = alice_adm.list_consumer_groups().result(timeout=20)
    ids = {g.group_id for g in listed.valid}
    assert "a-1" in ids and "b-1" not in ids, ids
    # ... and b-1 is untouched: the super user still reads its offset.
    res = wait_all(adm.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("b-1", [TopicPartition("t", 0)])]))
    assert [tp.offset for tp in res["b-1"].topic_partitions] == [5], res

    # delete_acls: the topic ACL goes; alice's commit on t is then refused.
    topic_filter = AclBindingFilter(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL,
                                    "User:alice", None, AclOperation.ANY,
                                    AclPermissionType.ANY)
    res = wait_all(adm.delete_acls([topic_filter]))
    assert _binding_set(res[topic_filter]) == _binding_set([allow_topic]), res
    got = adm.describe_acls(alice_filter).result(timeout=20)
    assert _binding_set(got) == _binding_set([allow_group, deny_group]), got
    c = Consumer(consumer_conf(node, sasl_ssl("alice"), "a-1"))
    try:
        try:
            done = c.commit(offsets=[TopicPartition("t", 0, 9)], asynchronous=False)
            codes = {tp.error.code() for tp in done if tp.error is not None}
        except KafkaException as e:
            codes = {e.args[0].code()}
        assert codes == {TOPIC_AUTHORIZATION_FAILED}, codes
    finally:
        c.close()


# ============================================================================ authentication
def test_wrong_password_fails_authentication(main_node):
    errors = []
    a = admin(main_node, sasl_ssl("alice", password="not-her-password"), errors=errors)
    with pytest.raises(KafkaException):
        a.list_topics(timeout=5)
    def auth_error():
        a.poll(0.1)                     # error_cb runs from poll()
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)
    wait_until(auth_error, 20, what="an authentication error from librdkafka")
    text = " ".join(str(e) for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "Authentication failed" in text, text
    # Logged (who, from where, which mechanism), never the password.
    wait_until(lambda: re.search(r"failed authentication from 127\.0\.0\.1:\d+ .*"
                                 r"SCRAM-SHA-512.*alice", main_node.proc.stderr_text(10 ** 7)),
               10, what="the failed authentication's log line")
    assert "not-her-password" not in main_node.proc.stderr_text(10 ** 7)
    # The same over the raw client, for each mechanism: 58 with a message, then closed.
    for mech in MECHS:
        with Raw(main_node, "SASL_SSL") as r:
            resp = r.authenticate(mech, "alice", "not-her-password")
            assert resp.error_code == SASL_AUTHENTICATION_FAILED, (mech, resp)
            assert "Authentication failed" in resp.error_message, (mech, resp)
            assert r.outcome(SASL_AUTHENTICATE, 2) == (None, b"")
    # An unknown user too.
    with Raw(main_node, "SASL_SSL") as r:
        hs = r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1)
        assert hs.error_code == 0
        sc = ScramClient("SCRAM-SHA-256", "nobody", "x")
        r1 = r.call(M.SaslAuthenticateRequest(auth_bytes=sc.first()), 2)
        if r1.error_code == 0:          # Kafka answers a made-up salt, refuses at the proof
            r1 = r.call(M.SaslAuthenticateRequest(auth_bytes=sc.final(r1.auth_bytes)), 2)
        assert r1.error_code == SASL_AUTHENTICATION_FAILED, r1
        r.outcome(SASL_AUTHENTICATE, 2)


def test_plaintext_client_on_sasl_ssl_port_fails_cleanly(main_node):
    node = main_node
    with Witness(node) as witness:
        # A raw PLAINTEXT ApiVersions: no Kafka answer, the connection closes.
        host, port = node.addr("SASL_SSL")
        s = socket.create_connection((host, port), timeout=CLOSE_S)
        try:
            s.sendall(encode_request_frame(M.ApiVersionsRequest(), 3, 7, "plain"))
            data = _read_to_close(s, CLOSE_S)
        finally:
            s.close()
        assert not data.startswith(b"\x00\x00"), data[:40]     # no Kafka frame (a TLS alert)
        # A confluent-kafka client speaking PLAINTEXT: errors, never a metadata answer.
        errors = []
        c = AdminClient({"bootstrap.servers": "%s:%d" % (host, port),
                         "broker.address.family": "v4", "security.protocol": "PLAINTEXT",
                         "reconnect.backoff.ms": 100, "error_cb": errors.append})
        with pytest.raises(KafkaException):
            c.list_topics(timeout=3)
        wait_until(lambda: c.poll(0.1) >= 0 and errors, 10,
                   what="a transport error from librdkafka")
        # kafka-python too: it cannot bootstrap.
        with pytest.raises(kafka.errors.KafkaTimeoutError, match="Unable to bootstrap"):
            KafkaConsumer(bootstrap_servers="%s:%d" % (host, port), bootstrap_timeout_ms=3000,
                          request_timeout_ms=3000)
        served(witness)
    # New SASL_SSL clients are served.
    a = admin(node, sasl_ssl("admin"))
    assert MAIN_TOPIC in a.list_topics(timeout=20).topics
    assert node.alive()


def _read_to_close(sock, timeout):
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return data
    except socket.timeout:
        raise AssertionError("not closed within %.0f s (read %r)" % (timeout, data[:100]))


class Witness:
    """An authenticated SASL_SSL connection opened before the bad input; on exit: it is still
    answered, a new one authenticates, the node is alive and logged no traceback."""

    def __init__(self, node):
        self.node = node

    def __enter__(self):
        self.conn = raw_admin(self.node)
        served(self.conn)
        return self.conn

    def __exit__(self, exc_type, *rest):
        try:
            if exc_type is None:
                served(self.conn)
                with raw_admin(self.node, user="app", mechanism="SCRAM-SHA-256") as fresh:
                    served(fresh)
                assert self.node.alive()
                text = self.node.proc.stderr_text(10 ** 7)
                assert "Traceback" not in text, text[-8000:]
        finally:
            self.conn.close()
        return False


# ============================================================================ bad SASL input
def _scram_started(node, mech="SCRAM-SHA-512", user="alice"):
    """A connection after the handshake and the client-first: -> (Raw, ScramClient, the
    server-first message)."""
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism=mech), 1).error_code == 0
    sc = ScramClient(mech, user, PASSWORDS[user])
    r1 = r.call(M.SaslAuthenticateRequest(auth_bytes=sc.first()), 2)
    assert r1.error_code == 0, r1
    return r, sc, r1.auth_bytes


def _authenticate_frame(auth_bytes, corr=1, version=2):
    return encode_request_frame(M.SaslAuthenticateRequest(auth_bytes=auth_bytes), version,
                                corr, "security-e2e")


def _refused(resp, codes, what):
    """A refusal: no answer (the connection just closed) or an answer with one of `codes`."""
    assert resp is None or resp.error_code in codes, (what, resp)


def bad_truncated_frame(node):
    # The frame's size prefix matches, but auth_bytes' length runs past the end of the body.
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
    frame = _authenticate_frame(ScramClient("SCRAM-SHA-512", "alice", "x").first(), corr=2)
    body = frame[4:-12]
    r.send_bytes(struct.pack(">i", len(body)) + body)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    _refused(resp, (INVALID_REQUEST, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE),
             "truncated SaslAuthenticate")
    return r


def bad_truncated_scram_message(node):
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
    r.send(M.SaslAuthenticateRequest(auth_bytes=b"n,,n=ali"), 2)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    assert resp is not None and resp.error_code == SASL_AUTHENTICATION_FAILED, resp
    assert resp.error_message, resp
    return r


def bad_oversized(node):
    # 1 MiB of client-first (Kafka refuses more than 512 KiB before authentication:
    # sasl.server.max.receive.size): refused, closed, whether or not it was read.
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
    huge = b"n,,n=alice,r=" + b"x" * (1 << 20)
    try:
        r.send(M.SaslAuthenticateRequest(auth_bytes=huge), 2)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        return r                         # closed while we were still sending: refused
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    _refused(resp, (SASL_AUTHENTICATION_FAILED, INVALID_REQUEST), "oversized SaslAuthenticate")
    return r


def bad_oversized_declared(node):
    # A size prefix far over any SASL message, before authentication: closed without the
    # node waiting for (or buffering) the bytes announced (Kafka: InvalidReceiveException).
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
    frame = _authenticate_frame(b"n,,n=alice,r=abc", corr=2)
    r.send_bytes(struct.pack(">i", 64 << 20) + frame[4:] + b"\0" * 4096)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    _refused(resp, (SASL_AUTHENTICATION_FAILED, INVALID_REQUEST), "64 MiB size prefix")
    return r


def bad_wrong_nonce(node):
    r, sc, server_first = _scram_started(node)
    r.send(M.SaslAuthenticateRequest(auth_bytes=sc.final(server_first,
                                                         nonce=sc.cnonce + "forged")), 2)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    assert resp is not None and resp.error_code == SASL_AUTHENTICATION_FAILED, resp
    return r


def bad_wrong_proof(node):
    r, sc, server_first = _scram_started(node)
    r.send(M.SaslAuthenticateRequest(auth_bytes=sc.final(server_first, password="guess")), 2)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    assert resp is not None and resp.error_code == SASL_AUTHENTICATION_FAILED, resp
    assert "Authentication failed" in (resp.error_message or ""), resp
    assert "guess" not in resp.error_message
    return r


def bad_handshake_replay(node):
    # A second SaslHandshake in the middle of the exchange.
    r, _sc, _first = _scram_started(node)
    r.send(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    resp, _ = r.outcome(SASL_HANDSHAKE, 1)
    _refused(resp, (ILLEGAL_SASL_STATE,), "SaslHandshake during the exchange")
    return r


def bad_client_final_replay(node):
    # A client-final captured from a successful exchange, replayed on a new connection
    # after the same client-first: the server's nonce differs, so the proof is refused.
    r, sc, server_first = _scram_started(node)
    final = sc.final(server_first)
    resp = r.call(M.SaslAuthenticateRequest(auth_bytes=final), 2)
    assert resp.error_code == 0, resp
    r.close()
    r = Raw(node, "SASL_SSL")
    assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
    r1 = r.call(M.SaslAuthenticateRequest(auth_bytes=sc.first()), 2)
    assert r1.error_code == 0 and r1.auth_bytes != server_first, r1
    r.send(M.SaslAuthenticateRequest(auth_bytes=final), 2)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    assert resp is not None and resp.error_code == SASL_AUTHENTICATION_FAILED, resp
    return r


def bad_request_before_authentication(node):
    # Kafka closes without an answer (IllegalSaslStateException).
    r = Raw(node, "SASL_SSL")
    r.send(metadata_v12(), 12)
    assert r.outcome(METADATA, 12) == (None, b"")
    return r


def bad_request_during_exchange(node):
    r, _sc, _first = _scram_started(node)
    r.send(M.JoinGroupRequest(group_id="a-1", session_timeout_ms=6000,
                              rebalance_timeout_ms=6000, member_id="", protocol_type="consumer",
                              protocols=[]), 5)
    assert r.outcome(11, 5) == (None, b"")
    return r


def bad_authenticate_without_handshake(node):
    r = Raw(node, "SASL_SSL")
    r.send(M.SaslAuthenticateRequest(auth_bytes=b"\0alice\0" + PASSWORDS["alice"].encode()), 2)
    resp, _ = r.outcome(SASL_AUTHENTICATE, 2)
    _refused(resp, (ILLEGAL_SASL_STATE,), "SaslAuthenticate before SaslHandshake")
    return r


def bad_unsupported_mechanism(node):
    r = Raw(node, "SASL_SSL")
    r.send(M.SaslHandshakeRequest(mechanism="GSSAPI"), 1)
    resp, _ = r.outcome(SASL_HANDSHAKE, 1)
    assert resp is not None and resp.error_code == UNSUPPORTED_SASL_MECHANISM, resp
    assert set(resp.mechanisms) == set(MECHS), resp
    return r


BAD_INPUT = [bad_truncated_frame, bad_truncated_scram_message, bad_oversized,
             bad_oversized_declared, bad_wrong_nonce, bad_wrong_proof, bad_handshake_replay,
             bad_client_final_replay, bad_request_before_authentication,
             bad_request_during_exchange, bad_authenticate_without_handshake,
             bad_unsupported_mechanism]


@pytest.mark.parametrize("case", BAD_INPUT, ids=[f.__name__[4:] for f in BAD_INPUT])
def test_bad_sasl_input(main_node, case):
    with Witness(main_node):
        r = case(main_node)
        r.close()


def test_handshake_after_authentication(main_node):
    # Kafka's KafkaApis answers ILLEGAL_SASL_STATE to a SaslHandshake on an authenticated
    # connection (no re-authentication here: connections.max.reauth.ms is 0).
    with Witness(main_node):
        r = raw_admin(main_node)
        try:
            r.send(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
            _c, resp = r.recv(SASL_HANDSHAKE, 1)
            assert resp.error_code == ILLEGAL_SASL_STATE, resp
            # ... and the connection stays authenticated and open, as in Kafka: still served
            # after five times the node's failed-authentication delay (100 ms), after which
            # a refused exchange would have been closed.
            time.sleep(0.5)
            served(r)
        finally:
            r.close()


def test_handshake_v0_raw_tokens(main_node):
    """SaslHandshake v0: the tokens follow as bare size-prefixed frames (Kafka's pre-KIP-152
    exchange). PLAIN and SCRAM succeed; a wrong password closes the connection unanswered."""
    def token(r, data):
        r.send_bytes(struct.pack(">i", len(data)) + data)
        return r.recv_frame()

    with Witness(main_node):
        with Raw(main_node, "SASL_SSL") as r:
            assert r.call(M.SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
            assert token(r, b"\0app\0" + PASSWORDS["app"].encode()) == b""
            served(r)
        with Raw(main_node, "SASL_SSL") as r:
            assert r.call(M.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 0).error_code == 0
            sc = ScramClient("SCRAM-SHA-256", "app", PASSWORDS["app"])
            server_first = token(r, sc.first())
            assert token(r, sc.final(server_first)) == b"v=" + base64.b64encode(
                sc.server_signature)
            served(r)
        with Raw(main_node, "SASL_SSL") as r:
            assert r.call(M.SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
            r.send_bytes(struct.pack(">i", 13) + b"\0app\0wrong-pw")
            r.sock.settimeout(CLOSE_S)
            with pytest.raises(Closed):
                r.recv_frame()


# ============================================================================ allow-if-no-acl
def test_allow_if_no_acl_true_opens_groups_without_acls(tmp_path, pki):
    """--allow-if-no-acl true: a group without any ACL is open to any authenticated
    principal; a group with ACLs is not. With --ssl-client-auth required a TLS client without
    a certificate is refused at the handshake, and SASL_SSL clients present one too."""
    node = start_node(tmp_path, pki, pki.server_cert, ("SASL_SSL", "SSL"),
                      ("admin", "alice", "bob"), {"t": 2}, allow_if_no_acl=True,
                      client_auth="required")
    try:
        cert = pki.client("bob-laptop")
        bob = Cred("SASL_SSL", "SCRAM-SHA-512", "bob", cert=cert)
        a = admin(node, Cred("SASL_SSL", "SCRAM-SHA-512", "admin", cert=cert))
        res = wait_all(a.create_acls([AclBinding(
            ResourceType.GROUP, "locked", ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]))
        assert all(v is None for v in res.values()), res
        confluent_group(node, bob, "free-1", "t", 2)
        confluent_refused(node, bob, "locked", "t", GROUP_AUTHORIZATION_FAILED)
        confluent_group(node, Cred("SASL_SSL", "PLAIN", "alice", cert=cert), "locked", "t", 2)
        # The SSL listener maps the certificate: no ACL names it, the group has none: open.
        kafka_python_group(node, Cred("SSL", cert=cert), "free-2", "t", 2)
        # No client certificate: the TLS handshake fails.
        host, port = node.addr("SSL")
        ctx = ssl.create_default_context(cafile=pki.ca_pem)
        with pytest.raises((ssl.SSLError, ConnectionResetError, Closed)):
            with socket.create_connection((host, port), timeout=CLOSE_S) as s:
                with ctx.wrap_socket(s, server_hostname=host) as t:
                    # TLS 1.3: the refusal arrives after the client's handshake completes.
                    t.sendall(encode_request_frame(M.ApiVersionsRequest(), 3, 1, "x"))
                    if not t.recv(1):
                        raise Closed("EOF")
        assert node.alive()
    finally:
        stop_node(node)


# ============================================================================ restart
def test_users_and_acls_survive_kill9(tmp_path, pki):
    node = start_node(tmp_path, pki, pki.server_cert, ("SASL_SSL",), ("admin", "alice"),
                      {"t": 2})
    try:
        a = admin(node, sasl_ssl("admin"))
        # carol is made over the wire (AlterUserScramCredentials), SCRAM-SHA-256 only.
        up = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            PASSWORDS["carol"].encode())
        res = wait_all(a.alter_user_scram_credentials([up]))
        assert all(v is None for v in res.values()), res
        acls = [AclBinding(ResourceType.GROUP, "a-", ResourcePatternType.PREFIXED,
                           "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "c-1", ResourcePatternType.LITERAL,
                           "User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL,
                           "User:carol", "*", AclOperation.ALL, AclPermissionType.ALLOW)]
        res = wait_all(a.create_acls(acls))
        assert all(v is None for v in res.values()), res
        # carol works before the kill (so that after it, a failure means "lost").
        assert "t" in admin(node, sasl_ssl("carol", "SCRAM-SHA-256")).list_topics(
            timeout=20).topics

        node.proc.kill9()
        node.proc.start()
        node.refresh()

        a = admin(node, sasl_ssl("admin"))
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        assert _binding_set(a.describe_acls(every).result(timeout=20)) == _binding_set(acls)
        desc = wait_all(a.describe_user_scram_credentials(["carol", "alice"]))
        assert [i.mechanism for i in desc["carol"].scram_credential_infos] == [
            ScramMechanism.SCRAM_SHA_256], desc
        assert {i.mechanism for i in desc["alice"].scram_credential_infos} == {
            ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}, desc
        confluent_group(node, sasl_ssl("carol", "SCRAM-SHA-256"), "c-1", "t", 2)
        kafka_python_group(node, sasl_ssl("alice", "SCRAM-SHA-512"), "a-restart", "t", 2)
        # The ACLs are enforced after the restart, not just listed.
        confluent_refused(node, sasl_ssl("carol", "SCRAM-SHA-256"), "a-2", "t",
                          GROUP_AUTHORIZATION_FAILED)
        assert users_list(node.store_args) >= {("admin", "SCRAM-SHA-512"),
                                               ("alice", "SCRAM-SHA-512"),
                                               ("carol", "SCRAM-SHA-256")}
    finally:
        stop_node(node)


# ============================================================================ cluster mode
class SecureCluster:
    def __init__(self, cl, nodes, owners):
        self.cl, self.nodes, self.owners = cl, nodes, owners

    def group_on(self, prefix, node_id):
        """A group id prefix-i whose shard node_id holds."""
        return next("%s-%d" % (prefix, i) for i in range(1000)
                    if self.owners[shard_for("%s-%d" % (prefix, i), 2)] == node_id)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory, pki, pg_server):  # noqa: F811
    """Two nodes over one PostgreSQL database of their own, two shards (one each), each
    with a SASL_SSL and a PLAINTEXT listener; admin made with the CLI before either
    starts."""
    from cluster_procs import Cluster
    name = "gc_sec_%d" % os.getpid()
    pg_server.psql('CREATE DATABASE "%s" TEMPLATE groupcoord_template' % name)
    dsn = pg_server.dsn(name)
    users_set("admin", ["--store", dsn])
    cl = Cluster(dsn, tmp_path_factory.mktemp("cluster"), shards=2, lease_ms=2000,
                 topics={"t": 2},
                 extra_args=security_args(pki, pki.server_cert, ("SASL_SSL", "PLAINTEXT")))
    try:
        nodes = {n: Node(cl.start(n), pki, ["--store", dsn]) for n in (1, 2)}
        yield SecureCluster(cl, nodes, cl.wait_balanced({1, 2}))
    finally:
        codes = cl.close()
        if pg_server.pid is not None:
            pg_server.psql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
        logs = "\n".join(cl.stderr_of(n) for n in cl.nodes)
        assert "Traceback" not in logs, logs[-8000:]
        assert all(rc == 0 for rc in codes.values()), codes


def test_cluster_user_and_acl_made_on_one_node_are_used_on_the_other(secure_cluster):
    sc = secure_cluster
    nodes = sc.nodes
    # Through node 1: dave (AlterUserScramCredentials) and his ACLs (CreateAcls).
    salt = os.urandom(24)
    with raw_admin(nodes[1]) as r:
        resp = r.call(M.AlterUserScramCredentialsRequest(deletions=[], upsertions=[
            M.AlterUserScramCredentialsRequestScramCredentialUpsertion(
                name="dave", mechanism=2, iterations=4096, salt=salt,
                salted_password=salted_password("SCRAM-SHA-512", PASSWORDS["dave"], salt,
                                                4096))]), 0)
        assert [x.error_code for x in resp.results] == [0], resp
        resp = r.call(M.CreateAclsRequest(creations=[
            M.CreateAclsRequestAclCreation(resource_type=3, resource_name="d-",
                                           resource_pattern_type=4, principal="User:dave",
                                           host="*", operation=3, permission_type=3),
            M.CreateAclsRequestAclCreation(resource_type=2, resource_name="t",
                                           resource_pattern_type=3, principal="User:dave",
                                           host="*", operation=3, permission_type=3)]), 2)
        assert [x.error_code for x in resp.results] == [0, 0], resp

    # Node 2 learns both within a few refresh periods.
    def dave_on_node2():
        with Raw(nodes[2], "SASL_SSL") as r:
            return r.authenticate("SCRAM-SHA-512", "dave", PASSWORDS["dave"]).error_code == 0
    wait_until(dave_on_node2, 30, interval=0.3, what="dave authenticating on node 2")
    with raw_admin(nodes[2]) as r:
        def acls():
            d = r.call(M.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                             pattern_type_filter=1,
                                             principal_filter="User:dave", host_filter=None,
                                             operation=1, permission_type=1), 2)
            assert d.error_code == 0, d
            return {(x.resource_type, x.resource_name, x.pattern_type) for x in d.resources}
        wait_until(lambda: acls() == {(3, "d-", 4), (2, "t", 3)}, 30, interval=0.3,
                   what="dave's ACLs on node 2")
    # On node 2, as dave: a group of a shard node 2 holds forms; an ACL-less one is refused.
    group = sc.group_on("d", 2)
    with Raw(nodes[2], "SASL_SSL") as r:
        assert r.authenticate("SCRAM-SHA-512", "dave", PASSWORDS["dave"]).error_code == 0
        fc = r.call(M.FindCoordinatorRequest(key_type=0, coordinator_keys=[group, "e-1"]), 4)
        by = {c.key: c for c in fc.coordinators}
        assert by[group].error_code == 0 and by[group].node_id == 2, fc
        assert by["e-1"].error_code == GROUP_AUTHORIZATION_FAILED, fc
    confluent_group(nodes[2], sasl_ssl("dave"), group, "t", 2)


def test_cluster_nodes_advertise_the_listener_of_the_request(secure_cluster):
    """Metadata and FindCoordinator on any node name every node by the address of the
    listener the request came in on, so a SASL_SSL client bootstrapped to node 1 reaches a
    group coordinated by node 2, and a PLAINTEXT client is not sent to a TLS port."""
    sc = secure_cluster
    nodes = sc.nodes
    for proto in ("SASL_SSL", "PLAINTEXT"):
        for n in (1, 2):
            with Raw(nodes[n], proto) as r:
                if proto == "SASL_SSL":
                    assert r.authenticate("SCRAM-SHA-512", "admin",
                                          PASSWORDS["admin"]).error_code == 0
                md = r.call(metadata_v12(), 12)
                assert {b.node_id: (b.host, b.port) for b in md.brokers} == {
                    m: nodes[m].addr(proto) for m in (1, 2)}, (n, proto, nodes[n].listeners,
                                                               md.brokers)
                if proto == "SASL_SSL":
                    other = 3 - n
                    group = sc.group_on("x", other)
                    fc = r.call(M.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                4)
                    co = fc.coordinators[0]
                    assert co.error_code == 0 and co.node_id == other and (
                        co.host, co.port) == nodes[other].addr(proto), (n, fc)
        if proto == "SASL_SSL":
            confluent_group(nodes[1], sasl_ssl("admin"), sc.group_on("y", 2), "t", 2)
