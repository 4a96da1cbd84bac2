"""The Kubernetes standard attributes (numaNode, pciBusID, pcieRoot): read from fake sysfs
trees as the deviceattribute helpers read them, left out where unknown, accepted by the
1.36 API server, and refused in a config."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from genericdp.config import load_text
from genericdp.config.model import GlobMatcher, GroupBy, Matcher, ResourceDefinition
from genericdp.config.v1.dra import (
    DEVICE_CAPACITIES,
    DISCOVERED_ATTRIBUTES,
    DRA_RESERVED_ATTRIBUTES,
    MAX_CONFIG_ATTRIBUTES,
    STANDARD_ATTRIBUTES,
)
from genericdp.discovery import discover
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.discovery.pci import pci_place, pcie_root
from genericdp.errors import ConfigError
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.kubeletplugin.slices import (
    MAX_ATTRIBUTES,
    DeviceOptions,
    device,
    discovered_attributes,
    pool_slices,
    shaped,
)
from tests.apiserver import ApiServer
from tests.fakesys import FakeHost

NUMA, BUS_ID, ROOT = STANDARD_ATTRIBUTES
_nodes = itertools.count()


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


def units(host: FakeHost, *patterns: str, group_by: GroupBy | None = None) -> tuple[Unit, ...]:
    matchers: tuple[Matcher, ...] = tuple(GlobMatcher(p) for p in patterns)
    definition = ResourceDefinition("example.com/x", matchers, group_by or GroupBy(), 1)
    return discover(definition, host.roots)


def standard(unit: Unit) -> dict[str, object]:
    attributes = device("example.com/x", unit, healthy=True, driver=DEFAULT_DRIVER)["attributes"]
    return {k: v for k, v in attributes.items() if k.startswith("resource.kubernetes.io/")}


def test_a_gpu_is_a_pci_function_under_its_root_complex(host: FakeHost) -> None:
    """A GPU's card and render nodes: its bus ID, the root above its root port, its NUMA node."""
    host.add_drm_card("0000:3b:00.0", numa_node=1)
    (gpu,) = units(host, "/dev/dri/*", group_by=GroupBy("parent", subsystem="pci"))
    assert standard(gpu) == {
        NUMA: {"int": 1},
        BUS_ID: {"string": "0000:3b:00.0"},
        ROOT: {"string": "pci0000:00"},
    }


def test_a_usb_dongle_has_its_controllers_root_but_no_bus_id(host: FakeHost) -> None:
    """A tty under a USB host controller is no PCI function: root and NUMA node only."""
    host.add_usb_serial(numa_node=0, controller="0000:00:14.0")
    (tty,) = units(host, "/dev/ttyUSB*")
    assert standard(tty) == {NUMA: {"int": 0}, ROOT: {"string": "pci0000:00"}}
    assert discovered_attributes(tty)["pciAddress"] == {"string": "0000:00:14.0"}


def test_unknown_facts_are_left_out_and_never_fail_the_device(host: FakeHost) -> None:
    """A virtual device has none; a PCI device without NUMA affinity (-1) has no numaNode."""
    host.add_misc("kvm")
    host.add_drm_card("0000:03:00.0", numa_node=None)
    kvm, card = units(host, "/dev/kvm"), units(host, "/dev/dri/card0")
    assert standard(kvm[0]) == {}
    assert standard(card[0]) == {BUS_ID: {"string": "0000:03:00.0"}, ROOT: {"string": "pci0000:00"}}
    odd = Unit("u", (DeviceNode("/dev/u", "/dev/u"),), numa_node=1024)  # past maxNUMANodes
    assert standard(odd) == {}


def test_the_root_is_read_from_the_bus_link_as_the_helpers_do(host: FakeHost) -> None:
    """The root comes from <sys>/bus/pci/devices/<id>: a link leaving <sys>/devices/pci,
    or one naming another function, gives no root; a bus ID must be lower-case BDF."""
    host.add_drm_card("0000:3b:00.0")
    assert pcie_root(host.sys, "0000:3b:00.0") == "pci0000:00"
    link = host.sys / "bus" / "pci" / "devices" / "0000:3b:00.0"
    link.unlink()
    link.symlink_to(os.path.relpath(host.sys / "devices" / "virtual" / "0000:3b:00.0", link.parent))
    assert pcie_root(host.sys, "0000:3b:00.0") is None
    link.unlink()
    assert pcie_root(host.sys, "0000:3b:00.0") is None
    assert pcie_root(host.sys, "0000:3B:00.0") is None
    place = pci_place(host.sys, "devices/pci0000:00/0000:00:01.0/0000:3b:00.0/drm/card0")
    assert (place.bus_id, place.pcie_root) == ("0000:3b:00.0", None)


