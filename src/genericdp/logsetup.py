"""Logging for the daemon and the CLI: plain text for people, JSON lines for
log collectors. Extra fields passed with ``extra={...}`` appear in both."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class TextFormatter(logging.Formatter):
    """``2026-11-29T07:00:00.123Z info  genericdp.runtime: message key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.msecs)
        extras = " ".join(f"{k}={v}" for k, v in sorted(_extras(record).items()))
        line = (
            f"{stamp}.{millis:03d}Z {record.levelname.lower():<7} {record.name}: "
            f"{record.getMessage()}"
        )
        if extras:
            line += f" {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
