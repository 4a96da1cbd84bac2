"""Files and directories -> a validated ``Config`` or one ``ConfigError``.

The order of work: find the files, read and parse each, check each against
the schema and the semantic rules, compile templates, then look across files
for duplicate names. Every problem of every file is collected before anything
is raised, so one run of ``genericdp validate`` shows them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genericdp.config.convert import allocate_spec, compile_allocate, resource_definition
from genericdp.config.model import CONFIG_VERSION, Config, ResourceDefinition
from genericdp.config.schema import schema_issues
from genericdp.config.semantic import duplicate_names, resources_of, semantic_issues
from genericdp.config.yamlpos import Document, describe, format_path, parse_yaml
from genericdp.errors import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from genericdp.render import CompiledTemplates

SUFFIXES = (".yaml", ".yml")
# The kubelet's ConfigMap volume keeps ``..data`` and ``..2024_01_01_...`` here.
HIDDEN_PREFIX = ".."


@dataclass
class _Checked:
    """One file after checking: its document (if parsed), issues, compiled templates."""

    file: str
    doc: Document | None = None
    issues: list[ConfigIssue] = field(default_factory=list)
    templates: dict[int, CompiledTemplates] = field(default_factory=dict)


def load(paths: Sequence[Path | str]) -> Config:
    """Load files and directories (a directory: its ``*.yaml``/``*.yml``, sorted)."""
    checked: list[_Checked] = []
    for path in (Path(p) for p in paths):
        files, problems = config_files(path)
        checked += [_Checked(str(path), issues=[p]) for p in problems]
        checked += [_check(str(f), *_read(f)) for f in files]
    return _finish(checked)


def load_text(text: str, filename: str = "<string>") -> Config:
    """Load one config from a string; ``filename`` is used in messages."""
    return _finish([_check(filename, text, None)])


def config_files(path: Path) -> tuple[list[Path], list[ConfigIssue]]:
    """The config files a path stands for, or why there are none."""
    if path.is_dir():
        files = [
            entry
            for entry in sorted(path.iterdir(), key=lambda p: p.name)
            if not entry.name.startswith(HIDDEN_PREFIX)
            and entry.suffix in SUFFIXES
            and not entry.is_dir()  # follows symlinks: ConfigMap keys link into ..data/
        ]
        if files:
            return files, []
        message = "no *.yaml or *.yml files in this directory"
    elif path.exists():
        return [path], []
    elif path.is_symlink():
        message = "is a broken symbolic link"
    else:
        message = "does not exist"
    return [], [ConfigIssue(str(path), None, None, "", message)]


def _read(path: Path) -> tuple[str | None, ConfigIssue | None]:
    try:
        return path.read_bytes().decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        message = f"is not UTF-8 text (invalid byte at offset {exc.start})"
    except IsADirectoryError:
        message = "is a directory, expected a YAML file"
    except OSError as exc:
        message = f"cannot be read: {exc.strerror or exc}"
    return None, ConfigIssue(str(path), None, None, "", message)


def _check(file: str, text: str | None, problem: ConfigIssue | None) -> _Checked:
    result = _Checked(file)
    if problem is not None or text is None:
        result.issues = [problem] if problem else []
        return result
    try:
        _check_text(result, text)
    except RecursionError:
        result.issues.append(ConfigIssue(file, None, None, "", "is nested too deeply"))
    except Exception as exc:
        # Whatever a file does to us becomes an issue of that file, never a traceback.
        result.issues.append(
            ConfigIssue(file, None, None, "", f"could not be checked: {type(exc).__name__}: {exc}")
        )
    return result


def _check_text(result: _Checked, text: str) -> None:
    file = result.file
    if not text.strip():
        result.issues.append(ConfigIssue(file, None, None, "", "is empty"))
        return
    doc, result.issues = parse_yaml(text, file)
    if doc is None:
        return
    if not isinstance(doc.data, dict):
        what = "only comments" if doc.data is None else describe(doc.data)
        message = f"must be a mapping with version and resources at the top level, not {what}"
        result.issues.append(ConfigIssue(file, 1, 1, "", message))
        return
    result.doc = doc
    found = schema_issues(doc)
    if doc.data.get("version", CONFIG_VERSION) != CONFIG_VERSION:
        # Another version has other rules; checking it against v1's is only noise.
        result.issues += [i for i in found if i.path == "version"]
        return
    seen = {issue.path for issue in found}
    # The schema already explained these paths; a second message would only repeat it.
    found += [i for i in semantic_issues(doc) if i.path not in seen]
    result.issues += found + _compile_templates(result, doc, seen)


def _compile_templates(result: _Checked, doc: Document, bad: set[str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for path, resource in resources_of(doc):
        where = format_path((*path, "allocate"))
        if any(p == where or p.startswith((where + ".", where + "[")) for p in bad):
            continue  # compile only what has the right shape
        spec = allocate_spec(resource.get("allocate", {}))
        compiled, problems = compile_allocate(doc, (*path, "allocate"), spec)
        issues += problems
        if compiled is not None:
            result.templates[int(path[1])] = compiled
    return issues


def _finish(checked: list[_Checked]) -> Config:
    docs = [c.doc for c in checked if c.doc is not None]
    for issue in duplicate_names(docs):
        next(c for c in checked if c.file == issue.file).issues.append(issue)
    issues = [
        issue
        for c in checked
        for issue in sorted(c.issues, key=lambda i: (i.line or 0, i.column or 0))
    ]
    if issues:
        raise ConfigError(issues)
    resources: list[ResourceDefinition] = []
    for c in checked:
        assert c.doc is not None  # no issues means every file parsed
        for path, raw in resources_of(c.doc):
            resources.append(_definition(c, path[1], raw))
    return Config(tuple(resources), files=tuple(c.file for c in checked))


def _definition(checked: _Checked, index: Any, raw: dict[str, Any]) -> ResourceDefinition:
    assert checked.doc is not None
    pos = checked.doc.value_pos(("resources", index))
    return resource_definition(
        raw,
        file=checked.file,
        line=pos.line if pos else None,
        templates=checked.templates.get(int(index)),
    )
