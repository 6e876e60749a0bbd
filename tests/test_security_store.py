"""security/records.py (the record codec, SecurityState), the file store of security/store.py
(reopen, crash leftovers of a compaction, bounded growth, two writers) and `groupcoord users`
on a file store, in process. The PostgreSQL store: tests/test_security_store_pg.py."""
import asyncio
import base64
import io
import json
import os
import random
import sys
import threading

import pytest

from groupcoord.cli import main as cli_main
from groupcoord.groups.records import Record, encode_record
from groupcoord.protocol import messages as m
from groupcoord.security import store as store_mod
from groupcoord.security.acl import AclBinding
from groupcoord.security.records import (ACL_BINDING, USER_SCRAM_CREDENTIAL,
                                         SecurityRecordError, SecurityState,
                                         UnknownRecordTypeError, acl_record, acl_tombstone,
                                         credential_record, credential_tombstone,
                                         decode_security_record)
from groupcoord.security.scram import ScramCredential, make_credential, verify_password
from groupcoord.security.store import FileSecurityStore, live_records
from groupcoord.storage import Log, encode_batch

TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, DESCRIBE = 3, 4, 8
DENY, ALLOW = 2, 3
SHA256, SHA512 = 1, 2


def run(coro):
    return asyncio.run(coro)


def cred(mech=SHA512, seed=0, iterations=4096):
    """A credential with arbitrary key bytes (no PBKDF2: the codec does not care)."""
    rnd = random.Random(seed)
    n = 32 if mech == SHA256 else 64
    return ScramCredential(mech, rnd.randbytes(16), rnd.randbytes(n), rnd.randbytes(n),
                           iterations)


