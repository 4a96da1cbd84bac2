"""Config carried inside a Helm values file or a rendered manifest. The files of one
ConfigMap are checked together, as the pod reads them, and each problem is put back at
its line in the file the user wrote where the text was copied from it verbatim.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from genericdp.config import Config, load
from genericdp.errors import ConfigError, ConfigIssue

SUFFIXES = (".yaml", ".yml")
# A config v1 file has no top-level `kind` (the schema is closed): one that
# does is a Kubernetes manifest.
_MANIFEST = re.compile(r"^kind:[ \t]*\S", re.MULTILINE)
_HELM_VALUES = re.compile(r"^(config|configYaml|extraConfigFiles):", re.MULTILINE)


@dataclass(frozen=True)
class Embedded:
    """One config file's text found inside another file."""

    name: str  # its name in the config directory, e.g. config.yaml
    text: str
    source: str  # the file it was found in
    key: str  # where in that file, e.g. "configYaml" or "ConfigMap kube-system/x data.a.yaml"
    first_line: int | None = None  # the source line of the text's line 1, when verbatim
    indent: int = 0  # columns the text is indented by there


@dataclass(frozen=True)
class Checked:
    """What one group of embedded files holds: the resources and where each is."""

    label: str
    resources: tuple[tuple[str, str], ...]  # (name, "file:line")


