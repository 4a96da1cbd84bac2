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
    errors = list(_validator().iter_errors(doc.data))
    # A value of the wrong type also fails its range or pattern; say only the type.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    issues: list[ConfigIssue] = []
    for error in errors:
        if error.validator == "type" or tuple(error.absolute_path) not in mistyped:
            issues.extend(explain(error, doc))
    # jsonschema reports each missing key of a mapping as its own error, while
    # ``explain`` lists them all for each; identical issues are said once.
    return list(dict.fromkeys(issues))
