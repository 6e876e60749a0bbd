"""`groupcoord serve --config FILE` (server/config_file.py) and the configuration reference
(docs/config.md).

Unit: docs/config.md is exactly what `groupcoord serve --print-config-reference` prints now
(regenerate it with config_file.REGENERATE); the properties syntax, every option by its own key
and by Kafka's names, flags win (scalars, repeatables, --group-config, --store/--data-dir),
unknown keys and bad values (exit 2, FILE:LINE), the options a --processes supervisor hands its
nodes. Integration (marked): `groupcoord serve --config FILE` processes whose port, listener and
topics come from the file and one of them from the command line, and --processes.
"""
import argparse
import os
import re
import socket
import sys
import urllib.request

import pytest

import groupcoord.protocol as P
from groupcoord.cli import main as cli_main
from groupcoord.properties import PropertiesError, iter_properties
from groupcoord.runtime import shard_for
from groupcoord.server import config_file
from groupcoord.server.main import add_serve_parser, parse_group_config
from groupcoord.server.processes import child_argv, owner_of
from serve_proc import RawClient, ServeError, ServeProc

M = P.messages
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "config.md")
METRICS_LOG = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")


def serve_parser():
    return add_serve_parser(argparse.ArgumentParser(prog="groupcoord").add_subparsers())


def parse(*argv):
    p = argparse.ArgumentParser(prog="groupcoord")
    add_serve_parser(p.add_subparsers(dest="command"))
    return p.parse_args(["serve", *argv])


