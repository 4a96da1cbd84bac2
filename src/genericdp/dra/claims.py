"""ResourceClaims as the kubelet side sees them: a reference, and our devices in it.

The kubelet names a claim (namespace, name, UID) in NodePrepareResources; what
was allocated comes from the API server (``apiclaims.py``), behind
``ClaimSource`` so prepare can be tested, and simulated, without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim named by the kubelet."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class AllocatedDevice:
    """One result of a claim's allocation for our driver: which request got which device."""

    request: str
    pool: str
    device: str


class ClaimError(Exception):
    """A claim cannot be prepared; the message says what is wrong with which claim."""


class ClaimSource(Protocol):
    async def allocated_devices(self, claim: ClaimRef) -> tuple[AllocatedDevice, ...]:
        """Our driver's results in the claim's allocation (status.allocation.devices.results
        with driver == ours). Raises ClaimError when the claim is gone, its UID differs,
        or it is not allocated."""
        ...


class MemoryClaims:
    """A ``ClaimSource`` over claims held in memory (tests, ``simulate``).

    ``add`` allocates a claim; a claim never added, or removed, is gone, as
    it is for the API server.
    """

    def __init__(self, claims: Mapping[ClaimRef, Iterable[AllocatedDevice]] | None = None) -> None:
        self._claims: dict[str, tuple[ClaimRef, tuple[AllocatedDevice, ...]]] = {}
        self.calls = 0
        for ref, devices in (claims or {}).items():
            self.add(ref, devices)

    def add(self, claim: ClaimRef, devices: Iterable[AllocatedDevice]) -> None:
        self._claims[claim.uid] = (claim, tuple(devices))

    def remove(self, claim: ClaimRef) -> None:
        self._claims.pop(claim.uid, None)

    async def allocated_devices(self, claim: ClaimRef) -> tuple[AllocatedDevice, ...]:
        self.calls += 1
        held = self._claims.get(claim.uid)
        if held is None:
            raise ClaimError(f"claim {claim} (UID {claim.uid}) not found")
        ref, devices = held
        if (ref.namespace, ref.name) != (claim.namespace, claim.name):
            raise ClaimError(f"claim {claim} has UID {claim.uid}, which belongs to claim {ref}")
        return devices
