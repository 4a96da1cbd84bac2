"""What `genericdp discover` shows of each resource: its units, what one unit would give a
container, the node labels it would publish; as text or JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genericdp.allocation.plan import Allocation, plan_allocation
from genericdp.config.model import UNBOUNDED, ResourceDefinition
from genericdp.deviceplugin.sharing import idle_ids, sharing_text
from genericdp.discovery.model import Unit
from genericdp.errors import GenericdpError
from genericdp.nodelabels import Dropped, label_lines, resource_labels


@dataclass(frozen=True)
class ResourceReport:
    definition: ResourceDefinition
    units: tuple[Unit, ...]
    example: Allocation | None  # what one unit would give a container
    error: str | None = None  # discovery or rendering failed
    not_served: str | None = None  # why a node with the given labels would not serve it
    # The node labels it would publish over its units (those not Unhealthy), and dropped.
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dropped: tuple[Dropped, ...] = ()

    @property
    def device_ids(self) -> tuple[str, ...]:
        return tuple(i for u in self.units for i in idle_ids(self.definition, u.id))


def build_report(
    definition: ResourceDefinition,
    units: Sequence[Unit],
    *,
    node_name: str = "",
    error: str | None = None,
) -> ResourceReport:
    """Render the allocation one unit would get; a failure is shown, not raised."""
    example: Allocation | None = None
    if units and error is None:
        try:
            first = units[0]
            example = plan_allocation(
                definition, [first], idle_ids(definition, first.id)[:1], node_name=node_name
            ).receives
        except GenericdpError as exc:
            error = f"allocation of {first.id} would fail: {exc}"
    healthy = [u for u in units if unit_health(definition, u) != "Unhealthy"]
    labels, dropped = resource_labels(definition, healthy, node_name)
    return ResourceReport(definition, tuple(units), example, error, None, labels, tuple(dropped))


def unit_health(definition: ResourceDefinition, unit: Unit) -> str:
    """What the daemon would advertise for ``unit`` before any probe has run."""
    if unit.missing:
        return "Unhealthy"
    return "Healthy" if definition.health is None else "not probed"


def probe_problem(definition: ResourceDefinition) -> str | None:
    """Why the health command could never pass here (None: it could, or no command)."""
    check = definition.health
    if check is None or check.exec is None:
        return None
    name = check.exec.argv[0]
    if "/" not in name:  # a bare name, looked up in PATH as the daemon runs it
        if shutil.which(name) is None:
            return f"health command {name} is not in PATH: every unit would stay Unhealthy"
        return None
    command = Path(name)
    if not command.exists():
        return f"health command {command} does not exist: every unit would stay Unhealthy"
    if command.is_dir() or not os.access(command, os.X_OK):
        return f"health command {command} is not executable: every unit would stay Unhealthy"
    return None


def _probe_text(definition: ResourceDefinition) -> str | None:
    check = definition.health
    if check is None:
        return None
    if problem := probe_problem(definition):
        return problem
    what = f"command {check.exec.argv[0]}" if check.exec else "sysfs attribute"
    return (
        f"health: {what} every {check.interval:g}s, not probed here"
        " (units are Unhealthy until their first probe passes)"
    )


def report_dict(report: ResourceReport) -> dict[str, Any]:
    """The JSON shape of one resource's report (stable keys, camelCase)."""
    d = report.definition
    return {
        "resource": d.name,
        "source": f"{d.source.file}:{d.source.line}" if d.source.line else d.source.file,
        "groupBy": str(d.group_by),
        "count": UNBOUNDED if d.unbounded else d.count,
        **({"freeIds": d.free_ids} if d.unbounded else {}),
        "units": [
            {
                "id": u.id,
                "deviceIds": list(idle_ids(d, u.id)),
                "health": unit_health(d, u).lower(),  # healthy, unhealthy, not probed
                "numaNode": u.numa_node,
                "nodes": [
                    {"hostPath": n.host_path, "containerPath": n.container_path} for n in u.nodes
                ],
            }
            for u in report.units
        ],
        "capacity": len(report.device_ids),
        # discover writes no CDI spec, and has never listed the CDI names.
        "exampleAllocation": None
        if report.example is None
        else {k: v for k, v in report.example.as_dict().items() if k != "cdiDevices"},
        "error": report.error,
        "missingDevices": _missing(report.units),
        "served": report.not_served is None,
        "notServed": report.not_served,
        "healthProbe": _probe_dict(d),
        "nodeLabels": {} if report.not_served else dict(sorted(report.labels.items())),
        "nodeLabelsDropped": []
        if report.not_served
        else [
            {"key": x.key, "reason": x.reason, "detail": x.detail}
            for x in sorted(report.dropped, key=lambda x: x.key)
        ],
    }


