"""The NVIDIA, RDMA and Zigbee examples served end to end on fake hosts shaped
like the real sysfs, udev data and /dev: through the supervisor and the
embedded kubelet, a container gets exactly the device nodes and env that the
vendors' own device plugins give.

What the real plugins give, from their public code:

- NVIDIA/k8s-device-plugin, internal/rm/nvml_manager.go ``GetDevicePaths``:
  /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset,
  then the GPU's /dev/nvidia<N>; internal/plugin/server.go ``apiDeviceSpecs``:
  each as a DeviceSpec with HostPath = ContainerPath and permissions "rw", the
  four control nodes skipped when absent; ``apiEnvs``: NVIDIA_VISIBLE_DEVICES
  = the device IDs joined with "," (indices with deviceIDStrategy: index).
- Mellanox/k8s-rdma-shared-dev-plugin, pkg/resources/rdma_device_spec.go
  ``Get(pciAddress)``: every path of rdmamap.GetRdmaCharDevices for the RDMA
  devices of that PCI function (issm<K>, umad<K>, uverbs<N>, then
  /dev/infiniband/rdma_cm; ucm<N> only on kernels that still have ib_ucm), as
  DeviceSpecs with HostPath = ContainerPath and permissions "rwm"; no env.

The kubelet hands the list to the runtime, which creates every node whatever
the order, so the comparison is by set; each path once.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from genericdp.allocation.cdi import spec_path
from genericdp.config import load
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.discovery import discover
from genericdp.health import HealthMonitor
from genericdp.runtime.supervisor import Supervisor
from tests.fakesys import FakeHost, can_mknod
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import settings_for

EXAMPLES = Path(__file__).resolve().parent.parent / "configs" / "examples"
# Served here, each on the host it is written for (tests/test_examples_served.py
# serves the others on one kitchen-sink host).
HARDWARE_EXAMPLES = frozenset({"nvidia-gpu.yaml", "nvidia-gpu-cdi.yaml", "rdma.yaml"})

NVIDIA_CONTROL = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


def specs(response: object) -> set[tuple[str, str, str]]:
    (container,) = response.container_responses  # type: ignore[attr-defined]
    listed = [(d.container_path, d.host_path, d.permissions) for d in container.devices]
    assert len(listed) == len(set(listed)), f"a node given twice: {listed}"
    return set(listed)


def env(response: object) -> dict[str, str]:
    (container,) = response.container_responses  # type: ignore[attr-defined]
    return dict(container.envs)


def ready(name: str, count: int) -> Callable[[EmbeddedKubelet], bool]:
    def check(k: EmbeddedKubelet) -> bool:
        snap = k.resources.get(name)
        return snap is not None and snap.capacity == count and snap.allocatable == count

    return check


# -- RDMA -------------------------------------------------------------------


def rdma_host(base: Path) -> FakeHost:
    host = FakeHost(base / "host")
    host.add_rdma_hca("0000:3b:00.0", ibdev="mlx5_0", index=0, numa_node=0)
    host.add_rdma_hca(
        "0000:86:00.0", ibdev="mlx5_1", index=1, ports={1: "4: ACTIVE", 2: "4: ACTIVE"}, numa_node=1
    )
    host.add_rdma_cm()
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0",))  # not RDMA
    return host


def rdma_expected(*nodes: str) -> set[tuple[str, str, str]]:
    paths = [f"/dev/infiniband/{n}" for n in (*nodes, "rdma_cm")]
    return {(p, p, "rwm") for p in paths}


async def test_rdma_example_gives_what_the_mellanox_plugin_gives(base: Path) -> None:
    """Per HCA: its issm/umad/uverbs nodes and rdma_cm, rwm, no env; NUMA from the PCI device."""
    rdma_host(base)
    config = load([EXAMPLES / "rdma.yaml"])
    settings = settings_for(base, cdi_dir=base / "cdi")
    async with (
        EmbeddedKubelet(settings.plugin_dir) as kubelet,
        Supervisor(settings, DevicePluginBackend(settings)) as supervisor,
    ):
        await supervisor.start(config)
        await kubelet.wait_until(ready("example.com/rdma", 2), 10)
        snap = kubelet.resources["example.com/rdma"]
        assert {d: s.numa_nodes for d, s in snap.devices.items()} == {
            "pci-0000:3b:00.0": (0,),
            "pci-0000:86:00.0": (1,),
        }
        first = await kubelet.allocate("example.com/rdma", 1, pod="p1")
        second = await kubelet.allocate("example.com/rdma", 1, pod="p2")
    given = sorted([specs(first), specs(second)], key=len)
    assert given == [
        rdma_expected("issm0", "umad0", "uverbs0"),
        rdma_expected("issm1", "issm2", "umad1", "umad2", "uverbs1"),
    ]
    assert env(first) == env(second) == {}


async def test_rdma_port_state_drives_health(base: Path) -> None:
    """The example's sysfs probe: a port down for two rounds makes that HCA
    Unhealthy, back up makes it Healthy; no rdma_cm makes every HCA Unhealthy."""
    host = rdma_host(base)
    (definition,) = load([EXAMPLES / "rdma.yaml"]).resources
    units = discover(definition, host.roots)
    assert definition.health is not None
    monitor = HealthMonitor(
        definition.name, definition.health, lambda: units, lambda _: None, roots=host.roots
    )
    assert await monitor.probe_once() == frozenset()
    state = next(host.sys.glob("devices/**/mlx5_1/ports/2/state"))
    state.write_text("1: DOWN\n")
    assert await monitor.probe_once() == frozenset()
    assert await monitor.probe_once() == {"pci-0000:86:00.0"}
    state.write_text("4: ACTIVE\n")
    assert await monitor.probe_once() == frozenset()
    host.remove("/dev/infiniband/rdma_cm")
    assert {u.missing for u in discover(definition, host.roots)} == {("/dev/infiniband/rdma_cm",)}


# -- NVIDIA -----------------------------------------------------------------

needs_mknod = pytest.mark.skipif(
    not can_mknod(Path("/tmp")),
    reason="NVIDIA's nodes have no sysfs entry: the fake host needs real character devices"
    " (CAP_MKNOD)",
)


def nvidia_host(base: Path) -> FakeHost:
    host = FakeHost(base / "host")
    host.add_nvidia_gpu("0000:3b:00.0", minor=0, numa_node=0)
    host.add_nvidia_gpu("0000:86:00.0", minor=1, numa_node=1)
    host.add_nvidia_control_nodes()
    host.add_drm_card("0000:00:02.0", card=0, render=128)  # an iGPU: not NVIDIA
    return host


def fake_nvidia_smi(bin_dir: Path, calls: Path) -> None:
    """nvidia-smi answering for GPUs 0 and 1, recording its arguments."""
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        'for a in "$@"; do last=$a; done\n'
        'case $last in 0|1) echo P0 ;; *) echo "No devices were found" >&2; exit 6 ;; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@needs_mknod
@pytest.mark.parametrize("example", ["nvidia-gpu.yaml", "nvidia-gpu-cdi.yaml"])
async def test_nvidia_example_gives_what_nvidias_plugin_gives(
    base: Path, example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per GPU: /dev/nvidia<N> and the four control nodes, rw; NVIDIA_VISIBLE_DEVICES=<N>;
    Healthy once nvidia-smi answers for it; the CDI variant also names a CDI device."""
    nvidia_host(base)
    calls = base / "nvidia-smi.calls"
    fake_nvidia_smi(base / "bin", calls)
    monkeypatch.setenv("PATH", f"{base / 'bin'}:/usr/bin:/bin")
    config = load([EXAMPLES / example])
    settings = settings_for(base, cdi_dir=base / "cdi")
    async with (
        EmbeddedKubelet(settings.plugin_dir) as kubelet,
        Supervisor(settings, DevicePluginBackend(settings)) as supervisor,
    ):
        await supervisor.start(config)
        await kubelet.wait_until(ready("nvidia.com/gpu", 2), 10)
        answers = [await kubelet.allocate("nvidia.com/gpu", 1, pod=f"p{i}") for i in range(2)]
    by_gpu = {env(a)["NVIDIA_VISIBLE_DEVICES"]: a for a in answers}
    assert set(by_gpu) == {"0", "1"}
    for index, answer in by_gpu.items():
        paths = (*NVIDIA_CONTROL, f"/dev/nvidia{index}")
        assert specs(answer) == {(p, p, "rw") for p in paths}
        assert env(answer) == {"NVIDIA_VISIBLE_DEVICES": index}
        cdi = [c.name for c in answer.container_responses[0].cdi_devices]
        assert len(cdi) == (1 if example == "nvidia-gpu-cdi.yaml" else 0)
    probed = calls.read_text().splitlines()
    assert {line.split()[-1] for line in probed} == {"0", "1"}
    if example == "nvidia-gpu-cdi.yaml":
        spec = json.loads(spec_path(settings.cdi_dir, "nvidia.com/gpu").read_text())
        for device in spec["devices"]:
            nodes = {(n["path"], n["hostPath"]) for n in device["containerEdits"]["deviceNodes"]}
            gpu = {p for p, _ in nodes} - set(NVIDIA_CONTROL)
            assert len(gpu) == 1, device
            assert nodes == {(p, p) for p in (*NVIDIA_CONTROL, *gpu)}


@needs_mknod
def test_nvidia_without_uvm_and_without_nvidiactl(base: Path) -> None:
    """Optional control nodes are left out while their module is not loaded; without
    nvidiactl every GPU is Unhealthy (NVIDIA's plugin cannot even start: NVML needs it)."""
    host = FakeHost(base / "host")
    host.add_nvidia_gpu("0000:3b:00.0", minor=0)
    (definition,) = load([EXAMPLES / "nvidia-gpu.yaml"]).resources
    assert {u.missing for u in discover(definition, host.roots)} == {("/dev/nvidiactl",)}
    host.add_nvidia_control_nodes(uvm=False, modeset=False)
    (unit,) = discover(definition, host.roots)
    assert unit.missing == ()
    assert [n.host_path for n in unit.shared] == ["/dev/nvidiactl"]
