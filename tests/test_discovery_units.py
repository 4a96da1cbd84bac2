"""Units: how groupBy forms them and the stable IDs they get."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genericdp.config.model import GlobMatcher, GroupBy, Matcher, ResourceDefinition
from genericdp.discovery import discover, find_nodes, group_units
from genericdp.discovery.model import MAX_ID_LENGTH, Unit
from genericdp.kubelet.devices import replica_ids, unit_id_of
from tests.fakesys import FakeHost

NODE = GroupBy()
PARENT_USB = GroupBy("parent", subsystem="usb")
PARENT_PCI = GroupBy("parent", subsystem="pci")
PARENT_SOUND = GroupBy("parent", subsystem="sound")
USB_DEV = "devices/pci0000:00/0000:00:14.0/usb1"
VALID_ID = re.compile(r"[A-Za-z0-9_.:-]+")


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


def units(
    host: FakeHost, *patterns: str, group_by: GroupBy = NODE, count: int = 1
) -> tuple[Unit, ...]:
    matchers: tuple[Matcher, ...] = tuple(GlobMatcher(p) for p in patterns)
    return discover(ResourceDefinition("example.com/x", matchers, group_by, count), host.roots)


def summary(found: tuple[Unit, ...]) -> list[tuple[str, list[str]]]:
    return [(u.id, [n.container_path for n in u.nodes]) for u in found]


def test_two_ttys_of_one_dongle_node_vs_parent(host: FakeHost) -> None:
    """An FT2232 gives two units per node (by interface) or one unit per USB device."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0", "ttyUSB1"))
    assert summary(units(host, "/dev/ttyUSB*")) == [
        ("usb-A1B2C3-if00", ["/dev/ttyUSB0"]),
        ("usb-A1B2C3-if01", ["/dev/ttyUSB1"]),
    ]
    (unit,) = units(host, "/dev/ttyUSB*", group_by=PARENT_USB)
    assert summary((unit,)) == [("usb-A1B2C3", ["/dev/ttyUSB0", "/dev/ttyUSB1"])]
    assert unit.parent == f"{USB_DEV}/1-2"
    assert unit.attributes["idVendor"] == "0403"
    assert unit.attributes["serial"] == "A1B2C3"
    assert unit.properties["ID_SERIAL_SHORT"] == "A1B2C3"


def test_one_interface_keeps_plain_serial_id(host: FakeHost) -> None:
    """A single-tty dongle's node unit is named by its serial alone."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    assert summary(units(host, "/dev/ttyUSB*")) == [("usb-A1B2C3", ["/dev/ttyUSB0"])]


def test_identical_dongles_differing_in_serial(host: FakeHost) -> None:
    """Two identical dongles are separate units named by their serials."""
    host.add_usb_serial("1-2", serial="AAA111", ttys=("ttyUSB0",))
    host.add_usb_serial("1-4", serial="BBB222", ttys=("ttyUSB1",))
    expected = [("usb-AAA111", ["/dev/ttyUSB0"]), ("usb-BBB222", ["/dev/ttyUSB1"])]
    assert summary(units(host, "/dev/ttyUSB*")) == expected
    assert summary(units(host, "/dev/ttyUSB*", group_by=PARENT_USB)) == expected


def test_identical_dongles_without_serial_use_port(host: FakeHost) -> None:
    """Dongles with no serial get distinct IDs from where they are plugged (ID_PATH)."""
    host.add_usb_serial("1-2", serial=None, ttys=("ttyUSB0",))
    host.add_usb_serial("1-4", serial=None, ttys=("ttyUSB1",))
    assert summary(units(host, "/dev/ttyUSB*")) == [
        ("pci-0000:00:14.0-usb-0:2:1.0", ["/dev/ttyUSB0"]),
        ("pci-0000:00:14.0-usb-0:4:1.0", ["/dev/ttyUSB1"]),
    ]
    assert summary(units(host, "/dev/ttyUSB*", group_by=PARENT_USB)) == [
        ("pci-0000:00:14.0-usb-0:2", ["/dev/ttyUSB0"]),
        ("pci-0000:00:14.0-usb-0:4", ["/dev/ttyUSB1"]),
    ]


def test_no_serial_no_udev_database_uses_usb_port(host: FakeHost) -> None:
    """Without udev data a USB parent is named by its port as udev's path_id would spell it."""
    host.add_usb_serial("1-2", serial=None, ttys=("ttyUSB0",))
    host.add_usb_serial("1-4.3", serial=None, ttys=("ttyUSB1",))
    for entry in host.udev_data.iterdir():
        entry.unlink()
    nodes = tuple(n for n, _ in find_nodes([GlobMatcher("/dev/ttyUSB*")], host.roots))
    found = group_units(nodes, PARENT_USB, host.roots)
    assert [u.id for u in found] == ["pci-0000:00:14.0-usb-0:2", "pci-0000:00:14.0-usb-0:4.3"]


