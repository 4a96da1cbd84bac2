"""The API server as far as ``simulate --backend dra`` needs one, in memory.

In ``EmbeddedSlices`` every write gets the next ``resourceVersion``, and a watch reports
nothing (the publisher is the only writer) until the server would end it. ``EmbeddedClaims``
answers claim reads with the allocations ``allocate`` made.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

from genericdp.kubeletplugin.claims import AllocatedDevice, Allocation, ClaimError, ClaimRef
from genericdp.kubeletplugin.slicestore import Listing


class EmbeddedSlices:
    """The ResourceSlices of one node and driver, written by one publisher."""

    def __init__(self, *, node: str, driver: str) -> None:
        self.node = node
        self.driver = driver
        self.objects: dict[str, dict[str, Any]] = {}  # name -> slice, as written
        self._versions = itertools.count(1)
        self._names = itertools.count()
        self._version = "0"

    async def list(self) -> Listing:
        return Listing(copy.deepcopy(self.objects), self._version)

    async def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:  # noqa: ARG002 -- the SliceStore protocol's signature
        await asyncio.sleep(seconds)  # nobody else writes: nothing to report until it ends
        nothing: tuple[tuple[str, dict[str, Any]], ...] = ()
        for event in nothing:
            yield event

    async def owner(self) -> dict[str, str] | None:
        return None  # no Node object here: the slices carry no owner

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        if "name" not in obj["metadata"]:  # generateName, as the API server completes it
            obj["metadata"]["name"] = f"{obj['metadata']['generateName']}{next(self._names):05d}"
        return self._store(obj)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store(obj)

    async def delete(self, name: str) -> None:
        self.objects.pop(name, None)
        self._version = str(next(self._versions))

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(obj)
        self._version = str(next(self._versions))
        stored["metadata"]["resourceVersion"] = self._version
        self.objects[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)


class EmbeddedClaims:
    """Allocated claims by UID; a claim never allocated is not found."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[ClaimRef, Allocation]] = {}

    def allocate(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> None:
        self._claims[claim.uid] = (claim, Allocation(tuple(devices)))

    async def allocation(self, claim: ClaimRef) -> Allocation:
        held = self._claims.get(claim.uid)
        if held is None or held[0] != claim:
            raise ClaimError(f"claim {claim.named} (UID {claim.uid}) not found")
        return held[1]
