"""``allocate.devices`` (nodes given with every unit) and ``containerPath`` per
matched node: discovery on a fake host, the rendered answer, CDI edits, health
when a required node is missing, and the whole path through the embedded kubelet."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import grpc
import pytest

from genericdp.allocation.cdi import device_entry
from genericdp.allocation.plan import DeviceSpec, plan_allocation
from genericdp.discovery import discover
from genericdp.errors import UnsafeAllocationError
from genericdp.kubelet.embedded import AllocationError
from genericdp.probes import readiness
from genericdp.report import build_report, report_dict, to_text
from genericdp.runtime.state import DeviceState
from tests.fakesys import FakeHost
from tests.runtime_harness import allocate_request, config, plugin_stub, running

GPU = "example.com/gpu"


def _gpu_config(devices: str, **extra: str) -> str:
    lines = "".join(f"  {k}: {v}\n" for k, v in extra.items())
    return (
        f"resources:\n- name: {GPU}\n  match: [glob: /dev/dri/renderD*]\n{lines}"
        f"  allocate:\n    devices:\n{devices}"
    )


def _host(base: Path) -> FakeHost:
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    host.add_drm_card("0000:04:00.0", card=1, render=129)
    host.add_misc("kvm")  # stands in for a control node: c 10:232
    return host


def test_shared_node_comes_with_every_unit(base: Path) -> None:
    """Each unit carries the control node with its own permissions; units are as before."""
    host = _host(base)
    cfg = config(_gpu_config("      - {path: /dev/kvm, permissions: r}\n"))
    (definition,) = cfg.resources
    units = discover(definition, host.roots)
    assert len(units) == 2
    for unit in units:
        assert [(n.host_path, n.container_path, n.permissions) for n in unit.shared] == [
            ("/dev/kvm", "/dev/kvm", "r")
        ]
        assert unit.missing == ()
    answer = plan_allocation(definition, [units[0]]).receives
    assert _specs(answer.devices) == (
        DeviceSpec("/dev/dri/renderD128", "/dev/dri/renderD128", "rw"),
        DeviceSpec("/dev/kvm", "/dev/kvm", "r"),
    )
    both = plan_allocation(definition, units).receives
    assert [d.container_path for d in both.devices].count("/dev/kvm") == 1


def test_permissions_default_to_the_resource_and_links_resolve(base: Path) -> None:
    """A link's host path is the real node; container path the link or the template's."""
    host = _host(base)
    host.add_link("ctl-link", "kvm")
    devices = (
        "      - {path: /dev/ctl-link}\n"
        "      - {path: /dev/kvm, containerPath: '/dev/ctl/{{ device.name }}'}\n"
    )
    (definition,) = config(_gpu_config(devices, permissions="rwm")).resources
    unit = discover(definition, host.roots)[0]
    # One real node: the first entry wins, seen at the link's path.
    assert [(n.host_path, n.container_path, n.permissions) for n in unit.shared] == [
        ("/dev/kvm", "/dev/ctl-link", "rwm")
    ]


def test_glob_entry_takes_every_match_and_skips_what_is_no_device(base: Path) -> None:
    """A glob gives every device node it reaches; files, and links leaving /dev, are skipped."""
    host = _host(base)
    host.add_misc("vhost-net")
    host.add_file("/dev/vhost-fake", "not a device")
    outside = base / "outside"
    outside.write_text("")
    host.add_link("vhost-escape", str(outside))
    (definition,) = config(_gpu_config("      - {path: '/dev/vhost*'}\n")).resources
    unit = discover(definition, host.roots)[0]
    assert [n.host_path for n in unit.shared] == ["/dev/vhost-net"]


def test_missing_required_node_is_named_optional_is_left_out(base: Path) -> None:
    """A required entry matching nothing is listed in ``missing``; an optional one is not."""
    host = _host(base)
    devices = (
        "      - {path: /dev/nvidia-uvm, optional: true}\n"
        "      - {path: /dev/nvidiactl}\n"
        "      - {path: /dev/kvm}\n"
    )
    (definition,) = config(_gpu_config(devices)).resources
    units = discover(definition, host.roots)
    assert {u.missing for u in units} == {("/dev/nvidiactl",)}
    assert {tuple(n.host_path for n in u.shared) for u in units} == {("/dev/kvm",)}
    state = DeviceState(units=units)
    assert state.unhealthy == {u.id for u in units}
    assert state.fault == "required device node(s) missing: /dev/nvidiactl"
    host.add_misc("nvidiactl", minor=255)
    assert state.set_units(discover(definition, host.roots))
    assert state.unhealthy == frozenset()
    assert state.fault is None


def test_cdi_edits_carry_the_shared_nodes(base: Path) -> None:
    """A unit's CDI device lists its own nodes, then the shared ones, with their
    permissions and each host node's mode and owner."""
    host = _host(base)
    host.node("/dev/dri/renderD128").chmod(0o660)
    os.chown(host.node("/dev/dri/renderD128"), 0, 44)
    host.node("/dev/kvm").chmod(0o600)
    (definition,) = config(_gpu_config("      - {path: /dev/kvm, permissions: rwm}\n")).resources
    unit = discover(definition, host.roots)[0]
    uid = os.getuid()
    assert device_entry(definition, unit)["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/dri/renderD128",
            "hostPath": "/dev/dri/renderD128",
            "permissions": "rw",
            "fileMode": 0o660,
            "uid": 0,
            "gid": 44,
        },
        {
            "path": "/dev/kvm",
            "hostPath": "/dev/kvm",
            "permissions": "rwm",
            "fileMode": 0o600,
            "uid": uid,
            "gid": os.getgid(),
        },
    ]


