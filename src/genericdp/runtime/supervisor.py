"""The supervisor: one ``ResourceRunner`` per resource, reconciled, watched.

``apply(config)`` is the single entry point for a config, at start and on
reload. A resource whose ``nodeSelector`` stops matching stops as a removed
one does: units in use stay with their containers and are cleaned once
released, with the hook they were handed out under (``owed.py``). The
backend's daemon-wide tasks reach the resources through the supervisor, their
``Fleet``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType, TracebackType
from typing import Self

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet
from genericdp.allocation.cdi import remove_stale_specs
from genericdp.config.model import Config, ResourceDefinition
from genericdp.discovery import discover as default_discover
from genericdp.errors import HookError
from genericdp.hooks import CLEANUP, HookRun, HookRunner
from genericdp.hooks import run_hook as default_hook_runner
from genericdp.runtime.backend import Backend, Gauge, KeepsRecords, Registers
from genericdp.runtime.context import Discover, ResourceContext
from genericdp.runtime.devwatch import watch_devices
from genericdp.runtime.edge import Edge, PluginStatus
from genericdp.runtime.owed import Release
from genericdp.runtime.owedrecords import Record
from genericdp.runtime.reconcile import NodeLabels, Plan, plan, served
from genericdp.runtime.recorder import NO_METRICS, Recorder, TimedHooks
from genericdp.runtime.resource import ResourceRunner
from genericdp.runtime.state import DeviceState
from genericdp.runtime.usage import HandOuts, in_use
from genericdp.settings import Settings

log = logging.getLogger(__name__)

Statuses = Mapping[str, PluginStatus]


class Supervisor:
    """Runs the resources of a config, served by ``backend``. ``node_labels`` are what
    ``nodeSelector`` matches (None: unknown, so no resource with a selector is served)
    until ``set_node_labels``."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        *,
        discover: Discover | None = None,
        run_hook: HookRunner | None = None,
        metrics: Recorder | None = None,
        cleanup_backoff: Callable[[], Backoff] | None = None,
        node_labels: NodeLabels = None,
    ) -> None:
        self._settings = settings
        self._backend = backend
        run_hook = run_hook or default_hook_runner
        self._context = ResourceContext(
            settings,
            discover=discover or default_discover,
            run_hook=run_hook if metrics is None else TimedHooks(run_hook, metrics),
            recorder=metrics or NO_METRICS,
            cleanup_backoff=cleanup_backoff,
            on_status=self._notify,
            settled_timeout=backend.settled_timeout,
            owed_records=backend.owed_records,
        )
        self._runners: dict[str, ResourceRunner] = {}
        self._tasks = TaskSet(log)
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._config = Config(resources=())
        self._labels = _frozen(node_labels)
        self._served: tuple[ResourceDefinition, ...] = ()  # what the runners run
        self._skipped: dict[str, str] = {}  # resources of the config not served, and why
        self._stopping: set[str] = set()  # resources being removed
        self._configured: frozenset[str] = frozenset()  # names in the config being applied
        self._owed = self._context.owed

    @property
    def config(self) -> Config:
        return self._config

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def recorder(self) -> Recorder:
        return self._context.recorder

    @property
    def tasks(self) -> TaskSet:
        return self._tasks

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, config: Config, *, tidy: bool = True) -> Plan:
        """Tidy what a predecessor left, start the backend's tasks, then apply ``config``.

        ``tidy`` False (``serve`` with nothing to serve until its config is
        fixed) keeps every CDI spec: the config that wrote them may come back."""
        if tidy:
            keep = [d.name for d in config.resources if d.allocate.cdi]
            for path in await asyncio.to_thread(remove_stale_specs, self._settings.cdi_dir, keep):
                log.info("removed stale CDI spec %s", path)
        await asyncio.to_thread(self._owed.load)
        self._watch_uncleaned_soon()  # an admin may release what a predecessor recorded
        # Not awaited: once ready it asks every resource to rescan, so nothing is missed.
        self._tasks.spawn("device-watch", self._watch_devices, backoff=Backoff(maximum=10.0))
        await self._backend.start(self)
        steps = await self.apply(config)
        self._backend.started(self)
        return steps

    async def apply(self, config: Config, *, if_changed: bool = False) -> Plan:
        """Reconcile the running resources with ``config``; ``if_changed`` (a reload): an
        empty plan leaves everything as it is, unlogged."""
        async with self._lock:
            return await self._apply(config, if_changed=if_changed)

    async def _apply(self, config: Config, *, if_changed: bool) -> Plan:
        if isinstance(self._backend, KeepsRecords):
            self._backend.configured(config)  # before a removed resource's units are released
        self._configured = frozenset(d.name for d in config.resources)
        wanted, skipped = served(config.resources, self._labels)
        self._say_skipped(skipped)
        renews = backend.renews if isinstance(backend := self._backend, Registers) else None
        steps = plan(self._served, wanted, renews)
        if if_changed and steps.empty:
            if config != self._config:  # a resource not served here changed
                self._config = config
            return steps
        changing = {*steps.stop, *(d.name for d in (*steps.update, *steps.renew, *steps.start))}
        # A line about one resource carries it as a field, as its own lines do.
        about = {"resource": next(iter(changing))} if len(changing) == 1 else {}
        with logsetup.fields(**about):
            log.info("applying config: %s", steps)
        for name in steps.stop:
            # Counted as served while it stops: its cleanup reads what the backend
            # knows is in use, which the backend forgets once nothing is served.
            self._stopping.add(name)
            try:
                runner = self._runners.pop(name)
                await runner.retract()  # before a release can reach the owed cleanups
                await runner.stop()
                self._clean_unheld(runner)
            finally:
                self._stopping.discard(name)
        for definition in steps.update:
            await self._runners[definition.name].update(definition, renew=False)
        for definition in steps.renew:
            await self._runners[definition.name].update(definition, renew=True)
        for definition in steps.start:
            runner = ResourceRunner(definition, self._context, self._backend)
            self._runners[definition.name] = runner
            for unit_id in self._owed.out_of_service(definition.name):
                runner.state.set_cleaning(unit_id, cleaning=True)
            runner.start()
        self._config, self._served = config, wanted
        self._notify()
        return steps

    @property
    def node_labels(self) -> NodeLabels:
        return self._labels

    @property
    def skipped(self) -> Mapping[str, str]:
        """Resources of the config this node does not serve, and why (``nodeSelector``)."""
        return MappingProxyType(self._skipped)

    async def set_node_labels(self, labels: NodeLabels) -> Plan:
        """The node's labels changed: serve the resources whose selector matches them now."""
        async with self._lock:
            frozen = _frozen(labels)
            if frozen == self._labels:
                return Plan()
            self._labels = frozen
            if not any(d.node_selector is not None for d in self._config.resources):
                return Plan()
            log.info("node labels changed: applying the config again")
            return await self._apply(self._config, if_changed=True)

    def _say_skipped(self, skipped: dict[str, str]) -> None:
        """Log a resource's not being served when that, or why, changes: not at every reload."""
        news = {n: why for n, why in skipped.items() if self._skipped.get(n) != why}
        self._skipped = skipped
        if news:
            log.info(
                "not serving on this node: %s",
                "; ".join(f"{name} ({why})" for name, why in sorted(news.items())),
            )

    def shutting_down(self) -> None:
        """The daemon stops (not a reload): its backend keeps what should outlast it."""
        if isinstance(self._backend, KeepsRecords):
            self._backend.shutting_down()

    async def stop(self) -> tuple[str, ...]:
        """Stop every resource; the names of the tasks that did not stop within 5 s."""
        async with self._lock:
            stragglers = list(await self._tasks.stop(timeout=5.0))
            runners, self._runners = list(self._runners.values()), {}
            results = await asyncio.gather(*(r.stop() for r in runners))
            self._config, self._served = Config(resources=()), ()
            self._notify()
        stragglers += [name for names in results for name in names]
        log.info("stopped %d resource(s)", len(runners))
        return tuple(stragglers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- observation -------------------------------------------------------------

    def gauges(self) -> tuple[Gauge, ...]:
        return (*self._backend.gauges(), self._owed.gauge())

    def notes(self) -> tuple[str, ...]:
        """What /readyz lists without failing (units kept out of service)."""
        backend = self._backend.notes() if isinstance(self._backend, KeepsRecords) else ()
        return (*backend, *self._owed.notes())

    def status(self) -> dict[str, PluginStatus]:
        return {name: r.status() for name, r in sorted(self._runners.items())}

    async def wait_for(
        self,
        predicate: Callable[[Statuses], bool],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, PluginStatus]:
        """Wait until ``predicate(status())`` holds; TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed
                statuses = self.status()
                if predicate(statuses):
                    return statuses
                await changed.wait()

    def labelled(self) -> Iterator[tuple[ResourceDefinition, DeviceState, bool]]:
        """Each served resource, its state and whether that is settled (scanned once, every
        unit probed once): what node labels are made of."""
        for runner in list(self._runners.values()):
            state, probed = runner.state, runner.state.probed
            settled = probed is None or state.units_view().keys() <= probed
            yield runner.definition, state, runner.discovered and settled

    def next_change(self) -> asyncio.Event:
        """Set at the next change of the resources served or of their status."""
        return self._changed

    # -- the Fleet the backend's tasks see ---------------------------------------

    def watched(self) -> frozenset[str]:
        return frozenset(self._runners) | self._stopping | self._owed.resources()

    def edges(self) -> Iterator[Edge]:
        return (runner.edge for runner in self._runners.values())

    def kick(self, reason: str) -> None:
        for runner in self._runners.values():
            runner.kick(reason)

    def released(self, releases: Iterable[Release]) -> None:
        for release in releases:  # of resources no edge serves: not the runners'
            handed = self._owed.get(release.resource, release.unit_id)
            if release.resource not in self._runners and handed is not None:
                self._clean_owed(release, handed)

    # -- cleanups owed by resources no longer served -----------------------------

    def _clean_unheld(self, runner: ResourceRunner) -> None:
        """After ``runner`` stopped: clean its owed units nobody holds now (their
        cleanup was cut short by the stop)."""
        resource = runner.name
        used = {runner.state.ids.unit_of(d) for d in in_use(self._backend.usage, resource)}
        for unit_id in self._owed.units_of(resource):
            handed = self._owed.get(resource, unit_id)
            if (resource, unit_id) in self._owed.unsettled:
                continue  # whether it is held is not known yet (``_settle_owed``)
            if unit_id not in used and handed is not None:
                self._clean_owed(Release(resource, unit_id, ()), handed)

    def _clean_owed(self, release: Release, handed: Record) -> None:
        """Run the hook a unit of a resource not served was handed out under, until it
        passes; its definition gone from the config, keep the unit uncleaned instead."""
        key = (release.resource, release.unit_id)
        if key in self._owed.cleaning:
            return
        self._owed.cleaning.add(key)
        self._set_cleaning(*key, cleaning=True)

        async def clean() -> None:
            try:
                await self._run_owed(release, handed)
            finally:
                self._owed.cleaning.discard(key)
                self._set_cleaning(*key, cleaning=key in self._owed.uncleaned)
                self._watch_uncleaned_soon()

        fields = {"resource": release.resource, "unit": release.unit_id}
        name = f"{release.resource}/owed-cleanup/{release.unit_id}"
        self._tasks.spawn(name, clean, log_fields=fields, finishable=True)

    async def _run_owed(self, release: Release, handed: Record) -> None:
        resource, unit_id = release.resource, release.unit_id
        backoff = (self._context.cleanup_backoff or (lambda: Backoff(initial=1.0, maximum=60.0)))()
        while True:
            if resource not in self._configured:
                why = f"{resource} left the config while a container held the unit"
                await self._owed.owe(resource, unit_id, release.device_ids, why)
                return
            run = HookRun(
                CLEANUP,
                handed.hook,
                resource,
                (handed.unit,),
                release.device_ids,
                node_name=self._settings.node_name,
                logger=log,
            )
            try:
                await self._context.run_hook(run)
            except HookError as exc:
                log.error(
                    "%s: unit %s out of service until its cleanup passes: %s",
                    resource,
                    unit_id,
                    exc,
                )
                await asyncio.sleep(backoff.next())
                continue
            await self._owed.done(resource, unit_id)
            return

    def _watch_uncleaned_soon(self) -> None:
        if self._owed.uncleaned and "uncleaned" not in self._tasks.names:
            self._tasks.spawn("uncleaned", self._watch_uncleaned, finishable=True)

    async def _watch_uncleaned(self) -> None:
        """Serve again the uncleaned units an admin released (deleted their file)."""
        while self._owed.uncleaned:
            await asyncio.sleep(1.0)
            for resource, unit_id in await asyncio.to_thread(self._owed.released_by_admin):
                self._set_cleaning(resource, unit_id, cleaning=False)

    def _set_cleaning(self, resource: str, unit_id: str, *, cleaning: bool) -> None:
        runner = self._runners.get(resource)
        if runner is not None:
            runner.state.set_cleaning(unit_id, cleaning=cleaning)

    def usage_changed(self) -> None:
        if self._owed.unsettled:
            self._settle_owed()
        for runner in self._runners.values():
            runner.usage_changed()

    def _settle_owed(self) -> None:
        """What is held is known: a unit owed a cleanup from before the restart and
        released meanwhile is cleaned now; one still held is, at its release."""
        for key in sorted(self._owed.unsettled):
            self._owed.unsettled.discard(key)
            resource, unit_id = key
            handed = self._owed.get(resource, unit_id)
            if handed is None:
                continue
            with logsetup.fields(resource=resource, unit=unit_id):
                usage = self._backend.usage
                if isinstance(usage, HandOuts) and unit_id in usage.units_in_use(resource):
                    log.info(
                        "%s: unit %s, handed out before the restart, is still held: cleaned"
                        " at its release with the hook it was handed out under",
                        resource,
                        unit_id,
                    )
                    self._set_cleaning(resource, unit_id, cleaning=False)
                else:
                    log.info(
                        "%s: unit %s was released while the daemon was down: cleaned now"
                        " with the hook it was handed out under",
                        resource,
                        unit_id,
                    )
                    self._clean_owed(Release(resource, unit_id, ()), handed)

    def _notify(self) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    # -- hotplug -----------------------------------------------------------------

    def rescan(self, reason: str) -> None:
        """Wake every resource's discovery now."""
        if self._runners:
            log.debug("rescanning %d resource(s): %s", len(self._runners), reason)
        for runner in self._runners.values():
            runner.rescan()

    async def _watch_devices(self) -> None:
        await watch_devices(
            self._settings.dev_root,
            lambda change: self.rescan(change.describe()),
            settle=self._settings.hotplug_settle,
            on_ready=lambda: self.rescan("device watch (re)started"),
        )


def _frozen(labels: NodeLabels) -> NodeLabels:
    return None if labels is None else MappingProxyType(dict(labels))


def all_registered() -> Callable[[Statuses], bool]:
    """A ``wait_for`` predicate: every resource is registered."""
    return lambda statuses: bool(statuses) and all(s.registered for s in statuses.values())
