"""jsonschema errors -> messages a user can act on, at the right line.

jsonschema says *which keyword* failed; a user needs *what to change*: the
unknown key and the allowed ones, the choices of an enum, "quote it" for a
number where a string belongs, and for a ``oneOf`` the one specific problem
of the form the user evidently meant rather than a wall of alternatives.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Sequence
from typing import Any

from jsonschema.exceptions import ValidationError

from genericdp.config.durations import HINT as DURATION_HINT
from genericdp.config.names import validate_resource_name
from genericdp.config.v1.dra import DRA_RESERVED_ATTRIBUTES, STANDARD_ATTRIBUTES
from genericdp.config.v1.resource import MAX_COUNT
from genericdp.config.yamlpos import Document, KeyPath, describe
from genericdp.errors import ConfigIssue

_EXPECTED = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping (key: value)",
    "array": "a list",
    "null": "empty",
}
_YAML11_BOOLEANS = {"yes", "no", "on", "off", "y", "n"}
_DURATION_KEYS = {"interval", "timeout"}
_GROUP_BY_FORMS = "node, all, parent:<subsystem> or {pathRegex: <regex>}"


def explain(error: ValidationError, doc: Document) -> list[ConfigIssue]:
    path: KeyPath = tuple(error.absolute_path)
    keyword = error.validator
    instance, value, schema = _parts(error)
    if keyword in ("oneOf", "anyOf"):
        return _explain_choice(error, doc, path)
    if keyword == "additionalProperties" and value is False:
        return _unknown_keys(doc, path, instance, list(schema.get("properties", {})))
    if keyword == "required":
        # A misspelt key already says "did you mean 'x'?"; "missing 'x'" would repeat it.
        unknown = [k for k in instance if k not in schema.get("properties", {})]
        missing = [k for k in value if k not in instance and not _suggest(k, unknown)]
        return [doc.issue(path, _missing(k), at_key=True) for k in missing]
    if "propertyNames" in error.absolute_schema_path:
        return [doc.issue((*path, instance), _bad_key(path, instance), at_key=True)]
    return [doc.issue(path, _message(error, doc, path))]


def _parts(error: ValidationError) -> tuple[Any, Any, dict[str, Any]]:
    """The failing value, the keyword's value and the subschema, plainly typed."""
    instance: Any = error.instance
    value: Any = error.validator_value
    schema: Any = error.schema
    return instance, value, schema if isinstance(schema, dict) else {}


def _unknown_keys(
    doc: Document, path: KeyPath, instance: dict[str, Any], allowed: list[str], also: str = ""
) -> list[ConfigIssue]:
    """An issue at each key of ``instance`` that is neither allowed nor ``also``."""
    issues = []
    for key in (k for k in instance if k not in allowed and k != also):
        message = f"unknown key {key!r} (allowed: {', '.join(allowed)})" + _suggest(key, allowed)
        issues.append(doc.issue((*path, key), message, at_key=True))
    return issues


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _missing(key: str) -> str:
    if key == "version":
        return "missing required key 'version': add `version: v1`"
    return f"missing required key {key!r}"


def _bad_key(path: KeyPath, key: str) -> str:
    if path and path[-1] == "env":
        return (
            f"{key!r} is not a valid environment variable name: use letters, digits,"
            " '_', '-' and '.', not starting with a digit"
        )
    if path and path[-1] == "attributes":
        if key in DRA_RESERVED_ATTRIBUTES:
            listed = ", ".join(DRA_RESERVED_ATTRIBUTES)
            return f"{key!r} is set by genericdp itself ({listed}); choose another name"
        if key in STANDARD_ATTRIBUTES:
            return (
                f"{key!r} is a Kubernetes standard attribute that genericdp sets from sysfs"
                " where it is known; choose another name"
            )
        return (
            f"{key!r} is not a valid attribute name: a C identifier (letters, digits, '_',"
            " not starting with a digit) of at most 32 characters"
        )
    return "keys must not be empty"


def _message(error: ValidationError, doc: Document, path: KeyPath) -> str:  # noqa: PLR0911 - one return per keyword reads best
    keyword = error.validator
    instance, value, schema = _parts(error)
    last = path[-1] if path else None
    if keyword == "type":
        return _type_message(value, instance, doc, path)
    if keyword == "const":
        if last == "version":
            return f"unsupported version: {describe(instance)}; the only version is v1"
        return f"must be {value!r}, not {describe(instance)}"
    if keyword == "enum":
        choices = [str(c) for c in value]
        hint = _suggest(str(instance), choices)
        return f"must be one of {', '.join(choices)}; not {describe(instance)}{hint}"
    if keyword in ("minimum", "maximum"):
        low, high = schema.get("minimum"), schema.get("maximum")
        return f"must be between {low} and {high}, not {instance}"
    if keyword == "minItems":
        return "must not be empty: list at least one item"
    if keyword == "minLength":
        return "must not be empty"
    if keyword == "maxLength":
        return f"is too long: at most {value} characters, not {len(instance)}"
    if keyword == "minProperties":
        return f"must set at least one of {', '.join(schema.get('properties', {}))}"
    if keyword == "pattern":
        return _pattern_message(last, instance)
    return error.message