def test_fixed_container_path_for_a_stick_found_by_serial(base: Path) -> None:
    """containerPath renders per node: a stick at /dev/ttyZIGBEE, its host path the real tty."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="c0ffee", ttys=("ttyUSB3",))
    host.add_usb_serial("1-3", serial="OTHER", ttys=("ttyUSB4",))
    cfg = config(
        "resources:\n- name: example.com/zigbee\n  match:\n"
        "    - glob: /dev/serial/by-id/*c0ffee*\n      containerPath: /dev/ttyZIGBEE\n"
    )
    (definition,) = cfg.resources
    (unit,) = discover(definition, host.roots)
    assert [(n.host_path, n.container_path) for n in unit.nodes] == [
        ("/dev/ttyUSB3", "/dev/ttyZIGBEE")
    ]
    assert _specs(plan_allocation(definition, [unit]).receives.devices) == (
        DeviceSpec("/dev/ttyZIGBEE", "/dev/ttyUSB3", "rw"),
    )


@pytest.mark.parametrize(
    ("serial", "why"),
    [
        ("../../etc", "'..' component"),
        ("a\tb", "control characters"),
        ("x" * 300, "over 255 bytes"),
    ],
)
def test_hostile_device_strings_in_a_container_path_leave_the_unit_out(
    base: Path, serial: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A serial rendered into containerPath that breaks a path rule drops that unit, logged."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="GOOD", ttys=("ttyUSB0",))
    evil = host.add_usb_serial("1-3", serial="EVIL", ttys=("ttyUSB1",))
    # What udev would store for a hostile stick: the property, verbatim.
    for db in host.udev_data.iterdir():
        if "EVIL" in db.read_text():
            text = db.read_text().replace("ID_SERIAL_SHORT=EVIL", f"ID_SERIAL_SHORT={serial}")
            db.write_text(text)
    cfg = config(
        "resources:\n- name: example.com/s\n  match:\n"
        "    - glob: /dev/ttyUSB*\n"
        "      containerPath: '/dev/serial-{{ device.properties.ID_SERIAL_SHORT }}'\n"
    )
    (definition,) = cfg.resources
    with caplog.at_level(logging.WARNING):
        units = discover(definition, host.roots)
    assert [n.container_path for u in units for n in u.nodes] == ["/dev/serial-GOOD"]
    assert why in caplog.text
    assert evil == ["/dev/ttyUSB1"]


def test_two_nodes_at_one_container_path_are_refused(base: Path) -> None:
    """A fixed containerPath that two nodes of one allocation share fails that Allocate."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0", "ttyUSB1"))
    cfg = config(
        "resources:\n- name: example.com/s\n  groupBy: parent:usb\n  match:\n"
        "    - glob: /dev/ttyUSB*\n      containerPath: /dev/ttyFIXED\n"
    )
    (definition,) = cfg.resources
    (unit,) = discover(definition, host.roots)
    with pytest.raises(UnsafeAllocationError, match="would both be /dev/ttyFIXED"):
        plan_allocation(definition, [unit])


async def test_missing_control_node_through_the_kubelet(base: Path) -> None:
    """Missing: capacity stays, allocatable 0, Allocate refused, /readyz says why; then served."""
    host = _host(base)
    cfg = config(_gpu_config("      - {path: /dev/nvidiactl}\n"))
    async with running(base, cfg, discover=discover, rescan_interval=3600.0) as rt:
        await rt.until(lambda k: GPU in k.resources and k.resources[GPU].capacity == 2)
        assert rt.kubelet.resources[GPU].allocatable == 0
        status = rt.supervisor.status()[GPU]
        assert status.fault == "required device node(s) missing: /dev/nvidiactl"
        verdict = readiness(rt.supervisor.status(), started=True)
        assert verdict.ok
        assert f"{GPU}: Unhealthy: required device node(s) missing: /dev/nvidiactl" in verdict.text
        with pytest.raises(AllocationError, match="no healthy devices"):
            await rt.kubelet.allocate(GPU, 1, pod="early")
        # A kubelet that asks anyway (a race with the health update) hears why.
        async with plugin_stub(rt.socket(GPU)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Allocate(allocate_request("pci-0000:03:00.0"))
        assert "required device node(s) missing: /dev/nvidiactl" in str(refused.value.details())
        host.add_misc("nvidiactl", minor=255)  # the hotplug watch sees it
        await rt.until(lambda k: k.resources[GPU].allocatable == 2)
        response = await rt.kubelet.allocate(GPU, 1, pod="later")
        paths = [d.container_path for d in response.container_responses[0].devices]
        assert paths[-1] == "/dev/nvidiactl"
        assert rt.supervisor.status()[GPU].fault is None


def test_discover_report_says_what_is_missing(base: Path) -> None:
    """`genericdp discover` marks the units and names the missing node; the example
    allocation lists the control node the container would get."""
    host = _host(base)
    devices = "      - {path: /dev/nvidiactl}\n      - {path: /dev/kvm, permissions: r}\n"
    (definition,) = config(_gpu_config(devices)).resources
    report = build_report(definition, discover(definition, host.roots))
    text = to_text([report])
    assert "every unit is Unhealthy: required device node(s) missing: /dev/nvidiactl" in text
    assert "Unhealthy" in text.splitlines()[3]
    assert "/dev/kvm" in text
    as_json = report_dict(report)
    assert as_json["missingDevices"] == ["/dev/nvidiactl"]
    assert {u["health"] for u in as_json["units"]} == {"unhealthy"}


def _specs(devices: tuple[DeviceSpec, ...]) -> tuple[DeviceSpec, ...]:
    """The paths and permissions of ``devices`` (their mode and owner are the fake tree's)."""
    return tuple(DeviceSpec(d.container_path, d.host_path, d.permissions) for d in devices)
