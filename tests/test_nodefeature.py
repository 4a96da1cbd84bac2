"""Node labels as an NFD NodeFeature object on the real kube-apiserver (the CRD from
tests/data): owned by the DaemonSet, following hotplug with one write per change,
nothing written at idle or by a new pod that finds its labels published."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from genericdp.aio import TaskSet
from genericdp.dra.kubeapi import ApiRequestError, connect
from genericdp.nodefeature import NODE_NAME_LABEL, NodeFeatureSink, object_name
from genericdp.runtime.nodelabels import LabelFollower
from tests.apiserver import ApiServer
from tests.fakesys import FakeHost
from tests.polling import eventually
from tests.runtime_harness import NO_PERIODIC, config, running
from tests.test_node_labels import CONFIG, OTHER

CRD = Path(__file__).parent / "data" / "nfd-nodefeature-crd.yaml"
NAMESPACE = "genericdp-labels"
OWNER = "genericdp"


def install_crd(apiserver: ApiServer) -> None:
    """NFD's NodeFeature CRD, served once the server says it is established."""
    apiserver.kubectl("apply", "-f", str(CRD))
    apiserver.kubectl(
        "wait", "--for=condition=Established", "crd/nodefeatures.nfd.k8s-sigs.io", "--timeout=60s"
    )


@pytest.fixture(scope="module")
def cluster(apiserver: ApiServer) -> str:
    """The NodeFeature CRD installed, a namespace and a DaemonSet in it; the DaemonSet's UID."""
    install_crd(apiserver)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    apiserver.kubectl("apply", "-f", "-", input_text=json.dumps(namespace))
    labels = {"app": OWNER}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": OWNER, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "genericdp", "image": "genericdp:test"}]},
            },
        },
    }
    apiserver.kubectl("apply", "-f", "-", input_text=json.dumps(daemonset))
    return apiserver.kubectl(
        "get", "daemonset", OWNER, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    )


def _object(apiserver: ApiServer, node: str) -> dict[str, Any]:
    out = apiserver.kubectl("get", "nodefeature", object_name(node), "-n", NAMESPACE, "-o", "json")
    found: dict[str, Any] = json.loads(out)
    return found


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[Any]:
    api = connect(apiserver.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


async def test_the_node_feature_follows_hotplug_and_idle_writes_nothing(
    base: Path, apiserver: ApiServer, cluster: str, client: Any
) -> None:
    """The object carries the labels, NFD's node-name label and the DaemonSet as owner; a
    reload that changes no label sends no request and leaves its resourceVersion; a
    dongle plugged in is one write, seen within a second; the last one unplugged
    leaves the object with no labels."""
    node = "node-nf-1"
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    sink = NodeFeatureSink(client, node, NAMESPACE, OWNER)
    async with running(base, config(CONFIG), node_name=node, **NO_PERIODIC) as rt:
        follower = LabelFollower(rt.supervisor, sink, node)
        tasks = TaskSet()
        tasks.spawn("node-features", follower.run)
        try:
            await eventually(lambda: follower.rounds == 1, "the labels published")
            obj = _object(apiserver, node)
            assert obj["spec"]["labels"] == {
                "example.com/serial.count": "1",
                "example.com/serial.first": "OLD",
                "example.com/serial.present": "true",
            }
            assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: node}
            owners = obj["metadata"]["ownerReferences"]
            assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
                ("DaemonSet", OWNER, cluster)
            ]
            version = obj["metadata"]["resourceVersion"]
            # The owner, the object, one apply.
            assert (sink.requests, follower.writes) == (3, 1)

            await rt.supervisor.apply(config(CONFIG + OTHER))
            await eventually(lambda: follower.rounds == 2, "the labels computed again")
            assert sink.requests == 3
            assert _object(apiserver, node)["metadata"]["resourceVersion"] == version

            loop = asyncio.get_running_loop()
            started = loop.time()
            host.add_usb_serial(port="1-3", serial="NEW", ttys=("ttyUSB1",))
            await eventually(lambda: follower.writes == 2, "the hotplug published")
            took = loop.time() - started
            assert took < 1.0, f"the object followed the hotplug after {took:.3f}s"
            assert _object(apiserver, node)["spec"]["labels"] == {
                "example.com/serial.count": "2",
                "example.com/serial.first": "NEW",
                "example.com/serial.present": "true",
            }
            assert sink.requests == 4

            host.remove("/dev/ttyUSB0")
            host.remove("/dev/ttyUSB1")
            await eventually(lambda: follower.writes == 3, "the unplug published")
            assert _object(apiserver, node)["spec"].get("labels", {}) == {}
        finally:
            await tasks.stop()


@pytest.mark.usefixtures("cluster")
async def test_a_new_pod_finding_its_labels_published_writes_nothing(
    base: Path, apiserver: ApiServer, client: Any
) -> None:
    """A restarted daemon reads the object once and, its labels being there, writes nothing."""
    node = "node-nf-2"
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    versions = []
    for generation in range(2):
        sink = NodeFeatureSink(client, node, NAMESPACE, OWNER)
        async with running(base, config(CONFIG), node_name=node, **NO_PERIODIC) as rt:
            follower = LabelFollower(rt.supervisor, sink, node)
            tasks = TaskSet()
            tasks.spawn("node-features", follower.run)
            try:
                await eventually(lambda: follower.rounds == 1, "the labels published")  # noqa: B023
            finally:
                await tasks.stop()
        versions.append(_object(apiserver, node)["metadata"]["resourceVersion"])
        assert follower.writes == (1 if generation == 0 else 0)
        assert sink.requests == (3 if generation == 0 else 2)
    assert versions[0] == versions[1]


@pytest.mark.usefixtures("cluster")
async def test_a_missing_owner_is_said_and_the_labels_are_still_published(
    apiserver: ApiServer, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A DaemonSet that is not there: a warning naming it, the object written without owner."""
    node = "node-nf-3"
    sink = NodeFeatureSink(client, node, NAMESPACE, "no-such-daemonset")
    await sink.publish({"example.com/x": "1"})
    obj = _object(apiserver, node)
    assert obj["spec"]["labels"] == {"example.com/x": "1"}
    assert "ownerReferences" not in obj["metadata"]
    assert "reading DaemonSet genericdp-labels/no-such-daemonset: the API server answered 404" in (
        caplog.text
    )


@pytest.mark.usefixtures("cluster")
async def test_a_write_the_server_cannot_place_says_what_to_check(client: Any) -> None:
    """A 404 on the write (no such namespace here; no CRD elsewhere) names what to check."""
    sink = NodeFeatureSink(client, "node-nf-4", "no-such-namespace")
    with pytest.raises(ApiRequestError) as caught:
        await sink.publish({"example.com/x": "1"})
    assert caught.value.code == 404
    assert "is NFD's NodeFeature CRD installed, and the namespace there?" in str(caught.value)
