"""The embedded DRA kubelet of ``simulate`` (``genericdp.dra.embedded``) with what the
tests look at: a typed event log stamped by an injected clock, the health streams,
and views on health and prepared claims.

- Health (the ResourceHealthStatus gate): for each registered plugin that
  advertises a health service the kubelet knows (``pickHealthService``: the
  first of ``health_services`` found in ``supported_versions``; 1.37 knows
  ``v1.DRAResourceHealth`` then ``v1alpha1.DRAResourceHealth``),
  ``NodeWatchResources`` of that version on its endpoint; none advertised,
  no stream. The 1.36 kubelet (``KUBELET_1_36_HEALTH``,
  ``health_announced=False``) knows only v1alpha1 and opens it right after
  registration whatever ``supported_versions`` says (seen on 1.36.2). It is
  reopened every 5 s after it ends or fails (``wait.UntilWithContext``),
  except after UNIMPLEMENTED on 1.37 (the driver declines health: the kubelet
  stops watching); each report is stamped with the
  kubelet's clock, a device not reported for 30 s reads Unknown
  (healthinfo.go), and the driver's entries are dropped when its stream ends.
- Multiple allocations (KEP-5075, DRAConsumableCapacity on in 1.36): several
  claims may name the same device, and one claim the same device more than
  once; the kubelet keeps each claim's devices apart (its claim info cache
  is per claim) and every pod of every claim naming a device shows that
  device's health in its ``allocatedResourcesStatus`` (``claim_health``).
  Each prepared device keeps the ``share_id`` a v1 answer gives (``prepared``;
  None over v1beta1, which has no such field).

Tests wait for a state with ``wait_until``, woken by each event and health
report, never by polling.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import grpc

from genericdp.dra import embedded
from genericdp.dra.embedded import DraKubeletError
from genericdp.dra.embedded.calls import Plugin, PreparedDevice
from genericdp.dra.embedded.kubelet import KUBELET_SERVICES
from genericdp.grpcservices import Stub
from genericdp.kubeletplugin.claims import ClaimRef
from tests.dra_health import HEALTH_API, DeviceHealth, health_entries

# healthServicesSupportedByKubelet of 1.37, most recent first (1.36: only v1alpha1).
KUBELET_HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
KUBELET_1_36_HEALTH = ("v1alpha1.DRAResourceHealth",)
HEALTH_RETRY = 5.0
HEALTH_TIMEOUT = 30.0


class DraEventKind(StrEnum):
    """What happened, in the embedded DRA kubelet's event log."""

    STARTED = "started"
    STOPPED = "stopped"
    REGISTERED = "registered"
    REFUSED = "refused"  # NotifyRegistrationStatus(false, the kubelet's message)
    DEREGISTERED = "deregistered"  # its registration socket went or was replaced
    HEALTH_STREAM = "health-stream"  # NodeWatchResources opened
    HEALTH_ENDED = "health-ended"  # ... and ended: the driver's health entries are dropped
    PREPARE = "prepare"  # one NodePrepareResources call
    UNPREPARE = "unprepare"  # one NodeUnprepareResources call


@dataclass(frozen=True)
class DraEvent:
    """One entry of the event log; ``at`` comes from the kubelet's clock."""

    kind: DraEventKind
    driver: str
    detail: str
    at: float

    def __str__(self) -> str:
        return f"{self.at:.3f} {self.kind.value} {self.driver or '-'}: {self.detail}"


def _health_task(plugin: Plugin) -> str:
    """The name of its health stream's task (endpoints are unique per driver)."""
    return f"dra-kubelet/health/{plugin.driver}@{plugin.endpoint}"


