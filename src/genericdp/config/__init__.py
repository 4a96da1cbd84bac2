"""YAML files -> a validated, frozen ``Config``, or one ``ConfigError`` with every issue."""

from __future__ import annotations

from genericdp.config.loader import load, load_text
from genericdp.config.model import Config
from genericdp.config.schema import schema, schema_text

__all__ = ["Config", "load", "load_text", "schema", "schema_text"]
