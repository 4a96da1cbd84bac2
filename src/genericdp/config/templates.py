"""Templates compiled in the sandbox at load, so that syntax errors, unknown names and
whatever the sandbox would refuse while rendering (other templates, macros, recursive
loops, private attributes) are config errors before the first Allocate.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from jinja2 import TemplateSyntaxError, meta, nodes
from jinja2.environment import Template
from jinja2.exceptions import SecurityError
from jinja2.visitor import NodeTransformer

from genericdp.config import sandbox
from genericdp.config.sandbox import (
    MAX_ALLOCATION_BYTES,
    MAX_TEMPLATE_CHARS,
    MAX_VALUE_BYTES,
    MAX_VALUE_CHARS,
    SANDBOX,
    SliceSpent,
    allocation_budget,
)
from genericdp.config.templatefields import (
    ALLOCATE_CONTEXT,
    NODE_CONTEXT,
    did_you_mean,
    field_problems,
    looked_up,
)
from genericdp.config.templatesize import least_output
from genericdp.config.v1.allocate import AllocateSpec

# Defined in ``sandbox``; the rest of the tree imports them from here.
__all__ = ["MAX_ALLOCATION_BYTES", "MAX_VALUE_BYTES", "SliceSpent", "allocation_budget"]

# The names a template sees (docs/config.md "Templates"); nothing else exists.
TEMPLATE_NAMES = ("resource", "node_name", "units", "devices", "device_ids")
# A node's containerPath is rendered per node at discovery and sees only that node.
NODE_TEMPLATE_NAMES = ("device",)
# A node label (``labels``) is rendered over the resource's healthy units, not an allocation.
LABEL_TEMPLATE_NAMES = ("resource", "node_name", "units", "devices")

_SHAPES = {**ALLOCATE_CONTEXT, **NODE_CONTEXT}


class TemplateValue:
    """One compiled template source; literal text skips Jinja entirely."""

    def __init__(
        self,
        source: str,
        template: Template | None,
        names: frozenset[str] = frozenset(),
        least_bytes: int = 0,
    ) -> None:
        self.source = source
        self.template = template  # None: literal text, rendered as written
        self.names = names  # the context names the template reads
        # What Jinja renders for a source without markup: newlines normalised, one
        # trailing newline dropped (``keep_trailing_newline=False``).
        literal = source.replace("\r\n", "\n").replace("\r", "\n").removesuffix("\n")
        self._literal = literal if template is None else ""
        # UTF-8 bytes it renders at least: all of a literal; of a template, ``templatesize``'s.
        self.least_bytes = least_bytes if template is not None else _utf8(self._literal)

    def render(self, context: Mapping[str, Any]) -> str:
        if self.template is None:
            return self._literal
        size, out = 0, []
        for chunk in self.template.generate(context):
            size += len(chunk)
            if size > MAX_VALUE_CHARS:
                raise SecurityError(f"output exceeds {MAX_VALUE_CHARS} characters")
            out.append(chunk)
        return "".join(out)


@dataclass(frozen=True)
class TemplateProblem:
    """One template that does not compile; ``key`` is relative to ``allocate``
    (``env.SERIAL_PORTS``, ``mounts[0].hostPath``, ``annotations.foo``)."""

    key: str
    message: str
    line: int | None = None  # line within the template source, 1-based


class TemplateSyntaxErrors(Exception):  # noqa: N818 - a collection, raised at load time only
    def __init__(self, problems: Sequence[TemplateProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.key}: {p.message}" for p in self.problems))


class _Harden(NodeTransformer):
    """Route every loop through the iteration budget and every ``~`` through
    the size cap; Jinja has no hook for either, so we rewrite the tree."""

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802 - Jinja dispatches on class names
        self.generic_visit(node)
        node.iter = _internal_call("counted", [cast("nodes.Expr", node.iter)], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        return _internal_call("concat", list(node.nodes), node.lineno)

    # Literals are measured too: ``[a, a, a]`` nine levels deep is small to write.
    def visit_List(self, node: nodes.List | nodes.Dict | nodes.Tuple) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        if isinstance(node, nodes.Tuple) and node.ctx != "load":  # `{% for a, b in x %}`
            return node
        return _internal_call("built", [node], node.lineno)

    visit_Dict = visit_Tuple = visit_List  # noqa: N815


def _internal_call(func: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    target = nodes.ImportedName(f"{sandbox.__name__}.{func}", lineno=lineno)
    return nodes.Call(target, args, [], None, None, lineno=lineno)


_REFUSED: tuple[tuple[type[nodes.Node], str], ...] = (
    (nodes.Extends, "'extends' is not supported: templates cannot read other templates"),
    (nodes.Include, "'include' is not supported: templates cannot read other templates"),
    (nodes.Import, "'import' is not supported: templates cannot read other templates"),
    (nodes.FromImport, "'import' is not supported: templates cannot read other templates"),
    (nodes.Macro, "macros are not supported"),
    (nodes.CallBlock, "call blocks are not supported"),
    (nodes.Block, "blocks are not supported"),
)


def _static_problems(tree: nodes.Template, known: Sequence[str]) -> list[TemplateProblem]:
    """What the sandbox would refuse at render time, found before the first Allocate."""
    found: list[tuple[str, int | None]] = [
        (message, node.lineno) for kind, message in _REFUSED for node in tree.find_all(kind)
    ]
    found += [
        ("recursive loops are not supported", node.lineno)
        for node in tree.find_all(nodes.For)
        if node.recursive
    ]
    found += [
        (f"attribute {attr!r} is private (starts with '_')", node.lineno)
        for node in tree.find_all((nodes.Getattr, nodes.Getitem))
        if (attr := looked_up(node)) is not None and attr.startswith("_")
    ]
    # Jinja binds `self` implicitly, so find_undeclared_variables never reports it.
    selves = {n.name for n in tree.find_all(nodes.Name) if n.name == "self" and n.ctx == "load"}
    for name in sorted((meta.find_undeclared_variables(tree) | selves) - set(known)):
        line = next((n.lineno for n in tree.find_all(nodes.Name) if n.name == name), None)
        hint = did_you_mean(name, known)
        found.append((f"unknown name {name!r} (known: {', '.join(known)}{hint})", line))
    return [TemplateProblem("", message, line) for message, line in found]


_NO_SUCH = re.compile(r"No (filter|test) named '([^']*)'")


def _filter_hint(message: str) -> str:
    """A did-you-mean for Jinja's "No filter named 'x'." (or test)."""
    found = _NO_SUCH.match(message)
    if found is None:
        return ""
    known = SANDBOX.filters if found.group(1) == "filter" else SANDBOX.tests
    close = difflib.get_close_matches(found.group(2), sorted(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _compile_one(
    key: str, source: str, problems: list[TemplateProblem], known: Sequence[str] = TEMPLATE_NAMES
) -> TemplateValue:
    if len(source) > MAX_TEMPLATE_CHARS:
        # Compiling costs tens of microseconds a character; a literal this long
        # would only make Allocate answers large.
        message = f"is {len(source)} characters long; at most {MAX_TEMPLATE_CHARS} are allowed"
        problems.append(TemplateProblem(key, message))
        return TemplateValue("", None)
    if not any(marker in source for marker in ("{{", "{%", "{#")):
        return TemplateValue(source, None)
    compiled, found = _compiled(source, tuple(known))
    problems += (replace(p, key=key) for p in found)
    return compiled or TemplateValue(source, None)


@functools.lru_cache(maxsize=1024)
def _compiled(
    source: str, known: tuple[str, ...]
) -> tuple[TemplateValue | None, tuple[TemplateProblem, ...]]:
    """Cached: a template in many resources is compiled once, and compiling is most of
    loading a config. Problems are keyed ``""``."""
    try:
        tree = SANDBOX.parse(source)
        found = _static_problems(tree, known) or _too_large(tree)
        if found:
            return None, tuple(found)
        least = sum(size for size, _ in least_output(tree))
        names = frozenset(meta.find_undeclared_variables(tree))
        scope = {name: _SHAPES.get(name) for name in known}
        fields = tuple(TemplateProblem("", p.message, p.line) for p in field_problems(tree, scope))
        _Harden().visit(tree)
        code = SANDBOX.compile(tree)
        template = SANDBOX.template_class.from_code(SANDBOX, code, SANDBOX.make_globals(None))
    except TemplateSyntaxError as exc:
        message = exc.message or str(exc)
        return None, (TemplateProblem("", message + _filter_hint(message), exc.lineno),)
    except RecursionError:  # Jinja's parser and compiler recurse per nesting level
        return None, (TemplateProblem("", "expressions or blocks are nested too deeply"),)
    return TemplateValue(source, template, names, least), fields


def _too_large(tree: nodes.Template) -> list[TemplateProblem]:
    total = 0
    for size, line in least_output(tree):
        total += size
        if total > MAX_VALUE_BYTES:
            message = (
                f"renders at least {total} bytes whatever it is given, more than the"
                f" {MAX_VALUE_BYTES} bytes a rendered value may have"
            )
            return [TemplateProblem("", message, line)]
    return []


def _allocation_too_large(compiled: CompiledTemplates) -> list[TemplateProblem]:
    """Where a resource's values, by text and constants alone, render past MAX_ALLOCATION_BYTES."""
    parts = [
        *((f"env.{k}", _utf8(k), v) for k, v in compiled.env),
        *(
            (f"mounts[{i}].{key}", 0, value)
            for i, m in enumerate(compiled.mounts)
            for key, value in (("hostPath", m.host_path), ("containerPath", m.container_path))
        ),
        *((f"annotations.{k}", _utf8(k), v) for k, v in compiled.annotations),
    ]
    total = 0
    for key, name_bytes, value in parts:
        total += name_bytes + value.least_bytes
        if total > MAX_ALLOCATION_BYTES:
            message = (
                f"the allocate values of this resource render at least {total} bytes in all"
                f" by here (names included), more than the {MAX_ALLOCATION_BYTES} bytes one"
                " allocation may render"
            )
            return [TemplateProblem(key, message)]
    return []


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class MountTemplate:
    host_path: TemplateValue
    container_path: TemplateValue
    read_only: bool


class CompiledTemplates:
    def __init__(
        self,
        env: Sequence[tuple[str, TemplateValue]],
        mounts: Sequence[MountTemplate],
        annotations: Sequence[tuple[str, TemplateValue]],
    ) -> None:
        self.env = tuple(env)
        self.mounts = tuple(mounts)
        self.annotations = tuple(annotations)
        values = [
            *(v for _, v in self.env),
            *(v for m in self.mounts for v in (m.host_path, m.container_path)),
            *(v for _, v in self.annotations),
        ]
        # Every context name some template reads: only those are built per Allocate.
        self.names: frozenset[str] = frozenset().union(*(v.names for v in values))


def compile_templates(spec: AllocateSpec) -> CompiledTemplates:
    """Every template of ``spec`` compiled, or ``TemplateSyntaxErrors`` listing each failure."""
    problems: list[TemplateProblem] = []
    env = [(name, _compile_one(f"env.{name}", src, problems)) for name, src in spec.env.items()]
    mounts = [
        MountTemplate(
            _compile_one(f"mounts[{i}].hostPath", m.host_path, problems),
            _compile_one(f"mounts[{i}].containerPath", m.container_path, problems),
            m.read_only,
        )
        for i, m in enumerate(spec.mounts)
    ]
    annotations = [
        (name, _compile_one(f"annotations.{name}", src, problems))
        for name, src in spec.annotations.items()
    ]
    compiled = CompiledTemplates(env, mounts, annotations)
    problems += _allocation_too_large(compiled)
    if problems:
        raise TemplateSyntaxErrors(problems)
    return compiled


def compile_node_template(source: str) -> TemplateValue:
    """A node's ``containerPath``: the loader compiles it to validate, discovery renders
    the same cached object at every scan."""
    return _compile_alone("containerPath", source, NODE_TEMPLATE_NAMES)


def compile_label_template(source: str) -> TemplateValue:
    return _compile_alone("labels", source, LABEL_TEMPLATE_NAMES)


@functools.lru_cache(maxsize=2048)
def _compile_alone(key: str, source: str, known: tuple[str, ...]) -> TemplateValue:
    """One template, or ``TemplateSyntaxErrors`` keyed ``key``."""
    problems: list[TemplateProblem] = []
    value = _compile_one(key, source, problems, known)
    if problems:
        raise TemplateSyntaxErrors(problems)
    return value
