"""The kubelet's devices, without gRPC: a unit shared by ``count`` containers is ``count``
devices ``<unit>::<i>`` (the format's one home is ``genericdp.replicaids``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genericdp.replicaids import replica_id, split_replica_id


@dataclass(frozen=True, slots=True)  # slots: there may be a million of them
class DeviceInfo:
    """One kubelet device (a replica of a unit)."""

    id: str
    healthy: bool
    numa_node: int | None = None


__all__ = ["DeviceInfo", "index_text", "replica_id", "replica_ids", "unit_id_of"]


def replica_ids(unit_id: str, count: int) -> tuple[str, ...]:
    """The kubelet device IDs of a unit shared by ``count`` containers."""
    if count <= 1:
        return (unit_id,)
    return tuple(replica_id(unit_id, i) for i in range(count))


def unit_id_of(device_id: str) -> str:
    """The unit ID behind a kubelet device ID (inverse of ``replica_ids``)."""
    return split_replica_id(device_id)[0]


def index_text(device_id: str) -> str | None:
    """What follows ``<unit>::`` in a kubelet device ID, as sent; None without it."""
    _, sep, index = split_replica_id(device_id)
    return index if sep else None
