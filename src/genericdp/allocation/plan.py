"""One allocation in two phases: ``plan_allocation`` renders, with no side effect, what a
container receives, so a refused plan (a template that fails, a path that escapes its
template) refuses the request before anything has happened; then a backend commits it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genericdp.allocation.cdi import qualified_name
from genericdp.allocation.devices import DeviceSpec, device_nodes, merged
from genericdp.allocation.render import (
    check_allocation_bytes,
    render_path,
    render_value,
    template_context,
    units_named,
)
from genericdp.config.model import ResourceDefinition, frozen_map
from genericdp.config.templates import allocation_budget
from genericdp.discovery.model import Unit
from genericdp.errors import TemplateRenderError
from genericdp.hooks import HookRun

__all__ = ["Allocation", "DeviceSpec", "Mount", "Plan", "plan_allocation"]


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the container (kubelet ``Mount``, a CDI mount)."""

    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class Allocation:
    """Everything one container receives for the units allocated to it."""

    devices: tuple[DeviceSpec, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi_devices: tuple[str, ...] = ()

    def lines(self, indent: str = "    ") -> list[str]:
        """As people read it (``discover``, ``simulate``): one line per device,
        mount, variable, annotation and CDI name, in that order."""
        lines = [
            f"{indent}device {d.container_path} (host {d.host_path}, {d.permissions})"
            for d in self.devices
        ]
        lines += [
            f"{indent}mount  {m.container_path} (host {m.host_path}{', ro' if m.read_only else ''})"
            for m in self.mounts
        ]
        lines += [f"{indent}env    {k}={v}" for k, v in self.env.items()]
        lines += [f"{indent}annot. {k}={v}" for k, v in self.annotations.items()]
        lines += [f"{indent}cdi    {name}" for name in self.cdi_devices]
        return lines

    def as_dict(self) -> dict[str, Any]:
        """As JSON shows it (``discover --output json``): camelCase keys, one per field."""
        return {
            "devices": [
                {
                    "containerPath": d.container_path,
                    "hostPath": d.host_path,
                    "permissions": d.permissions,
                }
                for d in self.devices
            ],
            "mounts": [
                {
                    "containerPath": m.container_path,
                    "hostPath": m.host_path,
                    "readOnly": m.read_only,
                }
                for m in self.mounts
            ],
            "env": dict(self.env),
            "annotations": dict(self.annotations),
            "cdiDevices": list(self.cdi_devices),
        }


@dataclass(frozen=True)
class Plan:
    """One allocation of ``units``, planned and not yet committed; ``nodes``: each unit's."""

    definition: ResourceDefinition
    units: tuple[Unit, ...]
    device_ids: tuple[str, ...]
    node_name: str
    nodes: tuple[tuple[DeviceSpec, ...], ...]
    receives: Allocation

    def hook(self, name: str, *, logger: logging.Logger | None = None) -> HookRun | None:
        """The run of the definition's hook ``name`` for these units; None without one."""
        units, ids = self.units, self.device_ids
        return HookRun.of(
            name, self.definition, units, ids, node_name=self.node_name, logger=logger
        )


def plan_allocation(
    definition: ResourceDefinition,
    units: Sequence[Unit],
    device_ids: Sequence[str] = (),
    *,
    node_name: str = "",
    slice_seconds: float | None = None,
) -> Plan:
    """What a container receives for ``units``, deterministically. With ``slice_seconds`` (a
    render on the event loop), templates that need longer give up (``render.rendered_soon``).

    With ``allocate.cdi`` the device specs stay beside the CDI names: a runtime
    without CDI (or a kubelet before 1.28, which drops the field) still gives
    the container its nodes, and a CDI runtime replaces the node of the same path.
    """
    name = definition.name
    templates = definition.templates
    if templates is None:
        raise TemplateRenderError(
            f"resource {name}: its templates were not compiled (definitions come from config.load)"
        )
    units = tuple(units)
    context = template_context(definition, units, node_name, device_ids, templates.names)
    with allocation_budget(slice_seconds):
        env = {k: render_value(name, "env", k, v, context) for k, v in templates.env}
        named = units_named(units) if templates.mounts else ""
        mounts = tuple(
            Mount(
                container_path=render_path(
                    name, f"mounts[{i}]", "containerPath", m.container_path, context, units=named
                ),
                host_path=render_path(
                    name, f"mounts[{i}]", "hostPath", m.host_path, context, units=named
                ),
                read_only=m.read_only,
            )
            for i, m in enumerate(templates.mounts)
        )
        annotations = {
            k: render_value(name, "annotations", k, v, context) for k, v in templates.annotations
        }
    paths = [(m.host_path, m.container_path) for m in mounts]
    check_allocation_bytes(name, units, env, paths, annotations)
    nodes = tuple(device_nodes(definition, u) for u in units)
    cdi_devices = (
        tuple(dict.fromkeys(qualified_name(name, u.id) for u in units))
        if definition.allocate.cdi
        else ()
    )
    receives = Allocation(
        devices=merged(name, units, nodes) if units else (),
        mounts=mounts,
        env=frozen_map(env),
        annotations=frozen_map(annotations),
        cdi_devices=cdi_devices,
    )
    return Plan(definition, units, tuple(device_ids), node_name, nodes, receives)
