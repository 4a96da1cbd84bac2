"""``groupBy``: which matched nodes form one unit."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from genericdp.config.model import GroupBy
from genericdp.config.regex import UserRegex, compile_regex
from genericdp.discovery.model import DeviceNode
from genericdp.discovery.sysfs import SysDevice
from genericdp.errors import DiscoveryError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Group:
    """Nodes that become one unit, with what grouped them."""

    nodes: tuple[DeviceNode, ...]  # sorted by host path
    parent: SysDevice | None = None  # the shared ancestor, for ``parent:`` grouping
    key: str | None = None  # the ``pathRegex`` key


def group_nodes(nodes: Sequence[DeviceNode], group_by: GroupBy, sys_root: Path) -> list[Group]:
    """Split ``nodes`` into groups as ``group_by`` says (see docs/config.md)."""
    ordered = sorted(nodes, key=lambda node: node.host_path)
    if group_by.kind == "all":
        return [Group(tuple(ordered))] if ordered else []
    if group_by.kind == "parent":
        return _by_parent(ordered, group_by.subsystem or "", sys_root)
    if group_by.kind == "pathRegex":
        return _by_regex(ordered, group_by.pattern or "")
    return [Group((node,)) for node in ordered]


def sys_device(node: DeviceNode, sys_root: Path) -> SysDevice | None:
    return SysDevice(sys_root, node.sysfs_path) if node.sysfs_path else None


def find_parent(device: SysDevice, subsystem: str) -> SysDevice | None:
    """The nearest ancestor of ``subsystem``. For ``usb`` that is the USB *device*
    (DEVTYPE=usb_device), not the interface a tty hangs under, and a USB device node is its
    own parent. Otherwise the device itself does not count: a sound card's ``controlC0`` is
    in subsystem ``sound`` like the ``card0`` it belongs to."""
    usb = subsystem == "usb"
    for candidate in device.ancestors(include_self=usb):
        if candidate.subsystem() == subsystem and (not usb or candidate.devtype() == "usb_device"):
            return candidate
    return None


def _by_parent(nodes: Sequence[DeviceNode], subsystem: str, sys_root: Path) -> list[Group]:
    by_parent: dict[SysDevice, list[DeviceNode]] = {}
    alone: list[Group] = []
    for node in nodes:
        device = sys_device(node, sys_root)
        parent = find_parent(device, subsystem) if device is not None else None
        if parent is None:
            log.debug("%s has no %s ancestor; it is a unit of its own", node.host_path, subsystem)
            alone.append(Group((node,)))
            continue
        by_parent.setdefault(parent, []).append(node)
    grouped = [Group(tuple(members), parent=parent) for parent, members in by_parent.items()]
    return grouped + alone


def _by_regex(nodes: Sequence[DeviceNode], pattern: str) -> list[Group]:
    try:
        regex = compile_regex(pattern)  # RE2: linear time, whatever the pattern and the path
    except ValueError as exc:
        raise DiscoveryError(f"groupBy pathRegex {pattern!r} is not a valid regex: {exc}") from exc
    by_key: dict[str, list[DeviceNode]] = {}
    for node in nodes:
        key = path_key(regex, node.container_path)
        if key is None:
            log.debug("%s does not match pathRegex %s; left out", node.container_path, pattern)
            continue
        by_key.setdefault(key, []).append(node)
    return [Group(tuple(members), key=key) for key, members in by_key.items()]


def path_key(regex: UserRegex, path: str) -> str | None:
    """The named group ``key``, else group 1, else the whole match; None if no match."""
    groups = regex.search(path)
    if groups is None:
        return None
    return groups[regex.groupindex.get("key", 1 if regex.groups else 0)]
