"""What squat/generic-device-plugin would hand out on a FakeHost tree: a port of its discovery.

Ported from squat/generic-device-plugin at 179b1fe (``deviceplugin/path.go``
``discoverPath``, ``deviceplugin/usb.go`` ``discoverUSB``), independently of
``genericdp.convert``, so the converter's output can be checked against it:

- each path is a Go glob (``fs.Glob``: sorted; a pattern without magic is
  returned when it exists, directories included); a group's i-th unit takes the
  i-th match of every path (each path's matches repeated ``limit`` times), as
  many units as the longest match list, capped by the shortest repeated one;
  an optional path with no match is left out; each unit is listed ``count`` times;
- a USB group is one unit of every ``/dev/bus/usb/BBB/DDD`` whose sysfs
  ``idVendor``/``idProduct`` (hexadecimal) equal, and ``serial`` if given;
- a host path that is a directory is given by containerd as every device node
  below it (``oci.WithDevices``: recursive, symlinks skipped).

A unit here is the frozenset of (real host node, container path) pairs the
container gets; the container path follows ``mountPath`` as path.go does (a
trailing ``/`` adds the matched path's name) and, inside a directory, the
node's place below it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from genericdp.discovery.globs import resolve_in_root
from tests.fakesys import FakeHost


def _go_match(pattern: str, name: str) -> bool:
    """Go's path.Match for one path component."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
        elif c == "*":
            out += "[^/]*"
            i += 1
        elif c == "?":
            out += "[^/]"
            i += 1
        elif c == "[":
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = end + 1
        else:
            out += re.escape(c)
            i += 1
    return re.fullmatch(out, name) is not None


def _glob(host: FakeHost, pattern: str) -> list[str]:
    """Go fs.Glob of an absolute pattern under /dev, as host paths."""
    parts = pattern.removeprefix("/dev/").split("/")
    found = [""]
    for part in parts:
        nxt = []
        for base in found:
            here = host.dev / base if base else host.dev
            if not any(ch in part for ch in "*?[\\"):
                if os.path.exists(here / part):  # Stat: follows links
                    nxt.append(f"{base}/{part}" if base else part)
                continue
            if not here.is_dir():
                continue
            for name in sorted(os.listdir(here)):
                if _go_match(part, name):
                    nxt.append(f"{base}/{name}" if base else name)
        found = nxt
    return sorted(f"/dev/{p}" for p in found)


Node = tuple[str, str]  # real host path, container path


def _nodes(host: FakeHost, host_path: str, container: str) -> set[Node]:
    """The real nodes the runtime gives for a device spec, and where the container sees them."""
    relative = host_path.removeprefix("/dev/")
    full = host.dev / relative
    if full.is_dir():
        nodes = set()
        for root, dirs, files in os.walk(full):
            dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
            for name in files:
                if not (Path(root) / name).is_symlink():
                    below = str((Path(root) / name).relative_to(full))
                    nodes.add((f"{host_path}/{below}", f"{container}/{below}"))
        return nodes
    real = resolve_in_root(host.dev, relative)
    return {(f"/dev/{real}", container)} if real else set()


def _container_path(spec: dict[str, Any], matched: str) -> str:
    mount = (spec.get("mountPath") or "").strip() or matched
    return mount + matched.rsplit("/", 1)[-1] if mount.endswith("/") else mount


def _path_units(host: FakeHost, group: dict[str, Any]) -> list[frozenset[Node]]:
    specs = group.get("paths") or []
    lists: list[list[str] | None] = []
    length, cap = 0, 1 << 30
    for spec in specs:
        matches = _glob(host, spec["path"].strip())
        if not matches and spec.get("optional"):
            lists.append(None)
            continue
        repeated = matches * (spec.get("limit") or 1)
        lists.append(repeated)
        cap = min(cap, len(repeated))
        length = max(length, len(matches))
    units = []
    for i in range(min(length, cap)):
        nodes: set[Node] = set()
        for spec, found in zip(specs, lists, strict=True):
            if found is not None and spec.get("type", "Device") == "Device":
                nodes |= _nodes(host, found[i], _container_path(spec, found[i]))
        units += [frozenset(nodes)] * (group.get("count") or 1)
    return units


def _usb_units(host: FakeHost, group: dict[str, Any]) -> list[frozenset[Node]]:
    devices = host.sys / "bus" / "usb" / "devices"
    paths: list[str] = []
    for spec in group["usb"]:
        for entry in sorted(devices.iterdir()):
            try:
                vendor = int((entry / "idVendor").read_text().strip(), 16)
                product = int((entry / "idProduct").read_text().strip(), 16)
                bus = int((entry / "busnum").read_text().strip(), 16)
                dev = int((entry / "devnum").read_text().strip(), 16)
            except OSError:
                continue
            serial_file = entry / "serial"
            serial = serial_file.read_text().removesuffix("\n") if serial_file.exists() else ""
            wanted_serial = spec.get("serial") or ""
            if (
                vendor == int(spec["vendor"], 16)
                and product == int(spec["product"], 16)
                and (not wanted_serial or serial == wanted_serial)
            ):
                paths.append(f"/dev/bus/usb/{bus:03x}/{dev:03x}")
    if not paths:
        return []
    nodes: set[Node] = set().union(*(_nodes(host, p, p) for p in paths))
    return [frozenset(nodes)] * (group.get("count") or 1)


def squat_units(host: FakeHost, device: dict[str, Any]) -> Counter[frozenset[Node]]:
    """Every unit squat lists for one ``--device`` value (parsed), with multiplicity."""
    units: Counter[frozenset[Node]] = Counter()
    for group in device["groups"]:
        found = _usb_units(host, group) if group.get("usb") else _path_units(host, group)
        units.update(found)
    return units
