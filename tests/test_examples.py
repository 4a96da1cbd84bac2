"""The example configs users copy: each validates, finds exactly the hardware it
is written for on a fake host (and not the look-alikes next to it), and gives a
container the env and devices its header comment promises."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from genericdp.allocation.cdi import cdi_spec
from genericdp.allocation.plan import Allocation, DeviceSpec, plan_allocation
from genericdp.config import load
from genericdp.config.model import ResourceDefinition
from genericdp.discovery import discover
from genericdp.discovery.model import Roots, Unit
from genericdp.kubelet.devices import replica_ids
from tests.fakesys import FakeHost

EXAMPLES = Path(__file__).resolve().parent.parent / "configs" / "examples"
ALL_EXAMPLES = sorted(EXAMPLES.glob("*.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema=../../schemas/config-v1.schema.json"

# What a unit is, for comparing: its ID and its nodes as (host path, container path).
Shape = dict[str, list[tuple[str, str]]]


def definition(example: str, name: str) -> ResourceDefinition:
    return load([EXAMPLES / example]).by_name()[name]


def found(host: FakeHost, example: str, name: str) -> list[Unit]:
    return list(discover(definition(example, name), host.roots))


def shape(units: Sequence[Unit]) -> Shape:
    return {u.id: [(n.host_path, n.container_path) for n in u.nodes] for u in units}


def same(*paths: str) -> list[tuple[str, str]]:
    """Nodes whose container path is their host path (udev and plain glob matches)."""
    return [(p, p) for p in paths]


def allocate(example: str, name: str, units: Sequence[Unit], node_name: str = "n1") -> Allocation:
    d = definition(example, name)
    ids = [replica_ids(u.id, d.count)[0] for u in units]
    return plan_allocation(d, units, node_name=node_name, device_ids=ids).receives


def by_id(units: Sequence[Unit], unit_id: str) -> Unit:
    return next(u for u in units if u.id == unit_id)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


# -- every file ------------------------------------------------------------


def test_the_expected_examples_exist() -> None:
    """The examples the docs point users at are all there."""
    names = {p.name for p in ALL_EXAMPLES}
    assert {
        "demo.yaml",
        "fuse.yaml",
        "tun.yaml",
        "kvm.yaml",
        "kvm-tun-fuse.yaml",
        "usb-serial-ftdi.yaml",
        "serial-by-id.yaml",
        "sound-card.yaml",
        "gpu-render.yaml",
        "gpu-cdi.yaml",
        "zigbee-zwave.yaml",
        "loop.yaml",
        "shared-device.yaml",
        "nvidia-gpu.yaml",
        "nvidia-gpu-cdi.yaml",
        "rdma.yaml",
        "usb-zigbee.yaml",
    } <= names


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=lambda p: p.name)
def test_example_validates_and_compiles_its_templates(path: Path) -> None:
    """Each example passes the loader, templates included."""
    config = load([path])
    assert config.resources
    for resource in config.resources:
        assert resource.templates is not None


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=lambda p: p.name)
def test_example_header_says_how_to_use_it(path: Path) -> None:
    """Each example starts with the schema line and a comment showing resources.limits."""
    lines = path.read_text().splitlines()
    assert lines[0] == SCHEMA_LINE
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    text = "\n".join(header)
    assert "limits:" in text
    names = [r.name for r in load([path]).resources]
    assert any(f"{name}: " in text for name in names), names
    if any(r.allocate.cdi for r in load([path]).resources):
        assert "CDI-enabled container runtime" in text, "cdi: true needs a CDI runtime: say so"


# -- demo --------------------------------------------------------------------


def test_demo_finds_null_zero_loop_and_fuse(host: FakeHost) -> None:
    """The demo finds the always-there nodes, one loop unit per device, not loop-control."""
    host.add_plain("/dev/null")
    host.add_plain("/dev/zero")
    host.add_plain("/dev/random")
    host.add_misc("fuse")
    host.add_loop(0)
    host.add_loop(1)
    host.add_misc("loop-control", minor=237)
    assert shape(found(host, "demo.yaml", "example.com/null")) == {"null": same("/dev/null")}
    assert shape(found(host, "demo.yaml", "example.com/zero")) == {"zero": same("/dev/zero")}
    assert shape(found(host, "demo.yaml", "example.com/fuse")) == {"fuse": same("/dev/fuse")}
    assert shape(found(host, "demo.yaml", "example.com/loop")) == {
        "loop0": same("/dev/loop0"),
        "loop1": same("/dev/loop1"),
    }


def test_demo_null_is_shared_by_four(host: FakeHost) -> None:
    """/dev/null is one unit advertised four times; a container gets the node and its ID."""
    host.add_plain("/dev/null")
    units = found(host, "demo.yaml", "example.com/null")
    assert definition("demo.yaml", "example.com/null").count == 4
    assert replica_ids(units[0].id, 4) == ("null::0", "null::1", "null::2", "null::3")
    allocation = allocate("demo.yaml", "example.com/null", units)
    assert paths_of(allocation.devices) == (DeviceSpec("/dev/null", "/dev/null", "rw"),)
    assert dict(allocation.env) == {"DEMO_NULL": "/dev/null", "DEMO_NULL_DEVICE_IDS": "null::0"}


def test_demo_loop_allocation_lists_devices_and_units(host: FakeHost) -> None:
    """Two loop units give both nodes, the env list and the unit annotation."""
    for n in range(3):
        host.add_loop(n)
    units = found(host, "demo.yaml", "example.com/loop")
    chosen = [by_id(units, "loop2"), by_id(units, "loop0")]
    allocation = allocate("demo.yaml", "example.com/loop", chosen)
    assert [d.host_path for d in allocation.devices] == ["/dev/loop2", "/dev/loop0"]
    assert allocation.env["DEMO_LOOP_DEVICES"] == "/dev/loop2,/dev/loop0"
    assert dict(allocation.annotations) == {"example.com/loop-units": "loop2,loop0"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads this Linux host's /dev")
def test_demo_finds_real_devices_on_this_machine() -> None:
    """On any Linux machine the demo advertises /dev/null and /dev/zero (read-only look)."""
    roots = Roots()
    null = discover(definition("demo.yaml", "example.com/null"), roots)
    zero = discover(definition("demo.yaml", "example.com/zero"), roots)
    assert [n.host_path for u in null for n in u.nodes] == ["/dev/null"]
    assert [n.host_path for u in zero for n in u.nodes] == ["/dev/zero"]


# -- shared virtual devices -----------------------------------------------------


def test_fuse_is_shared(host: FakeHost) -> None:
    """/dev/fuse is one unit with many shares; /dev/kvm next to it is not taken."""
    host.add_misc("fuse")
    host.add_misc("kvm")
    units = found(host, "fuse.yaml", "example.com/fuse")
    assert shape(units) == {"fuse": same("/dev/fuse")}
    assert definition("fuse.yaml", "example.com/fuse").unbounded
    allocation = allocate("fuse.yaml", "example.com/fuse", units)
    assert paths_of(allocation.devices) == (DeviceSpec("/dev/fuse", "/dev/fuse", "rw"),)
    assert dict(allocation.env) == {"FUSE_DEVICE": "/dev/fuse"}


def test_tun_is_shared(host: FakeHost) -> None:
    """/dev/net/tun is one shared unit and its container gets the node at the same path."""
    host.add_misc("net/tun")
    host.add_misc("fuse")
    units = found(host, "tun.yaml", "example.com/tun")
    assert [[n.host_path for n in u.nodes] for u in units] == [["/dev/net/tun"]]
    assert definition("tun.yaml", "example.com/tun").unbounded
    allocation = allocate("tun.yaml", "example.com/tun", units)
    assert paths_of(allocation.devices) == (DeviceSpec("/dev/net/tun", "/dev/net/tun", "rw"),)
    assert dict(allocation.env) == {"TUN_DEVICE": "/dev/net/tun"}


def test_kvm_and_vhost_net(host: FakeHost) -> None:
    """kvm.yaml's two resources each find their own node and nothing else."""
    host.add_misc("kvm")
    host.add_misc("vhost-net")
    host.add_misc("net/tun")
    kvm = found(host, "kvm.yaml", "example.com/kvm")
    vhost = found(host, "kvm.yaml", "example.com/vhost-net")
    assert shape(kvm) == {"kvm": same("/dev/kvm")}
    assert shape(vhost) == {"vhost-net": same("/dev/vhost-net")}
    assert dict(allocate("kvm.yaml", "example.com/kvm", kvm).env) == {"KVM_DEVICE": "/dev/kvm"}
    assert dict(allocate("kvm.yaml", "example.com/vhost-net", vhost).env) == {
        "VHOST_NET_DEVICE": "/dev/vhost-net"
    }


