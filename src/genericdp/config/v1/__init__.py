"""Config format v1, one module per section: its JSON Schema fragment, its frozen
dataclasses and its converter from validated data."""

from __future__ import annotations

import json
from typing import Any

from genericdp.config.v1 import (
    allocate,
    common,
    dra,
    health,
    hooks,
    labels,
    matchers,
    nodeselector,
    resource,
)

# The sections with ``$defs`` of their own, in the order the schema file lists
# them (``grouping`` is one property of a resource, inlined there).
SECTIONS = (resource, dra, matchers, common, health, hooks, allocate, nodeselector, labels)


def build_schema() -> dict[str, Any]:
    """The whole JSON Schema (draft 2020-12), a new dict each time."""
    defs = {name: d for section in SECTIONS for name, d in section.DEFS.items()}
    built: dict[str, Any] = json.loads(json.dumps({**resource.ROOT, "$defs": defs}))
    return built
