"""What the DeviceClass reconciler asks of the API server (``genericdp reconcile-classes``).

Three kinds of object, each through lightkube and each failure as
``ApiRequestError``: the DeviceClasses (every one read, since a name we want
may be held by a class not ours; only ours written), the ResourceSlices of
our driver on every node (only read: which resources some node still
publishes), and one Lease (the reconciler's leader election,
``dra/lease.py``). Objects are plain dicts, as in ``kubeapi``; the Lease is
lightkube's model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from genericdp.dra.kubeapi import DEVICE_CLASS, RESOURCE_SLICE, ApiRequestError

__all__ = ["ClassApi", "Lease", "LeaseSpec", "ObjectMeta"]

NOT_FOUND, CONFLICT = 404, 409


@contextmanager
def _answered(what: str) -> Iterator[None]:
    try:
        yield
    except ApiError as err:
        code = getattr(err.status, "code", None)
        raise ApiRequestError(
            what, code if isinstance(code, int) else 0, str(err.status.message)
        ) from err


class ClassApi:
    """The reconciler's requests for the classes and slices of ``driver``."""

    def __init__(self, client: AsyncClient, *, driver: str) -> None:
        self.client = client
        self.driver = driver

    async def classes(self) -> dict[str, dict[str, Any]]:
        """``{name: DeviceClass}`` of every DeviceClass of the cluster."""
        with _answered("listing the DeviceClasses"):
            return {
                str(item["metadata"]["name"]): dict(item)
                async for item in self.client.list(DEVICE_CLASS)
            }

    async def create_class(self, obj: dict[str, Any]) -> None:
        """Create ``obj``; raises ApiRequestError 409 when a class of that name exists."""
        with _answered(f"creating DeviceClass {obj['metadata']['name']}"):
            await self.client.create(DEVICE_CLASS.from_dict(obj))

    async def replace_class(self, obj: dict[str, Any]) -> None:
        """Replace ``obj`` (its resourceVersion makes a concurrent change a 409)."""
        with _answered(f"updating DeviceClass {obj['metadata']['name']}"):
            await self.client.replace(DEVICE_CLASS.from_dict(obj))

    async def delete_class(self, name: str) -> None:
        """Delete class ``name``; one already gone is no error."""
        try:
            with _answered(f"deleting DeviceClass {name}"):
                await self.client.delete(DEVICE_CLASS, name)
        except ApiRequestError as err:
            if err.code != NOT_FOUND:
                raise

    async def published_resources(self) -> set[str]:
        """The resources some node's slices of our driver hold devices of (the ``resource``
        attribute every device we publish carries, dra/slices.py)."""
        found: set[str] = set()
        with _answered(f"listing the ResourceSlices of driver {self.driver}"):
            async for item in self.client.list(RESOURCE_SLICE, fields={"spec.driver": self.driver}):
                for device in (item.get("spec") or {}).get("devices") or ():
                    value = ((device.get("attributes") or {}).get("resource") or {}).get("string")
                    if isinstance(value, str):
                        found.add(value)
        return found

    async def changes(self, kind: str) -> AsyncIterator[str]:
        """One item per change of a DeviceClass (``kind`` ``classes``) or of our driver's
        slices (``slices``), the objects there at the start included; raises on failure."""
        if kind == "classes":
            stream = self.client.watch(DEVICE_CLASS)
        else:
            stream = self.client.watch(RESOURCE_SLICE, fields={"spec.driver": self.driver})
        with _answered(f"watching {kind}"):
            async for event, _obj in stream:
                yield event

    async def get_lease(self, namespace: str, name: str) -> Lease | None:
        try:
            with _answered(f"reading Lease {namespace}/{name}"):
                lease: Lease = await self.client.get(Lease, name, namespace=namespace)
                return lease
        except ApiRequestError as err:
            if err.code == NOT_FOUND:
                return None
            raise

    async def create_lease(self, lease: Lease) -> Lease:
        if lease.metadata is None:
            raise TypeError("a Lease without metadata")
        with _answered(f"creating Lease {lease.metadata.namespace}/{lease.metadata.name}"):
            made: Lease = await self.client.create(lease)
            return made

    async def replace_lease(self, lease: Lease) -> Lease:
        if lease.metadata is None:
            raise TypeError("a Lease without metadata")
        with _answered(f"updating Lease {lease.metadata.namespace}/{lease.metadata.name}"):
            made: Lease = await self.client.replace(lease)
            return made