def test_kvm_tun_fuse_share_each_node_without_a_count(host: FakeHost) -> None:
    """kvm-tun-fuse.yaml: four unbounded resources, one unit each, each its own node."""
    for name in ("kvm", "vhost-net", "net/tun", "fuse"):
        host.add_misc(name)
    env = {
        "example.com/kvm": ("/dev/kvm", "KVM_DEVICE"),
        "example.com/vhost-net": ("/dev/vhost-net", "VHOST_NET_DEVICE"),
        "example.com/tun": ("/dev/net/tun", "TUN_DEVICE"),
        "example.com/fuse": ("/dev/fuse", "FUSE_DEVICE"),
    }
    for name, (path, variable) in env.items():
        assert definition("kvm-tun-fuse.yaml", name).unbounded
        units = found(host, "kvm-tun-fuse.yaml", name)
        assert [[n.host_path for n in u.nodes] for u in units] == [[path]]
        allocation = allocate("kvm-tun-fuse.yaml", name, units)
        assert paths_of(allocation.devices) == (DeviceSpec(path, path, "rw"),)
        assert dict(allocation.env) == {variable: path}
    assert definition("kvm-tun-fuse.yaml", "example.com/fuse").free_ids == 8
    assert definition("kvm-tun-fuse.yaml", "example.com/tun").free_ids == 4


