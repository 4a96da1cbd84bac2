"""Reconcile: what to do to go from the running config to a new one (pure).

Definitions compare by value (compiled templates excluded). A changed
definition keeps its runner and is updated in place, and *renewed* as well
when its backend says the kubelet must hear of it anew (``Registers.renews``).
Removed resources stop before new ones start, so a resource renamed in the
same edit never has two runners at once. A resource with a ``nodeSelector``
is wanted only while the node's labels match it (``served``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from genericdp.config.model import ResourceDefinition

# A node's labels; None when they cannot be read (no API access).
NodeLabels = Mapping[str, str] | None
LABELS_UNKNOWN = "this node's labels are unknown"

Renews = Callable[[ResourceDefinition, ResourceDefinition], bool]


@dataclass(frozen=True)
class Plan:
    """Steps, applied in field order: stop, update, renew, start."""

    stop: tuple[str, ...] = ()
    update: tuple[ResourceDefinition, ...] = ()  # swap the definition in place
    renew: tuple[ResourceDefinition, ...] = ()  # swap it and tell the kubelet anew
    start: tuple[ResourceDefinition, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.stop or self.update or self.renew or self.start)

    def __str__(self) -> str:
        parts = [
            ("stop", self.stop),
            ("update", [d.name for d in self.update]),
            ("re-register", [d.name for d in self.renew]),
            ("start", [d.name for d in self.start]),
        ]
        said = "; ".join(f"{verb} {', '.join(names)}" for verb, names in parts if names)
        return said or "nothing to do"


def plan(
    running: Iterable[ResourceDefinition],
    desired: Iterable[ResourceDefinition],
    renews: Renews | None = None,  # None: never
) -> Plan:
    """The steps from ``running`` to ``desired`` (each keyed by resource name)."""
    old = {d.name: d for d in running}
    new = {d.name: d for d in desired}
    update: list[ResourceDefinition] = []
    renew: list[ResourceDefinition] = []
    unchanged: list[str] = []
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        if before == after:
            unchanged.append(name)
        elif renews is not None and renews(before, after):
            renew.append(after)
        else:
            update.append(after)
    return Plan(
        stop=tuple(sorted(old.keys() - new.keys())),
        update=tuple(update),
        renew=tuple(renew),
        start=tuple(new[n] for n in sorted(new.keys() - old.keys())),
        unchanged=tuple(unchanged),
    )


def not_served(definition: ResourceDefinition, labels: NodeLabels) -> str | None:
    """Why this node does not serve ``definition`` (its selector does not match), or None."""
    selector = definition.node_selector
    if selector is None:
        return None
    if labels is None:
        return LABELS_UNKNOWN
    unmet = selector.unmet(labels)
    return None if unmet is None else f"nodeSelector needs {unmet}"


def served(
    resources: Iterable[ResourceDefinition], labels: NodeLabels
) -> tuple[tuple[ResourceDefinition, ...], dict[str, str]]:
    """The resources a node with ``labels`` serves, and why each other one is not."""
    kept: list[ResourceDefinition] = []
    skipped: dict[str, str] = {}
    for definition in resources:
        reason = not_served(definition, labels)
        if reason is None:
            kept.append(definition)
        else:
            skipped[definition.name] = reason
    return tuple(kept), skipped