def _type_message(expected: Any, instance: Any, doc: Document, path: KeyPath) -> str:
    last = path[-1] if path else None
    if last in _DURATION_KEYS:
        return f'must be a duration like "10s", not {describe(instance)}'
    if expected == "string" and isinstance(instance, int | float | dt.date):
        written = doc.token(path) or str(instance).lower()
        kind = _scalar_kind(instance)
        return (
            f'must be a string: quote it, e.g. "{written}" (YAML reads unquoted {kind} as {kind})'
        )
    if expected == "boolean" and str(instance).lower() in _YAML11_BOOLEANS:
        return f"must be true or false, not the string {instance!r} (YAML 1.2 reads it as text)"
    if isinstance(expected, str):
        return f"must be {_EXPECTED.get(expected, expected)}, not {describe(instance)}"
    return f"must be one of the types {', '.join(expected)}, not {describe(instance)}"


def _scalar_kind(value: object) -> str:
    if isinstance(value, bool):
        return "booleans"
    return "dates" if isinstance(value, dt.date) else "numbers"


def _pattern_message(last: object, instance: str) -> str:
    if last == "name":
        return validate_resource_name(instance) or f"{instance!r} is not a valid resource name"
    if last in _DURATION_KEYS:
        return f"{instance!r} is not a duration: {DURATION_HINT}"
    if last == "mode":
        return (
            f"{instance!r} is not a file mode: three octal digits of permission bits,"
            ' e.g. "0660" (no setuid, setgid or sticky bit)'
        )
    if last == "permissions":
        return f"{instance!r} is not valid: use one or more of r, w, m, each at most once, e.g. rw"
    if last == "version":
        return f"{instance!r} is not a semantic version (semver 2.0: MAJOR.MINOR.PATCH, e.g. 1.2.3)"
    return f"{instance!r} does not have the expected form"


def _explain_choice(error: ValidationError, doc: Document, path: KeyPath) -> list[ConfigIssue]:
    """For a failed oneOf, report the one form the user evidently meant, if any."""
    instance, branches, _ = _parts(error)
    if path and path[-1] == "count" and not _fits({"type": "integer"}, instance):
        message = (
            f"must be a whole number from 1 to {MAX_COUNT}, or unbounded; not {describe(instance)}"
        )
        if isinstance(instance, str):
            message += _suggest(instance, ["unbounded"])
        return [doc.issue(path, message)]
    meant = [i for i, b in enumerate(branches) if _fits(b, instance)]
    if len(meant) == 1:
        own = [e for e in error.context or () if e.relative_schema_path[0] == meant[0]]
        if own:
            return [issue for sub in own for issue in explain(sub, doc)]
    if len(path) >= 2 and path[-2] == "match":  # noqa: PLR2004 -- the parent key of a path
        return _explain_matcher(instance, doc, path)
    if path and path[-1] == "groupBy":
        return _explain_group_by(instance, doc, path)
    if path and path[-1] == "health" and isinstance(instance, dict):
        return _explain_health(instance, doc, path)
    return [doc.issue(path, f"{describe(instance)} does not match any allowed form")]


def _explain_health(instance: dict[str, Any], doc: Document, path: KeyPath) -> list[ConfigIssue]:
    if "exec" in instance and "sysfs" in instance:
        message = "use one probe: exec (a command) or sysfs (an attribute), not both"
        return [doc.issue((*path, "sysfs"), message, at_key=True)]
    message = (
        "needs a probe: exec: [command, args...] or sysfs: {attribute: <file>, expect: <glob>}"
    )
    return [doc.issue(path, message, at_key=True)]


def _fits(branch: dict[str, Any], instance: Any) -> bool:
    """Whether a branch is the form meant: right type and its required keys present."""
    kind = branch.get("type")
    if kind == "object":
        return isinstance(instance, dict) and all(k in instance for k in branch.get("required", ()))
    if kind == "string":
        return isinstance(instance, str)
    if kind == "integer":
        return isinstance(instance, int) and not isinstance(instance, bool)
    return kind is None


def _explain_matcher(instance: Any, doc: Document, path: KeyPath) -> list[ConfigIssue]:
    allowed = ["glob", "udev"]
    if isinstance(instance, dict):
        if all(k in instance for k in allowed):
            message = "use one matcher per item: glob or udev, not both (start another '- ' item)"
            return [doc.issue((*path, "udev"), message, at_key=True)]
        if unknown := _unknown_keys(doc, path, instance, allowed, also="containerPath"):
            return unknown
    return [
        doc.issue(path, f"must be {{glob: <path>}} or {{udev: {{...}}}}, not {describe(instance)}")
    ]


def _explain_group_by(instance: Any, doc: Document, path: KeyPath) -> list[ConfigIssue]:
    if isinstance(instance, dict) and (
        unknown := _unknown_keys(doc, path, instance, ["pathRegex"])
    ):
        return unknown
    message = f"must be {_GROUP_BY_FORMS}, not {describe(instance)}"
    if isinstance(instance, str):
        if instance.startswith("parent:"):
            message += " (the subsystem is lowercase letters, digits, '_' or '-')"
        message += _suggest(instance, ["node", "all"])
    return [doc.issue(path, message)]
