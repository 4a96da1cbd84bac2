"""GetPreferredAllocation as a pure policy over device IDs and their units.

Every device ID belongs to a unit (``<unit>::<i>`` replicas share one), every
unit to a NUMA node and a parent (both may be unknown). The policy picks
``size`` IDs from ``available``, always including ``must_include``, one at a
time, greedily, with a total order so the answer is deterministic:

- **packed** prefers the candidate sharing the most with what is already
  chosen: same NUMA node, then same parent, then same unit (so replicas of a
  shared unit go together and whole units stay free). Ties go to the NUMA node
  and parent with the most available IDs, so a request tends to fit in one.
- **spread** prefers the candidate sharing the least with what is chosen:
  a NUMA node, parent and unit used fewest times so far, i.e. round robin.

Remaining ties fall back to the IDs' order. Unknown NUMA nodes count as one
node; an unknown parent counts as the unit itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from genericdp.config.model import PreferredAllocation
from genericdp.discovery.model import Unit, unit_id_of


@dataclass(frozen=True)
class _Place:
    numa: int  # -1 when unknown
    parent: str
    unit: str


def _place(device_id: str, units: Mapping[str, Unit]) -> _Place:
    uid = unit_id_of(device_id)
    unit = units.get(uid)
    numa = unit.numa_node if unit is not None and unit.numa_node is not None else -1
    parent = unit.parent if unit is not None and unit.parent else f"unit:{uid}"
    return _Place(numa, parent, uid)


def preferred_allocation(
    policy: PreferredAllocation,
    *,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    units: Mapping[str, Unit],
) -> tuple[str, ...]:
    """The IDs to allocate: ``must_include`` first, then up to ``size`` in total.

    With policy ``none`` the kubelet never asks; answer with the plain order.
    """
    chosen = list(dict.fromkeys(must_include))
    picked = set(chosen)
    candidates = [d for d in dict.fromkeys(available) if d not in picked]
    places = {d: _place(d, units) for d in [*chosen, *candidates]}
    order = {d: i for i, d in enumerate(candidates)}
    avail_numa = Counter(places[d].numa for d in candidates)
    avail_parent = Counter(places[d].parent for d in candidates)
    used_numa = Counter(places[d].numa for d in chosen)
    used_parent = Counter(places[d].parent for d in chosen)
    used_unit = Counter(places[d].unit for d in chosen)

    def packed_key(d: str) -> tuple[int, ...]:
        p = places[d]
        return (
            -used_numa[p.numa],
            -used_parent[p.parent],
            -used_unit[p.unit],
            -avail_numa[p.numa],
            -avail_parent[p.parent],
            order[d],
        )

    def spread_key(d: str) -> tuple[int, ...]:
        p = places[d]
        return (used_numa[p.numa], used_parent[p.parent], used_unit[p.unit], order[d])

    key = spread_key if policy is PreferredAllocation.SPREAD else packed_key
    while len(chosen) < size and candidates:
        plain = policy is PreferredAllocation.NONE
        best = candidates[0] if plain else min(candidates, key=key)
        candidates.remove(best)
        chosen.append(best)
        p = places[best]
        used_numa[p.numa] += 1
        used_parent[p.parent] += 1
        used_unit[p.unit] += 1
    return tuple(chosen)
