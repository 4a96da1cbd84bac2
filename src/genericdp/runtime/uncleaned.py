"""Units whose cleanup is owed and cannot run: out of service until an admin releases them.

One file per unit, ``uncleaned-<digest>.json`` (DRA: in the driver's plugin
directory, written before the claim is forgotten; the device plugin: in
``stateDir``). While it is there the unit is not handed out, whatever the
config says, and ``/readyz``, the log and a metric say so; an admin who has
cleaned the device deletes it, and the unit is served again. Each is read as
hostile input (``owedrecords.read``); one that cannot be read is logged and
left where it is."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from genericdp.atomicfile import reason, write_atomically
from genericdp.errors import clip
from genericdp.runtime import owedrecords

log = logging.getLogger(__name__)

PREFIX = "uncleaned-"
_KEYS = ("resource", "unit", "device", "claim", "since", "why")

DirId = frozenset[tuple[str, int, int]]


@dataclass(frozen=True)
class Uncleaned:
    """A unit handed out whose cleanup cannot run, and why."""

    resource: str
    unit: str
    device: str  # its DRA device name; the device plugin: its device IDs
    claim: str  # <namespace>/<name> of the last claim that held it (DRA)
    since: str  # UTC, ISO 8601
    why: str

    @property
    def file_name(self) -> str:
        return file_name(self.resource, self.unit)


def file_name(resource: str, unit: str) -> str:
    return owedrecords.file_name(PREFIX, resource, unit)


def record(directory: Path, entry: Uncleaned) -> None:
    """Write the unit's file (replaced atomically); raises OSError."""
    data = json.dumps({k: getattr(entry, k) for k in _KEYS}, indent=1) + "\n"
    write_atomically(directory / entry.file_name, data.encode())


def identity(directory: Path) -> DirId:
    """Which files are there now (name, inode, change time): what ``load`` would read."""
    found = set()
    for name in owedrecords.names(directory, PREFIX):
        try:
            info = os.lstat(directory / name)
        except OSError:
            continue
        found.add((name, info.st_ino, info.st_mtime_ns))
    return frozenset(found)


def load(directory: Path) -> dict[tuple[str, str], Uncleaned]:
    """Every usable file's unit, by (resource, unit); never raises."""
    out: dict[tuple[str, str], Uncleaned] = {}
    for name in owedrecords.names(directory, PREFIX):
        path = directory / name
        try:
            entry = _read(path)
        except (OSError, ValueError, TypeError) as exc:
            why = reason(exc) if isinstance(exc, OSError) else str(exc)
            log.error("%s cannot be used (%s); delete it if it is not ours", path, clip(why, 200))
            continue
        if entry.file_name != name:
            log.error("%s names another unit (%s); it is not ours", path, entry.file_name)
            continue
        out[entry.resource, entry.unit] = entry
    return out


def _read(path: Path) -> Uncleaned:
    doc, _ = owedrecords.read(path)
    values = [doc.get(k) for k in _KEYS]
    if not all(isinstance(v, str) and len(v) <= 4096 for v in values):  # noqa: PLR2004 -- as the checkpoint's strings
        raise TypeError(f"not {', '.join(_KEYS)} as strings")
    return Uncleaned(**{k: str(doc[k]) for k in _KEYS})
