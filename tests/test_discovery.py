"""Matchers: which device nodes glob and udev find, and what each node carries."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from genericdp.config.model import (
    GlobMatcher,
    Matcher,
    ResourceDefinition,
    UdevMatcher,
    frozen_map,
)
from genericdp.discovery import discover, find_nodes
from genericdp.discovery.model import DeviceNode, Roots
from genericdp.errors import DiscoveryError
from tests.fakesys import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


def glob(pattern: str) -> GlobMatcher:
    return GlobMatcher(pattern)


def udev(
    *,
    subsystem: str | None = None,
    kernel: str | None = None,
    driver: str | None = None,
    attributes: dict[str, str] | None = None,
    properties: dict[str, str] | None = None,
) -> UdevMatcher:
    return UdevMatcher(
        subsystem=subsystem,
        kernel=kernel,
        driver=driver,
        attributes=frozen_map(attributes),
        properties=frozen_map(properties),
    )


def found(matchers: Sequence[Matcher], roots: Roots) -> tuple[DeviceNode, ...]:
    """The nodes ``find_nodes`` finds, without their templates."""
    return tuple(node for node, _ in find_nodes(matchers, roots))


def paths(host: FakeHost, *matchers: Matcher) -> list[tuple[str, str]]:
    return [(n.host_path, n.container_path) for n in found(matchers, host.roots)]


def one(host: FakeHost, matcher: Matcher) -> DeviceNode:
    (node,) = found([matcher], host.roots)
    return node


# -- glob ---------------------------------------------------------------------


def test_glob_matches_nodes_and_enriches_from_sysfs(host: FakeHost) -> None:
    """A glob finds the nodes it names and fills in numbers, sysfs path and udev data."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    host.add_usb_acm("1-3")
    node = one(host, glob("/dev/ttyUSB*"))
    assert (node.host_path, node.container_path) == ("/dev/ttyUSB0", "/dev/ttyUSB0")
    assert (node.major, node.minor, node.subsystem) == (188, 0, "tty")
    assert node.sysfs_path == "devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/ttyUSB0/tty/ttyUSB0"
    assert node.attributes == {"dev": "188:0"}
    assert node.properties["ID_SERIAL_SHORT"] == "A1B2C3"
    assert node.properties["ID_PATH"] == "pci-0000:00:14.0-usb-0:2:1.0"


def test_by_id_link_host_path_is_real_node(host: FakeHost) -> None:
    """Through a by-id symlink, the host path is the real node and the container path the link."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0", "ttyUSB1"))
    assert paths(host, glob("/dev/serial/by-id/usb-FTDI_*-if01-port0")) == [
        ("/dev/ttyUSB1", "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A1B2C3-if01-port0")
    ]
    node = one(host, glob("/dev/serial/by-id/*if01*"))
    assert node.sysfs_path is not None
    assert node.sysfs_path.endswith("/tty/ttyUSB1")


def test_absolute_link_targets_read_inside_dev_root(host: FakeHost) -> None:
    """An absolute link target /dev/x means <dev root>/x; escaping or dangling links are skipped."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_link("modem", "/dev/ttyUSB0")
    host.add_link("escape-abs", "/etc/passwd")
    host.add_link("escape-rel", "../../../../etc/passwd")
    host.add_link("dangling", "ttyUSB9")
    host.add_link("loop-a", "loop-b")
    host.add_link("loop-b", "loop-a")
    found = paths(host, glob("/dev/modem"), glob("/dev/escape-*"), glob("/dev/dangling"))
    assert found == [("/dev/ttyUSB0", "/dev/modem")]
    assert paths(host, glob("/dev/loop-*")) == []


def test_recursive_glob_skips_dirs_and_symlinked_dirs(host: FakeHost) -> None:
    """`**` descends real directories only, never returns directories, and finds nested nodes."""
    host.add_drm_card()
    host.add_link("dri-again", "dri")  # a symlinked directory must not be walked twice
    host.add_link("dri/self", ".")
    assert paths(host, glob("/dev/**/renderD*")) == [("/dev/dri/renderD128", "/dev/dri/renderD128")]
    assert paths(host, glob("/dev/dri")) == []
    every = paths(host, glob("/dev/**"))
    assert ("/dev/dri/card0", "/dev/dri/card0") in every
    assert all(not Path(host.node(h)).is_dir() for h, _ in every)


