"""Shared and tainted devices against the real kube-apiserver (1.36): the slices it keeps.

``count: N`` publishes ``allowMultipleAllocations`` and a capacity of N
shares with a request policy, ``count: unbounded`` the flag alone, and an
unhealthy device a taint of the resource's effect; the server must keep all
of it as written (it drops fields whose feature gate is off), and a pool it
holds unchanged must cost no write.
"""

from __future__ import annotations

import pytest

from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER, device_name
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.kubeletplugin.slices import SHARES_CAPACITY, DeviceOptions
from tests.dra_apislices import api_slices, devices_held, fresh_node, running


def unit(uid: str) -> Unit:
    return Unit(uid, (DeviceNode(f"/dev/{uid}", f"/dev/{uid}", 10, 232, "misc"),))


@pytest.fixture
def node_name() -> str:
    return fresh_node("share")


@pytest.mark.parametrize("effect", ["None", "NoSchedule", "NoExecute"])
async def test_shared_and_tainted_devices_are_kept_as_written(
    client: kubeapi.AsyncClient, node_name: str, effect: str
) -> None:
    """Shares, the unbounded flag and every taint effect survive the server, and
    publishing the same pool again writes nothing."""
    async with running(api_slices(client, node_name)) as publisher:
        await publish_all(publisher, effect)
        assert await publisher.flush()
        found = await devices_held(client, node_name)
        kvm = found[device_name("example.com/kvm", "kvm")]
        assert kvm["allowMultipleAllocations"] is True
        assert kvm["capacity"] == {
            SHARES_CAPACITY: {
                "value": "3",
                "requestPolicy": {
                    "default": "1",
                    "validRange": {"min": "1", "max": "3", "step": "1"},
                },
            }
        }
        assert "taints" not in kvm
        kvm2 = found[device_name("example.com/kvm", "kvm2")]
        assert [(t["key"], t["effect"]) for t in kvm2["taints"]] == [
            (f"{DEFAULT_DRIVER}/unhealthy", effect)
        ]
        tun = found[device_name("example.com/tun", "tun")]
        assert tun["allowMultipleAllocations"] is True
        assert "capacity" not in tun
        one = found[device_name("example.com/one", "one")]
        assert "allowMultipleAllocations" not in one
        assert one["taints"][0]["effect"] == "NoSchedule"
    # A new instance finds what it would write: the server kept it all, nothing is written.
    store = api_slices(client, node_name)
    async with running(store) as again:
        await publish_all(again, effect)
        assert await again.flush()
        assert store.writes == 0


async def publish_all(publisher: SlicePublisher, effect: str) -> None:
    kvm = DeviceOptions(shares=3, taint_effect=effect)
    await publisher.publish("example.com/kvm", [unit("kvm"), unit("kvm2")], {"kvm2"}, options=kvm)
    tun = DeviceOptions(shares=None)
    await publisher.publish("example.com/tun", [unit("tun")], set(), options=tun)
    await publisher.publish("example.com/one", [unit("one")], {"one"})
