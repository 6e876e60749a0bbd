"""The package as a user gets it (issue 22, point 2): `python -m build --sdist` from this
checkout; a wheel built from that sdist alone, by the pip of a fresh venv (pip builds it in an
isolated environment from PyPI's setuptools, Cython and numpy); installed in that venv; then
.ci/check_wheel.py run by the venv's interpreter (every native module imports, `groupcoord
--version` is the metadata's version, the README's assignor example runs: the same script is
cibuildwheel's test command), and the release build's promises (no debug info, stripped).

The wheel build compiles every native module from scratch (about 3 minutes on 2 busy
cores); it runs once for the module, each step bounded by a timeout that only stops a hang.
"""
import ast
import email.parser
import fcntl
import glob
import os
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src", "groupcoord")
BUILD_LOCK = "/tmp/gc-build.lock"       # the checkout's build/ is shared (setup.py stages there)
STEP_TIMEOUT_S = 1800                   # a hung step, not a slow one
NATIVE_LINE = re.compile(r"^native modules: (\d+) import: (.*)$", re.M)
COMPILE_ERROR = re.compile(r"Error compiling|\.pyx:\d+:\d+: |error:")
# Only an extra may pull these in: the runtime needs none of them.
EXTRAS_ONLY = {"rich", "matplotlib", "pyspark", "pandas", "pyarrow", "build", "pytest"}


def _env():
    """The environment of every step: no checkout on the path, the release build."""
    drop = {"PYTHONPATH", "GROUPCOORD_DEBUG_BUILD", "GROUPCOORD_ONLY", "PIP_NO_BUILD_ISOLATION"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, env=_env(),
                       timeout=STEP_TIMEOUT_S, **kw)
    if r.returncode != 0:
        # pip buries Cython's and the compiler's messages in tens of kB of log: lift them out
        out = r.stdout + r.stderr
        errors = [line for line in out.splitlines()
                  if COMPILE_ERROR.search(line) and "warning:" not in line]
        pytest.fail("%s failed (%d)\n%s\n...\n%s" % (" ".join(argv), r.returncode,
                                                     "\n".join(errors[:40]), out[-3000:]))
    return r.stdout


def _source_version():
    with open(os.path.join(SRC, "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets] == ["_SOURCE_VERSION"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """-> dict: sdist (path), names (its members), wheel (path), venv_python, unpacked
    (the wheel's files)."""
    tmp = tmp_path_factory.mktemp("packaging")
    dist, wheels, venv = tmp / "dist", tmp / "wheels", tmp / "venv"
    with open(BUILD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), ROOT])
    [sdist] = glob.glob(str(dist / "groupcoord-*.tar.gz"))
    with tarfile.open(sdist) as t:
        names = t.getnames()
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), sdist])
    [wheel] = glob.glob(str(wheels / "groupcoord-*.whl"))
    _run([python, "-m", "pip", "install", wheel])
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    return {"sdist": sdist, "names": names, "wheel": wheel, "venv_python": python,
            "unpacked": str(unpacked)}


def _rel(names):
    """sdist members without their top directory (groupcoord-X.Y.Z/)."""
    return {n.split("/", 1)[1] for n in names if "/" in n}


def test_sdist_holds_every_build_input_and_nothing_built(built):
    files = _rel(built["names"])
    native = {"native/" + os.path.basename(p)
              for p in glob.glob(os.path.join(ROOT, "native", "*.p[xy][xd]"))}
    schemas = {os.path.relpath(p, ROOT)
               for p in glob.glob(os.path.join(SRC, "protocol", "schemas", "*.json"))}
    codegen = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(SRC, "codegen", "*.py"))}
    assert native and len(schemas) > 50 and "src/groupcoord/codegen/generate.py" in codegen
    for want in (native, schemas, codegen,
                 {"setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md",
                  "src/groupcoord/_native/__init__.py", "src/groupcoord/py.typed"}):
        assert want <= files, sorted(want - files)
    built_files = sorted(f for f in files
                         if f.endswith((".so", ".pyd", ".c", ".pyc", ".o"))
                         or f.startswith(("build/", "dist/", "tests/"))
                         or "__pycache__" in f
                         or f == "src/groupcoord/protocol/messages.py")   # generated
    assert built_files == []


def test_wheel_built_from_the_sdist_installs_imports_and_runs_the_readme_example(built):
    natives = sorted(os.path.basename(n).split(".")[0]
                     for n in zipfile.ZipFile(built["wheel"]).namelist()
                     if n.startswith("groupcoord/_native/") and n.endswith(".so"))
    hand_written = {os.path.basename(p)[:-4]
                    for p in glob.glob(os.path.join(ROOT, "native", "*.pyx"))}
    assert hand_written <= set(natives)
    assert any(n.startswith("msg_") for n in natives)          # the generated codecs
    out = _run([built["venv_python"], os.path.join(ROOT, ".ci", "check_wheel.py"),
                os.path.join(ROOT, "README.md")], cwd=os.path.dirname(built["wheel"]))
    m = NATIVE_LINE.search(out)
    assert m and m.group(2).split() == natives, out
    version = _source_version()
    assert "version: groupcoord %s\n" % version in out
    assert "README assignor example: ran" in out


def test_wheel_metadata_license_and_minimal_runtime_dependencies(built):
    [info] = glob.glob(os.path.join(built["unpacked"], "groupcoord-*.dist-info"))
    with open(os.path.join(info, "METADATA"), encoding="utf-8") as f:
        meta = email.parser.Parser().parse(f)
    assert meta["Version"] == _source_version()
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    with open(os.path.join(info, "licenses", "LICENSE"), encoding="utf-8") as f:
        assert "Apache License" in f.read(200)
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]   # the expression says it
    runtime = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in runtime}
    assert {"numpy", "msgspec"} <= names and not names & EXTRAS_ONLY, runtime
    extras = {r for r in meta.get_all("Requires-Dist") if 'extra == "spark"' in r}
    assert any(r.startswith("rich") for r in extras) and any(r.startswith("matplotlib")
                                                            for r in extras)
    # spark_bench runs from a checkout; the wheel is the package alone
    tops = {n.split("/")[0] for n in zipfile.ZipFile(built["wheel"]).namelist()}
    assert tops == {"groupcoord", os.path.basename(info)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads ELF sections")
def test_release_modules_carry_no_debug_info_and_are_stripped(built):
    sos = glob.glob(os.path.join(built["unpacked"], "groupcoord", "_native", "*.so"))
    assert sos
    for so in sos:
        out = _run(["readelf", "-S", "-W", so])
        sections = re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", out, re.M)
        assert ".text" in sections, out
        assert [s for s in sections if s.startswith((".debug", ".zdebug"))] == [], so
        assert ".symtab" not in sections, so         # stripped: only .dynsym is left