def test_kvm_finds_nothing_without_kvm(host: FakeHost) -> None:
    """A node without /dev/kvm advertises no kvm units rather than failing."""
    host.add_misc("fuse")
    assert found(host, "kvm.yaml", "example.com/kvm") == []


# -- USB serial --------------------------------------------------------------------


def add_ftdi_and_decoys(host: FakeHost) -> None:
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    host.add_usb_serial("1-3", serial="B2", ttys=("ttyUSB1",))  # identical model, other dongle
    host.add_usb_serial("1-4", serial="FT4X", product="6010", ttys=("ttyUSB2", "ttyUSB3"))
    host.add_usb_acm("1-5", tty="ttyACM0")  # an Arduino Uno
    host.add_usb_serial(  # a CP2102 adapter
        "1-6",
        serial="0001",
        vendor="10c4",
        product="ea60",
        driver="cp210x",
        manufacturer="Silicon Labs",
        model="CP2102 USB to UART Bridge Controller",
        ttys=("ttyUSB4",),
    )
    host.add_usb_serial(
        "1-7", serial="JT1", product="8a98", ttys=("ttyUSB5",)
    )  # FTDI VID, JTAG PID


def test_ftdi_finds_each_dongle_as_one_unit(host: FakeHost) -> None:
    """Identical dongles are separate units; a dual-port one is one unit of two ttys."""
    add_ftdi_and_decoys(host)
    units = found(host, "usb-serial-ftdi.yaml", "example.com/ftdi")
    assert shape(units) == {
        "usb-A1": same("/dev/ttyUSB0"),
        "usb-B2": same("/dev/ttyUSB1"),
        "usb-FT4X": same("/dev/ttyUSB2", "/dev/ttyUSB3"),
    }


def test_ftdi_does_not_take_arduino_cp210x_or_other_ftdi_products(host: FakeHost) -> None:
    """The Arduino, the CP2102 and an FTDI-VID JTAG probe are left alone."""
    add_ftdi_and_decoys(host)
    taken = {
        n.host_path
        for u in found(host, "usb-serial-ftdi.yaml", "example.com/ftdi")
        for n in u.nodes
    }
    assert taken.isdisjoint({"/dev/ttyACM0", "/dev/ttyUSB4", "/dev/ttyUSB5"})


def test_ftdi_allocation_lists_every_port_of_the_dongle(host: FakeHost) -> None:
    """A container given the dual-port dongle gets both ttys and both in SERIAL_PORTS."""
    add_ftdi_and_decoys(host)
    units = found(host, "usb-serial-ftdi.yaml", "example.com/ftdi")
    allocation = allocate("usb-serial-ftdi.yaml", "example.com/ftdi", [by_id(units, "usb-FT4X")])
    assert paths_of(allocation.devices) == (
        DeviceSpec("/dev/ttyUSB2", "/dev/ttyUSB2", "rw"),
        DeviceSpec("/dev/ttyUSB3", "/dev/ttyUSB3", "rw"),
    )
    assert dict(allocation.env) == {
        "SERIAL_PORTS": "/dev/ttyUSB2,/dev/ttyUSB3",
        "SERIAL_PORT": "/dev/ttyUSB2",
    }
    assert dict(allocation.annotations) == {"example.com/ftdi-units": "usb-FT4X"}