def write(tmp_path, text, name="server.properties"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def refused(capsys, *argv):
    """Parsing fails as a bad flag does: exit status 2, one error line -> that line."""
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


# ============================================================================ the reference
@pytest.mark.unit
def test_docs_config_md_is_the_generated_reference(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--print-config-reference"])
    assert e.value.code == 0
    generated = capsys.readouterr().out
    with open(DOC, encoding="utf-8") as f:
        stored = f.read()
    assert stored == generated, (
        "docs/config.md is not what the serve parser generates now; regenerate it from the "
        "repository root:\n    %s" % config_file.REGENERATE)


@pytest.mark.unit
def test_the_reference_has_every_option_its_keys_and_every_group_setting():
    parser = serve_parser()
    text = config_file.reference_markdown(parser)
    for a in parser._actions:
        if not a.option_strings or a.dest == "help" or a.help == argparse.SUPPRESS:
            continue
        flag = max(a.option_strings, key=len)
        assert re.search(r"^### %s\b" % re.escape(flag), text, re.M), flag
        section = text.split("### " + flag, 1)[1].split("\n### ", 1)[0]
        for key in config_file.option_keys(a):
            assert re.search(r"- keys: .*\b%s\b" % re.escape(key), section), (flag, key)
        assert "- type: " in section and "- default: " in section
    for name, default in config_file._group_settings(parser):
        assert re.search(r"^\| %s \| (integer|list) \| " % re.escape(name), text, re.M), name
    assert "--process-node" not in text          # internal (help suppressed)


@pytest.mark.unit
def test_aliases_name_options_that_exist_and_no_key_is_taken_twice():
    parser = serve_parser()
    dests = {a.dest for a in parser._actions}
    assert set(config_file.ALIASES) <= dests
    assert set(config_file.SEPARATORS) <= dests
    keys = [k for a in config_file._options(parser) for k in config_file.option_keys(a)]
    keys += [n for n, _d in config_file._group_settings(parser)]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert not set(config_file.REFUSED) & set(keys)
    own = {config_file._own_key(a) for a in config_file._options(parser)}
    assert config_file.KAFKA_SAME <= own


# ============================================================================ syntax
@pytest.mark.unit
def test_properties_syntax_and_line_numbers(tmp_path):
    text = ("# a comment\n"
            "! another\n"
            "\n"
            "   port = 9100\r\n"
            "host: 127.0.0.2\n"
            "shards 7\n"
            "topic=orders:3,\\\n"
            "      payments:2,\\\n"
            "   audit:1\n"
            "advertised.host=coord\\u0031.example\n"
            "metrics.host=\\ spaced\n")
    assert [(n, k) for n, k, _v in iter_properties(text)] == [
        (4, "port"), (5, "host"), (6, "shards"), (7, "topic"), (10, "advertised.host"),
        (11, "metrics.host")]
    with pytest.raises(PropertiesError) as e:
        list(iter_properties("a=1\n\nb=\\u00zz\n"))
    assert e.value.lineno == 3
    ns = parse("--config", write(tmp_path, text))
    assert (ns.port, ns.host, ns.shards) == (9100, "127.0.0.2", 7)
    assert ns.topic == ["orders:3", "payments:2", "audit:1"]
    assert ns.advertised_host == "coord1.example"
    assert ns.metrics_host == "spaced"       # blanks around a value dropped, as Kafka does


@pytest.mark.unit
def test_every_kind_of_option_by_its_own_key(tmp_path):
    ns = parse("--config", write(tmp_path, (
        "data.dir=/srv/gc\n"
        "max.connections=5000\n"
        "connections.max.idle.ms=0\n"
        "fsync=unsafe-no-fsync\n"
        "allow.create.topics=TRUE\n"
        "allow.delete.topics=false\n"
        "log.level=debug\n"
        "log.format=json\n"
        "metrics.port=9500\n"
        "web.auth=none\n"
        "listener=PLAINTEXT://127.0.0.1:9000, SSL://127.0.0.1:9001\n"
        "sasl.mechanism=PLAIN\n"
        "allow.if.no.acl=no\n"
        "processes=3\n")))
    assert ns.data_dir == "/srv/gc" and ns.max_connections == 5000
    assert ns.connections_max_idle_ms == 0 and ns.fsync == "unsafe-no-fsync"
    assert ns.allow_create_topics is True and ns.allow_delete_topics is False
    assert ns.log_level == "DEBUG"               # the flag's own type (str.upper) ran
    assert (ns.log_format, ns.metrics_port, ns.web_auth) == ("json", 9500, "none")
    assert ns.listener == ["PLAINTEXT://127.0.0.1:9000", "SSL://127.0.0.1:9001"]
    assert ns.sasl_mechanism == ["PLAIN"] and ns.allow_if_no_acl is False
    assert ns.processes == 3
    # Untouched options keep their defaults.
    assert ns.port == 9092 and ns.shards == 50 and ns.topic == []


@pytest.mark.unit
def test_kafka_names_of_the_same_settings(tmp_path):
    pem = tmp_path / "server.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    ns = parse("--config", write(tmp_path, (
        "listeners=SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092\n"
        "super.users=User:CN=admin,OU=ops;User:bob\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256\n"
        "allow.everyone.if.no.acl.found=false\n"
        "ssl.client.auth=requested\n"
        "ssl.keystore.type=PEM\n"
        "ssl.keystore.location=%s\n"
        "ssl.truststore.type=pem\n"
        "ssl.truststore.location=/etc/gc/ca.pem\n"
        "connections.max.reauth.ms=3600000\n"
        "connection.failed.authentication.delay.ms=250\n"
        "queued.max.request.bytes=1000000\n"
        "socket.request.max.bytes=2000000\n"
        "delete.topic.enable=true\n"
        "log.dirs=/var/lib/gc\n"
        "node.id=3\n" % pem)))
    assert ns.listener == ["SASL_SSL://127.0.0.1:9093", "PLAINTEXT://127.0.0.1:9092"]
    # super.users is semicolon-separated: a certificate's principal keeps its commas.
    assert ns.super_user == ["User:CN=admin,OU=ops", "User:bob"]
    assert ns.sasl_mechanism == ["SCRAM-SHA-512", "SCRAM-SHA-256"]
    assert ns.allow_if_no_acl is False and ns.ssl_client_auth == "requested"
    assert ns.ssl_certfile == str(pem) and ns.ssl_cafile == "/etc/gc/ca.pem"
    assert ns.connections_max_reauth_ms == 3_600_000
    assert ns.failed_authentication_delay_ms == 250
    assert ns.queued_max_request_bytes == 1_000_000 and ns.max_frame_bytes == 2_000_000
    assert ns.allow_delete_topics is True and ns.data_dir == "/var/lib/gc"
    assert ns.node_id == 3
    # librdkafka's names of the PEM files.
    ns = parse("--config", write(tmp_path, "ssl.certificate.location=/c.pem\n"
                                           "ssl.key.location=/k.pem\nssl.ca.location=/ca.pem\n",
                                 "librdkafka.properties"))
    assert (ns.ssl_certfile, ns.ssl_keyfile, ns.ssl_cafile) == ("/c.pem", "/k.pem", "/ca.pem")


