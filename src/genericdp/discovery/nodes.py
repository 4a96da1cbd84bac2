"""From a path under the dev root to a ``DeviceNode``: its sysfs device, udev data, NUMA node.

A ``Scan`` lives for one discovery pass: it remembers what it already read so
one pass reads each file once, and is thrown away so a rescan sees the host
as it is now.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, field, replace

from genericdp.config.model import frozen_map
from genericdp.discovery.model import DeviceNode, Roots
from genericdp.discovery.sysfs import SysDevice, device_at, parse_devnum, read_udev_properties


@dataclass(frozen=True)
class Located:
    """A node's sysfs device and how udev names its database entry."""

    device: SysDevice
    kind: str  # "c" or "b"
    devnum: tuple[int, int]


@dataclass
class Scan:
    roots: Roots
    _stats: dict[str, os.stat_result] = field(default_factory=dict, repr=False)

    def _lstat(self, relative: str) -> os.stat_result | None:
        """``lstat`` of ``<dev>/<relative>``, once per pass (None: it is not there)."""
        info = self._stats.get(relative)
        if info is None:
            try:
                info = os.lstat(self.roots.dev / relative)
            except OSError:
                return None
            self._stats[relative] = info
        return info

    def locate(self, relative: str) -> Located | None:
        """The sysfs device of the real node ``<dev>/<relative>``, if sysfs knows it: by
        ``st_rdev`` (``sys/dev/char/M:m``), else (a /dev the kernel did not populate)
        by the ``DEVNAME`` in uevent."""
        info = self._lstat(relative)
        if info is None:
            return None
        if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            kind = "c" if stat.S_ISCHR(info.st_mode) else "b"
            devnum = (os.major(info.st_rdev), os.minor(info.st_rdev))
            folder = "char" if kind == "c" else "block"
            link = self.roots.sys / "dev" / folder / f"{devnum[0]}:{devnum[1]}"
            device = device_at(self.roots.sys, link)
            if device is not None:
                return Located(device, kind, devnum)
        return self._devname_index.get(relative)

    def is_device_node(self, relative: str) -> bool:
        """Whether the real node ``<dev>/<relative>`` is a character or block device, nothing
        else (``/dev/shm`` is writable by anyone: ``/dev/**`` would hand out what a user left
        there); in a dev root the kernel did not populate (test trees), also a regular file
        where sysfs names a node of exactly that path (``DEVNAME``), which no unprivileged
        user can arrange."""
        info = self._lstat(relative)  # a link is not a node
        if info is None:
            return False
        mode = info.st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            return True
        return stat.S_ISREG(mode) and relative in self._devname_index

    def describe(
        self, host_relative: str, container_path: str, located: Located | None = None
    ) -> DeviceNode:
        """The DeviceNode for the real node ``<dev>/<host_relative>`` seen at ``container_path``
        (``located``: already found through sysfs)."""
        located = located or self.locate(host_relative)
        info = self._lstat(host_relative)
        node = DeviceNode(
            host_path=f"/dev/{host_relative}",
            container_path=container_path,
            mode=info.st_mode & 0o777 if info is not None else None,
            uid=info.st_uid if info is not None else None,
            gid=info.st_gid if info is not None else None,
        )
        if located is None:
            if info is None or not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
                return node
            return replace(node, major=os.major(info.st_rdev), minor=os.minor(info.st_rdev))
        device = located.device
        properties = read_udev_properties(self.roots.udev, located.kind, located.devnum)
        return replace(
            node,
            major=located.devnum[0],
            minor=located.devnum[1],
            subsystem=device.subsystem(),
            sysfs_path=device.path,
            attributes=frozen_map(device.attributes()),
            properties=frozen_map(properties),
            numa_node=device.numa_node(),
        )

    @functools.cached_property
    def _devname_index(self) -> dict[str, Located]:
        """DEVNAME -> device for every device with a node."""
        index: dict[str, Located] = {}
        for found in self.nodes:
            devname = found.device.uevent().get("DEVNAME")
            if devname:
                index.setdefault(devname, found)
        return index

    @functools.cached_property
    def nodes(self) -> list[Located]:
        """Every device that has a node, from ``sys/dev/char`` and ``sys/dev/block``."""
        nodes = []
        for folder, kind in (("char", "c"), ("block", "b")):
            try:
                entries = sorted(os.listdir(self.roots.sys / "dev" / folder))
            except OSError:
                continue
            for name in entries:
                devnum = parse_devnum(name)
                device = device_at(self.roots.sys, self.roots.sys / "dev" / folder / name)
                if devnum is not None and device is not None:
                    nodes.append(Located(device, kind, devnum))
        return nodes


def located_from_device(device: SysDevice) -> Located | None:
    """A device found by walking sysfs, with its node numbers (None if it has no node)."""
    devnum = device.devnum()
    if devnum is None:
        return None
    return Located(device, "b" if device.subsystem() == "block" else "c", devnum)
