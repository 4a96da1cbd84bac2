"""A compiled template as a value (``TemplateValue``): what
``genericdp.config.templates`` builds at load for each source and
``genericdp.allocation`` renders at every allocation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2.environment import Template
from jinja2.exceptions import SecurityError

from genericdp.config.sandbox import MAX_VALUE_CHARS


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
        self.names = names  # the context names the template reads (none: literal text)
        self._literal = _literal_text(source) if template is None else ""
        # What it renders at least, in UTF-8: all of a literal; of a template, its
        # text and constants (``templatesize``, given by the compiler).
        self.least_bytes = (
            least_bytes if template else len(self._literal.encode("utf-8", "surrogatepass"))
        )

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


def _literal_text(source: str) -> str:
    """What Jinja would render for a source without markup: newlines
    normalised, one trailing newline dropped (``keep_trailing_newline=False``)."""
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    return text.removesuffix("\n")
