"""Cleanups owed: a unit handed out is cleaned once, with the hook it was handed out under.

Each unit handed out is recorded with the ``cleanup`` hook of that moment
(``handed_out``) and forgotten once that hook has passed (``done``). The
record outlives the resource's runner: a resource no longer served while a
unit is held cleans it at its release (``Supervisor.released``), and a runner
started for it again keeps the unit out of service until then. When the
definition has left the config by then, no command the config no longer names
is run: the unit is recorded uncleaned (``uncleaned.py``) until an admin
deletes its file. DRA keeps the same promise through its checkpoint.

The device plugin keeps each record in ``stateDir`` (``owedrecords.py``),
written before the Allocate answers: a restarted daemon keeps their units out
of service until the PodResources poller's first answer (``unsettled``), then
cleans those released meanwhile at once and the others at their release. A
record that cannot be used keeps its unit out of service as uncleaned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genericdp.atomicfile import reason
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import RecordError, clip
from genericdp.runtime import owedrecords, uncleaned
from genericdp.runtime.owedrecords import Key, Record, Refused
from genericdp.runtime.uncleaned import Uncleaned

if TYPE_CHECKING:
    from genericdp.runtime.backend import Gauge

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Release:
    """A unit of ``resource`` that nobody holds any more."""

    resource: str
    unit_id: str
    device_ids: tuple[str, ...]  # the replica IDs that were in use, sorted


class Owed:
    """The daemon's owed cleanups and uncleaned units (one for every resource)."""

    def __init__(self, directory: Path | None, records: str | None = None) -> None:
        """``directory``: where uncleaned units are kept; ``records``: the prefix of the
        files that keep owed cleanups there (the backend's). None: in memory only."""
        self._directory = directory
        self._records = (directory, records) if directory is not None and records else None
        self._handed: dict[Key, Record] = {}  # units handed out and not cleaned since
        self.uncleaned: dict[Key, Uncleaned] = {}
        self._seen: uncleaned.DirId = frozenset()
        self.cleaning: set[Key] = set()  # owed cleanups of units no runner cleans, running
        # Loaded at start: out of service until PodResources says whether they are held.
        self.unsettled: set[Key] = set()
        self._writing = asyncio.Lock()

    def load(self) -> None:
        """Read the uncleaned units and the owed cleanups a predecessor recorded."""
        if self._directory is None:
            return
        self._seen = uncleaned.identity(self._directory)
        self.uncleaned = uncleaned.load(self._directory)
        if self._records is None:
            return
        records, refused = owedrecords.load(*self._records)
        for record in records.values():
            key = (record.resource, record.unit.id)
            if key in self.uncleaned:  # recorded uncleaned since: that file decides
                self._forget_file(key)
                continue
            self._handed[key] = record
            self.unsettled.add(key)
        for found in refused:
            self._refuse(self._directory, found)
        self._seen = uncleaned.identity(self._directory)
        if self.unsettled:
            log.info(
                "%d unit(s) owed a cleanup from before the restart: out of service until"
                " PodResources says whether they are still held",
                len(self.unsettled),
            )

    def _refuse(self, directory: Path, found: Refused) -> None:
        """A record that cannot be used: its unit, when it names one, is uncleaned."""
        log.error("%s cannot be used (%s): no command it names is run", found.path, found.why)
        if found.key is not None:
            resource, unit_id = found.key
            why = f"its owed cleanup's record {found.path.name} could not be used ({found.why})"
            entry = self.uncleaned[found.key] = self._entry(resource, unit_id, "", why)
            try:
                uncleaned.record(directory, entry)
            except OSError as exc:  # out of service until the next start all the same
                log.error("%s: cannot record unit %s as uncleaned: %s", resource, unit_id, exc)
                return
            log.error(
                "%s: unit %s is not cleaned and stays out of service: %s",
                resource,
                clip(unit_id),
                entry.why,
            )
        try:
            aside = owedrecords.set_aside(found.path)
        except OSError as exc:
            log.error("cannot set %s aside: %s", found.path, reason(exc))
        else:
            log.warning("%s set aside as %s", found.path, aside.name)

    async def handed_out(self, definition: ResourceDefinition, units: Iterable[Unit]) -> None:
        """These units go to a container: each is owed the cleanup hook of ``definition``
        unless it has one, kept in ``stateDir`` before this returns (else RecordError)."""
        await self._take(definition, units, strict=True)

    async def kept(self, definition: ResourceDefinition, units: Iterable[Unit]) -> None:
        """Units in use whose runner stops or which vanished, as ``handed_out``; a record
        that cannot be written is logged (the cleanup is then owed until a restart)."""
        try:
            await self._take(definition, units, strict=False)
        except RecordError as exc:
            log.error("%s", exc)

    async def _take(
        self, definition: ResourceDefinition, units: Iterable[Unit], *, strict: bool
    ) -> None:
        hook = definition.hooks.cleanup
        if hook is None:
            return
        async with self._writing:  # a second hand-out of a unit waits for its record
            new = []
            for unit in units:
                key = (definition.name, unit.id)
                if key not in self._handed:
                    self._handed[key] = record = Record(definition.name, unit, hook)
                    new.append(record)
            if not new or self._records is None:
                return
            try:
                await asyncio.to_thread(_write, *self._records, new)
            except OSError as exc:
                if strict:
                    for record in new:
                        self._handed.pop((record.resource, record.unit.id), None)
                raise RecordError(
                    f"cannot keep the owed cleanup of unit {new[0].unit.id} in the state"
                    f" directory: {reason(exc)}"
                ) from exc

    def get(self, resource: str, unit_id: str) -> Record | None:
        return self._handed.get((resource, unit_id))

    async def done(self, resource: str, unit_id: str) -> None:
        """The unit was cleaned (or was gone when its one cleanup ran): its record goes."""
        key = (resource, unit_id)
        self.unsettled.discard(key)
        if self._handed.pop(key, None) is not None and self._records is not None:
            await asyncio.to_thread(self._forget_file, key)

    def _forget_file(self, key: Key) -> None:
        if self._records is None:
            return
        try:
            owedrecords.remove(*self._records, *key)
        except OSError as exc:
            log.error(
                "%s: cannot remove the record of unit %s's owed cleanup (it runs again after"
                " a restart): %s",
                key[0],
                key[1],
                reason(exc),
            )

    def resources(self) -> frozenset[str]:
        return frozenset(r for r, _ in self._handed)

    def units_of(self, resource: str) -> tuple[str, ...]:
        return tuple(sorted(u for r, u in self._handed if r == resource))

    def out_of_service(self, resource: str) -> dict[str, str]:
        """Units of ``resource`` no runner may hand out, and why."""
        out = {u: e.why for (r, u), e in self.uncleaned.items() if r == resource}
        for r, u in self.cleaning:
            if r == resource:
                out.setdefault(u, "the cleanup owed by its last hand-out is running")
        for r, u in self.unsettled:
            if r == resource:
                out.setdefault(u, "the cleanup owed from before the restart waits for PodResources")
        return out

    async def owe(self, resource: str, unit_id: str, device_ids: tuple[str, ...], why: str) -> None:
        """Record the unit as uncleaned: out of service until an admin releases it."""
        entry = self._entry(resource, unit_id, ",".join(device_ids), why)
        self.uncleaned[resource, unit_id] = entry
        log.error(
            "%s: unit %s is not cleaned and stays out of service: %s", resource, unit_id, entry.why
        )
        if self._directory is not None:
            try:
                await asyncio.to_thread(self._record, self._directory, entry)
            except OSError as exc:
                log.error("%s: cannot record unit %s as uncleaned: %s", resource, unit_id, exc)
                self._handed.pop((resource, unit_id), None)  # its record stays, for a restart
                return
        await self.done(resource, unit_id)  # after the uncleaned file: one of them is there

    def _entry(self, resource: str, unit_id: str, device: str, why: str) -> Uncleaned:
        where = (
            f"delete {self._directory / uncleaned.file_name(resource, unit_id)}"
            if self._directory is not None
            else "restart the daemon"
        )
        return Uncleaned(
            resource=resource,
            unit=unit_id,
            device=device,
            claim="",
            since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            why=f"{why}, so its cleanup hook cannot run; clean the device, then {where}",
        )

    def _record(self, directory: Path, entry: Uncleaned) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        uncleaned.record(directory, entry)
        self._seen = uncleaned.identity(directory)

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


def _write(directory: Path, prefix: str, records: Iterable[Record]) -> None:
    for record in records:
        owedrecords.write(directory, prefix, record)
