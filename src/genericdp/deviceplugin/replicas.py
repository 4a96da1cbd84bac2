"""The kubelet's devices of one resource: each unit's replicas, as ListAndWatch sends them.
``Replicas`` is the naming ``DeviceState`` asks; the list is built here, lazily."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from genericdp.config.model import ResourceDefinition
from genericdp.deviceplugin.sharing import advertised_indices, canonical_index, replica_index
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import DeviceInfo, index_text, replica_id, unit_id_of
from genericdp.runtime.state import DeviceState, ListedUnit


@dataclass(frozen=True)
class Replicas:
    """``count`` IDs per unit, or (``free`` given) unbounded with that many free IDs."""

    count: int = 1
    free: int | None = None  # None: bounded

    def unit_of(self, device_id: str) -> str:
        return unit_id_of(device_id)

    def valid(self, device_id: str) -> bool:
        if self.free is not None:
            # Any index: the kubelet may pick a free ID we have just stopped listing.
            return replica_index(device_id) is not None
        if self.count <= 1:
            return index_text(device_id) is None
        index = canonical_index(device_id)
        return index is not None and index < self.count

    @property
    def follows_use(self) -> bool:
        return self.free is not None

    def shape(self, listed: Iterable[ListedUnit]) -> object:
        if self.free is None:
            return None  # ``count`` says it all
        return tuple((unit.id, self.indices(held, present)) for unit, held, present in listed)

    def indices(self, held: Iterable[str], present: bool) -> tuple[int, ...]:
        """Replica indices an unbounded unit lists: held ones, plus free ones while present."""
        taken = (replica_index(d) for d in held)
        free = self.free if present and self.free is not None else 0
        return advertised_indices((i for i in taken if i is not None), free)


def replicas_of(definition: ResourceDefinition) -> Replicas:
    """How ``definition``'s units are named for the kubelet."""
    return Replicas(definition.count, definition.free_ids if definition.unbounded else None)


def replicas(state: DeviceState) -> Replicas:
    """The naming of a device plugin's state (made by ``DevicePluginBackend``)."""
    ids = state.ids
    if not isinstance(ids, Replicas):
        raise TypeError(f"not a device plugin's state: its devices are named by {ids!r}")
    return ids


def device_list(state: DeviceState) -> Sequence[DeviceInfo]:
    """The current list as a lazy sequence: ListAndWatch sends what fits in
    4 MiB, and must not build a million objects to send 175,000."""
    naming, out = replicas(state), state.out
    if naming.free is None:
        return DeviceList(state.listed_units(), naming.count, out)
    # Unbounded: each unit lists what is held plus a few, so the list is short.
    return tuple(
        DeviceInfo(id=replica_id(unit.id, i), healthy=unit.id not in out, numa_node=unit.numa_node)
        for unit in state.listed_units()
        for i in naming.indices(state.held_ids(unit.id), state.present(unit.id))
    )


def counts(state: DeviceState) -> tuple[int, int]:
    """(devices, healthy devices) without building the list."""
    naming, out = replicas(state), state.out
    listed = state.listed_units()
    if naming.free is not None:
        sizes = {
            u.id: len(naming.indices(state.held_ids(u.id), state.present(u.id))) for u in listed
        }
        return sum(sizes.values()), sum(n for uid, n in sizes.items() if uid not in out)
    healthy = sum(1 for u in listed if u.id not in out)
    return len(listed) * naming.count, healthy * naming.count


class DeviceList(Sequence[DeviceInfo]):
    """The device list of one state version, made one device at a time, in unit ID
    order; a unit is Healthy unless it is in ``out``."""

    def __init__(self, units: tuple[Unit, ...], count: int, out: frozenset[str]) -> None:
        self._units = units
        self._count = max(count, 1)
        self._out = out

    def __len__(self) -> int:
        return len(self._units) * self._count

    @overload
    def __getitem__(self, index: int) -> DeviceInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[DeviceInfo]: ...

    def __getitem__(self, index: int | slice) -> DeviceInfo | Sequence[DeviceInfo]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        unit = self._units[index // self._count]
        return self._device(unit, index % self._count)

    def __iter__(self) -> Iterator[DeviceInfo]:
        for unit in self._units:
            for replica in range(self._count):
                yield self._device(unit, replica)

    def _device(self, unit: Unit, replica: int) -> DeviceInfo:
        device_id = unit.id if self._count == 1 else replica_id(unit.id, replica)
        return DeviceInfo(id=device_id, healthy=unit.id not in self._out, numa_node=unit.numa_node)
