"""Validation of a document with the JSON Schema the sections of ``config/v1/`` build."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from genericdp.config.messages import explain
from genericdp.config.v1 import build_schema
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue


@cache
def schema_text() -> str:
    """What ``genericdp schema`` prints and ``./dev schema`` writes (config-v1.schema.json)."""
    return json.dumps(build_schema(), indent=2) + "\n"


schema = build_schema  # a fresh copy as a dict each time: callers may modify it


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


def _misplaced_keys(errors: list[Any], doc: Document) -> dict[KeyPath, ConfigIssue]:
    """Keys indented one level too little (``allocate:`` left empty, ``env:`` below it at
    its indentation): one issue at the misplaced key for both the unknown key and the
    empty mapping, by the paths of the two errors."""
    found: dict[KeyPath, ConfigIssue] = {}
    defs = schema().get("$defs", {})
    for error in errors:
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        properties = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        path: KeyPath = tuple(error.absolute_path)
        empty = [k for k, v in error.instance.items() if v is None and k in properties]
        for key in (k for k in error.instance if k not in properties):
            for parent in empty:
                below = properties[parent]
                ref = below.get("$ref", "")
                if ref.startswith("#/$defs/"):
                    below = defs.get(ref.removeprefix("#/$defs/"), {})
                if key not in below.get("properties", {}):
                    continue
                at_parent = doc.issue((*path, parent), "", at_key=True)
                message = (
                    f"{key!r} belongs under {parent!r} (line {at_parent.line}), which is"
                    f" empty: indent {key!r} and what follows two spaces more"
                )
                # At the misplaced key's line, by the empty mapping's path: the later
                # checks leave that mapping alone, as they do any misshapen one.
                issue = doc.issue((*path, key), message, at_key=True)
                issue = replace(issue, path=at_parent.path)
                found[path] = found[(*path, parent)] = issue
    return found


def schema_issues(doc: Document) -> list[ConfigIssue]:
    errors = list(_validator().iter_errors(doc.data))
    # A value of the wrong type also fails its range or pattern; say only the type.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    issues: list[ConfigIssue] = []
    misplaced = _misplaced_keys(errors, doc)
    for error in errors:
        path = tuple(error.absolute_path)
        if path in misplaced:
            issues.append(misplaced[path])
        elif error.validator == "type" or path not in mistyped:
            issues.extend(explain(error, doc))
    # jsonschema reports each missing key of a mapping as its own error, while
    # ``explain`` lists them all for each; identical issues are said once.
    return list(dict.fromkeys(issues))
