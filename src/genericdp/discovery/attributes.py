"""The sysfs health probe: one attribute of a unit's device (or an ancestor)
read in-process and compared with a glob, instead of a process per unit.

The attribute path comes from the config and the device tree from whoever
made the device, so every read is bounded: nothing below the device directory
is followed through a symlink (sysfs links such as ``driver`` lead elsewhere),
the file must be a regular file inside the sys root (a probe never opens a
device node), opened non-blocking, and at most ``MAX_VALUE_BYTES`` of at
most ``MAX_FILES`` files per unit are read.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from genericdp.config.model import SysfsProbe
from genericdp.discovery.globs import has_magic
from genericdp.discovery.model import Roots, Unit
from genericdp.discovery.sysfs import SysDevice
from genericdp.errors import clip

MAX_VALUE_BYTES = 4096
MAX_FILES = 64


@dataclass(frozen=True)
class Reading:
    """The verdict on one unit: ``ok``, and what was read (or why nothing was)."""

    ok: bool
    detail: str


def probe_unit(unit: Unit, probe: SysfsProbe, roots: Roots) -> Reading:
    start = unit.parent or next((n.sysfs_path for n in unit.nodes if n.sysfs_path), None)
    if start is None:
        return Reading(False, "the unit has no sysfs device to read from")
    device = SysDevice(roots.sys, start)
    for candidate in _candidates(device, probe.subsystem):
        files = list(_matching(candidate.directory, probe.attribute.split("/")))
        if not files:
            continue
        return _verdict(candidate, files[:MAX_FILES], probe, roots)
    where = f"ancestor of subsystem {probe.subsystem!r} of " if probe.subsystem else ""
    return Reading(False, f"{probe.attribute} not found on the {where}device {start} or above")


def _candidates(device: SysDevice, subsystem: str | None) -> Iterator[SysDevice]:
    """Every ancestor, or with ``subsystem`` the nearest of that subsystem."""
    if subsystem is None:
        yield from device.ancestors()
    elif (nearest := device.nearest(subsystem)) is not None:
        yield nearest


def _matching(directory: Path, parts: list[str]) -> Iterator[Path]:
    """Files below ``directory`` matching ``parts``, never through a symlink."""
    head, rest = parts[0], parts[1:]
    if has_magic(head):
        try:
            names = sorted(n for n in os.listdir(directory) if fnmatch.fnmatchcase(n, head))
        except OSError:
            return
    else:
        names = [head]
    for name in names:
        path = directory / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if rest and stat.S_ISDIR(mode):
            yield from _matching(path, rest)
        elif not rest and stat.S_ISREG(mode):
            yield path


def _verdict(device: SysDevice, files: list[Path], probe: SysfsProbe, roots: Roots) -> Reading:
    shown = []
    for path in files:
        name = path.relative_to(device.directory).as_posix()
        value, problem = read_bounded(path, roots)
        if value is None:
            return Reading(False, f"{device.path}/{name}: {problem}")
        text = value.strip()
        shown.append(f"{name}={clip(text, 80)!r}")
        if not fnmatch.fnmatchcase(text, probe.expect):
            found = f"{device.path}/{name} is {clip(text, 80)!r}"
            return Reading(False, f"{found}, not {probe.expect!r}")
    return Reading(True, f"{device.path}: " + ", ".join(shown))


def read_bounded(path: Path, roots: Roots) -> tuple[str | None, str]:
    """A small text attribute, or None and why it was not read."""
    real = os.path.realpath(path)
    sys_root, dev_root = os.path.realpath(roots.sys), os.path.realpath(roots.dev)
    if not real.startswith(sys_root + os.sep) or real.startswith(dev_root + os.sep):
        return None, "resolves outside the sys root; not read"
    data, problem = _read_file(real)
    if data is None:
        return None, problem
    try:
        return data.decode(), ""
    except UnicodeDecodeError:
        return None, "is not text"


def _read_file(real: str) -> tuple[bytes | None, str]:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        return None, f"cannot be opened: {exc.strerror}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "is not a regular file; not read"
        data = os.read(fd, MAX_VALUE_BYTES + 1)
    except OSError as exc:
        return None, f"cannot be read: {exc.strerror}"
    finally:
        os.close(fd)
    if len(data) > MAX_VALUE_BYTES:
        return None, f"is over {MAX_VALUE_BYTES} bytes; not an attribute"
    return data, ""
