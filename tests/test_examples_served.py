"""Every example config served for real: the daemon's supervisor with real discovery
on one fake host that has every kind of hardware the examples are written for,
registered with the embedded kubelet over unix sockets; capacity, allocatable and
the Allocate answer a container gets are checked against discovery and templates."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from genericdp.allocation.cdi import spec_path
from genericdp.allocation.plan import plan_allocation
from genericdp.config import load
from genericdp.config.model import ResourceDefinition
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.discovery import discover
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import replica_ids, unit_id_of
from genericdp.kubelet.servicer import allocate_response
from genericdp.runtime.supervisor import Supervisor
from tests.fakesys import FakeHost
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import settings_for
from tests.test_examples_hardware import HARDWARE_EXAMPLES

EXAMPLES = Path(__file__).resolve().parent.parent / "configs" / "examples"
# The NVIDIA and RDMA examples have hosts of their own (test_examples_hardware.py).
ALL_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name not in HARDWARE_EXAMPLES)


def kitchen_sink(host: FakeHost) -> None:
    """One node with something for every example, and look-alikes beside it."""
    host.add_plain("/dev/null")
    host.add_plain("/dev/zero")
    for name in ("fuse", "kvm", "vhost-net", "net/tun"):
        host.add_misc(name)
    host.add_loop(0)
    host.add_loop(1)
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    host.add_usb_serial("1-3", serial="FT4X", product="6010", ttys=("ttyUSB1", "ttyUSB2"))
    host.add_usb_acm("1-5", tty="ttyACM0")
    host.add_usb_serial(
        "1-6",
        serial="c0ffee",
        vendor="10c4",
        product="ea60",
        driver="cp210x",
        manufacturer="Silicon Labs",
        model="Sonoff Zigbee 3.0 USB Dongle Plus",
        ttys=("ttyUSB3",),
    )
    host.add_usb_acm(
        "1-7",
        serial=None,
        vendor="0658",
        product="0200",
        manufacturer="0658",
        model="0200",
        tty="ttyACM1",
    )
    host.add_sound_card(0)
    host.add_sound_card(1, pci="0000:00:1f.4", card_id="USB")
    host.add_drm_card("0000:00:02.0", card=0, render=128, vendor="0x8086", numa_node=0)
    host.add_drm_card(
        "0000:03:00.0",
        card=1,
        render=129,
        vendor="0x1002",
        device="0x73bf",
        driver="amdgpu",
        numa_node=1,
    )


def _advertised(definition: ResourceDefinition, unit_id: str) -> tuple[str, ...]:
    """A unit's IDs while nobody holds any: its replicas, or its first free IDs."""
    if definition.unbounded:
        return tuple(f"{unit_id}::{i}" for i in range(definition.free_ids))
    return replica_ids(unit_id, definition.count)


def _units_of(units: tuple[Unit, ...], device_ids: tuple[str, ...]) -> list[Unit]:
    wanted = {unit_id_of(d) for d in device_ids}
    return [u for u in units if u.id in wanted]


def _listed(name: str, capacity: int) -> Callable[[EmbeddedKubelet], bool]:
    def check(kubelet: EmbeddedKubelet) -> bool:
        snap = kubelet.resources.get(name)
        return snap is not None and snap.connected and snap.capacity == capacity

    return check


async def _check_resource(
    kubelet: EmbeddedKubelet,
    definition: ResourceDefinition,
    units: tuple[Unit, ...],
    pod: str,
    cdi_dir: Path,
) -> None:
    name = definition.name
    ids = [i for u in units for i in _advertised(definition, u.id)]
    await kubelet.wait_until(_listed(name, len(ids)), 10)
    snap = kubelet.resources[name]
    assert sorted(snap.devices) == sorted(ids)
    assert snap.allocatable == len(ids)
    for unit in units:
        for device_id in _advertised(definition, unit.id):
            numa = () if unit.numa_node is None else (unit.numa_node,)
            assert snap.devices[device_id].numa_nodes == numa
    if not units:
        return
    response = await kubelet.allocate(name, 1, pod=pod)
    (given,) = [p.device_ids for p in kubelet.pod_devices() if p.pod == pod]
    assert len(given) == 1
    expected = plan_allocation(
        definition, _units_of(units, given), node_name="node-1", device_ids=given
    ).receives
    assert response == allocate_response([expected])
    assert response.container_responses[0].devices, "a unit always gives device nodes"
    cdi_names = [c.name for c in response.container_responses[0].cdi_devices]
    assert bool(cdi_names) is definition.allocate.cdi
    if cdi_names:
        spec = json.loads(spec_path(cdi_dir, name).read_text())
        on_disk = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
        assert set(cdi_names) <= on_disk, "every CDI name resolves in the spec on disk"


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=lambda p: p.name)
async def test_example_served_end_to_end(base: Path, path: Path) -> None:
    """Capacity and allocatable equal what discovery finds; Allocate gives what templates say."""
    host = FakeHost(base / "host")
    kitchen_sink(host)
    config = load([path])
    settings = settings_for(base, cdi_dir=base / "cdi")  # never the host's /var/run/cdi
    found = {d.name: discover(d, host.roots) for d in config.resources}
    assert any(found.values()), f"{path.name} finds nothing on the kitchen-sink host"
    async with (
        EmbeddedKubelet(settings.plugin_dir) as kubelet,
        Supervisor(settings, DevicePluginBackend(settings)) as supervisor,
    ):
        await supervisor.start(config)
        for index, definition in enumerate(config.resources):
            units = found[definition.name]
            await _check_resource(kubelet, definition, units, f"p{index}", settings.cdi_dir)
