"""Fixtures shared by the whole suite, and its two mechanical rules (docs/testing.md).

Tiers. Every test carries exactly one tier marker, set at collection: its own tier marker if
it has one, else the tier of a fixture it uses that starts something (FIXTURE_TIERS), else its
file's tier (FILE_TIERS). A test file missing from FILE_TIERS fails collection, so a new file
must choose. `pytest -m unit` is the developer loop; plain `pytest` (what .ci/run runs) runs
every tier.

Loops. In the server and SDK suites (tests/test_server_*.py, tests/test_sdk_*.py) every test
that runs a coroutine runs twice, under the uvloop and the stock asyncio event loop policy
(ids [uvloop] / [asyncio]); `groupcoord serve` children started by the `serve` fixture get the
same loop (--loop). Tests that choose their loop themselves (a `loop_kind` or `loop` argument)
are left alone.
"""
import asyncio
import inspect
import os
import types

import pytest

TIERS = ("unit", "integration", "e2e", "simulation", "spark")

# unit: in-process only (no server, socket or child process). integration: starts a server
# (in-process on a socket, or `groupcoord serve`), opens real sockets or runs child processes.
# e2e: real Kafka clients (confluent-kafka, kafka-python, aiokafka) against a node.
# simulation: tests/simulation. spark: needs a local SparkSession (Java 17).
FILE_TIERS = {
    "test_admin_clients.py": "e2e",
    "test_admin_restart.py": "integration",
    "test_admin_topics_clients.py": "e2e",
    "test_api_table.py": "unit",
    "test_assign_api.py": "unit",
    "test_assign_classic.py": "unit",
    "test_assign_connect.py": "unit",
    "test_assign_consumer.py": "unit",
    "test_assign_kernels.py": "unit",
    "test_assign_many.py": "unit",
    "test_atomic.py": "unit",
    "test_bad_input.py": "unit",
    "test_catalog_admin.py": "unit",
    "test_cli.py": "unit",
    "test_client_security.py": "integration",  # unit ones marked; SDK TLS/SASL vs serve
    "test_clients_aiokafka.py": "e2e",
    "test_clients_confluent.py": "e2e",
    "test_clients_kafka_python.py": "e2e",
    "test_clients_restart.py": "e2e",
    "test_cluster_catalog.py": "integration",  # the topic catalog shared through PostgreSQL
    "test_cluster_leases.py": "unit",
    "test_cluster_node.py": "integration",
    "test_cluster_pg.py": "integration",
    "test_cluster_serve.py": "integration",   # serve --store postgresql:// processes
    "test_cluster_failover.py": "e2e",        # real nodes and clients: kill -9, zombie...
    "test_codec_memory.py": "unit",
    "test_codec_tolerance.py": "unit",
    "test_commit_scan.py": "unit",
    "test_config_file.py": "unit",            # serve --config; the processes ones marked
    "test_coord_admin.py": "unit",
    "test_coord_classic.py": "unit",
    "test_coord_connect.py": "unit",
    "test_coord_consumer.py": "unit",
    "test_coord_core.py": "unit",
    "test_coord_migration.py": "unit",
    "test_coord_migration_connect.py": "unit",
    "test_coord_offsets.py": "unit",
    "test_coord_registry.py": "unit",
    "test_coord_retention.py": "unit",
    "test_deploy.py": "integration",          # deploy/: the unit's and Dockerfile's commands
    "test_doc_blocks.py": "integration",
    "test_doc_references.py": "unit",
    "test_error_codes.py": "unit",
    "test_framing.py": "unit",
    "test_golden.py": "unit",
    "test_groups_cli.py": "e2e",              # `groupcoord groups` against serve + clients
    "test_import_graph.py": "unit",
    "test_integrations.py": "unit",           # groupcoord.integrations, no server
    "test_integrations_e2e.py": "e2e",        # our assignors in kafka-python / aiokafka
    "test_lifecycle_events.py": "unit",        # lifecycle events of the pure core
    "test_lifecycle_logs.py": "integration",   # serve --log-format text/json, rate limit
    "test_limits.py": "unit",
    "test_loadgen.py": "integration",
    "test_metrics.py": "e2e",     # serve --metrics-port with confluent-kafka groups (issue 21)
    "test_web_view.py": "e2e",    # the web view in headless chromium (unit/integration marked)
    "test_bench_coordinator.py": "unit",
    "test_log_verify.py": "unit",
    "test_packaging.py": "e2e",    # sdist -> wheel in a fresh venv -> .ci/check_wheel.py
    "test_parity_kafka_python.py": "unit",     # kafka-python as a codec oracle, no client
    "test_record_types.py": "unit",
    "test_records.py": "unit",
    "test_roundtrip.py": "unit",
    "test_runtime.py": "unit",
    "test_runtime_crash.py": "integration",
    "test_runtime_faults.py": "integration",
    "test_runtime_load.py": "unit",
    "test_runtime_pg.py": "integration",
    "test_runtime_retention.py": "integration",
    "test_schema_parity.py": "unit",
    "test_security_scram.py": "unit",     # SCRAM/PLAIN server, SASL session, principals
    "test_sdk_connect.py": "integration",
    "test_sdk_connection.py": "integration",
    "test_sdk_keepalive.py": "unit",
    "test_sdk_members.py": "unit",             # the end-to-end ones use `serve`
    "test_security_acl.py": "unit",
    "test_security_authz.py": "unit",
    "test_security_admin.py": "unit",
    "test_security_store.py": "unit",
    "test_security_store_pg.py": "integration",     # a private PostgreSQL (tests/pg_server.py)
    "test_security_e2e.py": "e2e",       # TLS/SASL/ACL nodes and real clients (issue 20)
    "test_server_bad_input.py": "integration",
    "test_server_catalog.py": "unit",
    "test_server_cli.py": "integration",
    "test_server_cluster_args.py": "unit",
    "test_server_connection.py": "integration",
    "test_server_e2e.py": "integration",
    "test_server_fairness.py": "integration",
    "test_server_node.py": "unit",
    "test_server_processes.py": "integration",   # serve --processes 2: a supervisor, 2 nodes
    "test_spark_bench.py": "unit",             # the ones with the `spark` fixture: spark
    "test_spark_plots.py": "unit",             # spark_bench's figures, no Spark
    "test_storage_batch.py": "unit",
    "test_storage_corruption.py": "integration",
    "test_storage_crash.py": "integration",
    "test_storage_log.py": "unit",
    "test_store_pg.py": "integration",      # a private PostgreSQL (tests/pg_server.py)
    "hostile/test_hostile_fds.py": "e2e",
    "hostile/test_hostile_limits.py": "e2e",
    "hostile/test_hostile_load.py": "e2e",
    "hostile/test_hostile_names.py": "e2e",
    "simulation/test_simulation.py": "simulation",
}
FIXTURE_TIERS = {"serve": "integration", "spark": "spark"}
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(tryfirst=True)     # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    unlisted = set()
    for item in items:
        own = [m.name for m in item.iter_markers() if m.name in TIERS]
        if len(set(own)) > 1:
            raise pytest.UsageError("%s has more than one tier marker: %s" % (item.nodeid, own))
        if own:
            continue
        tier = next((FIXTURE_TIERS[f] for f in item.fixturenames if f in FIXTURE_TIERS), None)
        if tier is None:
            rel = os.path.relpath(str(item.path), TESTS_DIR).replace(os.sep, "/")
            tier = FILE_TIERS.get(rel)
            if tier is None:
                unlisted.add(rel)
                continue
        item.add_marker(tier)
    if unlisted:
        raise pytest.UsageError(
            "test files without a tier: %s. Add each to FILE_TIERS in tests/conftest.py (unit, "
            "integration, e2e, simulation or spark; docs/testing.md)." % ", ".join(sorted(unlisted)))