def test_node_path_beats_links_to_it(host: FakeHost) -> None:
    """When one glob reaches a node directly and through links, the direct path is kept."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    found = paths(host, glob("/dev/**/ttyUSB0"), glob("/dev/**"))
    assert ("/dev/ttyUSB0", "/dev/ttyUSB0") in found
    assert len([h for h, _ in found if h == "/dev/ttyUSB0"]) == 1


def test_first_matcher_wins_on_duplicates(host: FakeHost) -> None:
    """The union keeps one node per real node, described by the first matcher that found it."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    link = "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A1B2C3-if00-port0"
    assert paths(host, glob(link), glob("/dev/ttyUSB0")) == [("/dev/ttyUSB0", link)]
    assert paths(host, glob("/dev/ttyUSB0"), glob(link)) == [("/dev/ttyUSB0", "/dev/ttyUSB0")]


def test_char_device_without_sysfs(tmp_path: Path) -> None:
    """A character device sysfs does not know is still found, with its paths and numbers."""
    roots = Roots(dev=Path("/dev"), sys=tmp_path / "nosys", udev=tmp_path / "noudev")
    (node,) = found([glob("/dev/null")], roots)
    info = os.stat("/dev/null")
    assert node == DeviceNode(
        host_path="/dev/null",
        container_path="/dev/null",
        major=1,
        minor=3,
        mode=info.st_mode & 0o777,
        uid=info.st_uid,
        gid=info.st_gid,
    )


def test_glob_outside_dev_matches_nothing(host: FakeHost) -> None:
    """Patterns outside /dev, or climbing out of it, match nothing."""
    host.add_misc("fuse")
    assert paths(host, glob("/etc/*"), glob("/dev/../etc/passwd")) == []


def test_missing_dev_root_is_an_error(tmp_path: Path) -> None:
    """A dev root that does not exist raises DiscoveryError naming it."""
    roots = Roots(dev=tmp_path / "nope", sys=tmp_path / "sys", udev=tmp_path / "udev")
    with pytest.raises(DiscoveryError, match=re.escape(str(tmp_path / "nope"))):
        found([glob("/dev/*")], roots)


def test_missing_sys_and_udev_roots_degrade(host: FakeHost, tmp_path: Path) -> None:
    """Without sysfs or the udev database, udev matchers find nothing (and nothing fails)."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    roots = Roots(dev=host.dev, sys=tmp_path / "nosys", udev=tmp_path / "noudev")
    assert found([udev(subsystem="tty")], roots) == ()


def test_sockets_are_not_device_nodes(host: FakeHost) -> None:
    """A FIFO under /dev is skipped by a glob."""
    host.add_misc("fuse")
    os.mkfifo(host.dev / "initctl")
    assert paths(host, glob("/dev/*")) == [("/dev/fuse", "/dev/fuse")]


# -- udev ---------------------------------------------------------------------


def test_udev_subsystem_and_kernel(host: FakeHost) -> None:
    """subsystem is exact and kernel is a glob on the kernel name."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_usb_acm("1-3", tty="ttyACM0")
    assert paths(host, udev(subsystem="tty", kernel="ttyACM*")) == [
        ("/dev/ttyACM0", "/dev/ttyACM0")
    ]
    assert [h for h, _ in paths(host, udev(subsystem="tty"))] == ["/dev/ttyACM0", "/dev/ttyUSB0"]
    assert paths(host, udev(subsystem="tt")) == []


def test_udev_attributes_on_an_ancestor(host: FakeHost) -> None:
    """ATTRS-style attributes match on an ancestor: idVendor of the USB device above a tty."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    host.add_usb_acm("1-3", vendor="2341", product="0043")
    found = paths(host, udev(subsystem="tty", attributes={"idVendor": "2341", "idProduct": "00*"}))
    assert found == [("/dev/ttyACM0", "/dev/ttyACM0")]
    assert paths(host, udev(subsystem="tty", attributes={"idVendor": "9999"})) == []


def test_udev_attribute_trailing_whitespace_ignored(host: FakeHost) -> None:
    """Attribute values lose trailing whitespace (the newline) before comparison, as in udev."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    assert len(paths(host, udev(subsystem="tty", attributes={"bNumInterfaces": " 1"}))) == 1
    assert paths(host, udev(subsystem="tty", attributes={"bNumInterfaces": "1"})) == []


