"""Regular expressions from a config, matched in linear time by RE2.

Python's ``re`` backtracks: ``(a+)+$`` against forty ``a`` and a ``b`` runs for hours
holding the GIL, freezing the whole daemon. RE2 has no backreferences or look-around,
which a path key never needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import re2

# RE2's own default; a pattern whose program needs more is refused at load time.
_MAX_PROGRAM_BYTES = 8 << 20
_UNSUPPORTED = re.compile(r"invalid perl operator|invalid escape sequence: \\[1-9]")


@dataclass(frozen=True)
class UserRegex:
    pattern: str
    _compiled: Any

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self._compiled.groupindex)

    @property
    def groups(self) -> int:
        return int(self._compiled.groups)

    def search(self, text: str) -> tuple[str | None, ...] | None:
        """Group 0 and every group of the first match (None for one that did not
        take part), or None when nothing matches."""
        match = self._compiled.search(text)
        if match is None:
            return None
        return tuple(match.group(i) for i in range(self.groups + 1))


def compile_regex(pattern: str) -> UserRegex:
    """ValueError says why a pattern is refused."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print each bad pattern to stderr itself
    options.max_mem = _MAX_PROGRAM_BYTES
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(_reason(exc)) from None
    return UserRegex(pattern, compiled)


def _reason(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else str(exc)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if _UNSUPPORTED.search(text):
        text += " (look-around and backreferences are not supported: patterns use RE2 syntax)"
    return text
