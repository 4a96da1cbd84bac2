"""``hooks``: commands run around a container's use of a unit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genericdp.config.v1.common import Exec

DEFAULT_HOOK_TIMEOUT = "10s"
HOOK_NAMES = ("init", "preStart", "cleanup")

DEFS: dict[str, Any] = {
    "hook": {
        "type": "object",
        "additionalProperties": False,
        "required": ["exec"],
        "properties": {
            "exec": {
                "description": (
                    "Hook command and arguments (no shell); the unit is described in"
                    " GENERICDP_* environment variables."
                ),
                "$ref": "#/$defs/argv",
            },
            "timeout": {
                "description": "The hook fails if it runs longer than this; at least 100ms.",
                "$ref": "#/$defs/duration",
                "default": DEFAULT_HOOK_TIMEOUT,
            },
        },
    },
    "hooks": {
        "description": "Commands run around a container's use of a unit.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "init": {
                "description": (
                    "Runs in Allocate before the container gets the unit; a failure fails"
                    " the allocation."
                ),
                "$ref": "#/$defs/hook",
            },
            "preStart": {
                "description": (
                    "Runs in PreStartContainer (which then becomes required), just before the"
                    " container starts."
                ),
                "$ref": "#/$defs/hook",
            },
            "cleanup": {
                "description": (
                    "Runs after the unit is released by its pod, and when the unit is removed;"
                    " the unit is not handed out again before it finishes."
                ),
                "$ref": "#/$defs/hook",
            },
        },
    },
}


@dataclass(frozen=True)
class Hooks:
    init: Exec | None = None  # in Allocate, before the container gets the unit
    pre_start: Exec | None = None  # in PreStartContainer (makes it required)
    cleanup: Exec | None = None  # after release, and when a unit is removed


def hooks(raw: dict[str, Any], duration: Callable[..., float]) -> Hooks:
    def hook(name: str) -> Exec | None:
        if name not in raw:
            return None
        return Exec(tuple(raw[name]["exec"]), duration("hooks", name, "timeout"))

    return Hooks(init=hook("init"), pre_start=hook("preStart"), cleanup=hook("cleanup"))
