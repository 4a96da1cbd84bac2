"""A backend: how the kubelet is told of the daemon's resources, behind one protocol.

The runtime does not know which backend (``deviceplugin/``, ``dra/``) serves a
resource; optional capabilities are ``Registers`` and ``KeepsRecords``. Status
and readiness are its edges' ``status()``: ``registrations`` is what
``/readyz`` waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from genericdp.config.model import Config, ResourceDefinition
from genericdp.runtime.cdisync import CdiSync
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.edge import Edge
from genericdp.runtime.owed import Release
from genericdp.runtime.recorder import Recorder
from genericdp.runtime.state import ONE_PER_UNIT, DeviceIds, DeviceState
from genericdp.runtime.usage import Usage

if TYPE_CHECKING:
    from genericdp.aio import TaskSet


@dataclass(frozen=True)
class ResourceParts:
    """What a resource's edge may use of it; each backend's edge takes what it needs."""

    definition: Callable[[], ResourceDefinition]  # the current one (a reload swaps it)
    state: DeviceState
    context: ResourceContext
    cdi: CdiSync  # its CDI spec (an Allocate checks its units are in it)


@dataclass(frozen=True)
class Gauge:
    """One sample of a backend's own metrics, read at scrape time: a gauge, or a
    ``counter`` (a total that only grows, its name ending ``_total``). Samples of
    one name make one family; ``labels`` tell them apart."""

    name: str
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    counter: bool = False


class Fleet(Protocol):
    """What a backend's daemon-wide tasks see of the resources: the supervisor."""

    @property
    def recorder(self) -> Recorder: ...

    @property
    def tasks(self) -> TaskSet:
        """Where the backend spawns its daemon-wide tasks (the supervisor stops them)."""

    def watched(self) -> frozenset[str]:
        """The resources whose holds matter: served, stopping, or owed a cleanup."""

    def edges(self) -> Iterable[Edge]: ...

    def kick(self, reason: str) -> None:
        """Kick every ``Kickable`` edge whose first scan is done (the kubelet restarted)."""

    def released(self, releases: Iterable[Release]) -> None:
        """Nobody holds these units of resources no edge serves: their owed cleanups run."""

    def usage_changed(self) -> None:
        """What containers hold changed, or was learnt (the PodResources poller's
        first answer): every resource's list follows it."""


class Backend(Protocol):
    """What the supervisor needs of a backend."""

    @property
    def usage(self) -> Usage: ...

    @property
    def settled_timeout(self) -> float:
        """How long a resource's first wake waits for ``usage.settled`` (0: not at all)."""

    @property
    def owed_records(self) -> str | None:
        """The prefix of the files that keep its owed cleanups in ``stateDir``
        (``runtime/owedrecords.py``); None: it keeps them itself (DRA's checkpoint)."""

    @property
    def where(self) -> str:
        """Where it serves, for the daemon's first line."""

    def edge(self, parts: ResourceParts) -> Edge: ...

    async def start(self, fleet: Fleet) -> None:
        """Before the first apply: tidy what a predecessor left and spawn the
        daemon-wide tasks in ``fleet.tasks``."""

    def started(self, fleet: Fleet) -> None:
        """After the first apply: tasks that need the resources known."""

    def gauges(self) -> tuple[Gauge, ...]: ...


@runtime_checkable
class KeepsRecords(Protocol):
    """What a backend that keeps its own records of what it handed out (DRA's
    checkpoint, its slices) also answers."""

    def configured(self, config: Config) -> None:
        """The config being applied: every resource of it, served on this node or not."""

    def notes(self) -> tuple[str, ...]:
        """What ``/readyz`` should list without failing (units kept out of service)."""

    def shutting_down(self) -> None:
        """The daemon is stopping, not reloading (the DRA slices outlast it)."""


@runtime_checkable
class Registers(Protocol):
    """What a backend that registers each resource with the kubelet (the device plugin)
    also answers; the runtime lists any other's units as one device each, never anew."""

    def device_ids(self, definition: ResourceDefinition) -> DeviceIds: ...

    def renews(self, before: ResourceDefinition, after: ResourceDefinition) -> bool:
        """Whether this change must be told to the kubelet anew (a new socket)."""


def device_ids(backend: Backend, definition: ResourceDefinition) -> DeviceIds:
    return backend.device_ids(definition) if isinstance(backend, Registers) else ONE_PER_UNIT
