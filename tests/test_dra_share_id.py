"""The allocation's shareID of a shared device (KEP-5075) in the prepare answer: passed
over DRA v1 (``Device.share_id``), kept across a restart, read from the API server."""

from __future__ import annotations

import json
from pathlib import Path

from genericdp.dra.driver import DraDriver
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apiclaims import ApiClaimSource
from genericdp.kubeletplugin.claims import (
    POD_CLAIM_ANNOTATION,
    AllocatedDevice,
    Allocation,
    ClaimRef,
)
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER, device_name
from tests.apiserver import ApiServer
from tests.dra_drivers import new_driver, started
from tests.dra_fakes import DRIVER, NODE, SERIAL, MemoryClaims, claim
from tests.dra_fakes import unit as make_unit
from tests.dra_kubelet import EmbeddedDraKubelet

SHARE_1 = "aaaaaaaa-0000-0000-0000-000000000001"
SHARE_2 = "aaaaaaaa-0000-0000-0000-000000000002"


def shared_claims() -> MemoryClaims:
    """Two claims, each with a share of one device."""
    a0 = device_name(SERIAL, "A0")
    claims = MemoryClaims()
    claims.allocate(claim(1), [AllocatedDevice("req", NODE, a0, SHARE_1)])
    claims.allocate(claim(2), [AllocatedDevice("req", NODE, a0, SHARE_2)])
    return claims


def one_unit_driver(base: Path, claims: MemoryClaims) -> DraDriver:
    return new_driver(base, claims, units=[make_unit(0)])


async def test_each_claims_share_id_reaches_a_v1_kubelet_and_survives_a_restart(
    base: Path,
) -> None:
    """Each claim of a shared device gets its own share's ID back; a restarted driver
    answers the kubelet's second prepare from its checkpoint with the same IDs."""
    claims = shared_claims()
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        async with started(one_unit_driver(base, claims)):
            await kubelet.wait_until(lambda k: k.registered(DRIVER))
            await kubelet.prepare_pod(DRIVER, [claim(1), claim(2)])
        shares = {
            c.uid: [p.share_id for p in kubelet.prepared(c.uid) or ()] for c in (claim(1), claim(2))
        }
        assert shares == {claim(1).uid: [SHARE_1], claim(2).uid: [SHARE_2]}
    async with EmbeddedDraKubelet(base / "registry") as kubelet:  # a new kubelet asks again
        # With no claims: they are not read again, the checkpoint answers.
        async with started(one_unit_driver(base, MemoryClaims())):
            await kubelet.wait_until(lambda k: k.registered(DRIVER))
            await kubelet.prepare_pod(DRIVER, [claim(1)])
        assert [p.share_id for p in kubelet.prepared(claim(1).uid) or ()] == [SHARE_1]


async def test_a_v1beta1_kubelet_gets_no_share_id(base: Path) -> None:
    """v1beta1 has no share_id: the answer is what it was before sharing."""
    async with EmbeddedDraKubelet(base / "registry", services=["v1beta1.DRAPlugin"]) as kubelet:
        async with started(one_unit_driver(base, shared_claims())):
            await kubelet.wait_until(lambda k: k.registered(DRIVER))
            await kubelet.prepare_pod(DRIVER, [claim(1)])
        assert [p.share_id for p in kubelet.prepared(claim(1).uid) or ()] == [None]


async def test_the_api_server_claims_share_id_and_pod_claim_name_are_read(
    apiserver: ApiServer,
) -> None:
    """From a real API server: a result's shareID, and the claim's pod-claim-name
    annotation (the resource claim controller's, on a claim made from a template)."""
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "pod-serial-abc12",
            "namespace": "default",
            "annotations": {POD_CLAIM_ANNOTATION: "serial"},
        },
        "spec": {
            "devices": {
                "requests": [{"name": "req", "exactly": {"deviceClassName": "serial.example.com"}}]
            }
        },
    }
    created = json.loads(
        apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(obj))
    )
    result = {
        "request": "req",
        "driver": DEFAULT_DRIVER,
        "pool": NODE,
        "device": "serial-a0",
        "shareID": SHARE_1,
    }
    status = {"status": {"allocation": {"devices": {"results": [result]}}}}
    apiserver.kubectl(
        "patch", "resourceclaim", "pod-serial-abc12", "-n", "default", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    client = kubeapi.connect(apiserver.kubeconfig)
    try:
        ref = ClaimRef("default", "pod-serial-abc12", created["metadata"]["uid"])
        found = await ApiClaimSource(client, node=NODE).allocation(ref)
    finally:
        await client.close()
    assert found == Allocation((AllocatedDevice("req", NODE, "serial-a0", SHARE_1),), "serial")
