"""Benchmarks are opt-in: the project's testpaths is tests/ and its addopts pass
--benchmark-disable, so a plain ``pytest`` never collects this directory. Point pytest at it
and enable timing explicitly:

    PYTHONPATH=src python -m pytest benchmarks/ --benchmark-enable

Without --benchmark-enable each benchmark runs its function once (the setup assertions
still run), which makes ``pytest benchmarks/`` a quick correctness check.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))   # for `import baseline_py`


def pytest_collect_file(file_path, parent):
    # bench_*.py does not match the default python_files pattern; collect it when the
    # directory is given (a file passed explicitly is collected by pytest itself).
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
