"""Config format v1, one module per section, each holding the section's JSON
Schema fragment, its frozen dataclasses and its converter from validated data
(the layout of NVIDIA's device plugin ``api/config/v1``). ``build_schema``
assembles the fragments into the schema ``genericdp schema`` prints.
"""

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
    defs: dict[str, Any] = {}
    for section in SECTIONS:
        defs.update(section.DEFS)
    built: dict[str, Any] = json.loads(json.dumps({**resource.ROOT, "$defs": defs}))
    return built


def render_schema(schema: dict[str, Any]) -> str:
    """The schema as its file holds it: JSON, two-space indents, one final newline."""
    return json.dumps(schema, indent=2) + "\n"
