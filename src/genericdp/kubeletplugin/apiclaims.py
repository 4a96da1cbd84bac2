"""``ClaimSource`` over the API server: a claim's allocated devices of our driver on this node."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

from genericdp.kube.client import ApiRequestError, AsyncClient, get_claim
from genericdp.kubeletplugin.claims import (
    POD_CLAIM_ANNOTATION,
    AllocatedDevice,
    Allocation,
    ClaimError,
    ClaimRef,
    valid_uid,
)
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER

# The whole read: a server trickling its answer never trips the client's per-read timeout,
# and the kubelet's own call gives up long before this.
READ_DEADLINE = 10.0


class ApiClaimSource:
    """Reads ResourceClaims (``get``, the only verb the driver's RBAC grants on them).

    Every result of ``driver`` is returned, whatever its pool: one in another node's pool is
    the preparer's to refuse, or the claim would be prepared with fewer devices than allocated.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver: str = DEFAULT_DRIVER,
        deadline: float = READ_DEADLINE,
    ) -> None:
        self._client = client
        self.node = node
        self.driver = driver
        self._deadline = deadline

    async def allocation(self, claim: ClaimRef) -> Allocation:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        try:
            async with asyncio.timeout(self._deadline):
                obj: dict[str, Any] = await get_claim(self._client, claim.namespace, claim.name)
        except TimeoutError as err:
            raise ClaimError(
                f"{where}: the API server did not answer within {self._deadline:g}s"
            ) from err
        except ApiRequestError as err:
            if err.code == HTTPStatus.NOT_FOUND:
                raise ClaimError(f"{where}: not found (deleted?)") from err
            raise ClaimError(str(err)) from err
        except Exception as err:  # connection, TLS, timeout: the kubelet retries
            raise ClaimError(f"{where}: cannot read it: {type(err).__name__}: {err}") from err
        uid = (obj.get("metadata") or {}).get("uid")
        if uid != claim.uid:
            raise ClaimError(f"{where}: its UID is {uid}, not {claim.uid} (deleted and recreated?)")
        allocation = (obj.get("status") or {}).get("allocation")
        if not allocation:
            raise ClaimError(f"{where}: not allocated")
        results = (allocation.get("devices") or {}).get("results") or []
        if not isinstance(results, list):
            raise ClaimError(f"{where}: its allocation's results are not a list")
        devices = tuple(
            _device(where, n, r)
            for n, r in enumerate(results)
            if isinstance(r, dict) and r.get("driver") == self.driver
        )
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        pod_claim = annotations.get(POD_CLAIM_ANNOTATION) if isinstance(annotations, dict) else ""
        return Allocation(devices, pod_claim if isinstance(pod_claim, str) else "")


def _device(where: str, index: int, result: dict[str, Any]) -> AllocatedDevice:
    fields = [result.get(key) for key in ("request", "pool", "device")]
    if not all(isinstance(f, str) and f for f in fields):
        raise ClaimError(f"{where}: allocation result {index} lacks a request, pool or device")
    request, pool, device = (str(f) for f in fields)
    share = result.get("shareID")
    if share is not None and not (isinstance(share, str) and valid_uid(share)):
        raise ClaimError(f"{where}: allocation result {index} has a shareID that is not a UID")
    return AllocatedDevice(request, pool, device, share or "")
