"""What the embedded DRA kubelet knows: plugins, device health, prepared claims, events.

Plain data, no gRPC: the kubelet model mutates it, tests read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import grpc


class DraKubeletError(Exception):
    """What the kubelet would report in the pod's events."""


class DraEventKind(StrEnum):
    """What happened, in the embedded DRA kubelet's event log."""

    STARTED = "started"
    STOPPED = "stopped"
    REGISTERED = "registered"
    REFUSED = "refused"  # NotifyRegistrationStatus(false, the kubelet's message)
    DEREGISTERED = "deregistered"  # its registration socket went or was replaced
    HEALTH_STREAM = "health-stream"  # NodeWatchResources opened
    HEALTH_ENDED = "health-ended"  # ... and ended: the driver's health entries are dropped
    PREPARE = "prepare"  # one NodePrepareResources call
    UNPREPARE = "unprepare"  # one NodeUnprepareResources call


@dataclass(frozen=True)
class DraEvent:
    """One entry of the event log; ``at`` comes from the kubelet's clock."""

    kind: DraEventKind
    driver: str
    detail: str
    at: float

    def __str__(self) -> str:
        return f"{self.at:.3f} {self.kind.value} {self.driver or '-'}: {self.detail}"


@dataclass(frozen=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None  # v1 only: the share of a device several claims hold


@dataclass
class Plugin:
    """One registered endpoint of a driver (a rolling upgrade has two for a while)."""

    driver: str
    endpoint: str
    service: str  # the chosen one
    socket: str  # its registration socket
    channel: grpc.aio.Channel
    health_service: str | None = None  # the chosen health version; None: no health stream

    @property
    def health_task(self) -> str:
        """The name of its health stream's task (endpoints are unique per driver)."""
        return f"dra-kubelet/health/{self.driver}@{self.endpoint}"


@dataclass(frozen=True)
class DeviceHealth:
    health: str
    message: str
    seen: float  # the kubelet's clock


def describe(plugins: Iterable[Plugin], prepared: Iterable[str], events: Iterable[DraEvent]) -> str:
    """Human summary of the state, for timeouts and logs."""
    registered = [
        f"{p.driver} at {p.endpoint} ({p.service}, health: {p.health_service or 'none'})"
        for p in plugins
    ]
    lines = [f"plugins: {', '.join(registered) or 'none'}"]
    lines.append(f"prepared claims: {', '.join(sorted(prepared)) or 'none'}")
    recent = list(events)[-10:]
    lines.append("last events:" if recent else "last events: none")
    lines.extend(f"  {event}" for event in recent)
    return "\n".join(lines)
