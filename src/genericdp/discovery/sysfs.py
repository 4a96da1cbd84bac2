"""Reading one sysfs device and the udev database, as udev itself reads them.

A device is a directory under ``<sys>/devices`` with a ``uevent`` file; its
parent device is the nearest ancestor directory that has one (directories
like ``tty/`` or ``drm/`` between a device and its class children are not
devices). Every read tolerates a vanished or odd entry: a device can be
unplugged while we look at it.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

# Binary or hardware-touching attributes: reading ``vpd`` can hang on some PCI
# devices, ``rom`` and ``resource*`` are memory windows, ``config`` is raw bytes.
_UNREAD_ATTRIBUTES = ("config", "rom", "vpd", "*descriptors", "resource*", "uevent")
_MAX_ATTRIBUTE_BYTES = 4096


def read_text(path: Path) -> str | None:
    """A small text file's content, or None if it is missing, unreadable or not text."""
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_ATTRIBUTE_BYTES + 1)
    except OSError:
        return None
    if len(data) > _MAX_ATTRIBUTE_BYTES or b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def parse_devnum(text: str) -> tuple[int, int] | None:
    """``"188:0"`` -> (188, 0); None when it is not that shape."""
    major, sep, minor = text.strip().partition(":")
    if sep and major.isdigit() and minor.isdigit():
        return int(major), int(minor)
    return None


@dataclass(frozen=True)
class SysDevice:
    """A device directory in sysfs, named by its path relative to the sys root."""

    sys_root: Path
    path: str  # e.g. "devices/pci0000:00/0000:00:14.0/usb1/1-2"

    @property
    def directory(self) -> Path:
        return self.sys_root / self.path

    @property
    def name(self) -> str:
        """The kernel name (udev KERNEL), e.g. ``ttyUSB0`` or ``1-2:1.0``."""
        return self.path.rsplit("/", 1)[-1]

    def uevent(self) -> dict[str, str]:
        text = read_text(self.directory / "uevent") or ""
        pairs = (line.partition("=") for line in text.splitlines())
        return {key: value for key, sep, value in pairs if sep and key}

    def subsystem(self) -> str | None:
        return self._link_name("subsystem")

    def driver(self) -> str | None:
        return self._link_name("driver")

    def devtype(self) -> str | None:
        return self.uevent().get("DEVTYPE")

    def attribute(self, name: str) -> str | None:
        """The raw attribute value (trailing newline kept), None if absent or unreadable."""
        if not name or name.startswith("/") or ".." in name.split("/"):
            return None
        path = self.directory / name
        if path.is_symlink() or not path.is_file():
            return None
        return read_text(path)

    def attributes(self) -> dict[str, str]:
        """Every readable text attribute of this device, trailing whitespace stripped."""
        found: dict[str, str] = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return found
        for entry in entries:
            if any(fnmatch.fnmatchcase(entry.name, skip) for skip in _UNREAD_ATTRIBUTES):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o444:
                continue  # links, dirs, and write-only attributes like ``remove``
            value = read_text(Path(entry.path))
            if value is not None:
                found[entry.name] = value.rstrip()
        return dict(sorted(found.items()))

    def devnum(self) -> tuple[int, int] | None:
        """(major, minor) from the ``dev`` file, None for devices without a node."""
        text = read_text(self.directory / "dev")
        return parse_devnum(text) if text is not None else None

    def parent(self) -> SysDevice | None:
        """The nearest ancestor directory that is a device (has ``uevent``)."""
        parts = self.path.split("/")
        for end in range(len(parts) - 1, 1, -1):
            candidate = "/".join(parts[:end])
            if (self.sys_root / candidate / "uevent").is_file():
                return SysDevice(self.sys_root, candidate)
        return None

    def ancestors(self, *, include_self: bool = True) -> Iterator[SysDevice]:
        device = self if include_self else self.parent()
        while device is not None:
            yield device
            device = device.parent()

    def nearest(self, subsystem: str) -> SysDevice | None:
        """This device or its nearest ancestor in ``subsystem``."""
        return next((d for d in self.ancestors() if d.subsystem() == subsystem), None)

    def numa_node(self) -> int | None:
        """NUMA node of the nearest device (self included) with a ``numa_node`` file;
        None for the kernel's -1 (unknown)."""
        for device in self.ancestors():
            text = device.attribute("numa_node")
            if text is None:
                continue
            try:
                value = int(text.strip())
            except ValueError:
                return None
            return value if value >= 0 else None
        return None

    def _link_name(self, link: str) -> str | None:
        try:
            return os.readlink(self.directory / link).rstrip("/").rsplit("/", 1)[-1] or None
        except OSError:
            return None


def device_at(sys_root: Path, link: Path) -> SysDevice | None:
    """The device a sysfs symlink (``dev/char/188:0``, ``class/tty/ttyUSB0``) points to;
    None if it dangles, escapes the sys root, or is not a device."""
    try:
        real = link.resolve(strict=True)
        relative = real.relative_to(sys_root.resolve())
    except (OSError, RuntimeError, ValueError):
        return None
    if not (real / "uevent").is_file():
        return None
    return SysDevice(sys_root, relative.as_posix())


def read_udev_properties(udev_root: Path, kind: str, devnum: tuple[int, int]) -> Mapping[str, str]:
    """The ``E:KEY=VALUE`` properties udev stored for a node (empty if none) in its
    database entry ``<udev>/data/c188:0`` (``b7:0`` for a block device)."""
    try:
        text = (udev_root / "data" / f"{kind}{devnum[0]}:{devnum[1]}").read_text(errors="replace")
    except OSError:
        return {}
    pairs = (line[2:].partition("=") for line in text.splitlines() if line.startswith("E:"))
    return dict(sorted({key: value for key, sep, value in pairs if sep and key}.items()))