class EmbeddedDraKubelet(embedded.EmbeddedDraKubelet):
    """``simulate``'s embedded DRA kubelet, with health streams and an event log."""

    def __init__(
        self,
        registry_dir: Path,
        *,
        services: Sequence[str] = KUBELET_SERVICES,
        health: bool = True,
        health_services: Sequence[str] = KUBELET_HEALTH_SERVICES,
        health_announced: bool = True,
        health_retry: float = HEALTH_RETRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._events: list[DraEvent] = []
        super().__init__(registry_dir)
        self.services = tuple(services)
        self.health_enabled = health
        self.health_services = tuple(health_services)
        self.health_announced = health_announced  # False: opened whether advertised or not
        self._health_retry = health_retry
        # (driver, endpoint) -> the chosen health version; None: no health stream
        self._health_of: dict[tuple[str, str], str | None] = {}
        self._health: dict[str, dict[tuple[str, str], DeviceHealth]] = {}

    # -- what tests look at ------------------------------------------------------

    def chosen_service(self, driver: str) -> str | None:
        plugins = self._plugins.get(driver)
        return plugins[-1].service if plugins else None

    def health_service(self, driver: str) -> str | None:
        """The health version the kubelet watches the driver's newest plugin with, if any."""
        plugins = self._plugins.get(driver)
        return self._health_of.get((driver, plugins[-1].endpoint)) if plugins else None

    def device_health(self, driver: str) -> dict[tuple[str, str], tuple[str, str]]:
        """(pool, device) -> (health, message) as the kubelet reads them (timeouts applied)."""
        now = self._clock()
        return {
            key: (h.health, h.message) if now - h.seen <= HEALTH_TIMEOUT else ("Unknown", "")
            for key, h in self._health.get(driver, {}).items()
        }

    def prepared(self, uid: str) -> tuple[PreparedDevice, ...] | None:
        return self._prepared.get(uid)

    def claims_of(self, pool: str, device: str) -> tuple[str, ...]:
        """The UIDs of the prepared claims naming ``device`` of ``pool``, sorted."""
        return tuple(
            sorted(
                uid
                for uid, devices in self._prepared.items()
                if any((d.pool, d.device) == (pool, device) for d in devices)
            )
        )

    def claim_health(self, driver: str, uid: str) -> dict[str, tuple[str, str]]:
        """device -> (health, message) as a pod of claim ``uid`` shows them in its
        ``allocatedResourcesStatus``: a device not reported reads Unknown."""
        health = self.device_health(driver)
        return {
            d.device: health.get((d.pool, d.device), ("Unknown", ""))
            for d in self._prepared.get(uid, ())
        }

    @property
    def events(self) -> tuple[DraEvent, ...]:
        """The event log, oldest first."""
        return tuple(self._events)

    def count(self, kind: DraEventKind, driver: str | None = None) -> int:
        """How many events of ``kind`` (of ``driver``, if given) the log holds."""
        return sum(1 for e in self._events if e.kind is kind and driver in (None, e.driver))

    def describe(self) -> str:
        """The state in words, with the last events."""
        recent = self._events[-10:]
        lines = [super().describe(), "last events:" if recent else "last events: none"]
        lines.extend(f"  {event}" for event in recent)
        return "\n".join(lines)

    async def prepare_pod(
        self,
        driver: str,
        claims: Sequence[ClaimRef],
        *,
        attempts: int = 5,
        backoff: float = 0.05,
    ) -> list[str]:
        """Prepare as the pod worker does, retrying failed syncs; the pod's CDI IDs."""
        for attempt in range(attempts):
            try:
                return await self.prepare(driver, claims)
            except DraKubeletError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(backoff * 2**attempt)
        raise AssertionError("attempts must be at least 1")

    # -- inside --------------------------------------------------------------------

    def _record(self, kind: str, driver: str, detail: str) -> None:
        self._events.append(DraEvent(DraEventKind(kind), driver, detail, self._clock()))
        super()._record(kind, driver, detail)

    def _added(self, plugin: Plugin, offered: Sequence[str]) -> None:
        known = [h for h in self.health_services if h in offered or not self.health_announced]
        health = known[0] if known else None
        self._health_of[plugin.driver, plugin.endpoint] = health
        if self.health_enabled and health is not None:
            self._tasks.spawn(
                _health_task(plugin), lambda: self._health_loop(plugin, health), finishable=True
            )

    async def _drop(self, plugin: Plugin) -> None:
        await self._tasks.cancel(_health_task(plugin))
        self._health_of.pop((plugin.driver, plugin.endpoint), None)
        await super()._drop(plugin)

    async def _health_loop(self, plugin: Plugin, service: str) -> None:
        pb = HEALTH_API[service]
        stub = Stub(plugin.channel, pb.DESCRIPTOR.services_by_name["DRAResourceHealth"])
        where = f"{plugin.endpoint} ({service})"
        while True:
            declined = False
            try:
                stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest())
                self._record(DraEventKind.HEALTH_STREAM, plugin.driver, where)
                async for response in stream:
                    self._health_report(plugin.driver, response)
                ended = "ended by the plugin"
            except grpc.RpcError as exc:
                ended = f"failed: {exc.code().name}"
                declined = exc.code() is grpc.StatusCode.UNIMPLEMENTED
            finally:
                self._health.pop(plugin.driver, None)  # clearDriver on stream exit
                self._changes.notify()
            self._record(DraEventKind.HEALTH_ENDED, plugin.driver, ended)
            if declined:  # the driver declines health reporting: not watched again
                return
            await asyncio.sleep(self._health_retry)

    def _health_report(self, driver: str, response: Any) -> None:
        self._health.setdefault(driver, {}).update(health_entries(response, self._clock()))
        self._changes.notify()  # a report is no event: heartbeats would fill the log