def test_a_unit_across_two_functions_has_no_single_bus_id(host: FakeHost) -> None:
    """groupBy all over two GPUs: one root, no bus ID, no NUMA node when theirs differ."""
    host.add_drm_card("0000:3b:00.0", card=0, render=None, numa_node=0)
    host.add_drm_card("0000:5e:00.0", card=1, render=None, numa_node=1)
    (both,) = units(host, "/dev/dri/card*", group_by=GroupBy("all"))
    assert standard(both) == {ROOT: {"string": "pci0000:00"}}


def test_the_attribute_budget_fits_the_api_limit() -> None:
    """genericdp's own, the standard and the discovered attributes and the shares capacity
    leave a config the rest of 32."""
    mine = (
        len(DRA_RESERVED_ATTRIBUTES)
        + len(STANDARD_ATTRIBUTES)
        + DISCOVERED_ATTRIBUTES
        + DEVICE_CAPACITIES
    )
    assert mine + MAX_CONFIG_ATTRIBUTES == MAX_ATTRIBUTES
    everything = Unit(
        "u",
        (DeviceNode("/dev/u", "/dev/u", 226, 0, "drm", "devices/pci0000:00/0000:00:02.0"),),
        numa_node=0,
        attributes={"vendor": "0x8086", "device": "0x56a0", "serial": "S"},
        properties={"ID_USB_DRIVER": "d"},
        pci_bus_id="0000:00:02.0",
        pcie_root="pci0000:00",
    )
    assert len(discovered_attributes(everything)) == DISCOVERED_ATTRIBUTES


def test_a_config_cannot_set_a_standard_attribute_or_too_many() -> None:
    """dra.attributes refuses the standard names with a clear reason, and more than its share."""
    with pytest.raises(ConfigError, match="Kubernetes standard attribute"):
        load_text(_config({"resource.kubernetes.io/pciBusID": "0000:00:02.0"}), "c.yaml")
    too_many = {f"a{i}": i for i in range(MAX_CONFIG_ATTRIBUTES + 1)}
    with pytest.raises(ConfigError, match="attributes"):
        load_text(_config(too_many), "c.yaml")
    load_text(_config({f"a{i}": i for i in range(MAX_CONFIG_ATTRIBUTES)}), "c.yaml")


def _config(attributes: Mapping[str, object]) -> str:
    resource = {
        "name": "example.com/x",
        "match": [{"glob": "/dev/x*"}],
        "dra": {"attributes": dict(attributes)},
    }
    return json.dumps({"version": "v1", "resources": [resource]})


def test_the_api_server_accepts_standard_attributes_at_the_limit(apiserver: ApiServer) -> None:
    """A shared device with every standard, reserved, discovered and config attribute and
    its shares capacity (32) is valid; one more is refused, so the limit tested is the server's."""
    node = f"node-std-{next(_nodes)}-{int(time.time() * 1000) % 100000}"
    full = Unit(
        "u0",
        (DeviceNode("/dev/u0", "/dev/u0", 226, 0, "drm", "devices/pci0000:00/0000:3b:00.0"),),
        numa_node=1,
        attributes={"vendor": "0x8086", "device": "0x56a0", "serial": "S1"},
        properties={"ID_USB_DRIVER": "xe"},
        pci_bus_id="0000:3b:00.0",
        pcie_root="pci0000:00",
    )
    own = {f"a{i}": i for i in range(MAX_CONFIG_ATTRIBUTES)}
    made = shaped(
        device("example.com/x", full, healthy=True, driver=DEFAULT_DRIVER, own=own),
        DeviceOptions(shares=3),
    )
    assert len(made["attributes"]) + len(made["capacity"]) == MAX_ATTRIBUTES
    assert set(STANDARD_ATTRIBUTES) <= set(made["attributes"])
    (obj,) = pool_slices(
        {"example.com/x": [made]}, node=node, driver=DEFAULT_DRIVER, generation=1
    ).values()
    obj["metadata"]["name"] = f"{node}-standard"  # not the server's: to read it back by name
    apiserver.kubectl("create", "-f", "-", input_text=json.dumps(obj))
    stored = json.loads(
        apiserver.kubectl("get", "resourceslice", obj["metadata"]["name"], "-o=json")
    )
    attributes = stored["spec"]["devices"][0]["attributes"]
    assert attributes[NUMA] == {"int": 1}
    assert attributes[BUS_ID] == {"string": "0000:3b:00.0"}
    assert attributes[ROOT] == {"string": "pci0000:00"}

    over = json.loads(json.dumps(obj))
    over["metadata"]["name"] += "-over"
    over["spec"]["pool"]["name"] += "-over"
    over["spec"]["devices"][0]["attributes"]["a99"] = {"int": 99}
    with pytest.raises(AssertionError, match="must not exceed 32"):
        apiserver.kubectl("create", "-f", "-", input_text=json.dumps(over))
