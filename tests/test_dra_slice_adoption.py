"""ResourceSlice names the API server makes (``generateName``), found again after a
restart by their label and owner (the Node), against a real kube-apiserver: nothing can
squat them, a restart creates no duplicate, and a stranger's slice with our label but
another owner is never adopted (neither replaced nor deleted)."""

from __future__ import annotations

import copy

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apislices import as_slice
from genericdp.kubeletplugin.slices import SLICE_LABEL, slice_name
from tests.dra_apislices import api_slices, fresh_node, held, running, unit

RESOURCE = "example.com/serial"
STRANGER_UID = "00000000-0000-4000-8000-000000000001"


async def test_a_restart_adopts_its_slices_and_leaves_a_strangers_alone(
    client: kubeapi.AsyncClient,
) -> None:
    node = fresh_node("adopt")
    made = await client.create(Node(metadata=ObjectMeta(name=node)))
    assert made.metadata is not None
    uid = made.metadata.uid
    units = [unit("ttyUSB0"), unit("ttyUSB1")]
    async with running(api_slices(client, node)) as first:
        await first.publish(RESOURCE, units, set())
        assert await first.flush()
    (ours,) = (await held(client, node)).values()
    name = ours["metadata"]["name"]
    prefix = slice_name(node, "genericdp.io", RESOURCE, 0)[:20]
    assert name.startswith(prefix)
    assert name != slice_name(node, "genericdp.io", RESOURCE, 0)  # the server's, not ours
    assert [o["uid"] for o in ours["metadata"]["ownerReferences"]] == [uid]

    stranger = copy.deepcopy(ours)
    stranger["metadata"] = {
        "generateName": "stranger-",
        "labels": dict(ours["metadata"]["labels"]),
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "elsewhere", "uid": STRANGER_UID}
        ],
    }
    stranger["spec"]["devices"] = []
    stranger = dict(await client.create(as_slice(stranger)))
    assert stranger["metadata"]["labels"][SLICE_LABEL] == ours["metadata"]["labels"][SLICE_LABEL]

    store = api_slices(client, node)
    async with running(store) as second:
        await second.publish(RESOURCE, units, set())
        assert await second.flush()
        assert second.strangers == 1
    after = await held(client, node)
    assert set(after) == {name, stranger["metadata"]["name"]}
    assert store.writes == 0, "an unchanged pool: adopted as it is, nothing created"
    left = after[stranger["metadata"]["name"]]
    assert left["metadata"]["resourceVersion"] == stranger["metadata"]["resourceVersion"]
    assert after[name]["metadata"]["resourceVersion"] == ours["metadata"]["resourceVersion"]
