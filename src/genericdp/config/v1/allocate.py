"""``allocate``: what a container receives besides its units' device nodes, as
template sources (compiled by ``genericdp.config.templates``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from genericdp.config.v1.common import canonical_permissions, frozen_map

# Three octal digits, a leading 0 allowed: permission bits only (no setuid,
# setgid or sticky bit, which a device node has no use for).
MODE_PATTERN = "^0?[0-7]{3}$"
# uid_t and gid_t are 32 bits; 2^32-1 is (uid_t)-1, "leave unchanged" to chown.
MAX_ID = 2**32 - 2

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
            "deviceNodes": {"$ref": "#/$defs/deviceNodes"},
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
    "deviceNodes": {
        "description": (
            "The mode and owner of every device node a container receives through CDI"
            " (allocate.cdi, and always under DRA): each field given replaces the host"
            " node's, the others keep the host node's. For non-root consumers, e.g."
            ' {gid: 44, mode: "0660"} with the pod in group 44 (supplementalGroups). The'
            " device-plugin API cannot pass them: without CDI the runtime copies the host"
            " node's mode and owner."
        ),
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "mode": {
                "description": (
                    'Permission bits as an octal string, e.g. "0660"; no setuid, setgid or'
                    " sticky bit."
                ),
                "type": "string",
                "pattern": MODE_PATTERN,
            },
            "uid": {
                "description": "Owner of the node in the container (a numeric user ID).",
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_ID,
            },
            "gid": {
                "description": "Group of the node in the container (a numeric group ID).",
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_ID,
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
    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True)
class ExtraDevice:
    path: str
    permissions: str = "rw"
    container_path: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class NodeOwnership:
    """``allocate.deviceNodes``; None keeps the host node's. Only CDI can carry them."""

    mode: int | None = None  # permission bits, 0o000..0o777
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class AllocateSpec:
    env: Mapping[str, str] = field(default_factory=frozen_map)
    mounts: tuple[MountTemplate, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi: bool = False  # also publish a CDI spec and return CDI names (allocation.cdi)
    devices: tuple[ExtraDevice, ...] = ()
    device_nodes: NodeOwnership = field(default_factory=NodeOwnership)


def allocate_spec(raw: dict[str, Any], *, permissions: object = "rw") -> AllocateSpec:
    """``permissions`` (the resource's) is the default of its ``devices``."""
    mounts = tuple(
        MountTemplate(m["hostPath"], m["containerPath"], bool(m.get("readOnly", False)))
        for m in raw.get("mounts", ())
    )
    default = permissions if isinstance(permissions, str) else "rw"
    nodes = raw.get("deviceNodes", {})
    mode = int(nodes["mode"], 8) if "mode" in nodes else None  # octal, as the schema checked
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
        device_nodes=NodeOwnership(mode, nodes.get("uid"), nodes.get("gid")),
    )
