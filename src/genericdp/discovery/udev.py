"""The ``udev`` matcher: devices with a node, filtered like a udev rule.

Candidates come from ``sys/class/<subsystem>`` (or ``sys/bus/<subsystem>/
devices``), else from ``sys/dev/{char,block}``: never a walk of all of
``/sys``. ATTRS and DRIVERS match on the device or one ancestor, all on the
same one, as in udev.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Mapping

from genericdp.config.model import UdevMatcher
from genericdp.discovery.nodes import Located, Scan, located_from_device
from genericdp.discovery.sysfs import SysDevice, device_at, read_udev_properties

log = logging.getLogger(__name__)


def match_udev(matcher: UdevMatcher, scan: Scan) -> list[tuple[str, Located]]:
    """(node path relative to the dev root, device) for each device the matcher accepts, sorted."""
    found: dict[str, Located] = {}
    for located in _candidates(matcher.subsystem, scan):
        device = located.device
        if not _matches_device(matcher, device):
            continue
        if matcher.properties and not _matches_properties(matcher.properties, located, scan):
            continue
        devname = device.uevent().get("DEVNAME")
        if not devname or ".." in devname.split("/"):
            continue
        if not scan.is_device_node(devname):
            log.debug("udev: %s has no device node /dev/%s; skipped", device.path, devname)
            continue
        found.setdefault(devname, located)
    return sorted(found.items())


def _candidates(subsystem: str | None, scan: Scan) -> list[Located]:
    if subsystem is None:
        return scan.nodes
    if "/" in subsystem or subsystem in ("", ".", ".."):
        return []
    sys_root = scan.roots.sys
    folders = (sys_root / "class" / subsystem, sys_root / "bus" / subsystem / "devices")
    found: list[Located] = []
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            device = device_at(sys_root, folder / name)
            located = located_from_device(device) if device is not None else None
            if located is not None:
                found.append(located)
    return found


def _matches_device(matcher: UdevMatcher, device: SysDevice) -> bool:
    if matcher.subsystem is not None and device.subsystem() != matcher.subsystem:
        return False
    if matcher.kernel is not None and not fnmatch.fnmatchcase(device.name, matcher.kernel):
        return False
    return any(_matches_one_device(matcher, candidate) for candidate in device.ancestors())


def _matches_one_device(matcher: UdevMatcher, device: SysDevice) -> bool:
    """udev ATTRS/DRIVERS: every given key must hold on this one device."""
    if matcher.driver is not None:
        driver = device.driver()
        if driver is None or not fnmatch.fnmatchcase(driver, matcher.driver):
            return False
    for name, pattern in matcher.attributes.items():
        value = device.attribute(name)
        if value is None or not fnmatch.fnmatchcase(_attribute_value(value, pattern), pattern):
            return False
    return True


def _attribute_value(raw: str, pattern: str) -> str:
    """udev ignores trailing whitespace of a value unless the pattern itself ends in some."""
    return raw.removesuffix("\n") if pattern != pattern.rstrip() else raw.rstrip()


def _matches_properties(wanted: Mapping[str, str], located: Located, scan: Scan) -> bool:
    properties = read_udev_properties(scan.roots.udev, located.kind, located.devnum)
    return all(
        key in properties and fnmatch.fnmatchcase(properties[key], pattern)
        for key, pattern in wanted.items()
    )