def test_identical_dongles_with_same_serial(host: FakeHost) -> None:
    """Cheap clones sharing one serial are told apart by their port."""
    host.add_usb_serial("1-2", serial="0001", ttys=("ttyUSB0",), driver="ch341")
    host.add_usb_serial("1-4", serial="0001", ttys=("ttyUSB1",), driver="ch341")
    assert summary(units(host, "/dev/ttyUSB*")) == [
        ("usb-0001-pci-0000:00:14.0-usb-0:2:1.0", ["/dev/ttyUSB0"]),
        ("usb-0001-pci-0000:00:14.0-usb-0:4:1.0", ["/dev/ttyUSB1"]),
    ]


def test_drm_card_and_render_under_one_pci_device(host: FakeHost) -> None:
    """parent:pci makes one unit of a GPU's card and render nodes, on its NUMA node."""
    host.add_drm_card("0000:03:00.0", card=0, render=128, numa_node=1)
    host.add_drm_card("0000:04:00.0", card=1, render=129, numa_node=0)
    found = units(host, "/dev/dri/*", group_by=PARENT_PCI)
    assert summary(found) == [
        ("pci-0000:03:00.0", ["/dev/dri/card0", "/dev/dri/renderD128"]),
        ("pci-0000:04:00.0", ["/dev/dri/card1", "/dev/dri/renderD129"]),
    ]
    assert [u.numa_node for u in found] == [1, 0]
    assert found[0].parent == "devices/pci0000:00/0000:00:01.0/0000:03:00.0"
    assert found[0].attributes["vendor"] == "0x8086"
    assert summary(units(host, "/dev/dri/*")) == [
        ("pci-0000:03:00.0-card0", ["/dev/dri/card0"]),
        ("pci-0000:03:00.0-renderD128", ["/dev/dri/renderD128"]),
        ("pci-0000:04:00.0-card1", ["/dev/dri/card1"]),
        ("pci-0000:04:00.0-renderD129", ["/dev/dri/renderD129"]),
    ]


def test_alsa_nodes_grouped_by_card(host: FakeHost) -> None:
    """parent:sound groups a card's control and pcm nodes; each card is one unit."""
    host.add_sound_card(0, pci="0000:00:1f.3")
    host.add_sound_card(1, pci="0000:03:00.1", pcms=("pcmC1D3p",))
    found = units(host, "/dev/snd/*", group_by=PARENT_SOUND)
    assert summary(found) == [
        ("pci-0000:00:1f.3", ["/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/snd/pcmC0D0p"]),
        ("pci-0000:03:00.1", ["/dev/snd/controlC1", "/dev/snd/pcmC1D3p"]),
    ]
    assert found[0].parent == "devices/pci0000:00/0000:00:1f.3/sound/card0"
    assert found[0].attributes["id"] == "PCH"


