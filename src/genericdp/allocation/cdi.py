"""CDI (Container Device Interface) spec files, for both backends: one per
resource with ``allocate.cdi`` (one CDI device per unit, named by its unit ID)
and one per prepared DRA claim.

- Device nodes carry ``path``, ``hostPath`` and ``permissions`` but no
  ``type``/``major``/``minor``: the runtime reads those from ``hostPath`` when
  it creates the container, which stays right when a node is recreated with
  new numbers between our scan and the container's start. They do carry
  ``fileMode``, ``uid`` and ``gid``, which the runtime does not read: without
  them runc creates the node ``0666`` for the container's user, so a
  ``crw-------`` host node would be open to everyone in the container.
- ``cdiVersion`` is the lowest that allows what we write, so older runtimes
  accept the file. Env, mounts and annotations go in the Allocate answer.
- Whether a file is ours is read from the file itself (``_kind_of``), so
  specs of resources that left the config while the daemon was down are
  removed at start, and nothing else ever is.
- A claim's spec is ``gdp-claim-<driver>_<claim UID>.json`` of kind
  ``<driver>/claim`` (``_`` is in no driver name), so unprepare removes
  exactly it and no driver takes another's files for its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from genericdp.allocation.devices import DeviceSpec, device_nodes
from genericdp.atomicfile import reason, write_atomically
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import CdiSpecError

SPEC_PREFIX = "genericdp-"
CLAIM_SPEC_PREFIX = "gdp-claim-"
CLAIM_CLASS = "claim"
_KIND_ESCAPE = "gdp-"
_MAX_SPEC_BYTES = 64 * 1024 * 1024  # far above any spec we write; a bigger file is not ours
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_HASH_LENGTH = 8
_MAX_FILE_STEM = 200  # file names are at most 255 bytes, temporary suffix included
_FILE_MODE = 0o644  # runtimes read it as another user, maybe


def cdi_kind(resource: str) -> str:
    """``vendor/class`` for a resource name: one kind per resource and back
    (``resource_of_kind``), or the runtime would see conflicting devices."""
    vendor, _, device_class = resource.partition("/")
    return f"{_letter_first(vendor)}/{_letter_first(device_class)}"


def _letter_first(part: str) -> str:
    # CDI wants a letter first where Kubernetes allows a digit ("3com.example");
    # a part already starting with "gdp-" gets it too, so the mapping stays 1:1.
    first = part[:1]
    if first.isascii() and first.isalpha() and not part.startswith(_KIND_ESCAPE):
        return part
    return f"{_KIND_ESCAPE}{part}"


def resource_of_kind(kind: str) -> str:
    """The inverse of ``cdi_kind``."""
    vendor, _, device_class = kind.partition("/")
    return f"{vendor.removeprefix(_KIND_ESCAPE)}/{device_class.removeprefix(_KIND_ESCAPE)}"


def cdi_device_name(unit_id: str) -> str:
    """A valid CDI device name for a unit: the ID itself when CDI accepts it."""
    if _DEVICE_NAME.fullmatch(unit_id):
        return unit_id
    core = _UNSAFE.sub("_", unit_id).strip("_.:-") or "unit"
    digest = hashlib.sha256(unit_id.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{core}-{digest}"


def qualified_name(resource: str, unit_id: str) -> str:
    """What the runtime is handed: ``<vendor>/<class>=<device>``."""
    return f"{cdi_kind(resource)}={cdi_device_name(unit_id)}"


def claim_kind(driver: str) -> str:
    """The kind of a DRA driver's claim specs: ``<driver>/claim``, made valid as ``cdi_kind``."""
    return cdi_kind(f"{driver}/{CLAIM_CLASS}")


def claim_spec_name(driver: str, uid: str) -> str:
    """``gdp-claim-<driver>_<uid>.json``: ``_`` is in no driver name (a DNS subdomain)."""
    return f"{CLAIM_SPEC_PREFIX}{driver}_{uid}.json"


def claim_device_name(uid: str, device: str) -> str:
    """The CDI device of one device of a claim: unique among all specs of the kind."""
    return cdi_device_name(f"{uid}-{device}")


