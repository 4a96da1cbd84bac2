"""``serve --backend dra``: the node's DRA driver, its slices, and one edge per resource.

A DRA device is a unit (``ONE_PER_UNIT``; ``count`` is its shares, ``slices.py``), never told
anew, held while a claim names it (``usage.py``). The API server pieces are made in
``serving``, the only place that loads the API client library, so the device-plugin backend
never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from genericdp.aio import Backoff, TaskSet
from genericdp.config.model import Config
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.dra.edge import DraEdge, Publisher
from genericdp.dra.usage import DraUsage
from genericdp.errors import GenericdpError
from genericdp.hooks import HookRunner
from genericdp.kubeletplugin.claims import ClaimSource
from genericdp.kubeletplugin.nodelock import node_lock
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.runtime.backend import Fleet, Gauge, ResourceParts
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.settings import Settings

log = logging.getLogger(__name__)

REGISTER_GRACE = 5.0  # seconds registration waits for the resources' first scans


class DraSetupError(GenericdpError):
    """The DRA backend cannot start with these settings (the CLI exits 2 with it)."""


class DraBackend:
    """The driver and the publisher of one node (``runtime.backend.Backend``)."""

    settled_timeout = 0.0  # what is held is the checkpoint, loaded before any resource starts
    owed_records = None  # the checkpoint records each claim's cleanup hook

    def __init__(
        self,
        settings: Settings,
        *,
        claims: ClaimSource,
        publisher: Publisher,
        run_hook: HookRunner,
        recorder: Recorder = NO_METRICS,
    ) -> None:
        check_settings(settings)
        self.where = f"DRA driver {settings.dra_driver_name}, node {settings.node_name}"
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
            pod_uid=settings.pod_uid,
        )
        # The first apply's edges, that registration waits for (None once registering).
        self._edges: list[DraEdge] | None = []
        self.usage = DraUsage(self.driver.checkpoint)

    def edge(self, parts: ResourceParts) -> DraEdge:
        registration = self.driver.registration.service
        registration.on_change = parts.context.on_status  # one callback, the fleet's
        edge = DraEdge(
            parts.definition,
            parts.state,
            inventory=self.driver.inventory,
            publisher=self.publisher,
            registration=registration,
            stopping=lambda: self.stopping,
            on_status=parts.context.on_status,
            uncleaned=self.uncleaned_units,
        )
        if self._edges is not None:
            self._edges.append(edge)
        return edge

    def uncleaned_units(self, resource: str) -> frozenset[str]:
        """The units of ``resource`` out of service until an admin releases them."""
        return frozenset(u for r, u in self.driver.checkpoint.uncleaned if r == resource)

    def configured(self, config: Config) -> None:
        self.driver.preparer.configured = frozenset(d.name for d in config.resources)

    def notes(self) -> tuple[str, ...]:
        found = sorted(
            self.driver.checkpoint.uncleaned.values(), key=lambda u: (u.resource, u.unit)
        )
        return tuple(
            f"{u.resource}: unit {u.unit} out of service since {u.since}: {u.why}"
            for u in found[:10]
        )

    async def start(self, fleet: Fleet) -> None:
        """Start the driver; from then on every resource's list follows the checkpoint."""
        await self.driver.start(register=False)

        def changed() -> None:
            fleet.usage_changed()
            for edge in fleet.edges():
                if isinstance(edge, DraEdge):
                    edge.refresh()  # a unit released from ``uncleaned`` is published again

        # A claim recorded or forgotten, here or by another instance: the lists follow.
        self.driver.preparer.on_change = self.driver.turns.on_change = changed
        self.usage.settled.set()

    def started(self, fleet: Fleet) -> None:
        """Register once every resource's first scan is in the inventory."""
        fleet.tasks.spawn("dra/register", self._register, finishable=True, backoff=Backoff())

    async def _register(self) -> None:
        """The kubelet calls the newest registration: one made before the devices are known
        would fail a rolling update's prepares (a slow first scan waits ``REGISTER_GRACE``)."""
        edges, self._edges = self._edges or [], None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REGISTER_GRACE):
                for edge in edges:
                    await edge.handed.wait()
        await self.driver.register()

    def gauges(self) -> tuple[Gauge, ...]:
        publisher = self.publisher if isinstance(self.publisher, SlicePublisher) else None
        restarts = publisher.watch_restarts if publisher else {}
        return (
            Gauge(
                "genericdp_dra_units_uncleaned",
                "Units handed out whose cleanup hook cannot run (their definition left the"
                " config): out of service until an admin deletes their uncleaned-*.json file.",
                len(self.driver.checkpoint.uncleaned),
            ),
            Gauge(
                "genericdp_dra_taints_dropped",
                "1 once the API server was seen dropping device taints (its DRADeviceTaints"
                " feature gate is off): unhealthy devices are then left out of the slices.",
                1 if publisher is not None and publisher.taints_dropped else 0,
            ),
            Gauge(
                "genericdp_dra_unhealthy_devices_unpublished",
                "Unhealthy devices left out of the slices because the API server drops taints.",
                publisher.untainted if publisher is not None else 0,
            ),
            Gauge(
                "genericdp_dra_slices_foreign",
                "ResourceSlices of this node and driver with genericdp's label and another"
                " owner: not ours, left alone.",
                publisher.strangers if publisher is not None else 0,
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
    """The backend over the API server, closed (driver, then API) on exit; the node's slices
    have one writer, the holder of the node lock (``nodelock.py``)."""
    check_settings(settings)
    from genericdp.kube.client import connect
    from genericdp.kubeletplugin.apiclaims import ApiClaimSource
    from genericdp.kubeletplugin.apislices import ApiSlices

    node, driver = settings.node_name, settings.dra_driver_name
    plugin_dir = settings.dra_plugins_dir / driver
    async with AsyncExitStack() as stack:  # closed last in, first out
        owner = TaskSet(log)
        if settings.pod_uid:
            stack.push_async_callback(owner.stop)  # the lock goes after the publisher stops
        else:
            await stack.enter_async_context(node_lock(plugin_dir))
        client = connect(Path(settings.kubeconfig) if settings.kubeconfig else None)
        stack.push_async_callback(client.close)
        publisher = SlicePublisher(ApiSlices(client, node=node, driver=driver))
        stack.push_async_callback(publisher.close)
        if settings.pod_uid:
            owner.spawn(
                "dra/slice-owner", lambda: _own_slices(plugin_dir, publisher), backoff=Backoff()
            )
        else:
            await publisher.start()
        backend = DraBackend(
            settings,
            claims=ApiClaimSource(client, node=node, driver=driver),
            publisher=publisher,
            run_hook=run_hook,
            recorder=recorder,
        )
        stack.push_async_callback(backend.close)
        yield backend


async def _own_slices(plugin_dir: Path, publisher: SlicePublisher) -> None:
    """Wait for the node's slice lock, start publishing, and hold it until cancelled."""
    async with node_lock(plugin_dir, rolling=True):
        await publisher.start()
        await asyncio.Event().wait()
