"""Rendering an allocation: a pure function from (definition, units) to what a
container receives.

The templates were compiled and sandboxed at load (``genericdp.config.templates``);
here they are rendered within one allocation's budget, and what they render is
confined (``genericdp.allocation.confine``) before a container can receive it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from genericdp.allocation.cdi import qualified_name
from genericdp.allocation.confine import (
    check_device_path,
    check_value,
    clean_device_path,
    confine_path,
)
from genericdp.config.model import ResourceDefinition, frozen_map
from genericdp.config.templates import (
    TEMPLATE_NAMES,
    SliceSpent,
    TemplateSyntaxErrors,
    TemplateValue,
    allocation_budget,
    compile_templates,
)
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import (
    TemplateRenderError,
    UnsafeAllocationError,
    clip,
    ellipsized,
    first_of,
)

# What a render may take on the event loop before it is done again in a worker
# thread: the templates of most allocations take well under a millisecond, and
# the hop to a thread and back cost more than that (docs/performance.md).
INLINE_RENDER_SECONDS = 0.002


@dataclass(frozen=True)
class DeviceSpec:
    """A device node a container receives (kubelet ``DeviceSpec``)."""

    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the container (kubelet ``Mount``)."""

    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class Allocation:
    """Everything one container receives for the units allocated to it.

    ``cdi_devices`` (``allocate.cdi``) are fully qualified CDI names, one per
    unit, resolved by the runtime from the spec ``genericdp.allocation.cdi`` writes.
    """

    devices: tuple[DeviceSpec, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi_devices: tuple[str, ...] = ()


def _plain(mapping: Mapping[str, str]) -> dict[str, str]:
    """A dict copy (of ``frozen_map``'s proxy: its dict's own copy, five times quicker)."""
    if isinstance(mapping, MappingProxyType):
        return cast("dict[str, str]", mapping.copy())
    return dict(mapping)


def _node_context(node: DeviceNode, unit_id: str) -> dict[str, Any]:
    return {
        "path": node.container_path,
        "host_path": node.host_path,
        "container_path": node.container_path,
        "major": node.major,
        "minor": node.minor,
        "subsystem": node.subsystem,
        "numa_node": node.numa_node,
        "attributes": _plain(node.attributes),
        "properties": _plain(node.properties),
        "unit_id": unit_id,
    }


def _template_context(
    definition: ResourceDefinition,
    units: Sequence[Unit],
    node_name: str,
    device_ids: Sequence[str],
    names: Collection[str] = TEMPLATE_NAMES,
) -> dict[str, Any]:
    """Plain dicts, lists and strings: templates never see our dataclasses.

    Only ``names`` are built (the names the resource's templates read: a
    template cannot reach any other); a node's dict is one object in both
    ``units`` and ``devices``.
    """
    context: dict[str, Any] = {"resource": definition.name, "node_name": node_name}
    want_units, want_devices = "units" in names, "devices" in names
    if want_units or want_devices:
        unit_dicts = []
        devices: dict[str, dict[str, Any]] = {}
        for unit in units:
            node_dicts = [_node_context(node, unit.id) for node in unit.nodes]
            for node_dict in node_dicts:
                devices.setdefault(node_dict["container_path"], node_dict)
            if want_units:
                unit_dicts.append(
                    {
                        "id": unit.id,
                        "nodes": node_dicts,
                        "numa_node": unit.numa_node,
                        "attributes": _plain(unit.attributes),
                        "properties": _plain(unit.properties),
                    }
                )
        if want_units:
            context["units"] = unit_dicts
        if want_devices:
            context["devices"] = list(devices.values())
    if "device_ids" in names:
        context["device_ids"] = list(device_ids)
    return context


def _unit_named(definition: ResourceDefinition, unit: Unit) -> str:
    return f"resource {definition.name}: unit {clip(unit.id, 80)}"


def _device_specs(definition: ResourceDefinition, units: Sequence[Unit]) -> tuple[DeviceSpec, ...]:
    """Every node of every unit, then the units' ``allocate.devices`` nodes, once
    per container path. Two different host nodes at one container path (a fixed
    ``containerPath`` matching two nodes of one allocation) are refused: the
    container would silently get one of them."""
    specs: dict[str, DeviceSpec] = {}
    for unit in units:
        for node in (*unit.nodes, *unit.shared) if unit.shared else unit.nodes:
            known = specs.get(node.container_path)
            if known is not None:
                if known.host_path != node.host_path:
                    raise UnsafeAllocationError(
                        f"{_unit_named(definition, unit)}: {clip(node.host_path)} and"
                        f" {clip(known.host_path)} would both be {clip(node.container_path)}"
                        " in the container"
                    )
                continue
            if not (clean_device_path(node.container_path) and clean_device_path(node.host_path)):
                what = _unit_named(definition, unit)
                check_device_path(node.container_path, what=what)
                check_device_path(node.host_path, what=what)
            specs[node.container_path] = DeviceSpec(
                node.container_path, node.host_path, node.permissions or definition.permissions
            )
    return tuple(specs.values())


def _render(
    resource: str, section: str, name: str, value: TemplateValue, context: Mapping[str, Any]
) -> str:
    """``value`` rendered; a failure names ``allocate.<section>.<name>`` (built only then)."""
    try:
        return value.render(context)
    except SliceSpent:
        raise  # not an error: the caller renders again, with the whole budget
    # The boundary for everything a template can raise: Jinja's errors, and the
    # TypeError/KeyError/OverflowError/... of the filters and methods it calls.
    except Exception as exc:
        source = ellipsized(value.source, 80, "...")
        raise TemplateRenderError(
            f"resource {resource}: allocate.{section}.{name} {source!r}: {exc}"
        ) from exc


def _render_path(
    resource: str,
    section: str,
    name: str,
    value: TemplateValue,
    context: Mapping[str, Any],
    *,
    units: str,
) -> str:
    """A rendered mount path, normalised and confined to its template (``confine``)."""
    what = f"resource {resource}: {units}: allocate.{section}.{name}"
    return confine_path(_render(resource, section, name, value, context), value.source, what=what)


def _render_value(
    resource: str, section: str, name: str, value: TemplateValue, context: Mapping[str, Any]
) -> str:
    rendered = _render(resource, section, name, value, context)
    if "\x00" in rendered:  # check_value's rule, tested here so the message is built only then
        check_value(rendered, what=f"resource {resource}: allocate.{section}.{name}")
    return rendered


def _units_named(units: Sequence[Unit]) -> str:
    """``unit X`` / ``units X, Y and 3 more`` for messages (IDs are at most 63 characters)."""
    ids = [u.id for u in units]
    return ("unit " if len(ids) == 1 else "units ") + first_of(ids, 3, empty="none")


def render_allocation(
    definition: ResourceDefinition,
    units: Sequence[Unit],
    *,
    node_name: str = "",
    device_ids: Sequence[str] = (),
    slice_seconds: float | None = None,
) -> Allocation:
    """What a container receives for ``units``: pure and deterministic.

    With ``slice_seconds`` (a render on the event loop), templates that need
    longer than that raise SliceSpent, and the caller renders again without it
    in a worker thread: the same result, since rendering is pure.

    Devices are every node of every unit, in unit then node order, once per
    container path. ``device_ids`` are the kubelet IDs of the request, passed
    through to templates as ``device_ids``.

    With ``allocate.cdi`` the CDI names of the units come too, and the device
    specs stay: a runtime without CDI (or a kubelet before 1.28, which drops
    the field) still gives the container its nodes, and a CDI runtime applies
    the spec on top, replacing the device node of the same path rather than
    adding a second one. (NVIDIA's plugin returns only CDI names when every
    strategy it is given is CDI, because its other strategies hand devices to
    its own runtime hook; ours are plain device nodes.)
    """
    templates = definition.templates
    if templates is None:
        try:
            templates = compile_templates(definition.allocate)
        except TemplateSyntaxErrors as exc:
            listed = "; ".join(f"allocate.{p.key}: {p.message}" for p in exc.problems)
            raise TemplateRenderError(f"resource {definition.name}: {listed}") from exc
    context = _template_context(definition, units, node_name, device_ids, templates.names)
    name = definition.name
    with allocation_budget(slice_seconds):
        env = {k: _render_value(name, "env", k, v, context) for k, v in templates.env}
        named = _units_named(units) if templates.mounts else ""
        mounts = tuple(
            Mount(
                container_path=_render_path(
                    name, f"mounts[{i}]", "containerPath", m.container_path, context, units=named
                ),
                host_path=_render_path(
                    name, f"mounts[{i}]", "hostPath", m.host_path, context, units=named
                ),
                read_only=m.read_only,
            )
            for i, m in enumerate(templates.mounts)
        )
        annotations = {
            k: _render_value(name, "annotations", k, v, context) for k, v in templates.annotations
        }
    cdi_devices = (
        tuple(dict.fromkeys(qualified_name(name, u.id) for u in units))
        if definition.allocate.cdi
        else ()
    )
    return Allocation(
        devices=_device_specs(definition, units),
        mounts=mounts,
        env=frozen_map(env),
        annotations=frozen_map(annotations),
        cdi_devices=cdi_devices,
    )
