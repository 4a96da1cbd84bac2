"""``serve --backend dra``: the node's DRA driver, its slices, and one edge per resource.

The daemon builds one ``DraBackend`` and hands ``edge`` to the supervisor as
its ``EdgeFactory``: every resource's runner then feeds the driver's
inventory and the node's ResourceSlices instead of serving a device plugin.
The API server pieces (the claim source and the slice publisher) come from
``open_backend``, which is the only place that loads the API client library,
so the device-plugin backend never does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from genericdp.config.model import ResourceDefinition
from genericdp.dra.claims import ClaimSource
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.dra.edge import DraEdge, Publisher
from genericdp.errors import GenericdpError
from genericdp.hooks import HookRunner
from genericdp.runtime.allocator import Allocator
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.runtime.state import DeviceState
from genericdp.settings import Settings

log = logging.getLogger(__name__)


class DraSetupError(GenericdpError):
    """The DRA backend cannot start with these settings (the CLI exits 2 with it)."""


@dataclass
class ApiPieces:
    claims: ClaimSource
    publisher: Publisher
    close: Callable[[], Awaitable[None]]


class DraBackend:
    """The driver and the publisher of one node; ``edge`` makes each resource's edge."""

    def __init__(
        self,
        settings: Settings,
        *,
        claims: ClaimSource,
        publisher: Publisher,
        run_hook: HookRunner,
        recorder: Recorder = NO_METRICS,
        **driver_options: float,
    ) -> None:
        check_settings(settings)
        self.publisher = publisher
        self.stopping = False  # shutting down: edges keep their slices (see DraEdge.close)
        self.driver = DraDriver(
            driver=settings.dra_driver_name,
            node_name=settings.node_name,
            paths=DriverPaths(
                settings.dra_registration_dir, settings.dra_plugins_dir, settings.cdi_dir
            ),
            claims=claims,
            run_hook=run_hook,
            recorder=recorder,
            **driver_options,
        )

    def edge(
        self,
        definition: Callable[[], ResourceDefinition],
        state: DeviceState,
        context: ResourceContext,
        allocator: Allocator,
    ) -> DraEdge:
        return DraEdge(
            definition,
            state,
            context,
            allocator,
            inventory=self.driver.inventory,
            publisher=self.publisher,
            registration=self.driver.registration.service,
            stopping=lambda: self.stopping,
        )

    async def start(self) -> None:
        await self.driver.start()

    async def close(self) -> None:
        await self.driver.close()


def check_settings(settings: Settings) -> None:
    """Raise DraSetupError when the DRA backend cannot run with ``settings``."""
    if not settings.node_name:
        raise DraSetupError(
            "backend dra needs the node's name (GENERICDP_NODE_NAME, --node-name): it names"
            " the node's device pool"
        )


@asynccontextmanager
async def serving(
    settings: Settings, *, run_hook: HookRunner, recorder: Recorder = NO_METRICS
) -> AsyncIterator[DraBackend]:
    """The started backend over the API server; closed (driver, then API) on exit.
    ``recorder`` counts and times the prepared and unprepared claims."""
    check_settings(settings)
    api = await open_api(settings)
    try:
        backend = DraBackend(
            settings,
            claims=api.claims,
            publisher=api.publisher,
            run_hook=run_hook,
            recorder=recorder,
        )
        await backend.start()
        try:
            yield backend
        finally:
            await backend.close()
    finally:
        await api.close()


async def open_api(settings: Settings) -> ApiPieces:
    """The claim source and the slice publisher over the API server: the only place
    the API client library is loaded (the device-plugin backend never comes here)."""
    from genericdp.dra.apiclaims import ApiClaimSource
    from genericdp.dra.kubeapi import ApiSlices, connect
    from genericdp.dra.publisher import SlicePublisher

    client = connect(Path(settings.kubeconfig) if settings.kubeconfig else None)
    node, driver = settings.node_name, settings.dra_driver_name
    publisher = SlicePublisher(ApiSlices(client, node=node, driver=driver))
    await publisher.start()

    async def close() -> None:
        await publisher.close()
        await client.close()

    return ApiPieces(ApiClaimSource(client, node=node, driver=driver), publisher, close)
