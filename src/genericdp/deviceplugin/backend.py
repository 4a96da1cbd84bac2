"""``serve --backend device-plugin``: one device plugin per resource, as the kubelet knows them.

Daemon-wide, the backend owns the kubelet watch, the sockets a killed
predecessor left, and one PodResources poller whose ``UsageTracker`` is the
runtime's ``Usage``. Per resource, its edge is a ``ResourcePlugin``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from genericdp.aio import Backoff, wait_event
from genericdp.config.model import ResourceDefinition
from genericdp.deviceplugin.kubeletwatch import DirChange, watch_plugin_dir
from genericdp.deviceplugin.options import renews
from genericdp.deviceplugin.plugin import ResourcePlugin
from genericdp.deviceplugin.poller import ReleasePoller
from genericdp.deviceplugin.replicas import Replicas, replicas_of
from genericdp.deviceplugin.sockets import remove_stale_sockets
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.hooks import HookRunner
from genericdp.kubelet.options import KUBELET_SOCKET_NAME
from genericdp.runtime.backend import Fleet, Gauge, ResourceParts
from genericdp.runtime.owed import Release
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.settings import Settings

log = logging.getLogger(__name__)

POD_RESOURCES_TIMEOUT = 5.0  # one PodResources List


class DevicePluginBackend:
    """The device-plugin backend of one daemon (``runtime.backend.Backend``)."""

    settled_timeout = POD_RESOURCES_TIMEOUT + 1.0  # the first List's timeout, and a second
    owed_records = "owed-device-plugin-"

    def __init__(self, settings: Settings, *, usage: UsageTracker | None = None) -> None:
        """``usage``: the tracker the poller feeds (tests pass one that records)."""
        self._settings = settings
        self.usage = usage or UsageTracker()
        self._watching = asyncio.Event()
        self._fleet: Fleet | None = None

    @property
    def where(self) -> str:
        return str(self._settings.plugin_dir)

    def device_ids(self, definition: ResourceDefinition) -> Replicas:
        return replicas_of(definition)

    def edge(self, parts: ResourceParts) -> ResourcePlugin:
        return ResourcePlugin(parts, plugin_dir=self._settings.plugin_dir, usage=self.usage)

    def renews(self, before: ResourceDefinition, after: ResourceDefinition) -> bool:
        return renews(before, after)

    def gauges(self) -> tuple[Gauge, ...]:
        return (
            Gauge(
                "genericdp_kubelet_watch_up",
                "1 while the kubelet's plugin directory is watched (restarts are seen).",
                1 if self._watching.is_set() else 0,
            ),
        )

    async def start(self, fleet: Fleet) -> None:
        self._fleet = fleet
        plugin_dir = self._settings.plugin_dir
        if plugin_dir.is_dir():
            for path in remove_stale_sockets(plugin_dir):
                log.info("removed stale socket %s", path)
        fleet.tasks.spawn("kubelet-watch", self._watch, backoff=Backoff(maximum=10.0))
        if not await wait_event(self._watching, 5.0):
            log.warning("not watching %s yet; kubelet restarts may be missed", plugin_dir)

    def started(self, fleet: Fleet) -> None:
        """After the first apply, so the first poll already knows who wants cleanup."""
        poller = ReleasePoller(
            self._settings.pod_resources_socket,
            self.usage,
            lambda releases: self._released(fleet, releases),
            interval=self._settings.pod_resources_poll_interval,
            # Every resource: a unit that vanishes while held stays listed until
            # released, and unbounded sharing follows what is held.
            active=lambda: bool(fleet.watched()),
            resources=fleet.watched,
            on_observed=fleet.usage_changed,
            timeout=POD_RESOURCES_TIMEOUT,
        )
        fleet.tasks.spawn("pod-resources", poller.run, backoff=Backoff(maximum=10.0))

    @staticmethod
    def _released(fleet: Fleet, releases: tuple[Release, ...]) -> None:
        """Each edge cleans its released units; the fleet, those of resources no edge serves."""
        plugins = {e.resource: e for e in fleet.edges() if isinstance(e, ResourcePlugin)}
        for release in releases:
            if (plugin := plugins.get(release.resource)) is not None:
                plugin.released(release)
        fleet.released(r for r in releases if r.resource not in plugins)

    async def _watch(self) -> None:
        try:
            await watch_plugin_dir(
                self._settings.plugin_dir, self._on_dir_change, on_ready=self._watching.set
            )
        finally:
            self._watching.clear()

    def _on_dir_change(self, change: DirChange) -> None:
        fleet = self._fleet
        if fleet is None:
            return
        kubelet_new = KUBELET_SOCKET_NAME in change.created
        if kubelet_new:
            fleet.recorder.kubelet_restart()
        for edge in fleet.edges():
            if isinstance(edge, ResourcePlugin):
                edge.plugin_dir_changed(change)
        if change.lost:
            fleet.kick("kubelet directory replaced")
        elif kubelet_new:
            fleet.kick("kubelet.sock created")


@asynccontextmanager
async def serving(
    settings: Settings,
    *,
    run_hook: HookRunner,  # noqa: ARG001 -- every backend's `serving` has this signature
    recorder: Recorder = NO_METRICS,  # noqa: ARG001 -- every backend's `serving` has this signature
) -> AsyncIterator[DevicePluginBackend]:
    """The backend ``serve`` runs (the signature every backend's ``serving`` has)."""
    yield DevicePluginBackend(settings)
