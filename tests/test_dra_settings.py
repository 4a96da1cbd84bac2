"""The DRA backend's settings: the backend choice, the driver name, the kubelet's plugin dirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.settings import DEFAULT_DRA_DRIVER, Settings
from tests.test_cli import GOOD, run


def make(**fields: Any) -> Settings:
    return Settings(**fields)


def test_defaults_are_the_device_plugin_and_the_kubelets_dirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GENERICDP_DRA_REGISTRATION_DIR")
    monkeypatch.delenv("GENERICDP_DRA_PLUGINS_DIR")
    settings = make()
    assert settings.backend == "device-plugin"
    assert settings.dra_driver_name == DEFAULT_DRA_DRIVER == DEFAULT_DRIVER
    assert settings.dra_registration_dir == Path("/var/lib/kubelet/plugins_registry")
    assert settings.dra_plugins_dir == Path("/var/lib/kubelet/plugins")


@pytest.mark.parametrize("name", ["gpu.example.com", "genericdp.io", "a", "x-1.example", "a" * 63])
def test_driver_names_that_are_dns_subdomains_are_accepted(name: str) -> None:
    assert make(dra_driver_name=name).dra_driver_name == name


@pytest.mark.parametrize(
    "name", ["", "Gpu.example.com", "-a.example", "a..b", "a/b", "a" * 64, "gpu_example", "é.io"]
)
def test_other_driver_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make(dra_driver_name=name)
    assert [e["loc"] for e in caught.value.errors()] == [("dra_driver_name",)]


def test_a_bad_backend_exits_2_naming_the_choices(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("serve", "--config", str(cfg), "--backend", "csi")
    assert result.returncode == 2
    assert "device-plugin" in result.stderr
    assert "dra" in result.stderr
    assert "Traceback" not in result.stderr


def test_backend_dra_without_a_node_name_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("serve", "--config", str(cfg), "--backend", "dra", env={"GENERICDP_NODE_NAME": ""})
    assert result.returncode == 2
    assert "GENERICDP_NODE_NAME" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_device_plugin_backend_never_loads_dra() -> None:
    """`serve` loads the DRA backend only for --backend dra: none of its gRPC services,
    prepare or driver come in, not even its names (``kubeletplugin.naming``)."""
    code = (
        "import sys, genericdp.cli, genericdp.daemon, genericdp.runtime.supervisor;"
        "print(sorted(m for m in sys.modules"
        " if m.startswith(('genericdp.dra', 'genericdp.kubeletplugin'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_backend_dra_without_an_api_server_exits_3_saying_so(tmp_path: Path) -> None:
    """No service account, no kubeconfig: a clear error before any socket is created."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    env = {
        "GENERICDP_NODE_NAME": "n1",
        "GENERICDP_KUBECONFIG": str(tmp_path / "missing-kubeconfig"),
        "GENERICDP_DRA_REGISTRATION_DIR": str(tmp_path / "registry"),
        "GENERICDP_DRA_PLUGINS_DIR": str(tmp_path / "plugins"),
        "GENERICDP_CDI_DIR": str(tmp_path / "cdi"),
        "GENERICDP_METRICS_ADDRESS": "",
    }
    result = run("serve", "--config", str(cfg), "--backend", "dra", env=env)
    assert result.returncode == 3, result.stderr
    assert "cannot reach the API server through kubeconfig" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "registry").exists()
