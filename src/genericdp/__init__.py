"""genericdp: a generic Kubernetes device plugin driven by YAML."""

from importlib.metadata import PackageNotFoundError, version

try:
    # One home for the version: the git tag, through the package metadata
    # that setuptools-scm writes at build time (docs/contributing/releasing.md).
    __version__ = version("genericdp")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0"
