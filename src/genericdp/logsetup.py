"""Logging: plain text for people, JSON lines for collectors. Fields given with
``extra={...}`` appear in both; those of ``fields(...)`` or ``context_with(...)`` in
JSON only, as the text lines name them in the message already.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TextIO

_FIELDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "genericdp_log_fields", default=MappingProxyType({})
)
_FROM_CONTEXT = "_genericdp_context_fields"  # which extras the context added
# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = frozenset(
    (*vars(logging.makeLogRecord({})), "message", "asctime", "taskName", _FROM_CONTEXT)
)


class _Fields:
    """``fields``: a class, cheaper than a ``contextmanager`` (every Allocate enters one)."""

    _token: contextvars.Token[Mapping[str, str]]  # set on entering

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = values

    def __enter__(self) -> None:
        self._token = _FIELDS.set({**_FIELDS.get(), **self._values})

    def __exit__(self, *exc_info: object) -> None:
        _FIELDS.reset(self._token)


def fields(**values: str) -> AbstractContextManager[None]:
    """Records inside the block carry ``values`` as (JSON) fields, as in a ``context_with``."""
    return _Fields(values)


def context_with(**fields: str) -> contextvars.Context:
    """A copy of the context whose records carry ``fields`` too (for ``create_task``)."""
    context = contextvars.copy_context()
    context.run(_FIELDS.set, {**_FIELDS.get(), **fields})
    return context


class ContextFields(logging.Filter):
    """Adds the current context's fields to a record that does not have them."""

    def filter(self, record: logging.LogRecord) -> bool:
        added = {k: v for k, v in _FIELDS.get().items() if not hasattr(record, k)}
        record.__dict__.update(added)
        setattr(record, _FROM_CONTEXT, tuple(added))
        return True


def _extras(record: logging.LogRecord, *, context: bool = True) -> dict[str, Any]:
    skip = () if context else getattr(record, _FROM_CONTEXT, ())
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and k not in skip}


def _stamp(record: logging.LogRecord) -> str:  # 2026-11-29T07:00:00.123Z
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-11-29T07:00:00.123Z info  genericdp.runtime: message key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in sorted(_extras(record, context=False).items()))
        level = record.levelname.lower()
        line = f"{_stamp(record)} {level:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f" {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": _stamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(_extras(record))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Route every genericdp logger (and grpc's) to one handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFields())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


@dataclass
class _Window:
    started: float
    emitted: int = 0
    suppressed: int = 0


class RateLimitedLog:
    """At most ``burst`` lines per ``period`` seconds for each key (a fixed string of ours,
    never a client's data; capped all the same); the next period's first says how many
    were left out."""

    MAX_KEYS = 256

    def __init__(
        self,
        logger: logging.Logger,
        *,
        period: float = 10.0,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self._period = period
        self._burst = burst
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def log(self, level: int, key: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``msg % args`` unless ``key`` used up its lines; True if it was logged."""
        now = self._clock()
        window = self._windows.get(key)
        if window is None or now - window.started >= self._period:
            suppressed = window.suppressed if window is not None else 0
            if window is None and len(self._windows) >= self.MAX_KEYS:
                self._windows.pop(next(iter(self._windows)))
            window = self._windows[key] = _Window(now)
            if suppressed:
                msg += " (%d more like this were not logged before this one)"
                args = (*args, suppressed)
        if window.emitted >= self._burst:
            window.suppressed += 1
            return False
        window.emitted += 1
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def exception(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args, exc_info=True)
