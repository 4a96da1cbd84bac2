"""The templates of each resource's ``allocate`` and ``labels`` compiled at load,
each problem located at its value in the file.

"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from genericdp.config.templates import (
    CompiledTemplates,
    TemplateProblem,
    TemplateSyntaxErrors,
    compile_label_template,
    compile_templates,
)
from genericdp.config.v1.allocate import AllocateSpec
from genericdp.config.v1.labels import label_key_issues
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue, ellipsized
from genericdp.k8snames import label_value_problem

_MOUNT_KEY = re.compile(r"mounts\[(\d+)\]\.(hostPath|containerPath)")


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


def label_issues(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    """A resource's ``labels``: label keys, and values that compile over the names a
    label sees; a value without markup must be a label value already."""
    issues = label_key_issues(doc, path, resource)
    labels = resource.get("labels")
    for key, source in labels.items() if isinstance(labels, dict) else ():
        if not isinstance(source, str):
            continue  # null, or what the schema refused
        where = (*path, "labels", key)
        try:
            value = compile_label_template(source)
        except TemplateSyntaxErrors as exc:
            issues += [_template_issue(doc, where, p) for p in exc.problems]
            continue
        if value.template is None and (problem := label_value_problem(value.render({}))):
            shown = ellipsized(source, 80)
            issues.append(doc.issue(where, f"label value {shown!r}: {problem}"))
    return issues


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
