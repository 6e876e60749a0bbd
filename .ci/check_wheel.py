"""Checks an installed groupcoord wheel from outside a checkout: every native module imports,
`groupcoord --version` prints the package metadata's version, and the README's assignor example
runs. tests/test_packaging.py runs it in a fresh venv; cibuildwheel runs it on every wheel it
builds (pyproject.toml, [tool.cibuildwheel] test-command).

    python .ci/check_wheel.py README.md

Run it with the environment's interpreter, not from src/ (it refuses a groupcoord imported
from anywhere but the environment's site-packages). Prints one line per check; exit 0 if all
pass.
"""
import importlib
import importlib.machinery
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import tempfile

EXAMPLE_SECTION = "## Using the assignors"
RUN_TIMEOUT_S = 120


def native_modules(package_dir):
    """The extension modules of groupcoord._native, by name, from the installed files."""
    native = os.path.join(package_dir, "_native")
    names = set()
    for f in os.listdir(native):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:   # the most specific first
            if f.endswith(suffix):
                names.add(f[:-len(suffix)])
                break
    return sorted(names)


def readme_example(readme_path):
    """The first ```python block of the README section on the assignors."""
    with open(readme_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(EXAMPLE_SECTION))
    fence = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```python")
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[fence + 1:end]) + "\n"


def main(readme_path):
    import groupcoord

    package_dir = os.path.dirname(os.path.abspath(groupcoord.__file__))
    site = {os.path.abspath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    if os.path.dirname(package_dir) not in site:
        sys.exit("check_wheel: groupcoord comes from %s, not this environment's site-packages"
                 % package_dir)

    mods = native_modules(package_dir)
    if not mods:
        sys.exit("check_wheel: no native modules in %s" % package_dir)
    # The package first, as a user imports it: native/codec.pyx imports
    # groupcoord.protocol.messages, whose package imports codec back, so a cold
    # `import groupcoord._native.codec` stops half-way (protocol/__init__.py comes first).
    importlib.import_module("groupcoord.protocol")
    for m in mods:
        importlib.import_module("groupcoord._native." + m)
    print("native modules: %d import: %s" % (len(mods), " ".join(mods)))

    # The console script the wheel installed, beside this interpreter.
    script = os.path.join(os.path.dirname(sys.executable), "groupcoord")
    out = subprocess.run([script, "--version"], capture_output=True, text=True, check=True,
                         timeout=RUN_TIMEOUT_S).stdout.strip()
    want = "groupcoord " + importlib.metadata.version("groupcoord")
    if out != want:
        sys.exit("check_wheel: `groupcoord --version` printed %r, the metadata says %r"
                 % (out, want))
    print("version: %s" % out)

    code = readme_example(readme_path)
    with tempfile.TemporaryDirectory() as d:       # away from any checkout's src/
        path = os.path.join(d, "readme_assignors.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run([sys.executable, path], cwd=d, env=env, capture_output=True,
                           text=True, timeout=RUN_TIMEOUT_S)
    if r.returncode != 0:
        sys.exit("check_wheel: the README's assignor example failed:\n%s%s"
                 % (r.stdout, r.stderr))
    print("README assignor example: ran (%d lines of output)" % len(r.stdout.splitlines()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
