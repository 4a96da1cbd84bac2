"""What the embedded DRA kubelet knows: registered plugins and prepared claims.

Plain data, no gRPC calls: the kubelet model keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc


class DraKubeletError(Exception):
    """What the kubelet would report in the pod's events."""


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
