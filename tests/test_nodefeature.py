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
from genericdp.kube.client import ApiRequestError, connect
from genericdp.nodelabels.nodefeature import NODE_NAME_LABEL, NodeFeatureSink, object_name
from tests.apiserver import ApiServer
from tests.fakesys import FakeHost
from tests.label_counts import CountingFollower, CountingNodeFeatureSink
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
    return daemonset(apiserver, OWNER)


def daemonset(apiserver: ApiServer, name: str) -> str:
    """A DaemonSet ``name`` in the namespace; its UID."""
    labels = {"app": name}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
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
        "get", "daemonset", name, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    )


def _object(apiserver: ApiServer, node: str, owner: str = OWNER) -> dict[str, Any]:
    name = object_name(node, owner)
    out = apiserver.kubectl(
        "get", "nodefeature", name, "-n", NAMESPACE, "-o", "json", "--show-managed-fields"
    )
    found: dict[str, Any] = json.loads(out)
    return found


def _node_labels(apiserver: ApiServer, node: str) -> dict[str, str]:
    """What nfd-master gives ``node``: the labels of every NodeFeature naming it."""
    out = apiserver.kubectl(
        "get", "nodefeatures", "-n", NAMESPACE, "-l", f"{NODE_NAME_LABEL}={node}", "-o", "json"
    )
    labels: dict[str, str] = {}
    for item in json.loads(out)["items"]:
        labels.update(item["spec"].get("labels") or {})
    return labels


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
    sink = CountingNodeFeatureSink(client, node, NAMESPACE, OWNER)
    async with running(base, config(CONFIG), node_name=node, **NO_PERIODIC) as rt:
        follower = CountingFollower(rt.supervisor, sink, node)
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
        sink = CountingNodeFeatureSink(client, node, NAMESPACE, OWNER)
        async with running(base, config(CONFIG), node_name=node, **NO_PERIODIC) as rt:
            follower = CountingFollower(rt.supervisor, sink, node)
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
    obj = _object(apiserver, node, "no-such-daemonset")
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


@pytest.mark.usefixtures("cluster")
async def test_two_daemonsets_in_one_namespace_keep_each_their_labels(
    apiserver: ApiServer, client: Any
) -> None:
    """Two DaemonSets label one node: each keeps its own object (named for it, written by
    a field manager named for it, owned by it), so the later apply erases nothing of the
    other's (one object ``genericdp-<node>`` with one manager and force lost the
    first's labels and owner), and each one's next apply removes only its own."""
    node = "node-nf-two"
    uids = {name: daemonset(apiserver, name) for name in ("gdp-serial", "gdp-gpu")}
    serial = NodeFeatureSink(client, node, NAMESPACE, "gdp-serial")
    gpu = NodeFeatureSink(client, node, NAMESPACE, "gdp-gpu")
    for sink in (serial, gpu):
        assert await sink.current() == {}
    await serial.publish({"example.com/serial.present": "true", "example.com/serial.count": "1"})
    await gpu.publish({"example.com/gpu.present": "true"})
    assert _node_labels(apiserver, node) == {
        "example.com/serial.present": "true",
        "example.com/serial.count": "1",
        "example.com/gpu.present": "true",
    }
    for name, uid in uids.items():
        obj = _object(apiserver, node, name)
        assert [o["uid"] for o in obj["metadata"]["ownerReferences"]] == [uid]
        assert [m["manager"] for m in obj["metadata"]["managedFields"]] == [name]
    await serial.publish({"example.com/serial.present": "true"})
    assert _node_labels(apiserver, node) == {
        "example.com/serial.present": "true",
        "example.com/gpu.present": "true",
    }


@pytest.mark.usefixtures("cluster")
async def test_an_upgrade_deletes_the_object_of_the_old_name_only_when_it_is_its_own(
    apiserver: ApiServer, client: Any
) -> None:
    """An object ``genericdp-<node>`` that this DaemonSet alone owns (what it wrote before
    NodeFeature names carried the DaemonSet's) is deleted at start, so no stale labels
    stay beside the new object; one another DaemonSet owns is left alone."""
    uid = daemonset(apiserver, "gdp-upgraded")
    other = daemonset(apiserver, "gdp-other")
    for node, owner_uid, owner in (
        ("node-nf-up", uid, "gdp-upgraded"),
        ("node-nf-up2", other, "gdp-other"),
    ):
        old = {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": object_name(node),
                "namespace": NAMESPACE,
                "labels": {NODE_NAME_LABEL: node},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner, "uid": owner_uid}
                ],
            },
            "spec": {"labels": {"example.com/stale": "true"}},
            "status": {},
        }
        apiserver.kubectl(
            "apply", "--server-side", "--field-manager=genericdp", "-f", "-",
            input_text=json.dumps(old),
        )  # fmt: skip
    upgraded = NodeFeatureSink(client, "node-nf-up", NAMESPACE, "gdp-upgraded")
    assert await upgraded.current() == {}
    await upgraded.publish({"example.com/serial.present": "true"})
    assert _node_labels(apiserver, "node-nf-up") == {"example.com/serial.present": "true"}

    kept = NodeFeatureSink(client, "node-nf-up2", NAMESPACE, "gdp-upgraded")
    assert await kept.current() == {}
    assert _node_labels(apiserver, "node-nf-up2") == {"example.com/stale": "true"}
