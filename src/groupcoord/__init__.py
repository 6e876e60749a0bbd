"""groupcoord: a standalone coordinator for the Kafka group protocols."""
from importlib.metadata import PackageNotFoundError, version as _dist_version

# The release's version: pyproject.toml reads this literal (tool.setuptools.dynamic), so the
# installed package's metadata carries it; __version__ is that metadata when installed.
_SOURCE_VERSION = "0.1.0"

try:
    __version__ = _dist_version("groupcoord")
except PackageNotFoundError:        # a source checkout on PYTHONPATH, never installed
    __version__ = _SOURCE_VERSION
