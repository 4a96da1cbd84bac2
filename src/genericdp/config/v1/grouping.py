"""``groupBy``: how matched device nodes form the units a container is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_GROUP_BY = "node"

PROPERTY: dict[str, Any] = {
    "description": (
        "How matched device nodes form units: node (each node alone), all (everything"
        " together), parent:<subsystem> (nodes sharing their nearest sysfs ancestor of that"
        " subsystem), or {pathRegex: <regex>} (nodes whose path gives the same key)."
    ),
    "default": DEFAULT_GROUP_BY,
    "oneOf": [
        {"type": "string", "enum": ["node", "all"]},
        {"type": "string", "pattern": "^parent:[a-z0-9_-]+$"},
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["pathRegex"],
            "properties": {
                "pathRegex": {
                    "description": (
                        "A regular expression in RE2 syntax (no look-around, no"
                        " backreferences: matching takes linear time) searched in each"
                        " matched host path; its named group 'key' (else group 1, else the"
                        " whole match) is the unit key. Nodes it does not match are left out."
                    ),
                    "type": "string",
                    "minLength": 1,
                }
            },
        },
    ],
}


@dataclass(frozen=True)
class GroupBy:
    kind: Literal["node", "all", "parent", "pathRegex"] = "node"
    subsystem: str | None = None
    pattern: str | None = None

    def __str__(self) -> str:
        if self.kind == "parent":
            return f"parent:{self.subsystem}"
        if self.kind == "pathRegex":
            return f"pathRegex:{self.pattern}"
        return self.kind


def group_by(raw: str | dict[str, str]) -> GroupBy:
    if isinstance(raw, dict):
        return GroupBy("pathRegex", pattern=raw["pathRegex"])
    if raw.startswith("parent:"):
        return GroupBy("parent", subsystem=raw.removeprefix("parent:"))
    return GroupBy("all" if raw == "all" else "node")
