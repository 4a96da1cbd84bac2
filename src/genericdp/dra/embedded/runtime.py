"""What a CDI-enabled container runtime does with the IDs the kubelet hands it.

containerd and CRI-O load every ``*.json``/``*.yaml`` spec of the CDI
directory and, for each fully qualified ID (``vendor/class=name``), apply the
edits of that device and of the spec holding it; an ID no spec defines
fails the container's creation ("unresolvable CDI devices"). This model
resolves IDs the same way and returns the merged edits, so a test sees what
the container would get; ``created_nodes`` says what mode and owner each
device node gets in a container running as a given user.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNC_DEFAULT_MODE = 0o666  # runc's mode for a device without fileMode


class UnresolvableCdiError(Exception):
    """An ID no spec in the directory defines (the runtime refuses the container)."""


def resolve_cdi(cdi_dir: Path, ids: Iterable[str]) -> dict[str, list[Any]]:
    """The container edits (``deviceNodes``, ``env``, ``mounts``) for ``ids``."""
    devices: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for path in sorted(cdi_dir.glob("*.json")) if cdi_dir.is_dir() else ():
        spec = json.loads(path.read_text())
        for device in spec.get("devices", []):
            devices[f"{spec['kind']}={device['name']}"] = (spec, device)
    edits: dict[str, list[Any]] = {"deviceNodes": [], "env": [], "mounts": []}
    applied_specs: list[int] = []
    for cdi_id in ids:
        if cdi_id not in devices:
            raise UnresolvableCdiError(f"unresolvable CDI devices {cdi_id}")
        spec, device = devices[cdi_id]
        parts = [device.get("containerEdits", {})]
        if id(spec) not in applied_specs:
            applied_specs.append(id(spec))
            parts.append(spec.get("containerEdits", {}))
        for part in parts:
            for key, values in edits.items():
                values.extend(v for v in part.get(key, []) if v not in values)
    return edits


@dataclass(frozen=True)
class CreatedNode:
    """A device node as the runtime creates it in the container."""

    path: str
    host_path: str
    mode: int
    uid: int
    gid: int


def created_nodes(
    device_nodes: Iterable[Mapping[str, Any]], *, uid: int = 0, gid: int = 0
) -> tuple[CreatedNode, ...]:
    """The nodes ``deviceNodes`` entries become in a container whose process runs as
    ``uid``:``gid``: the CDI library (containerd, CRI-O) gives a node without ``uid``
    or ``gid`` to the process's user or group when that is not root, and runc makes
    a node without ``fileMode`` with mode 0666."""
    return tuple(
        CreatedNode(
            path=entry["path"],
            host_path=entry.get("hostPath", entry["path"]),
            mode=int(entry.get("fileMode", RUNC_DEFAULT_MODE)) & 0o777,
            uid=int(entry["uid"]) if "uid" in entry else uid,
            gid=int(entry["gid"]) if "gid" in entry else gid,
        )
        for entry in device_nodes
    )