@pytest.mark.unit
def test_group_settings_are_keys_and_the_command_line_adds_to_them(tmp_path):
    path = write(tmp_path, ("group.initial.rebalance.delay.ms=0\n"
                            "group.consumer.session.timeout.ms=30000\n"
                            "group.consumer.assignors=range, uniform\n"
                            "offsets.retention.minutes=60\n"))
    ns = parse("--config", path)
    cfg = parse_group_config(ns.group_config)
    assert cfg.group_initial_rebalance_delay_ms == 0
    assert cfg.consumer_session_timeout_ms == 30_000
    assert cfg.consumer_assignors == ("range", "uniform")
    assert cfg.offsets_retention_ms == 60 * 60_000
    # A setting on the command line wins; the file's others stay.
    ns = parse("--group-config", "group.consumer.session.timeout.ms=50000", "--config", path,
               "--group-config", "group.max.size=10")
    cfg = parse_group_config(ns.group_config)
    assert cfg.consumer_session_timeout_ms == 50_000 and cfg.group_max_size == 10
    assert cfg.group_initial_rebalance_delay_ms == 0 and cfg.offsets_retention_ms == 3_600_000


# ============================================================================ flags win
@pytest.mark.unit
def test_flags_on_the_command_line_win_before_or_after_config(tmp_path):
    path = write(tmp_path, "port=9100\nfsync=unsafe-no-fsync\nshards=7\n"
                           "topic=orders:3,payments:2\nlistener=PLAINTEXT://127.0.0.1:9000\n"
                           "allow.create.topics=true\n")
    ns = parse("--port", "9200", "--config", path, "--shards", "9")
    assert (ns.port, ns.shards) == (9200, 9)
    # A flag given with its default value still wins (not compared with the default).
    assert parse("--fsync", "always", "--config", path).fsync == "always"
    assert parse("--config", path).fsync == "unsafe-no-fsync"
    # A repeatable option on the command line replaces the file's list, whichever side.
    ns = parse("--topic", "audit:1", "--config", path, "--listener", "SSL://127.0.0.1:1")
    assert ns.topic == ["audit:1"] and ns.listener == ["SSL://127.0.0.1:1"]
    ns = parse("--config", path)
    assert ns.topic == ["orders:3", "payments:2"]
    assert ns.listener == ["PLAINTEXT://127.0.0.1:9000"] and ns.allow_create_topics is True
    # The last --config given is the one read (as any option given twice).
    other = write(tmp_path, "port=9300\n", "other.properties")
    assert parse("--config", path, "--config", other).port == 9300


@pytest.mark.unit
def test_store_and_data_dir_are_one_setting(tmp_path):
    path = write(tmp_path, "data.dir=/from/file\n")
    ns = parse("--config", path, "--store", "postgresql://u@db:5432/gc")
    assert ns.store == "postgresql://u@db:5432/gc" and ns.data_dir is None
    ns = parse("--data-dir", "/cli", "--config", write(tmp_path, "store=file:/f\n", "s.props"))
    assert ns.data_dir == "/cli" and ns.store is None


@pytest.mark.unit
def test_empty_values_unset_and_the_last_line_wins(tmp_path):
    ns = parse("--config", write(tmp_path, "port=9100\nport=9101\nadvertised.host=\n"
                                           "metrics.port=9404\nmetrics.port=\n"))
    assert ns.port == 9101 and ns.advertised_host is None and ns.metrics_port is None


@pytest.mark.unit
def test_the_nodes_of_processes_get_the_merged_options_not_the_file(tmp_path):
    path = write(tmp_path, "processes=2\nshards=4\nmax.connections=77\n"
                           "offset.metadata.max.bytes=8\nlog.format=json\n")
    ns = parse("--config", path, "--log-format", "text")
    argv = child_argv(serve_parser(), ns)
    assert "--config" not in argv and path not in argv
    assert argv[argv.index("--shards") + 1] == "4"
    assert argv[argv.index("--max-connections") + 1] == "77"
    assert argv[argv.index("--group-config") + 1] == "offset.metadata.max.bytes=8"
    assert "--log-format" not in argv          # the command line's text, the default


