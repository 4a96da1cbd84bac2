"""A ``ClaimSource`` over claims held in memory, for tests and the embedded DRA kubelet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from genericdp.dra.claims import AllocatedDevice, ClaimError, ClaimRef


class MemoryClaims:
    """Claims allocated by ``add``; a claim never added, or removed, is gone, as it is
    for the API server."""

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
            raise ClaimError(f"claim {claim.namespace}/{claim.name} (UID {claim.uid}) not found")
        ref, devices = held
        if (ref.namespace, ref.name) != (claim.namespace, claim.name):
            raise ClaimError(
                f"claim {claim.namespace}/{claim.name} has UID {claim.uid},"
                f" which belongs to claim {ref.namespace}/{ref.name}"
            )
        return devices
