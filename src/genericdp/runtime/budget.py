"""How many of its discovered units each resource serves: the node's unit and ID budget.

Discovery can find more than any config foresaw (a glob over a directory
of 100,000 nodes), and serving them all would take the daemon past its memory
limit (``config/limits.py``). A scan keeps at most the limits per resource
(units, and device IDs: units times their IDs each) and what the node's
totals leave after the other resources: the first units in ID order, so a
host gives the same units at every scan and a resource keeps its units when
another one grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from genericdp.config.limits import (
    MAX_IDS_PER_NODE,
    MAX_IDS_PER_RESOURCE,
    MAX_UNITS_PER_NODE,
    MAX_UNITS_PER_RESOURCE,
)
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit


@dataclass(frozen=True)
class Limits:
    units_per_resource: int = MAX_UNITS_PER_RESOURCE
    units_per_node: int = MAX_UNITS_PER_NODE
    ids_per_resource: int = MAX_IDS_PER_RESOURCE
    ids_per_node: int = MAX_IDS_PER_NODE


@dataclass(frozen=True)
class Kept:
    """What one scan of a resource may serve of what it found."""

    units: tuple[Unit, ...]
    found: int  # units discovery found
    why: str = ""  # which limit left units out, with its number

    @property
    def left_out(self) -> int:
        return self.found - len(self.units)

    def note(self, resource: str) -> str:
        """What the log, ``/readyz`` and ``discover`` say of units left out ("" if none)."""
        if not self.left_out:
            return ""
        return (
            f"{resource}: serving the first {len(self.units)} of {self.found} units found"
            f" (by ID), {self.left_out} left out: the limit of {self.why}"
        )


def ids_each(definition: ResourceDefinition) -> int:
    """Device IDs one unit of ``definition`` lists: ``count``, or ``freeIds`` when unbounded."""
    return definition.free_ids if definition.unbounded else definition.count


class NodeBudget:
    """The units and IDs every resource of the node holds, against the ``Limits``."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._held: dict[str, tuple[int, int]] = {}  # resource -> (units, IDs)

    def keep(self, resource: str, units: Sequence[Unit], ids_each: int) -> Kept:
        """The first of ``units`` (by ID) that ``resource`` may serve, now what it holds."""
        ordered = sorted(units, key=lambda u: u.id)
        others_units = sum(u for r, (u, _) in self._held.items() if r != resource)
        others_ids = sum(i for r, (_, i) in self._held.items() if r != resource)
        each = max(ids_each, 1)
        limits = self.limits
        bounds = [
            (limits.units_per_resource, f"{limits.units_per_resource} units per resource"),
            (
                limits.units_per_node - others_units,
                f"{limits.units_per_node} units per node, {others_units} held by other resources",
            ),
            (
                limits.ids_per_resource // each,
                f"{limits.ids_per_resource} device IDs per resource ({each} per unit)",
            ),
            (
                (limits.ids_per_node - others_ids) // each,
                (
                    f"{limits.ids_per_node} device IDs per node, {others_ids} held by other"
                    f" resources ({each} per unit)"
                ),
            ),
        ]
        room, why = min(bounds, key=lambda b: b[0])
        room = max(room, 0)
        kept = tuple(ordered[:room])
        self._held[resource] = (len(kept), len(kept) * each)
        return Kept(kept, len(ordered), why if len(kept) < len(ordered) else "")

    def release(self, resource: str) -> None:
        """``resource`` is no longer served: what it held is free for the others."""
        self._held.pop(resource, None)
