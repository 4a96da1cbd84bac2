"""The publisher's ``SliceStore`` (``kubeletplugin/slicestore.py``) over the API server: the
ResourceSlices of one node and driver, through ``kube/client.py``'s requests (each with its
overall deadline, a list in bounded pages, a watch as one request)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

from lightkube.generic_resource import GenericGlobalResource

from genericdp.kube.client import (
    REQUEST_DEADLINE,
    RESOURCE_SLICE,
    SLICES,
    ApiRequestError,
    AsyncClient,
    answered,
    get_object,
    http_of,
    list_objects,
    watch_events,
)
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.kubeletplugin.slicestore import Listing


def as_slice(obj: dict[str, Any]) -> GenericGlobalResource:
    """A ResourceSlice dict as the object lightkube writes."""
    made: GenericGlobalResource = RESOURCE_SLICE.from_dict(obj)
    return made


class ApiSlices:
    """The ResourceSlices of ``node`` and ``driver`` on the API server (a ``SliceStore``)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver: str = DEFAULT_DRIVER,
        deadline: float = REQUEST_DEADLINE,
    ) -> None:
        self._client = client
        self.node = node
        self.driver = driver
        self._deadline = deadline  # seconds for each request but a watch
        self._selector = {"fieldSelector": f"spec.nodeName={node},spec.driver={driver}"}
        self._what = f"the ResourceSlices of node {node}"

    async def list(self) -> Listing:
        http = http_of(self._client)
        items, version = await list_objects(
            http, SLICES, self._selector, self._what, deadline=self._deadline
        )
        return Listing({str(item["metadata"]["name"]): item for item in items}, version)

    def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        http = http_of(self._client)
        return watch_events(
            http, SLICES, self._selector, version=version, seconds=seconds, what=self._what
        )

    async def owner(self) -> dict[str, str] | None:
        what = f"reading Node {self.node}"
        path = f"/api/v1/nodes/{self.node}"
        try:
            node = await get_object(http_of(self._client), path, what, deadline=self._deadline)
        except ApiRequestError as err:
            if err.code in {HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND}:
                return None
            raise
        uid = (node.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            return None
        return {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        named = obj["metadata"].get("name") or f"{obj['metadata'].get('generateName')}*"
        async with answered(f"creating ResourceSlice {named}", self._deadline):
            return dict(await self._client.create(as_slice(obj)))

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        async with answered(f"replacing ResourceSlice {obj['metadata']['name']}", self._deadline):
            return dict(await self._client.replace(as_slice(obj)))

    async def delete(self, name: str) -> None:
        """Delete slice ``name``; one already gone is no error."""
        try:
            async with answered(f"deleting ResourceSlice {name}", self._deadline):
                await self._client.delete(RESOURCE_SLICE, name)
        except ApiRequestError as err:
            if err.code != HTTPStatus.NOT_FOUND:
                raise
