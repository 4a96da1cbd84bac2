"""Where a unit sits on the PCI tree: the DRA standard attributes
``resource.kubernetes.io/pciBusID`` and ``pcieRoot``, computed as the Go helpers
(k8s.io/dynamic-resource-allocation/deviceattribute) do: a bus ID is the lower-case
extended BDF (``0000:3b:00.0``); its root is the first component after ``<sys>/devices/``
of the link ``<sys>/bus/pci/devices/<id>``.

A unit's device *is* a PCI function when the nearest bus device at or above
its node is on the ``pci`` bus (a GPU's ``card0``). A USB dongle has no bus ID
of its own, but its PCIe root is its host controller's, which is what
topology alignment needs. Every read tolerates a vanished entry.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from genericdp.discovery.sysfs import SysDevice

# The helpers' bdfRegexp (verifyPCIBDFFormat).
_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f]{1})$")


@dataclass(frozen=True)
class PciPlace:
    bus_id: str | None = None
    pcie_root: str | None = None


def is_bus_id(text: str) -> bool:
    return _BDF.match(text) is not None


def pcie_root(sys_root: Path, bus_id: str) -> str | None:
    """The PCIe root complex (``pci<domain>:<bus>``) of PCI function ``bus_id``, or None."""
    if not is_bus_id(bus_id):
        return None
    link = sys_root / "bus" / "pci" / "devices" / bus_id
    try:
        target = os.readlink(link)
    except OSError:
        return None
    resolved = os.path.normpath(os.path.join(link.parent, target))  # filepath.Join cleans
    devices = os.path.join(os.path.normpath(sys_root), "devices")
    if not resolved.startswith(f"{devices}/pci") or os.path.basename(resolved) != bus_id:
        return None
    return resolved.removeprefix(devices + "/").split("/", 1)[0]


def pci_place(sys_root: Path, sysfs_path: str | None) -> PciPlace:
    """Where the device at ``sysfs_path`` (relative to ``sys_root``) sits on the PCI tree."""
    if not sysfs_path:
        return PciPlace()
    own = True  # until a bus device that is not a PCI function is passed
    for device in SysDevice(sys_root, sysfs_path).ancestors():
        bus = _bus_of(device)  # None: a class device, or a directory with no subsystem
        if bus == "pci" and is_bus_id(device.name):
            return PciPlace(device.name if own else None, pcie_root(sys_root, device.name))
        if bus is not None:
            own = False
    return PciPlace()


def _bus_of(device: SysDevice) -> str | None:
    """The bus a device is on (``subsystem`` links into ``bus/<name>``); None for a class."""
    try:
        target = os.readlink(device.directory / "subsystem")
    except OSError:
        return None
    head, _, name = target.rstrip("/").rpartition("/")
    return name if head.rpartition("/")[2] == "bus" else None
