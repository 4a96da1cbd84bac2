"""A compiled template as a value (``TemplateValue``): what
``genericdp.config.templates`` builds at load for each source and
``genericdp.allocation`` renders at every allocation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jinja2.environment import Template
from jinja2.exceptions import SecurityError

from genericdp.config.directrender import Joined, Part, Plan, resolve
from genericdp.config.sandbox import MAX_VALUE_CHARS, built, check_join, finalize


class TemplateValue:
    """One compiled template source; literal text skips Jinja entirely, and so
    does text with lookups that ``directrender`` can plan (the same output)."""

    def __init__(
        self,
        source: str,
        template: Template | None,
        plan: Plan | None = None,
        names: frozenset[str] = frozenset(),
    ) -> None:
        self.source = source
        self.template = template  # None: literal text, rendered as written
        self.plan = plan  # how to render it without Jinja, when ``directrender`` can
        self.names = names  # the context names the template reads (none: literal text)
        self._literal = _literal_text(source) if template is None else ""
        # What it renders at least, in UTF-8: all of a literal; of a template, its
        # text and constants (``templatesize``, set by the compiler).
        self.least_bytes = len(self._literal.encode("utf-8", "surrogatepass"))

    def render(self, context: Mapping[str, Any]) -> str:
        if self.template is None:
            return self._literal
        if self.plan is not None:
            parts = resolve(self.plan, context)
            if parts is not None:
                return _direct_output(parts)
        size, out = 0, []
        for chunk in self.template.generate(context):
            size += len(chunk)
            if size > MAX_VALUE_CHARS:
                raise SecurityError(f"output exceeds {MAX_VALUE_CHARS} characters")
            out.append(chunk)
        return "".join(out)


def _direct_output(parts: Sequence[Part]) -> str:
    """What Jinja's compiled code does with resolved parts, the same calls in the
    same order: each join as the guarded ``map`` and ``join`` filters do it,
    each value through ``finalize`` and ``str``, the output's length checked
    after every chunk as ``render`` does."""
    size, out = 0, []
    for part in parts:
        if isinstance(part, str):
            chunk = part
        elif isinstance(part, Joined):
            items: Any = part.items
            if part.mapped:
                items = built(iter(items))  # the filter's generator, measured as one
            items = list(items)
            check_join(part.separator, items)
            chunk = str(finalize(built(part.separator.join(map(str, items)))))
        else:
            value = part[0]
            # What finalize and str() make of text within the cap: the text itself.
            fits = type(value) is str and len(value) <= MAX_VALUE_CHARS
            chunk = value if fits else str(finalize(value))
        size += len(chunk)
        if size > MAX_VALUE_CHARS:
            raise SecurityError(f"output exceeds {MAX_VALUE_CHARS} characters")
        out.append(chunk)
    return "".join(out)


def _literal_text(source: str) -> str:
    """What Jinja would render for a source without markup: newlines
    normalised, one trailing newline dropped (``keep_trailing_newline=False``)."""
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    return text.removesuffix("\n")
