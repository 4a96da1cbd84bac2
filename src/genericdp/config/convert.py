"""Validated plain data -> the frozen model, with templates compiled.

Runs only on resources that passed the schema and the semantic checks, so
shapes are known here; durations come parsed from those checks (which apply
their defaults), and tests/test_config_schema.py checks that every default
here, in the checks and in the model is the schema's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from genericdp.config.model import (
    DEFAULT_FREE_IDS,
    UNBOUNDED,
    AllocateSpec,
    AttributeValue,
    DraSpec,
    Exec,
    ExtraDevice,
    GlobMatcher,
    GroupBy,
    HealthCheck,
    Hooks,
    Matcher,
    MountTemplate,
    PreferredAllocation,
    ResourceDefinition,
    Source,
    SysfsProbe,
    UdevMatcher,
    Version,
    frozen_map,
)
from genericdp.config.templates import (
    CompiledTemplates,
    TemplateProblem,
    TemplateSyntaxErrors,
    compile_templates,
)
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue

_MOUNT_KEY = re.compile(r"mounts\[(\d+)\]\.(hostPath|containerPath)")
_PERMISSION_ORDER = "rwm"


def allocate_spec(raw: dict[str, Any], *, permissions: object = "rw") -> AllocateSpec:
    """The ``allocate`` section as template sources; ``permissions`` (the
    resource's) is the default of its ``devices``."""
    mounts = tuple(
        MountTemplate(m["hostPath"], m["containerPath"], bool(m.get("readOnly", False)))
        for m in raw.get("mounts", ())
    )
    default = permissions if isinstance(permissions, str) else "rw"
    devices = tuple(
        ExtraDevice(
            path=d["path"],
            permissions=canonical_permissions(d.get("permissions", default)),
            container_path=d.get("containerPath"),
            optional=bool(d.get("optional", False)),
        )
        for d in raw.get("devices", ())
    )
    return AllocateSpec(
        env=frozen_map(raw.get("env")),
        mounts=mounts,
        annotations=frozen_map(raw.get("annotations")),
        cdi=bool(raw.get("cdi", False)),
        devices=devices,
    )


def canonical_permissions(text: str) -> str:
    """Canonical order, so "wr" and "rw" compare equal on reload."""
    return "".join(c for c in _PERMISSION_ORDER if c in text)


def compile_allocate(
    doc: Document, path: KeyPath, spec: AllocateSpec
) -> tuple[CompiledTemplates | None, list[ConfigIssue]]:
    """Compile the templates of one resource; each problem located at its value."""
    try:
        return compile_templates(spec), []
    except TemplateSyntaxErrors as exc:
        return None, [
            _template_issue(doc, (*path, *_template_path(p.key)), p) for p in exc.problems
        ]


def _template_issue(doc: Document, path: KeyPath, problem: TemplateProblem) -> ConfigIssue:
    issue = doc.issue(path, problem.message)
    if problem.line is None or problem.line <= 1:
        return issue
    token = doc.token(path) or ""
    line = (issue.line or 0) + problem.line
    if token.startswith(("|", ">")) and line <= len(doc.lines):
        # A block scalar's text starts on the line after its indicator, so
        # the template's line N is the file's line indicator+N.
        text = doc.lines[line - 1]
        return replace(issue, line=line, column=len(text) - len(text.lstrip()) + 1)
    return replace(issue, message=f"{problem.message} (line {problem.line} of the template)")


def _template_path(key: str) -> KeyPath:
    """``env.A.B`` -> ("env", "A.B"); ``mounts[0].hostPath`` -> ("mounts", 0, "hostPath").

    Env and annotation names may contain dots, so only the first one splits.
    """
    mount = _MOUNT_KEY.fullmatch(key)
    if mount:
        return ("mounts", int(mount.group(1)), mount.group(2))
    section, _, name = key.partition(".")
    return (section, name) if name else (section,)


def resource_definition(
    raw: dict[str, Any],
    *,
    path: KeyPath,
    file: str,
    line: int | None,
    allocate: AllocateSpec,
    templates: CompiledTemplates | None,
    seconds: Mapping[KeyPath, float],
) -> ResourceDefinition:
    """One resource from its validated mapping at ``path``; ``allocate`` and
    ``seconds`` (every duration, by path) were computed while it was checked."""

    def duration(*keys: str) -> float:
        return seconds[(*path, *keys)]

    health = raw.get("health")
    unbounded = raw.get("count") == UNBOUNDED
    return ResourceDefinition(
        name=raw["name"],
        match=tuple(_matcher(m) for m in raw["match"]),
        group_by=_group_by(raw.get("groupBy", "node")),
        count=1 if unbounded else int(raw.get("count", 1)),
        unbounded=unbounded,
        free_ids=int(raw.get("freeIds", DEFAULT_FREE_IDS)),
        permissions=canonical_permissions(raw.get("permissions", "rw")),
        health=_health(health, duration) if health is not None else None,
        hooks=_hooks(raw.get("hooks", {}), duration),
        allocate=allocate,
        preferred_allocation=PreferredAllocation(raw.get("preferredAllocation", "packed")),
        dra=_dra(raw.get("dra", {})),
        source=Source(file, line),
        templates=templates,
    )


def _dra(raw: dict[str, Any]) -> DraSpec:
    attributes: dict[str, AttributeValue] = {}
    for name, value in sorted(raw.get("attributes", {}).items()):
        attributes[name] = Version(str(value["version"])) if isinstance(value, dict) else value
    return DraSpec(attributes=MappingProxyType(attributes))


def _matcher(raw: dict[str, Any]) -> Matcher:
    if "glob" in raw:
        return GlobMatcher(raw["glob"], container_path=raw.get("containerPath"))
    udev = raw["udev"]
    return UdevMatcher(
        subsystem=udev.get("subsystem"),
        kernel=udev.get("kernel"),
        driver=udev.get("driver"),
        attributes=frozen_map(udev.get("attributes")),
        properties=frozen_map(udev.get("properties")),
        container_path=raw.get("containerPath"),
    )


def _group_by(raw: str | dict[str, str]) -> GroupBy:
    if isinstance(raw, dict):
        return GroupBy("pathRegex", pattern=raw["pathRegex"])
    if raw.startswith("parent:"):
        return GroupBy("parent", subsystem=raw.removeprefix("parent:"))
    return GroupBy("all" if raw == "all" else "node")


def _health(raw: dict[str, Any], duration: Callable[..., float]) -> HealthCheck:
    timeout = duration("health", "timeout")
    sysfs = raw.get("sysfs")
    return HealthCheck(
        exec=Exec(tuple(raw["exec"]), timeout) if "exec" in raw else None,
        interval=duration("health", "interval"),
        failure_threshold=int(raw.get("failureThreshold", 3)),
        sysfs=(
            SysfsProbe(sysfs["attribute"], sysfs["expect"], sysfs.get("subsystem"), timeout)
            if sysfs is not None
            else None
        ),
    )


def _hooks(raw: dict[str, Any], duration: Callable[..., float]) -> Hooks:
    def hook(name: str) -> Exec | None:
        if name not in raw:
            return None
        return Exec(tuple(raw[name]["exec"]), duration("hooks", name, "timeout"))

    return Hooks(init=hook("init"), pre_start=hook("preStart"), cleanup=hook("cleanup"))