# ============================================================================ errors
@pytest.mark.unit
def test_an_unknown_key_is_an_error_listing_the_known_ones(tmp_path, capsys):
    path = write(tmp_path, "port=9100\n\nmax.conections=10\n")
    line = refused(capsys, "--config", path)
    assert "%s:3: unknown key 'max.conections' (did you mean max.connections?)" % path in line
    known = line.split("the keys are: ", 1)[1].split(", ")
    assert {"port", "listeners", "super.users", "group.consumer.session.timeout.ms",
            "ssl.keystore.type"} <= set(known)
    assert known == sorted(known)


@pytest.mark.parametrize("text, says", [
    ("port=ninety\n", ":1: port=ninety: argument --port: invalid int value: 'ninety'"),
    ("\nfsync=sometimes\n", ":2: fsync=sometimes: argument --fsync: invalid choice: "
                            "'sometimes'"),
    ("allow.create.topics=yes\n", ":1: allow.create.topics=yes: argument "
                                  "--allow-create-topics: expected true or false"),
    ("allow.if.no.acl=maybe\n", ":1: allow.if.no.acl=maybe: argument --allow-if-no-acl: "
                                "expected true or false"),
    ("web.auth=digest\n", ":1: web.auth=digest: argument --web-auth: invalid choice"),
    ("topic=a:1\nshards=1,2\n", ":2: shards=1,2: argument --shards: invalid int value"),
    ("group.max.size=lots\n", ":1: group.max.size=lots: not an integer"),
    ("log.dirs=/a,/b\n", ":1: log.dirs=/a,/b: groupcoord keeps its shards in one directory"),
    ("ssl.keystore.type=JKS\n", ":1: ssl.keystore.type=JKS: only PEM files are read"),
    ("ssl.truststore.location=/t.jks\n", ":1: ssl.truststore.location is read only as a "
                                         "PEM file: add ssl.truststore.type=PEM"),
    ("ssl.keystore.location=/k.jks\n", ":1: ssl.keystore.location is read only as a PEM file:"
                                       " add ssl.keystore.type=PEM"),
    ("advertised.listeners=PLAINTEXT://h:1\n", ":1: advertised.listeners is not supported: "
                                               "one advertised host"),
    ("ssl.key.password=secret\n", ":1: ssl.key.password is not supported"),
    ("listener=PLAINTEXT://a:1\nlisteners=SSL://a:2\n",
     ":2: listeners and listener (line 1) are one setting: give one"),
    ("store=file:/a\n# x\ndata.dir=/b\n", ":3: data.dir and store (line 1) are one setting"),
    ("a=\\u00g1\n", ":1: malformed \\uxxxx escape"),
    ("config=/etc/other.properties\n", ":1: unknown key 'config'"),
])
@pytest.mark.unit
def test_a_bad_value_names_the_file_and_line(tmp_path, capsys, text, says):
    path = write(tmp_path, text)
    line = refused(capsys, "--config", path)
    assert line.startswith("groupcoord serve: error: " + path), line
    assert says in line, line
    assert "secret" not in line                 # a refused password is not echoed


@pytest.mark.unit
def test_a_file_that_cannot_be_read_is_exit_2(tmp_path, capsys):
    line = refused(capsys, "--config", str(tmp_path / "missing.properties"))
    assert "missing.properties: cannot read it: No such file or directory" in line
    (tmp_path / "latin1.properties").write_bytes(b"host=caf\xe9\n")
    line = refused(capsys, "--config", str(tmp_path / "latin1.properties"))
    assert "latin1.properties: not UTF-8 text" in line


# ============================================================================ serve processes
class ConfigServe(ServeProc):
    """`groupcoord serve ARGS` as written (no --host/--port/--data-dir of ServeProc's own)."""

    def __init__(self, tmp_path, *args):
        super().__init__(tmp_path / "unused")
        self.args = list(args)

    def _argv(self):
        return [sys.executable, "-m", "groupcoord.cli", "serve"] + self.args

    def metrics_address(self):
        m = METRICS_LOG.search(self.stderr_text())
        assert m, self.describe()
        return m.group(1), int(m.group(2))


