"""Unbounded sharing: a few free IDs per unit, more as they are taken.

Each unit lists the IDs held now plus ``freeIds`` free ones, the lowest
indices nobody holds: a pure function of what is held, so a restart that reads
PodResources first lists exactly what the kubelet's checkpoint holds, and a
released ID is reused.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

from genericdp.config.model import UNBOUNDED, UNBOUNDED_INDEX_LIMIT, ResourceDefinition
from genericdp.kubelet.devices import index_text, replica_id, replica_ids


def canonical_index(device_id: str) -> int | None:
    """``i`` of ``<unit>::<i>`` when written as we write it (plain ASCII decimal); else None."""
    index = index_text(device_id)
    if index is None or not (index.isascii() and index.isdigit()) or str(int(index)) != index:
        return None
    return int(index)


def replica_index(device_id: str) -> int | None:
    """``i`` of ``<unit>::<i>``, written as we write it and below the limit; else None."""
    value = canonical_index(device_id)
    return value if value is not None and value < UNBOUNDED_INDEX_LIMIT else None


def advertised_indices(held: Iterable[int], free: int) -> tuple[int, ...]:
    """The held indices and the ``free`` lowest ones nobody holds, in order."""
    taken = set(held)
    spare = islice((i for i in range(UNBOUNDED_INDEX_LIMIT) if i not in taken), free)
    return tuple(sorted(taken.union(spare)))


def idle_ids(definition: ResourceDefinition, unit_id: str) -> tuple[str, ...]:
    """A unit's device IDs while nobody holds any (what ``discover`` shows)."""
    if definition.unbounded:
        return tuple(replica_id(unit_id, i) for i in advertised_indices((), definition.free_ids))
    return replica_ids(unit_id, definition.count)


def sharing_text(definition: ResourceDefinition) -> str:
    """``count`` as a user wrote it: a number, or unbounded with its free IDs."""
    if definition.unbounded:
        return f"{UNBOUNDED}, {definition.free_ids} free IDs"
    return str(definition.count)
