"""The templates of each resource's ``allocate`` and ``labels`` compiled at load,
and its label keys checked, each problem located at its value in the file."""

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
from genericdp.config.v1.labels import present_label
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue, ellipsized
from genericdp.k8snames import label_key_problem, label_value_problem

_MOUNT_KEY = re.compile(r"mounts\[(\d+)\]\.(hostPath|containerPath)")


def compile_allocate(
    doc: Document, path: KeyPath, spec: AllocateSpec
) -> tuple[CompiledTemplates | None, list[ConfigIssue]]:
    try:
        return compile_templates(spec), []
    except TemplateSyntaxErrors as exc:
        return None, [
            _template_issue(doc, (*path, *_template_path(p.key)), p) for p in exc.problems
        ]


def label_issues(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    """Each key a label key that Node Feature Discovery publishes (null only on the default
    label), each value a template that compiles; a value without markup is a label value."""
    labels = resource.get("labels")
    if not isinstance(labels, dict):
        return []
    name = resource.get("name")
    default = present_label(name) if isinstance(name, str) else None
    issues: list[ConfigIssue] = []
    for key, source in labels.items():
        where = (*path, "labels", key)
        shown = ellipsized(key, 80)
        if problem := label_key_problem(key) or _denied(key):
            issues.append(doc.issue(where, f"label key {shown!r}: {problem}", at_key=True))
        elif source is None and key != default:
            message = (
                f"null turns off only the default label {default!r}; {shown!r} is not it"
                " (remove the key instead)"
                if default
                else f"null turns off only the default label, which {name!r} does not have"
            )
            issues.append(doc.issue(where, message))
        if not isinstance(source, str):
            continue  # null, or what the schema refused
        try:
            value = compile_label_template(source)
        except TemplateSyntaxErrors as exc:
            issues += [_template_issue(doc, where, p) for p in exc.problems]
            continue
        if value.template is None and (problem := label_value_problem(value.render({}))):
            issues.append(doc.issue(where, f"label value {ellipsized(source, 80)!r}: {problem}"))
    return issues


# Node Feature Discovery never publishes these (nfd-master's denyLabelNs), but for
# these two sub-namespaces, which it always allows.
_DENIED_DOMAIN = "kubernetes.io"
_ALLOWED_DOMAINS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")


def _denied(key: str) -> str | None:
    prefix, slash, _ = key.rpartition("/")
    if not slash or not (prefix == _DENIED_DOMAIN or prefix.endswith("." + _DENIED_DOMAIN)):
        return None
    if any(prefix == d or prefix.endswith("." + d) for d in _ALLOWED_DOMAINS):
        return None
    return (
        "Node Feature Discovery publishes no label under kubernetes.io or its subdomains"
        " but feature.node.kubernetes.io and profile.node.kubernetes.io"
    )


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
    """``env.A.B`` -> ("env", "A.B") (names may hold dots); ``mounts[0].hostPath`` ->
    ("mounts", 0, "hostPath")."""
    mount = _MOUNT_KEY.fullmatch(key)
    if mount:
        return ("mounts", int(mount.group(1)), mount.group(2))
    section, _, name = key.partition(".")
    return (section, name) if name else (section,)
