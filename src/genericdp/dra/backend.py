"""``serve --backend dra``: the node's DRA driver, its slices, and one edge per resource.

The daemon opens one ``DraBackend`` (``serving``) and hands it to the
supervisor (``runtime.backend.Backend``): every resource's runner then feeds
the driver's inventory and the node's ResourceSlices through its ``DraEdge``.
A DRA device is a unit (one ID per unit); a unit is held while a claim
naming it is in the driver's checkpoint (``DraUsage``), so a unit unplugged
under a claim stays listed, Unhealthy, until the claim is unprepared.
Daemon-wide, ``start`` starts the driver, which serves and registers its
own sockets. The API server pieces (the claim source and the
slice publisher) come from ``open_api``, which is the only place that loads
the API client library, so the device-plugin backend never does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from genericdp.aio import TaskSet
from genericdp.config.model import ResourceDefinition
from genericdp.dra.claims import ClaimSource
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.dra.edge import DraEdge, Publisher
from genericdp.dra.nodelock import node_lock
from genericdp.dra.publisher import SlicePublisher
from genericdp.dra.usage import DraUsage
from genericdp.errors import GenericdpError
from genericdp.hooks import HookRunner
from genericdp.runtime.backend import Fleet, Gauge, ResourceParts
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.runtime.state import ONE_PER_UNIT, DeviceIds
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
    """The driver and the publisher of one node (``runtime.backend.Backend``)."""

    settled_timeout = 0.0  # what is held is the checkpoint, loaded before any resource starts

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
        self._where = f"DRA driver {settings.dra_driver_name}, node {settings.node_name}"
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
        self.usage = DraUsage(self.driver.checkpoint)
        self.driver.preparer.on_change = self.usage.changed

    @property
    def where(self) -> str:
        return self._where

    def device_ids(self, definition: ResourceDefinition) -> DeviceIds:  # noqa: ARG002 -- the Backend protocol's signature
        return ONE_PER_UNIT  # one DRA device per unit; ``count`` is its shares (slices.py)

    def edge(self, parts: ResourceParts) -> DraEdge:
        return DraEdge(
            parts.definition,
            parts.state,
            inventory=self.driver.inventory,
            publisher=self.publisher,
            registration=self.driver.registration.service,
            stopping=lambda: self.stopping,
        )

    def renews(self, before: ResourceDefinition, after: ResourceDefinition) -> bool:  # noqa: ARG002 -- the Backend protocol's signature
        return False  # the driver learns nothing of a definition at registration

    async def start(self, fleet: Fleet, tasks: TaskSet) -> None:  # noqa: ARG002 -- the Backend protocol's signature
        """Start the driver (it serves and registers its own sockets); from then on
        every resource's list follows what the claims in its checkpoint hold."""
        await self.driver.start()
        self.usage.listen(fleet.usage_changed)
        self.usage.settled.set()

    def started(self, fleet: Fleet, tasks: TaskSet) -> None:
        """Nothing waits for the first apply."""

    def gauges(self) -> tuple[Gauge, ...]:
        publisher = self.publisher if isinstance(self.publisher, SlicePublisher) else None
        taken = publisher.taken if publisher else ()
        restarts = publisher.watch_restarts if publisher else {}
        return (
            Gauge(
                "genericdp_dra_slice_names_taken",
                "ResourceSlice names of this node held by a slice of another node or driver"
                " (their devices are not published).",
                len(taken),
            ),
            *(
                Gauge(
                    "genericdp_dra_slice_watch_restarts_total",
                    "Watches of this node's ResourceSlices opened again, by why the last one"
                    " ended (ended: by the server; expired: its version was gone, listed"
                    " again; failed: an error).",
                    count,
                    labels=(("reason", reason),),
                    counter=True,
                )
                for reason, count in restarts.items()
            ),
        )

    def shutting_down(self) -> None:
        """The daemon stops (not a reload): the slices stay for the next instance."""
        self.stopping = True

    async def close(self) -> None:
        await self.driver.close()


def check_settings(settings: Settings) -> None:
    """Raise DraSetupError when the DRA backend cannot run with ``settings``."""
    if problem := settings.dra_problem():
        raise DraSetupError(problem)


@asynccontextmanager
async def serving(
    settings: Settings, *, run_hook: HookRunner, recorder: Recorder = NO_METRICS
) -> AsyncIterator[DraBackend]:
    """The backend over the API server (its driver starts with the supervisor);
    closed (driver, then API) on exit. Waits first for any other instance of the
    driver on this node to exit (``nodelock.py``).
    ``recorder`` counts and times the prepared and unprepared claims."""
    check_settings(settings)
    # Before the publisher starts: a second instance on the node must not
    # publish (or delete) slices, nor touch the checkpoint, while the first serves.
    async with node_lock(settings.dra_plugins_dir / settings.dra_driver_name):
        api = await open_api(settings)
        try:
            backend = DraBackend(
                settings,
                claims=api.claims,
                publisher=api.publisher,
                run_hook=run_hook,
                recorder=recorder,
            )
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

    client = connect(Path(settings.kubeconfig) if settings.kubeconfig else None)
    node, driver = settings.node_name, settings.dra_driver_name
    publisher = SlicePublisher(ApiSlices(client, node=node, driver=driver))
    await publisher.start()

    async def close() -> None:
        await publisher.close()
        await client.close()

    return ApiPieces(ApiClaimSource(client, node=node, driver=driver), publisher, close)
