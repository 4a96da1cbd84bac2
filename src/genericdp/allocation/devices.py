"""The device nodes a unit gives a container: the one place every backend
(Allocate answers, CDI specs) takes them from."""

from __future__ import annotations

from dataclasses import dataclass

from genericdp.allocation.confine import clean_device_path
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import UnsafeAllocationError, clip, shown


@dataclass(frozen=True)
class DeviceSpec:
    """A device node a container receives (kubelet ``DeviceSpec``, a CDI ``deviceNodes`` entry).
    Only CDI carries ``file_mode``, ``uid``, ``gid``: for a ``DeviceSpec`` the runtime copies
    the host node's."""

    container_path: str
    host_path: str
    permissions: str
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None


def unit_named(resource: str, unit: Unit) -> str:
    return f"resource {resource}: unit {clip(unit.id, 80)}"


def device_nodes(
    definition: ResourceDefinition, unit: Unit, *, checked: bool = True
) -> tuple[DeviceSpec, ...]:
    """The unit's nodes, then its ``Unit.shared`` nodes, once per container path.
    ``checked``: paths must be clean ``/dev`` paths, and two host nodes at one container
    path are refused (the container would silently get one); unchecked, the first stays."""
    specs: dict[str, DeviceSpec] = {}
    wanted = definition.allocate.device_nodes
    for node in (*unit.nodes, *unit.shared) if unit.shared else unit.nodes:
        known = specs.get(node.container_path)
        if known is not None:
            if checked and known.host_path != node.host_path:
                raise _conflict(definition.name, unit, node.host_path, known)
            continue
        for path in (node.container_path, node.host_path) if checked else ():
            if not clean_device_path(path):
                raise UnsafeAllocationError(
                    f"{unit_named(definition.name, unit)}: device path {shown(path)}"
                    " is not a clean /dev path"
                )
        specs[node.container_path] = DeviceSpec(
            node.container_path,
            node.host_path,
            node.permissions or definition.permissions,
            file_mode=node.mode if wanted.mode is None else wanted.mode,
            uid=node.uid if wanted.uid is None else wanted.uid,
            gid=node.gid if wanted.gid is None else wanted.gid,
        )
    return tuple(specs.values())


def merged(
    resource: str, units: tuple[Unit, ...], nodes: tuple[tuple[DeviceSpec, ...], ...]
) -> tuple[DeviceSpec, ...]:
    """The nodes of several units (``device_nodes`` of each), once per container path;
    two different host nodes at one container path are refused, as within a unit."""
    if len(nodes) == 1:
        return nodes[0]
    specs: dict[str, DeviceSpec] = {}
    for unit, specs_of_unit in zip(units, nodes, strict=True):
        for spec in specs_of_unit:
            known = specs.get(spec.container_path)
            if known is None:
                specs[spec.container_path] = spec
            elif known.host_path != spec.host_path:
                raise _conflict(resource, unit, spec.host_path, known)
    return tuple(specs.values())


def _conflict(
    resource: str, unit: Unit, host_path: str, known: DeviceSpec
) -> UnsafeAllocationError:
    return UnsafeAllocationError(
        f"{unit_named(resource, unit)}: {clip(host_path)} and {clip(known.host_path)}"
        f" would both be {clip(known.container_path)} in the container"
    )
