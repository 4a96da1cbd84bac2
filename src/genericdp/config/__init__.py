"""The config package: YAML files -> a validated, frozen ``Config``.

load(paths)                 files and directories -> Config, or ConfigError with every issue
load_text(text, filename)   one YAML string -> Config
schema(), schema_text()     the packaged JSON Schema (draft 2020-12)
"""

from __future__ import annotations

from genericdp.config.loader import load, load_text
from genericdp.config.model import Config
from genericdp.config.schema import schema, schema_text

__all__ = ["Config", "load", "load_text", "schema", "schema_text"]
