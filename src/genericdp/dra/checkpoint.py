"""Prepared claims, persisted so a restarted daemon answers and unprepares correctly.

One JSON file (``checkpoint.json`` in the plugin directory), replaced atomically after every
change. A claim is ``preparing`` before its ``init`` and ``preStart`` hooks run and ``prepared``
once its device metadata and CDI spec are written, so a daemon killed half way still runs
cleanup when the kubelet unprepares. Each device records the ``cleanup`` hook it was handed
out under, which its unprepare runs whatever selectors, reloads or restarts happened since (and
whether or not the node serves the resource now); units whose cleanup cannot run are kept
beside the file (``uncleaned.py``).

The file lives on the host: its content is hostile input, and nothing in it is lost. An
unusable file (not regular, too large, too many values, not JSON, another version) is moved to
``checkpoint.json.unusable-<UTC time>`` and the checkpoint is *incomplete*: while such a file
is there start-up removes no claim spec. An unusable entry is logged and dropped, and its UID
is *unaccounted*: its spec stays.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from genericdp.atomicfile import reason, write_atomically
from genericdp.config.model import Exec
from genericdp.errors import clip
from genericdp.kubeletplugin.claims import ClaimRef, valid_uid
from genericdp.runtime import uncleaned
from genericdp.runtime.owedrecords import dump_hook, parse_hook

log = logging.getLogger(__name__)

FILE_NAME = "checkpoint.json"
VERSION = 1
PREPARING = "preparing"
PREPARED = "prepared"
# Far above what any node prepares (a claim is a few hundred bytes, some 30 values);
# a bigger file is not ours. Values are bounded before parsing: json.loads of 64 MiB
# of tiny entries peaked at 1.6 GiB; 400,000 values stay under about 60 MiB.
MAX_BYTES = 16 * 1024 * 1024
MAX_VALUES = 400_000
UNUSABLE = ".unusable-"  # checkpoint.json.unusable-<time>: a file set aside


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim, and what is needed to clean it up later."""

    request: str
    pool: str
    device: str
    resource: str
    unit: str
    cdi_ids: tuple[str, ...]
    nodes: tuple[tuple[str, str], ...]  # (host path, container path) at prepare time
    attributes: tuple[tuple[str, str, Any], ...] = ()  # (name, type, value): metadata.py
    share_id: str = ""  # the allocation's shareID, for a device shared by several claims
    # The cleanup hook of the definition the device was handed out under (None: it had
    # none); ``recorded`` False: an entry written before hooks were recorded.
    cleanup: Exec | None = None
    recorded: bool = True


@dataclass(frozen=True)
class PreparedClaim:
    claim: ClaimRef
    state: str  # PREPARING or PREPARED
    devices: tuple[PreparedDevice, ...]
    spec: str | None = None  # the CDI spec file's name, once written
    pod_claim: str = ""  # the pod's name of a claim made from a template (device metadata)


