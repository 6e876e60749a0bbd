"""benchmarks/bench_coordinator.py still runs to the end at a small size: every rebalance it
drives converges (it stopped converging once assignment batching made the target wait for
the group's assignment timer, which the benchmark never fired)."""
import os
import subprocess
import sys

from serve_proc import package_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_coordinator_small_run_converges(tmp_path):
    out = tmp_path / "report.md"
    # The groupcoord this test imported (src/ in a checkout, site-packages when installed).
    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=package_root() + (os.pathsep + old if old else ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_coordinator.py"),
                        "--members", "200", "--partitions", "2000", "--seconds", "0.05",
                        "--join-members", "50", "--join-partitions", "500",
                        "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    report = out.read_text()
    for row in ("full move", "join storm (reconcile)",
                "connect (compute by the chosen worker, install, reconcile)"):
        assert row in report, row
