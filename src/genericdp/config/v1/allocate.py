"""``allocate``: what a container receives besides its units' device nodes, as
template sources (compiled by ``genericdp.config.templates``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from genericdp.config.v1.common import canonical_permissions, frozen_map

DEFS: dict[str, Any] = {
    "allocate": {
        "description": (
            "What a container receives; values are Jinja2 templates (sandboxed) over resource,"
            " node_name, units, devices and device_ids."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "env": {
                "description": (
                    "Environment variables for the container; names follow Kubernetes rules"
                    " ([-._a-zA-Z][-._a-zA-Z0-9]*), values are templates."
                ),
                "type": "object",
                "propertyNames": {"pattern": "^[-._a-zA-Z][-._a-zA-Z0-9]*$"},
                "additionalProperties": {"type": "string"},
            },
            "mounts": {
                "description": "Host paths mounted into the container.",
                "type": "array",
                "items": {"$ref": "#/$defs/mount"},
            },
            "annotations": {
                "description": "Annotations passed to the container runtime; values are templates.",
                "$ref": "#/$defs/stringMap",
            },
            "cdi": {
                "description": (
                    "Also describe each unit in a CDI spec (written to the CDI directory,"
                    " /var/run/cdi) and return its CDI device name with every allocation;"
                    " device nodes are still returned. Needs a CDI-enabled runtime"
                    " (containerd 1.7+ with enable_cdi, CRI-O) and a kubelet that passes CDI"
                    " devices on (1.28+)."
                ),
                "type": "boolean",
                "default": False,
            },
            "devices": {
                "description": (
                    "Device nodes given with every allocation besides the unit's own (control"
                    " nodes such as /dev/nvidiactl or /dev/infiniband/rdma_cm), as device specs"
                    " (device cgroup access, not bind mounts) and in the CDI spec when cdi is"
                    " on. A required entry that matches no device node makes every unit"
                    " Unhealthy until it appears."
                ),
                "type": "array",
                "items": {"$ref": "#/$defs/extraDevice"},
            },
        },
    },
    "mount": {
        "type": "object",
        "additionalProperties": False,
        "required": ["hostPath", "containerPath"],
        "properties": {
            "hostPath": {
                "description": "Absolute path on the host (a template).",
                "type": "string",
                "minLength": 1,
            },
            "containerPath": {
                "description": "Absolute path in the container (a template).",
                "type": "string",
                "minLength": 1,
            },
            "readOnly": {"description": "Mount read-only.", "type": "boolean", "default": False},
        },
    },
    "extraDevice": {
        "type": "object",
        "additionalProperties": False,
        "required": ["path"],
        "properties": {
            "path": {
                "description": (
                    "Absolute path or glob under /dev (*, ?, [..], **); symlinks resolve to the"
                    " real node, which must be a character or block device."
                ),
                "type": "string",
                "minLength": 1,
            },
            "permissions": {
                "$ref": "#/$defs/permissions",
                "description": (
                    "Device cgroup permissions (r, w, m); by default the resource's permissions."
                ),
            },
            "containerPath": {"$ref": "#/$defs/nodeContainerPath"},
            "optional": {
                "description": (
                    "true: a missing node is left out; false: a missing node makes every unit"
                    " of the resource Unhealthy."
                ),
                "type": "boolean",
                "default": False,
            },
        },
    },
}


@dataclass(frozen=True)
class MountTemplate:
    """A mount whose paths are Jinja2 template sources."""

    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True)
class ExtraDevice:
    """Device nodes given with every allocation besides the unit's own
    (``allocate.devices``): a control node such as ``/dev/nvidiactl``.

    ``path`` is an absolute path or glob under /dev; ``container_path`` a
    template per matched node (``device``), by default the matched path. A
    required entry (``optional`` false) that matches no device node makes every
    unit of the resource Unhealthy until one appears.
    """

    path: str
    permissions: str = "rw"
    container_path: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class AllocateSpec:
    """What a container receives, as template sources."""

    env: Mapping[str, str] = field(default_factory=frozen_map)
    mounts: tuple[MountTemplate, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi: bool = False  # also publish a CDI spec and return CDI names (allocation.cdi)
    devices: tuple[ExtraDevice, ...] = ()


def allocate_spec(raw: dict[str, Any], *, permissions: object = "rw") -> AllocateSpec:
    """The ``allocate`` section as template sources; ``permissions`` (the
    resource's) is the default of its ``devices``."""
    mounts = tuple(
        MountTemplate(m["hostPath"], m["containerPath"], bool(m.get("readOnly", False)))
        for m in raw.get("mounts", ())
    )
    default = permissions if isinstance(permissions, str) else "rw"
    devices = tuple(
        ExtraDevice(
            path=d["path"],
            permissions=canonical_permissions(d.get("permissions", default)),
            container_path=d.get("containerPath"),
            optional=bool(d.get("optional", False)),
        )
        for d in raw.get("devices", ())
    )
    return AllocateSpec(
        env=frozen_map(raw.get("env")),
        mounts=mounts,
        annotations=frozen_map(raw.get("annotations")),
        cdi=bool(raw.get("cdi", False)),
        devices=devices,
    )