def _taken_port():
    """A socket listening on a free port of 127.0.0.1: a node told to use it cannot start."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def _topics(port):
    with RawClient("127.0.0.1", port) as c:
        meta = c.call(M.MetadataRequest(topics=None), 12)
    return {t.name: len(t.partitions) for t in meta.topics}


def _commit_code(port, group, metadata):
    """OffsetCommit of one partition with `metadata` by a simple (memberless) group -> the
    partition's error code (12: OFFSET_METADATA_TOO_LARGE)."""
    req = M.OffsetCommitRequest(group_id=group, topics=[M.OffsetCommitRequestTopic(
        name="orders", partitions=[M.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_metadata=metadata)])])
    with RawClient("127.0.0.1", port) as c:
        resp = c.call(req, 8)
    return resp.topics[0].partitions[0].error_code


@pytest.mark.integration
def test_serve_takes_port_topics_and_settings_from_the_file_and_the_port_flag_wins(tmp_path):
    taken = _taken_port()
    try:
        path = write(tmp_path, (
            "host=127.0.0.1\n"
            "port=%d\n"
            "data.dir=%s\n"
            "shards=2\n"
            "topic=orders:3,payments:2\n"
            "metrics.port=0\n"
            "offset.metadata.max.bytes=8\n"
            "group.initial.rebalance.delay.ms=0\n" % (taken.getsockname()[1],
                                                      tmp_path / "data")))
        # The file's port is in use: the file alone cannot start (the port was read) ...
        alone = ConfigServe(tmp_path, "--config", path)
        try:
            with pytest.raises(ServeError, match="cannot listen on 127.0.0.1:%d"
                               % taken.getsockname()[1]):
                alone.start()
        finally:
            alone.close()
        # ... the command line's port wins, the rest comes from the file.
        with ConfigServe(tmp_path, "--config", path, "--port", "0") as srv:
            assert srv.port != taken.getsockname()[1]
            assert _topics(srv.port) == {"orders": 3, "payments": 2}
            assert _commit_code(srv.port, "g1", "x" * 9) == 12     # offset.metadata.max.bytes
            assert _commit_code(srv.port, "g1", "x" * 8) == 0
            host, mport = srv.metrics_address()
            with urllib.request.urlopen("http://%s:%d/healthz" % (host, mport),
                                        timeout=10) as r:
                assert r.status == 200
            assert os.path.isdir(tmp_path / "data")
            assert srv.stop() == 0
    finally:
        taken.close()


@pytest.mark.integration
def test_the_listener_and_topics_of_the_command_line_replace_the_files(tmp_path):
    taken = _taken_port()
    try:
        path = write(tmp_path, ("listeners=PLAINTEXT://127.0.0.1:%d\n"
                                "data.dir=%s\nshards=1\ntopic=orders:3,payments:2\n"
                                % (taken.getsockname()[1], tmp_path / "data")))
        with ConfigServe(tmp_path, "--config", path, "--listener", "PLAINTEXT://127.0.0.1:0",
                         "--topic", "audit:4") as srv:
            assert srv.port != taken.getsockname()[1]
            assert _topics(srv.port) == {"audit": 4}
            assert srv.stop() == 0
    finally:
        taken.close()


@pytest.mark.integration
def test_processes_from_the_file_each_node_gets_its_options(tmp_path):
    shards = 4
    path = write(tmp_path, ("processes=2\nhost=127.0.0.1\nport=0\nshards=%d\n"
                            "data.dir=%s\ntopic=orders:2\noffset.metadata.max.bytes=8\n"
                            "loop=asyncio\n" % (shards, tmp_path / "data")))
    with ConfigServe(tmp_path, "--config", path) as srv:
        assert "2 processes on ports" in srv._stdout_lines[0]
        for node in (1, 2):
            group = next(g for g in ("g-%d" % k for k in range(1000))
                         if owner_of(shard_for(g, shards), 2) == node)
            port = srv.port + node - 1
            assert _topics(port) == {"orders": 2}
            assert _commit_code(port, group, "x" * 9) == 12
            assert _commit_code(port, group, "x" * 8) == 0
        assert srv.stop() == 0
