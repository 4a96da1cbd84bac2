"""``labels``: node labels published from what discovery found, the way Node
Feature Discovery takes them from third parties (docs/deploy.md).

Each value is a template over the resource's healthy units (compiled and
checked at load by ``config/semantic.py``, rendered by
``nodelabels/__init__.py``); every resource also publishes
``<domain>/<name>.present: "true"`` while it has a healthy unit, unless its
``labels`` maps that key to null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue, ellipsized
from genericdp.k8snames import label_key_problem

PRESENT_SUFFIX = ".present"
MAX_LABELS = 64
# Node Feature Discovery never publishes these (nfd-master's denyLabelNs), but for
# these two sub-namespaces, which it always allows.
_DENIED_DOMAIN = "kubernetes.io"
_ALLOWED_DOMAINS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")

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
    """The labels a resource's ``labels`` gives: ``(key, template source)`` sorted by
    key, and whether the default ``.present`` label is published (not mapped to null)."""

    given: tuple[tuple[str, str], ...] = ()
    present: bool = True

    def templates(self, resource: str) -> tuple[tuple[str, str], ...]:
        """Every label of resource ``resource``, the default included, sorted by key."""
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
    """The labels of a validated resource named ``resource``."""
    given = raw or {}
    default = present_label(resource)
    present = not (default is not None and default in given and given[default] is None)
    pairs = sorted((str(k), str(v)) for k, v in given.items() if v is not None)
    return LabelSpec(tuple(pairs), present)


# Rules the schema cannot say (config/semantic.py runs them, and compiles the templates).


def label_key_issues(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    """Each key a label key that Node Feature Discovery publishes; null only on the default."""
    labels = resource.get("labels")
    if not isinstance(labels, dict):
        return []
    name = resource.get("name")
    default = present_label(name) if isinstance(name, str) else None
    issues: list[ConfigIssue] = []
    for key, value in labels.items():
        where = (*path, "labels", key)
        shown = ellipsized(str(key), 80)
        if problem := label_key_problem(str(key)) or _denied(str(key)):
            issues.append(doc.issue(where, f"label key {shown!r}: {problem}", at_key=True))
        elif value is None and key != default:
            message = (
                f"null turns off only the default label {default!r}; {shown!r} is not it"
                " (remove the key instead)"
                if default
                else f"null turns off only the default label, which {name!r} does not have"
            )
            issues.append(doc.issue(where, message))
    return issues


def _denied(key: str) -> str | None:
    prefix, slash, _ = key.rpartition("/")
    if not slash or not (prefix == _DENIED_DOMAIN or prefix.endswith("." + _DENIED_DOMAIN)):
        return None
    if any(prefix == d or prefix.endswith("." + d) for d in _ALLOWED_DOMAINS):
        return None
    return (
        "Node Feature Discovery publishes no label under kubernetes.io or its subdomains"
        " but feature.node.kubernetes.io and profile.node.kubernetes.io"
    )
