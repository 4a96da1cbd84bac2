"""GetPreferredAllocation as a pure policy over device IDs and their units.

Every device ID belongs to a unit (``<unit>::<i>`` replicas share one), every
unit to a NUMA node and a parent (both may be unknown). The policy picks
``size`` IDs from ``available``, always including ``must_include``, one at a
time, greedily, with a total order so the answer is deterministic:

- **packed** prefers the candidate sharing the most with what is already
  chosen: same NUMA node, then same parent, then same unit. Ties go to the
  NUMA node and parent with the most available IDs.
- **spread** prefers the candidate sharing the least with what is chosen,
  i.e. round robin.

Remaining ties fall back to the IDs' order. Unknown NUMA nodes count as one
node; an unknown parent counts as the unit itself.

The kubelet may send tens of thousands of IDs and asks on the event loop, so
the greedy runs in O((n + size) log n): IDs sit in a tree NUMA node -> parent
-> unit -> IDs, each level a heap keyed by the best key below it; a pick
re-pushes only the entries of the one NUMA node, parent and unit it changes.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from genericdp.config.model import PreferredAllocation
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import unit_id_of


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
    wanted = size - len(chosen)
    if wanted <= 0 or not candidates:
        return tuple(chosen)
    if policy is PreferredAllocation.NONE:
        return (*chosen, *candidates[:wanted])
    picker = _Picker(packed=policy is not PreferredAllocation.SPREAD, units=units)
    picker.add(chosen, candidates)
    return (*chosen, *picker.take(wanted))


Key = tuple[int, ...]
_Node = TypeVar("_Node", bound=Hashable)


class _Heap(Generic[_Node]):
    """A heap of nodes by key where a node's newer entry makes its older ones stale."""

    def __init__(self) -> None:
        self._entries: list[tuple[Key, int, _Node]] = []
        self._version: dict[_Node, int] = {}

    def set(self, node: _Node, key: Key | None) -> None:
        version = self._version.get(node, 0) + 1
        self._version[node] = version
        if key is not None:
            heapq.heappush(self._entries, (key, version, node))

    def fill(self, items: Sequence[tuple[Key, _Node]]) -> None:
        """Start with ``items`` (a new heap): one heapify instead of a push each."""
        self._entries = [(key, 1, node) for key, node in items]
        self._version = {node: 1 for _, node in items}
        heapq.heapify(self._entries)

    def top(self) -> tuple[Key, _Node] | None:
        entries = self._entries
        while entries and entries[0][1] != self._version[entries[0][2]]:
            heapq.heappop(entries)
        return (entries[0][0], entries[0][2]) if entries else None

    def top_node(self) -> _Node:
        """The node of the least key; the heap of a node above that has a key is not empty."""
        top = self.top()
        if top is None:
            raise RuntimeError("an empty heap under a node with a key")
        return top[1]


class _Picker:
    """The greedy of the module docstring, one pick at a time."""

    def __init__(self, *, packed: bool, units: Mapping[str, Unit]) -> None:
        self._packed = packed
        self._sign = -1 if packed else 1  # packed prefers the most used, spread the least
        self._units = units
        self._used_numa: Counter[int] = Counter()
        self._used_parent: Counter[str] = Counter()
        self._used_unit: Counter[str] = Counter()
        self._avail_numa: Counter[int] = Counter()
        self._avail_parent: Counter[str] = Counter()
        self._ids: dict[str, deque[tuple[int, str]]] = {}  # unit -> (order, ID), in order
        self._place: dict[str, _Place] = {}  # unit -> its place
        self._numas_of_parent: dict[str, set[int]] = {}
        self._unit_heaps: dict[tuple[int, str], _Heap[str]] = {}  # (numa, parent) -> its units
        # numa -> its (numa, parent) nodes
        self._parent_heaps: dict[int, _Heap[tuple[int, str]]] = {}
        self._numa_heap: _Heap[int] = _Heap()

    def add(self, chosen: Sequence[str], candidates: Sequence[str]) -> None:
        for device_id in chosen:
            self._use(_place(device_id, self._units))
        for order, device_id in enumerate(candidates):
            place = self._place.get(unit_id_of(device_id)) or _place(device_id, self._units)
            self._place.setdefault(place.unit, place)
            self._ids.setdefault(place.unit, deque()).append((order, device_id))
            self._avail_numa[place.numa] += 1
            self._avail_parent[place.parent] += 1
            self._numas_of_parent.setdefault(place.parent, set()).add(place.numa)
        by_node: dict[tuple[int, str], list[tuple[Key, str]]] = {}
        for unit, ids in self._ids.items():
            place = self._place[unit]
            key = (self._sign * self._used_unit[unit], ids[0][0])
            by_node.setdefault((place.numa, place.parent), []).append((key, unit))
        for node, items in by_node.items():
            self._unit_heaps[node] = heap = _Heap[str]()
            heap.fill(items)
        for numa, parent in by_node:
            self._refresh_parent(numa, parent)
        for numa in list(self._parent_heaps):
            self._refresh_numa(numa)

    def take(self, wanted: int) -> list[str]:
        out: list[str] = []
        while len(out) < wanted:
            best = self._numa_heap.top()
            if best is None:
                break
            node = self._parent_heaps[best[1]].top_node()
            unit = self._unit_heaps[node].top_node()
            out.append(self._ids[unit].popleft()[1])
            place = self._place[unit]
            self._use(place)
            self._refresh_unit(unit)
            for other in self._numas_of_parent[place.parent]:  # the parent's count changed
                self._refresh_parent(other, place.parent)
                self._refresh_numa(other)
        return out

    def _use(self, place: _Place) -> None:
        self._used_numa[place.numa] += 1
        self._used_parent[place.parent] += 1
        self._used_unit[place.unit] += 1

    def _refresh_unit(self, unit: str) -> None:
        place = self._place[unit]
        ids = self._ids[unit]
        key = (self._sign * self._used_unit[unit], ids[0][0]) if ids else None
        heap = self._unit_heaps.setdefault((place.numa, place.parent), _Heap[str]())
        heap.set(unit, key)

    def _refresh_parent(self, numa: int, parent: str) -> None:
        best = self._unit_heaps[numa, parent].top()
        key: Key | None = None
        if best is not None:
            used_unit, order = best[0]
            used = self._sign * self._used_parent[parent]
            if self._packed:
                key = (used, used_unit, -self._avail_parent[parent], order)
            else:
                key = (used, used_unit, order)
        self._parent_heaps.setdefault(numa, _Heap[tuple[int, str]]()).set((numa, parent), key)

    def _refresh_numa(self, numa: int) -> None:
        best = self._parent_heaps[numa].top()
        key: Key | None = None
        if best is not None:
            used = self._sign * self._used_numa[numa]
            if self._packed:
                used_parent, used_unit, avail_parent, order = best[0]
                key = (used, used_parent, used_unit, -self._avail_numa[numa], avail_parent, order)
            else:
                key = (used, *best[0])
        self._numa_heap.set(numa, key)