def _probe_dict(definition: ResourceDefinition) -> dict[str, Any] | None:
    check = definition.health
    if check is None:
        return None
    kind = "exec" if check.exec is not None else "sysfs"
    return {"kind": kind, "interval": check.interval, "problem": probe_problem(definition)}


def _missing(units: Sequence[Unit]) -> list[str]:
    """The required ``allocate.devices`` entries the scan did not find (all units share them)."""
    return sorted({m for u in units for m in u.missing})


def to_json(reports: Sequence[ResourceReport]) -> str:
    return json.dumps({"resources": [report_dict(r) for r in reports]}, indent=2)


def to_text(reports: Sequence[ResourceReport]) -> str:
    out: list[str] = []
    for r in reports:
        d = r.definition
        out.append(
            f"{d.name}  ({len(r.units)} unit(s), capacity {len(r.device_ids)}, "
            f"groupBy {d.group_by}, count {sharing_text(d)})"
        )
        if r.not_served:
            out.append(f"  not served on this node: {r.not_served}")
        if r.error:
            out.append(f"  error: {r.error}")
        if missing := ", ".join(_missing(r.units)):
            out.append(f"  every unit is Unhealthy: required device node(s) missing: {missing}")
        if probe := _probe_text(d):
            out.append(f"  {probe}")
        if not r.units:
            out.append("  no devices found")
        else:
            width = max(len("UNIT"), *(len(u.id) for u in r.units))
            out.append(f"  {'UNIT':<{width}}  NUMA  {'HEALTH':<10}  NODES")
            for u in r.units:
                numa = "-" if u.numa_node is None else str(u.numa_node)
                nodes = ", ".join(
                    n.host_path
                    if n.host_path == n.container_path
                    else f"{n.container_path} -> {n.host_path}"
                    for n in u.nodes
                )
                health = unit_health(d, u)
                out.append(f"  {u.id:<{width}}  {numa:<4}  {health:<10}  {nodes}")
        if r.example is not None:
            out.append(f"  one unit ({r.units[0].id}) gives a container:")
            # discover has never listed the CDI names (nor has its JSON).
            out.extend(dataclasses.replace(r.example, cdi_devices=()).lines())
        out.extend(_labels_text(r))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _labels_text(report: ResourceReport) -> list[str]:
    """The node labels a resource would publish here (none when not served)."""
    d = report.definition
    if report.not_served or not d.labels.templates(d.name):
        return []
    if not report.labels and not report.dropped:
        return ["  node labels: none (no healthy unit)"]
    when = " once its units pass their probe" if d.health is not None else ""
    return [f"  node labels it would publish{when}:", *label_lines(report.labels, report.dropped)]


def label_keys_note(definition: ResourceDefinition) -> str:
    """What ``validate`` says of a resource's node labels: their keys, or nothing."""
    keys = [key for key, _ in definition.labels.templates(definition.name)]
    return f"    node labels: {', '.join(keys)}" if keys else ""


def served_note(definition: ResourceDefinition, labels: Mapping[str, str] | None) -> str:
    """What ``validate --node-labels`` adds after a resource: served, or why not."""
    from genericdp.runtime.reconcile import not_served

    if labels is None:
        return ""
    why = not_served(definition, labels)
    return "  served" if why is None else f"  not served: {why}"
