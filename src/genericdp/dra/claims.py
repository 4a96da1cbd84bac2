"""What prepare needs to know about a ResourceClaim, and where it comes from (DRA contract).

``ClaimSource`` is the seam between the kubelet side (prepare) and the API
server: ``dra.apiclaims.ApiClaimSource`` reads claims from the API server,
tests use an in-memory source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from genericdp.errors import GenericdpError


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    pool: str
    device: str


class ClaimError(GenericdpError):
    """What is wrong with which claim (gone, another UID, not allocated, unreadable)."""


class ClaimSource(Protocol):
    async def allocated_devices(self, claim: ClaimRef) -> tuple[AllocatedDevice, ...]:
        """Our driver's results in the claim's allocation (status.allocation.devices.results
        with driver == ours). Raises ClaimError when the claim is gone, its UID differs,
        or it is not allocated."""
        ...
