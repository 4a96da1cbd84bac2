"""Schema pieces and model types that several sections share: string maps,
durations, commands and device permissions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

_PERMISSION_ORDER = "rwm"
# A resource's ``permissions`` is this with a default (``resource.py``).
PERMISSIONS: dict[str, Any] = {
    "description": (
        "Device cgroup permissions for the container: one or more of r (read), w (write),"
        " m (mknod), each at most once."
    ),
    "type": "string",
    "minLength": 1,
    "pattern": "^(r?w?m?|r?m?w?|w?r?m?|w?m?r?|m?r?w?|m?w?r?)$",
}

DEFS: dict[str, Any] = {
    "stringMap": {
        "type": "object",
        "propertyNames": {"minLength": 1},
        "additionalProperties": {"type": "string"},
    },
    "duration": {
        "description": (
            "Go-style duration: a positive number with a unit (ms, s, m, h), e.g. 300ms, 10s,"
            " 1m30s, 1.5s; at most 24h."
        ),
        "type": "string",
        "pattern": r"^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$",
    },
    "argv": {
        "description": (
            "Command and arguments, run without a shell. argv[0] is an absolute path or a bare"
            " command name looked up in PATH."
        ),
        "type": "array",
        "minItems": 1,
        "items": {"type": "string"},
    },
    "permissions": PERMISSIONS,
}


def frozen_map(values: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only mapping with sorted keys, so equal configs compare equal."""
    return MappingProxyType(dict(sorted((values or {}).items())))


def canonical_permissions(text: str) -> str:
    """Canonical order, so "wr" and "rw" compare equal on reload."""
    return "".join(c for c in _PERMISSION_ORDER if c in text)


@dataclass(frozen=True)
class Exec:
    """Run without a shell."""

    argv: tuple[str, ...]
    timeout: float