class Checkpoint:
    """The prepared claims of one driver, in memory and on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._claims: dict[str, PreparedClaim] = {}
        self._lock = asyncio.Lock()
        self._writes: set[asyncio.Future[None]] = set()  # under way, shielded from callers
        self._changes = 0  # changes made in memory, counted
        self._written = 0  # how many of them the file on disk has
        # False when a file could not be used: it may list claims we do not know.
        self.complete = True
        self.unaccounted: set[str] = set()  # UIDs of entries dropped as unusable
        self._seen: _FileId | None = None  # the file as last read or written here
        # Units whose cleanup is owed and cannot run, by (resource, unit): ``uncleaned.py``.
        self.uncleaned: dict[tuple[str, str], uncleaned.Uncleaned] = {}
        self._uncleaned_seen: uncleaned.DirId = frozenset()

    def __iter__(self) -> Iterator[PreparedClaim]:
        return iter(tuple(self._claims.values()))

    def get(self, uid: str) -> PreparedClaim | None:
        return self._claims.get(uid)

    def load(self) -> None:
        """Read the file; never raises. May run in a thread: the claims are replaced whole, at
        the end, so the loop never sees half of them (``turns.py``)."""
        seen = _identity(self.path)
        claims: dict[str, PreparedClaim] = {}
        unaccounted: set[str] = set()
        problem = None
        try:
            entries = _decode(_read_regular(self.path))
        except FileNotFoundError:
            pass
        except _Unusable as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"cannot be read: {reason(exc)}"
        else:
            self._take(entries, claims, unaccounted)
        if problem is not None:
            self._set_aside(problem)
            seen = None
        self._claims, self.unaccounted, self._seen = claims, unaccounted, seen
        self._uncleaned_seen = uncleaned.identity(self.path.parent)
        self.uncleaned = uncleaned.load(self.path.parent)
        aside = sorted(self.path.parent.glob(self.path.name + UNUSABLE + "*"))
        self.complete = problem is None and not aside
        if aside:
            log.warning(
                "DRA checkpoint %s: %s set aside as unusable; claim CDI specs it does not"
                " list are kept until it is removed",
                self.path,
                ", ".join(clip(str(p), 200) for p in aside[:3]),
            )
        if self._claims:
            log.info("DRA checkpoint %s: %d claim(s) prepared", self.path, len(self._claims))

    def changed_on_disk(self) -> bool:
        """Whether the file or the uncleaned units are not what this instance last saw."""
        return (
            _identity(self.path) != self._seen
            or uncleaned.identity(self.path.parent) != self._uncleaned_seen
        )

    async def owe(self, entry: uncleaned.Uncleaned) -> None:
        """Record a unit whose cleanup cannot run; raises OSError when it cannot be."""
        directory = self.path.parent
        await asyncio.to_thread(uncleaned.record, directory, entry)
        self.uncleaned[entry.resource, entry.unit] = entry
        self._uncleaned_seen = await asyncio.to_thread(uncleaned.identity, directory)

    def _set_aside(self, problem: str) -> None:
        """Keep an unusable file under a name of its own; ours is written anew."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}{UNUSABLE}{stamp}")
        for n in range(1, 1000):
            if not os.path.lexists(aside):
                break
            aside = self.path.with_name(f"{self.path.name}{UNUSABLE}{stamp}-{n}")
        try:
            self.path.rename(aside)
        except OSError as exc:
            log.error(
                "DRA checkpoint %s %s, and cannot be set aside (%s): starting without it",
                self.path,
                problem,
                reason(exc),
            )
            return
        log.error(
            "DRA checkpoint %s %s: kept as %s, starting without it; no claim CDI spec is"
            " removed at start while it is there",
            self.path,
            problem,
            aside,
        )

    def _take(
        self, entries: dict[Any, Any], claims: dict[str, PreparedClaim], unaccounted: set[str]
    ) -> None:
        for uid, entry in entries.items():
            try:
                prepared = _parse(uid, entry)
            except (TypeError, ValueError, KeyError) as exc:
                log.error(
                    "DRA checkpoint %s: claim %s dropped, its entry is unusable (its CDI"
                    " spec is kept): %s",
                    self.path,
                    clip(str(uid), 80),
                    clip(str(exc), 200),
                )
                if isinstance(uid, str) and valid_uid(uid):
                    unaccounted.add(uid)
                continue
            claims[uid] = prepared

    async def put(self, prepared: PreparedClaim) -> None:
        """Record a claim and write the file; raises OSError (the entry is then not kept)."""
        uid = prepared.claim.uid
        before = self._claims.get(uid)
        self._claims[uid] = prepared
        try:
            await self._commit()
        except OSError:
            if self._claims.get(uid) is prepared:
                if before is None:
                    del self._claims[uid]
                else:
                    self._claims[uid] = before
            raise

    async def remove(self, uid: str) -> None:
        """Forget a claim and write the file; raises OSError (the entry is then kept)."""
        before = self._claims.pop(uid, None)
        if before is None:
            return
        try:
            await self._commit()
        except OSError:
            self._claims.setdefault(uid, before)
            raise

    async def _commit(self) -> None:
        """Group commit: changes made while a write is under way go to disk together in the
        next one, so N claims cost a few fsyncs, not N. Shielded: the change is in memory, so
        the file follows even when the caller is cancelled (a kubelet hanging up)."""
        self._changes += 1
        write = asyncio.ensure_future(self._write(self._changes))
        self._writes.add(write)
        write.add_done_callback(self._written_or_logged)
        await asyncio.shield(write)

    def _written_or_logged(self, write: asyncio.Future[None]) -> None:
        self._writes.discard(write)
        if not write.cancelled() and (exc := write.exception()) is not None:
            log.debug("DRA checkpoint %s: write failed: %s", self.path, exc)

    async def _write(self, mine: int) -> None:
        async with self._lock:
            if self._written >= mine:
                return  # a write that started after our change has it on disk
            upto = self._changes
            data = self._encode()  # on the loop: the claims change while the thread writes
            self._seen = await asyncio.to_thread(_written, self.path, data)
            self._written = upto

    def _encode(self) -> bytes:
        doc = {
            "version": VERSION,
            "claims": {uid: _dump(p) for uid, p in sorted(self._claims.items())},
        }
        return (json.dumps(doc, indent=1) + "\n").encode()


