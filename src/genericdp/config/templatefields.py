"""The fields of what templates see, and the static check that a template reads only
fields that exist: ``{{ devices[0].pth }}`` is a validation error, not a failed Allocate.

The contexts are built above config (``allocation.render``, ``discovery.containerpaths``);
a test checks their keys against these. What the check cannot follow (a ``{% set %}``
name, most filters' results) is not checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jinja2 import nodes


@dataclass(frozen=True)
class Record:
    """A dict with fixed keys; ``what`` names one in messages (``a device``)."""

    what: str
    fields: Mapping[str, Shape | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOf:
    item: Shape | None


Shape = Record | ListOf

# A dict's own methods, fine on any record (``device.items()``).
_DICT_METHODS = frozenset({"get", "items", "keys", "values"})

_NODE_COMMON: dict[str, Shape | None] = dict.fromkeys(
    ("path", "host_path", "major", "minor", "subsystem", "numa_node", "attributes", "properties")
)
ALLOCATED_NODE = Record(
    "a device (an item of devices or of a unit's nodes)",
    {**_NODE_COMMON, "container_path": None, "unit_id": None},
)
UNIT = Record(
    "a unit (an item of units)",
    {
        "id": None,
        "nodes": ListOf(ALLOCATED_NODE),
        "numa_node": None,
        "attributes": None,
        "properties": None,
    },
)
# What an allocate template sees (TEMPLATE_NAMES) and what a node's containerPath sees.
ALLOCATE_CONTEXT: Mapping[str, Shape | None] = {
    "resource": None,
    "node_name": None,
    "units": ListOf(UNIT),
    "devices": ListOf(ALLOCATED_NODE),
    "device_ids": ListOf(None),
}
NODE_CONTEXT: Mapping[str, Shape | None] = {
    "device": Record("device (the node)", {**_NODE_COMMON, "name": None}),
}


@dataclass(frozen=True)
class FieldProblem:
    message: str
    line: int


def field_problems(tree: nodes.Template, context: Mapping[str, Shape | None]) -> list[FieldProblem]:
    assigned = {
        n.name
        for kind in (nodes.Assign, nodes.AssignBlock, nodes.With)
        for a in tree.find_all(kind)
        for n in (*getattr(a, "targets", [getattr(a, "target", None)]), *a.find_all(nodes.Name))
        if isinstance(n, nodes.Name) and n.ctx in ("store", "param")
    }
    scope = {k: v for k, v in context.items() if k not in assigned}
    problems: list[FieldProblem] = []
    _walk(tree, scope, problems)
    return problems


def _walk(node: nodes.Node, scope: Mapping[str, Shape | None], out: list[FieldProblem]) -> None:
    if isinstance(node, nodes.For):
        _walk_for(node, scope, out)
        return
    if isinstance(node, nodes.Getattr | nodes.Getitem):
        name = looked_up(node)
        base = _shape(node.node, scope)
        if isinstance(base, Record) and name is not None:
            allowed = name in base.fields or name in _DICT_METHODS  # x['items'] falls back
            if not allowed and not name.startswith("_"):  # private: refused on its own
                out.append(FieldProblem(_unknown_field(name, base), node.lineno))
    if isinstance(node, nodes.Filter) and node.name == "map" and node.node is not None:
        item = _item(_shape(node.node, scope))
        for kwarg in node.kwargs:
            if kwarg.key == "attribute" and isinstance(kwarg.value, nodes.Const):
                attr = str(kwarg.value.value).partition(".")[0]
                if isinstance(item, Record) and attr not in item.fields and attr[:1] != "_":
                    out.append(FieldProblem(_unknown_field(attr, item), node.lineno))
    for child in node.iter_child_nodes():
        _walk(child, scope, out)


def _walk_for(node: nodes.For, scope: Mapping[str, Shape | None], out: list[FieldProblem]) -> None:
    _walk(node.iter, scope, out)
    inner = dict(scope)
    if isinstance(node.target, nodes.Name):
        inner[node.target.name] = _item(_shape(node.iter, scope))
    for target in node.target.find_all(nodes.Name):  # unpacked: not followed
        inner[target.name] = None
    for child in (*node.body, *([node.test] if node.test else [])):
        _walk(child, inner, out)
    for child in node.else_:
        _walk(child, scope, out)


def looked_up(node: nodes.Node) -> str | None:
    """The attribute of ``x.attr`` or the constant key of ``x['key']``."""
    if isinstance(node, nodes.Getattr):
        return str(node.attr)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        return node.arg.value if isinstance(node.arg.value, str) else None
    return None


def _item(shape: Shape | None) -> Shape | None:
    return shape.item if isinstance(shape, ListOf) else None


def _shape(expr: nodes.Node, scope: Mapping[str, Shape | None]) -> Shape | None:
    """What ``expr`` is, when the check can tell (None: anything)."""
    if isinstance(expr, nodes.Name):
        return scope.get(expr.name)
    if isinstance(expr, nodes.Getattr | nodes.Getitem):
        return _lookup_shape(expr, _shape(expr.node, scope))
    if isinstance(expr, nodes.Filter) and expr.node is not None:
        inner = _shape(expr.node, scope)
        if expr.name in ("first", "last"):
            return _item(inner)
        if expr.name in ("list", "sort", "reverse", "unique") and isinstance(inner, ListOf):
            return inner
    return None


def _lookup_shape(expr: nodes.Getattr | nodes.Getitem, base: Shape | None) -> Shape | None:
    if isinstance(base, Record):
        name = looked_up(expr)
        return base.fields.get(name) if name is not None else None
    if isinstance(base, ListOf) and isinstance(expr, nodes.Getitem):
        index = expr.arg
        if isinstance(index, nodes.Slice):
            return base
        if not (isinstance(index, nodes.Const) and isinstance(index.value, str)):
            return base.item
    return None


def _unknown_field(name: str, record: Record) -> str:
    known = sorted(record.fields)
    hint = did_you_mean(name, known)
    return f"{record.what} has no field {name!r} (fields: {', '.join(known)}{hint})"


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
