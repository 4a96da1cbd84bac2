"""Rules the JSON Schema cannot express, each reported at the offending value.

These run even when the schema found problems (so a user sees every problem
of a file at once), and therefore never assume a shape: anything not of the
expected type is skipped here because the schema has already said so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from genericdp.config.durations import parse_duration
from genericdp.config.names import validate_resource_name
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue

DEFAULT_HEALTH_INTERVAL = "10s"
DEFAULT_HEALTH_TIMEOUT = "3s"
DEFAULT_HOOK_TIMEOUT = "10s"
HOOK_NAMES = ("init", "preStart", "cleanup")


def semantic_issues(doc: Document) -> list[ConfigIssue]:
    """Every semantic problem of one document."""
    issues: list[ConfigIssue] = []
    for path, resource in resources_of(doc):
        issues += _name(doc, path, resource)
        issues += _globs(doc, path, resource)
        issues += _group_by(doc, path, resource)
        issues += _health(doc, path, resource)
        issues += _hooks(doc, path, resource)
        issues += _mounts(doc, path, resource)
    return issues


def resources_of(doc: Document) -> Iterator[tuple[KeyPath, dict[str, Any]]]:
    """(path, mapping) of each resource that is a mapping."""
    data = doc.data
    resources = data.get("resources") if isinstance(data, dict) else None
    for index, resource in enumerate(resources if isinstance(resources, list) else ()):
        if isinstance(resource, dict):
            yield ("resources", index), resource


def duplicate_names(docs: Sequence[Document]) -> list[ConfigIssue]:
    """A resource name defined twice, in one file or across files: point at the
    second and say where the first is."""
    first: dict[str, str] = {}
    issues: list[ConfigIssue] = []
    for doc in docs:
        for path, resource in resources_of(doc):
            name = resource.get("name")
            if not isinstance(name, str):
                continue
            where = (*path, "name")
            pos = doc.value_pos(where)
            if name in first:
                message = f"duplicate resource name {name!r}: already defined at {first[name]}"
                issues.append(doc.issue(where, message))
            else:
                first[name] = f"{doc.file}:{pos.line}" if pos else doc.file
    return issues


def _name(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    name = resource.get("name")
    problem = validate_resource_name(name) if isinstance(name, str) else None
    return [doc.issue((*path, "name"), problem)] if problem else []


def _globs(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    issues = []
    match = resource.get("match")
    for index, item in enumerate(match if isinstance(match, list) else ()):
        pattern = item.get("glob") if isinstance(item, dict) else None
        if not isinstance(pattern, str) or not pattern:
            continue
        where = (*path, "match", index, "glob")
        if not pattern.startswith("/"):
            example = "/dev/" + pattern.lstrip("./")
            message = f"glob {pattern!r} must be an absolute path under /dev/, e.g. {example}"
            issues.append(doc.issue(where, message))
        elif not pattern.startswith("/dev/"):
            message = f"glob {pattern!r} must be under /dev/: only device nodes are matched"
            issues.append(doc.issue(where, message))
        elif ".." in pattern.split("/"):
            issues.append(doc.issue(where, f"glob {pattern!r} must not contain '..'"))
    return issues


def _group_by(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    group_by = resource.get("groupBy")
    regex = group_by.get("pathRegex") if isinstance(group_by, dict) else None
    if not isinstance(regex, str):
        return []
    try:
        re.compile(regex)
    except re.error as exc:
        where = (*path, "groupBy", "pathRegex")
        return [doc.issue(where, f"pathRegex {regex!r} is not a valid regular expression: {exc}")]
    return []


def _health(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    health = resource.get("health")
    if not isinstance(health, dict):
        return []
    here = (*path, "health")
    issues = _argv(doc, (*here, "exec"), health.get("exec"))
    interval, bad_interval = _duration(doc, (*here, "interval"), health, DEFAULT_HEALTH_INTERVAL)
    timeout, bad_timeout = _duration(doc, (*here, "timeout"), health, DEFAULT_HEALTH_TIMEOUT)
    issues += bad_interval + bad_timeout
    if interval is not None and timeout is not None and timeout >= interval:
        shown_timeout = health.get("timeout", f"{DEFAULT_HEALTH_TIMEOUT} (the default)")
        shown_interval = health.get("interval", f"{DEFAULT_HEALTH_INTERVAL} (the default)")
        message = (
            f"health timeout {shown_timeout} must be shorter than interval {shown_interval},"
            " so one probe ends before the next starts"
        )
        key = "timeout" if "timeout" in health else "interval"
        issues.append(doc.issue((*here, key), message))
    return issues


def _hooks(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    hooks = resource.get("hooks")
    issues: list[ConfigIssue] = []
    for name in HOOK_NAMES:
        hook = hooks.get(name) if isinstance(hooks, dict) else None
        if isinstance(hook, dict):
            here = (*path, "hooks", name)
            issues += _argv(doc, (*here, "exec"), hook.get("exec"))
            issues += _duration(doc, (*here, "timeout"), hook, DEFAULT_HOOK_TIMEOUT)[1]
    return issues


def _argv(doc: Document, path: KeyPath, argv: object) -> list[ConfigIssue]:
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return []
    command = argv[0]
    if command.startswith("/") or (command and "/" not in command):
        return []
    message = (
        f"command {command!r} must be an absolute path (e.g. /usr/bin/{command.rsplit('/', 1)[-1]})"
        " or a bare name looked up in PATH"
    )
    if not command:
        message = "the command (first item of exec) must not be empty"
    return [doc.issue((*path, 0), message)]


def _duration(
    doc: Document, path: KeyPath, section: dict[str, Any], default: str
) -> tuple[float | None, list[ConfigIssue]]:
    """The duration at ``path`` (or its default) in seconds, or the problem with it."""
    text = section.get(str(path[-1]), default)
    if not isinstance(text, str):
        return None, []  # the schema reports the type
    try:
        return parse_duration(text), []
    except ValueError as exc:
        return None, [doc.issue(path, str(exc))]


def _mounts(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    allocate = resource.get("allocate")
    mounts = allocate.get("mounts") if isinstance(allocate, dict) else None
    issues = []
    for index, mount in enumerate(mounts if isinstance(mounts, list) else ()):
        for key in ("hostPath", "containerPath"):
            value = mount.get(key) if isinstance(mount, dict) else None
            # A value starting with a template is only known after rendering.
            if isinstance(value, str) and value and not value.startswith(("/", "{{", "{%")):
                where = (*path, "allocate", "mounts", index, key)
                issues.append(doc.issue(where, f"{key} {value!r} must be an absolute path"))
    return issues
