"""What prepare needs to know about a ResourceClaim, and where it comes from (DRA contract).

``ClaimSource`` is the seam between the kubelet side (prepare) and the API
server: ``dra.apiclaims.ApiClaimSource`` reads claims from the API server,
tests use an in-memory source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from genericdp.errors import GenericdpError

# Set by the resource claim controller on a claim made from a template: the pod's name
# for the claim (pod.spec.resourceClaims[].name).
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


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
    share_id: str = ""  # the result's shareID: one share of a device several claims hold


@dataclass(frozen=True)
class Allocation:
    """Our driver's results in a claim's allocation, and what names the claim in its pod."""

    devices: tuple[AllocatedDevice, ...]
    # The claim's resource.kubernetes.io/pod-claim-name annotation: the pod's name for a
    # claim made from a template ("" for a claim the pod names itself).
    pod_claim: str = ""


class ClaimError(GenericdpError):
    """What is wrong with which claim (gone, another UID, not allocated, unreadable)."""


class ClaimSource(Protocol):
    async def allocation(self, claim: ClaimRef) -> Allocation:
        """Our driver's results in the claim's allocation (status.allocation.devices.results
        with driver == ours). Raises ClaimError when the claim is gone, its UID differs,
        or it is not allocated."""
        ...
