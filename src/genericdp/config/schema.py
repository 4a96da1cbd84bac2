"""The packaged JSON Schema (draft 2020-12) and validation of a document with it."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from genericdp.config.messages import explain
from genericdp.config.yamlpos import Document
from genericdp.errors import ConfigIssue

SCHEMA_FILE = "config-v1.schema.json"


def schema_text() -> str:
    """The schema exactly as shipped (what ``genericdp schema`` prints)."""
    return resources.files("genericdp.config").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    """A fresh copy of the schema as a dict (callers may modify it)."""
    loaded: dict[str, Any] = json.loads(schema_text())
    return loaded


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


def schema_issues(doc: Document) -> list[ConfigIssue]:
    """Every schema violation in ``doc``, each located and explained."""
    issues: list[ConfigIssue] = []
    for error in _validator().iter_errors(doc.data):
        issues.extend(explain(error, doc))
    return issues
