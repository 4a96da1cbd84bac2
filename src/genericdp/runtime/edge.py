"""The kubelet-facing edge of one resource: what the runner asks of every backend.

A ``ResourceRunner`` owns what every backend shares: discovery, health,
hooks, the CDI spec and the device state. What the kubelet sees of it is
its *edge*, made by its backend (``runtime/backend.py``): the device
plugin's (``deviceplugin/plugin.py``: a socket, Register, ListAndWatch,
Allocate) or the DRA driver's (``dra/edge.py``: the node's inventory and
ResourceSlices).

An edge reads the units and their health from the ``DeviceState`` (its
``version`` changes with them, ``wait_changed`` wakes on a change); it
calls nothing back on the runner.
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

    # The runner runs ``run`` as its guarded task ``<resource>/<task>``.
    task: str

    async def run(self) -> None:
        """Serve the kubelet until cancelled (restarted with backoff after a failure)."""
        ...

    def wake(self) -> None:
        """The first scan is done: tell the kubelet."""
        ...

    def status(self) -> PluginStatus: ...

    async def close(self) -> tuple[str, ...]:
        """Stop serving the kubelet; called after ``run`` is cancelled. The names of
        its own tasks that did not stop."""
        ...


@runtime_checkable
class Kickable(Protocol):
    """An edge the runner also wakes later (the device plugin's)."""

    def kick(self, reason: str, *, renew: bool = False) -> None:
        """Tell the kubelet again: it restarted, or (``renew``) the definition changed
        in a way it must hear anew (``Registers.renews``)."""
        ...
