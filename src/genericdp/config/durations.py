"""Go-style durations ("300ms", "10s", "1m30s", "1.5s") as float seconds: what
Kubernetes users already write (Go's ``time.ParseDuration``)."""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# Longer units first, so "ms" is not read as "m" followed by garbage.
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
HINT = "use a number with a unit (ms, s, m, h), e.g. 300ms, 10s, 1m30s, 2h"


def parse_duration(text: str) -> float:
    """Seconds of a positive duration; ValueError saying what is wrong."""
    if not text:
        raise ValueError(f"an empty string is not a duration: {HINT}")
    pos = 0
    total = 0.0
    while pos < len(text):
        part = _PART.match(text, pos)
        if part is None:
            raise ValueError(f"{text!r} is not a duration: {HINT}")
        total += float(part.group(1)) * _UNITS[part.group(2)]
        pos = part.end()
    if total <= 0:
        raise ValueError(f"duration {text!r} must be greater than zero")
    return total
