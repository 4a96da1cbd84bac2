"""What prepared claims hold, as the runtime's ``Usage``: the DRA side of "held".

A unit is held while a claim naming it is in the checkpoint (``preparing`` or ``prepared``),
so a unit whose nodes vanish stays listed Unhealthy until its last claim is unprepared
(``runtime/state.py``). It answers no ``HandOuts``: a prepared unit's ``cleanup`` runs at
unprepare (``prepare.py``), never through the runtime, so it never runs a second time.
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
