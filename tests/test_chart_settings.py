"""The chart refuses the settings ``serve`` refuses, naming the value.

Every chart value that templates/daemonset.yaml passes to the daemon as a
setting (tools/chart_schema.py ``SETTING_VALUES``) has its schema from the
settings model. Each value's invalid examples go through ``helm lint``
(Helm 3 and 4), which must fail with the value's path on its first error
line, and through the DaemonSet Helm renders without its schema: ``serve``
started with that container's environment must refuse the setting (exit 2)
instead of running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.exits import EXIT_USAGE
from tests.npm_tools import helm_binary
from tools.chart_schema import SETTING_VALUES

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "genericdp"

# value path -> what serve refuses there (as YAML or --set-json would give it)
INVALID: dict[str, tuple[object, ...]] = {
    "backend": ("cdi", "DRA"),
    "dra.driverName": ("Genericdp.io", "a" * 64, "gdp_io", "-gdp.io"),
    "logLevel": ("verbose", "INFO"),
    "logFormat": ("yaml",),
    "nodeFeatures.publish": ("nfd", "NodeFeature"),
    "rescanInterval": ("30s", 100000, 0.001, -5, "1e9"),
}
# what else a value needs to reach the DaemonSet's environment at all
NEEDS = {"dra.driverName": {"backend": "dra"}}
CASES = [
    pytest.param(path, value, id=f"{path}={value!r}"[:60])
    for path, values in INVALID.items()
    for value in values
]


def _set(path: str, value: object) -> list[str]:
    sets = [f"{path}={json.dumps(value)}"]
    sets += [f"{k}={json.dumps(v)}" for k, v in NEEDS.get(path, {}).items()]
    return [arg for one in sets for arg in ("--set-json", one)]


def test_every_setting_value_has_invalid_examples() -> None:
    assert set(INVALID) == {".".join(path) for path in SETTING_VALUES}


@pytest.mark.parametrize("major", ["helm3", "helm4"])
@pytest.mark.parametrize(("path", "value"), CASES)
def test_helm_lint_refuses_it_with_the_values_path(path: str, value: object, major: str) -> None:
    done = subprocess.run(
        [str(helm_binary(major)), "lint", str(CHART), *_set(path, value)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    first = next(line for line in output.splitlines() if "[ERROR]" in line)
    # Helm 3: "- dra.driverName: ...", Helm 4: "at '/dra/driverName': ..."
    assert f"- {path}:" in first or f"'/{path.replace('.', '/')}'" in first, output


def _daemon_env(path: str, value: object) -> dict[str, str]:
    """The genericdp container's variables as Helm renders them with the schema skipped."""
    done = subprocess.run(
        [
            str(helm_binary("helm4")), "template", "gdp", str(CHART), "--skip-schema-validation",
            *_set(path, value),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs: list[dict[str, Any]] = [d for d in YAML(typ="safe", pure=True).load_all(done.stdout) if d]
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "genericdp"
    ]
    return {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}


@pytest.mark.parametrize(("path", "value"), CASES)
def test_serve_refuses_it(path: str, value: object, tmp_path: Path) -> None:
    # Where the pod has its host paths, temporary ones: were the value accepted, serve
    # would run here, and never near the host's kubelet.
    host = {
        name: str(tmp_path / name.lower())
        for name in (
            "GENERICDP_CONFIG", "GENERICDP_PLUGIN_DIR", "GENERICDP_POD_RESOURCES_SOCKET",
            "GENERICDP_CDI_DIR", "GENERICDP_STATE_DIR", "GENERICDP_DRA_REGISTRATION_DIR",
            "GENERICDP_DRA_PLUGINS_DIR", "GENERICDP_NODE_FEATURES_FILE",
        )
    }  # fmt: skip
    env = {
        **_daemon_env(path, value),
        **host,
        "GENERICDP_METRICS_ADDRESS": "",
        "GENERICDP_NODE_NAME": "node-a",  # the downward API's, in the pod
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "genericdp", "serve"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "error: setting " in done.stderr, done.stderr
