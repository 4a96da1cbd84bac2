"""The kubelet-facing edge of one resource, made by its backend: the device
plugin's (``deviceplugin/plugin.py``) or the DRA driver's (``dra/edge.py``).

The runner owns what every backend shares (discovery, health, hooks, the CDI
spec, the device state); an edge reads the units and their health from the
``DeviceState`` and calls nothing back on the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class PluginStatus:
    """What an observer (``simulate``, tests, metrics) can see of one resource's edge."""

    resource: str
    registered: bool
    registrations: int  # successful registrations since start
    devices: int
    healthy: int
    last_error: str | None = None
    units: int = 0  # discovered units (``devices`` counts their replica IDs)
    fault: str | None = None  # why every unit is Unhealthy (a required node is missing)
    left_out: int = 0  # units found but not served: over the node's limits
    limited: str = ""  # which limit, with the numbers ("" when none is reached)
    # The device plugin's alone: its socket, and the streams the kubelet holds open now.
    socket: Path | None = None
    streams: int = 0


class Edge(Protocol):
    """What the runner needs of a resource's kubelet-facing side."""

    task: str  # the runner runs ``run`` as its guarded task ``<resource>/<task>``

    async def run(self) -> None:
        """Serve the kubelet until cancelled (restarted with backoff after a failure)."""

    def wake(self) -> None:
        """The first scan is done: tell the kubelet."""

    def status(self) -> PluginStatus: ...

    async def close(self) -> tuple[str, ...]:
        """Stop serving the kubelet; called after ``run`` is cancelled. The names of
        its own tasks that did not stop."""


@runtime_checkable
class Kickable(Protocol):
    """An edge the runner also wakes later (the device plugin's)."""

    def kick(self, reason: str, *, renew: bool = False) -> None:
        """Tell the kubelet again: it restarted, or (``renew``) the definition changed
        in a way it must hear anew (``Registers.renews``)."""
