"""Cleanups owed: a unit handed out is cleaned once, with the hook it was handed out under.

The device plugin's ``Allocator`` records each unit it hands out with the
``cleanup`` hook of the definition of that moment (``handed_out``); the
resource's ``Cleaner`` runs that hook at the unit's release and forgets it
(``done``). The record outlives the resource's runner: a resource that stops
being served while a container holds a unit (its ``nodeSelector`` stopped
matching, it left the config) cleans nothing then; the release, whenever
PodResources shows it, runs the recorded hook (``Supervisor.released``), and
until that hook has passed a runner started for the resource again keeps the
unit out of service. When the definition has left the config by then, no
command the config no longer names is run: the unit is recorded uncleaned
(``uncleaned.py``, in ``stateDir``) and is not handed out until an admin
deletes its file. DRA keeps the same promise through its checkpoint
(``dra/prepare.py``) and the same ``uncleaned`` files.

The records live in memory: a daemon restarted while a container holds a
unit cleans it with the hook of the config it starts with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genericdp.config.model import Exec, ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.runtime import uncleaned
from genericdp.runtime.uncleaned import Uncleaned

if TYPE_CHECKING:
    from genericdp.runtime.backend import Gauge

log = logging.getLogger(__name__)

Key = tuple[str, str]  # resource, unit ID


@dataclass(frozen=True)
class Handed:
    """A unit handed out and not cleaned since: the hook to clean it with."""

    unit: Unit
    hook: Exec


class Owed:
    """The daemon's owed cleanups and uncleaned units (one for every resource)."""

    def __init__(self, directory: Path | None) -> None:
        """``directory``: where uncleaned units are kept (None: in memory only)."""
        self._directory = directory
        self._handed: dict[Key, Handed] = {}
        self.uncleaned: dict[Key, Uncleaned] = {}
        self._seen: uncleaned.DirId = frozenset()
        self.cleaning: set[Key] = set()  # owed cleanups of units no runner cleans, running

    def load(self) -> None:
        """Read the uncleaned units a predecessor recorded."""
        if self._directory is not None:
            self._seen = uncleaned.identity(self._directory)
            self.uncleaned = uncleaned.load(self._directory)

    def handed_out(self, definition: ResourceDefinition, units: Iterable[Unit]) -> None:
        """These units go to a container: each is owed the cleanup hook of ``definition``
        (a unit handed out before and not cleaned since keeps the hook it has)."""
        hook = definition.hooks.cleanup
        if hook is None:
            return
        for unit in units:
            self._handed.setdefault((definition.name, unit.id), Handed(unit, hook))

    def get(self, resource: str, unit_id: str) -> Handed | None:
        return self._handed.get((resource, unit_id))

    def done(self, resource: str, unit_id: str) -> None:
        """The unit was cleaned (or was gone when its one cleanup ran)."""
        self._handed.pop((resource, unit_id), None)

    def owing(self) -> bool:
        """Whether any unit is owed a cleanup (PodResources must be polled for it)."""
        return bool(self._handed)

    def resources(self) -> frozenset[str]:
        """Resources with a unit owed a cleanup."""
        return frozenset(r for r, _ in self._handed)

    def units_of(self, resource: str) -> tuple[str, ...]:
        """Units of ``resource`` owed a cleanup."""
        return tuple(sorted(u for r, u in self._handed if r == resource))

    def out_of_service(self, resource: str) -> dict[str, str]:
        """Units of ``resource`` no runner may hand out, and why."""
        out = {u: e.why for (r, u), e in self.uncleaned.items() if r == resource}
        for r, u in self.cleaning:
            if r == resource:
                out.setdefault(u, "its cleanup from before the resource stopped is running")
        return out

    async def owe(self, resource: str, unit_id: str, device_ids: tuple[str, ...], why: str) -> None:
        """Record the unit as uncleaned: out of service until an admin releases it."""
        self._handed.pop((resource, unit_id), None)
        where = (
            f"delete {self._directory / uncleaned.file_name(resource, unit_id)}"
            if self._directory is not None
            else "restart the daemon"
        )
        entry = Uncleaned(
            resource=resource,
            unit=unit_id,
            device=",".join(device_ids),
            claim="",
            since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            why=f"{why}, so its cleanup hook cannot run; clean the device, then {where}",
        )
        self.uncleaned[resource, unit_id] = entry
        log.error(
            "%s: unit %s is not cleaned and stays out of service: %s", resource, unit_id, entry.why
        )
        if self._directory is None:
            return
        try:
            await asyncio.to_thread(self._record, entry)
        except OSError as exc:
            log.error("%s: cannot record unit %s as uncleaned: %s", resource, unit_id, exc)

    def _record(self, entry: Uncleaned) -> None:
        assert self._directory is not None  # noqa: S101 -- checked by the caller
        self._directory.mkdir(parents=True, exist_ok=True)
        uncleaned.record(self._directory, entry)
        self._seen = uncleaned.identity(self._directory)

    def released_by_admin(self) -> tuple[Key, ...]:
        """Uncleaned units whose file an admin deleted since the last call."""
        if self._directory is None or not self.uncleaned:
            return ()
        seen = uncleaned.identity(self._directory)
        if seen == self._seen:
            return ()
        self._seen = seen
        before, self.uncleaned = self.uncleaned, uncleaned.load(self._directory)
        gone = tuple(sorted(before.keys() - self.uncleaned.keys()))
        for resource, unit_id in gone:
            log.info("%s: unit %s released by an admin: served again", resource, unit_id)
        return gone

    def gauge(self) -> Gauge:
        """``genericdp_units_uncleaned``, now."""
        from genericdp.runtime.backend import Gauge

        return Gauge(
            "genericdp_units_uncleaned",
            "Units handed out whose cleanup hook cannot run (their definition left the"
            " config): out of service until an admin deletes their uncleaned-*.json file.",
            len(self.uncleaned),
        )

    def notes(self) -> tuple[str, ...]:
        """What ``/readyz`` lists (at most ten)."""
        found = sorted(self.uncleaned.values(), key=lambda u: (u.resource, u.unit))
        return tuple(
            f"{u.resource}: unit {u.unit} out of service since {u.since}: {u.why}"
            for u in found[:10]
        )
