"""What containers hold: the ``Usage`` a backend keeps, as the runtime reads it.

Only a backend can know who holds what (the device plugin polls PodResources,
``deviceplugin/usage.py``; DRA reads its checkpoint, ``dra/usage.py``); it
tells the runtime of a change through its ``Fleet``. One that hands IDs out
itself (the device plugin's Allocate) also answers ``HandOuts``: what is
handed out and not yet seen released, which owes its cleanup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, runtime_checkable


class Usage(Protocol):
    """Who holds which device IDs, by resource; shared by every resource of the daemon."""

    # Set once what is held is known (or cannot be): a first registration waits
    # for it, up to the backend's ``settled_timeout``.
    settled: asyncio.Event

    def held(self, resource: str) -> frozenset[str]: ...  # as far as the device list goes


@runtime_checkable
class HandOuts(Protocol):
    """What a ``Usage`` whose backend hands IDs out itself also answers."""

    def in_use(self, resource: str) -> frozenset[str]:
        """IDs held, or handed out and not yet seen released (what cleanup follows)."""

    def units_in_use(self, resource: str) -> frozenset[str]: ...  # units with an ID in use

    def watch(self, resource: str, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever an Allocate changes what ``resource`` holds (None stops)."""


def in_use(usage: Usage, resource: str) -> frozenset[str]:
    return usage.in_use(resource) if isinstance(usage, HandOuts) else frozenset()
