"""Fixtures of the hostile-client suite (the harness is hostile_harness.py).

    node(**kw)        a started hostile_harness.Node (`groupcoord serve` child); stopped at
                      teardown, and its stderr shown when the test failed
    good_group(node)  the well-behaved confluent-kafka groups on it, settled (baseline taken);
                      closed at teardown
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hostile_harness import GoodGroup, Node  # noqa: E402


@pytest.fixture
def node(tmp_path, request):
    made = []

    def start(name="data", **kw):
        n = Node(tmp_path / ("%s-%d" % (name, len(made))), **kw)
        made.append(n)
        return n.start()

    yield start
    failed = getattr(request.node, "rep_call", None)
    for n in made:
        if failed is not None and failed.failed:
            print("---- %s stderr (last lines) ----\n%s" % (n.data_dir, n.stderr_text(8000)))
        n.close()


@pytest.fixture
def good_group():
    made = []

    def start(n, settle_timeout=60.0):
        g = GoodGroup(n.bootstrap)
        made.append(g)
        g.start()
        g.wait_stable(n.host, n.port, timeout=settle_timeout)
        return g

    yield start
    for g in made:
        g.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
