"""The Kubernetes API client: lightkube, with resource.k8s.io/v1 as generic (dict) resources.

With ``classapi`` (``reconcile-classes`` only), the only module that imports
lightkube at import time; ``daemon``, ``cli``
and ``simulate`` import the DRA modules that need it lazily, so the
device-plugin backend never loads it (docs/architecture.md, Dependencies).
Objects are plain dicts: whatever fields the server knows pass through,
even ones lightkube's models predate.

lightkube's ``ApiError`` ends here: what the server answered leaves this
module as ``ApiRequestError`` (its HTTP status in ``code``), raised from it.
``ApiSlices`` is the publisher's ``SliceStore`` (``dra/slicestore.py``) over the API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.generic_resource import (
    GenericGlobalResource,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.operators import BinaryOperator, SequenceOperator

from genericdp.dra.naming import DEFAULT_DRIVER
from genericdp.errors import GenericdpError

__all__ = [
    "DEVICE_CLASS",
    "RESOURCE_CLAIM",
    "RESOURCE_SLICE",
    "ApiRequestError",
    "ApiSetupError",
    "ApiSlices",
    "AsyncClient",
    "as_slice",
    "connect",
    "get_claim",
    "list_slices",
    "watch_slices",
]

GROUP, VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICE = create_global_resource(GROUP, VERSION, "ResourceSlice", "resourceslices")
DEVICE_CLASS = create_global_resource(GROUP, VERSION, "DeviceClass", "deviceclasses")
RESOURCE_CLAIM = create_namespaced_resource(GROUP, VERSION, "ResourceClaim", "resourceclaims")
FIELD_MANAGER = "genericdp"
REQUEST_TIMEOUT = 10.0  # seconds per request; the publisher retries after it


class ApiSetupError(GenericdpError):
    """No way to reach the API server: no service account and no usable kubeconfig."""


def connect(kubeconfig: Path | None = None) -> AsyncClient:
    """A client for the API server: ``kubeconfig`` if given, else the pod's service account.

    The service account (``/var/run/secrets/kubernetes.io/serviceaccount`` and
    ``KUBERNETES_SERVICE_HOST``/``_PORT``) is what the DaemonSet uses; a
    kubeconfig is for development and tests.
    """
    try:
        if kubeconfig is not None:
            config = KubeConfig.from_file(kubeconfig)
        else:
            config = KubeConfig.from_service_account()
    except (ConfigError, OSError, KeyError, ValueError) as err:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the pod's service account"
        detail = f"{err} is not set" if isinstance(err, KeyError) else str(err)
        raise ApiSetupError(f"cannot reach the API server through {where}: {detail}") from err
    return AsyncClient(config, field_manager=FIELD_MANAGER, timeout=httpx2.Timeout(REQUEST_TIMEOUT))


class ApiRequestError(GenericdpError):
    """The API server refused a request; ``code`` is its HTTP status (0: none sent)."""

    def __init__(self, what: str, code: int, reason: str) -> None:
        super().__init__(f"{what}: the API server answered {code}: {reason}")
        self.code = code
        self.reason = reason


def _status_code(err: ApiError) -> int:
    code = getattr(err.status, "code", None)
    return code if isinstance(code, int) else 0


@contextmanager
def _answered(what: str) -> Iterator[None]:
    """Turn lightkube's ``ApiError`` into ours, naming the request."""
    try:
        yield
    except ApiError as err:
        raise ApiRequestError(what, _status_code(err), str(err.status.message)) from err


async def get_claim(client: AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    """The ResourceClaim ``namespace/name``; raises ApiRequestError (404: not there)."""
    with _answered(f"ResourceClaim {namespace}/{name}"):
        return dict(await client.get(RESOURCE_CLAIM, name, namespace=namespace))


async def list_slices(client: AsyncClient, *, node: str, driver: str) -> dict[str, dict[str, Any]]:
    """``{name: ResourceSlice}`` of ``node``'s slices of ``driver``."""
    fields: dict[str, str | BinaryOperator | SequenceOperator] = {
        "spec.nodeName": node,
        "spec.driver": driver,
    }
    with _answered(f"listing the ResourceSlices of node {node}"):
        return {
            str(item["metadata"]["name"]): dict(item)
            async for item in client.list(RESOURCE_SLICE, fields=fields)
        }


def watch_slices(
    client: AsyncClient, *, node: str, driver: str
) -> AsyncIterable[tuple[str, dict[str, Any]]]:
    """``(ADDED|MODIFIED|DELETED, slice)`` for ``node``'s slices of ``driver``, until it fails."""
    fields: dict[str, str | BinaryOperator | SequenceOperator] = {
        "spec.nodeName": node,
        "spec.driver": driver,
    }
    return _events(client.watch(RESOURCE_SLICE, fields=fields), node)


async def _events(
    stream: AsyncIterable[tuple[str, GenericGlobalResource]], node: str
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    with _answered(f"watching the ResourceSlices of node {node}"):
        async for kind, obj in stream:
            yield kind, dict(obj)


def as_slice(obj: dict[str, Any]) -> GenericGlobalResource:
    """A ResourceSlice dict as the object lightkube writes."""
    made: GenericGlobalResource = RESOURCE_SLICE.from_dict(obj)
    return made


class ApiSlices:
    """The ResourceSlices of ``node`` and ``driver`` on the API server (a ``SliceStore``)."""

    def __init__(self, client: AsyncClient, *, node: str, driver: str = DEFAULT_DRIVER) -> None:
        self._client = client
        self.node = node
        self.driver = driver

    async def list(self) -> dict[str, dict[str, Any]]:
        return await list_slices(self._client, node=self.node, driver=self.driver)

    def watch(self) -> AsyncIterable[tuple[str, dict[str, Any]]]:
        return watch_slices(self._client, node=self.node, driver=self.driver)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        with _answered(f"creating ResourceSlice {obj['metadata']['name']}"):
            return dict(await self._client.create(as_slice(obj)))

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        with _answered(f"replacing ResourceSlice {obj['metadata']['name']}"):
            return dict(await self._client.replace(as_slice(obj)))

    async def delete(self, name: str) -> None:
        """Delete slice ``name``; one already gone is no error."""
        try:
            with _answered(f"deleting ResourceSlice {name}"):
                await self._client.delete(RESOURCE_SLICE, name)
        except ApiRequestError as err:
            if err.code != 404:
                raise