# ------------------------------------------------------------------------------ loops
LOOPS = ("uvloop", "asyncio")
BOTH_LOOPS_FILES = ("test_server_", "test_sdk_")


def _runs_a_coroutine(fn, module) -> bool:
    """Whether a test function defines a coroutine (at any depth), makes a loop itself, or
    names a coroutine function of its module."""
    names = set()

    def walk(code):
        names.update(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                if c.co_flags & inspect.CO_COROUTINE or walk(c):
                    return True
        return False
    if walk(fn.__code__) or "new_event_loop" in names:
        return True
    return any(inspect.iscoroutinefunction(getattr(module, n, None)) for n in names)


def pytest_generate_tests(metafunc):
    if not os.path.basename(str(metafunc.definition.path)).startswith(BOTH_LOOPS_FILES):
        return
    if {"loop_kind", "loop"} & set(metafunc.fixturenames):
        return                      # the test runs each loop itself
    if _runs_a_coroutine(metafunc.function, metafunc.module):
        metafunc.parametrize("event_loop_policy", LOOPS, indirect=True)


def _policy(kind, made):
    if kind == "uvloop":
        import uvloop
        base = uvloop.EventLoopPolicy
    else:
        base = asyncio.DefaultEventLoopPolicy

    class Recording(base):
        def new_event_loop(self):
            loop = super().new_event_loop()
            made.append(type(loop).__module__)
            return loop
    return Recording()


@pytest.fixture(autouse=True)
def event_loop_policy(request):
    """The loop kind a doubled test runs under ("uvloop" / "asyncio"), installed as the event
    loop policy for the test (asyncio.run and asyncio.new_event_loop use it); None for every
    other test (the policy is left alone)."""
    kind = getattr(request, "param", None)
    if kind is None:
        yield None
        return
    made = []
    asyncio.set_event_loop_policy(_policy(kind, made))
    try:
        yield kind
    finally:
        asyncio.set_event_loop_policy(None)
    # A doubled test that never asked the policy for a loop ran twice on the same loop.
    if not made:
        pytest.fail("%s is run on both loops but made no loop through the policy: pass "
                    "the loop kind explicitly (run_on / loop_kind)" % request.node.nodeid)
    if not all(m.split(".")[0] == kind for m in made):
        pytest.fail("%s [%s] made loops of other kinds: %s" % (request.node.nodeid, kind, made))


@pytest.fixture
def coord():
    """Factory of coordinator test harnesses (tests/coord_harness.py). At teardown every
    harness made is checked for replay equality: a shard rebuilt from the durable records
    equals the live one."""
    from coord_harness import Harness
    made = []

    def make(**kw):
        h = Harness(**kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.check_replay()
