"""A builder of fake host device trees: ``/dev``, ``/sys`` and ``/run/udev`` under a tmp dir.

The trees follow the layout a real kernel and udev produce, so discovery code
that works on them works on a real machine too:

- devices live under ``sys/devices/...`` (``pci0000:00/0000:00:14.0/usb1/1-2/
  1-2:1.0/ttyUSB0/tty/ttyUSB0``); each has a ``uevent`` file, a ``subsystem``
  symlink (to ``sys/bus/<bus>`` or ``sys/class/<class>``), a ``driver`` symlink
  when bound (to ``sys/bus/<bus>/drivers/<name>``), attributes as files ending
  in a newline, and for class devices a ``device`` symlink to their parent;
- a device with a node has a ``dev`` file (``188:0``) and is linked from
  ``sys/dev/char/<maj:min>`` (or ``block``) and ``sys/class/<class>/<name>``;
- the udev database has ``run/udev/data/c<maj>:<min>`` with ``E:KEY=VALUE``
  and ``S:<devlink>`` lines, and ``dev`` holds the devlinks as relative
  symlinks (``dev/serial/by-id/... -> ../../ttyUSB0``) and ``dev/char/<maj:min>``.

Device nodes are regular files unless ``FakeHost(device_nodes=True)`` (the benchmarks,
which measure discovery as a real /dev costs it; tests do not mknod; the one exception is
NVIDIA's nodes, which no sysfs entry describes: ``add_nvidia_gpu``), so code under test must
find sysfs for them by name when ``st_rdev`` is not available: discovery
takes a regular file for a device node only where sysfs names a device node
of exactly that path (its ``DEVNAME``); ``add_file`` makes one that no device
stands behind, which discovery must skip.

Every ``add_*`` returns the host paths (``/dev/...``) of the nodes it is about
(a USB dongle also gets its ``/dev/bus/usb/BBB/DDD`` node, as on a real host,
but returns only its ttys);
``node(host_path)`` gives where that node lives in the fake tree, ``remove``
unplugs the whole device a node belongs to, ``remove_node`` deletes only the
node and its links (sysfs stays, as when a node has not been created yet).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from genericdp.discovery.model import Roots

# Major numbers from the kernel's Documentation/admin-guide/devices.txt.
TTY_USB_MAJOR = 188
TTY_ACM_MAJOR = 166
USB_DEVICE_MAJOR = 189
DRM_MAJOR = 226
SOUND_MAJOR = 116
MISC_MAJOR = 10
LOOP_MAJOR = 7
MEM_MAJOR = 1
IB_MAJOR = 231  # infiniband_mad (umad 0+, issm 64+) and infiniband_verbs (uverbs 192+)
NVIDIA_MAJOR = 195  # nvidia<N>, nvidia-modeset 254, nvidiactl 255
NVIDIA_UVM_MAJOR = 508  # dynamic on a real host; nvidia-uvm 0, nvidia-uvm-tools 1
_MEM_MINORS = {"null": 3, "zero": 5, "full": 7, "random": 8, "urandom": 9}
MISC_MINORS = {"fuse": 229, "kvm": 232, "net/tun": 200, "uinput": 223, "vhost-net": 238}

_UDEV_UNSAFE = re.compile(r"[^0-9A-Za-z#+\-.:=@_]")


def udev_encode(text: str) -> str:
    """A USB string as udev spells it in ID_VENDOR/ID_MODEL/ID_SERIAL.

    udev's ``util_replace_whitespace`` turns each whitespace char into ``_``
    (trailing whitespace dropped) and ``util_replace_chars`` turns anything
    outside ``[0-9A-Za-z#+-.:=@_]`` into ``_``: "Arduino (www.arduino.cc)"
    becomes "Arduino__www.arduino.cc_".
    """
    return _UDEV_UNSAFE.sub("_", re.sub(r"\s", "_", text.rstrip()))


@dataclass(frozen=True)
class _UsbIds:
    """What identifies one fake USB device."""

    port: str  # kernel name: <bus>-<port>[.<port>...]
    serial: str | None
    vendor: str
    product: str
    manufacturer: str
    model: str
    controller: str  # PCI address of the host controller
    bcd_device: str


def _usb_props(ids: _UsbIds) -> dict[str, str]:
    """The properties udev's usb_id builtin sets (ID_SERIAL is vendor_model[_serial])."""
    vendor_enc, model_enc = udev_encode(ids.manufacturer), udev_encode(ids.model)
    props = {
        "ID_BUS": "usb",
        "ID_VENDOR": vendor_enc,
        "ID_VENDOR_ENC": ids.manufacturer.replace(" ", "\\x20"),
        "ID_VENDOR_ID": ids.vendor,
        "ID_MODEL": model_enc,
        "ID_MODEL_ENC": ids.model.replace(" ", "\\x20"),
        "ID_MODEL_ID": ids.product,
        "ID_REVISION": ids.bcd_device,
        "ID_SERIAL": f"{vendor_enc}_{model_enc}",
        "ID_TYPE": "generic",
    }
    if ids.serial is not None:
        props["ID_SERIAL"] += f"_{udev_encode(ids.serial)}"
        props["ID_SERIAL_SHORT"] = udev_encode(ids.serial)
    return props


@dataclass
class _Record:
    """What one ``add_*`` created, so ``remove`` can unplug it again."""

    trees: list[Path] = field(default_factory=list)  # sysfs dirs removed whole
    files: list[Path] = field(default_factory=list)  # links, nodes, db files
    nodes: list[str] = field(default_factory=list)  # host paths of every node
    primary: list[str] = field(default_factory=list)  # what ``add_*`` returns


class FakeHost:
    """Fake ``/dev``, ``/sys`` and ``/run/udev`` trees under ``root``."""

    def __init__(self, root: Path, *, device_nodes: bool = False) -> None:
        """``device_nodes``: make the /dev nodes real device files (mknod, CAP_MKNOD
        needed: ``can_mknod``), as a real /dev has them, instead of regular files."""
        self.root = root
        self.device_nodes = device_nodes
        self.roots = Roots(dev=root / "dev", sys=root / "sys", udev=root / "run" / "udev")
        for path in (self.dev, self.sys / "devices", self.sys / "dev" / "char", self.udev_data):
            path.mkdir(parents=True, exist_ok=True)
        (self.sys / "dev" / "block").mkdir(exist_ok=True)
        self._records: list[_Record] = []
        self._devnums: dict[int, int] = {}  # next USB device number per bus
        self._plain_minors: set[int] = set()

    @property
    def dev(self) -> Path:
        return self.roots.dev

    @property
    def sys(self) -> Path:
        return self.roots.sys

    @property
    def udev(self) -> Path:
        return self.roots.udev

    def root_flags(self) -> list[str]:
        """``--dev-root``, ``--sys-root`` and ``--udev-root`` pointing at this host."""
        return [
            "--dev-root",
            str(self.dev),
            "--sys-root",
            str(self.sys),
            "--udev-root",
            str(self.udev),
        ]

    @property
    def udev_data(self) -> Path:
        return self.roots.udev / "data"

    def node(self, host_path: str) -> Path:
        """Where the host path ``/dev/...`` lives in the fake tree."""
        return self.dev / _dev_relative(host_path)

    # -- USB --------------------------------------------------------------

    def add_usb_serial(
        self,
        port: str = "1-2",
        *,
        serial: str | None = "A1B2C3",
        vendor: str = "0403",
        product: str = "6001",
        ttys: Sequence[str] = ("ttyUSB0",),
        driver: str = "ftdi_sio",
        interfaces: int | None = None,
        numa_node: int | None = None,
        by_id: bool = True,
        manufacturer: str = "FTDI",
        model: str = "FT232R USB UART",
        controller: str = "0000:00:14.0",
        bcd_device: str = "0600",
    ) -> list[str]:
        """A USB-serial converter (ftdi_sio, cp210x, ch341, pl2303): one ttyUSB per interface.

        An FT2232-style dongle is ``ttys=("ttyUSB0", "ttyUSB1")``: two
        interfaces (``1-2:1.0``, ``1-2:1.1``) under one USB device, each with
        a usb-serial port and its tty. A CP210x Zigbee stick is
        ``vendor="10c4", product="ea60", driver="cp210x", manufacturer="Silicon Labs",
        model="Sonoff Zigbee 3.0 USB Dongle Plus"``. ``serial=None`` makes a
        dongle without a serial number (udev then has no ID_SERIAL_SHORT).
        ``numa_node`` is written on the USB host controller (PCI).
        Returns ``/dev/ttyUSB*`` host paths, in interface order.
        """
        count = len(ttys) if interfaces is None else interfaces
        if count != len(ttys):
            raise ValueError(f"{count} interfaces need {count} ttys, got {list(ttys)}")
        record = _Record()
        ids = _UsbIds(port, serial, vendor, product, manufacturer, model, controller, bcd_device)
        usb = self._usb_device(record, ids, numa_node, "ffffff" * count)
        for number, tty in enumerate(ttys):
            intf = self._usb_interface(
                record, usb, ids, number, driver=driver, klass=("ff", "ff", "ff")
            )
            minor = _trailing_number(tty)
            usb_serial = self._device(
                intf / tty,
                subsystem="bus/usb-serial",
                driver=("usb-serial", driver),
                uevent={"DRIVER": driver},
                attrs={"port_number": "0"},
            )
            self._bus_link(record, "usb-serial", usb_serial)
            class_dev = self._device(
                usb_serial / "tty" / tty,
                subsystem="class/tty",
                uevent={"MAJOR": str(TTY_USB_MAJOR), "MINOR": str(minor), "DEVNAME": tty},
            )
            props = _usb_props(ids) | {
                "ID_USB_INTERFACE_NUM": f"{number:02x}",
                "ID_USB_DRIVER": driver,
                "ID_USB_INTERFACES": ":ffffff:",
                "ID_PATH": _usb_id_path(controller, f"{port}:1.{number}"),
            }
            props["ID_PATH_TAG"] = _path_tag(props["ID_PATH"])
            links = [f"serial/by-path/{props['ID_PATH']}-port0"]
            if by_id:
                links.insert(0, f"serial/by-id/usb-{props['ID_SERIAL']}-if{number:02x}-port0")
            self._node(
                record,
                class_dev,
                f"c{TTY_USB_MAJOR}:{minor}",
                tty,
                subsystem="tty",
                props=props,
                devlinks=links,
            )
        self._records.append(record)
        return list(record.primary)

    def add_usb_acm(
        self,
        port: str = "1-3",
        *,
        serial: str | None = "75834353930351F05190",
        vendor: str = "2341",
        product: str = "0043",
        tty: str = "ttyACM0",
        driver: str = "cdc_acm",
        numa_node: int | None = None,
        by_id: bool = True,
        manufacturer: str = "Arduino (www.arduino.cc)",
        model: str = "0043",
        controller: str = "0000:00:14.0",
        bcd_device: str = "0001",
    ) -> list[str]:
        """A CDC ACM modem (Arduino 2341:0043, Aeotec Z-Stick 0658:0200): one ttyACM.

        Like the kernel: a communication interface ``:1.0`` (class 02, the tty
        hangs directly under it as ``tty/ttyACM0``) and a data interface
        ``:1.1`` (class 0a), both bound to ``cdc_acm``.
        Returns ``["/dev/ttyACM0"]``.
        """
        record = _Record()
        ids = _UsbIds(port, serial, vendor, product, manufacturer, model, controller, bcd_device)
        usb = self._usb_device(record, ids, numa_node, "020201" + "0a0000")
        comm = self._usb_interface(record, usb, ids, 0, driver=driver, klass=("02", "02", "01"))
        self._usb_interface(record, usb, ids, 1, driver=driver, klass=("0a", "00", "00"))
        minor = _trailing_number(tty)
        class_dev = self._device(
            comm / "tty" / tty,
            subsystem="class/tty",
            uevent={"MAJOR": str(TTY_ACM_MAJOR), "MINOR": str(minor), "DEVNAME": tty},
        )
        props = _usb_props(ids) | {
            "ID_USB_INTERFACE_NUM": "00",
            "ID_USB_DRIVER": driver,
            "ID_USB_INTERFACES": ":020201:0a0000:",
            "ID_PATH": _usb_id_path(controller, f"{port}:1.0"),
        }
        props["ID_PATH_TAG"] = _path_tag(props["ID_PATH"])
        links = [f"serial/by-path/{props['ID_PATH']}"]
        if by_id:
            links.insert(0, f"serial/by-id/usb-{props['ID_SERIAL']}-if00")
        self._node(
            record,
            class_dev,
            f"c{TTY_ACM_MAJOR}:{minor}",
            tty,
            subsystem="tty",
            props=props,
            devlinks=links,
        )
        self._records.append(record)
        return list(record.primary)

    def _usb_device(
        self, record: _Record, ids: _UsbIds, numa_node: int | None, interface_classes: str
    ) -> Path:
        """The USB device (DEVTYPE=usb_device) with its /dev/bus/usb node."""
        port, serial, vendor, product = ids.port, ids.serial, ids.vendor, ids.product
        manufacturer, model, controller, bcd_device = (
            ids.manufacturer,
            ids.model,
            ids.controller,
            ids.bcd_device,
        )
        bus = int(port.split("-", 1)[0])
        hub = self._root_hub(bus, controller, numa_node)
        parent = hub
        chain = port.split("-", 1)[1].split(".")
        for depth in range(1, len(chain)):  # external hubs between root hub and device
            parent = parent / f"{bus}-{'.'.join(chain[:depth])}"
            if not parent.exists():
                self._device(parent, subsystem="bus/usb", uevent={"DEVTYPE": "usb_device"})
        devnum = self._devnums.get(bus, 2)
        self._devnums[bus] = devnum + 1
        attrs = {
            "idVendor": vendor,
            "idProduct": product,
            "bcdDevice": bcd_device,
            "manufacturer": manufacturer,
            "product": model,
            "busnum": str(bus),
            "devnum": str(devnum),
            "devpath": port.split("-", 1)[1],
            "speed": "12",
            "bDeviceClass": "00",
            "bNumInterfaces": f"{len(interface_classes) // 6:2d}",
            "version": " 2.00",
            "authorized": "1",
        }
        if serial is not None:
            attrs["serial"] = serial
        product_id = f"{int(vendor, 16):x}/{int(product, 16):x}/{int(bcd_device, 16):x}"
        devname = f"bus/usb/{bus:03d}/{devnum:03d}"
        minor = (bus - 1) * 128 + devnum - 1
        uevent = {
            "MAJOR": str(USB_DEVICE_MAJOR),
            "MINOR": str(minor),
            "DEVNAME": devname,
            "DEVTYPE": "usb_device",
            "DRIVER": "usb",
            "PRODUCT": product_id,
            "TYPE": "0/0/0",
            "BUSNUM": f"{bus:03d}",
            "DEVNUM": f"{devnum:03d}",
        }
        usb = self._device(
            parent / port, subsystem="bus/usb", driver=("usb", "usb"), uevent=uevent, attrs=attrs
        )
        record.trees.append(usb)
        self._bus_link(record, "usb", usb)
        props = _usb_props(ids)
        props["ID_USB_INTERFACES"] = ":" + ":".join(
            interface_classes[i : i + 6] for i in range(0, len(interface_classes), 6)
        )
        props["ID_PATH"] = _usb_id_path(controller, port)
        props["ID_PATH_TAG"] = _path_tag(props["ID_PATH"])
        self._node(
            record,
            usb,
            f"c{USB_DEVICE_MAJOR}:{minor}",
            devname,
            subsystem="usb",
            props=props,
            primary=False,
        )
        return usb

    def _usb_interface(
        self,
        record: _Record,
        usb: Path,
        ids: _UsbIds,
        number: int,
        *,
        driver: str,
        klass: tuple[str, str, str],
    ) -> Path:
        vendor, product, bcd = (_read(usb / a) for a in ("idVendor", "idProduct", "bcdDevice"))
        product_id = f"{int(vendor, 16):x}/{int(product, 16):x}/{int(bcd, 16):x}"
        cls, sub, proto = klass
        modalias = (
            f"usb:v{vendor.upper()}p{product.upper()}d{bcd.upper()}dc00dsc00dp00"
            f"ic{cls.upper()}isc{sub.upper()}ip{proto.upper()}in{number:02X}"
        )
        uevent = {
            "DEVTYPE": "usb_interface",
            "DRIVER": driver,
            "PRODUCT": product_id,
            "TYPE": "0/0/0",
            "INTERFACE": f"{int(cls, 16)}/{int(sub, 16)}/{int(proto, 16)}",
            "MODALIAS": modalias,
        }
        attrs = {
            "bInterfaceNumber": f"{number:02x}",
            "bInterfaceClass": cls,
            "bInterfaceSubClass": sub,
            "bInterfaceProtocol": proto,
            "bAlternateSetting": " 0",
            "bNumEndpoints": "02",
            "modalias": modalias,
        }
        intf = self._device(
            usb / f"{ids.port}:1.{number}",
            subsystem="bus/usb",
            driver=("usb", driver),
            uevent=uevent,
            attrs=attrs,
        )
        self._bus_link(record, "usb", intf)
        return intf

    def _root_hub(self, bus: int, controller: str, numa_node: int | None) -> Path:
        pci = self._pci_device(
            controller,
            vendor="0x8086",
            device="0xa36d",
            klass="0x0c0330",
            driver="xhci_hcd",
            numa_node=numa_node,
        )
        hub = pci / f"usb{bus}"
        if not hub.exists():
            self._device(
                hub,
                subsystem="bus/usb",
                driver=("usb", "usb"),
                uevent={"DEVTYPE": "usb_device", "DRIVER": "usb", "BUSNUM": f"{bus:03d}"},
                attrs={
                    "idVendor": "1d6b",
                    "idProduct": "0002",
                    "busnum": str(bus),
                    "devnum": "1",
                    "product": "xHCI Host Controller",
                },
            )
            _symlink(self.sys / "bus" / "usb" / "devices" / hub.name, hub)
        return hub

    # -- PCI, DRM, sound --------------------------------------------------

    def add_drm_card(
        self,
        pci: str = "0000:03:00.0",
        *,
        card: int = 0,
        render: int | None = 128,
        vendor: str = "0x8086",
        device: str = "0x56a0",
        numa_node: int | None = 1,
        driver: str = "i915",
    ) -> list[str]:
        """A GPU: ``drm/card<N>`` and ``drm/renderD<M>`` under one PCI device.

        Nodes ``/dev/dri/card0`` and ``/dev/dri/renderD128`` with udev's
        ``dri/by-path/pci-<addr>-card`` and ``-render`` links. ``numa_node``
        is the PCI device's ``numa_node`` file (None writes ``-1``).
        """
        record = _Record()
        gpu = self._pci_device(
            pci, vendor=vendor, device=device, klass="0x030000", driver=driver, numa_node=numa_node
        )
        id_path = f"pci-{pci}"
        minors = [(f"card{card}", card, "card")]
        if render is not None:
            minors.append((f"renderD{render}", render, "render"))
        for name, minor, kind in minors:
            class_dev = self._device(
                gpu / "drm" / name,
                subsystem="class/drm",
                uevent={
                    "MAJOR": str(DRM_MAJOR),
                    "MINOR": str(minor),
                    "DEVNAME": f"dri/{name}",
                    "DEVTYPE": "drm_minor",
                },
            )
            record.trees.append(class_dev)
            props = {
                "ID_PATH": id_path,
                "ID_PATH_TAG": _path_tag(id_path),
                "ID_FOR_SEAT": f"drm-{_path_tag(id_path)}",
            }
            links = [f"dri/by-path/{id_path}-{kind}"]
            self._node(
                record,
                class_dev,
                f"c{DRM_MAJOR}:{minor}",
                f"dri/{name}",
                subsystem="drm",
                props=props,
                devlinks=links,
            )
        self._records.append(record)
        return list(record.primary)

    def add_sound_card(
        self,
        index: int = 0,
        *,
        pcms: Sequence[str] | None = None,
        pci: str = "0000:00:1f.3",
        card_id: str = "PCH",
        numa_node: int | None = None,
        driver: str = "snd_hda_intel",
    ) -> list[str]:
        """An ALSA card: ``sound/card<N>`` under a PCI device, with controlC<N> and pcm nodes.

        ``pcms`` defaults to ``pcmC<N>D0p`` and ``pcmC<N>D0c``. Minors are the
        static ALSA ones (control ``N*32``, playback ``N*32+16+D``, capture
        ``N*32+24+D``). Returns ``/dev/snd/controlC<N>`` first, then the pcms.
        """
        if pcms is None:
            pcms = (f"pcmC{index}D0p", f"pcmC{index}D0c")
        record = _Record()
        parent = self._pci_device(
            pci,
            vendor="0x8086",
            device="0xa348",
            klass="0x040300",
            driver=driver,
            numa_node=numa_node,
        )
        card = self._device(
            parent / "sound" / f"card{index}",
            subsystem="class/sound",
            uevent={},
            attrs={"id": card_id, "number": str(index)},
        )
        record.trees.append(card)
        id_path = f"pci-{pci}"
        base = {"ID_PATH": id_path, "ID_PATH_TAG": _path_tag(id_path)}
        names = [(f"controlC{index}", index * 32, [f"snd/by-path/{id_path}"])]
        for pcm in pcms:
            match = re.fullmatch(r"pcmC\d+D(\d+)([pc])", pcm)
            if match is None:
                raise ValueError(f"not an ALSA pcm name: {pcm!r}")
            offset = 16 if match.group(2) == "p" else 24
            names.append((pcm, index * 32 + offset + int(match.group(1)), []))
        for name, minor, links in names:
            class_dev = self._device(
                card / name,
                subsystem="class/sound",
                uevent={"MAJOR": str(SOUND_MAJOR), "MINOR": str(minor), "DEVNAME": f"snd/{name}"},
            )
            self._node(
                record,
                class_dev,
                f"c{SOUND_MAJOR}:{minor}",
                f"snd/{name}",
                subsystem="sound",
                props=dict(base),
                devlinks=links,
            )
        self._records.append(record)
        return list(record.primary)

    def _pci_device(
        self,
        address: str,
        *,
        vendor: str,
        device: str,
        klass: str,
        driver: str,
        numa_node: int | None,
    ) -> Path:
        """A PCI function (created once; ``numa_node`` updated when given)."""
        domain, bus, _ = address.split(":", 2)
        root = self.sys / "devices" / f"pci{domain}:00"
        if not root.exists():
            root.mkdir(parents=True)
            (root / "uevent").write_text("")
        parent = root
        if bus != "00":  # behind a PCIe root port, as discrete cards are
            parent = self._pci_device(
                f"{domain}:00:01.0",
                vendor="0x8086",
                device="0xa70d",
                klass="0x060400",
                driver="pcieport",
                numa_node=None,
            )
        path = parent / address
        if not path.exists():
            uevent = {
                "DRIVER": driver,
                "PCI_CLASS": f"{int(klass, 16):X}",
                "PCI_ID": f"{vendor[2:].upper()}:{device[2:].upper()}",
                "PCI_SUBSYS_ID": f"{vendor[2:].upper()}:0000",
                "PCI_SLOT_NAME": address,
                "MODALIAS": f"pci:v0000{vendor[2:].upper()}d0000{device[2:].upper()}"
                f"sv0000{vendor[2:].upper()}sd00000000bc{klass[2:4].upper()}"
                f"sc{klass[4:6].upper()}i{klass[6:8].upper()}",
            }
            attrs = {
                "vendor": vendor,
                "device": device,
                "class": klass,
                "subsystem_vendor": vendor,
                "subsystem_device": "0x0000",
                "numa_node": "-1",
                "local_cpulist": "0-7",
            }
            self._device(
                path, subsystem="bus/pci", driver=("pci", driver), uevent=uevent, attrs=attrs
            )
            _symlink(self.sys / "bus" / "pci" / "devices" / address, path)
        if numa_node is not None:
            (path / "numa_node").write_text(f"{numa_node}\n")
        return path

    # -- RDMA and NVIDIA --------------------------------------------------

    def add_rdma_hca(
        self,
        pci: str = "0000:3b:00.0",
        *,
        ibdev: str = "mlx5_0",
        index: int = 0,
        ports: Mapping[int, str] | None = None,
        numa_node: int | None = 0,
    ) -> list[str]:
        """A Mellanox/NVIDIA HCA as mlx5_core and ib_uverbs/ib_umad show it.

        Under the PCI function (15b3:101b, class 0x020700): ``infiniband/<ibdev>``
        (class infiniband, no node) with ``ports/<p>/state``, ``infiniband_verbs/
        uverbs<index>`` (c 231:192+index) and per port ``infiniband_mad/umad<k>``
        (c 231:k) and ``issm<k>`` (c 231:64+k); nodes under /dev/infiniband. The
        ``ports`` map is port number -> state (default {1: "4: ACTIVE"}); the
        k of its umad/issm nodes counts on from ``index`` per port.
        """
        record = _Record()
        hca = self._pci_device(
            pci,
            vendor="0x15b3",
            device="0x101b",
            klass="0x020700",
            driver="mlx5_core",
            numa_node=numa_node,
        )
        ib = self._device(
            hca / "infiniband" / ibdev,
            subsystem="class/infiniband",
            uevent={"NAME": ibdev},
            attrs={"node_type": "1: CA", "node_guid": "b859:9f03:00a1:0000"},
        )
        record.trees.append(ib)
        for port, state in sorted((ports or {1: "4: ACTIVE"}).items()):
            (ib / "ports" / str(port)).mkdir(parents=True)
            (ib / "ports" / str(port) / "state").write_text(f"{state}\n")
            (ib / "ports" / str(port) / "phys_state").write_text("5: LinkUp\n")
            k = index + port - 1
            for kind, minor in (("umad", k), ("issm", 64 + k)):
                self._ib_node(
                    record, hca, "infiniband_mad", f"{kind}{k}", minor=minor, ibdev=ibdev, port=port
                )
        self._ib_node(
            record,
            hca,
            "infiniband_verbs",
            f"uverbs{index}",
            minor=192 + index,
            ibdev=ibdev,
            port=None,
        )
        self._records.append(record)
        return list(record.primary)

    def _ib_node(
        self,
        record: _Record,
        hca: Path,
        klass: str,
        name: str,
        *,
        minor: int,
        ibdev: str,
        port: int | None,
    ) -> None:
        attrs = {"ibdev": ibdev} | ({"port": str(port)} if port is not None else {})
        class_dev = self._device(
            hca / klass / name,
            subsystem=f"class/{klass}",
            uevent={"MAJOR": str(IB_MAJOR), "MINOR": str(minor), "DEVNAME": f"infiniband/{name}"},
            attrs=attrs,
        )
        record.trees.append(class_dev)
        self._node(
            record,
            class_dev,
            f"c{IB_MAJOR}:{minor}",
            f"infiniband/{name}",
            subsystem=klass,
            props={},
        )

    def add_rdma_cm(self, minor: int = 58) -> list[str]:
        """``/dev/infiniband/rdma_cm``: rdma_ucm's misc device (10:<dynamic>), one per host."""
        return self.add_misc("infiniband/rdma_cm", minor)

    def add_nvidia_gpu(
        self,
        pci: str = "0000:3b:00.0",
        *,
        minor: int = 0,
        numa_node: int | None = 0,
        device: str = "0x20b0",
    ) -> list[str]:
        """An NVIDIA GPU as the proprietary and open kernel modules show it.

        The PCI function (10de:<device>, class 0x030200, driver nvidia) is in
        sysfs; ``/dev/nvidia<minor>`` is not: the driver registers its
        character devices without a class device (NVIDIA/open-gpu-kernel-modules,
        kernel-open/nvidia/nv.c ``nv_register_chrdev``: register_chrdev_region
        and cdev_add, no device_create), so nothing under /sys names them and
        udev has no entry (nvidia-modprobe or the driver makes the nodes).
        The node is therefore a real character device (c 195:minor), made
        with mknod: the caller needs CAP_MKNOD (``can_mknod``).
        """
        self._pci_device(
            pci,
            vendor="0x10de",
            device=device,
            klass="0x030200",
            driver="nvidia",
            numa_node=numa_node,
        )
        return [self._char_node(f"nvidia{minor}", NVIDIA_MAJOR, minor)]

    def add_nvidia_control_nodes(self, *, uvm: bool = True, modeset: bool = True) -> list[str]:
        """``/dev/nvidiactl`` (195:255), and ``nvidia-modeset`` (195:254),
        ``nvidia-uvm`` and ``nvidia-uvm-tools`` (the uvm module's major) when
        their modules are loaded. Real character devices, no sysfs (see ``add_nvidia_gpu``)."""
        nodes = [self._char_node("nvidiactl", NVIDIA_MAJOR, 255)]
        if modeset:
            nodes.append(self._char_node("nvidia-modeset", NVIDIA_MAJOR, 254))
        if uvm:
            nodes.append(self._char_node("nvidia-uvm", NVIDIA_UVM_MAJOR, 0))
            nodes.append(self._char_node("nvidia-uvm-tools", NVIDIA_UVM_MAJOR, 1))
        return nodes

    def _char_node(self, devname: str, major: int, minor: int) -> str:
        node = self.dev / devname
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        record = _Record(files=[node], nodes=[f"/dev/{devname}"], primary=[f"/dev/{devname}"])
        self._records.append(record)
        return f"/dev/{devname}"

    # -- virtual devices --------------------------------------------------

    def add_misc(self, name: str, minor: int | None = None) -> list[str]:
        """A misc device under ``devices/virtual/misc`` (fuse 10:229, kvm 10:232, net/tun 10:200).

        ``name`` is the DEVNAME (``net/tun``); the sysfs name is its last part.
        """
        if minor is None:
            if name not in MISC_MINORS:
                raise ValueError(f"no known minor for misc device {name!r}; pass minor=")
            minor = MISC_MINORS[name]
        record = _Record()
        class_dev = self._device(
            self.sys / "devices" / "virtual" / "misc" / name.rsplit("/", 1)[-1],
            subsystem="class/misc",
            uevent={"MAJOR": str(MISC_MAJOR), "MINOR": str(minor), "DEVNAME": name},
        )
        record.trees.append(class_dev)
        self._node(record, class_dev, f"c{MISC_MAJOR}:{minor}", name, subsystem="misc", props={})
        self._records.append(record)
        return list(record.primary)

    def add_loop(self, n: int = 0) -> list[str]:
        """A loop block device ``loop<n>`` (7:n) with ``sys/block`` and ``sys/dev/block`` links."""
        record = _Record()
        name = f"loop{n}"
        class_dev = self._device(
            self.sys / "devices" / "virtual" / "block" / name,
            subsystem="class/block",
            uevent={
                "MAJOR": str(LOOP_MAJOR),
                "MINOR": str(n),
                "DEVNAME": name,
                "DEVTYPE": "disk",
                "DISKSEQ": str(n + 1),
            },
            attrs={"size": "0", "ro": "0", "removable": "0"},
        )
        record.trees.append(class_dev)
        block_link = self.sys / "block" / name
        _symlink(block_link, class_dev)
        record.files.append(block_link)
        self._node(record, class_dev, f"b{LOOP_MAJOR}:{n}", name, subsystem="block", props={})
        self._records.append(record)
        return list(record.primary)

    def add_plain(self, path: str, minor: int | None = None) -> list[str]:
        """A memory-class virtual device ``/dev/<path>`` (``devices/virtual/mem``, major 1),
        as the kernel makes ``/dev/null`` and ``/dev/zero``: sysfs knows it, udev has no
        properties for it, nothing groups it with anything else.

        ``minor`` defaults to the kernel's for null, zero, full, random and urandom,
        else the next free one from 100.
        """
        record = _Record()
        devname = _dev_relative(path)
        if minor is None:
            minor = _MEM_MINORS.get(devname, 100 + len(self._plain_minors))
        self._plain_minors.add(minor)
        class_dev = self._device(
            self.sys / "devices" / "virtual" / "mem" / devname.replace("/", "!"),
            subsystem="class/mem",
            uevent={"MAJOR": str(MEM_MAJOR), "MINOR": str(minor), "DEVNAME": devname},
        )
        record.trees.append(class_dev)
        self._node(record, class_dev, f"c{MEM_MAJOR}:{minor}", devname, subsystem="mem", props={})
        self._records.append(record)
        return list(record.primary)

    def add_file(self, path: str, content: str = "") -> Path:
        """A regular file ``/dev/<path>`` that no device stands behind (``/dev/shm/x``)."""
        node = self.node(path)
        node.parent.mkdir(parents=True, exist_ok=True)
        node.write_text(content)
        return node

    def add_link(self, link: str, target: str) -> Path:
        """A symlink ``/dev/<link>`` to ``target`` (relative as given, or an absolute /dev path).

        Absolute targets are written as is (``/dev/ttyUSB0``), as a user's
        udev rule or a container runtime might; discovery must read them
        relative to its dev root.
        """
        path = self.node(link)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        return path

    # -- hotplug ----------------------------------------------------------

    def remove(self, host_path: str) -> None:
        """Unplug the device that made ``host_path``: every node, link, sysfs dir, db entry."""
        wanted = _host(host_path)
        for record in self._records:
            if wanted in record.nodes:
                for path in record.files:
                    path.unlink(missing_ok=True)
                for tree in record.trees:
                    shutil.rmtree(tree, ignore_errors=True)
                self._records.remove(record)
                return
        raise KeyError(f"no fake device has node {host_path}")

    def remove_node(self, host_path: str) -> None:
        """Delete only the node ``/dev/...`` and the /dev symlinks to it; sysfs stays."""
        node = self.node(host_path)
        for link in _links_to(self.dev, node):
            link.unlink()
        node.unlink()

    # -- building blocks --------------------------------------------------

    def _device(
        self,
        path: Path,
        *,
        subsystem: str,
        driver: tuple[str, str] | None = None,
        uevent: Mapping[str, str] | None = None,
        attrs: Mapping[str, str] | None = None,
    ) -> Path:
        """A sysfs device dir: uevent, ``subsystem`` and ``driver`` links, attribute files."""
        path.mkdir(parents=True, exist_ok=True)
        kind, name = subsystem.split("/", 1)
        subsystem_dir = self.sys / subsystem
        subsystem_dir.mkdir(parents=True, exist_ok=True)
        _symlink(path / "subsystem", subsystem_dir)
        if driver is not None:
            driver_dir = self.sys / "bus" / driver[0] / "drivers" / driver[1]
            driver_dir.mkdir(parents=True, exist_ok=True)
            _symlink(path / "driver", driver_dir)
        lines = "".join(f"{k}={v}\n" for k, v in (uevent or {}).items())
        (path / "uevent").write_text(lines)
        for attr, value in (attrs or {}).items():
            (path / attr).write_text(f"{value}\n")
        if kind == "class":
            _symlink(self.sys / "class" / name / path.name, path)
            if "virtual" not in path.relative_to(self.sys).parts:
                # tty/ttyUSB0, drm/card0, sound/card0: "device" skips the class dir
                parent = path.parent.parent if path.parent.name == name else path.parent
                _symlink(path / "device", parent)
        return path

    def _bus_link(self, record: _Record, bus: str, device: Path) -> None:
        link = self.sys / "bus" / bus / "devices" / device.name
        _symlink(link, device)
        record.files.append(link)

    def _node(
        self,
        record: _Record,
        sysdir: Path,
        db_name: str,
        devname: str,
        *,
        subsystem: str,
        props: Mapping[str, str],
        devlinks: Iterable[str] = (),
        primary: bool = True,
    ) -> None:
        """The ``dev`` file, sys/dev and class links, the /dev node, its udev db and devlinks.

        ``db_name`` is the udev database name, ``c188:0`` or ``b7:0``.
        """
        kind, devnum = db_name[0], db_name[1:]
        (sysdir / "dev").write_text(f"{devnum}\n")
        block_or_char = "block" if kind == "b" else "char"
        sys_dev_link = self.sys / "dev" / block_or_char / devnum
        _symlink(sys_dev_link, sysdir)
        class_link = self.sys / "class" / subsystem / sysdir.name
        record.files.append(sys_dev_link)
        if class_link.is_symlink():
            record.files.append(class_link)
        node = self.dev / devname
        node.parent.mkdir(parents=True, exist_ok=True)
        if self.device_nodes:
            major, minor = (int(n) for n in devnum.split(":"))
            file_type = stat.S_IFBLK if kind == "b" else stat.S_IFCHR
            os.mknod(node, 0o600 | file_type, os.makedev(major, minor))
        else:
            node.write_text("")
        record.files.append(node)
        record.nodes.append(f"/dev/{devname}")
        if primary:
            record.primary.append(f"/dev/{devname}")
        links = list(devlinks)
        for link in [*links, f"{block_or_char}/{devnum}"]:
            link_path = self.dev / link
            link_path.unlink(missing_ok=True)  # udev: the last device claiming a link wins
            _symlink(link_path, node)
            record.files.append(link_path)
        db = self.udev_data / db_name
        body = [f"S:{link}" for link in links]
        body += ["I:1000000", *(f"E:{k}={v}" for k, v in props.items()), "G:systemd", "V:1"]
        db.write_text("\n".join(body) + "\n")
        record.files.append(db)


def can_mknod(directory: Path) -> bool:
    """Whether this process may make character devices in ``directory`` (CAP_MKNOD)."""
    probe = directory / ".mknod-probe"
    try:
        os.mknod(probe, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        return False
    probe.unlink()
    return True


def _symlink(link: Path, target: Path) -> None:
    """A relative symlink, as the kernel and udev make them."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def _links_to(root: Path, target: Path) -> list[Path]:
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() and path.resolve() == target.resolve():
                found.append(path)
    return found


def _read(path: Path) -> str:
    return path.read_text().strip()


def _trailing_number(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    if match is None:
        raise ValueError(f"device name {name!r} has no number")
    return int(match.group(1))


def _usb_id_path(controller: str, sysname: str) -> str:
    """udev path_id: ``pci-0000:00:14.0-usb-0:2:1.0`` for ``1-2:1.0``."""
    return f"pci-{controller}-usb-0:{sysname.split('-', 1)[1]}"


def _path_tag(id_path: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "_", id_path)


def _host(path: str) -> str:
    return "/dev/" + _dev_relative(path)


def _dev_relative(host_path: str) -> str:
    relative = host_path.removeprefix("/dev/").lstrip("/")
    if not relative or ".." in Path(relative).parts:
        raise ValueError(f"not a path under /dev: {host_path!r}")
    return relative
