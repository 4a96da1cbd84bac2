"""ApiClaimSource against a real kube-apiserver: allocation results, UID checks, errors."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator

import pytest

from genericdp.dra import kubeapi
from genericdp.dra.apiclaims import ApiClaimSource
from genericdp.dra.claims import AllocatedDevice, ClaimError, ClaimRef
from genericdp.dra.naming import DEFAULT_DRIVER
from tests.apiserver import ApiServer

NAMESPACE = "default"
_names = itertools.count()


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    api = kubeapi.connect(apiserver.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


def make_claim(apiserver: ApiServer, results: list[dict[str, str]] | None) -> ClaimRef:
    """A claim for two requests; allocated with ``results`` through the status subresource."""
    name = f"claim-{next(_names)}"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "serial", "exactly": {"deviceClassName": "serial.example.com"}},
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
                ]
            }
        },
    }
    created = json.loads(
        apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(claim))
    )
    if results is not None:
        status = {"status": {"allocation": {"devices": {"results": results}}}}
        apiserver.kubectl(
            "patch", "resourceclaim", name, "-n", NAMESPACE, "--subresource=status",
            "--type=merge", "-p", json.dumps(status),
        )  # fmt: skip
    return ClaimRef(NAMESPACE, name, created["metadata"]["uid"])


async def test_only_our_drivers_results_on_this_node_are_returned(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    results = [
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-a", "device": "serial-1"},
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-a", "device": "serial-2"},
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-b", "device": "serial-9"},
    ]
    ref = make_claim(apiserver, results)
    source = ApiClaimSource(client, node="node-a")
    assert await source.allocated_devices(ref) == (
        AllocatedDevice("serial", "node-a", "serial-1"),
        AllocatedDevice("serial", "node-a", "serial-2"),
    )


async def test_an_unallocated_claim_is_an_error(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    ref = make_claim(apiserver, None)
    with pytest.raises(ClaimError, match=rf"ResourceClaim default/{ref.name}: not allocated"):
        await ApiClaimSource(client, node="node-a").allocated_devices(ref)


async def test_another_uid_is_an_error(apiserver: ApiServer, client: kubeapi.AsyncClient) -> None:
    ref = make_claim(apiserver, [])
    stale = ClaimRef(ref.namespace, ref.name, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(ClaimError, match=rf"its UID is {ref.uid}, not {stale.uid}"):
        await ApiClaimSource(client, node="node-a").allocated_devices(stale)


async def test_a_deleted_claim_is_an_error(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    ref = make_claim(apiserver, [])
    apiserver.kubectl("delete", "resourceclaim", ref.name, "-n", NAMESPACE)
    with pytest.raises(ClaimError, match="not found"):
        await ApiClaimSource(client, node="node-a").allocated_devices(ref)
