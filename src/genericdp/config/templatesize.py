"""What a template renders at least, in UTF-8 bytes, known without running it: its text
and the constants it prints outside any ``if`` or loop (``{{ "x" * 10 ** 6 }}``), sized
without building them. A template that must render past the limits is refused at
validation rather than at every Allocate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jinja2 import nodes

from genericdp.config.sandbox import MAX_INT_BITS


@dataclass(frozen=True)
class _Text:
    """A string known only by its size in UTF-8 (never built)."""

    size: int


_Value = _Text | int | None  # None: not known before the template runs


def least_output(tree: nodes.Template) -> list[tuple[int, int]]:
    """``(bytes, line)`` of each part of ``tree``'s output known before it runs."""
    found: list[tuple[int, int]] = []
    for node in tree.body:
        if not isinstance(node, nodes.Output):
            continue  # loops, conditions, assignments: their output is not certain
        for part in node.nodes:
            if isinstance(part, nodes.TemplateData):
                size = len(part.data.encode("utf-8", "surrogatepass"))
            else:
                size = _printed(_value(part))
            if size:
                found.append((size, part.lineno))
    return found


def _printed(value: _Value) -> int:
    if isinstance(value, _Text):
        return value.size
    if isinstance(value, int):
        return len(str(value))
    return 0


def _value(node: nodes.Node) -> _Value:
    if isinstance(node, nodes.Const):
        if isinstance(node.value, str):
            return _Text(len(node.value.encode("utf-8", "surrogatepass")))
        return node.value if type(node.value) is int else None
    if isinstance(node, nodes.Concat):
        return _Text(sum(_printed(_value(n)) for n in node.nodes))
    if isinstance(node, nodes.Neg | nodes.Pos):
        inner = _value(node.node)
        return (-inner if isinstance(node, nodes.Neg) else inner) if type(inner) is int else None
    if not isinstance(node, nodes.BinExpr):
        return None
    operation = _OPERATIONS.get(type(node))
    return None if operation is None else operation(_value(node.left), _value(node.right))


def _times(left: _Value, right: _Value) -> _Value:
    if isinstance(left, _Text) and type(right) is int:
        return _Text(left.size * max(right, 0))
    if type(left) is int and isinstance(right, _Text):
        return _Text(right.size * max(left, 0))
    if type(left) is int and type(right) is int and _bits(left) + _bits(right) <= MAX_INT_BITS:
        return left * right
    return None


def _plus(left: _Value, right: _Value) -> _Value:
    if isinstance(left, _Text) and isinstance(right, _Text):
        return _Text(left.size + right.size)
    return _small(left + right) if type(left) is int and type(right) is int else None


def _power(left: _Value, right: _Value) -> _Value:
    if type(left) is int and type(right) is int and right >= 0:
        return _small(left**right) if _bits(left) * right <= MAX_INT_BITS else None
    return None


_OPERATIONS: dict[type[nodes.BinExpr], Callable[[_Value, _Value], _Value]] = {
    nodes.Mul: _times,
    nodes.Add: _plus,
    nodes.Pow: _power,
}


def _bits(value: int) -> int:
    return max(abs(value).bit_length(), 1)


def _small(value: int) -> int | None:
    """An integer the sandbox lets a template hold (else the sandbox refuses it)."""
    return value if value.bit_length() <= MAX_INT_BITS else None
