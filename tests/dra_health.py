"""The kubelet's DRA health streams (tests/dra_kubelet.py): the API of each version, and
what a report holds."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from genericdp.errors import ellipsized
from genericdp.kubeletplugin.api import drahealth_v1_pb2, drahealth_v1alpha1_pb2

HEALTH_API: dict[str, ModuleType] = {
    "v1.DRAResourceHealth": drahealth_v1_pb2,
    "v1alpha1.DRAResourceHealth": drahealth_v1alpha1_pb2,
}


@dataclass(frozen=True)
class DeviceHealth:
    health: str
    message: str
    seen: float  # the kubelet's clock


_STATUS = {1: "Healthy", 2: "Unhealthy"}  # HealthStatus, the same in v1 and v1alpha1


def health_entries(response: Any, now: float) -> dict[tuple[str, str], DeviceHealth]:
    """A ``NodeWatchResources`` report as the kubelet caches it, stamped ``now``; a
    message is cut to 1024 characters as the kubelet cuts it."""
    return {
        (d.device.pool_name, d.device.device_name): DeviceHealth(
            _STATUS.get(d.health, "Unknown"), ellipsized(d.message, 1024, "..."), now
        )
        for d in response.devices
    }
