"""The Kubernetes API client: lightkube, with resource.k8s.io/v1 as generic (dict) resources.

The only module that imports lightkube at import time; ``daemon``, ``cli``
and ``simulate`` import the DRA modules that need it lazily, so the
device-plugin backend never loads it (docs/architecture.md, Dependencies).
Objects are plain dicts: whatever fields the server knows pass through,
even ones lightkube's models predate.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
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

from genericdp.errors import GenericdpError

__all__ = [
    "DEVICE_CLASS",
    "RESOURCE_CLAIM",
    "RESOURCE_SLICE",
    "ApiError",
    "ApiSetupError",
    "AsyncClient",
    "as_slice",
    "connect",
    "list_slices",
    "status_code",
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


def status_code(err: ApiError) -> int:
    """The HTTP status of an API error (0 when the server sent none)."""
    code = getattr(err.status, "code", None)
    return code if isinstance(code, int) else 0


async def list_slices(client: AsyncClient, *, node: str, driver: str) -> dict[str, dict[str, Any]]:
    """``{name: ResourceSlice}`` of ``node``'s slices of ``driver``."""
    fields: dict[str, str | BinaryOperator | SequenceOperator] = {
        "spec.nodeName": node,
        "spec.driver": driver,
    }
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
    return _events(client.watch(RESOURCE_SLICE, fields=fields))


async def _events(
    stream: AsyncIterable[tuple[str, GenericGlobalResource]],
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    async for kind, obj in stream:
        yield kind, dict(obj)


def as_slice(obj: dict[str, Any]) -> GenericGlobalResource:
    """A ResourceSlice dict as the object lightkube writes."""
    made: GenericGlobalResource = RESOURCE_SLICE.from_dict(obj)
    return made
