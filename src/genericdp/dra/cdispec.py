"""A prepared claim's plans as one CDI spec (pure); the file is ``allocation/cdi.py``'s.

Under DRA the runtime gets a claim's devices only through CDI: the kubelet hands the IDs
prepare returned to the runtime (containerd 1.7+ with CDI, CRI-O), which applies the edits of
those devices and of their spec to each container using the claim.

- One CDI device per allocated device, ``<claim UID>-<device name>`` (unique among all specs
  of the kind, as CDI requires), with the unit's device nodes and their ``fileMode``, ``uid``
  and ``gid`` (the host node's or ``allocate.deviceNodes``'s: DRA has no other way).
- The env and mounts of the claim's plans are the spec's own ``containerEdits``, applied once
  when any of its devices is injected; a variable set by two resources keeps the first value.
- One CDI device per request mounts its device metadata file read-only (``dra/metadata.py``).
- DRA has no per-container annotations: ``undelivered`` says so, and prepare and
  ``simulate`` warn with its words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genericdp.allocation.cdi import cdi_device, cdi_version, claim_device_name, claim_kind
from genericdp.allocation.plan import Mount, Plan


def claim_spec(
    driver: str, uid: str, plans: Sequence[Plan], extra: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """One CDI device per DRA device the plans name, and the ``extra`` devices (metadata
    mounts), sorted by name."""
    kind = claim_kind(driver)
    devices: dict[str, dict[str, Any]] = {d["name"]: d for d in extra}
    env: dict[str, str] = {}
    mounts: list[Mount] = []
    for plan in plans:
        for device, nodes in zip(plan.device_ids, plan.nodes, strict=True):
            # One CDI device per device, even when two requests name the same one.
            devices.setdefault(device, cdi_device(claim_device_name(uid, device), nodes))
        for key, value in plan.receives.env.items():
            env.setdefault(key, value)
        mounts.extend(m for m in plan.receives.mounts if m not in mounts)
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
    spec["devices"] = sorted(devices.values(), key=lambda d: str(d["name"]))
    return spec


def undelivered(plan: Plan) -> str:
    """What ``plan`` holds that a claim's CDI spec cannot pass on ("" when nothing)."""
    annotations = plan.receives.annotations
    if not annotations:
        return ""
    keys = ", ".join(sorted(annotations))
    return (
        f"resource {plan.definition.name}: allocate.annotations ({keys}) are not passed"
        " under DRA: the DRA API has no per-container annotations"
    )
