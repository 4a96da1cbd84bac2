"""Everything that runs for one resource: discovery, health, its plugin.

Named, guarded tasks per resource: ``<name>/discovery`` (first scan,
then a rescan every ``rescan_interval`` or when the definition changes),
``<name>/health`` (when the definition has a probe) and
``<name>/registration`` (the plugin's serve-and-Register loop), and one
``<name>/cleanup/<unit>`` per unit being cleaned up (``release.Cleaner``). The plugin
first registers after the first successful scan, so the kubelet never sees a
transient empty list; a scan that fails is retried with backoff and touches
nothing else.

With ``allocate.cdi`` each scan also brings the resource's CDI spec up to
date (``genericdp.allocation.cdi``) before the new units reach the device list, so the
kubelet can never allocate a unit whose CDI name the runtime cannot resolve
yet. A spec that cannot be written is logged, retried by the next scan and by
Allocate, and until then Allocate of the units it lacks fails with the reason.
The spec is removed when the resource leaves the config or turns ``cdi`` off,
and kept on shutdown: the kubelet restarts containers from its checkpointed
answers (CDI names included) while we are down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genericdp.allocation.cdi import SpecPublisher, qualified_name
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Roots, Unit
from genericdp.errors import CdiSpecError
from genericdp.execution import ExecResult
from genericdp.health import HealthMonitor
from genericdp.hooks import HookRunner
from genericdp.kubelet.devices import unit_id_of
from genericdp.runtime.plugin import ResourcePlugin
from genericdp.runtime.recorder import NO_METRICS, Recorder, exec_result
from genericdp.runtime.release import Cleaner, Release, UsageTracker
from genericdp.runtime.state import DeviceState, free_ids_of
from genericdp.runtime.tasks import Backoff, TaskSet, wait_event

log = logging.getLogger(__name__)

Discover = Callable[[ResourceDefinition, Roots], Sequence[Unit]]


@dataclass(frozen=True)
class ResourceContext:
    """What every resource's runner, plugin and cleaner share: built once by the
    supervisor from its settings, instead of a dozen arguments per constructor."""

    plugin_dir: Path
    roots: Roots
    discover: Discover
    run_hook: HookRunner
    node_name: str = ""
    rescan_interval: float = 60.0
    settle: float = 0.05  # seconds a burst of state changes may take (ListAndWatch)
    recorder: Recorder = NO_METRICS
    cleanup_backoff: Callable[[], Backoff] | None = None
    cdi_dir: Path = Path("/var/run/cdi")
    on_status: Callable[[], None] = lambda: None  # any plugin's status changed
    # The longest a first Register waits for the first PodResources answer
    # (the poller's List timeout is 5 s; 0 with no poller, as in unit tests).
    settled_timeout: float = 0.0


class ResourceRunner:
    """Discovery, health and the device plugin of one resource."""

    def __init__(
        self,
        definition: ResourceDefinition,
        context: ResourceContext,
        *,
        usage: UsageTracker | None = None,
    ) -> None:
        self.state = DeviceState(count=definition.count, free_ids=free_ids_of(definition))
        self._usage = usage or UsageTracker()  # the supervisor's, shared by every resource
        self._context = context
        self._metrics = context.recorder
        self.plugin = ResourcePlugin(
            definition,
            self.state,
            plugin_dir=context.plugin_dir,
            run_hook=context.run_hook,
            node_name=context.node_name,
            on_status=context.on_status,
            settle=context.settle,
            metrics=context.recorder,
            on_claim=self._before_allocate,
            on_allocated=self._allocated,
        )
        self.cleaner = Cleaner(
            self.state,
            lambda: self.plugin.definition,
            run_hook=context.run_hook,
            node_name=context.node_name,
            backoff=context.cleanup_backoff,
        )
        self._roots = context.roots
        self._discover = context.discover
        self._node_name = context.node_name
        self._rescan_interval = context.rescan_interval
        self._rescan = asyncio.Event()
        self._discovered = False
        self._tasks = TaskSet(log)
        # Only touched for a definition with allocate.cdi (or one that had it).
        self._cdi = SpecPublisher(context.cdi_dir)
        self._cdi_lock = asyncio.Lock()  # one write at a time: scans and Allocate retries
        self._cdi_error: str | None = None
        self._monitor: HealthMonitor | None = None

    @property
    def name(self) -> str:
        return self.plugin.definition.name

    def start(self) -> None:
        self._usage.watch(self.name, self._allocations_changed)
        self._spawn("discovery", self._discovery_loop)
        self._spawn("registration", self.plugin.run_registration)
        self._start_health()

    def _spawn(self, what: str, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Task ``<name>/<what>``, restarted with backoff; its log lines carry ``resource``."""
        fields = {"resource": self.name}
        self._tasks.spawn(f"{self.name}/{what}", factory, backoff=Backoff(), log_fields=fields)

    def kick(self, reason: str, *, new_socket: bool = False) -> None:
        """Register again (kubelet restarted...), once the first scan is done."""
        if self._discovered:
            self.plugin.request_registration(reason, new_socket=new_socket)

    def rescan(self) -> None:
        """Run discovery again now (hotplug); requests during a scan merge into one more."""
        self._rescan.set()

    async def update(self, definition: ResourceDefinition, *, reregister: bool) -> None:
        """Apply a changed definition in place; Register again if its options changed."""
        old = self.plugin.definition
        self.plugin.update(definition)
        self._rescan.set()  # matchers or grouping may have changed
        if old.allocate.cdi and not definition.allocate.cdi:
            await self._retract_cdi()  # gone when apply returns, not at the next scan
        if old.health != definition.health:
            await self._tasks.cancel(f"{self.name}/health")
            self._start_health()  # a new probe starts over: Unhealthy until probed
        if reregister:
            self.kick("options changed", new_socket=True)

    async def stop(
        self,
        *,
        timeout: float = 5.0,  # noqa: ASYNC109
        removed: bool = False,
    ) -> tuple[str, ...]:
        """Cancel the tasks, then end streams, stop the server, remove the socket.

        Running cleanups get ``timeout`` to finish. ``removed`` (the resource
        left the config) also cleans every unit in use, once, and waits for it.
        """
        stragglers = await self._tasks.stop(timeout=timeout)
        self._usage.watch(self.name, None)
        await self.plugin.close()
        if removed:
            await self._retract_cdi()
            in_use = self._usage.in_use(self.name)
            for unit in self.state.units.values():
                self._removed(unit, in_use)
            timeout = self.cleaner.drain_timeout(timeout)
        return (*stragglers, *await self.cleaner.stop(timeout))

    def released(self, release: Release) -> None:
        """Nobody holds this unit any more (seen by the PodResources poller)."""
        self.cleaner.released(release)

    def _allocations_changed(self) -> None:
        # Unbounded: the next free IDs appear with the Allocate, not at the next
        # poll. Bounded: an Allocate (of present units) cannot change the list,
        # and stays O(request).
        if self.state.unbounded:
            self.usage_changed()

    def usage_changed(self) -> None:
        """What containers hold changed: vanished units and unbounded IDs follow it."""
        for unit_id in self.state.set_in_use(self._usage.held(self.name)):
            log.info(
                "%s: unit %s vanished while in use and is released now: no longer listed",
                self.name,
                unit_id,
            )

    async def _before_allocate(self, requests: Sequence[tuple[str, ...]]) -> None:
        # The CDI check may refuse the Allocate: before any claim, which cleans.
        if self.plugin.definition.allocate.cdi:
            for device_ids in requests:
                await self._check_cdi(device_ids)
        for device_ids in requests:
            await self._claim(device_ids)

    async def _claim(self, device_ids: tuple[str, ...]) -> None:
        for release in self._usage.claim(self.name, device_ids):
            await self.cleaner.clean_now(release)

    # -- CDI -----------------------------------------------------------------------

    async def _sync_cdi(self, definition: ResourceDefinition, units: Sequence[Unit]) -> None:
        """Bring the spec in line with ``units`` (or remove it: ``cdi`` off); never raises."""
        if not definition.allocate.cdi:
            await self._retract_cdi()
            return
        async with self._cdi_lock:
            try:
                changed = await asyncio.to_thread(self._cdi.publish, definition, units)
            except CdiSpecError as exc:
                self._cdi_failed(str(exc))
                return
        if changed:
            log.info(
                "%s: CDI spec in %s describes %d unit(s)", self.name, self._cdi.cdi_dir, len(units)
            )
        if self._cdi_error is not None:
            log.info("%s: CDI spec written again", self.name)
            self._cdi_error = None

    async def _retract_cdi(self) -> None:
        if not self._cdi.touched:
            return  # the usual case: this resource never had cdi on
        async with self._cdi_lock:
            try:
                removed = await asyncio.to_thread(self._cdi.retract, self.name)
            except CdiSpecError as exc:
                log.warning("%s: %s", self.name, exc)
                return
        self._cdi_error = None
        if removed is not None:
            log.info("%s: removed CDI spec %s", self.name, removed)

    def _cdi_failed(self, message: str) -> None:
        if message != self._cdi_error:
            log.error(
                "%s: %s; Allocate of units missing from it fails until it can be written",
                self.name,
                message,
            )
        self._cdi_error = message

    async def _check_cdi(self, device_ids: tuple[str, ...]) -> None:
        """Refuse units whose CDI name would not resolve, after one more write attempt."""
        definition = self.plugin.definition
        units = self.state.lookup(device_ids).units  # unknown IDs: the plugin says so
        if not self._cdi.unpublished(definition, units):
            return
        # A scan's write failed (or the units changed a moment ago): try again now.
        await self._sync_cdi(definition, tuple(self.state.units.values()))
        missing = self._cdi.unpublished(definition, units)
        if missing:
            names = ", ".join(qualified_name(self.name, u) for u in missing)
            reason = self._cdi_error or "the spec does not describe them yet"
            raise CdiSpecError(f"the runtime could not resolve CDI device(s) {names}: {reason}")

    def _allocated(self, device_ids: tuple[str, ...]) -> None:
        self._usage.handed_out(self.name, device_ids)

    def _removed(self, unit: Unit, in_use: frozenset[str]) -> None:
        held = [d for d in in_use if unit_id_of(d) == unit.id]
        if held:
            self.cleaner.removed(unit, held)

    def _start_health(self) -> None:
        check = self.plugin.definition.health
        self._monitor = None
        self.state.expect_probes(check is not None)
        if check is None:
            return
        monitor = self._monitor = HealthMonitor(
            self.name,
            check,
            lambda: tuple(self.state.units.values()),
            self._health_changed,
            node_name=self._node_name,
            on_result=self._probed,
            logger=log,
        )
        self._spawn("health", monitor.run)

    def _probed(self, _unit_id: str, result: ExecResult) -> None:
        self._metrics.health_probe(self.name, exec_result(result), result.duration)

    def _health_changed(self, unhealthy: frozenset[str]) -> None:
        probed = self._monitor.probed if self._monitor is not None else ()
        if self.state.set_unhealthy(unhealthy, probed=probed):
            log.info(
                "%s: unhealthy units now: %s", self.name, ", ".join(sorted(unhealthy)) or "none"
            )

    async def _discovery_loop(self) -> None:
        while True:
            self._rescan.clear()
            definition = self.plugin.definition
            units = await asyncio.to_thread(self._discover, definition, self._roots)
            # Before set_units: ListAndWatch must not offer a unit the spec lacks.
            await self._sync_cdi(definition, units)
            before, gone = self.state.units, self.state.gone
            self.usage_changed()  # who holds what now decides whether a vanished unit stays
            if self.state.set_units(units):
                log.info("%s: %d units: %s", self.name, len(units), _ids(units))
                if self._monitor is not None:
                    self._monitor.poke()  # new units are Unhealthy until probed: probe now
                in_use, found = self._usage.in_use(self.name), {u.id for u in units}
                for unit in before.values():
                    if unit.id not in found:
                        self._removed(unit, in_use)
                self._log_held(before.keys(), gone)
            if not self._discovered:
                self._discovered = True
                await self._usage_settled()
                self.plugin.request_registration("start")
            await wait_event(self._rescan, self._rescan_interval)

    def _log_held(self, before: Set[str], gone_before: frozenset[str]) -> None:
        """Say what happened to units that vanished while held, or came back."""
        gone = self.state.gone
        for unit_id in sorted((gone - gone_before) & before):
            log.warning(
                "%s: unit %s vanished while a container holds it: listed Unhealthy"
                " until the kubelet releases it",
                self.name,
                unit_id,
            )
        for unit_id in sorted(gone_before - gone):
            if unit_id in self.state.units:
                log.info("%s: unit %s is back with the same ID", self.name, unit_id)

    async def _usage_settled(self) -> None:
        """Before the first Register: learn what containers hold, so the first list
        has every ID the kubelet's checkpoint holds (a unit gone meanwhile, the
        IDs of an unbounded unit). Bounded: a kubelet without PodResources
        must not keep the resource from registering."""
        timeout = self._context.settled_timeout
        if timeout > 0 and not await wait_event(self._usage.settled, timeout):
            log.warning(
                "%s: PodResources did not answer within %.0fs: registering without"
                " knowing which IDs are held",
                self.name,
                self._context.settled_timeout,
            )
        self.usage_changed()


def _ids(units: Sequence[Unit], limit: int = 8) -> str:
    ids = sorted(u.id for u in units)
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return (", ".join(ids[:limit]) or "none") + more
