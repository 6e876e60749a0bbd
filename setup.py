"""Build of groupcoord's native hot path.

1. Generates, from src/groupcoord/protocol/schemas/*.json, the message classes
   (src/groupcoord/protocol/messages.py) and one Cython codec module per API.
2. Stages the hand-written native/*.pyx|pxd and the generated modules as the package
   groupcoord._native (so `cimport groupcoord._native.krpc` resolves).
3. build_ext cythonizes and compiles them (an sdist or a metadata step compiles nothing).

Release builds carry no debug info and no symbol table (-O2 -g0, linked stripped).
GROUPCOORD_DEBUG_BUILD=1 turns on bounds checks, line tracing and -O0 -g (not stripped).
GROUPCOORD_ONLY=mod1,mod2 (development) compiles only those modules of groupcoord._native.
"""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "src"))
from groupcoord.codegen.generate import generate  # noqa: E402  (stdlib-only module)

STAGE = os.path.join(HERE, "build", "cython")
PKG_STAGE = os.path.join(STAGE, "groupcoord", "_native")
DEBUG = os.environ.get("GROUPCOORD_DEBUG_BUILD", "") not in ("", "0")


def _copy_if_changed(src, dst):
    if os.path.exists(dst):
        with open(src, "rb") as a, open(dst, "rb") as b:
            if a.read() == b.read():
                return
    shutil.copy2(src, dst)


def stage_sources():
    os.makedirs(PKG_STAGE, exist_ok=True)
    for d in (os.path.join(STAGE, "groupcoord"), PKG_STAGE):
        open(os.path.join(d, "__init__.pxd"), "a").close()
    hand = sorted(f for f in os.listdir(os.path.join(HERE, "native"))
                  if f.endswith((".pyx", ".pxd")))
    for f in hand:
        _copy_if_changed(os.path.join(HERE, "native", f), os.path.join(PKG_STAGE, f))
    generated = generate(os.path.join(HERE, "src", "groupcoord", "protocol", "schemas"),
                         os.path.join(HERE, "src", "groupcoord", "protocol"), PKG_STAGE)
    modules = [f[:-4] for f in hand if f.endswith(".pyx")] + generated
    return modules


def release_flags():
    """-> (compile args, link args) of a release build: no DWARF, no symbol table (the 47
    modules weigh 41 MB built with -g, 5.8 MB so)."""
    if sys.platform == "win32":
        return ["-O2"], []
    if sys.platform == "darwin":
        return ["-O2", "-g0"], ["-Wl,-S,-x"]     # ld64: no debug info, no local symbols
    return ["-O2", "-g0"], ["-s"]                # GNU ld: strip every symbol table entry


def extensions():
    """The native modules as Extensions over their staged .pyx (build_ext cythonizes)."""
    import numpy

    modules = stage_sources()
    only = os.environ.get("GROUPCOORD_ONLY")   # dev: "krpc,assign_core" builds just those
    if only:
        modules = [m for m in modules if m in only.split(",")]
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    args, link_args = (["-O0", "-g"], []) if DEBUG else release_flags()
    if DEBUG:
        macros.append(("CYTHON_TRACE_NOGIL", "1"))
    return [Extension("groupcoord._native." + m, [os.path.join(PKG_STAGE, m + ".pyx")],
                      include_dirs=[numpy.get_include()], define_macros=macros,
                      extra_compile_args=args, extra_link_args=link_args)
            for m in modules]


def cythonize_all(exts):
    from Cython.Build import cythonize

    directives = {"language_level": 3, "embedsignature": True,
                  "boundscheck": DEBUG, "wraparound": DEBUG, "linetrace": DEBUG,
                  "initializedcheck": DEBUG}
    return cythonize(exts, include_path=[STAGE], compiler_directives=directives,
                     nthreads=os.cpu_count() or 1, quiet=True,
                     build_dir=os.path.join(HERE, "build", "cython_c"))


class ParallelBuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self):
        # Cython runs here rather than at setup() time, so `python -m build --sdist` and
        # pip's metadata steps generate the sources but translate and compile nothing. The
        # Extensions stay the ones finalize_options prepared; only their sources become C.
        translated = {e.name: e for e in cythonize_all(self.extensions)}
        for ext in self.extensions:
            ext.sources = translated[ext.name].sources
        super().run()


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuildExt})
