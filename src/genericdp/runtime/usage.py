"""What containers hold: the ``Usage`` a backend keeps, as the runtime reads it.

The device list follows what is held (a unit that vanishes while held stays
listed Unhealthy; unbounded sharing lists the held IDs), a resource that
leaves the config cleans the units in use, and an Allocate of IDs still held
means their holder is done. Only a backend can know who holds what (the
device plugin polls the kubelet's PodResources, ``deviceplugin/usage.py``;
DRA reads its checkpoint's prepared claims, ``dra/usage.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Protocol

from genericdp.runtime.cleanup import Release


class Usage(Protocol):
    """Who holds which device IDs, by resource; shared by every resource of the daemon."""

    # Set once what is held is known (or cannot be): a first registration waits
    # for it, up to the backend's ``settled_timeout``.
    settled: asyncio.Event

    def in_use(self, resource: str) -> frozenset[str]:
        """IDs held, or handed out and not yet seen released (what cleanup follows)."""
        ...

    def units_in_use(self, resource: str) -> frozenset[str]:
        """The units with an ID ``in_use``."""
        ...

    def held(self, resource: str) -> frozenset[str]:
        """IDs held as far as the device list is concerned."""
        ...

    def watch(self, resource: str, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever an Allocate changes what ``resource`` holds (None stops)."""
        ...

    def claim(self, resource: str, device_ids: Iterable[str]) -> tuple[Release, ...]:
        """These IDs are being handed out again: the units this releases (clean them first)."""
        ...

    def handed_out(self, resource: str, device_ids: Iterable[str]) -> None:
        """An Allocate gave these IDs to a container."""
        ...
