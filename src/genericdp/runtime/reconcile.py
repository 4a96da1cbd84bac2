"""Reconcile: what to do to go from the running config to a new one (pure).

Definitions compare by value (compiled templates excluded), so an equal
definition means "leave it alone". A changed definition keeps its plugin and
is updated in place, unless the options the kubelet learnt at registration
change (a preStart hook added or removed, the preferred-allocation policy to
or from ``none``): the kubelet only reads options during Register, so those
re-register. Removed resources stop before new ones start, so a resource
renamed in the same edit never has two plugins at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from genericdp.config.model import PreferredAllocation, ResourceDefinition
from genericdp.kubelet.options import PluginOptions


def plugin_options(definition: ResourceDefinition) -> PluginOptions:
    """The options a resource registers with, derived from its definition."""
    return PluginOptions(
        pre_start_required=definition.hooks.pre_start is not None,
        get_preferred_allocation_available=(
            definition.preferred_allocation is not PreferredAllocation.NONE
        ),
    )


@dataclass(frozen=True)
class Plan:
    """Steps, applied in field order: stop, update, reregister, start."""

    stop: tuple[str, ...] = ()
    update: tuple[ResourceDefinition, ...] = ()  # same options: swap definition in place
    reregister: tuple[ResourceDefinition, ...] = ()  # options changed: swap and Register again
    start: tuple[ResourceDefinition, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.stop or self.update or self.reregister or self.start)

    def __str__(self) -> str:
        parts = [
            f"stop {_names(self.stop)}" if self.stop else "",
            f"update {_names(d.name for d in self.update)}" if self.update else "",
            f"re-register {_names(d.name for d in self.reregister)}" if self.reregister else "",
            f"start {_names(d.name for d in self.start)}" if self.start else "",
        ]
        return "; ".join(p for p in parts if p) or "nothing to do"


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


def plan(running: Iterable[ResourceDefinition], desired: Iterable[ResourceDefinition]) -> Plan:
    """The steps from ``running`` to ``desired`` (each keyed by resource name)."""
    old = {d.name: d for d in running}
    new = {d.name: d for d in desired}
    update: list[ResourceDefinition] = []
    reregister: list[ResourceDefinition] = []
    unchanged: list[str] = []
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        if before == after:
            unchanged.append(name)
        elif plugin_options(before) == plugin_options(after):
            update.append(after)
        else:
            reregister.append(after)
    return Plan(
        stop=tuple(sorted(old.keys() - new.keys())),
        update=tuple(update),
        reregister=tuple(reregister),
        start=tuple(new[n] for n in sorted(new.keys() - old.keys())),
        unchanged=tuple(unchanged),
    )
