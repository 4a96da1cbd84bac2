"""One CDI spec per prepared claim: its devices' nodes, and the rendered env and mounts.

Under DRA the runtime gets a claim's devices only through CDI: the kubelet
hands the CDI device IDs prepare returned to the runtime (containerd 1.7+
with CDI, CRI-O), which applies the edits of those devices, and of their
spec, to each container using the claim.

- ``kind`` is ``<driver>/claim`` (``genericdp.io/claim``), made valid for CDI
  as ``allocation.cdi.cdi_kind`` does for resources.
- The file is ``gdp-claim-<claim UID>.json``: one per claim, so unprepare
  removes exactly it, and nothing of the device-plugin backend's
  (``genericdp-*.json``) is ever touched or mistaken for ours.
- One CDI device per allocated device, named ``<claim UID>-<device name>``
  (unique among all specs of the kind, as CDI requires), holding the unit's
  device nodes (``path``, ``hostPath``, the definition's ``permissions``).
- The env and mounts rendered from the ``allocate`` templates (over all the
  claim's units of a resource) are the spec's own ``containerEdits``, which
  the runtime applies once when any device of the spec is injected.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genericdp.allocation.cdi import cdi_device_name, cdi_kind, cdi_version
from genericdp.allocation.render import Mount
from genericdp.atomicfile import reason, write_atomically
from genericdp.errors import CdiSpecError

log = logging.getLogger(__name__)

SPEC_PREFIX = "gdp-claim-"
CLASS = "claim"
_MAX_SPEC_BYTES = 64 * 1024 * 1024
_FILE_MODE = 0o644  # runtimes read it as another user, maybe


@dataclass(frozen=True)
class SpecDevice:
    """One device of a claim's spec: its name in the pool and its nodes."""

    device: str
    nodes: Sequence[tuple[str, str, str]]  # container path, host path, permissions


def claim_kind(driver: str) -> str:
    return cdi_kind(f"{driver}/{CLASS}")


def spec_name(uid: str) -> str:
    return f"{SPEC_PREFIX}{uid}.json"


def device_id(driver: str, uid: str, device: str) -> str:
    """The fully qualified CDI ID prepare returns for one device of a claim."""
    return f"{claim_kind(driver)}={cdi_device_name(f'{uid}-{device}')}"


def claim_spec(
    driver: str,
    uid: str,
    devices: Iterable[SpecDevice],
    env: Mapping[str, str],
    mounts: Iterable[Mount],
) -> dict[str, Any]:
    kind = claim_kind(driver)
    entries = []
    for device in devices:
        nodes = {
            container: {"path": container, "hostPath": host, "permissions": permissions}
            for container, host, permissions in device.nodes
        }
        entries.append(
            {
                "name": cdi_device_name(f"{uid}-{device.device}"),
                "containerEdits": {"deviceNodes": list(nodes.values())},
            }
        )
    edits: dict[str, Any] = {}
    if env:
        edits["env"] = [f"{key}={value}" for key, value in env.items()]
    if mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "type": "bind",
                "options": ["rbind", "ro" if m.read_only else "rw"],
            }
            for m in mounts
        ]
    spec: dict[str, Any] = {"cdiVersion": cdi_version(kind), "kind": kind}
    if edits:
        spec["containerEdits"] = edits
    spec["devices"] = sorted(entries, key=lambda d: str(d["name"]))
    return spec


def write_claim_spec(cdi_dir: Path, uid: str, spec: Mapping[str, Any]) -> Path:
    """Write the claim's spec atomically; raises CdiSpecError saying why not."""
    path = cdi_dir / spec_name(uid)
    data = (json.dumps(spec, indent=2) + "\n").encode()
    try:
        write_atomically(path, data, mode=_FILE_MODE)
    except OSError as exc:
        raise CdiSpecError(f"cannot write CDI spec {path}: {reason(exc)}") from exc
    return path


def remove_claim_spec(cdi_dir: Path, uid: str) -> bool:
    """Remove the claim's spec; whether there was one. Raises CdiSpecError."""
    path = cdi_dir / spec_name(uid)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CdiSpecError(f"cannot remove CDI spec {path}: {reason(exc)}") from exc
    return True


def remove_stale_claim_specs(cdi_dir: Path, driver: str, keep: Iterable[str]) -> list[Path]:
    """Remove our claim specs (kind of this driver) whose claim is not in ``keep``
    (the daemon was down when it should have removed them). Never raises."""
    wanted = {spec_name(uid) for uid in keep}
    kind = claim_kind(driver)
    removed: list[Path] = []
    try:
        paths = sorted(cdi_dir.glob(f"{SPEC_PREFIX}*.json"))
    except OSError:
        return removed
    for path in paths:
        if path.name in wanted or _kind_of(path) != kind:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _kind_of(path: Path) -> str | None:
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > _MAX_SPEC_BYTES:
            return None
        spec = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    kind = spec.get("kind") if isinstance(spec, dict) else None
    return kind if isinstance(kind, str) else None
