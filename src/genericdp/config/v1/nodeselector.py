"""``nodeSelector``: which nodes serve a resource, a Kubernetes label selector
over the labels of the node the daemon runs on (matching: ``config/selector.py``)."""

from __future__ import annotations

from typing import Any

from genericdp.config.selector import NodeSelector, Operator, Requirement

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
    """The selector of a validated ``nodeSelector`` mapping."""
    labels = raw.get("matchLabels", {})
    requirements = [Requirement(k, Operator.IN, (str(labels[k]),)) for k in sorted(labels)]
    requirements += [
        Requirement(e["key"], Operator(e["operator"]), tuple(str(v) for v in e.get("values", ())))
        for e in raw.get("matchExpressions", ())
    ]
    return NodeSelector(tuple(requirements))
