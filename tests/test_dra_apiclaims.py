"""ApiClaimSource against a real kube-apiserver: allocation results, UID checks, errors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from genericdp.dra.checkpoint import Checkpoint
from genericdp.dra.inventory import Inventory
from genericdp.dra.prepare import Preparer
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apiclaims import ApiClaimSource
from genericdp.kubeletplugin.claims import AllocatedDevice, ClaimError, ClaimRef
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER, device_name
from tests.apiserver import ApiServer
from tests.dra_fakes import NODE, SERIAL, RecordedHooks, definition, unit

NAMESPACE = "default"
_names = itertools.count()


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


async def test_every_result_of_our_driver_is_returned_whatever_its_pool(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    """Another driver's results are left out; ours in another node's pool are not (the
    preparer refuses them)."""
    results = [
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-a", "device": "serial-1"},
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-a", "device": "serial-2"},
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
        {"request": "serial", "driver": DEFAULT_DRIVER, "pool": "node-b", "device": "serial-9"},
    ]
    ref = make_claim(apiserver, results)
    source = ApiClaimSource(client, node="node-a")
    assert (await source.allocation(ref)).devices == (
        AllocatedDevice("serial", "node-a", "serial-1"),
        AllocatedDevice("serial", "node-a", "serial-2"),
        AllocatedDevice("serial", "node-b", "serial-9"),
    )


async def test_a_claim_with_a_device_in_another_nodes_pool_is_refused_not_cut_short(
    apiserver: ApiServer, client: kubeapi.AsyncClient, base: Path
) -> None:
    """Prepared through the API server, a claim with one of its devices in another node's
    pool fails naming that pool (it was prepared with the other devices alone), as does
    one with all its devices there, or none of our driver; nothing is recorded."""
    checkpoint = Checkpoint(base / "plugin" / "checkpoint.json")
    inventory = Inventory(NODE)
    inventory.set_resource(definition(), [unit(0)])
    preparer = Preparer(
        driver=DEFAULT_DRIVER,
        inventory=inventory,
        claims=ApiClaimSource(client, node=NODE),
        checkpoint=checkpoint,
        cdi_dir=base / "cdi",
        run_hook=RecordedHooks(),
        node_name=NODE,
    )
    here = {"request": "serial", "driver": DEFAULT_DRIVER, "pool": NODE}
    here["device"] = device_name(SERIAL, unit(0).id)
    there = {**here, "pool": "node-b", "device": "serial-9"}
    gpu = {"request": "gpu", "driver": "gpu.example.com", "pool": NODE, "device": "gpu-0"}
    cases = {
        "pool node-b, not in this node's pool node-a": [here, there],
        "device serial-9 is in pool node-b": [there],
        f"holds no device of driver {DEFAULT_DRIVER}": [gpu],
    }
    for expected, results in cases.items():
        ref = make_claim(apiserver, results)
        error = (await preparer.prepare([ref]))[ref.uid].error
        assert expected in error, error
    assert list(checkpoint) == []
    assert not (base / "cdi").exists() or list((base / "cdi").iterdir()) == []


async def test_an_unallocated_claim_is_an_error(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    ref = make_claim(apiserver, None)
    with pytest.raises(ClaimError, match=rf"ResourceClaim default/{ref.name}: not allocated"):
        await ApiClaimSource(client, node="node-a").allocation(ref)


async def test_another_uid_is_an_error(apiserver: ApiServer, client: kubeapi.AsyncClient) -> None:
    ref = make_claim(apiserver, [])
    stale = ClaimRef(ref.namespace, ref.name, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(ClaimError, match=rf"its UID is {ref.uid}, not {stale.uid}"):
        await ApiClaimSource(client, node="node-a").allocation(stale)


async def test_a_deleted_claim_is_an_error(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    ref = make_claim(apiserver, [])
    apiserver.kubectl("delete", "resourceclaim", ref.name, "-n", NAMESPACE)
    with pytest.raises(ClaimError, match="not found"):
        await ApiClaimSource(client, node="node-a").allocation(ref)
