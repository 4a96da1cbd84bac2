"""``labels``: node labels published from what discovery found, for Node Feature
Discovery (docs/deploy.md); checked by ``config/convert.py``, rendered by ``nodelabels``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genericdp.k8snames import label_key_problem

PRESENT_SUFFIX = ".present"
MAX_LABELS = 64

DEFS: dict[str, Any] = {
    "labels": {
        "description": (
            "Node labels published while the resource has a healthy unit, when the daemon"
            " publishes labels (GENERICDP_NODE_FEATURES: a NodeFeature object or a features.d"
            " file for Node Feature Discovery). Each key is a label key, each value a template"
            " over the healthy units (units, devices, resource, node_name) that renders a label"
            " value; a rendered value that is not a label value is not published. <resource"
            ' name>.present: "true" is added unless mapped to null here.'
        ),
        "type": "object",
        "maxProperties": MAX_LABELS,
        "additionalProperties": {"type": ["string", "null"]},
    },
}


@dataclass(frozen=True)
class LabelSpec:
    """``(key, template source)`` sorted by key, and whether the default ``.present``
    label is published (not mapped to null)."""

    given: tuple[tuple[str, str], ...] = ()
    present: bool = True

    def templates(self, resource: str) -> tuple[tuple[str, str], ...]:
        """Every label, the default included, sorted by key."""
        default = present_label(resource) if self.present else None
        if default is None or any(key == default for key, _ in self.given):
            return self.given
        return tuple(sorted((*self.given, (default, "true"))))


def present_label(resource: str) -> str | None:
    """``<resource>.present``, or None when the resource's name leaves no room for
    the suffix in a label key's 63-character name."""
    key = resource + PRESENT_SUFFIX
    return None if label_key_problem(key) else key


def label_spec(raw: dict[str, Any] | None, resource: str) -> LabelSpec:
    given = raw or {}
    default = present_label(resource)
    present = not (default is not None and default in given and given[default] is None)
    pairs = sorted((str(k), str(v)) for k, v in given.items() if v is not None)
    return LabelSpec(tuple(pairs), present)
