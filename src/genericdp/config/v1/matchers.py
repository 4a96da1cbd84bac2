"""``match``: which device nodes a resource counts (a glob or a udev-like filter)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from genericdp.config.v1.common import frozen_map

DEFS: dict[str, Any] = {
    "matcher": {
        "description": "Exactly one of glob or udev.",
        "oneOf": [
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["glob"],
                "properties": {
                    "glob": {
                        "description": (
                            "Absolute host path glob under /dev (*, ?, [..], **). Symlinks"
                            " match: the host path is the real node, the container path the"
                            " link."
                        ),
                        "type": "string",
                        "minLength": 1,
                    },
                    "containerPath": {"$ref": "#/$defs/nodeContainerPath"},
                },
            },
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["udev"],
                "properties": {
                    "udev": {"$ref": "#/$defs/udev"},
                    "containerPath": {"$ref": "#/$defs/nodeContainerPath"},
                },
            },
        ],
    },
    "udev": {
        "description": (
            "Device nodes found through sysfs, filtered like a udev rule; every given field"
            " must match."
        ),
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "subsystem": {
                "description": (
                    "Exact subsystem of the device (udev SUBSYSTEM), e.g. tty, sound, drm."
                ),
                "type": "string",
                "minLength": 1,
            },
            "kernel": {
                "description": "Glob on the device's kernel name (udev KERNEL), e.g. ttyACM*.",
                "type": "string",
                "minLength": 1,
            },
            "driver": {
                "description": (
                    "Glob on the driver of the device or an ancestor (udev DRIVERS), e.g. cdc_acm."
                ),
                "type": "string",
                "minLength": 1,
            },
            "attributes": {
                "description": (
                    "Globs on sysfs attributes, all matching on the device or one ancestor"
                    ' (udev ATTRS). Values are strings: quote USB IDs like "0403".'
                ),
                "$ref": "#/$defs/stringMap",
            },
            "properties": {
                "description": (
                    "Globs on udev database properties (E: lines), e.g. ID_SERIAL_SHORT."
                    " Values are strings: quote numbers."
                ),
                "$ref": "#/$defs/stringMap",
            },
        },
    },
    "nodeContainerPath": {
        "description": (
            "Where the container sees each node this matcher finds: a template per node over"
            " 'device' (path, host_path, name, major, minor, subsystem, numa_node, attributes,"
            " properties), e.g. /dev/ttyZIGBEE. It must render to a clean absolute path under"
            " /dev. By default the matched path (a by-id link's own path)."
        ),
        "type": "string",
        "minLength": 1,
    },
}


@dataclass(frozen=True)
class GlobMatcher:
    pattern: str
    container_path: str | None = None  # a template per matched node


@dataclass(frozen=True)
class UdevMatcher:
    subsystem: str | None = None
    kernel: str | None = None
    driver: str | None = None
    attributes: Mapping[str, str] = field(default_factory=frozen_map)
    properties: Mapping[str, str] = field(default_factory=frozen_map)
    container_path: str | None = None


Matcher = GlobMatcher | UdevMatcher


def matcher(raw: dict[str, Any]) -> Matcher:
    if "glob" in raw:
        return GlobMatcher(raw["glob"], container_path=raw.get("containerPath"))
    udev = raw["udev"]
    return UdevMatcher(
        subsystem=udev.get("subsystem"),
        kernel=udev.get("kernel"),
        driver=udev.get("driver"),
        attributes=frozen_map(udev.get("attributes")),
        properties=frozen_map(udev.get("properties")),
        container_path=raw.get("containerPath"),
    )
