"""Owed cleanups kept in ``stateDir``, so a restarted daemon still owes them (``owed.py``).

One file per unit handed out with a ``cleanup`` hook and not cleaned since,
``<prefix><digest>.json``, holding what the hook needs (the resource, the
unit's ID, nodes and NUMA node, the hook's argv and timeout). The prefix is
the backend's, so a daemon of the other backend given the same directory
reads none. Each file names a command the daemon runs as root, so each is read
as hostile input (a regular file, owned by the daemon's user and writable by
it alone, small, the expected keys and types, named after its unit); one that
fails is refused and its unit, when it can be told, kept out of service.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genericdp.atomicfile import reason, write_atomically
from genericdp.config.model import Exec
from genericdp.discovery.model import MAX_ID_LENGTH, DeviceNode, Unit
from genericdp.errors import clip

VERSION = 1
MAX_BYTES = 64 * 1024
MAX_FILES = 4096  # far above the units of a node
MAX_NODES = 64
_MAX_TEXT = 4096
_MAX_ARGV = 256  # words of a recorded hook's command
_MAX_RESOURCE = 253  # a resource name is a qualified name
UNUSABLE = ".unusable"  # a refused file, moved aside: <name>.unusable

Key = tuple[str, str]  # resource, unit ID


@dataclass(frozen=True)
class Record:
    """A unit handed out and not cleaned since, and the hook to clean it with."""

    resource: str
    unit: Unit
    hook: Exec


@dataclass(frozen=True)
class Refused:
    """A file that cannot be used, why, and the unit it names (None: it cannot be told)."""

    path: Path
    why: str
    key: Key | None


def file_name(prefix: str, resource: str, unit_id: str) -> str:
    digest = hashlib.sha256(f"{resource}\0{unit_id}".encode()).hexdigest()[:20]
    return f"{prefix}{digest}.json"


def dump_hook(spec: Exec) -> dict[str, Any]:
    """A hook as the files keep it (here and in the DRA checkpoint)."""
    return {"argv": list(spec.argv), "timeout": spec.timeout}


def parse_hook(found: object) -> Exec:
    """A kept hook, ``{argv, timeout}``; raises TypeError or ValueError."""
    if not isinstance(found, dict):
        raise TypeError("cleanup is not a mapping")
    argv, timeout = found.get("argv"), found.get("timeout")
    if (
        not isinstance(argv, list)
        or not 0 < len(argv) <= _MAX_ARGV
        or not all(isinstance(a, str) and len(a) <= _MAX_TEXT for a in argv)
    ):
        raise TypeError("cleanup.argv is not a list of strings")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError("cleanup.timeout is not a positive number")
    return Exec(tuple(argv), float(timeout))


def write(directory: Path, prefix: str, record: Record) -> None:
    """Write the unit's file (replaced atomically); raises OSError."""
    unit = record.unit
    doc = {
        "version": VERSION,
        "resource": record.resource,
        "unit": unit.id,
        "nodes": [[n.host_path, n.container_path] for n in unit.nodes[:MAX_NODES]],
        "numa_node": unit.numa_node,
        "cleanup": dump_hook(record.hook),
    }
    path = directory / file_name(prefix, record.resource, unit.id)
    write_atomically(path, (json.dumps(doc, indent=1) + "\n").encode())


def remove(directory: Path, prefix: str, resource: str, unit_id: str) -> None:
    """Remove the unit's file (none is fine); raises OSError."""
    (directory / file_name(prefix, resource, unit_id)).unlink(missing_ok=True)


def names(directory: Path, prefix: str) -> list[str]:
    try:
        found = [p.name for p in directory.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    return sorted(n for n in found if n.endswith(".json"))[:MAX_FILES]


def load(directory: Path, prefix: str) -> tuple[dict[Key, Record], list[Refused]]:
    """Every usable file's record, and the files refused; never raises."""
    records: dict[Key, Record] = {}
    refused: list[Refused] = []
    for name in names(directory, prefix):
        path = directory / name
        key: Key | None = None
        try:
            doc, trusted = read(path)
            key = _key(doc)  # an untrusted file's unit is still kept out of service
            if not trusted:
                raise ValueError("not owned by the daemon's user and writable by it alone")
            if file_name(prefix, *key) != name:
                raise ValueError(f"it names another unit ({file_name(prefix, *key)})")
            records[key] = _parse(doc, key)
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            why = reason(exc) if isinstance(exc, OSError) else str(exc)
            refused.append(Refused(path, clip(why, 200), key))
    return records, refused


def set_aside(path: Path) -> Path:
    """Move a refused file out of the way (kept, never read again); raises OSError."""
    aside = path.with_name(path.name + UNUSABLE)
    path.replace(aside)
    return aside


def read(path: Path) -> tuple[dict[str, Any], bool]:
    """The file's document (a JSON mapping of at most ``MAX_BYTES``), and whether only
    the daemon's user can have written it; raises OSError, ValueError or TypeError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a symbolic link, never followed") from None
        raise
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        trusted = info.st_uid == os.geteuid() and not info.st_mode & 0o022
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"over {MAX_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise TypeError("not a mapping")
    return doc, trusted


def _key(doc: dict[str, Any]) -> Key:
    resource, unit = doc.get("resource"), doc.get("unit")
    if not isinstance(resource, str) or not 0 < len(resource) <= _MAX_RESOURCE:
        raise TypeError("resource is not a resource name")
    if not isinstance(unit, str) or not 0 < len(unit) <= MAX_ID_LENGTH:
        raise TypeError("unit is not a unit ID")
    return resource, unit


def _parse(doc: dict[str, Any], key: Key) -> Record:
    if doc.get("version") != VERSION:
        raise ValueError(f"not version {VERSION} (version {clip(repr(doc.get('version')), 40)})")
    nodes, numa = doc.get("nodes"), doc.get("numa_node")
    if (
        not isinstance(nodes, list)
        or len(nodes) > MAX_NODES
        or not all(
            isinstance(n, list)
            and len(n) == 2  # noqa: PLR2004 -- a [host, container] pair
            and all(isinstance(p, str) and len(p) <= _MAX_TEXT for p in n)
            for n in nodes
        )
    ):
        raise TypeError("nodes is not a list of [host path, container path]")
    if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
        raise TypeError("numa_node is not a NUMA node")
    hook = parse_hook(doc.get("cleanup"))
    unit = Unit(key[1], tuple(DeviceNode(h, c) for h, c in nodes), numa_node=numa)
    return Record(key[0], unit, hook)
