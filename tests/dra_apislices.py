"""The set-up of the tests of a node's ResourceSlices on the real kube-apiserver.

ResourceSlices are cluster-scoped, so each test takes a node name of its own
(``fresh_node``) and the tests share the session's API server without seeing
each other. ``CountingSlices`` counts the writes that land, from outside the
publisher; ``running`` is a publisher started on a store and closed after.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.kubeletplugin.slicestore import Listing, SliceStore
from tests.apiserver import ApiServer

_nodes = itertools.count()


def fresh_node(prefix: str) -> str:
    """A node name no other test of the session uses."""
    return f"{prefix}-{next(_nodes)}-{int(time.time() * 1000) % 100000}"


@asynccontextmanager
async def connected(apiserver: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    """A client of ``apiserver``, closed after (conftest's ``client`` fixture is one)."""
    api = kubeapi.connect(apiserver.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


def unit(uid: str, *, numa: int | None = None, serial: str | None = None) -> Unit:
    """A serial port unit ``/dev/<uid>``."""
    props = {"ID_SERIAL_SHORT": serial} if serial else {}
    node = DeviceNode(f"/dev/{uid}", f"/dev/{uid}", 188, 0, "tty")
    return Unit(uid, (node,), numa_node=numa, properties=props)


async def held(client: kubeapi.AsyncClient, node: str) -> dict[str, dict[str, Any]]:
    """The node's slices of the default driver, by name, as the API server holds them now."""
    return (await ApiSlices(client, node=node, driver=DEFAULT_DRIVER).list()).slices


def devices_of(objs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every device of ``objs`` (slices by name), by device name."""
    return {d["name"]: d for obj in objs.values() for d in obj["spec"].get("devices") or []}


async def devices_held(client: kubeapi.AsyncClient, node: str) -> dict[str, dict[str, Any]]:
    """The devices of the node's slices, by name, as the API server holds them now."""
    return devices_of(await held(client, node))


class CountingSlices:
    """A ``SliceStore`` that passes every call on and counts the writes that landed
    (creates, replaces and deletes that did not fail)."""

    def __init__(self, inner: SliceStore) -> None:
        self._inner = inner
        self.node = inner.node
        self.driver = inner.driver
        self.writes = 0

    async def owner(self) -> dict[str, str] | None:
        return await self._inner.owner()

    async def list(self) -> Listing:
        return await self._inner.list()

    async def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for event in self._inner.watch(version, seconds):
            yield event

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        made = await self._inner.create(obj)
        self.writes += 1
        return made

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        made = await self._inner.replace(obj)
        self.writes += 1
        return made

    async def delete(self, name: str) -> None:
        await self._inner.delete(name)
        self.writes += 1


def api_slices(client: kubeapi.AsyncClient, node: str) -> CountingSlices:
    """The node's slices on the API server, writes counted."""
    return CountingSlices(ApiSlices(client, node=node))


@asynccontextmanager
async def running(
    store: SliceStore, *, adopt_grace: float = 0.0, expect: Iterable[str] = ()
) -> AsyncIterator[SlicePublisher]:
    """A publisher on ``store`` expecting the resources ``expect``, started; closed after."""
    publisher = SlicePublisher(store, adopt_grace=adopt_grace)
    for resource in expect:
        publisher.expect(resource)
    await publisher.start()
    try:
        yield publisher
    finally:
        await publisher.close()