_FileId = tuple[int, int, int, int]


def _identity(path: Path) -> _FileId | None:
    """The file's device, inode, size and change time (every write here is a new inode)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _written(path: Path, data: bytes) -> _FileId | None:
    write_atomically(path, data)
    return _identity(path)


class _Unusable(Exception):  # noqa: N818 - internal signal, never leaves this module
    """Why a checkpoint file cannot be used."""


def _read_regular(path: Path) -> bytes:
    """A regular file's bytes, at most MAX_BYTES; a FIFO would block the start forever."""
    if not stat.S_ISREG(path.lstat().st_mode):
        raise _Unusable("is not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):  # replaced since lstat
            raise _Unusable("is not a regular file")
        data = file.read(MAX_BYTES + 1) if info.st_size <= MAX_BYTES else b""
    if info.st_size > MAX_BYTES or len(data) > MAX_BYTES:
        raise _Unusable(f"is over {MAX_BYTES} bytes")
    return data


def _decode(data: bytes) -> dict[Any, Any]:
    """The document's claims; raises _Unusable when it is not one of ours."""
    values = sum(data.count(c) for c in (b",", b":", b"[", b"{"))
    if values > MAX_VALUES:
        raise _Unusable(f"holds over {MAX_VALUES} JSON values")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _Unusable(f"is not JSON ({clip(str(exc), 200)})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise _Unusable(f"is not version {VERSION} (version {clip(repr(version), 40)})")
    if not isinstance(claims := doc.get("claims"), dict):
        raise _Unusable("has no 'claims' mapping")
    return claims


def _dump(prepared: PreparedClaim) -> dict[str, Any]:
    return {
        "namespace": prepared.claim.namespace,
        "name": prepared.claim.name,
        "state": prepared.state,
        "spec": prepared.spec,
        "pod_claim": prepared.pod_claim,
        "devices": [
            {
                **{k: v for k, v in asdict(d).items() if k != "recorded"},
                "cleanup": _dump_hook(d),
                "cdi_ids": list(d.cdi_ids),
                "nodes": [list(n) for n in d.nodes],
                "attributes": [list(a) for a in d.attributes],
            }
            for d in prepared.devices
        ],
    }


def _text(entry: Mapping[str, Any], key: str, *, limit: int = 4096) -> str:
    value = entry[key]
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{key} is not a string of at most {limit} characters")
    return value


def _parse(uid: object, entry: object) -> PreparedClaim:
    if not isinstance(uid, str) or not valid_uid(uid):
        raise ValueError("the claim UID is not a UID")
    if not isinstance(entry, dict):
        raise TypeError("not a mapping")
    state = entry.get("state")
    if state not in (PREPARING, PREPARED):
        raise ValueError(f"state is {clip(repr(state), 40)}")
    spec = entry.get("spec")
    if spec is not None and (
        not isinstance(spec, str) or not _SPEC_NAME.fullmatch(spec) or uid not in spec
    ):
        raise ValueError("spec is not the name of this claim's CDI spec")
    devices = entry["devices"]
    if not isinstance(devices, list):
        raise TypeError("devices is not a list")
    parsed = []
    for device in devices:
        if not isinstance(device, dict):
            raise TypeError("a device is not a mapping")
        cdi_ids, nodes = device["cdi_ids"], device["nodes"]
        # {argv, timeout}, None (the definition had none), or absent (an older entry: the
        # current definition's hook, ``prepare.py``).
        cleanup = device.get("cleanup", _UNRECORDED)
        if not isinstance(cdi_ids, list) or not all(isinstance(i, str) for i in cdi_ids):
            raise TypeError("cdi_ids is not a list of strings")
        if not isinstance(nodes, list) or not all(
            isinstance(n, list) and len(n) == 2 and all(isinstance(p, str) for p in n)  # noqa: PLR2004 -- a [host, container] pair
            for n in nodes
        ):
            raise TypeError("nodes is not a list of [host path, container path]")
        parsed.append(
            PreparedDevice(
                request=_text(device, "request"),
                pool=_text(device, "pool"),
                device=_text(device, "device"),
                resource=_text(device, "resource"),
                unit=_text(device, "unit"),
                cdi_ids=tuple(cdi_ids),
                nodes=tuple((n[0], n[1]) for n in nodes),
                attributes=_attributes(device.get("attributes", [])),
                share_id=_text(device, "share_id", limit=128) if "share_id" in device else "",
                cleanup=None if cleanup in (None, _UNRECORDED) else parse_hook(cleanup),
                recorded=cleanup != _UNRECORDED,
            )
        )
    claim = ClaimRef(_text(entry, "namespace"), _text(entry, "name"), uid)
    pod_claim = _text(entry, "pod_claim", limit=63) if "pod_claim" in entry else ""
    return PreparedClaim(claim, state, tuple(parsed), spec, pod_claim)


_UNRECORDED = "unrecorded"  # an entry from before hooks were recorded


def _dump_hook(device: PreparedDevice) -> dict[str, Any] | str | None:
    if not device.recorded:
        return _UNRECORDED
    return None if device.cleanup is None else dump_hook(device.cleanup)


_ATTRIBUTE_TYPES = {"string": str, "version": str, "int": int, "bool": bool}
_MAX_ATTRIBUTES = 32  # as the API allows a device
_MAX_NAME = 128  # characters of an attribute's name
_MAX_STRING = 256  # characters of a string value, as the API allows


def _attributes(found: object) -> tuple[tuple[str, str, Any], ...]:
    """A device's metadata attributes as the file holds them: [name, type, value]."""
    if not isinstance(found, list) or len(found) > _MAX_ATTRIBUTES:
        raise TypeError(f"attributes is not a list of at most {_MAX_ATTRIBUTES}")
    parsed = []
    for item in found:
        if not isinstance(item, list) or len(item) != 3:  # noqa: PLR2004 -- [name, type, value]
            raise TypeError("an attribute is not [name, type, value]")
        name, kind, value = item
        wanted = _ATTRIBUTE_TYPES.get(kind) if isinstance(kind, str) else None
        if (
            not isinstance(name, str)
            or not 0 < len(name) <= _MAX_NAME
            or wanted is None
            or type(value) is not wanted
            or (isinstance(value, str) and len(value) > _MAX_STRING)
        ):
            raise ValueError("an attribute is not a name, a type and a value of that type")
        parsed.append((name, kind, value))
    return tuple(parsed)


_SPEC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.json")
