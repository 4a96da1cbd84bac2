"""``health``: a probe per unit, a command or a sysfs attribute read in-process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genericdp.config.durations import parse_duration
from genericdp.config.v1.common import Exec

DEFAULT_HEALTH_INTERVAL = "10s"
DEFAULT_HEALTH_TIMEOUT = "3s"
DEFAULT_FAILURE_THRESHOLD = 3

DEFS: dict[str, Any] = {
    "health": {
        "description": (
            "A probe run for each unit: a command (exec) or a sysfs attribute read in-process"
            " (sysfs), exactly one. Unhealthy after failureThreshold consecutive failures"
            " (non-zero exit, unexpected value or timeout), Healthy again after one success."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "exec": {
                "description": (
                    "Probe command and arguments (no shell); the unit is described in"
                    " GENERICDP_* environment variables."
                ),
                "$ref": "#/$defs/argv",
            },
            "sysfs": {"$ref": "#/$defs/sysfsProbe"},
            "interval": {
                "description": "Time between probes of a unit; at least 1s (probes run per unit).",
                "$ref": "#/$defs/duration",
                "default": DEFAULT_HEALTH_INTERVAL,
            },
            "timeout": {
                "description": (
                    "A probe running longer than this fails (for sysfs: one round of reads);"
                    " at least 100ms and shorter than interval."
                ),
                "$ref": "#/$defs/duration",
                "default": DEFAULT_HEALTH_TIMEOUT,
            },
            "failureThreshold": {
                "description": "Consecutive failed probes before the unit is reported Unhealthy.",
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "default": DEFAULT_FAILURE_THRESHOLD,
            },
        },
        "oneOf": [{"required": ["exec"]}, {"required": ["sysfs"]}],
    },
    "sysfsProbe": {
        "description": (
            "Reads an attribute of the unit's device (its groupBy parent, else its first node's"
            " device) or of an ancestor, without starting a process, and compares it with a glob."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": ["attribute", "expect"],
        "properties": {
            "attribute": {
                "description": (
                    "Path of the attribute relative to a device directory, e.g. state,"
                    " power_state, ports/1/state; components may be globs (every file matched"
                    " must pass). No leading '/', no '..'."
                ),
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
            },
            "subsystem": {
                "description": (
                    "Read it from the nearest ancestor of this subsystem (e.g. pci, usb,"
                    " infiniband); without it, from the first device, the unit's own upwards,"
                    " that has the attribute."
                ),
                "type": "string",
                "pattern": "^[a-z0-9_-]+$",
            },
            "expect": {
                "description": (
                    "Glob the value must match, surrounding whitespace stripped, e.g."
                    ' "4: ACTIVE", D0, "1".'
                ),
                "type": "string",
            },
        },
    },
}


@dataclass(frozen=True)
class SysfsProbe:
    attribute: str
    expect: str
    subsystem: str | None = None
    # For one round of reads; a stuck read fails its units.
    timeout: float = parse_duration(DEFAULT_HEALTH_TIMEOUT)


@dataclass(frozen=True)
class HealthCheck:
    """Exactly one of ``exec`` and ``sysfs`` is set."""

    exec: Exec | None
    interval: float = parse_duration(DEFAULT_HEALTH_INTERVAL)
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    sysfs: SysfsProbe | None = None

    @property
    def timeout(self) -> float:
        if self.sysfs is not None:
            return self.sysfs.timeout
        return self.exec.timeout if self.exec is not None else 0.0


def health_check(raw: dict[str, Any], duration: Callable[..., float]) -> HealthCheck:
    timeout = duration("health", "timeout")
    sysfs = raw.get("sysfs")
    return HealthCheck(
        exec=Exec(tuple(raw["exec"]), timeout) if "exec" in raw else None,
        interval=duration("health", "interval"),
        failure_threshold=int(raw.get("failureThreshold", DEFAULT_FAILURE_THRESHOLD)),
        sysfs=(
            SysfsProbe(sysfs["attribute"], sysfs["expect"], sysfs.get("subsystem"), timeout)
            if sysfs is not None
            else None
        ),
    )
