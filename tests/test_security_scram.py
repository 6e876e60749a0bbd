"""SASL server side (security/scram.py, security/sasl.py) and principals (security/principal.py).

SCRAM is checked against RFC 7677's SCRAM-SHA-256 exchange and RFC 5802's SCRAM-SHA-1 one
(SHA-1 put in the mechanism table for that test only), against a tiny client written here,
and against kafka-python's own SCRAM and PLAIN clients. The SSL principals are what Java 17's
X500Principal.getName() printed for certificates made by OpenSSL with these subjects.
"""
import base64
import hashlib
import hmac
import random

import pytest

from groupcoord.security import principal as pr
from groupcoord.security import scram
from groupcoord.security.sasl import SaslSession, SaslStep
from groupcoord.security.scram import (
    MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted, make_credential,
    verify_password)

GENERIC = ("Authentication failed during authentication due to invalid credentials with SASL "
           "mechanism %s")
HNAME = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
CODE = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
ALL = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


def b64(b) -> str:
    return base64.b64encode(b if isinstance(b, bytes) else b.encode()).decode()


def saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


class TinyScramClient:
    """The client side of RFC 5802, enough to drive the server and to break it on purpose."""

    def __init__(self, hname, user, password, nonce="fyko+d2lbbFgONRv9qkx", gs2="n,,",
                 name=None):
        self.hname, self.password, self.nonce, self.gs2 = hname, password, nonce, gs2
        self.bare = "n=%s,r=%s" % (saslname(user) if name is None else name, nonce)
        self.server_signature = None

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(self, server_first: bytes, *, cbind=None, nonce=None, extra="",
              password=None) -> bytes:
        sf = server_first.decode()
        attrs = dict(a.split("=", 1) for a in sf.split(","))
        assert attrs["r"].startswith(self.nonce) and len(attrs["r"]) > len(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.hname, (password or self.password).encode(),
                                     base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", self.hname)
        stored_key = hashlib.new(self.hname, client_key).digest()
        without = "c=%s,r=%s%s" % (b64(self.gs2 if cbind is None else cbind),
                                   attrs["r"] if nonce is None else nonce, extra)
        auth = ("%s,%s,%s" % (self.bare, sf, without)).encode()
        sig = hmac.digest(stored_key, auth, self.hname)
        proof = bytes(x ^ y for x, y in zip(client_key, sig))
        self.server_signature = hmac.digest(
            hmac.digest(salted, b"Server Key", self.hname), auth, self.hname)
        return ("%s,p=%s" % (without, b64(proof))).encode()

    def verifies(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self.server_signature)


class Users:
    """A credential store for the lookup callable; counts lookups."""

    def __init__(self):
        self.creds = {}
        self.calls = []

    def add(self, user, mechanism, password, iterations=4096):
        self.creds[(user, mechanism)] = make_credential(mechanism, password,
                                                        iterations=iterations)

    def __call__(self, user, mechanism):
        self.calls.append((user, mechanism))
        return self.creds.get((user, mechanism))


@pytest.fixture(scope="module")
def users():
    u = Users()
    for m in (1, 2):
        u.add("alice", m, "alice-secret")
        u.add("bob", m, "bob-secret")
        u.add("a,b=c", m, "odd")
        u.add("Jürgen", m, "päss")
    u.add("only256", 1, "s256")
    return u


def scram_login(session, mech, user, password, **client_kw):
    """(handshake result, first step, last step, client) of a full SCRAM exchange."""
    client = TinyScramClient(HNAME[mech], user, password, **client_kw)
    hs = session.handshake(mech)
    s1 = session.authenticate(client.first())
    if s1.error_code:
        return hs, s1, s1, client
    s2 = session.authenticate(client.final(s1.reply))
    return hs, s1, s2, client


# ------------------------------------------------------------------- RFC test vectors
def test_rfc7677_scram_sha256_vector():
    cred = make_credential(1, "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = scram.ScramServer(1, lambda u, m: cred if (u, m) == ("user", 1) else None,
                               server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096", False)
    assert server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", True)
    assert server.complete and server.username == "user"


def test_rfc5802_scram_sha1_vector_through_the_same_code(monkeypatch):
    # SHA-1 is no Kafka mechanism; put it in the table so RFC 5802's own exchange runs
    # through the same parsing and proof code.
    monkeypatch.setitem(scram._HASH, 9, "sha1")
    cred = make_credential(9, "pencil", salt=base64.b64decode("QSXCR+Q6sek8bf92"))
    server = scram.ScramServer(9, lambda u, m: cred, server_nonce="3rfcNHYJY1ZVvWVs7j")
    assert server.step(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")[0] == (
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert server.step(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
                       b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=") == (
        b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=", True)


def test_rfc7677_vector_wrong_proof_is_refused():
    cred = make_credential(1, "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = scram.ScramServer(1, lambda u, m: cred, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(scram.AuthFailed) as e:
        server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert e.value.rfc_error == "invalid-proof"
    with pytest.raises(scram.AuthFailed):      # refused for good
        server.step(b"c=biws")


# -------------------------------------------------------------------- credentials
def test_credentials():
    salt = b"0123456789abcdef"
    for m, h in ((1, "sha256"), (2, "sha512")):
        c = make_credential(m, "pw", salt=salt, iterations=5000)
        salted = hashlib.pbkdf2_hmac(h, b"pw", salt, 5000)
        assert c == credential_from_salted(m, salt, salted, 5000)
        assert c.mechanism == m and c.iterations == 5000 and c.salt == salt
        assert len(c.stored_key) == len(c.server_key) == hashlib.new(h).digest_size
        assert verify_password(c, "pw") and not verify_password(c, "pW")
    a, b = make_credential(2, "pw"), make_credential(2, "pw")
    assert a.salt != b.salt and a.stored_key != b.stored_key and len(a.salt) == 32
    assert make_credential(2, "pw", iterations=MAX_ITERATIONS).iterations == MAX_ITERATIONS
    for bad in (dict(iterations=MIN_ITERATIONS - 1), dict(iterations=MAX_ITERATIONS + 1),
                dict(salt=b"")):
        with pytest.raises(ValueError):
            make_credential(1, "pw", **bad)
    with pytest.raises(ValueError):
        make_credential(3, "pw")
    with pytest.raises(ValueError):
        credential_from_salted(1, salt, b"", 4096)
    with pytest.raises(ValueError):
        credential_from_salted(0, salt, b"x" * 32, 4096)
    assert scram.MECHANISMS == {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)


# ------------------------------------------------------------------ full exchanges
@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange(users, mech):
    s = SaslSession(ALL, users)
    hs, s1, s2, client = scram_login(s, mech, "alice", "alice-secret")
    assert hs == (0, ALL)
    assert s1 == SaslStep(0, None, s1.reply, False, 0)
    assert s2.error_code == 0 and s2.done and s2.session_lifetime_ms == 0
    assert client.verifies(s2.reply)
    assert s.principal == "User:alice" and not s.failed and not s.authenticating
    assert not s.expired(1e12)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user,password", [("a,b=c", "odd"), ("Jürgen", "päss")])
def test_scram_user_names_escaped_and_unicode(users, mech, user, password):
    s = SaslSession(ALL, users)
    _, _, s2, client = scram_login(s, mech, user, password)
    assert s2.done and client.verifies(s2.reply)
    assert s.principal == "User:" + user


def test_scram_saslname_literal_escape_text():
    # The user literally named "=2C" is sent as "=3D2C" and must not become ",".
    cred = make_credential(2, "pw")
    seen = []
    s = SaslSession(ALL, lambda u, m: seen.append(u) or (cred if u == "=2C" else None))
    _, _, s2, _ = scram_login(s, "SCRAM-SHA-512", "=2C", "pw")
    assert seen == ["=2C"] and s2.done and s.principal == "User:=2C"


@pytest.mark.parametrize("name", ["a=b", "a=2c", "=", "a=3", "", "a\x00b"])
def test_scram_malformed_saslname(users, name):
    s = SaslSession(ALL, users)
    s.handshake("SCRAM-SHA-256")
    st = s.authenticate(("n,,n=%s,r=abc" % name).encode())
    assert st.error_code == 58 and st.error_message == GENERIC % "SCRAM-SHA-256"
    assert st.reply in (b"e=invalid-username-encoding", b"e=other-error") and s.failed


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password(users, mech):
    s = SaslSession(ALL, users)
    _, s1, s2, _ = scram_login(s, mech, "alice", "not-it")
    assert s1.error_code == 0
    assert s2 == SaslStep(58, GENERIC % mech, b"e=invalid-proof", False, 0)
    assert s.failed and s.principal is None and s.attempted_user == "alice"
    assert "not-it" not in (s.failure_reason or "")
    assert s.authenticate(b"c=biws").error_code == 34
    assert s.handshake(mech) == (34, ALL)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_unknown_user_looks_like_a_wrong_password(users, mech):
    def first(user):
        s = SaslSession(ALL, users)
        s.handshake(mech)
        return s, s.authenticate(TinyScramClient(HNAME[mech], user, "x").first())
    s, s1 = first("nobody")
    # A normal-looking challenge: same salt for the same name each time, 4096 iterations.
    attrs = dict(a.split("=", 1) for a in s1.reply.decode().split(","))
    assert s1.error_code == 0 and attrs["i"] == "4096"
    assert first("nobody")[1].reply.split(b",")[1] == s1.reply.split(b",")[1]
    assert first("nobody2")[1].reply.split(b",")[1] != s1.reply.split(b",")[1]
    _, _, s2, _ = scram_login(SaslSession(ALL, users), mech, "nobody", "x")
    _, _, w2, _ = scram_login(SaslSession(ALL, users), mech, "alice", "x")
    assert s2 == w2 == SaslStep(58, GENERIC % mech, b"e=invalid-proof", False, 0)


def test_scram_user_without_that_mechanism(users):
    _, _, s2, _ = scram_login(SaslSession(ALL, users), "SCRAM-SHA-512", "only256", "s256")
    assert s2.error_code == 58
    _, _, s2, _ = scram_login(SaslSession(ALL, users), "SCRAM-SHA-256", "only256", "s256")
    assert s2.done


def test_scram_nonce_checks(users):
    for bad in ("", "fyko+d2lbbFgONRv9qkx", "other", None):
        s = SaslSession(ALL, users)
        s.handshake("SCRAM-SHA-256")
        c = TinyScramClient("sha256", "alice", "alice-secret")
        s1 = s.authenticate(c.first())
        nonce = s1.reply.decode().split(",")[0][2:]
        st = s.authenticate(c.final(s1.reply, nonce=nonce + "x" if bad is None else bad))
        assert st.error_code == 58 and st.reply == b"e=other-error" and s.failed
    # Nonces are fresh for each exchange and extend the client's.
    s1 = SaslSession(ALL, users)
    s2 = SaslSession(ALL, users)
    r = []
    for s in (s1, s2):
        s.handshake("SCRAM-SHA-256")
        r.append(s.authenticate(b"n,,n=alice,r=abc").reply.split(b",")[0])
    assert r[0] != r[1] and all(x.startswith(b"r=abc") and len(x) > 20 for x in r)


def test_scram_channel_binding(users):
    cases = [
        (b"p=tls-unique,,n=alice,r=abc", b"e=channel-binding-not-supported"),
        (b"y,,n=alice,r=abc", b"e=other-error"),
    ]
    for first, reply in cases:
        s = SaslSession(ALL, users)
        s.handshake("SCRAM-SHA-512")
        assert s.authenticate(first) == SaslStep(58, GENERIC % "SCRAM-SHA-512", reply,
                                                 False, 0)
    # c= must repeat the gs2 header.
    for cbind in ("y,,", "n,a=alice,", "", "p=x,,"):
        s = SaslSession(ALL, users)
        s.handshake("SCRAM-SHA-512")
        c = TinyScramClient("sha512", "alice", "alice-secret")
        st = s.authenticate(c.final(s.authenticate(c.first()).reply, cbind=cbind))
        assert st.error_code == 58 and st.reply == b"e=channel-bindings-dont-match"


def test_scram_authzid(users):
    s = SaslSession(ALL, users)
    _, _, s2, c = scram_login(s, "SCRAM-SHA-256", "alice", "alice-secret", gs2="n,a=alice,")
    assert s2.done and c.verifies(s2.reply) and s.principal == "User:alice"
    # Refused before the lookup, whether or not the user exists.
    for user in ("alice", "nobody"):
        u = Users()
        s = SaslSession(ALL, u)
        _, s1, _, _ = scram_login(s, "SCRAM-SHA-256", user, "x", gs2="n,a=bob,")
        assert s1 == SaslStep(58, "Authentication failed: Client requested an authorization "
                              "id that is different from username", b"e=other-error", False, 0)
        assert u.calls == []


def test_scram_extensions(users):
    # Unknown extensions are ignored (as Kafka); tokenauth=true is refused (no tokens).
    s = SaslSession(ALL, users)
    c = TinyScramClient("sha512", "alice", "alice-secret", nonce="abc")
    c.bare += ",foo=bar"
    s.handshake("SCRAM-SHA-512")
    st = s.authenticate(c.final(s.authenticate(c.first()).reply, extra=",ext=1"))
    assert st.done and c.verifies(st.reply)
    for ext, ok in ((",tokenauth=true", False), (",tokenauth=TRUE", False),
                    (",tokenauth=false", True), (",m=1", False), (",1a=b", False),
                    (",a=", False), (",a", False)):
        s = SaslSession(ALL, users)
        s.handshake("SCRAM-SHA-512")
        st = s.authenticate(b"n,,n=alice,r=abc" + ext.encode())
        assert (st.error_code == 0) == ok, ext
    s = SaslSession(ALL, users)
    s.handshake("SCRAM-SHA-512")
    st = s.authenticate(b"n,,m=x,n=alice,r=abc")
    assert st.error_code == 58 and st.reply == b"e=extensions-not-supported"


MALFORMED_FIRST = [b"", b"\xff\xfe", b"n", b"n,", b"n,,", b"n,,n=alice", b"n,,r=abc,n=alice",
                   b"x,,n=alice,r=abc", b"n,x=1,n=alice,r=abc", b"n,,n=alice,r=",
                   b"n,,n=alice,r=a b", b"n,,n=alice,r=\xc3\xa9", b"n,,n=alice,s=abc",
                   b"n,,n=alice,r=abc,", b"N,,n=alice,r=abc", b"n,,,n=alice,r=abc"]


@pytest.mark.parametrize("first", MALFORMED_FIRST)
def test_scram_malformed_client_first(users, first):
    s = SaslSession(ALL, users)
    s.handshake("SCRAM-SHA-256")
    st = s.authenticate(first)
    assert st.error_code == 58 and st.error_message == GENERIC % "SCRAM-SHA-256"
    assert st.reply.startswith(b"e=") and s.failed and s.principal is None


def _final_variants(good: bytes):
    text = good.decode()
    without, _, proof = text.rpartition(",p=")
    raw = base64.b64decode(proof)
    return [b"", b"\xff", b"c=biws", without.encode(), text[:-3].encode(),
            (without + ",p=").encode(), (without + ",p=!!!!").encode(),
            (without + ",p=" + b64(raw[:-1])).encode(),
            (without + ",p=" + b64(raw + b"\0")).encode(),
            (without + ",p=" + proof.rstrip("=")).encode(),
            text.replace("c=biws,", "").encode(), text.replace("c=biws", "c=biw").encode(),
            text.replace("c=biws", "c=b=ws").encode(), ("r=x," + text).encode(),
            (without + ",bad,p=" + proof).encode(),
            (without + ",p=" + b64(bytes(len(raw)))).encode()]


@pytest.mark.parametrize("index", range(16))
def test_scram_malformed_client_final(users, index):
    s = SaslSession(ALL, users)
    s.handshake("SCRAM-SHA-256")
    c = TinyScramClient("sha256", "alice", "alice-secret")
    good = c.final(s.authenticate(c.first()).reply)
    st = s.authenticate(_final_variants(good)[index])
    assert st.error_code == 58 and st.error_message == GENERIC % "SCRAM-SHA-256"
    assert st.reply.startswith(b"e=") and s.failed and s.principal is None


def test_scram_random_mutations_never_raise(users):
    seed = random.randrange(2 ** 32)
    print("seed", seed)
    rng = random.Random(seed)
    accepted = 0
    for i in range(400):
        mech = rng.choice(["SCRAM-SHA-256", "SCRAM-SHA-512"])
        s = SaslSession(ALL, users)
        s.handshake(mech)
        c = TinyScramClient(HNAME[mech], "alice", "alice-secret", nonce="n%d" % i)
        msgs = [c.first()]
        target = rng.randrange(2)
        data = bytearray(msgs[0])
        if target == 0:
            _mutate(rng, data)
        st = s.authenticate(bytes(data))
        assert isinstance(st, SaslStep) and st.error_code in (0, 58), seed
        if st.error_code:
            assert s.failed and not st.done
            continue
        try:        # a mutated client-first the server took may defeat the client
            data = bytearray(c.final(st.reply))
        except (AssertionError, KeyError, ValueError):
            data = bytearray(b"c=biws")
        if target == 1:
            _mutate(rng, data)
        st = s.authenticate(bytes(data))
        assert isinstance(st, SaslStep) and st.error_code in (0, 58), seed
        assert st.done == (st.error_code == 0) == (s.principal == "User:alice"), seed
        accepted += st.done
    assert accepted < 400, seed     # mutations do get refused


def _mutate(rng, data: bytearray):
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and data:
            del data[rng.randrange(len(data)):]
        elif op == 2:
            data.insert(rng.randrange(len(data) + 1), rng.choice(b",=\x00\xff aZ"))
        elif data:
            i = rng.randrange(len(data))
            data[i:i] = data[i:i + rng.randint(1, 8)]


@pytest.mark.parametrize("seed_offset", range(3))
def test_scram_random_users_and_passwords(seed_offset):
    seed = random.randrange(2 ** 32)
    print("seed", seed)
    rng = random.Random(seed)
    alphabet = "abcXYZ019,=+ \\\"#<>;éü漢"
    user = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
    password = "".join(rng.choice(alphabet + "\x00") for _ in range(rng.randint(1, 16)))
    mech = rng.choice(["SCRAM-SHA-256", "SCRAM-SHA-512"])
    cred = make_credential(CODE[mech], password, salt=rng.randbytes(rng.randint(1, 40)),
                           iterations=rng.randint(MIN_ITERATIONS, MIN_ITERATIONS + 50))
    s = SaslSession(ALL, lambda u, m: cred if (u, m) == (user, CODE[mech]) else None)
    _, _, st, c = scram_login(s, mech, user, password)
    assert st.done and c.verifies(st.reply) and s.principal == "User:" + user, seed


def test_scram_exchange_does_no_pbkdf2(users, monkeypatch):
    calls = []
    real = hashlib.pbkdf2_hmac
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", lambda *a: calls.append(a) or real(*a))
    server = scram.ScramServer(2, users)
    client = TinyScramClient("sha512", "alice", "alice-secret")
    first = server.step(client.first())[0]
    final = client.final(first)            # the client's own PBKDF2
    del calls[:]
    assert server.step(final)[1] and calls == []


# ------------------------------------------------------------------------- PLAIN
def plain(session, message: bytes):
    assert session.handshake("PLAIN") == (0, session.enabled)
    return session.authenticate(message)


def test_plain_good(users):
    for msg in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        s = SaslSession(ALL, users)
        assert plain(s, msg) == SaslStep(0, None, b"", True, 0)
        assert s.principal == "User:alice"
    s = SaslSession(["PLAIN"], users)
    assert plain(s, "\0Jürgen\0päss".encode()).done and s.principal == "User:Jürgen"
    assert plain(SaslSession(ALL, users), b"\0only256\0s256").done


def test_plain_refusals(users):
    bad = "Authentication failed: Invalid username or password"
    cases = [
        (b"\0alice\0wrong", bad),
        (b"\0nobody\0wrong", bad),
        (b"\0alice\0alice-secret\0x", bad),         # the third NUL stays in the password
        (b"bob\0alice\0alice-secret", "Authentication failed: Client requested an "
         "authorization id that is different from username"),
        (b"\0\0alice-secret", GENERIC % "PLAIN"),   # no user name
        (b"\0alice\0", GENERIC % "PLAIN"),          # no password
        (b"\0alice", GENERIC % "PLAIN"),
        (b"alice-secret", GENERIC % "PLAIN"),
        (b"", GENERIC % "PLAIN"),
        (b"\0alice\0\xff", GENERIC % "PLAIN"),      # not UTF-8
    ]
    for msg, message in cases:
        s = SaslSession(ALL, users)
        st = plain(s, msg)
        assert st == SaslStep(58, message, b"", False, 0), msg
        assert s.failed and s.principal is None
        assert "alice-secret" not in repr(st) + (s.failure_reason or "")
        assert s.authenticate(msg).error_code == 34


def test_plain_prefers_sha512_credential():
    u = Users()
    u.add("carol", 1, "pw-256")
    u.add("carol", 2, "pw-512")
    assert plain(SaslSession(ALL, u), b"\0carol\0pw-512").done
    assert plain(SaslSession(ALL, u), b"\0carol\0pw-256").error_code == 58


def test_plain_unknown_user_costs_a_known_users_work(users, monkeypatch):
    calls = []
    real = hashlib.pbkdf2_hmac
    monkeypatch.setattr(hashlib, "pbkdf2_hmac",
                        lambda h, p, s, it: calls.append((h, it)) or real(h, p, s, it))
    for msg in (b"\0alice\0alice-secret", b"\0alice\0wrong", b"\0nobody\0wrong"):
        plain(SaslSession(ALL, users), msg)
    assert calls == [("sha512", 4096)] * 3


def test_lookup_errors_are_refusals():
    def broken(user, mechanism):
        raise RuntimeError("store down")
    s = SaslSession(ALL, broken)
    s.handshake("SCRAM-SHA-256")
    assert s.authenticate(b"n,,n=alice,r=abc") == SaslStep(
        58, GENERIC % "SCRAM-SHA-256", b"e=other-error", False, 0)
    assert plain(SaslSession(ALL, broken), b"\0alice\0pw") == SaslStep(
        58, "Authentication failed: credentials for user could not be verified", b"", False, 0)


# --------------------------------------------------------------- session states
def test_session_arguments():
    with pytest.raises(ValueError):
        SaslSession([], lambda u, m: None)
    with pytest.raises(ValueError):
        SaslSession(["GSSAPI"], lambda u, m: None)
    with pytest.raises(ValueError):
        SaslSession(["PLAIN"], lambda u, m: None, reauth_ms=-1)
    assert SaslSession(["PLAIN", "PLAIN", "SCRAM-SHA-256"], None).enabled == [
        "PLAIN", "SCRAM-SHA-256"]


def test_unsupported_mechanism(users):
    s = SaslSession(["SCRAM-SHA-512"], users)
    assert s.handshake("GSSAPI") == (33, ["SCRAM-SHA-512"])
    assert s.failed
    assert s.authenticate(b"x").error_code == 34
    s = SaslSession(["SCRAM-SHA-512"], users)
    assert s.handshake("PLAIN") == (33, ["SCRAM-SHA-512"])     # supported, not enabled


def test_illegal_sasl_state(users):
    # Before a handshake: refused and the session fails (Kafka closes).
    s = SaslSession(ALL, users)
    st = s.authenticate(b"\0alice\0alice-secret")
    assert st == SaslStep(34, "Unexpected Kafka request of type SASL_AUTHENTICATE during "
                          "SASL handshake.", b"", False, 0)
    assert s.failed and s.handshake("PLAIN") == (34, ALL)
    # A handshake in the middle of an exchange (a replay): refused, fails.
    s = SaslSession(ALL, users)
    s.handshake("SCRAM-SHA-256")
    s.authenticate(b"n,,n=alice,r=abc")
    assert s.authenticating and s.handshake("SCRAM-SHA-256") == (34, ALL) and s.failed
    # After success: SaslAuthenticate and (without re-authentication) SaslHandshake are
    # refused as KafkaApis refuses them; the session stays authenticated.
    s = SaslSession(ALL, users)
    assert plain(s, b"\0alice\0alice-secret").done
    assert s.authenticate(b"\0alice\0alice-secret") == SaslStep(
        34, "SaslAuthenticate request received after successful authentication", b"",
        False, 0)
    assert s.handshake("PLAIN") == (34, ALL)
    assert s.principal == "User:alice" and not s.failed


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_reauthentication_same_principal(users):
    clock = Clock()
    s = SaslSession(ALL, users, reauth_ms=60_000, now=clock)
    _, _, st, _ = scram_login(s, "SCRAM-SHA-512", "alice", "alice-secret")
    assert st.done and st.session_lifetime_ms == 60_000
    assert not s.expired() and not s.expired(clock.t + 60.0) and s.expired(clock.t + 60.001)
    clock.t += 50
    hs, s1, st, c = scram_login(s, "SCRAM-SHA-512", "alice", "alice-secret")
    assert hs == (0, ALL) and st.done and c.verifies(st.reply)
    assert st.session_lifetime_ms == 60_000 and s.principal == "User:alice"
    assert not s.expired(clock.t + 59)        # the lifetime restarts at re-authentication
    # A second re-authentication within a second of the last one's start: KafkaApis' answer.
    clock.t += 0.5
    assert s.handshake("SCRAM-SHA-512") == (34, ALL) and s.principal == "User:alice"
    clock.t += 0.5
    assert scram_login(s, "SCRAM-SHA-512", "alice", "alice-secret")[2].done
    # PLAIN re-authenticates in one step.
    s = SaslSession(ALL, users, reauth_ms=1000, now=clock)
    assert plain(s, b"\0bob\0bob-secret").done
    st = plain(s, b"\0bob\0bob-secret")
    assert st == SaslStep(0, None, b"", True, 1000)


def test_reauthentication_refusals(users):
    clock = Clock()
    s = SaslSession(ALL, users, reauth_ms=1000, now=clock)
    assert scram_login(s, "SCRAM-SHA-256", "alice", "alice-secret")[2].done
    # Another user: Kafka's message; the session fails.
    _, _, st, _ = scram_login(s, "SCRAM-SHA-256", "bob", "bob-secret")
    assert st == SaslStep(58, "Cannot change principals during re-authentication from "
                          "User.alice: User.bob", b"", False, 0)
    assert s.failed and s.principal is None
    # Another mechanism: the handshake is accepted, the next step refused (as Kafka).
    s = SaslSession(ALL, users, reauth_ms=1000, now=clock)
    assert scram_login(s, "SCRAM-SHA-256", "alice", "alice-secret")[2].done
    assert s.handshake("SCRAM-SHA-512") == (0, ALL)
    assert s.authenticate(b"n,,n=alice,r=abc") == SaslStep(
        58, "SASL mechanism 'SCRAM-SHA-512' requested by client is not supported for "
        "re-authentication of mechanism 'SCRAM-SHA-256'", b"", False, 0)
    assert s.failed
    # A mechanism that is not enabled.
    s = SaslSession(["PLAIN"], users, reauth_ms=1000, now=clock)
    assert plain(s, b"\0alice\0alice-secret").done
    assert s.handshake("SCRAM-SHA-256") == (33, ["PLAIN"]) and s.failed
    # A wrong password during re-authentication: Kafka's re-authentication wording.
    s = SaslSession(ALL, users, reauth_ms=1000, now=clock)
    assert scram_login(s, "SCRAM-SHA-256", "alice", "alice-secret")[2].done
    _, _, st, _ = scram_login(s, "SCRAM-SHA-256", "alice", "nope")
    assert st.error_code == 58 and st.error_message == (
        "Authentication failed during re-authentication due to invalid credentials with "
        "SASL mechanism SCRAM-SHA-256")
    assert s.failed and s.principal is None and not s.expired(1e12)


# ------------------------------------------------------- kafka-python as a client
@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_scram_client(users, mech):
    from kafka.net.sasl.scram import SaslMechanismScram
    for password, ok in (("alice-secret", True), ("wrong", False)):
        client = SaslMechanismScram(sasl_plain_username="alice", sasl_plain_password=password,
                                    sasl_mechanism=mech, security_protocol="SASL_SSL")
        s = SaslSession(ALL, users)
        assert s.handshake(mech)[0] == 0
        st = s.authenticate(client.auth_bytes())
        assert st.error_code == 0
        client.receive(st.reply)
        st = s.authenticate(client.auth_bytes())
        assert (st.error_code == 0) == ok
        if ok:
            assert client.receive(st.reply) and client.is_authenticated()   # checks our v=
            assert s.principal == "User:alice"
        else:
            assert st.error_message == GENERIC % mech and s.failed


def test_kafka_python_plain_client(users):
    from kafka.net.sasl.plain import SaslMechanismPlain
    for password, code in (("bob-secret", 0), ("wrong", 58)):
        client = SaslMechanismPlain(sasl_plain_username="bob", sasl_plain_password=password,
                                    security_protocol="SASL_SSL")
        s = SaslSession(ALL, users)
        st = plain(s, client.auth_bytes())
        assert st.error_code == code
        if code == 0:
            client.receive(st.reply)
            assert client.is_authenticated() and s.principal == "User:bob"


# ---------------------------------------------------------------------- principals
def test_parse_principal():
    assert pr.parse_principal("User:alice") == ("User", "alice")
    assert pr.parse_principal("User:CN=a,O=b:c") == ("User", "CN=a,O=b:c")
    assert pr.parse_principal("User:") == ("User", "")
    assert pr.parse_principal("Group:*") == ("Group", "*")
    for bad in ("", "alice", None, 3):
        with pytest.raises(ValueError):
            pr.parse_principal(bad)
    assert pr.ANONYMOUS == "User:ANONYMOUS" and pr.user_principal("x") == "User:x"


def rdns(*items):
    return tuple(tuple(x) if isinstance(x[0], tuple) else (x,) for x in items)


# (subject as getpeercert() gives it, what Java 17's X500Principal.getName() printed)
JAVA_CASES = [
    (rdns(("countryName", "US"), ("stateOrProvinceName", "California"),
          ("localityName", "San Francisco"), ("organizationName", "Acme, Inc."),
          (("organizationalUnitName", "Eng"), ("organizationalUnitName", "Ops")),
          ("commonName", "alice")),
     "CN=alice,OU=Eng+OU=Ops,O=Acme\\, Inc.,L=San Francisco,ST=California,C=US"),
    (rdns(("commonName", ' #lead, a+b "q" \\ <x> ;=z#  ')),
     'CN=\\ \\#lead\\, a\\+b \\"q\\" \\\\ \\<x\\> \\;\\=z\\#\\ \\ '),
    (rdns(("domainComponent", "com"), ("domainComponent", "example"), ("userId", "u1"),
          ("streetAddress", "1 Main St"), ("serialNumber", "1234"), ("title", "Boss"),
          ("emailAddress", "alice@example.com"), ("commonName", "Jürgen")),
     "CN=Jürgen,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,"
     "2.5.4.12=#0c04426f7373,2.5.4.5=#130431323334,STREET=1 Main St,UID=u1,DC=example,"
     "DC=com"),
    (rdns(("commonName", "#hash"), ("organizationName", "/slash")), "O=/slash,CN=\\#hash"),
    (rdns((("commonName", "x"), ("emailAddress", "a@b.c")), ("givenName", "Given"),
          ("surname", "Sur"), ("pseudonym", "ps")),
     "2.5.4.65=#0c027073,2.5.4.4=#0c03537572,2.5.4.42=#0c05476976656e,"
     "CN=x+1.2.840.113549.1.9.1=#16056140622e63"),
    (rdns(("title", "T" * 200), ("commonName", "  two lead"), ("organizationName", "trail two  "),
          ("organizationalUnitName", "   ")),
     "OU=\\ \\ \\ ,O=trail two\\ \\ ,CN=\\ \\ two lead,2.5.4.12=#0c81c8" + "54" * 200),
    (rdns(("title", "Bösé"), ("description", "d=1,2"), ("dnQualifier", "dq"),
          ("jurisdictionCountryName", "US"), (("givenName", "G"), ("surname", "S"))),
     "2.5.4.42=#0c0147+2.5.4.4=#0c0153,1.3.6.1.4.1.311.60.2.1.3=#13025553,"
     "2.5.4.46=#13026471,2.5.4.13=#0c05643d312c32,2.5.4.12=#0c0642c3b673c3a9"),
    (rdns(("organizationName", "tab\tx"), ("commonName", "a\\b")), "CN=a\\\\b,O=tab\tx"),
    (rdns(("commonName", "\rx\r"), ("organizationName", "x\ry")), "O=x\ry,CN=\\\rx\\\r"),
]


@pytest.mark.parametrize("subject,expected", JAVA_CASES)
def test_ssl_principal_as_java_prints_it(subject, expected):
    assert pr.ssl_principal({"subject": subject, "issuer": ()}) == "User:" + expected


def test_ssl_principal_edges():
    assert pr.ssl_principal(None) == pr.ANONYMOUS
    assert pr.ssl_principal({}) == pr.ANONYMOUS           # certificate not verified
    assert pr.ssl_principal({"subject": ()}) == "User:"
    long_value = "v" * 300                                  # two-byte DER length
    assert pr.rfc2253_name(rdns(("title", long_value))) == (
        "2.5.4.12=#0c82012c" + "76" * 300)
    assert pr.rfc2253_name(rdns(("1.2.3.4", "ab"))) == "1.2.3.4=#0c026162"
    assert pr.rfc2253_name(rdns(("someName", "a,b"))) == "someName=a\\,b"
