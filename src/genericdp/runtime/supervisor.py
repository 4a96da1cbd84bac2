"""The supervisor: one ``ResourceRunner`` per resource, reconciled, watched.

``apply(config)`` is the single entry point for a config, at start and on
reload: it computes a ``Plan`` (pure, in ``reconcile``) and carries it out,
stopping removed resources before starting new ones. The kubelet watch wakes
every plugin when the kubelet restarts. One ``pod-resources`` task polls the
kubelet's PodResources List and hands released units to their resource for
cleanup (``release``). ``status()`` and ``wait_for()`` let
``simulate`` and the tests observe registrations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet, wait_event
from genericdp.allocation.cdi import remove_stale_specs
from genericdp.config.model import Config
from genericdp.hooks import HookRunner
from genericdp.kubelet.options import KUBELET_SOCKET_NAME
from genericdp.memtrim import Trimmer
from genericdp.runtime.context import SETTLE, Discover, ResourceContext
from genericdp.runtime.devwatch import DevChange, watch_devices
from genericdp.runtime.edge import EdgeFactory, PluginStatus
from genericdp.runtime.kubeletwatch import DirChange, watch_plugin_dir
from genericdp.runtime.plugin import ResourcePlugin, remove_stale_sockets
from genericdp.runtime.reconcile import Plan, plan
from genericdp.runtime.recorder import NO_METRICS, Recorder, TimedHooks
from genericdp.runtime.release import Release, ReleasePoller, UsageTracker
from genericdp.runtime.resource import ResourceRunner
from genericdp.settings import Settings

log = logging.getLogger(__name__)

Statuses = Mapping[str, PluginStatus]
POD_RESOURCES_TIMEOUT = 5.0  # one PodResources List


def _default_discover() -> Discover:
    from genericdp.discovery import discover

    return discover


def _default_hook_runner() -> HookRunner:
    from genericdp.hooks import run_hook

    return run_hook


class Supervisor:
    """Runs the device plugins of a config.

    ``discover`` and ``run_hook`` default to the real ones; tests pass their
    own (a discovery that raises, say) instead of patching. ``metrics`` hears
    of registrations, allocations, hooks, probes and kubelet restarts.
    ``edge`` makes each resource's kubelet-facing side: the device plugin
    (``ResourcePlugin``) by default, another backend's otherwise
    (``runtime/edge.py``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        discover: Discover | None = None,
        run_hook: HookRunner | None = None,
        settle: float = SETTLE,
        metrics: Recorder | None = None,
        cleanup_backoff: Callable[[], Backoff] | None = None,
        edge: EdgeFactory = ResourcePlugin,
        device_plugin_api: bool = True,
    ) -> None:
        self._settings = settings
        self._edge = edge
        # False for a backend that has nothing to do with the device-plugin API (DRA):
        # no kubelet directory to watch, no stale sockets, no PodResources polling.
        self._device_plugin_api = device_plugin_api
        self._usage = UsageTracker()
        self._discover = discover or _default_discover()
        self._run_hook = run_hook or _default_hook_runner()
        self._metrics = metrics or NO_METRICS
        if metrics is not None:
            self._run_hook = TimedHooks(self._run_hook, metrics)
        # Built once: what every resource shares (its runner, edge, allocator and cleaner).
        self._context = ResourceContext.of(
            settings,
            discover=self._discover,
            run_hook=self._run_hook,
            settle=settle,
            recorder=self._metrics,
            cleanup_backoff=cleanup_backoff,
            on_status=self._notify,
            # Only the device-plugin API polls PodResources; nothing else would
            # ever settle the wait (under DRA it held every first publish 6 s).
            settled_timeout=POD_RESOURCES_TIMEOUT + 1.0 if device_plugin_api else 0.0,
        )
        self._runners: dict[str, ResourceRunner] = {}
        self._tasks = TaskSet(log)
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._watching = asyncio.Event()
        self._config = Config(resources=())
        # A reload or a kubelet restart frees memory in the middle of the heaps.
        self._trimmer = Trimmer()

    @property
    def config(self) -> Config:
        return self._config

    @property
    def usage(self) -> UsageTracker:
        """Who holds which device, as far as PodResources and our Allocate tell."""
        return self._usage

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, config: Config, *, watch_timeout: float = 5.0) -> Plan:
        """Clean up stale sockets, watch the kubelet directory, then apply ``config``."""
        plugin_dir = self._settings.plugin_dir
        if self._device_plugin_api and plugin_dir.is_dir():
            for path in remove_stale_sockets(plugin_dir):
                log.info("removed stale socket %s", path)
        # Specs we wrote for resources that left the config while we were down.
        keep = [d.name for d in config.resources if d.allocate.cdi]
        for path in await asyncio.to_thread(remove_stale_specs, self._settings.cdi_dir, keep):
            log.info("removed stale CDI spec %s", path)
        # Not awaited: once ready it asks every resource to rescan, so nothing is missed.
        self._tasks.spawn("device-watch", self._watch_devices, backoff=Backoff(maximum=10.0))
        if not self._device_plugin_api:
            return await self.apply(config)
        self._tasks.spawn("kubelet-watch", self._watch, backoff=Backoff(maximum=10.0))
        if not await wait_event(self._watching, watch_timeout):
            log.warning("not watching %s yet; kubelet restarts may be missed", plugin_dir)
        steps = await self.apply(config)
        # After the first apply, so the first poll already knows who wants cleanup.
        poller = ReleasePoller(
            self._settings.pod_resources_socket,
            self._usage,
            self._released,
            interval=self._settings.pod_resources_poll_interval,
            # Every resource: a unit that vanishes while held stays listed until
            # released, and unbounded sharing follows what is held.
            active=lambda: bool(self._runners),
            on_observed=self._usage_changed,
            timeout=POD_RESOURCES_TIMEOUT,
        )
        self._tasks.spawn("pod-resources", poller.run, backoff=Backoff(maximum=10.0))
        return steps

    async def apply(self, config: Config) -> Plan:
        """Reconcile the running plugins with ``config`` (stop, update, start)."""
        async with self._lock:
            steps = plan(self._config.resources, config.resources)
            changing = {*steps.stop, *(d.name for d in (*steps.update, *steps.reregister))}
            changing |= {d.name for d in steps.start}
            # A line about one resource carries it as a field, as its own lines do.
            about = {"resource": next(iter(changing))} if len(changing) == 1 else {}
            with logsetup.fields(**about):
                log.info("applying config: %s", steps)
            for name in steps.stop:
                await self._runners.pop(name).stop(removed=True)
            for definition in steps.update:
                await self._runners[definition.name].update(definition, reregister=False)
            for definition in steps.reregister:
                await self._runners[definition.name].update(definition, reregister=True)
            for definition in steps.start:
                runner = ResourceRunner(
                    definition, self._context, usage=self._usage, edge=self._edge
                )
                self._runners[definition.name] = runner
                runner.start()
            self._config = config
            self._notify()
            return steps

    async def stop(self, *, timeout: float = 5.0) -> tuple[str, ...]:  # noqa: ASYNC109
        """Stop every plugin (streams end, sockets removed); return straggler task names."""
        async with self._lock:
            stragglers = list(await self._tasks.stop(timeout=timeout))
            runners, self._runners = list(self._runners.values()), {}
            results = await asyncio.gather(*(r.stop(timeout=timeout) for r in runners))
            self._config = Config(resources=())
            self._notify()
            self._trimmer.cancel()
        for names in results:
            stragglers.extend(names)
        log.info("stopped %d resource(s)", len(runners))
        return tuple(stragglers)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- observation -------------------------------------------------------------

    @property
    def watching(self) -> bool:
        """Whether the kubelet directory is watched now (kubelet restarts are seen)."""
        return self._watching.is_set()

    def status(self) -> dict[str, PluginStatus]:
        return {name: r.status() for name, r in sorted(self._runners.items())}

    async def wait_for(
        self,
        predicate: Callable[[Statuses], bool],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, PluginStatus]:
        """Wait until ``predicate(status())`` holds; raises TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed
                statuses = self.status()
                if predicate(statuses):
                    return statuses
                await changed.wait()

    def _released(self, releases: tuple[Release, ...]) -> None:
        for release in releases:
            runner = self._runners.get(release.resource)
            if runner is not None:
                runner.released(release)

    def _usage_changed(self) -> None:
        for runner in self._runners.values():
            runner.usage_changed()

    def _notify(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()
        self._trimmer.poke()

    # -- hotplug -----------------------------------------------------------------

    def rescan(self, reason: str) -> None:
        """Wake every resource's discovery now; the kubelet hears only of real changes."""
        if self._runners:
            log.debug("rescanning %d resource(s): %s", len(self._runners), reason)
        for runner in self._runners.values():
            runner.rescan()

    async def _watch_devices(self) -> None:
        await watch_devices(
            self._settings.dev_root,
            self._on_dev_change,
            settle=self._settings.hotplug_settle,
            on_ready=lambda: self.rescan("device watch (re)started"),
        )

    def _on_dev_change(self, change: DevChange) -> None:
        self.rescan(change.describe())

    # -- the kubelet watch ---------------------------------------------------------

    async def _watch(self) -> None:
        try:
            await watch_plugin_dir(
                self._settings.plugin_dir, self._on_dir_change, on_ready=self._watching.set
            )
        finally:
            self._watching.clear()

    def _on_dir_change(self, change: DirChange) -> None:
        kubelet_new = KUBELET_SOCKET_NAME in change.created
        if kubelet_new:
            self._metrics.kubelet_restart()
        for runner in self._runners.values():
            runner.edge.plugin_dir_changed(change)
            if change.lost:
                runner.kick("kubelet directory replaced")
            elif kubelet_new:
                runner.kick("kubelet.sock created")


def all_registered(names: Iterable[str] | None = None) -> Callable[[Statuses], bool]:
    """A ``wait_for`` predicate: every (or every named) resource is registered."""
    wanted = None if names is None else set(names)

    def check(statuses: Statuses) -> bool:
        relevant = [s for n, s in statuses.items() if wanted is None or n in wanted]
        return bool(relevant) and all(s.registered for s in relevant)

    return check
