"""The fake host builder reproduces the kernel and udev layout discovery relies on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakesys import FakeHost, udev_encode


def test_usb_serial_layout(tmp_path: Path) -> None:
    """A USB-serial dongle has the kernel's device chain, links, uevent and udev db."""
    host = FakeHost(tmp_path)
    assert host.add_usb_serial(ttys=("ttyUSB0", "ttyUSB1")) == ["/dev/ttyUSB0", "/dev/ttyUSB1"]
    tty = (host.sys / "dev" / "char" / "188:1").resolve()
    usb = host.sys / "devices/pci0000:00/0000:00:14.0/usb1/1-2"
    assert tty == (usb / "1-2:1.1/ttyUSB1/tty/ttyUSB1").resolve()
    assert (tty / "dev").read_text() == "188:1\n"
    assert "DEVNAME=ttyUSB1\n" in (tty / "uevent").read_text()
    assert (tty / "subsystem").resolve() == (host.sys / "class/tty").resolve()
    port = tty.parent.parent
    assert (port / "driver").resolve() == (host.sys / "bus/usb-serial/drivers/ftdi_sio").resolve()
    assert (usb / "idVendor").read_text() == "0403\n"
    assert "DEVTYPE=usb_device\n" in (usb / "uevent").read_text()
    assert "DEVTYPE=usb_interface\n" in (usb / "1-2:1.1/uevent").read_text()
    assert (host.sys / "class/tty/ttyUSB1").resolve() == tty
    db = (host.udev_data / "c188:1").read_text().splitlines()
    assert "E:ID_SERIAL=FTDI_FT232R_USB_UART_A1B2C3" in db
    assert "E:ID_PATH=pci-0000:00:14.0-usb-0:2:1.1" in db
    assert "S:serial/by-id/usb-FTDI_FT232R_USB_UART_A1B2C3-if01-port0" in db
    link = host.dev / "serial/by-id/usb-FTDI_FT232R_USB_UART_A1B2C3-if01-port0"
    assert os.readlink(link) == "../../ttyUSB1"
    assert link.resolve() == host.node("/dev/ttyUSB1")
    assert host.node("/dev/ttyUSB1").is_file()


def test_remove_unplugs_whole_device(tmp_path: Path) -> None:
    """remove() takes away every node, link, sysfs dir and db entry of one device only."""
    host = FakeHost(tmp_path)
    host.add_usb_serial("1-2", serial="AAA", ttys=("ttyUSB0",))
    host.add_usb_serial("1-3", serial="BBB", ttys=("ttyUSB1",))
    host.remove("/dev/ttyUSB0")
    assert not host.node("/dev/ttyUSB0").exists()
    assert not (host.sys / "dev/char/188:0").is_symlink()
    assert not (host.udev_data / "c188:0").exists()
    assert not (host.sys / "devices/pci0000:00/0000:00:14.0/usb1/1-2").exists()
    assert not (host.sys / "bus/usb/devices/1-2:1.0").is_symlink()
    assert not (host.dev / "serial/by-id/usb-FTDI_FT232R_USB_UART_AAA-if00-port0").is_symlink()
    assert (host.sys / "dev/char/188:1").resolve().is_dir()
    assert host.node("/dev/ttyUSB1").is_file()
    with pytest.raises(KeyError):
        host.remove("/dev/ttyUSB0")


def test_remove_node_keeps_sysfs(tmp_path: Path) -> None:
    """remove_node() deletes the node and its /dev links but leaves sysfs."""
    host = FakeHost(tmp_path)
    host.add_drm_card()
    host.remove_node("/dev/dri/card0")
    assert not host.node("/dev/dri/card0").exists()
    assert not (host.dev / "dri/by-path/pci-0000:03:00.0-card").is_symlink()
    assert (host.sys / "dev/char/226:0").resolve().is_dir()
    assert host.node("/dev/dri/renderD128").exists()


def test_drm_sound_misc_loop(tmp_path: Path) -> None:
    """GPU, sound card, misc and loop devices land where the kernel puts them."""
    host = FakeHost(tmp_path)
    assert host.add_drm_card(numa_node=1) == ["/dev/dri/card0", "/dev/dri/renderD128"]
    gpu = host.sys / "devices/pci0000:00/0000:00:01.0/0000:03:00.0"
    assert (gpu / "numa_node").read_text() == "1\n"
    assert (host.sys / "dev/char/226:128").resolve() == (gpu / "drm/renderD128").resolve()
    assert host.add_sound_card() == ["/dev/snd/controlC0", "/dev/snd/pcmC0D0p", "/dev/snd/pcmC0D0c"]
    card = host.sys / "devices/pci0000:00/0000:00:1f.3/sound/card0"
    assert (host.sys / "dev/char/116:16").resolve() == (card / "pcmC0D0p").resolve()
    assert (card / "controlC0/subsystem").resolve() == (host.sys / "class/sound").resolve()
    assert host.add_misc("net/tun") == ["/dev/net/tun"]
    assert (host.sys / "dev/char/10:200").resolve().name == "tun"
    assert host.add_loop(3) == ["/dev/loop3"]
    assert (host.sys / "dev/block/7:3").resolve().name == "loop3"
    assert (host.udev_data / "b7:3").exists()


def test_udev_encode() -> None:
    """USB strings are encoded as udev's usb_id does."""
    assert udev_encode("Arduino (www.arduino.cc)") == "Arduino__www.arduino.cc_"
    assert udev_encode("FT232R USB UART ") == "FT232R_USB_UART"


def test_device_nodes_are_found_as_a_real_dev_finds_them(tmp_path: Path) -> None:
    """``device_nodes=True`` makes real device files, which discovery locates through
    ``st_rdev`` (as on a real /dev) to the same units a regular-file tree gives."""
    from genericdp.config import load_text
    from genericdp.discovery import discover
    from genericdp.discovery.nodes import Scan
    from tests.fakesys import can_mknod

    if not can_mknod(tmp_path):
        pytest.skip("making device nodes needs CAP_MKNOD")
    config = load_text(
        "version: v1\nresources:\n"
        "  - name: example.com/null\n    match: [{glob: /dev/null}]\n"
        "  - name: example.com/loop\n    match: [{glob: '/dev/loop*'}]\n",
        "t.yaml",
    )
    units = []
    for name, device_nodes in (("plain", False), ("nodes", True)):
        host = FakeHost(tmp_path / name, device_nodes=device_nodes)
        host.add_plain("/dev/null")
        host.add_loop(0)
        null = host.node("/dev/null")
        assert null.is_char_device() is device_nodes
        assert host.node("/dev/loop0").is_block_device() is device_nodes
        scan = Scan(host.roots)
        assert scan.locate("null") is not None
        assert ("_devname_index" not in vars(scan)) is device_nodes  # no walk of sysfs by name
        units.append(
            [
                [(n.container_path, n.major, n.minor, n.subsystem) for u in us for n in u.nodes]
                for us in (discover(r, host.roots) for r in config.resources)
            ]
        )
    assert units[0] == units[1] == [[("/dev/null", 1, 3, "mem")], [("/dev/loop0", 7, 0, "block")]]
