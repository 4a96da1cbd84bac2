"""The Node watch: this node's labels from the real kube-apiserver, a label change
applied like a reload, and a watch the server ends reopened after a backoff."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from genericdp.aio import Backoff, TaskSet
from genericdp.daemon import NodeLabelsWatch
from genericdp.kube.client import connect
from genericdp.nodelabels.nodewatch import NodeWatch
from tests.apiserver import ApiServer, free_port
from tests.ending_api import EndingServer, kubeconfig
from tests.polling import eventually
from tests.runtime_harness import Running, ScriptedDiscovery, unit
from tests.test_cleanup import SERIAL, Hook, serving

LABEL = "example.com/serial"


@dataclass
class CountedWatch(NodeWatch):
    """The daemon's Node watch, with the lists and watches it sends counted."""

    sent: int = 0

    async def relist(self) -> str:
        self.sent += 1
        return await super().relist()

    def follow(self, version: str, seconds: int) -> AsyncIterator[str]:
        self.sent += 1
        return super().follow(version, seconds)


def node(apiserver: ApiServer, name: str, **labels: str) -> None:
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    apiserver.kubectl("create", "-f", "-", input_text=json.dumps(obj))


async def test_the_watch_follows_only_its_own_node(apiserver: ApiServer) -> None:
    """Labels at start and at each change of this Node; another Node's changes are not seen;
    a deleted Node is None; idle, the watch sends one list and one watch."""
    node(apiserver, "watch-me", zone="a")
    node(apiserver, "not-me", zone="a")
    seen: list[dict[str, str] | None] = []

    async def on_labels(labels: object) -> None:
        seen.append(None if labels is None else dict(labels))  # type: ignore[call-overload]

    client = connect(apiserver.kubeconfig)
    watch = CountedWatch(client, "watch-me", on_labels)
    tasks = TaskSet()
    try:
        tasks.spawn("node-watch", watch.run)
        await eventually(lambda: seen == [{"zone": "a"}])
        apiserver.kubectl("label", "node", "not-me", "zone=b", "--overwrite")
        apiserver.kubectl("label", "node", "watch-me", f"{LABEL}=present")
        await eventually(lambda: len(seen) == 2)
        assert seen[1] == {"zone": "a", LABEL: "present"}
        apiserver.kubectl("annotate", "node", "watch-me", "note=unrelated")
        apiserver.kubectl("label", "node", "watch-me", f"{LABEL}-")
        await eventually(lambda: len(seen) == 3)
        assert seen[2] == {"zone": "a"}  # the annotation changed no label: not told
        apiserver.kubectl("delete", "node", "watch-me")
        await eventually(lambda: len(seen) == 4)
        assert seen[3] is None
        assert watch.sent == 2
    finally:
        await tasks.stop()
        await client.close()
        apiserver.kubectl("delete", "node", "not-me", "--ignore-not-found")


async def six_delays(url: str, tmp_path: Path) -> tuple[list[float], CountedWatch]:
    """The first six backoff delays of a watch of Node ``n`` on ``url`` (0.5 s doubling,
    no jitter), its sleeps recorded, the sixth never ending; the watch."""
    delays: list[float] = []
    done = asyncio.Event()

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 6:
            done.set()
            await asyncio.Event().wait()

    async def on_labels(_labels: object) -> None:
        return None

    client = connect(kubeconfig(tmp_path / "kubeconfig", url))
    backoff = Backoff(initial=0.5, maximum=30.0, jitter=0.0)
    watch = CountedWatch(client, "n", on_labels, backoff=backoff, sleep=sleep)
    tasks = TaskSet()
    tasks.spawn("node-watch", watch.run)
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await tasks.stop()
        await client.close()
    return delays, watch


async def test_a_watch_the_server_ends_at_once_is_reopened_after_a_growing_backoff(
    tmp_path: Path,
) -> None:
    """Each reopen waits the next backoff (0.5 s doubling, never zero); a 410 Gone lists
    again, from the list's resourceVersion on."""
    ending = EndingServer(gone=1)
    async with ending as url:
        delays, _ = await six_delays(url, tmp_path)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    kinds = ["watch" if "watch=true" in p else "list" for p in ending.paths]
    assert kinds == ["list", "watch", "list", "watch", "watch", "watch", "watch", "watch"]
    assert all("fieldSelector=metadata.name%3Dn" in p for p in ending.paths)
    assert all("resourceVersion=7" in p for p in ending.paths if "watch=true" in p)


async def test_an_unreachable_api_server_is_warned_of_once_not_at_every_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Six refused attempts in a row (every node's, when the API server restarts): one
    warning, saying it retries, and the backoff grows between them."""
    caplog.set_level(logging.INFO, logger="genericdp.nodelabels.nodewatch")
    # Nothing listens there.
    delays, watch = await six_delays(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "listing Node n" in warnings[0]
    assert "retrying with backoff" in warnings[0]
    assert watch.sent == 6


async def test_labelling_the_node_serves_the_resource_and_unlabelling_stops_it(
    apiserver: ApiServer, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's node watch: a resource whose selector the Node does not match is not
    registered; labelling the Node registers it with the embedded kubelet; removing the
    label while a unit is allocated stops it as a removal does (its unit stays with the
    pod, and is cleaned once when the pod releases it)."""
    caplog.set_level(logging.INFO, logger="genericdp")
    name = "selector-node"
    node(apiserver, name, zone="a")
    hook = Hook(base / "hook")
    selector = f"  nodeSelector: {{matchExpressions: [{{key: {LABEL}, operator: Exists}}]}}\n"
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    cfg = hook.config(extra=selector)
    kubeconfig = str(apiserver.kubeconfig)
    tasks = TaskSet()
    try:
        async with serving(base, cfg, discovery, node_name=name, kubeconfig=kubeconfig) as rt:
            NodeLabelsWatch(tasks, rt.settings, rt.supervisor).start_if_needed()
            await eventually(lambda: rt.supervisor.node_labels == {"zone": "a"})
            assert rt.supervisor.status() == {}
            apiserver.kubectl("label", "node", name, f"{LABEL}=")
            await _allocatable(rt, 1)
            await rt.kubelet.allocate(SERIAL, 1, pod="p")
            await eventually(lambda: rt.usage.listed(SERIAL) == {"ttyUSB0"})
            apiserver.kubectl("label", "node", name, f"{LABEL}-")
            await rt.until(lambda k: not k.resources[SERIAL].connected)
            assert hook.lines("runs") == []
            rt.kubelet.release("default", "p")
            await eventually(lambda: hook.lines("done") == ["ttyUSB0"])
            assert rt.supervisor.status() == {}
    finally:
        await tasks.stop()
        apiserver.kubectl("delete", "node", name)


async def _allocatable(rt: Running, count: int) -> None:
    await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == count)


async def test_without_api_access_selected_resources_are_not_served_said_once(
    base: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No node name: no watch starts, and one warning says why, however often it is asked."""
    caplog.set_level(logging.INFO, logger="genericdp")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    hook = Hook(base / "hook")
    selector = "  nodeSelector: {matchLabels: {zone: a}}\n"
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    tasks = TaskSet()
    async with serving(base, hook.config(extra=selector), discovery, node_name="") as rt:
        watch = NodeLabelsWatch(tasks, rt.settings, rt.supervisor)
        watch.start_if_needed()
        watch.start_if_needed()
        assert tasks.names == ()
        assert rt.supervisor.status() == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        (
            "resources with a nodeSelector are not served: this node's labels are unknown:"
            " no node name (--node-name or GENERICDP_NODE_NAME)"
        )
    ]
