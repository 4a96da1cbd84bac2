"""The watch of the node's ResourceSlices against the real kube-apiserver: a slice
deleted or changed by someone else at the worst moments (right after a start, between
the watch's list and its watch request, on an API server whose watch cache is behind)
is back within a second.

Each test uses a node name of its own (ResourceSlices are cluster-scoped), so the tests
share the session's API server without seeing each other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.naming import device_name
from tests.apiserver import ApiServer
from tests.dra_apislices import (
    CountingSlices,
    api_slices,
    connected,
    fresh_node,
    held,
    running,
    unit,
)
from tests.polling import eventually

RESOURCE = "example.com/serial"
RESTORED = 1.0  # seconds: a slice changed by someone else is put back within this

Meddle = Callable[[], Awaitable[None]]


@pytest.fixture
def node_name() -> str:
    return fresh_node("watched")


@pytest.fixture
async def someone(apiserver: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    """Another client of the API server (the kubelet, an admin)."""
    async with connected(apiserver) as api:
        yield api


class Meddling(CountingSlices):
    """``ApiSlices`` with ``before_watch`` run once, after the watch's list and before its
    watch request: whatever it does happens in the gap a watch must not lose."""

    def __init__(self, inner: ApiSlices) -> None:
        super().__init__(inner)
        self.before_watch: Meddle | None = None
        self.met = 0.0  # when ``before_watch`` had run (loop-independent clock)

    async def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        meddle, self.before_watch = self.before_watch, None
        if meddle is not None:
            await meddle()
            self.met = time.monotonic()
        async for event in super().watch(version, seconds):
            yield event


async def ours(client: kubeapi.AsyncClient, node: str) -> set[str]:
    """The device names in the node's slices, as the API server holds them now."""
    objs = await held(client, node)
    return {d["name"] for obj in objs.values() for d in obj["spec"].get("devices") or []}


async def back_within(client: kubeapi.AsyncClient, node: str, since: float, what: str) -> float:
    """Wait (RESTORED s at most) until the node's slices hold exactly our device again;
    how long after ``since`` it took."""
    wanted = {device_name(RESOURCE, "a")}
    deadline = since + RESTORED
    while (found := await ours(client, node)) != wanted:
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not put back within {RESTORED}s; devices: {found}")
        await eventually(lambda: True)  # one poll interval
    took = time.monotonic() - since
    logging.getLogger(__name__).info("%s: put back after %.3fs", what, took)
    return took


async def delete_ours(someone: kubeapi.AsyncClient, node: str) -> None:
    (name,) = await held(someone, node)
    await someone.delete(kubeapi.RESOURCE_SLICE, name)


async def tamper_with_ours(someone: kubeapi.AsyncClient, node: str) -> None:
    (name,) = await held(someone, node)
    patch = {"spec": {"devices": [{"name": "intruder"}]}}
    await someone.patch(kubeapi.RESOURCE_SLICE, name, patch, patch_type=PatchType.MERGE)


async def quiet_slice_cache(someone: kubeapi.AsyncClient, node: str) -> None:
    """Write something that is not a slice: the API server's latest resourceVersion is
    then newer than its watch cache of slices has seen, as on a fresh API server."""
    meta = ObjectMeta(name=node, namespace="default")
    await someone.create(ConfigMap(metadata=meta, data={"seen": "no"}))


CHANGES = {"deleted": delete_ours, "tampered with": tamper_with_ours}


async def published(client: kubeapi.AsyncClient, node: str) -> None:
    """A previous instance on the node left our slice."""
    async with running(api_slices(client, node)) as first:
        await first.publish(RESOURCE, [unit("a")], set())
        assert await first.flush()


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("restart", [False, True], ids=["first start", "restart"])
async def test_a_slice_changed_right_after_start_is_put_back_within_a_second(
    client: kubeapi.AsyncClient,
    someone: kubeapi.AsyncClient,
    node_name: str,
    change: str,
    restart: bool,
) -> None:
    """As soon as the first write (or, on a restart, the adoption that writes nothing) is
    done, someone else changes the slice; on the restart the slice cache is behind."""
    if restart:
        await published(client, node_name)
        await quiet_slice_cache(someone, node_name)
    store = api_slices(client, node_name)
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        assert store.writes == (0 if restart else 1)
        await CHANGES[change](someone, node_name)
        await back_within(client, node_name, time.monotonic(), f"a slice {change}")


@pytest.mark.parametrize("change", CHANGES)
async def test_a_change_between_the_list_and_the_watch_is_not_lost(
    client: kubeapi.AsyncClient, someone: kubeapi.AsyncClient, node_name: str, change: str
) -> None:
    """The watch goes on from its list's resourceVersion: a slice deleted or changed
    after that list and before the watch request is seen and put back."""
    await published(client, node_name)
    store = Meddling(ApiSlices(client, node=node_name))

    async def meddle() -> None:
        await CHANGES[change](someone, node_name)

    store.before_watch = meddle
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        await eventually(lambda: store.met > 0, "the change between list and watch")
        await back_within(client, node_name, store.met, f"a slice {change} before the watch")