def test_nodes_without_the_parent_stand_alone(host: FakeHost) -> None:
    """A node with no ancestor of the grouping subsystem becomes a unit of its own."""
    host.add_usb_serial("1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    host.add_misc("fuse")
    host.add_plain("widget")
    found = units(host, "/dev/ttyUSB0", "/dev/fuse", "/dev/widget", group_by=PARENT_USB)
    assert summary(found) == [
        ("fuse", ["/dev/fuse"]),
        ("usb-A1B2C3", ["/dev/ttyUSB0"]),
        ("widget", ["/dev/widget"]),
    ]
    assert [u.parent for u in found] == [None, f"{USB_DEV}/1-2", None]


def test_all_groups_everything(host: FakeHost) -> None:
    """groupBy all makes one unit of every matched node, and none when nothing matched."""
    host.add_misc("fuse")
    host.add_misc("kvm")
    assert summary(units(host, "/dev/fuse", "/dev/kvm", group_by=GroupBy("all"))) == [
        ("all", ["/dev/fuse", "/dev/kvm"])
    ]
    assert units(host, "/dev/nothing*", group_by=GroupBy("all")) == ()


def test_path_regex_grouping(host: FakeHost) -> None:
    """pathRegex keys on group `key`, else group 1, else the whole match; non-matches drop out."""
    host.add_usb_serial("1-2", serial="AAA", ttys=("ttyUSB0", "ttyUSB1"))
    host.add_usb_serial("1-4", serial="BBB", ttys=("ttyUSB2",))
    by_id = "/dev/serial/by-id/*"
    keyed = GroupBy("pathRegex", pattern=r"usb-FTDI_FT232R_USB_UART_(?P<key>[A-Z]+)-if00")
    assert summary(units(host, by_id, group_by=keyed)) == [
        ("AAA", ["/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_AAA-if00-port0"]),
        ("BBB", ["/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_BBB-if00-port0"]),
    ]
    first_group = GroupBy("pathRegex", pattern=r"UART_([A-Z]+)-")
    assert summary(units(host, by_id, group_by=first_group)) == [
        (
            "AAA",
            [
                "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_AAA-if00-port0",
                "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_AAA-if01-port0",
            ],
        ),
        ("BBB", ["/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_BBB-if00-port0"]),
    ]
    whole = GroupBy("pathRegex", pattern=r"ttyUSB[01]")
    assert summary(units(host, "/dev/ttyUSB*", group_by=whole)) == [
        ("ttyUSB0", ["/dev/ttyUSB0"]),
        ("ttyUSB1", ["/dev/ttyUSB1"]),
    ]


def test_count_replicas_and_length(host: FakeHost) -> None:
    """With count N every unit yields N kubelet IDs that all fit in 63 characters."""
    host.add_usb_serial("1-2", serial="S" * 70, ttys=("ttyUSB0",))
    (unit,) = units(host, "/dev/ttyUSB0", count=12)
    ids = replica_ids(unit.id, 12)
    assert len(ids) == 12
    assert max(len(i) for i in ids) == MAX_ID_LENGTH
    assert {unit_id_of(i) for i in ids} == {unit.id}


def test_long_serial_is_truncated_with_a_stable_hash(host: FakeHost) -> None:
    """A long serial gives a 63-character ID; serials sharing a long prefix stay distinct."""
    prefix = "X" * 70
    host.add_usb_serial("1-2", serial=prefix + "1", ttys=("ttyUSB0",))
    host.add_usb_serial("1-4", serial=prefix + "2", ttys=("ttyUSB1",))
    first, second = units(host, "/dev/ttyUSB*")
    assert len(first.id) == len(second.id) == MAX_ID_LENGTH
    assert first.id != second.id
    assert first.id.startswith("usb-XXXX")
    assert re.fullmatch(r"usb-X+-[0-9a-f]{8}", first.id)
    assert [u.id for u in units(host, "/dev/ttyUSB*")] == [first.id, second.id]


def test_ids_are_sanitized(host: FakeHost) -> None:
    """Odd serial characters are replaced and '::' (the replica separator) never appears."""
    host.add_usb_serial("1-2", serial="A::B/C d", ttys=("ttyUSB0",))
    (unit,) = units(host, "/dev/ttyUSB0", count=2)
    assert VALID_ID.fullmatch(unit.id)
    assert "::" not in unit.id
    assert unit.id == "usb-A:_B_C_d"
    assert [unit_id_of(i) for i in replica_ids(unit.id, 2)] == [unit.id, unit.id]


def test_ids_stable_across_runs_and_removal(host: FakeHost) -> None:
    """Same tree, same IDs; unplugging one dongle leaves the others' IDs unchanged."""
    host.add_usb_serial("1-2", serial="AAA", ttys=("ttyUSB0", "ttyUSB1"))
    host.add_usb_serial("1-4", serial=None, ttys=("ttyUSB2",))
    host.add_usb_serial("1-5", serial=None, ttys=("ttyUSB3",))
    host.add_usb_acm("1-3", tty="ttyACM0")
    for group_by in (NODE, PARENT_USB):
        before = {u.nodes[0].host_path: u.id for u in units(host, "/dev/tty*", group_by=group_by)}
        again = {u.nodes[0].host_path: u.id for u in units(host, "/dev/tty*", group_by=group_by)}
        assert again == before
    before = {u.nodes[0].host_path: u.id for u in units(host, "/dev/tty*")}
    host.remove("/dev/ttyUSB2")
    host.remove("/dev/ttyACM0")
    after = {u.nodes[0].host_path: u.id for u in units(host, "/dev/tty*")}
    assert after == {
        path: before[path] for path in ("/dev/ttyUSB0", "/dev/ttyUSB1", "/dev/ttyUSB3")
    }


def test_unit_attributes_of_first_node_without_parent(host: FakeHost) -> None:
    """A node unit carries its node's attributes, properties and NUMA node."""
    host.add_drm_card(numa_node=1)
    unit = units(host, "/dev/dri/card0")[0]
    assert unit.attributes == {"dev": "226:0"}
    assert unit.properties["ID_PATH"] == "pci-0000:03:00.0"
    assert (unit.numa_node, unit.parent) == (1, None)


def test_numa_none_when_nodes_disagree(host: FakeHost) -> None:
    """A unit spanning NUMA nodes has no NUMA node."""
    host.add_drm_card("0000:03:00.0", card=0, render=128, numa_node=0)
    host.add_drm_card("0000:04:00.0", card=1, render=129, numa_node=1)
    (unit,) = units(host, "/dev/dri/card*", group_by=GroupBy("all"))
    assert unit.numa_node is None
