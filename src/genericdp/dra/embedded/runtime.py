"""What a CDI-enabled container runtime does with the IDs the kubelet hands it.

containerd and CRI-O load every ``*.json``/``*.yaml`` spec of the CDI directory and apply, for
each ID (``vendor/class=name``), the edits of that device and of its spec; an ID no spec
defines fails the container ("unresolvable CDI devices"). This returns the merged edits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


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
