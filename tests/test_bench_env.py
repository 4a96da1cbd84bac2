"""The benchmarks' daemons never write where a real node's kubelet, runtime or driver lives."""

from __future__ import annotations

from pathlib import Path

from bench.idle_cpu import serve_env
from genericdp.settings import Settings


def test_every_node_path_setting_points_into_the_bench_directory(tmp_path: Path) -> None:
    env = serve_env(tmp_path)
    node_paths = [
        name
        for name, field in Settings.model_fields.items()
        if str(field.default).startswith(("/var/", "/run/cdi"))
    ]
    assert "cdi_dir" in node_paths
    assert "pod_resources_socket" in node_paths
    assert "state_dir" in node_paths
    for name in node_paths:
        value = env.get(f"GENERICDP_{name.upper()}")
        assert value is not None, name
        assert Path(value).is_relative_to(tmp_path), name
