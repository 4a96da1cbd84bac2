"""Device discovery: which device nodes a resource matches and the units they form.

Pure reading of three roots (``Roots``: dev, sys, udev), no gRPC, no state
kept between calls: every call looks at the host as it is now.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from genericdp.config.model import (
    ExtraDevice,
    GlobMatcher,
    GroupBy,
    Matcher,
    ResourceDefinition,
    frozen_map,
)
from genericdp.discovery.containerpaths import with_container_path
from genericdp.discovery.globs import expand, resolve_in_root
from genericdp.discovery.grouping import Group, group_nodes
from genericdp.discovery.ids import assign_ids, properties_of
from genericdp.discovery.model import DeviceNode, Roots, Unit
from genericdp.discovery.nodes import Scan
from genericdp.discovery.pci import pci_place
from genericdp.discovery.udev import match_udev
from genericdp.errors import DiscoveryError, clip

__all__ = ["discover", "find_nodes", "group_units"]

log = logging.getLogger(__name__)


def discover(definition: ResourceDefinition, roots: Roots) -> tuple[Unit, ...]:
    """The units ``definition`` advertises on the host seen through ``roots``, sorted by ID
    (container paths are rendered after grouping: IDs come from the host's names)."""
    found = find_nodes(definition.match, roots)
    nodes = tuple(node for node, _ in found)
    units = group_units(nodes, definition.group_by, roots, count=definition.id_slots)
    templates = {node.host_path: template for node, template in found if template is not None}
    if templates:
        units = tuple(_rendered(unit, templates, definition.name) for unit in units)
        units = tuple(unit for unit in units if unit.nodes)
    if definition.allocate.devices:
        shared, missing = _shared_nodes(definition.allocate.devices, roots, definition.name)
        units = tuple(replace(unit, shared=shared, missing=missing) for unit in units)
    return units


def find_nodes(matchers: Sequence[Matcher], roots: Roots) -> list[tuple[DeviceNode, str | None]]:
    """Every node any matcher finds, deduplicated by real host node (first matcher wins),
    with the ``containerPath`` template of the matcher that found it; DiscoveryError
    when the dev root itself is missing."""
    if not roots.dev.is_dir():
        raise DiscoveryError(f"device root {roots.dev} does not exist or is not a directory")
    scan = Scan(roots)
    found: dict[str, tuple[DeviceNode, str | None]] = {}
    for matcher in matchers:
        if isinstance(matcher, GlobMatcher):
            nodes = _glob_nodes(matcher.pattern, scan)
        else:
            nodes = [
                scan.describe(devname, f"/dev/{devname}", located)
                for devname, located in match_udev(matcher, scan)
            ]
        for node in nodes:
            found.setdefault(node.host_path, (node, matcher.container_path))
    return sorted(found.values(), key=lambda item: item[0].host_path)


def _shared_nodes(
    entries: Sequence[ExtraDevice], roots: Roots, resource: str
) -> tuple[tuple[DeviceNode, ...], tuple[str, ...]]:
    """The device nodes of ``allocate.devices`` (in entry order, each real node
    once, confined as matched nodes are) and the paths of required entries that
    found none."""
    scan = Scan(roots)
    chosen: dict[str, DeviceNode] = {}
    missing: list[str] = []
    for entry in entries:
        found = 0
        for matched in _glob_nodes(entry.path, scan):
            node = replace(matched, permissions=entry.permissions)
            rendered = with_container_path(
                node, entry.container_path, what=f"{resource}: allocate.devices {entry.path}"
            )
            if rendered is None:
                continue
            found += 1
            chosen.setdefault(rendered.host_path, rendered)
        if not found and not entry.optional:
            missing.append(entry.path)
    return tuple(chosen.values()), tuple(missing)


def _rendered(unit: Unit, templates: dict[str, str], resource: str) -> Unit:
    """``unit`` with its nodes at their rendered container paths, or with none if one
    fails (dropped: half a unit is not what the config describes)."""
    nodes = []
    for node in unit.nodes:
        template = templates.get(node.host_path)
        rendered = with_container_path(node, template, what=f"{resource}: unit {unit.id}")
        if rendered is None:
            return replace(unit, nodes=())
        nodes.append(rendered)
    return replace(unit, nodes=tuple(nodes))


def group_units(
    nodes: Sequence[DeviceNode], group_by: GroupBy, roots: Roots, *, count: int = 1
) -> tuple[Unit, ...]:
    """Units formed from ``nodes`` by ``group_by``, sorted by ID, nodes sorted by host path."""
    groups = group_nodes(nodes, group_by, roots.sys)
    ids = assign_ids(groups, group_by.kind, roots, count=count)
    units = [_unit(unit_id, group, roots) for unit_id, group in zip(ids, groups, strict=True)]
    return tuple(sorted(units, key=lambda unit: unit.id))


def _glob_nodes(pattern: str, scan: Scan) -> list[DeviceNode]:
    """One node per real node the glob reaches; the node's own path beats a link to it."""
    chosen: dict[str, str] = {}  # real node -> matched path
    for matched in expand(scan.roots.dev, pattern):
        real = resolve_in_root(scan.roots.dev, matched)
        if real is None:
            # File names under /dev/shm are anyone's: never raw into a log line.
            log.debug("glob %s: %s dangles or leaves the dev root", pattern, clip(matched))
            continue
        if not scan.is_device_node(real):
            log.debug("glob %s: %s is not a device node; skipped", pattern, clip(matched))
            continue
        if real not in chosen or matched == real:
            chosen[real] = matched
    return [scan.describe(real, f"/dev/{matched}") for real, matched in sorted(chosen.items())]


def _unit(unit_id: str, group: Group, roots: Roots) -> Unit:
    first = group.nodes[0]
    numa = {node.numa_node for node in group.nodes}
    attributes, properties = first.attributes, first.properties
    if group.parent is not None:
        attributes = frozen_map(group.parent.attributes())
        properties = frozen_map(properties_of(group.parent, roots.udev))
    places = {pci_place(roots.sys, node.sysfs_path) for node in group.nodes}
    buses = {place.bus_id for place in places}
    pcie_roots = {place.pcie_root for place in places}
    return Unit(
        id=unit_id,
        nodes=group.nodes,
        numa_node=numa.pop() if len(numa) == 1 else None,
        parent=group.parent.path if group.parent is not None else None,
        attributes=attributes,
        properties=properties,
        pci_bus_id=buses.pop() if len(buses) == 1 else None,
        pcie_root=pcie_roots.pop() if len(pcie_roots) == 1 else None,
    )
