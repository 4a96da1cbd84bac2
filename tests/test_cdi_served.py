"""CDI end to end: a fake host, the real discovery, the supervisor and an embedded kubelet.

The spec file lives in a temporary CDI directory; every name an Allocate
returns must resolve to a device of the spec on disk, as a runtime would
resolve it when it creates the container.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from genericdp.allocation.cdi import spec_path
from genericdp.discovery import discover
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded.admission import AllocationError
from tests.fakesys import FakeHost
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import NO_PERIODIC, allocate_request, config, plugin_stub, running

GPU = "example.com/gpu"
EXAMPLE = Path(__file__).resolve().parent.parent / "configs" / "examples" / "gpu-cdi.yaml"


def gpu_config(*, cdi: bool = True, permissions: str = "rw") -> str:
    return (
        f"resources:\n- name: {GPU}\n  match: [udev: {{subsystem: drm}}]\n"
        f"  groupBy: parent:pci\n  permissions: {permissions}\n"
        f"  allocate:\n    cdi: {str(cdi).lower()}\n"
    )


def read_spec(cdi_dir: Path) -> dict[str, Any] | None:
    path = spec_path(cdi_dir, GPU)
    if not path.exists():
        return None
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


def spec_devices(cdi_dir: Path) -> dict[str, list[str]]:
    """Device name -> host paths of its nodes, as on disk now."""
    spec = read_spec(cdi_dir) or {"devices": []}
    return {
        d["name"]: [n["hostPath"] for n in d["containerEdits"]["deviceNodes"]]
        for d in spec["devices"]
    }


def resolve(cdi_dir: Path, response: pb.AllocateResponse) -> list[list[str]]:
    """What a CDI runtime does with the answer: each name -> the nodes of that device."""
    spec = read_spec(cdi_dir)
    assert spec is not None, "no spec on disk"
    devices = {f"{spec['kind']}={d['name']}": d for d in spec["devices"]}
    (container,) = response.container_responses
    names = [c.name for c in container.cdi_devices]
    assert names, "no CDI devices in the answer"
    missing = [n for n in names if n not in devices]
    assert not missing, f"{missing} do not resolve in {sorted(devices)}"
    return [[n["hostPath"] for n in devices[n]["containerEdits"]["deviceNodes"]] for n in names]


def capacity(value: int) -> Any:
    def check(k: EmbeddedKubelet) -> bool:
        return GPU in k.resources and k.resources[GPU].capacity == value

    return check


async def test_allocate_returns_names_that_resolve_in_the_spec_on_disk(base: Path) -> None:
    """Allocate gives kind=name per GPU; the runtime finds card and render nodes under it."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(capacity(1))
        response = await rt.kubelet.allocate(GPU, 1, pod="p1")
        assert resolve(cdi_dir, response) == [["/dev/dri/card0", "/dev/dri/renderD128"]]
        (container,) = response.container_responses
        assert [d.host_path for d in container.devices] == ["/dev/dri/card0", "/dev/dri/renderD128"]
        spec = read_spec(cdi_dir)
        assert spec is not None
        assert spec["kind"] == GPU
        assert spec["cdiVersion"] == "0.5.0"
        nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
        assert {n["permissions"] for n in nodes} == {"rw"}


async def test_hotplug_updates_the_spec_before_the_kubelet_sees_the_unit(base: Path) -> None:
    """A GPU plugged in is in the spec whenever the kubelet lists it; unplugged, it
    leaves the spec (a pod still holds it: listed Unhealthy, never allocated again)."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    late: list[str] = []

    def listed_only_if_in_spec(k: EmbeddedKubelet) -> bool:
        # Checked at every change the kubelet sees: nothing it lists may lack a spec entry.
        listed = set(k.resources[GPU].devices) if GPU in k.resources else set()
        late.extend(sorted(listed - set(spec_devices(cdi_dir))))
        return len(listed) == 2

    cfg = config(gpu_config())
    async with running(base, cfg, discover=discover, cdi_dir=cdi_dir, **NO_PERIODIC) as rt:
        await rt.until(capacity(1))
        host.add_drm_card("0000:04:00.0", card=1, render=129)
        await rt.until(listed_only_if_in_spec, timeout=5)
        assert late == []
        assert spec_devices(cdi_dir) == {
            "pci-0000:03:00.0": ["/dev/dri/card0", "/dev/dri/renderD128"],
            "pci-0000:04:00.0": ["/dev/dri/card1", "/dev/dri/renderD129"],
        }
        response = await rt.kubelet.allocate(GPU, 2, pod="both")
        assert len(resolve(cdi_dir, response)) == 2
        host.remove("/dev/dri/card0")
        await rt.until(lambda k: k.resources[GPU].devices["pci-0000:03:00.0"].health == "Unhealthy")
        assert (rt.kubelet.resources[GPU].capacity, rt.kubelet.resources[GPU].allocatable) == (2, 1)
        assert set(spec_devices(cdi_dir)) == {"pci-0000:04:00.0"}


async def test_apply_without_the_resource_removes_its_spec(base: Path) -> None:
    """A resource that leaves the config takes its spec file with it."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    other = "resources:\n- name: example.com/null\n  match: [glob: /dev/null]\n"
    host.add_plain("/dev/null")
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(capacity(1))
        assert spec_path(cdi_dir, GPU).exists()
        await rt.supervisor.apply(config(other))
        assert not spec_path(cdi_dir, GPU).exists()
        assert list(cdi_dir.iterdir()) == []


