"""Everything that runs for one resource: discovery, health, its edge.

Guarded tasks ``<name>/discovery`` (a rescan every ``rescan_interval``, on
hotplug or a changed definition), ``<name>/health`` (with a probe) and the
edge's. The edge is first woken after the first successful scan, so the
kubelet never sees a transient empty list; a failed scan is retried with
backoff and touches nothing else.

The CDI spec (``cdisync.py``) is removed when the resource leaves the config
or turns ``cdi`` off, and kept on shutdown: the kubelet restarts containers
from its checkpointed answers (CDI names included) while we are down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet, wait_event
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import clip, first_of
from genericdp.health import HealthMonitor, failure_reason
from genericdp.hooks.execution import ExecResult
from genericdp.runtime.backend import Backend, ResourceParts, device_ids
from genericdp.runtime.budget import Kept, ids_each
from genericdp.runtime.cdisync import CdiSync
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.edge import Edge, Kickable, PluginStatus
from genericdp.runtime.recorder import exec_result
from genericdp.runtime.state import DeviceState
from genericdp.runtime.usage import HandOuts, in_use

log = logging.getLogger(__name__)


class ResourceRunner:
    """Discovery, health and the kubelet-facing edge of one resource."""

    def __init__(
        self,
        definition: ResourceDefinition,
        context: ResourceContext,
        backend: Backend,
        *,
        state: DeviceState | None = None,
    ) -> None:
        """``state``: start from units known already (benchmarks build large ones)."""
        self._definition = definition
        self._backend = backend
        self.state = state or DeviceState(device_ids(backend, definition))
        self._usage = backend.usage  # shared by every resource
        self._context = context
        self._cdi = CdiSync(context.settings.cdi_dir)
        self.edge: Edge = backend.edge(
            ResourceParts(lambda: self._definition, self.state, context, self._cdi)
        )
        self._rescan = asyncio.Event()
        self.discovered = False  # whether the first scan is done (before it, no units: nothing yet)
        self._kept = Kept((), 0)
        self._tasks = TaskSet(log)
        self._monitor: HealthMonitor | None = None

    @property
    def definition(self) -> ResourceDefinition:
        return self._definition

    @property
    def name(self) -> str:
        return self._definition.name

    def status(self) -> PluginStatus:
        status = self.edge.status()
        if not self._kept.left_out:
            return status
        return replace(status, left_out=self._kept.left_out, limited=self._kept.note(self.name))

    def start(self) -> None:
        if isinstance(self._usage, HandOuts):
            self._usage.watch(self.name, self._allocations_changed)
        self._spawn("discovery", self._discovery_loop)
        self._spawn(self.edge.task, self.edge.run)
        self._start_health()

    def _spawn(self, what: str, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Task ``<name>/<what>``, restarted with backoff; its log lines carry ``resource``."""
        fields = {"resource": self.name}
        self._tasks.spawn(f"{self.name}/{what}", factory, backoff=Backoff(), log_fields=fields)

    def kick(self, reason: str, *, renew: bool = False) -> None:
        """Tell the kubelet again (it restarted...), once the first scan is done."""
        if self.discovered and isinstance(self.edge, Kickable):
            self.edge.kick(reason, renew=renew)

    def rescan(self) -> None:
        """Run discovery again now (hotplug); requests during a scan merge into one more."""
        self._rescan.set()

    async def update(self, definition: ResourceDefinition, *, renew: bool) -> None:
        """Apply a changed definition in place; ``renew``: tell the kubelet anew."""
        with logsetup.fields(resource=self.name):
            old, self._definition = self._definition, definition
            # The device list follows the new naming (the device plugin's count or sharing).
            self.state.set_ids(device_ids(self._backend, definition))
            self._rescan.set()  # matchers or grouping may have changed
            if old.allocate.cdi and not definition.allocate.cdi:
                await self._cdi.retract(self.name)  # gone when apply returns, not at the next scan
            if old.health != definition.health:
                await self._tasks.cancel(f"{self.name}/health")
                self._start_health()  # a new probe starts over: Unhealthy until probed
            if renew:
                self.kick("options changed", renew=True)

    async def stop(self) -> tuple[str, ...]:
        """Cancel the tasks (5 s to stop), then close the edge; a unit in use stays
        owed its cleanup (``owed.py``)."""
        with logsetup.fields(resource=self.name):
            stragglers = await self._tasks.stop(timeout=5.0)
            self._context.budget.release(self.name)
            if isinstance(self._usage, HandOuts):
                self._usage.watch(self.name, None)
            return (*stragglers, *await self.edge.close())

    async def retract(self) -> None:
        """The resource is no longer served here: its CDI spec goes; each unit in use
        stays owed the hook of the definition it was handed out under."""
        await self._cdi.retract(self.name)
        used = in_use(self._usage, self.name)
        for unit in self.state.units.values():
            await self._keep_owed(unit, used)

    def _allocations_changed(self) -> None:
        # Unbounded: the next free IDs appear with the Allocate, not at the next
        # poll. Bounded: an Allocate (of present units) cannot change the list,
        # and stays O(request).
        if self.state.ids.follows_use:
            self.usage_changed()

    def usage_changed(self) -> None:
        """What containers hold changed: vanished units and unbounded IDs follow it
        (not before the first scan: every held unit would look vanished)."""
        if not self.discovered:
            return
        gone_before = self.state.gone
        for unit_id in self.state.set_in_use(self._usage.held(self.name)):
            with logsetup.fields(resource=self.name, unit=unit_id):
                log.info(
                    "%s: unit %s vanished while in use and is released now: no longer listed",
                    self.name,
                    clip(unit_id),
                )
        # Held but not found (gone before List showed it held, or while we were down).
        for unit_id in sorted(self.state.gone - gone_before):
            self._log_vanished(unit_id)

    def _log_vanished(self, unit_id: str) -> None:
        with logsetup.fields(resource=self.name, unit=unit_id):
            log.warning(
                "%s: unit %s vanished while a container holds it: listed Unhealthy"
                " until the kubelet releases it",
                self.name,
                clip(unit_id),  # from PodResources: a peer's string
            )

    async def _keep_owed(self, unit: Unit, in_use: frozenset[str]) -> None:
        """A unit held (of ``in_use``) is owed its cleanup, run once when it is released."""
        if any(self.state.ids.unit_of(d) == unit.id for d in in_use):
            await self._context.owed.kept(self._definition, (unit,))

    def _start_health(self) -> None:
        check = self._definition.health
        self._monitor = None
        self.state.expect_probes(check is not None)
        if check is None:
            return
        monitor = self._monitor = HealthMonitor(
            self.name,
            check,
            lambda: tuple(self.state.units.values()),
            self._health_changed,
            node_name=self._context.settings.node_name,
            on_result=self._probed,
            logger=log,
            roots=self._context.roots,
        )
        self._spawn("health", monitor.run)

    def _probed(self, unit_id: str, result: ExecResult) -> None:
        self._context.recorder.health_probe(self.name, exec_result(result), result.duration)
        check = self._definition.health
        failure = None if result.ok or check is None else failure_reason(check, result)
        self.state.note_probe(unit_id, failure)

    def _health_changed(self, unhealthy: frozenset[str]) -> None:
        probed = self._monitor.probed if self._monitor is not None else ()
        if self.state.set_unhealthy(unhealthy, probed=probed):
            log.info(
                "%s: unhealthy units now: %s", self.name, ", ".join(sorted(unhealthy)) or "none"
            )

    async def _discovery_loop(self) -> None:
        while True:
            self._rescan.clear()
            definition = self._definition
            units = self._within_budget(
                definition,
                await asyncio.to_thread(self._context.discover, definition, self._context.roots),
            )
            # Before set_units: ListAndWatch must not offer a unit the spec lacks.
            await self._cdi.sync(definition, units)
            before, gone, fault = self.state.units, self.state.gone, self.state.fault
            self.usage_changed()  # who holds what now decides whether a vanished unit stays
            changed = self.state.set_units(units)
            if self.state.fault != fault:
                if self.state.fault is not None:
                    log.warning("%s: every unit is Unhealthy: %s", self.name, self.state.fault)
                else:
                    log.info("%s: required device nodes present again", self.name)
            if changed:
                ids = first_of(sorted(u.id for u in units), 8, empty="none")
                log.info("%s: %d units: %s", self.name, len(units), ids)
                if self._monitor is not None:
                    self._monitor.poke()  # new units are Unhealthy until probed: probe now
                used, found = in_use(self._usage, self.name), {u.id for u in units}
                for unit in before.values():
                    if unit.id not in found:
                        await self._keep_owed(unit, used)
                self._log_held(before.keys(), gone)
            if not self.discovered:
                self.discovered = True
                self._context.on_status()  # node labels wait for every first scan
                await self._usage_settled()
                self.edge.wake()
            await wait_event(self._rescan, self._context.settings.rescan_interval)

    def _within_budget(
        self, definition: ResourceDefinition, found: Sequence[Unit]
    ) -> tuple[Unit, ...]:
        """The units the node's limits let this resource serve; said once per change."""
        kept = self._context.budget.keep(self.name, found, ids_each(definition))
        before, self._kept = self._kept, kept
        if (kept.left_out, kept.why) != (before.left_out, before.why):
            if kept.left_out:
                log.warning("%s", kept.note(self.name))
            elif before.left_out:
                log.info("%s: every unit found is served again", self.name)
            self._context.on_status()
        return kept.units

    def _log_held(self, before: AbstractSet[str], gone_before: frozenset[str]) -> None:
        """Say which units vanished while held, or came back."""
        gone = self.state.gone
        for unit_id in sorted((gone - gone_before) & before):
            self._log_vanished(unit_id)
        for unit_id in sorted(gone_before - gone):
            if unit_id in self.state.units:
                with logsetup.fields(unit=unit_id):
                    log.info("%s: unit %s is back with the same ID", self.name, unit_id)

    async def _usage_settled(self) -> None:
        """Before the first Register: learn what containers hold, so the first list has
        every ID the kubelet's checkpoint holds; bounded, for a kubelet without PodResources."""
        timeout = self._context.settled_timeout
        if timeout > 0 and not await wait_event(self._usage.settled, timeout):
            log.warning(
                "%s: PodResources did not answer within %.0fs: registering without"
                " knowing which IDs are held",
                self.name,
                timeout,
            )
        self.usage_changed()
