"""deploy/: what the systemd unit and the container recipe run, run here (issue 21, point 5).

The Dockerfile is not built (no image registry or daemon in the tests); what it runs is: its
CMD and its HEALTHCHECK command are read out of deploy/Dockerfile and run against a node
started from deploy/server.properties (its data directory and ports changed for the test), so
changing either line changes what is tested. The files its COPY lines name must exist, its
EXPOSE ports are the example config's, its user is made in the image and is not root.

The systemd unit's ExecStart line is read out of deploy/groupcoord.service and run the same
way: the node answers ApiVersions and Metadata (the example's topics) and exits 0 on SIGTERM,
what `systemctl stop` sends. The unit's data directory is the example config's, and
`systemd-analyze verify` finds nothing to say about the unit (where systemd-analyze exists;
else that one check is left out with a warning naming the reason).
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings

import pytest

import groupcoord.protocol as P
from groupcoord.properties import load_properties
from serve_proc import RawClient, ServeProc

M = P.messages
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
EXAMPLE = os.path.join(DEPLOY, "server.properties")
METRICS_LOG = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")
RUN_TIMEOUT_S = 60


# ============================================================================ reading the files
def dockerfile_stages():
    """deploy/Dockerfile -> its stages, each a list of (INSTRUCTION, arguments) with
    continuation lines joined and comments dropped."""
    stages, logical = [], ""
    with open(os.path.join(DEPLOY, "Dockerfile"), encoding="utf-8") as f:
        for raw in f.read().split("\n"):
            if not logical and (not raw.strip() or raw.lstrip().startswith("#")):
                continue
            if raw.rstrip().endswith("\\"):
                logical += raw.rstrip()[:-1] + " "
                continue
            logical += raw
            instr, _, rest = logical.strip().partition(" ")
            logical = ""
            if instr.upper() == "FROM":
                stages.append([])
            stages[-1].append((instr.upper(), rest.strip()))
    return stages


def unit_file():
    """deploy/groupcoord.service -> {(section, key): [values]} (a key may repeat)."""
    out, section = {}, None
    with open(os.path.join(DEPLOY, "groupcoord.service"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            out.setdefault((section, key.strip()), []).append(value.strip())
    return out


def one(values):
    assert len(values) == 1, values
    return values[0]


def example():
    return load_properties(EXAMPLE)


def make_config(tmp_path, **overrides):
    """deploy/server.properties with the test's data directory and ports appended (a key given
    again: the last line wins): everything else as the example says."""
    over = {"data.dir": str(tmp_path / "data"), "host": "127.0.0.1", "port": "0",
            "metrics.port": "0"}
    over.update(overrides)
    with open(EXAMPLE, encoding="utf-8") as f:
        text = f.read()
    path = tmp_path / "server.properties"
    path.write_text(text + "\n# the test's own\n" + "".join("%s=%s\n" % kv
                                                              for kv in over.items()))
    return str(path)




class CommandServe(ServeProc):
    """A node started by an argv read out of a deploy file."""

    def __init__(self, tmp_path, argv):
        super().__init__(tmp_path / "unused")
        self.argv = argv

    def _argv(self):
        return self.argv

    def metrics_port(self):
        m = METRICS_LOG.search(self.stderr_text())
        assert m, self.describe()
        return int(m.group(2))


def _run_here(argv, config_path, test_config_path):
    """A deploy file's `groupcoord serve --config PATH` as this checkout runs it: groupcoord
    is `python -m groupcoord.cli` (the console script's entry point), PATH the test's
    config."""
    assert os.path.basename(argv[0]) == "groupcoord", argv
    assert argv[1:] == ["serve", "--config", config_path], argv
    return [sys.executable, "-m", "groupcoord.cli", "serve", "--config", test_config_path]


def _cmd(stage, instr):
    found = [rest for i, rest in stage if i == instr]
    assert len(found) == 1, (instr, found)
    return found[0]


# ============================================================================ the container
def test_dockerfile_cmd_serves_and_its_healthcheck_tells_up_from_down(tmp_path):
    stages = dockerfile_stages()
    final = stages[-1]
    assert one([r for i, r in stages[0] if i == "FROM"]).startswith("python:3.11-slim")
    assert _cmd(final, "FROM") == "python:3.11-slim"
    # Every file a COPY names from the build context exists (a rename breaks the recipe).
    for stage in stages:
        for instr, rest in stage:
            if instr == "COPY" and "--from=" not in rest:
                for src in shlex.split(rest)[:-1]:
                    assert os.path.exists(os.path.join(ROOT, src)), src
    cmd = json.loads(_cmd(final, "CMD"))
    config_path = cmd[-1]
    copies = [shlex.split(r) for i, r in final if i == "COPY"]
    assert ["deploy/server.properties", config_path] in copies
    # A non-root user the image makes; the ports the example config uses.
    user = _cmd(final, "USER")
    assert user not in ("root", "0")
    assert any(i == "RUN" and re.search(r"\buseradd\b[^&;]*\b%s\s*(&&|$)" % user, r)
               for i, r in final), "USER %s is not made by a useradd in the final stage" % user
    props = example()
    assert sorted(_cmd(final, "EXPOSE").split()) == sorted([props["port"],
                                                            props["metrics.port"]])
    check = _cmd(final, "HEALTHCHECK")
    assert " CMD " in check
    health = json.loads(check.split(" CMD ", 1)[1])
    assert health[0] == "python" and health[1] == "-c", health
    url = "127.0.0.1:%s/healthz" % props["metrics.port"]
    assert url in health[2], health

    srv = CommandServe(tmp_path, _run_here(cmd, config_path, make_config(tmp_path)))
    try:
        srv.start()
        port = srv.metrics_port()
        probe = [sys.executable, "-c", health[2].replace(url, "127.0.0.1:%d/healthz" % port)]
        r = subprocess.run(probe, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert r.returncode == 0, r.stderr
        assert srv.stop() == 0                  # docker stop: STOPSIGNAL SIGTERM
        assert _cmd(final, "STOPSIGNAL") == "SIGTERM"
        r = subprocess.run(probe, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert r.returncode != 0, "the health check passes with the node stopped"
    finally:
        srv.close()


# ============================================================================ systemd
def _systemd_analyze_verify(tmp_path):
    """`systemd-analyze verify` of the unit with its ExecStart program replaced by one that
    exists here (verify checks it is executable): nothing said about the unit."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        warnings.warn("systemd-analyze is not installed: deploy/groupcoord.service was not "
                      "verified (the rest of the unit test ran)")
        return
    with open(os.path.join(DEPLOY, "groupcoord.service"), encoding="utf-8") as f:
        text = f.read()
    program = shlex.split(one(unit_file()[("Service", "ExecStart")]))[0]
    where = tmp_path / "verify"
    where.mkdir()
    unit = where / "groupcoord.service"
    unit.write_text(text.replace("ExecStart=" + program, "ExecStart=" + sys.executable))
    bad = where / "groupcoord-bad.service"
    bad.write_text(text.replace("Restart=on-failure", "Restart=on-failure\nRestrat=always"))

    def verify(path):
        r = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S, cwd=str(where))
        return r, [x for x in (r.stdout + r.stderr).splitlines() if path.name in x]

    r, said = verify(unit)
    assert r.returncode == 0 and not said, r.stdout + r.stderr
    # The same check finds a misspelled key (so silence above means something).
    _r, said = verify(bad)
    assert any("Restrat" in x for x in said), said


