"""Owner-array kernels on 10M units x 100k members (targets: diff and validate <= 30 ms each),
beside plain-numpy baselines computing the same results in the same run.

    PYTHONPATH=src python -m pytest benchmarks/bench_assign_kernels.py --benchmark-enable
"""
import numpy as np
import pytest

from groupcoord.assign import kernels as K

N, M = 10_000_000, 100_000


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(20261121)
    current = rng.integers(0, M, N, dtype=np.int32)
    target = current.copy()
    moved = rng.choice(N, N // 10, replace=False)          # 10% of units change owner
    target[moved] = rng.integers(0, M, len(moved), dtype=np.int32)
    indptr, units = K.members_csr(target, M)
    return current, target, indptr, units


def numpy_diff(current, target):
    changed = np.flatnonzero(current != target)
    rev = changed[np.argsort(current[changed], kind="stable")]
    asg = changed[np.argsort(target[changed], kind="stable")]
    return rev, asg


def numpy_validate(indptr, units, n_units):
    counts = np.bincount(units, minlength=n_units)
    return np.flatnonzero(counts == 0), np.flatnonzero(counts > 1)


@pytest.mark.benchmark(group="diff 10M units x 100k members")
def test_diff_native(benchmark, data):
    current, target, _, _ = data
    d = benchmark(K.diff, current, target, M)
    rev, asg = numpy_diff(current, target)
    assert np.array_equal(np.sort(d.revoke_units), np.sort(rev))


@pytest.mark.benchmark(group="diff 10M units x 100k members")
def test_diff_numpy_baseline(benchmark, data):
    current, target, _, _ = data
    benchmark(numpy_diff, current, target)


@pytest.mark.benchmark(group="validate 10M units x 100k members")
def test_validate_native_no_owner(benchmark, data):
    _, _, indptr, units = data
    v = benchmark(K.validate, indptr, units, N, want_owner=False)
    assert v.ok


@pytest.mark.benchmark(group="validate 10M units x 100k members")
def test_validate_native_with_owner(benchmark, data):
    _, target, indptr, units = data
    v = benchmark(K.validate, indptr, units, N)
    assert v.ok and np.array_equal(v.owner, target)


@pytest.mark.benchmark(group="validate 10M units x 100k members")
def test_validate_numpy_baseline(benchmark, data):
    _, _, indptr, units = data
    benchmark(numpy_validate, indptr, units, N)


@pytest.mark.benchmark(group="members_csr 10M units x 100k members")
def test_members_csr_native(benchmark, data):
    benchmark(K.members_csr, data[1], M)


@pytest.mark.benchmark(group="members_csr 10M units x 100k members")
def test_members_csr_numpy_baseline(benchmark, data):
    target = data[1]
    benchmark(lambda: (np.argsort(target, kind="stable"), np.bincount(target, minlength=M)))
