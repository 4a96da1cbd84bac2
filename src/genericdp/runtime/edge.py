"""The kubelet-facing edge of one resource, and how a backend plugs one in.

A ``ResourceRunner`` owns what every backend shares: discovery, health,
hooks, cleanup, the CDI spec, the device state and the ``Allocator``. What
the kubelet sees of it is its *edge*: the device-plugin edge
(``runtime/plugin.py``: a socket, Register, ListAndWatch, Allocate) by
default. The supervisor takes an ``EdgeFactory``, so another backend (DRA)
gives each runner its own edge and reuses the rest unchanged.

An edge reads the units and their health from the ``DeviceState`` (its
``version`` changes with them, ``wait_changed`` wakes on a change) and answers
allocations through the ``Allocator``; it calls nothing back on the runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from genericdp.config.model import ResourceDefinition
from genericdp.runtime.allocator import Allocator
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.kubeletwatch import DirChange
from genericdp.runtime.state import DeviceState


@dataclass(frozen=True)
class PluginStatus:
    """What an observer (``simulate``, tests, metrics) can see of one resource's edge."""

    resource: str
    socket: Path | None
    registered: bool
    registrations: int  # successful registrations since start
    streams: int  # streams the kubelet holds open now
    devices: int
    healthy: int
    last_error: str | None = None
    units: int = 0  # discovered units (``devices`` counts their replica IDs)
    fault: str | None = None  # why every unit is Unhealthy (a required node is missing)


class Edge(Protocol):
    """What the runner needs of a resource's kubelet-facing side."""

    # The runner runs ``run`` as its guarded task ``<resource>/<task>``.
    task: str

    async def run(self) -> None:
        """Serve the kubelet until cancelled (restarted with backoff after a failure)."""
        ...

    def wake(self, reason: str, *, renew: bool = False) -> None:
        """Tell the kubelet (again): the first scan is done, the kubelet restarted, or
        (``renew``) the definition changed in a way the kubelet must hear anew."""
        ...

    def plugin_dir_changed(self, change: DirChange) -> None:
        """Files came or went in the kubelet's plugin directory (the kubelet watch)."""
        ...

    def status(self) -> PluginStatus: ...

    async def close(self) -> None:
        """Stop serving the kubelet; called after ``run`` is cancelled."""
        ...


EdgeFactory = Callable[
    [Callable[[], ResourceDefinition], DeviceState, ResourceContext, Allocator], Edge
]
"""Makes a runner's edge from its current definition, state, context and allocator."""
