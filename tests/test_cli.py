import subprocess
import sys

import pytest

import groupcoord
from groupcoord import cli


def test_cli_lists_version_and_every_api(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert groupcoord.__version__ in out
    for line in ("18  ApiVersions", "68  ConsumerGroupHeartbeat", "10002  ConnectGroupInstallAssignment"):
        assert line in out


@pytest.mark.integration          # child processes
def test_cli_help_and_version_run_as_a_command():
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "Kafka-protocol groups" in r.stdout
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "groupcoord " + groupcoord.__version__
