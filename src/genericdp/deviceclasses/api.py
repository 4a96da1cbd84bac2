"""What the DeviceClass reconciler asks of the API server (``genericdp reconcile-classes``):
every DeviceClass (a name we want may be held by one not ours; only ours are written)
and our driver's ResourceSlices on every node (only read), as plain dicts.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from lightkube import AsyncClient

from genericdp.kube.client import (
    CLASSES,
    DEVICE_CLASS,
    SLICES,
    ApiRequestError,
    answered,
    http_of,
    list_objects,
    list_version,
    read_pages,
    version_of,
    watch_events,
)

NOT_FOUND = 404
# Resources the slices of our driver may name, over all nodes (a config has a few).
MAX_RESOURCES = 10_000


@dataclass
class Changes:
    """A ``ListWatch`` source calling ``on_change`` at each list and event but a bookmark."""

    http: httpx2.AsyncClient
    path: str
    params: dict[str, str]
    what: str
    on_change: Callable[[], object]

    async def relist(self) -> str:
        version = await list_version(self.http, self.path, self.params, self.what)
        self.on_change()
        return version

    async def follow(self, version: str, seconds: int) -> AsyncIterator[str]:
        events = watch_events(
            self.http, self.path, self.params, version=version, seconds=seconds, what=self.what
        )
        async for kind, obj in events:
            if kind != "BOOKMARK":
                self.on_change()
            yield version_of(obj)


class ClassApi:
    """The reconciler's requests for the classes and slices of ``driver``."""

    def __init__(self, client: AsyncClient, *, driver: str) -> None:
        self.client = client
        self.driver = driver

    async def classes(self) -> dict[str, dict[str, Any]]:
        """``{name: DeviceClass}`` of every DeviceClass of the cluster."""
        items, _ = await list_objects(http_of(self.client), CLASSES, {}, "the DeviceClasses")
        return {str(item["metadata"]["name"]): item for item in items}

    async def write_class(self, obj: dict[str, Any], *, create: bool) -> None:
        """Create ``obj`` (ApiRequestError 409 when a class of that name exists), or
        replace it (its resourceVersion makes a concurrent change a 409)."""
        verb = "creating" if create else "updating"
        async with answered(f"{verb} DeviceClass {obj['metadata']['name']}"):
            made = DEVICE_CLASS.from_dict(obj)
            await (self.client.create(made) if create else self.client.replace(made))

    async def delete_class(self, name: str) -> None:
        """Delete class ``name``; one already gone is no error."""
        try:
            async with answered(f"deleting DeviceClass {name}"):
                await self.client.delete(DEVICE_CLASS, name)
        except ApiRequestError as err:
            if err.code != NOT_FOUND:
                raise

    async def published_resources(self) -> set[str]:
        """The resources (``resource`` attributes) some node's slices of our driver hold
        devices of. Slices are many in a big cluster: each page is dropped once read."""
        found: set[str] = set()
        what = f"the ResourceSlices of driver {self.driver}"

        def keep(items: list[dict[str, Any]]) -> None:
            for item in items:
                for device in (item.get("spec") or {}).get("devices") or ():
                    value = ((device.get("attributes") or {}).get("resource") or {}).get("string")
                    if isinstance(value, str):
                        found.add(value)
            if len(found) > MAX_RESOURCES:
                raise ApiRequestError(
                    f"listing {what}", 200, f"devices of more than {MAX_RESOURCES} resources"
                )

        selector = {"fieldSelector": f"spec.driver={self.driver}"}
        await read_pages(
            http_of(self.client), SLICES, selector, what, keep, max_objects=sys.maxsize
        )
        return found

    def changes(self, kind: str, on_change: Callable[[], object]) -> Changes:
        """The ``Changes`` of the DeviceClasses (``kind`` ``classes``) or of our slices."""
        http = http_of(self.client)
        if kind == "classes":
            return Changes(http, CLASSES, {}, "the DeviceClasses", on_change)
        selector = {"fieldSelector": f"spec.driver={self.driver}"}
        return Changes(http, SLICES, selector, f"the ResourceSlices of {self.driver}", on_change)
