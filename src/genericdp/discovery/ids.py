"""Stable unit IDs: the kubelet checkpoints them, so the same hardware must get the same ID.

A unit's ID comes from the most stable thing that names it at its
granularity: a USB serial number, else udev's ``ID_PATH`` (the physical
port or slot), else a PCI address, else its node paths. Only colliding IDs
get qualifiers, so unplugging one dongle never renames another.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from genericdp.discovery.grouping import Group, find_parent, sys_device
from genericdp.discovery.model import MAX_ID_LENGTH, Roots
from genericdp.discovery.nodes import located_from_device
from genericdp.discovery.sysfs import SysDevice, read_udev_properties
from genericdp.replicaids import SEPARATOR, replica_id

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_HASH_LENGTH = 8


@dataclass(frozen=True)
class Identity:
    """A unit's preferred ID and, in order, what tells it apart from a unit with the same one."""

    base: str
    qualifiers: tuple[str | None, ...]


def assign_ids(groups: Sequence[Group], kind: str, roots: Roots, *, count: int) -> list[str]:
    """One ID per group, in the same order: unique, sanitized, short enough for ``count``."""
    identities = [_identity(group, kind, roots) for group in groups]
    ids = [ident.base for ident in identities]
    levels = max((len(ident.qualifiers) for ident in identities), default=0)
    for level in range(levels):
        for members in _collisions(ids):
            values = [identities[i].qualifiers[level] for i in members]
            if len(set(values)) > 1:  # this qualifier tells at least some of them apart
                for index, value in zip(members, values, strict=True):
                    if value:
                        ids[index] += f"-{value}"
    limit = MAX_ID_LENGTH - (len(replica_id("", count - 1)) if count > 1 else 0)
    final = [shorten(sanitize(unit_id), limit) for unit_id in ids]
    for members in _collisions(final):  # only if all qualifiers failed (or hashes collided)
        for n, index in enumerate(members[1:], start=2):
            final[index] = shorten(f"{final[index]}-{n}", limit)
    return final


def _identity(group: Group, kind: str, roots: Roots) -> Identity:
    """What names this group (see the module docstring for the order)."""
    first = group.nodes[0]
    names = "-".join(node.host_path.rsplit("/", 1)[-1] for node in group.nodes)
    paths = "-".join(node.host_path.removeprefix("/dev/") for node in group.nodes)
    if kind == "all":
        return Identity("all", ())
    device = group.parent or sys_device(first, roots.sys)
    usb = find_parent(device, "usb") if device is not None else None
    properties: Mapping[str, str] = first.properties
    if group.parent is not None:
        # Named at the parent's granularity: its nodes' serials may be those of
        # different devices below it (every dongle on one USB controller).
        properties = properties_of(group.parent, roots.udev)
    interface = None if group.parent is not None else first.properties.get("ID_USB_INTERFACE_NUM")
    location = _location(device, usb, properties, roots.udev)
    qualifiers = (f"if{interface}" if interface else None, location, names, paths)
    if kind == "pathRegex" and group.key:
        return Identity(group.key, qualifiers)
    serial = _serial(properties, usb)
    if serial is not None:
        return Identity(serial, qualifiers)
    if location is not None:
        return Identity(location, (qualifiers[0], None, names, paths))
    pci = device.nearest("pci") if device is not None else None
    if pci is not None:
        return Identity(f"pci-{pci.name}", qualifiers)
    return Identity(paths, (None, None, names, None))


def _serial(properties: Mapping[str, str], usb: SysDevice | None) -> str | None:
    """``<bus>-<serial>`` from udev (ID_SERIAL_SHORT) or the USB device's ``serial`` file."""
    short = properties.get("ID_SERIAL_SHORT")
    if short:
        return f"{properties.get('ID_BUS') or 'usb'}-{short}"
    if usb is not None:
        raw = (usb.attribute("serial") or "").strip()
        if raw:
            return f"usb-{raw}"
    return None


def _location(
    device: SysDevice | None, usb: SysDevice | None, properties: Mapping[str, str], udev_root: Path
) -> str | None:
    """Where the unit is plugged in: ID_PATH, or for a USB device its port as path_id spells it."""
    if usb is not None and device is not None and usb.path == device.path:
        return properties_of(usb, udev_root).get("ID_PATH") or _usb_path_id(usb)
    return properties.get("ID_PATH") or None


def _usb_path_id(usb: SysDevice) -> str:
    """udev's path_id for a USB device without a database entry: ``pci-<addr>-usb-0:<port>``."""
    port = usb.name.split("-", 1)[-1]
    pci = usb.nearest("pci")
    prefix = f"pci-{pci.name}-" if pci is not None else ""
    return f"{prefix}usb-0:{port}"


def properties_of(device: SysDevice, udev_root: Path) -> dict[str, str]:
    located = located_from_device(device)
    return dict(read_udev_properties(udev_root, located.kind, located.devnum)) if located else {}


def _collisions(ids: Sequence[str]) -> list[list[int]]:
    positions: dict[str, list[int]] = {}
    for index, unit_id in enumerate(ids):
        positions.setdefault(unit_id, []).append(index)
    return [members for members in positions.values() if len(members) > 1]


def sanitize(text: str) -> str:
    """Only ``[A-Za-z0-9_.:-]``, no ``::`` (it separates replicas) and no trailing ``:``."""
    cleaned = _UNSAFE.sub("_", text)
    while SEPARATOR in cleaned:
        cleaned = cleaned.replace(SEPARATOR, ":_")
    return cleaned.rstrip(":") or "unit"


def shorten(unit_id: str, limit: int) -> str:
    """``unit_id`` if it fits, else a prefix plus a hash of the whole (still unique, stable)."""
    if len(unit_id) <= limit:
        return unit_id
    digest = hashlib.sha256(unit_id.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{unit_id[: limit - _HASH_LENGTH - 1].rstrip(':')}-{digest}"
