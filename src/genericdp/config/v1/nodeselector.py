"""``nodeSelector``: which nodes serve a resource, a Kubernetes label selector
over the labels of the node the daemon runs on (matching: ``config/selector.py``)."""

from __future__ import annotations

from typing import Any

from genericdp.config.selector import NodeSelector, Operator, Requirement
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue, ellipsized
from genericdp.k8snames import label_key_problem, label_value_problem

DEFS: dict[str, Any] = {
    "nodeSelector": {
        "description": (
            "Serve this resource only on nodes whose labels match, as a Kubernetes label"
            " selector does: every matchLabels entry and every matchExpressions requirement"
            " must hold; {} selects every node. Without it every node serves the resource."
            " A node whose labels cannot be read (no API access) serves no resource that has"
            " one."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "matchLabels": {
                "description": "Labels the node must carry with exactly these values.",
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "description": "Requirements on the node's labels, all of which must hold.",
                "type": "array",
                "items": {"$ref": "#/$defs/labelRequirement"},
            },
        },
    },
    "labelRequirement": {
        "type": "object",
        "additionalProperties": False,
        "required": ["key", "operator"],
        "properties": {
            "key": {
                "description": "A label key: [<DNS subdomain>/]<name>.",
                "type": "string",
            },
            "operator": {
                "description": (
                    "In: the label is one of values. NotIn: the label is absent or none of"
                    " values. Exists: the label is there. DoesNotExist: it is not."
                ),
                "enum": [o.value for o in Operator],
            },
            "values": {
                "description": "At least one for In and NotIn; none for Exists and DoesNotExist.",
                "type": "array",
                "items": {"type": "string"},
            },
        },
    },
}


def node_selector(raw: dict[str, Any]) -> NodeSelector:
    labels = raw.get("matchLabels", {})
    requirements = [Requirement(k, Operator.IN, (str(labels[k]),)) for k in sorted(labels)]
    requirements += [
        Requirement(e["key"], Operator(e["operator"]), tuple(str(v) for v in e.get("values", ())))
        for e in raw.get("matchExpressions", ())
    ]
    return NodeSelector(tuple(requirements))


def node_selector_issues(
    doc: Document, path: KeyPath, resource: dict[str, Any]
) -> list[ConfigIssue]:
    """Label keys and values as Kubernetes checks them, and the values each operator takes."""
    selector = resource.get("nodeSelector")
    if not isinstance(selector, dict):
        return []
    here = (*path, "nodeSelector")
    issues: list[ConfigIssue] = []
    labels = selector.get("matchLabels")
    for key, value in labels.items() if isinstance(labels, dict) else ():
        where = (*here, "matchLabels", key)
        if problem := label_key_problem(str(key)):
            issues.append(
                doc.issue(where, f"label key {ellipsized(str(key), 80)!r}: {problem}", at_key=True)
            )
        if isinstance(value, str) and (problem := label_value_problem(value)):
            issues.append(doc.issue(where, f"label value {ellipsized(value, 80)!r}: {problem}"))
    expressions = selector.get("matchExpressions")
    for index, expr in enumerate(expressions if isinstance(expressions, list) else ()):
        if isinstance(expr, dict):
            issues += _requirement(doc, (*here, "matchExpressions", index), expr)
    return issues


def _requirement(doc: Document, where: KeyPath, expr: dict[str, Any]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values", [])
    if isinstance(key, str) and (problem := label_key_problem(key)):
        issues.append(doc.issue((*where, "key"), f"label key {ellipsized(key, 80)!r}: {problem}"))
    if not isinstance(values, list):
        return issues
    for index, value in enumerate(values):
        if isinstance(value, str) and (problem := label_value_problem(value)):
            message = f"label value {ellipsized(value, 80)!r}: {problem}"
            issues.append(doc.issue((*where, "values", index), message))
    if operator in tuple(Operator):
        op = Operator(operator)
        if op.takes_values and not values:
            message = f"operator {op} needs at least one value"
            issues.append(doc.issue((*where, "values") if "values" in expr else where, message))
        elif not op.takes_values and values:
            message = f"operator {op} takes no values (remove values, or use In or NotIn)"
            issues.append(doc.issue((*where, "values"), message))
    return issues
