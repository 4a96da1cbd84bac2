"""The kubelet's devices: one per replica of a unit, as ListAndWatch reports them.

No gRPC here: the device-plugin backend and the reports work with these IDs
too. A unit shared by ``count`` containers is ``count`` kubelet devices
``<unit>::<i>``; this module is the one home of that format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)  # slots: there may be a million of them
class DeviceInfo:
    """One kubelet device (a replica of a unit), as ListAndWatch reports it."""

    id: str
    healthy: bool
    numa_node: int | None = None


_SEPARATOR = "::"


def replica_id(unit_id: str, index: int) -> str:
    """The kubelet device ID of replica ``index`` of a unit: ``<unit>::<index>``."""
    return f"{unit_id}{_SEPARATOR}{index}"


def replica_ids(unit_id: str, count: int) -> tuple[str, ...]:
    """The kubelet device IDs of a unit shared by ``count`` containers."""
    if count <= 1:
        return (unit_id,)
    return tuple(replica_id(unit_id, i) for i in range(count))


def unit_id_of(device_id: str) -> str:
    """The unit ID behind a kubelet device ID (inverse of ``replica_ids``)."""
    return device_id.split(_SEPARATOR, 1)[0]


def index_text(device_id: str) -> str | None:
    """What follows ``<unit>::`` in a kubelet device ID, as sent; None without it."""
    _, sep, index = device_id.partition(_SEPARATOR)
    return index if sep else None