def claim_device_id(driver: str, uid: str, device: str) -> str:
    """The fully qualified CDI ID prepare returns for one device of a claim."""
    return f"{claim_kind(driver)}={claim_device_name(uid, device)}"


def cdi_version(kind: str) -> str:
    """The lowest spec version that allows what ``cdi_spec`` writes for ``kind``: 0.5.0
    brought ``deviceNodes[].hostPath``, 0.6.0 a "." in the class part of a kind."""
    return "0.6.0" if "." in kind.partition("/")[2] else "0.5.0"


def spec_file_name(resource: str) -> str:
    """``genericdp-<domain>_<name>.json``, shortened with a hash when very long
    (``_`` cannot occur in a domain, so two resource names never share a file)."""
    domain, _, name = resource.partition("/")
    stem = f"{SPEC_PREFIX}{domain}_{name}"
    if len(stem) > _MAX_FILE_STEM:
        digest = hashlib.sha256(resource.encode()).hexdigest()[:_HASH_LENGTH]
        stem = f"{stem[: _MAX_FILE_STEM - _HASH_LENGTH - 1]}-{digest}"
    return f"{stem}.json"


def cdi_device(name: str, nodes: Iterable[DeviceSpec]) -> dict[str, Any]:
    """One CDI device, named ``name``, whose edits are ``nodes`` (owner and mode where known)."""
    entries = []
    for n in nodes:
        known = {"fileMode": n.file_mode, "uid": n.uid, "gid": n.gid}
        entry = {"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}
        entries.append(entry | {key: value for key, value in known.items() if value is not None})
    return {"name": name, "containerEdits": {"deviceNodes": entries}}


def device_entry(definition: ResourceDefinition, unit: Unit) -> dict[str, Any]:
    """One unit's CDI device: its ``devices.device_nodes``, unchecked."""
    return cdi_device(cdi_device_name(unit.id), device_nodes(definition, unit, checked=False))


def cdi_spec(definition: ResourceDefinition, units: Iterable[Unit]) -> dict[str, Any]:
    """The whole spec for ``units``, devices sorted by name (deterministic bytes)."""
    kind = cdi_kind(definition.name)
    devices = sorted(
        (device_entry(definition, u) for u in units if u.nodes), key=lambda d: str(d["name"])
    )
    return {"cdiVersion": cdi_version(kind), "kind": kind, "devices": devices}


def spec_path(cdi_dir: Path, resource: str) -> Path:
    return cdi_dir / spec_file_name(resource)


def write_spec(cdi_dir: Path, definition: ResourceDefinition, units: Iterable[Unit]) -> Path:
    """Write the spec atomically (creating ``cdi_dir``); raise CdiSpecError saying why not."""
    return _write(spec_path(cdi_dir, definition.name), cdi_spec(definition, units))


def remove_spec(cdi_dir: Path, resource: str) -> Path | None:
    """Remove the resource's spec; the path if there was one. Raises CdiSpecError."""
    path = spec_path(cdi_dir, resource)
    return path if _remove(path) else None


def write_claim_spec(cdi_dir: Path, driver: str, uid: str, spec: Mapping[str, Any]) -> Path:
    """Write a claim's spec atomically; raises CdiSpecError saying why not."""
    return _write(cdi_dir / claim_spec_name(driver, uid), spec)


def remove_claim_spec(cdi_dir: Path, driver: str, uid: str) -> bool:
    """Remove the claim's spec of ``driver``; whether there was one. Raises CdiSpecError."""
    return _remove(cdi_dir / claim_spec_name(driver, uid))


def owner_of(path: Path) -> str | None:
    """The resource genericdp wrote a spec file for, or None: named with our prefix,
    and its ``kind`` maps back to a resource whose spec file has exactly this name."""
    if not path.name.startswith(SPEC_PREFIX) or path.suffix != ".json":
        return None
    kind = _kind_of(path)
    if kind is None or "/" not in kind:
        return None
    resource = resource_of_kind(kind)
    return resource if path.name == spec_file_name(resource) else None


def remove_stale_specs(cdi_dir: Path, keep: Iterable[str]) -> list[Path]:
    """Remove the specs genericdp wrote for resources not in ``keep``; return what was
    removed. Never raises: a spec that cannot be removed is retried at the next start."""
    wanted = {spec_file_name(name) for name in keep}
    return _remove_stale(cdi_dir, SPEC_PREFIX, wanted, lambda path: owner_of(path) is not None)


def remove_stale_claim_specs(cdi_dir: Path, driver: str, keep: Iterable[str]) -> list[Path]:
    """Remove the claim specs of ``driver`` (named for it and of its kind) whose claim
    UID is not in ``keep``, and temporaries of interrupted writes (the driver holds
    the node's lock: no write of its own is under way). Never raises."""
    wanted = {claim_spec_name(driver, uid) for uid in keep}
    kind, prefix = claim_kind(driver), f"{CLAIM_SPEC_PREFIX}{driver}_"
    removed = _remove_stale(cdi_dir, prefix, wanted, lambda path: _kind_of(path) == kind)
    with contextlib.suppress(OSError):
        for path in sorted(cdi_dir.glob(f".{prefix}*.tmp")):  # write_atomically's
            path.unlink()
            removed.append(path)
    return removed


def _remove_stale(
    cdi_dir: Path, prefix: str, wanted: Collection[str], ours: Callable[[Path], bool]
) -> list[Path]:
    removed: list[Path] = []
    try:
        paths = sorted(cdi_dir.glob(f"{prefix}*.json"))
    except OSError:
        return removed
    for path in paths:
        if path.name in wanted or not ours(path):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _kind_of(path: Path) -> str | None:
    """The ``kind`` of the spec at ``path`` if it can be ours: a regular file (not a
    link) of at most ``_MAX_SPEC_BYTES`` holding a JSON object; None otherwise."""
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SPEC_BYTES:
            return None
        spec = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    kind = spec.get("kind") if isinstance(spec, dict) else None
    return kind if isinstance(kind, str) else None


def _write(path: Path, spec: Mapping[str, Any]) -> Path:
    data = (json.dumps(spec, indent=2) + "\n").encode()
    try:
        write_atomically(path, data, mode=_FILE_MODE)
    except OSError as exc:
        raise CdiSpecError(f"cannot write CDI spec {path}: {reason(exc)}") from exc
    return path


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CdiSpecError(f"cannot remove CDI spec {path}: {reason(exc)}") from exc
    return True


class SpecPublisher:
    """The CDI spec file of one resource and what it holds now. Not thread-safe: the
    runtime calls it from one worker thread at a time, under its own lock."""

    def __init__(self, cdi_dir: Path) -> None:
        self.cdi_dir = cdi_dir
        self.touched = False  # we may have left a file behind (``retract`` has work to do)
        self._known = False  # whether ``_spec`` is what the file holds (None: no file)
        self._spec: dict[str, Any] | None = None
        self._entries: dict[str, dict[str, Any]] = {}

    def publish(self, definition: ResourceDefinition, units: Sequence[Unit]) -> bool:
        """Make the file describe ``units`` (none: no file, a spec without devices is
        invalid); True when written or removed. After a CdiSpecError the next call
        writes the file whatever it holds."""
        spec = cdi_spec(definition, units) if units else None
        if self._known and spec == self._spec:
            return False
        self._known, self._entries, self.touched = False, {}, True
        if spec is None:
            remove_spec(self.cdi_dir, definition.name)
        else:
            write_spec(self.cdi_dir, definition, units)
        self._spec, self._known = spec, True
        self._entries = {d["name"]: d for d in spec["devices"]} if spec else {}
        return True

    def retract(self, resource: str) -> Path | None:
        """Remove the file if we may have written one; raises CdiSpecError."""
        if not self.touched:
            return None
        self._known, self._spec, self._entries = False, None, {}
        removed = remove_spec(self.cdi_dir, resource)
        self.touched = False
        return removed

    def unpublished(self, definition: ResourceDefinition, units: Iterable[Unit]) -> tuple[str, ...]:
        """IDs of ``units`` the file on disk does not describe as they are now."""
        return tuple(
            u.id
            for u in units
            if self._entries.get(cdi_device_name(u.id)) != device_entry(definition, u)
        )
