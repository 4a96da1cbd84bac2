"""What prepare needs to know about a ResourceClaim; ``ClaimSource`` is its seam to the API
server (``apiclaims.py``; the tests use an in-memory source).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from genericdp.errors import GenericdpError, clip

# Set by the resource claim controller on a claim made from a template: the pod's name
# for the claim (pod.spec.resourceClaims[].name).
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


MAX_NAME_CHARS = 253  # namespace and claim names are DNS subdomains at most
# Kubernetes UIDs are RFC 4122 UUIDs; anything else a kubelet sent is refused,
# and the UID names a file, so it must never hold "/" or start with ".".
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def valid_uid(uid: str) -> bool:
    return _UID.fullmatch(uid) is not None


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    @property
    def named(self) -> str:
        """``<namespace>/<name>``, as messages name a claim."""
        return f"{self.namespace}/{self.name}"

    def problem(self) -> str:
        """What is wrong with this reference from the kubelet ("" when nothing)."""
        if not valid_uid(self.uid):
            return f"UID {clip(self.uid, 80)} is not a UID"
        if (
            not self.namespace
            or not self.name
            or max(len(self.namespace), len(self.name)) > MAX_NAME_CHARS
        ):
            return "namespace and name must be set and short"
        return ""


def unique_claims(claims: Sequence[ClaimRef]) -> list[ClaimRef]:
    """``claims`` in order, each UID once (its first reference)."""
    seen: dict[str, ClaimRef] = {}
    for claim in claims:
        seen.setdefault(claim.uid, claim)
    return list(seen.values())


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
    pod_claim: str = ""  # its POD_CLAIM_ANNOTATION ("" for a claim the pod names itself)


class ClaimError(GenericdpError):
    """What is wrong with which claim (gone, another UID, not allocated, unreadable)."""


class ClaimSource(Protocol):
    async def allocation(self, claim: ClaimRef) -> Allocation:
        """Our driver's results in the claim's allocation (status.allocation.devices.results
        with driver == ours). Raises ClaimError when the claim is gone, its UID differs,
        or it is not allocated."""
