"""What the embedded kubelet knows, as plain data: it mutates the state, hands out snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from genericdp.kubelet.options import HEALTHY, UNHEALTHY, PluginOptions


@dataclass(frozen=True)
class DeviceSnapshot:
    """One device as the plugin last listed it."""

    id: str
    health: str
    numa_nodes: tuple[int, ...]

    @property
    def healthy(self) -> bool:
        """The kubelet counts a device only for the exact string ``Healthy``."""
        return self.health == HEALTHY


@dataclass(frozen=True)
class ResourceSnapshot:
    """A resource as the node status would show it, plus what tests need to see."""

    name: str
    capacity: int
    allocatable: int
    devices: Mapping[str, DeviceSnapshot]
    endpoint: str | None
    options: PluginOptions | None
    connected: bool
    registrations: int
    allocated: frozenset[str]
    streams: int  # ListAndWatch streams open to this resource's endpoints, old ones too


class EventKind(StrEnum):
    STARTED = "started"
    STOPPED = "stopped"
    CRASHED = "crashed"
    DIALING = "dialing"  # a Register arrived; the kubelet dials the plugin back
    REGISTERED = "registered"
    REJECTED = "rejected"
    DEREGISTERED = "deregistered"  # a failed dial-back removed another endpoint's client
    DEVICES = "devices"
    STREAM_ENDED = "stream-ended"
    STREAM_UNNOTICED = "stream-unnoticed"  # ended with no client under its name
    EXPIRED = "expired"
    ALLOCATED = "allocated"
    ALLOCATION_FAILED = "allocation-failed"
    RELEASED = "released"


@dataclass(frozen=True)
class Event:
    """One entry of the event log; ``at`` comes from the kubelet's clock."""

    kind: EventKind
    resource: str
    detail: str
    at: float

    def __str__(self) -> str:
        return f"{self.at:.3f} {self.kind.value} {self.resource or '-'}: {self.detail}"


@dataclass
class ResourceState:
    """Mutable per-resource state."""

    name: str
    devices: dict[str, DeviceSnapshot] = field(default_factory=dict)
    endpoint: str | None = None
    options: PluginOptions | None = None
    connected: bool = False
    registrations: int = 0

    def mark_unhealthy(self) -> None:
        """As the kubelet does when the plugin's stream ends."""
        self.devices = {
            device_id: replace(device, health=UNHEALTHY)
            for device_id, device in self.devices.items()
        }

    def healthy_ids(self) -> list[str]:
        """Healthy device IDs in the plugin's order."""
        return [device.id for device in self.devices.values() if device.healthy]

    def snapshot(self, allocated: frozenset[str], streams: int) -> ResourceSnapshot:
        return ResourceSnapshot(
            name=self.name,
            capacity=len(self.devices),
            allocatable=len(self.healthy_ids()),
            devices=MappingProxyType(dict(self.devices)),
            endpoint=self.endpoint,
            options=self.options,
            connected=self.connected,
            registrations=self.registrations,
            allocated=allocated,
            streams=streams,
        )


@dataclass(frozen=True)
class ContainerAllocation:
    """The devices of one resource given to one container (the kubelet's checkpoint entry)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    numa_nodes: Mapping[str, tuple[int, ...]]  # device ID -> NUMA nodes at allocation time


def describe(resources: Mapping[str, ResourceSnapshot], events: Iterable[Event]) -> str:
    """Human summary of the state, for timeouts and logs."""
    lines = ["resources:"] if resources else ["resources: none"]
    for snap in resources.values():
        health = ", ".join(f"{d.id}={d.health}" for d in snap.devices.values()) or "no devices"
        lines.append(
            f"  {snap.name}: capacity={snap.capacity} allocatable={snap.allocatable} "
            f"connected={snap.connected} registrations={snap.registrations} "
            f"streams={snap.streams} endpoint={snap.endpoint} [{health}]"
        )
    recent = list(events)[-10:]
    lines.append("last events:" if recent else "last events: none")
    lines.extend(f"  {event}" for event in recent)
    return "\n".join(lines)