def test_ftdi_ids_survive_replugging_into_another_port(tmp_path: Path) -> None:
    """A dongle keeps its unit ID when it comes back on another port as another ttyUSB."""
    first = FakeHost(tmp_path / "before")
    first.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    later = FakeHost(tmp_path / "after")
    later.add_usb_serial("1-2", serial="Z9", ttys=("ttyUSB0",))
    later.add_usb_serial("2-1.4", serial="A1", ttys=("ttyUSB1",))
    before = found(first, "usb-serial-ftdi.yaml", "example.com/ftdi")
    after = found(later, "usb-serial-ftdi.yaml", "example.com/ftdi")
    assert [u.id for u in before] == ["usb-A1"]
    assert shape(after)["usb-A1"] == same("/dev/ttyUSB1")


def test_serial_by_id_uses_the_link_as_container_path(host: FakeHost) -> None:
    """Each by-id link is a unit: the container sees the link name, backed by the real tty."""
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    host.add_usb_acm("1-3", serial="ARD1", tty="ttyACM0")
    host.add_usb_serial("1-4", serial="NOLINK", ttys=("ttyUSB1",), by_id=False)  # by-path only
    units = found(host, "serial-by-id.yaml", "example.com/serial-by-id")
    nodes = sorted((n.host_path, n.container_path) for u in units for n in u.nodes)
    assert nodes == [
        ("/dev/ttyACM0", "/dev/serial/by-id/usb-Arduino__www.arduino.cc__0043_ARD1-if00"),
        ("/dev/ttyUSB0", "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A1-if00-port0"),
    ]
    assert len({u.id for u in units}) == 2
    ftdi = next(u for u in units if u.nodes[0].host_path == "/dev/ttyUSB0")
    allocation = allocate("serial-by-id.yaml", "example.com/serial-by-id", [ftdi])
    link = "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A1-if00-port0"
    assert paths_of(allocation.devices) == (DeviceSpec(link, "/dev/ttyUSB0", "rw"),)
    assert dict(allocation.env) == {"SERIAL_PORT": link, "SERIAL_PORTS": link}


# -- radios --------------------------------------------------------------------------


def add_radios(host: FakeHost) -> None:
    host.add_usb_serial(
        "1-2",
        serial="c0ffee",
        vendor="10c4",
        product="ea60",
        driver="cp210x",
        manufacturer="Silicon Labs",
        model="Sonoff Zigbee 3.0 USB Dongle Plus",
        ttys=("ttyUSB0",),
    )
    host.add_usb_serial(  # the same chip in a plain USB-UART cable
        "1-3",
        serial="0001",
        vendor="10c4",
        product="ea60",
        driver="cp210x",
        manufacturer="Silicon Labs",
        model="CP2102 USB to UART Bridge Controller",
        ttys=("ttyUSB1",),
    )
    host.add_usb_acm(
        "1-4",
        serial=None,
        vendor="0658",
        product="0200",
        manufacturer="0658",
        model="0200",
        tty="ttyACM0",
    )
    host.add_usb_acm("1-5", tty="ttyACM1")  # an Arduino, also CDC ACM


def test_zigbee_finds_the_sonoff_stick_only(host: FakeHost) -> None:
    """The Sonoff stick is found by its udev properties; the plain CP2102 is not."""
    add_radios(host)
    units = found(host, "zigbee-zwave.yaml", "example.com/zigbee")
    assert shape(units) == {"usb-c0ffee": same("/dev/ttyUSB0")}
    allocation = allocate("zigbee-zwave.yaml", "example.com/zigbee", units)
    assert paths_of(allocation.devices) == (DeviceSpec("/dev/ttyUSB0", "/dev/ttyUSB0", "rw"),)
    assert dict(allocation.env) == {"ZIGBEE_DEVICE": "/dev/ttyUSB0", "ZIGBEE_SERIAL": "c0ffee"}