def acl(name="a-", principal="User:alice", op=READ, perm=ALLOW, rtype=GROUP,
        pattern=PREFIXED, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def state_of(records):
    return SecurityState.replay(records)


def snapshot(state):
    return ({u: dict(ms) for u, ms in state.users.items()}, set(state.acls))


# ---------------------------------------------------------------------- records
def test_credential_record_round_trip_and_layout():
    for mech in (SHA256, SHA512):
        c = make_credential(mech, "pässword", salt=b"salt-bytes", iterations=8192)
        key, value = credential_record("alice", c)
        assert key[:2] == USER_SCRAM_CREDENTIAL.to_bytes(2, "big")
        # key: string (int16 length) + int8 mechanism, nothing else
        assert key[2:] == b"\x00\x05alice" + bytes([mech])
        assert value[:2] == b"\x00\x00"                         # value version 0
        assert decode_security_record(key, value) == (USER_SCRAM_CREDENTIAL, "alice", mech, c)
        tkey, tvalue = credential_tombstone("alice", mech)
        assert (tkey, tvalue) == (key, None)
        assert decode_security_record(tkey, None) == (USER_SCRAM_CREDENTIAL, "alice", mech,
                                                      None)


def test_acl_record_round_trip_and_canonical_keys():
    bindings = [acl(), acl("t", "User:*", WRITE, DENY, TOPIC, LITERAL, "10.0.0.1"),
                acl("kafka-cluster", "User:admin", 2, ALLOW, CLUSTER, LITERAL),
                acl("grüppe-✓", "User:CN=bob,O=x", DESCRIBE, ALLOW, GROUP, LITERAL),
                acl("", "User:", READ, ALLOW, 5, LITERAL)]          # stored like Kafka's
    keys = set()
    for b in bindings:
        key, value = acl_record(b)
        assert key[:2] == ACL_BINDING.to_bytes(2, "big")
        assert value == b"\x00\x00\x00"     # v0, an empty flexible struct (no tagged field)
        assert decode_security_record(key, value) == (ACL_BINDING, b, True)
        assert acl_tombstone(b) == (key, None)
        assert decode_security_record(key, None) == (ACL_BINDING, b, False)
        assert acl_record(AclBinding(*b)) == (key, value)           # equal binding, equal key
        keys.add(key)
    assert len(keys) == len(bindings)
    # every field is part of the key
    base = acl()
    variants = [base._replace(**{f: v}) for f, v in (
        ("resource_type", TOPIC), ("name", "a-1"), ("pattern_type", LITERAL),
        ("principal", "User:bob"), ("host", "1.2.3.4"), ("operation", WRITE),
        ("permission", DENY))]
    assert len({acl_record(b)[0] for b in [base] + variants}) == 8


def test_a_newer_value_version_is_read_by_its_known_fields():
    c = cred()
    key, value = credential_record("u", c)
    newer = b"\x00\x01" + value[2:] + b"\x07more fields of a later version"
    assert decode_security_record(key, newer)[3] == c
    akey, avalue = acl_record(acl())
    assert decode_security_record(akey, b"\x00\x03\x00")[2] is True


def test_an_unknown_record_type_is_a_typed_error_naming_it_and_changes_nothing():
    state = state_of([acl_record(acl())])
    before = (snapshot(state), state.version)
    # a coordinator record (offset commit, type 1) does not belong in the security store
    key, value = encode_record(Record(m.OffsetCommitKey(group="g", topic="t", partition=0),
                                      m.OffsetCommitValue(offset=1)))
    for k, v, t in ((key, value, 1), (b"\x00\x7f", None, 127), (b"\xff\xff\x00", b"", -1)):
        with pytest.raises(UnknownRecordTypeError, match="type %d" % t) as e:
            state.apply(k, v)
        assert e.value.record_type == t
        assert isinstance(e.value, SecurityRecordError)
    assert (snapshot(state), state.version) == before


def test_malformed_records_are_errors_and_change_nothing():
    state = SecurityState()
    key, value = credential_record("alice", cred())
    akey, _ = acl_record(acl())
    for k, v in ((b"", None), (b"\x00", None), (key[:-1], value), (key[:5], None),
                 (key + b"\x00", value), (akey + b"\x01", None),    # not the canonical key
                 (key, value[:1]), (key, value[:-3]), (key, b"\x80\x00" + value[2:]),
                 (akey[:-2], b"\x00\x00")):
        with pytest.raises(SecurityRecordError):
            state.apply(k, v)
    assert state.version == 0 and not state.users and not state.acls


# ---------------------------------------------------------------------- state
def test_replay_order_decides_and_tombstones_delete():
    c1, c2 = cred(seed=1), cred(seed=2)
    r1, r2 = credential_record("alice", c1), credential_record("alice", c2)
    assert state_of([r1, r2]).credential("alice", SHA512) == c2
    assert state_of([r2, r1]).credential("alice", SHA512) == c1
    s = state_of([r1, credential_record("alice", cred(SHA256, 3)),
                  credential_tombstone("alice", SHA512)])
    assert s.credential("alice", SHA512) is None
    assert set(s.users["alice"]) == {SHA256}
    s.apply(*credential_tombstone("alice", SHA256))
    assert "alice" not in s.users                    # no mechanism left: no user
    assert s.credential("alice", SHA256) is None
    s.apply(*credential_tombstone("nobody", SHA256))     # deleting nothing: only the version
    assert s.version == 5 and not s.users

    b = acl()
    s = state_of([acl_record(b), acl_record(b)])
    assert s.acls == {b}
    s.apply(*acl_tombstone(b))
    assert s.acls == frozenset()
    s.apply(*acl_record(b))
    assert s.acls == {b}
    assert s.version == 4


def test_acls_read_earlier_are_not_changed_by_later_records():
    b1, b2 = acl("x"), acl("y")
    s = state_of([acl_record(b1)])
    seen = s.acls
    assert s.acls is seen                            # no change: the same snapshot
    s.apply(*acl_record(b2))
    s.apply(*acl_tombstone(b1))
    assert seen == {b1} and isinstance(seen, frozenset)
    assert s.acls == {b2}


def _random_ops(seed, n):
    """Random security records over a few users and bindings, with the expected state."""
    rnd = random.Random(seed)
    users = ["u%d" % i for i in range(4)] + ["ü-✓"]
    bindings = [acl("g%d" % i, "User:%s" % rnd.choice(users), rnd.choice((READ, DESCRIBE)),
                    rnd.choice((ALLOW, DENY)), rnd.choice((GROUP, TOPIC)),
                    rnd.choice((LITERAL, PREFIXED))) for i in range(6)]
    creds, acls, records = {}, set(), []
    for i in range(n):
        r = rnd.random()
        if r < 0.35:
            u, mech = rnd.choice(users), rnd.choice((SHA256, SHA512))
            c = cred(mech, seed * 100_000 + i, rnd.choice((4096, 8192)))
            creds[(u, mech)] = c
            records.append(credential_record(u, c))
        elif r < 0.5:
            u, mech = rnd.choice(users), rnd.choice((SHA256, SHA512))
            creds.pop((u, mech), None)
            records.append(credential_tombstone(u, mech))
        elif r < 0.8:
            b = rnd.choice(bindings)
            acls.add(b)
            records.append(acl_record(b))
        else:
            b = rnd.choice(bindings)
            acls.discard(b)
            records.append(acl_tombstone(b))
    users_model = {}
    for (u, mech), c in creds.items():
        users_model.setdefault(u, {})[mech] = c
    return records, (users_model, acls)


@pytest.mark.parametrize("seed", range(5))
def test_replay_matches_a_model_and_compaction_keeps_the_state(seed):
    records, model = _random_ops(seed, 400)
    s = state_of(records)
    assert snapshot(s) == model
    assert s.version == len(records)
    live = live_records(records)
    assert all(v is not None for _k, v in live)
    assert len({k for k, _v in live}) == len(live)
    assert snapshot(state_of(live)) == model


# ---------------------------------------------------------------------- file store
def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def test_file_store_appends_load_in_order_and_survive_reopen(tmp_path):
    d = str(tmp_path / "data")
    st = FileSecurityStore(d)
    assert run(st.load()) == []
    assert not os.path.exists(d)                     # loading nothing creates nothing
    batches = [[credential_record("alice", cred(seed=1))],
               [acl_record(acl()), acl_record(acl("t", rtype=TOPIC, pattern=LITERAL))],
               [credential_tombstone("alice", SHA512), credential_record("bob", cred(SHA256))]]
    for b in batches:
        run(st.append(b))
    run(st.append([]))                                # nothing to store: no batch
    assert run(st.poll()) == []                       # the file store has no followers
    want = [r for b in batches for r in b]
    assert run(st.load()) == want
    run(st.close())
    with pytest.raises(RuntimeError, match="closed"):
        run(st.load())
    again = FileSecurityStore(d)                      # a restart
    assert run(again.load()) == want
    assert sorted(os.listdir(d)) == ["security", "security.lock"]
    log = Log(os.path.join(d, "security"))            # one batch per append
    try:
        assert [o for o, _k, _v in log.read(0)] == list(range(5))
        assert len(log.segments()) == 1 and log.next_offset == 5
    finally:
        log.close()


def test_file_store_reopens_after_a_torn_write(tmp_path):
    d = str(tmp_path)
    st = FileSecurityStore(d)
    want = [credential_record("alice", cred(seed=1)), acl_record(acl())]
    for r in want:
        run(st.append([r]))
    seg = os.path.join(d, "security", "00000000000000000000.log")
    ckpt = os.path.join(d, "security", "log-checkpoint")
    whole, checkpoint = open(seg, "rb").read(), open(ckpt, "rb").read()
    run(st.append([credential_record("bob", cred(seed=2))]))
    # What a crash in the middle of that append's write leaves: half its batch at the tail,
    # and the checkpoint of the last clean close (the append never got to its own).
    torn = open(seg, "rb").read()
    with open(seg, "wb") as f:
        f.write(torn[:len(whole) + (len(torn) - len(whole)) // 2])
    with open(ckpt, "wb") as f:
        f.write(checkpoint)
    reopened = FileSecurityStore(d)
    assert run(reopened.load()) == want
    assert os.path.getsize(seg) == len(whole)        # the torn batch was cut off
    run(reopened.append([acl_tombstone(acl())]))
    assert run(FileSecurityStore(d).load()) == want + [acl_tombstone(acl())]


class Crash(Exception):
    pass


def _grown_store(d, n=120):
    """A store whose log has n overwrites of two keys (compaction would pay)."""
    st = FileSecurityStore(d, compact_min_bytes=1 << 30)
    for i in range(n):
        run(st.append([credential_record("u%d" % (i % 2), cred(seed=i))]))
    return st, [credential_record("u%d" % (i % 2), cred(seed=i)) for i in range(n)]


@pytest.mark.parametrize("crash_at", ["first rename", "second rename", "removing old",
                                      "torn compacting log"])
def test_a_crash_during_compaction_keeps_the_state(tmp_path, monkeypatch, crash_at):
    d = str(tmp_path)
    _st, records = _grown_store(d)
    want = snapshot(state_of(records))
    real_rename, real_rmtree = os.rename, store_mod.shutil.rmtree
    renames = []

    def rename(a, b):
        renames.append((a, b))
        if crash_at == "first rename" or (crash_at == "second rename" and len(renames) == 2):
            raise Crash(crash_at)
        real_rename(a, b)

    def rmtree(path, *a, **k):
        if crash_at == "removing old" and path.endswith(".old"):
            raise Crash(crash_at)
        real_rmtree(path, *a, **k)
    if crash_at == "torn compacting log":
        # A crash while the new log was written: a compacting directory with a torn batch.
        os.makedirs(os.path.join(d, "security.compacting"))
        with open(os.path.join(d, "security.compacting", "00000000000000000000.log"),
                  "wb") as f:
            f.write(b"\x00" * 30)
    else:
        monkeypatch.setattr(store_mod.os, "rename", rename)
        monkeypatch.setattr(store_mod.shutil, "rmtree", rmtree)
        with pytest.raises(Crash):
            run(FileSecurityStore(d, compact_min_bytes=1024).load())
        monkeypatch.undo()
        assert any(n.startswith("security.") and n != "security.lock" for n in os.listdir(d))
    after = FileSecurityStore(d, compact_min_bytes=1 << 30)
    assert snapshot(state_of(run(after.load()))) == want
    assert sorted(os.listdir(d)) == ["security", "security.lock"]
    # and the store works on: appends, and a compaction to the one live record
    run(after.append([credential_tombstone("u0", SHA512)]))
    final = FileSecurityStore(d, compact_min_bytes=64)
    assert live_records(run(final.load())) == [records[-1]]      # u1's latest; u0 deleted
    assert run(FileSecurityStore(d).load()) == [records[-1]]


def test_compaction_on_open_when_the_log_has_grown(tmp_path):
    d = str(tmp_path)
    _st, records = _grown_store(d, 300)
    seg_dir = os.path.join(d, "security")
    grown = dir_bytes(seg_dir)
    small = FileSecurityStore(d, compact_min_bytes=4096)
    live = run(small.load())
    assert small.compactions == 1
    assert live == live_records(records) == records[-2:]
    assert dir_bytes(seg_dir) < grown // 50
    assert sorted(os.listdir(seg_dir)) == ["00000000000000000000.log", "log-checkpoint"]
    assert run(FileSecurityStore(d).load()) == live
    # Below the threshold, or with more live than dead records, nothing is rewritten.
    untouched = FileSecurityStore(d, compact_min_bytes=4096)
    run(untouched.load())
    assert untouched.compactions == 0


def test_compaction_keeps_the_log_bounded_under_churn(tmp_path):
    d = str(tmp_path)
    min_bytes = 1024
    st = FileSecurityStore(d, compact_min_bytes=min_bytes)
    rnd = random.Random(11)
    users = ["alice", "bob", "carol"]
    bindings = [acl("g%d" % i) for i in range(8)]
    model_records, written, biggest, most_live = [], 0, 0, 0
    for i in range(600):
        r = rnd.random()
        if r < 0.5:
            rec = credential_record(rnd.choice(users), cred(rnd.choice((SHA256, SHA512)), i))
        elif r < 0.6:
            rec = credential_tombstone(rnd.choice(users), rnd.choice((SHA256, SHA512)))
        elif r < 0.8:
            rec = acl_record(rnd.choice(bindings))
        else:
            rec = acl_tombstone(rnd.choice(bindings))
        run(st.append([rec]))
        model_records.append(rec)
        written += len(encode_batch([rec], 0, 0))
        live = live_records(model_records)
        most_live = max(most_live, len(encode_batch(live, 0, 0)) if live else 0)
        seg_dir = os.path.join(d, "security")
        biggest = max(biggest, dir_bytes(seg_dir))
        assert len(os.listdir(seg_dir)) <= 2               # one segment (+ checkpoint)
    # twice the live size at most (or the floor), plus one append and the checkpoint file
    assert biggest <= max(min_bytes, 2 * most_live) + 400
    assert written > 10 * biggest                          # far more went through than kept
    assert st.compactions > 10
    want = snapshot(state_of(model_records))
    assert snapshot(state_of(run(FileSecurityStore(d).load()))) == want


def test_deleting_everything_compacts_to_an_empty_log(tmp_path):
    d = str(tmp_path)
    st = FileSecurityStore(d, compact_min_bytes=2048)
    bindings = [acl("g%d" % i) for i in range(40)]
    run(st.append([acl_record(b) for b in bindings]))
    for b in bindings:
        run(st.append([acl_tombstone(b)]))
        assert dir_bytes(os.path.join(d, "security")) <= 2 * 2048 + 200
    assert st.compactions >= 1
    assert state_of(run(FileSecurityStore(d).load())).acls == frozenset()
    last = FileSecurityStore(d, compact_min_bytes=64)
    assert run(last.load()) == []
    assert last.compactions == 1
    assert os.listdir(os.path.join(d, "security")) == ["00000000000000000000.log"]
    assert dir_bytes(os.path.join(d, "security")) == 0     # nothing to vouch for: no checkpoint


def test_two_writers_on_one_data_directory_never_mix_their_batches(tmp_path):
    # A node and the users command: two store objects on one directory at the same time.
    d = str(tmp_path)
    a, b = FileSecurityStore(d), FileSecurityStore(d)
    errors = []

    def writer(st, who):
        try:
            for i in range(40):
                run(st.append([acl_record(acl("%s%d" % (who, i))),
                               acl_record(acl("%s%d" % (who, i), op=WRITE))]))
        except BaseException as e:          # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(a, "a")),
               threading.Thread(target=writer, args=(b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = [decode_security_record(k, v)[1] for k, v in run(FileSecurityStore(d).load())]
    assert len(got) == 160
    for who in "ab":
        mine = [(x.name, x.operation) for x in got if x.name.startswith(who)]
        assert mine == [(who + str(i), op) for i in range(40) for op in (READ, WRITE)]
    for i in range(0, 160, 2):                        # each append's two records together
        assert got[i].name == got[i + 1].name


# ---------------------------------------------------------------------- users CLI
def users(args, stdin=b"", monkeypatch=None):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        return cli_main(["users"] + args)
    except SystemExit as e:                 # argparse: --help, usage errors
        return e.code


def stored_users(d):
    return state_of(run(FileSecurityStore(d).load())).users


def test_users_cli_set_list_delete_on_a_file_store(tmp_path, monkeypatch, capsys):
    d = str(tmp_path / "data")                         # does not exist yet: before any start
    assert users(["set", "alice", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                  "--data-dir", d], b"alice-secret\n", monkeypatch) == 0
    out = capsys.readouterr()
    assert "alice" in out.out and "SCRAM-SHA-512" in out.out
    assert "next start" in out.err
    c = stored_users(d)["alice"][SHA512]
    assert verify_password(c, "alice-secret")          # one trailing newline dropped
    assert c.iterations == 4096
    assert users(["set", "bob", "--mechanism", "scram-sha-256", "--mechanism", "SCRAM-SHA-512",
                  "--password-stdin", "--iterations", "8192", "--store", "file:" + d],
                 b" bob pw \r\n", monkeypatch) == 0
    bob = stored_users(d)["bob"]
    assert set(bob) == {SHA256, SHA512}
    assert all(verify_password(x, " bob pw ") and x.iterations == 8192 for x in bob.values())
    capsys.readouterr()
    assert users(["list", "--data-dir", d], monkeypatch=monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "MECHANISM", "ITERATIONS"]
    assert [x.split() for x in lines[1:]] == [["alice", "SCRAM-SHA-512", "4096"],
                                              ["bob", "SCRAM-SHA-256", "8192"],
                                              ["bob", "SCRAM-SHA-512", "8192"]]
    assert users(["list", "--json", "--store", "file:" + d], monkeypatch=monkeypatch) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        {"name": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"name": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    # replace a password
    assert users(["set", "alice", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                  "--data-dir", d], b"new", monkeypatch) == 0
    assert verify_password(stored_users(d)["alice"][SHA512], "new")
    # delete one mechanism, then a whole user
    assert users(["delete", "bob", "--mechanism", "SCRAM-SHA-256", "--data-dir", d],
                 monkeypatch=monkeypatch) == 0
    assert set(stored_users(d)["bob"]) == {SHA512}
    assert users(["delete", "alice", "--data-dir", d], monkeypatch=monkeypatch) == 0
    assert set(stored_users(d)) == {"bob"}
    capsys.readouterr()
    # nothing to delete: exit 1 with a message
    assert users(["delete", "alice", "--data-dir", d], monkeypatch=monkeypatch) == 1
    assert "no user alice" in capsys.readouterr().err
    assert users(["delete", "bob", "--mechanism", "SCRAM-SHA-256", "--data-dir", d],
                 monkeypatch=monkeypatch) == 1
    assert "no SCRAM-SHA-256 credential" in capsys.readouterr().err
    assert set(stored_users(d)["bob"]) == {SHA512}


def test_users_list_never_shows_secrets(tmp_path, monkeypatch, capsys):
    d = str(tmp_path)
    assert users(["set", "alice", "--mechanism", "SCRAM-SHA-256", "--mechanism",
                  "SCRAM-SHA-512", "--password-stdin", "--data-dir", d],
                 b"hunter2-password", monkeypatch) == 0
    capsys.readouterr()
    assert users(["list", "--data-dir", d], monkeypatch=monkeypatch) == 0
    text = capsys.readouterr().out
    assert users(["list", "--json", "--data-dir", d], monkeypatch=monkeypatch) == 0
    text += capsys.readouterr().out
    assert "hunter2" not in text
    for c in stored_users(d)["alice"].values():
        for secret in (c.salt, c.stored_key, c.server_key):
            for form in (secret.hex(), secret.hex().upper(),
                         base64.b64encode(secret).decode(), repr(secret)):
                assert form not in text
    # and the store holds no password either, only the derived credential
    raw = open(os.path.join(d, "security", "00000000000000000000.log"), "rb").read()
    assert b"hunter2" not in raw


@pytest.mark.parametrize("argv, stdin, message", [
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"", "empty password"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"\n", "empty password"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"one\ntwo\n",
     "more than one line"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"pw\n\n",
     "more than one line"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"\xff\xfe",
     "not UTF-8"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin", "--iterations", "100"],
     b"pw", "--iterations must be 4096 to 16384"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin", "--iterations",
      "16385"], b"pw", "--iterations"),
    (["set", "", "--mechanism", "SCRAM-SHA-512", "--password-stdin"], b"pw", "name is empty"),
    (["set", "a", "--mechanism", "SCRAM-SHA-1", "--password-stdin"], b"pw",
     "not a SCRAM mechanism"),
    (["set", "a", "--mechanism", "PLAIN", "--password-stdin"], b"pw",
     "not a SCRAM mechanism"),
    (["set", "a", "--password-stdin"], b"pw", "--mechanism"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512"], b"pw", "--password-stdin"),
    (["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin", "--store", "x:y",
      "--data-dir", "z"], b"pw", "not allowed with"),
    (["list", "--store", "mysql://h/db"], b"", "expected file:DIR or postgresql://"),
    (["list", "--store", "file:"], b"", "needs a directory"),
    (["delete"], b"", "NAME"),
    (["frobnicate"], b"", "invalid choice"),
])
def test_users_cli_usage_errors_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys,
                                                         argv, stdin, message):
    monkeypatch.chdir(tmp_path)                     # the default data directory is here
    if "--store" not in argv and "--data-dir" not in argv and argv[0] != "frobnicate":
        argv = argv + ["--data-dir", str(tmp_path / "d")]
    assert users(argv, stdin, monkeypatch) == 2
    assert message in capsys.readouterr().err
    assert os.listdir(tmp_path) == []               # no store was created


def test_users_cli_store_errors_exit_1(tmp_path, monkeypatch, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    assert users(["list", "--data-dir", str(f)], monkeypatch=monkeypatch) == 1
    assert "exists but is not a directory" in capsys.readouterr().err
    assert users(["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                  "--data-dir", str(f)], b"pw", monkeypatch) == 1
    assert "not a directory" in capsys.readouterr().err
    # a corrupt log is reported, not a traceback
    d = tmp_path / "d"
    assert users(["set", "a", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                  "--data-dir", str(d)], b"pw", monkeypatch) == 0
    assert users(["set", "b", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                  "--data-dir", str(d)], b"pw", monkeypatch) == 0
    seg = d / "security" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF                                # inside the first (fsynced) batch
    seg.write_bytes(bytes(data))
    capsys.readouterr()
    assert users(["list", "--data-dir", str(d)], monkeypatch=monkeypatch) == 1
    err = capsys.readouterr().err
    assert "cannot use the store file:%s" % d in err and "Traceback" not in err


def test_users_cli_default_store_and_help(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert users(["list"], monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out.strip() == "no users"
    assert os.listdir(tmp_path) == []               # listing creates nothing
    assert users(["set", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin"],
                 b"pw", monkeypatch) == 0
    assert set(stored_users(str(tmp_path / "groupcoord-data"))) == {"alice"}  # serve's default
    for argv in (["--help"], ["set", "--help"], ["delete", "--help"], ["list", "--help"]):
        capsys.readouterr()
        assert users(argv, monkeypatch=monkeypatch) == 0
        assert "usage: groupcoord users" in capsys.readouterr().out
    assert users(["set", "--help"], monkeypatch=monkeypatch) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "standard input" in text and "never written" in text