def test_udev_attributes_and_driver_on_same_device(host: FakeHost) -> None:
    """Driver and attributes must all hold on one device, not split across ancestors."""
    host.add_usb_acm("1-3", vendor="2341")
    same = udev(subsystem="tty", driver="cdc_acm", attributes={"bInterfaceNumber": "00"})
    assert [h for h, _ in paths(host, same)] == ["/dev/ttyACM0"]
    # driver cdc_acm is on the interface, idVendor on the USB device: no single device has both
    split = udev(subsystem="tty", driver="cdc_acm", attributes={"idVendor": "2341"})
    assert paths(host, split) == []
    usb_level = udev(subsystem="tty", driver="usb", attributes={"idVendor": "2341"})
    assert [h for h, _ in paths(host, usb_level)] == ["/dev/ttyACM0"]


def test_udev_driver_glob(host: FakeHost) -> None:
    """driver is a glob on the driver of the device or an ancestor."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",), driver="cp210x", vendor="10c4", product="ea60")
    host.add_usb_serial("1-4", ttys=("ttyUSB1",), driver="ftdi_sio")
    assert [h for h, _ in paths(host, udev(subsystem="tty", driver="cp2*"))] == ["/dev/ttyUSB0"]


def test_udev_properties_from_database(host: FakeHost) -> None:
    """properties match the E: lines of the node's udev database entry."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    host.add_usb_serial("1-4", serial="ZZ9", ttys=("ttyUSB1",))
    matcher = udev(subsystem="tty", properties={"ID_SERIAL_SHORT": "A1*", "ID_VENDOR_ID": "0403"})
    node = one(host, matcher)
    assert node.host_path == "/dev/ttyUSB0"
    assert node.properties["ID_SERIAL"] == "FTDI_FT232R_USB_UART_A1B2C3"
    assert paths(host, udev(properties={"ID_NOT_THERE": "*"})) == []


def test_udev_without_subsystem_sees_every_node(host: FakeHost) -> None:
    """Without a subsystem, every device with a node is a candidate (the USB device node too)."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_drm_card()
    found = [h for h, _ in paths(host, udev(attributes={"idVendor": "0403"}))]
    assert found == ["/dev/bus/usb/001/002", "/dev/ttyUSB0"]


def test_udev_bus_and_block_subsystems(host: FakeHost) -> None:
    """Bus subsystems (usb) and block devices are enumerated too."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_loop(3)
    assert [h for h, _ in paths(host, udev(subsystem="usb"))] == ["/dev/bus/usb/001/002"]
    node = one(host, udev(subsystem="block", kernel="loop*"))
    assert (node.host_path, node.major, node.minor, node.subsystem) == ("/dev/loop3", 7, 3, "block")


def test_udev_skips_devices_without_a_node_yet(host: FakeHost) -> None:
    """A device sysfs knows but whose /dev node does not exist (yet) is skipped."""
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    host.add_usb_serial("1-4", ttys=("ttyUSB1",))
    host.remove_node("/dev/ttyUSB0")
    assert [h for h, _ in paths(host, udev(subsystem="tty"))] == ["/dev/ttyUSB1"]


def test_udev_misc_devname_with_directory(host: FakeHost) -> None:
    """A node's path comes from DEVNAME: the misc device tun lives at /dev/net/tun."""
    host.add_misc("net/tun")
    host.add_misc("fuse")
    assert paths(host, udev(subsystem="misc", kernel="tun")) == [("/dev/net/tun", "/dev/net/tun")]


# -- NUMA -----------------------------------------------------------------------


def test_numa_from_nearest_ancestor(host: FakeHost) -> None:
    """A node's NUMA node is its PCI ancestor's; -1 (unknown) becomes None."""
    host.add_drm_card("0000:03:00.0", card=0, render=128, numa_node=1)
    host.add_drm_card("0000:04:00.0", card=1, render=129, numa_node=None)
    numa = {n.host_path: n.numa_node for n in found([glob("/dev/dri/*")], host.roots)}
    assert numa == {
        "/dev/dri/card0": 1,
        "/dev/dri/renderD128": 1,
        "/dev/dri/card1": None,
        "/dev/dri/renderD129": None,
    }


# -- the real machine -----------------------------------------------------------


def test_real_dev_null() -> None:
    """On this machine's real /dev, /dev/null is found as a device node (needs no hardware)."""
    definition = ResourceDefinition("example.com/null", (glob("/dev/null"),))
    (unit,) = discover(definition, Roots())
    (node,) = unit.nodes
    assert (node.host_path, node.container_path) == ("/dev/null", "/dev/null")
    assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,63}", unit.id)
    if node.sysfs_path is not None:  # sysfs may be hidden in a sandbox
        assert (node.major, node.minor) == (1, 3)
