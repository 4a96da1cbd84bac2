"""Templates that are text and lookups, rendered without Jinja's machinery.

Most allocate templates are a name, a path into it or a list joined:
``{{ node_name }}``, ``/dev/{{ units[0].id }}``, ``{{ device_ids | join(',') }}``,
``{{ devices | map(attribute='path') | join(',') }}``. Rendering one through
Jinja costs a context, a generator and the sandbox's dispatch of every step,
most of an Allocate's time (docs/contributing/performance.md). Such a template gets a
``Plan`` here at compile time, and ``resolve`` walks it over the context.

The output must be exactly Jinja's, errors included, so the work is split:

- ``resolve`` only looks values up, exactly as the sandbox's first attempt
  does (``obj[key]``), and gives up (None) wherever the sandbox would do
  anything else: a key that is missing, a ``.name`` that is also a Python
  attribute (the sandbox prefers the attribute), a value of another type.
  Jinja then renders the template as always, and raises its own errors;
- what has effects (the budget's work and time, the size checks) is done by
  ``genericdp.config.sandbox`` with the very functions the sandboxed
  filters call, in the order they call them.

Anything outside this small grammar (conditions, loops, other filters,
literals, arithmetic) has no plan and is rendered by Jinja.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jinja2 import nodes

# How one lookup step reads a value: ``x.name`` (Getattr), ``x[key]`` (Getitem).
_ATTR = "attr"
_ITEM = "item"


@dataclass(frozen=True)
class Lookup:
    """``name`` then ``steps`` (each ``(_ATTR | _ITEM, key)``), then optionally
    ``| map(attribute=mapped)`` and ``| join(separator)``."""

    name: str
    steps: tuple[tuple[str, str | int], ...] = ()
    mapped: str | None = None  # the attribute of ``map(attribute=...)``, before a join
    separator: str | None = None  # the argument of ``join``; None: no join


# A template's output: its text between lookups, and the lookups.
Plan = tuple[str | Lookup, ...]


class Joined(NamedTuple):
    """A resolved ``join``: the items to join (``map``'s results when ``mapped``).
    A tuple: made at every render, and quicker to make than a dataclass."""

    items: Sequence[Any]
    separator: str
    mapped: bool


# What ``resolve`` gives for each part of a plan: text, a value, or a join to do.
Part = str | Joined | tuple[Any]


def plan_of(tree: nodes.Template) -> Plan | None:
    """The plan of a parsed (not yet hardened) template, or None when it has none."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    parts: list[str | Lookup] = []
    for node in tree.body[0].nodes:
        if isinstance(node, nodes.TemplateData):
            parts.append(node.data)
            continue
        lookup = _lookup(node)
        if lookup is None:
            return None
        parts.append(lookup)
    return tuple(parts)


def _lookup(node: nodes.Node | None) -> Lookup | None:
    separator: str | None = None
    mapped: str | None = None
    if isinstance(node, nodes.Filter) and node.name == "join":
        separator = _join_separator(node)
        if separator is None:
            return None
        node = node.node
        if isinstance(node, nodes.Filter) and node.name == "map":
            mapped = _map_attribute(node)
            if mapped is None:
                return None
            node = node.node
    if node is None:
        return None
    steps: list[tuple[str, str | int]] = []
    while not isinstance(node, nodes.Name):
        if isinstance(node, nodes.Getattr):
            steps.append((_ATTR, node.attr))
        elif isinstance(node, nodes.Getitem) and _constant_key(node.arg):
            steps.append((_ITEM, node.arg.value))  # type: ignore[attr-defined]
        else:
            return None
        node = node.node
    if node.ctx != "load":
        return None
    return Lookup(node.name, tuple(reversed(steps)), mapped, separator)


def _constant_key(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Const) and type(node.value) in (str, int)


def _plain_call(node: nodes.Filter) -> bool:
    return node.node is not None and node.dyn_args is None and node.dyn_kwargs is None


def _join_separator(node: nodes.Filter) -> str | None:
    """The separator of ``join`` or ``join('s')``; None for any other form."""
    if not _plain_call(node) or node.kwargs or len(node.args) > 1:
        return None
    if not node.args:
        return ""
    arg = node.args[0]
    return arg.value if isinstance(arg, nodes.Const) and type(arg.value) is str else None


def _map_attribute(node: nodes.Filter) -> str | None:
    """The attribute of ``map(attribute='name')``; None for any other form (a
    dotted or numeric attribute, ``default``, a filter name)."""
    if not _plain_call(node) or node.args or len(node.kwargs) != 1:
        return None
    keyword = node.kwargs[0]
    value = keyword.value
    if keyword.key != "attribute" or not isinstance(value, nodes.Const):
        return None
    attribute = value.value
    return attribute if type(attribute) is str and attribute.isidentifier() else None


class _GiveUp(Exception):  # noqa: N818 -- control flow inside resolve only
    pass


def resolve(plan: Plan, context: Mapping[str, Any]) -> list[Part] | None:
    """Each part of ``plan`` looked up in ``context`` (a value as a 1-tuple), or
    None where the sandbox would do more than look up (then Jinja renders).

    Pure: nothing is measured, spent or checked here.
    """
    parts: list[Part] = []
    try:
        for part in plan:
            if isinstance(part, str):
                parts.append(part)
                continue
            if part.name not in context:
                return None  # Jinja's StrictUndefined error
            value = context[part.name]
            for how, key in part.steps:
                value = _attribute(value, key) if how == _ATTR else _item(value, key)
            if part.separator is None:
                parts.append((value,))
                continue
            if type(value) not in (list, tuple):
                return None
            if part.mapped is not None:
                value = [_item(item, part.mapped) for item in value]
            parts.append(Joined(value, part.separator, part.mapped is not None))
    except _GiveUp:
        return None
    return parts


def _item(value: Any, key: str | int) -> Any:
    """``value[key]`` where the sandbox's ``getitem`` takes it the same way."""
    if type(value) not in (dict, list, tuple):
        raise _GiveUp
    try:
        return value[key]
    except (TypeError, LookupError):
        raise _GiveUp from None  # the sandbox tries an attribute, or is Undefined


def _attribute(value: Any, name: str | int) -> Any:
    """``value.name`` where the sandbox's ``getattr`` gives ``value[name]``: it
    tries the Python attribute first (``units[0].items`` is dict.items)."""
    if type(value) is not dict or not isinstance(name, str) or hasattr(value, name):
        raise _GiveUp
    try:
        return value[name]
    except LookupError:
        raise _GiveUp from None