def test_usb_zigbee_pins_the_stick_by_serial_at_a_fixed_path(host: FakeHost) -> None:
    """The stick with serial c0ffee is /dev/ttyZIGBEE in the container, its real
    tty on the host, whatever port it is in; another stick is not taken."""
    add_radios(host)
    units = found(host, "usb-zigbee.yaml", "example.com/zigbee-stick")
    assert shape(units) == {"usb-c0ffee": [("/dev/ttyUSB0", "/dev/ttyZIGBEE")]}
    allocation = allocate("usb-zigbee.yaml", "example.com/zigbee-stick", units)
    assert paths_of(allocation.devices) == (DeviceSpec("/dev/ttyZIGBEE", "/dev/ttyUSB0", "rw"),)
    assert dict(allocation.env) == {"ZIGBEE_SERIAL": "c0ffee"}
    host.remove("/dev/ttyUSB0")
    host.add_usb_serial(
        "1-7",
        serial="c0ffee",
        vendor="10c4",
        product="ea60",
        driver="cp210x",
        manufacturer="Silicon Labs",
        model="Sonoff Zigbee 3.0 USB Dongle Plus",
        ttys=("ttyUSB5",),
    )
    units = found(host, "usb-zigbee.yaml", "example.com/zigbee-stick")
    assert shape(units) == {"usb-c0ffee": [("/dev/ttyUSB5", "/dev/ttyZIGBEE")]}


def test_zwave_finds_the_aeotec_stick_only(host: FakeHost) -> None:
    """The Z-Stick (no serial number) is found by vendor and model; the Arduino is not."""
    add_radios(host)
    units = found(host, "zigbee-zwave.yaml", "example.com/zwave")
    assert [[n.host_path for n in u.nodes] for u in units] == [["/dev/ttyACM0"]]
    allocation = allocate("zigbee-zwave.yaml", "example.com/zwave", units)
    assert dict(allocation.env) == {"ZWAVE_DEVICE": "/dev/ttyACM0", "ZWAVE_SERIAL": ""}


# -- PCI: sound and GPUs -----------------------------------------------------------------


def test_sound_cards_group_control_and_pcm_nodes(host: FakeHost) -> None:
    """Each card is one unit of its control and pcm nodes; timer and seq are not in it."""
    host.add_sound_card(0)
    host.add_sound_card(1, pci="0000:00:1f.4", pcms=("pcmC1D0p", "pcmC1D3p"), card_id="HDMI")
    host.add_plain("/dev/snd/timer")
    host.add_plain("/dev/snd/seq")
    units = found(host, "sound-card.yaml", "example.com/sound-card")
    assert sorted(sorted(n.host_path for n in u.nodes) for u in units) == [
        ["/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/snd/pcmC0D0p"],
        ["/dev/snd/controlC1", "/dev/snd/pcmC1D0p", "/dev/snd/pcmC1D3p"],
    ]
    assert len({u.id for u in units}) == 2
    timer = found(host, "sound-card.yaml", "example.com/alsa-timer")
    assert [[n.host_path for n in u.nodes] for u in timer] == [["/dev/snd/timer"]]


def test_sound_card_allocation_names_the_card(host: FakeHost) -> None:
    """A container given card 1 gets its three nodes and ALSA_CARD=1."""
    host.add_sound_card(0)
    host.add_sound_card(1, pci="0000:00:1f.4", pcms=("pcmC1D0p", "pcmC1D3p"))
    units = found(host, "sound-card.yaml", "example.com/sound-card")
    card1 = next(u for u in units if "/dev/snd/controlC1" in {n.host_path for n in u.nodes})
    allocation = allocate("sound-card.yaml", "example.com/sound-card", [card1])
    assert sorted(d.host_path for d in allocation.devices) == [
        "/dev/snd/controlC1",
        "/dev/snd/pcmC1D0p",
        "/dev/snd/pcmC1D3p",
    ]
    assert allocation.env["ALSA_CARD"] == "1"
    two = allocate("sound-card.yaml", "example.com/sound-card", units)
    assert sorted(two.env["ALSA_CARD"].split(",")) == ["0", "1"]


def add_gpus(host: FakeHost) -> None:
    host.add_drm_card("0000:00:02.0", card=0, render=128, vendor="0x8086", numa_node=None)
    # A discrete AMD card sits behind an Intel PCIe root port (vendor 0x8086 too).
    host.add_drm_card(
        "0000:03:00.0", card=1, render=129, vendor="0x1002", device="0x73bf", driver="amdgpu"
    )
    host.add_drm_card(
        "0000:04:00.0", card=2, render=130, vendor="0x10de", device="0x2204", driver="nouveau"
    )


