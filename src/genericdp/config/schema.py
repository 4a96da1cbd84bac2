"""The JSON Schema (draft 2020-12), assembled from the sections in ``config/v1/``,
and validation of a document with it."""

from __future__ import annotations

from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from genericdp.config.messages import explain
from genericdp.config.v1 import build_schema, render_schema
from genericdp.config.yamlpos import Document
from genericdp.errors import ConfigIssue

# The schema's rendering, packaged beside this module for editors and
# published as schemas/config-v1.schema.json (a link to it); ./dev schema writes it.
SCHEMA_FILE = "config-v1.schema.json"


@cache
def schema_text() -> str:
    """The schema as JSON text (what ``genericdp schema`` prints and SCHEMA_FILE holds)."""
    return render_schema(build_schema())


def schema() -> dict[str, Any]:
    """A fresh copy of the schema as a dict (callers may modify it)."""
    return build_schema()


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
