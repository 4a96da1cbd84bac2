"""Device discovery: which device nodes a resource matches and the units they form.

Pure reading of three roots (``Roots``: dev, sys, udev), no gRPC, no state
kept between calls: every call looks at the host as it is now.

- ``find_nodes``: the union of what each matcher finds, one ``DeviceNode``
  per real host node (the first matcher to find a node wins);
- ``group_units``: nodes into units by ``groupBy``, with stable IDs;
- ``discover``: both, for one resource definition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from genericdp.config.model import GlobMatcher, GroupBy, Matcher, ResourceDefinition, frozen_map
from genericdp.discovery.globs import expand, resolve_in_root
from genericdp.discovery.grouping import Group, group_nodes
from genericdp.discovery.ids import assign_ids, properties_of
from genericdp.discovery.model import DeviceNode, Roots, Unit
from genericdp.discovery.nodes import Scan
from genericdp.discovery.udev import match_udev
from genericdp.errors import DiscoveryError, clip

__all__ = ["discover", "find_nodes", "group_units"]

log = logging.getLogger(__name__)


def discover(definition: ResourceDefinition, roots: Roots) -> tuple[Unit, ...]:
    """The units ``definition`` advertises on the host seen through ``roots``, sorted by ID."""
    nodes = find_nodes(definition.match, roots)
    return group_units(nodes, definition.group_by, roots, count=definition.id_slots)


def find_nodes(matchers: Sequence[Matcher], roots: Roots) -> tuple[DeviceNode, ...]:
    """Every node any matcher finds, deduplicated by real host node (first matcher wins).

    Raises DiscoveryError when the dev root itself is missing; odd entries
    (dangling or escaping links, anything but a device node: regular files,
    sockets, FIFOs, vanished files) are skipped (``Scan.is_device_node``).
    """
    if not roots.dev.is_dir():
        raise DiscoveryError(f"device root {roots.dev} does not exist or is not a directory")
    scan = Scan(roots)
    found: dict[str, DeviceNode] = {}
    for matcher in matchers:
        if isinstance(matcher, GlobMatcher):
            nodes = _glob_nodes(matcher.pattern, scan)
        else:
            nodes = [
                scan.describe(devname, f"/dev/{devname}", located)
                for devname, located in match_udev(matcher, scan)
            ]
        for node in nodes:
            found.setdefault(node.host_path, node)
    return tuple(sorted(found.values(), key=lambda node: node.host_path))


def group_units(
    nodes: Sequence[DeviceNode], group_by: GroupBy, roots: Roots, *, count: int = 1
) -> tuple[Unit, ...]:
    """Units formed from ``nodes`` by ``group_by``, sorted by ID, nodes sorted by host path."""
    groups = group_nodes(nodes, group_by, roots.sys)
    ids = assign_ids(
        groups, kind=group_by.kind, sys_root=roots.sys, udev_root=roots.udev, count=count
    )
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
    return Unit(
        id=unit_id,
        nodes=group.nodes,
        numa_node=numa.pop() if len(numa) == 1 else None,
        parent=group.parent.path if group.parent is not None else None,
        attributes=attributes,
        properties=properties,
    )