def test_intel_gpu_is_card_and_render_of_one_pci_device(host: FakeHost) -> None:
    """The Intel iGPU is one unit of card0 and renderD128, named by its PCI address."""
    add_gpus(host)
    units = found(host, "gpu-render.yaml", "example.com/intel-gpu")
    assert shape(units) == {
        "pci-0000:00:02.0": same("/dev/dri/card0", "/dev/dri/renderD128"),
    }
    allocation = allocate("gpu-render.yaml", "example.com/intel-gpu", units)
    assert [d.host_path for d in allocation.devices] == ["/dev/dri/card0", "/dev/dri/renderD128"]
    assert dict(allocation.env) == {
        "RENDER_NODES": "/dev/dri/renderD128",
        "GPU_UNITS": "pci-0000:00:02.0",
    }


def test_amd_gpu_behind_an_intel_root_port_is_not_intel(host: FakeHost) -> None:
    """The vendor is matched on the GPU, not on the Intel root port above the AMD card."""
    add_gpus(host)
    amd = found(host, "gpu-render.yaml", "example.com/amd-gpu")
    assert shape(amd) == {"pci-0000:03:00.0": same("/dev/dri/card1", "/dev/dri/renderD129")}
    intel = found(host, "gpu-render.yaml", "example.com/intel-gpu")
    taken = {n.host_path for u in intel for n in u.nodes}
    assert taken.isdisjoint({"/dev/dri/card1", "/dev/dri/renderD129", "/dev/dri/card2"})


def test_gpu_cdi_describes_each_gpu_as_one_cdi_device(host: FakeHost) -> None:
    """Every GPU is a card+render unit; Allocate names it in CDI and still lists its nodes."""
    add_gpus(host)
    units = found(host, "gpu-cdi.yaml", "example.com/gpu")
    assert shape(units) == {
        "pci-0000:00:02.0": same("/dev/dri/card0", "/dev/dri/renderD128"),
        "pci-0000:03:00.0": same("/dev/dri/card1", "/dev/dri/renderD129"),
        "pci-0000:04:00.0": same("/dev/dri/card2", "/dev/dri/renderD130"),
    }
    allocation = allocate("gpu-cdi.yaml", "example.com/gpu", [units[1]])
    assert allocation.cdi_devices == ("example.com/gpu=pci-0000:03:00.0",)
    assert [d.host_path for d in allocation.devices] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert dict(allocation.env) == {"GPU_UNITS": "pci-0000:03:00.0"}
    spec = cdi_spec(definition("gpu-cdi.yaml", "example.com/gpu"), units)
    assert [d["name"] for d in spec["devices"]] == [u.id for u in units]


# -- block and shared ----------------------------------------------------------------------


def test_loop_devices_are_one_unit_each(host: FakeHost) -> None:
    """Every loop block device is a unit; loop-control (a misc device) is not."""
    for n in range(3):
        host.add_loop(n)
    host.add_misc("loop-control", minor=237)
    units = found(host, "loop.yaml", "example.com/loop")
    assert shape(units) == {
        "loop0": same("/dev/loop0"),
        "loop1": same("/dev/loop1"),
        "loop2": same("/dev/loop2"),
    }
    allocation = allocate("loop.yaml", "example.com/loop", [units[0], units[2]])
    assert dict(allocation.env) == {"LOOP_DEVICES": "/dev/loop0,/dev/loop2"}


def test_shared_render_node_has_eight_shares_per_gpu(host: FakeHost) -> None:
    """Each render node is a unit advertised 8 times; a container learns which share it holds."""
    host.add_drm_card("0000:00:02.0", card=0, render=128)
    host.add_drm_card("0000:03:00.0", card=1, render=129, vendor="0x1002", driver="amdgpu")
    d = definition("shared-device.yaml", "example.com/shared-render")
    units = list(discover(d, host.roots))
    assert sorted(n.host_path for u in units for n in u.nodes) == [
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
    ]
    assert d.count == 8
    ids = [i for u in units for i in replica_ids(u.id, d.count)]
    assert len(set(ids)) == 16
    unit = units[0]
    allocation = plan_allocation(d, [unit], device_ids=[f"{unit.id}::5"]).receives
    assert paths_of(allocation.devices) == (
        DeviceSpec(unit.nodes[0].container_path, unit.nodes[0].host_path, "rw"),
    )
    assert dict(allocation.env) == {
        "RENDER_NODE": unit.nodes[0].container_path,
        "SHARE_IDS": f"{unit.id}::5",
    }


def paths_of(devices: tuple[DeviceSpec, ...]) -> tuple[DeviceSpec, ...]:
    """``devices`` without their mode and owner (those of the fake tree's files)."""
    return tuple(DeviceSpec(d.container_path, d.host_path, d.permissions) for d in devices)