def _starts_a_line(pattern: re.Pattern[str], path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        return pattern.search(path.read_text(errors="replace")) is not None
    except OSError:
        return False


def looks_like_manifest(path: Path) -> bool:
    """A file (not a directory) whose documents carry a top-level ``kind``."""
    return _starts_a_line(_MANIFEST, path)


def looks_like_helm_values(path: Path) -> bool:
    """A file with a top-level ``config``, ``configYaml`` or ``extraConfigFiles``."""
    return _starts_a_line(_HELM_VALUES, path)


def _round_trip() -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.allow_duplicate_keys = False
    return yaml


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise _whole_file(path, f"cannot read: {exc}") from exc


def _whole_file(path: Path, message: str) -> ConfigError:
    return ConfigError([ConfigIssue(str(path), None, None, "", message)])


def _syntax(path: Path, exc: YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return ConfigError([ConfigIssue(str(path), line, column, "", f"not YAML: {exc}")])


def _block_text(lines: list[str], start: int, indent: int) -> str:
    """The source lines from ``start`` (0-based) that belong to a block indented by
    ``indent``, dedented: blank lines and deeper lines, up to the first shallower one."""
    taken = []
    for line in lines[start:]:
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip(" ")) < indent:
            if not stripped.startswith("#"):
                break
            taken.append("")
            continue
        taken.append(line[indent:])
    while taken and not taken[-1].strip():
        taken.pop()
    return "\n".join(taken) + "\n"


def _scalar(
    path: Path, lines: list[str], parent: Any, key: str, *, name: str, where: str
) -> Embedded:
    """A string value; placed in the source when it is a ``|`` block copied verbatim."""
    text = parent[key]
    if not isinstance(text, str):
        raise _error_at(path, parent, key, where, f"must be a string, not {type(text).__name__}")
    line, _ = parent.lc.value(key)
    start = line + 1
    body = [s for s in lines[start:] if s.strip()]
    indent = len(body[0]) - len(body[0].lstrip(" ")) if body else 0
    verbatim = indent > 0 and _block_text(lines, start, indent).rstrip("\n") == text.rstrip("\n")
    return Embedded(name, text, str(path), where, start + 1 if verbatim else None, indent)


def _error_at(path: Path, parent: Any, key: str, where: str, message: str) -> ConfigError:
    line, column = parent.lc.key(key)
    return ConfigError([ConfigIssue(str(path), line + 1, column + 1, where, message)])


def _mapping(path: Path, lines: list[str], parent: Any, key: str) -> Embedded:
    """A mapping value: its own lines when it is a block, else dumped as YAML."""
    value = parent[key]
    key_line, _ = parent.lc.key(key)
    line, column = parent.lc.value(key)
    if line > key_line:
        text = _block_text(lines, line, column)
        safe = YAML(typ="safe", pure=True)
        try:
            same = safe.load(text) == safe.load(_dump(value))
        except YAMLError:
            same = False
        if same:
            return Embedded("config.yaml", text, str(path), key, line + 1, column)
    return Embedded("config.yaml", _dump(value), str(path), key)


def _dump(value: Any) -> str:
    out = StringIO()
    _round_trip().dump(value, out)
    return out.getvalue()


def from_helm_values(path: Path) -> list[Embedded]:
    """The files the chart puts in its ConfigMap from the values file ``path``."""
    text = _read(path)
    lines = text.splitlines()
    try:
        values = _round_trip().load(text)
    except YAMLError as exc:
        raise _syntax(path, exc) from exc
    if not hasattr(values, "lc"):  # ruamel's round-trip mapping
        raise _whole_file(path, "is not a YAML mapping")
    found = []
    if values.get("configYaml"):
        found.append(
            _scalar(path, lines, values, "configYaml", name="config.yaml", where="configYaml")
        )
    elif values.get("config") is not None:
        if not hasattr(values["config"], "lc"):
            raise _error_at(path, values, "config", "config", "must be a mapping")
        found.append(_mapping(path, lines, values, "config"))
    extra = values.get("extraConfigFiles") or {}
    if extra and not hasattr(extra, "lc"):
        raise _error_at(path, values, "extraConfigFiles", "extraConfigFiles", "must be a mapping")
    for name in extra:
        where = f"extraConfigFiles.{name}"
        if not str(name).endswith(SUFFIXES) or name == "config.yaml":
            message = "must end in .yaml or .yml and not be config.yaml"
            raise _error_at(path, extra, name, where, message)
        found.append(_scalar(path, lines, extra, name, name=str(name), where=where))
    if not found:
        raise _whole_file(path, "has no config, configYaml or extraConfigFiles: nothing to check")
    return found


def from_manifest(path: Path) -> list[list[Embedded]]:
    """The config files of each ConfigMap in the manifest ``path``, one list per ConfigMap."""
    text = _read(path)
    lines = text.splitlines()
    try:
        documents = list(_round_trip().load_all(text))
    except YAMLError as exc:
        raise _syntax(path, exc) from exc
    groups = []
    for doc in documents:
        if not hasattr(doc, "lc") or doc.get("kind") != "ConfigMap":
            continue
        meta = doc.get("metadata") or {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
        data = doc.get("data") or {}
        group = [
            _scalar(path, lines, data, key, name=key, where=f"ConfigMap {name} data.{key}")
            for key in data
            if str(key).endswith(SUFFIXES)
        ]
        if group:
            groups.append(group)
    if not groups:
        raise _whole_file(path, "has no ConfigMap with *.yaml or *.yml data")
    return groups


def check(files: Sequence[Embedded]) -> Checked:
    """Load ``files`` together as one config directory; ConfigError placed in the sources."""
    by_name = {f.name: f for f in files}
    with tempfile.TemporaryDirectory(prefix="genericdp-validate-") as tmp:
        root = Path(tmp)
        for f in files:
            (root / f.name).write_text(f.text)
        try:
            config: Config = load([root])
        except ConfigError as exc:
            raise ConfigError([_place(i, by_name) for i in exc.issues]) from None
    resources = []
    for r in config.resources:
        f = by_name[Path(r.source.file).name]
        line = r.source.line
        if f.first_line is not None and line is not None:
            where = f"{f.source}:{f.first_line + line - 1}"
        else:
            where = f"{f.source} ({f.key}, line {line})"
        resources.append((r.name, where))
    label = ", ".join(sorted({f"{f.source} ({f.key})" for f in files}))
    return Checked(label, tuple(resources))


def _place(issue: ConfigIssue, by_name: dict[str, Embedded]) -> ConfigIssue:
    """``issue`` of a file in the temporary directory, at its place in the source."""
    f = by_name.get(Path(issue.file).name)
    if f is None:
        return issue
    if f.key == "config":
        path = f"config.{issue.path}" if issue.path else "config"
    else:
        path = f"{f.key}: {issue.path}" if issue.path else f.key
    if f.first_line is None or issue.line is None:
        where = f"{f.source} ({f.key}" + (f", line {issue.line})" if issue.line else ")")
        return replace(issue, file=where, line=None, column=None)
    column = issue.column + f.indent if issue.column is not None else None
    return replace(
        issue, file=f.source, line=f.first_line + issue.line - 1, column=column, path=path
    )
