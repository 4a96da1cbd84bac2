"""The config package: YAML files -> a validated, frozen ``Config``.

load(paths)                 files and directories -> Config, or ConfigError with every issue
load_text(text, filename)   one YAML string -> Config
schema(), schema_text()     the packaged JSON Schema (draft 2020-12)
parse_duration(text)        "1m30s" -> 90.0, or ValueError
validate_resource_name(n)   None if the kubelet would accept n, else the reason

"""

from __future__ import annotations

from genericdp.config.durations import parse_duration
from genericdp.config.loader import load, load_text
from genericdp.config.model import Config, ResourceDefinition
from genericdp.config.names import validate_resource_name
from genericdp.config.schema import schema, schema_text

__all__ = [
    "Config",
    "ResourceDefinition",
    "load",
    "load_text",
    "parse_duration",
    "schema",
    "schema_text",
    "validate_resource_name",
]
