"""Who holds which device, as PodResources List shows it, and what a new answer releases (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from genericdp.kubelet.devices import unit_id_of
from genericdp.kubelet.podresources import PodDevices
from genericdp.runtime.owed import Release

Holder = tuple[str, str, str]  # namespace, pod, container
# Our Allocate gave the ID out and List has not shown its holder (yet).
HANDED_OUT: Holder = ("", "", "")


def released_units(
    previous: Mapping[str, AbstractSet[str]], current: Mapping[str, AbstractSet[str]]
) -> tuple[Release, ...]:
    """Units with a replica in use in ``previous`` and none in ``current`` (each maps a
    resource to its in-use device IDs), sorted."""
    releases: list[Release] = []
    for resource, before in previous.items():
        still = {unit_id_of(d) for d in current.get(resource, ())}
        gone: dict[str, list[str]] = {}
        for device_id in before:
            unit_id = unit_id_of(device_id)
            if unit_id not in still:
                gone.setdefault(unit_id, []).append(device_id)
        releases.extend(Release(resource, u, tuple(sorted(ids))) for u, ids in gone.items())
    return tuple(sorted(releases))


def holders_by_device(pods: Iterable[PodDevices]) -> dict[str, dict[str, set[Holder]]]:
    """resource -> device ID -> the containers List says hold it."""
    held: dict[str, dict[str, set[Holder]]] = {}
    for entry in pods:
        devices = held.setdefault(entry.resource_name, {})
        for device_id in entry.device_ids:
            devices.setdefault(device_id, set()).add((entry.namespace, entry.pod, entry.container))
    return held