async def test_turning_cdi_off_removes_the_spec_and_the_names(base: Path) -> None:
    """cdi: false on reload: the file goes and Allocate returns device nodes only."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(capacity(1))
        assert spec_path(cdi_dir, GPU).exists()
        await rt.supervisor.apply(config(gpu_config(cdi=False)))
        response = await rt.kubelet.allocate(GPU, 1, pod="p1")
        (container,) = response.container_responses
        assert list(container.cdi_devices) == []
        assert len(container.devices) == 2
        assert not spec_path(cdi_dir, GPU).exists()


async def test_shutdown_keeps_the_spec_for_containers_the_kubelet_restarts(base: Path) -> None:
    """Stopping the daemon leaves the spec: checkpointed answers still name its devices."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(capacity(1))
    assert set(spec_devices(cdi_dir)) == {"pci-0000:03:00.0"}


async def test_a_permissions_change_rewrites_the_spec(base: Path) -> None:
    """A reload that only changes permissions reaches the spec before the next Allocate."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    cdi_dir = base / "cdi"
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(capacity(1))
        await rt.supervisor.apply(config(gpu_config(permissions="r")))
        response = await rt.kubelet.allocate(GPU, 1, pod="p1")
        resolve(cdi_dir, response)
        spec = read_spec(cdi_dir)
        assert spec is not None
        nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
        assert {n["permissions"] for n in nodes} == {"r"}


async def test_unwritable_cdi_dir_fails_allocate_clearly_and_recovers(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No spec can be written: the resource serves, Allocate says why, and works once it can."""
    caplog.set_level(logging.INFO)
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    blocker = base / "blocker"
    blocker.write_text("a file where the CDI directory's parent should be")
    cdi_dir = blocker / "cdi"
    async with running(base, config(gpu_config()), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.registered([GPU])
        await rt.until(capacity(1))
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("cannot write CDI spec" in m and str(cdi_dir) in m for m in errors), errors
        with pytest.raises(AllocationError) as caught:
            await rt.kubelet.allocate(GPU, 1, pod="refused")
        message = str(caught.value)
        assert "could not resolve CDI device(s) example.com/gpu=pci-0000:03:00.0" in message
        assert "Not a directory" in message
        assert "Traceback" not in message
        await rt.supervisor.wait_for(lambda statuses: statuses[GPU].registered)
        assert rt.kubelet.resources[GPU].allocatable == 1
        async with plugin_stub(rt.socket(GPU)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as rpc:
                await stub.Allocate(allocate_request("pci-0000:03:00.0"))
        assert rpc.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        blocker.unlink()  # the directory can be made now: Allocate writes the spec itself
        response = await rt.kubelet.allocate(GPU, 1, pod="admitted")
        assert resolve(cdi_dir, response) == [["/dev/dri/card0", "/dev/dri/renderD128"]]


def test_simulate_shows_cdi_names_and_never_writes_the_hosts_cdi_dir(tmp_path: Path) -> None:
    """simulate writes its spec in its own temporary directory and prints the CDI names."""
    host = FakeHost(tmp_path / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    host_cdi = tmp_path / "host-cdi"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    env["GENERICDP_CDI_DIR"] = str(host_cdi)
    result = subprocess.run(
        [
            sys.executable, "-m", "genericdp", "simulate", str(EXAMPLE), "--once",
            *host.root_flags(),
        ],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "    cdi    example.com/gpu=pci-0000:03:00.0" in result.stdout
    assert "/cdi/genericdp-example.com_gpu.json" in result.stdout
    assert "device /dev/dri/card0 (host /dev/dri/card0, rw)" in result.stdout
    assert not host_cdi.exists()
