"""``dra``: what only the DRA backend reads (each device's attributes, its taint's effect)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# The attributes every DRA device carries (kubeletplugin/slices.py); a config may not set them.
DRA_RESERVED_ATTRIBUTES = ("resource", "unitID", "healthy", "nodes")
# The Kubernetes standard attributes genericdp sets from sysfs; not a config's either.
STANDARD_ATTRIBUTES = (
    "resource.kubernetes.io/numaNode",
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
)
# What discovery may add in the driver's domain (kubeletplugin/slices.py discovered_attributes).
DISCOVERED_ATTRIBUTES = 7
# The capacities a device may carry: ``shares`` of a shared device (kubeletplugin/slices.py).
DEVICE_CAPACITIES = 1
# A device holds at most 32 attributes and capacities (resource.k8s.io/v1 validation):
# what is left for a config after genericdp's own.
MAX_CONFIG_ATTRIBUTES = (
    32
    - len(DRA_RESERVED_ATTRIBUTES)
    - len(STANDARD_ATTRIBUTES)
    - DISCOVERED_ATTRIBUTES
    - DEVICE_CAPACITIES
)
# The effects of a device taint (resource.k8s.io/v1 DeviceTaint.effect).
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
DEFAULT_TAINT_EFFECT = "NoSchedule"
_INT64 = 2**63

DEFS: dict[str, Any] = {
    "dra": {
        "description": (
            "Used by the DRA backend only (docs/dra.md); the device-plugin backend ignores it."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "attributes": {
                "description": (
                    "Attributes every device of this resource carries in its ResourceSlice,"
                    " beside those discovery finds (and over them), in the driver's domain: a"
                    ' CEL selector reads device.attributes["<driver>"].<name>. A string, an'
                    " integer, a boolean, or {version: <semver>}."
                ),
                "type": "object",
                "maxProperties": MAX_CONFIG_ATTRIBUTES,
                "propertyNames": {
                    "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,31}$",
                    "not": {"enum": [*DRA_RESERVED_ATTRIBUTES, *STANDARD_ATTRIBUTES]},
                },
                "additionalProperties": {
                    "oneOf": [
                        {"type": "string", "maxLength": 64},
                        {"type": "integer", "minimum": -_INT64, "maximum": _INT64 - 1},
                        {"type": "boolean"},
                        {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["version"],
                            "properties": {
                                "version": {
                                    "description": (
                                        "A semantic version (semver 2.0), e.g. 1.2.3; CEL"
                                        " compares it as a version."
                                    ),
                                    "type": "string",
                                    "maxLength": 64,
                                    "pattern": (
                                        r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
                                        r"(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
                                    ),
                                }
                            },
                        },
                    ]
                },
            },
            "taintEffect": {
                "description": (
                    "The effect of the taint an unhealthy or unplugged device carries in its"
                    " ResourceSlice (<driver>/unhealthy). NoSchedule: no new allocations, claims"
                    " that hold it keep it. NoExecute: pods that use it are also evicted."
                    " None: the taint only informs (docs/dra.md, Unhealthy devices)."
                ),
                "enum": list(TAINT_EFFECTS),
                "default": DEFAULT_TAINT_EFFECT,
            },
        },
    }
}


@dataclass(frozen=True)
class Version:
    """A ``{version: 1.2.3}`` attribute value (semver 2.0)."""

    version: str


AttributeValue = str | int | bool | Version


@dataclass(frozen=True)
class DraSpec:
    attributes: Mapping[str, AttributeValue] = field(default_factory=lambda: MappingProxyType({}))
    taint_effect: str = DEFAULT_TAINT_EFFECT


def dra_spec(raw: dict[str, Any]) -> DraSpec:
    attributes: dict[str, AttributeValue] = {}
    for name, value in sorted(raw.get("attributes", {}).items()):
        attributes[name] = Version(str(value["version"])) if isinstance(value, dict) else value
    return DraSpec(
        attributes=MappingProxyType(attributes),
        taint_effect=str(raw.get("taintEffect", DEFAULT_TAINT_EFFECT)),
    )
