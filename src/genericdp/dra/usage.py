"""What prepared claims hold, as the runtime's ``Usage``: the DRA side of "held".

Under the device plugin a unit is held while PodResources lists it; under
DRA it is held while a claim naming it is in the driver's checkpoint
(``preparing`` or ``prepared``), from NodePrepareResources until
NodeUnprepareResources. The runtime's device state reads ``held`` to keep a
unit whose nodes vanish listed Unhealthy until its last claim is unprepared
(``runtime/state.py``), exactly as under the device plugin.

It answers no ``HandOuts``: the ``cleanup`` hook of a prepared unit runs at
unprepare (``prepare.py``), when its last claim goes, never through the
runtime, so a unit unplugged under a claim or a resource removed from the
config does not run it a second time.
"""

from __future__ import annotations

import asyncio

from genericdp.dra.checkpoint import Checkpoint


class DraUsage:
    """The units each resource's prepared claims hold, read from the checkpoint."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint
        # Set once the checkpoint is loaded (the driver's start): before it,
        # a unit gone while the daemon was down would look free.
        self.settled = asyncio.Event()

    def held(self, resource: str) -> frozenset[str]:
        return frozenset(
            device.unit
            for claim in self._checkpoint
            for device in claim.devices
            if device.resource == resource
        )