def test_systemd_unit_execstart_starts_a_node_that_answers(tmp_path):
    unit = unit_file()
    svc = {k: v for (s, k), v in unit.items() if s == "Service"}
    assert one(svc["Type"]) == "simple" and one(svc["User"]) == "groupcoord"
    assert one(svc["Restart"]) == "on-failure"
    assert int(one(svc["LimitNOFILE"])) >= 65536
    assert one(svc["NoNewPrivileges"]) == "yes" and one(svc["ProtectSystem"]) == "strict"
    assert one(svc.get("KillSignal", ["SIGTERM"])) == "SIGTERM"
    assert ("Install", "WantedBy") in unit
    # The data directory of the example config is the one the unit lets serve write.
    data_dir = example()["data.dir"]
    assert data_dir in one(svc["ReadWritePaths"]).split()
    assert data_dir == "/var/lib/" + one(svc["StateDirectory"])
    argv = shlex.split(one(svc["ExecStart"]))
    # The unit and the container read the config from the same place (docs/operations.md).
    docker_cmd = json.loads(_cmd(dockerfile_stages()[-1], "CMD"))
    assert argv[-1] == docker_cmd[-1] == "/etc/groupcoord/server.properties"

    _systemd_analyze_verify(tmp_path)

    srv = CommandServe(tmp_path, _run_here(argv, argv[-1], make_config(tmp_path)))
    try:
        srv.start()
        with RawClient("127.0.0.1", srv.port) as c:
            versions = c.call(M.ApiVersionsRequest(), 3)
            meta = c.call(M.MetadataRequest(topics=None), 12)
        assert versions.error_code == 0 and len(versions.api_keys) > 10
        expected = dict(t.split(":") for t in example()["topic"].split(","))
        assert {t.name: len(t.partitions) for t in meta.topics} == {
            k: int(v) for k, v in expected.items()}
        assert srv.stop() == 0                  # systemctl stop: SIGTERM, exit status 0
    finally:
        srv.close()


@pytest.mark.parametrize("name", ["groupcoord.service", "server.properties", "Dockerfile"])
def test_the_deploy_files_are_named_in_the_operations_guide(name):
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as f:
        assert "deploy/" + name in f.read()
