"""Files and directories -> a validated ``Config`` or one ``ConfigError``. Every problem
of every file is collected before anything is raised, so one ``genericdp validate``
shows them all."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from genericdp.config.convert import compile_allocate
from genericdp.config.limits import too_many_ids, too_many_resources
from genericdp.config.schema import schema_issues
from genericdp.config.semantic import duplicate_names, resources_of, semantic_issues
from genericdp.config.v1.allocate import AllocateSpec, allocate_spec
from genericdp.config.v1.resource import (
    CONFIG_VERSION,
    Config,
    ResourceDefinition,
    resource_definition,
)
from genericdp.config.yamlpos import Document, KeyPath, describe, parse_yaml
from genericdp.errors import ConfigError, ConfigIssue, cut_middle, ellipsized

if TYPE_CHECKING:
    from genericdp.config.templates import CompiledTemplates

SUFFIXES = (".yaml", ".yml")
# The kubelet's ConfigMap volume keeps ``..data`` and ``..2024_01_01_...`` here.
HIDDEN_PREFIX = ".."
MAX_FILE_BYTES = 1024 * 1024  # what a ConfigMap can hold
# Issues reported per file; the rest are counted (one wrong indentation can
# make every line an error).
MAX_ISSUES_PER_FILE = 100
# A message quoting a 1 MiB value would be a 1 MiB log line on every node.
MAX_MESSAGE_CHARS = 400
_ALLOCATE_OF = re.compile(r"resources\[(\d+)\]\.allocate(?:$|[.\[])")


@dataclass(frozen=True)
class Source:
    """One config file's name (as messages give it) and its text."""

    file: str
    text: str


@dataclass
class _Checked:
    file: str
    doc: Document | None = None
    issues: list[ConfigIssue] = field(default_factory=list)
    templates: dict[int, CompiledTemplates] = field(default_factory=dict)
    allocate: dict[int, AllocateSpec] = field(default_factory=dict)
    seconds: dict[KeyPath, float] = field(default_factory=dict)  # every duration, by path


def load(paths: Sequence[Path | str]) -> Config:
    """Load files and directories (a directory: its ``*.yaml``/``*.yml``, sorted by name)."""
    return load_sources(paths)[0]


def load_sources(paths: Sequence[Path | str]) -> tuple[Config, tuple[Source, ...]]:
    """``load``, and the text of each file exactly as it was checked (what
    ``serve`` keeps as the last good config: no second read that could differ)."""
    checked: list[_Checked] = []
    sources: list[Source] = []
    for path in (Path(p) for p in paths):
        files, problems = config_files(path)
        checked += [_Checked(str(path), issues=[p]) for p in problems]
        for f in files:
            read = _read(f)
            if isinstance(read, ConfigIssue):
                checked.append(_Checked(read.file, issues=[read]))
            else:
                sources.append(read)
                checked.append(_check(read))
    return _finish(checked), tuple(sources)


def load_text(text: str, filename: str = "<string>") -> Config:
    return load_texts([Source(filename, text)])


def load_texts(sources: Sequence[Source]) -> Config:
    """Several files given as text, checked together as one directory's files are."""
    return _finish([_check(s) for s in sources])


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


def _read(path: Path) -> Source | ConfigIssue:
    try:
        return Source(str(path), read_config_file(path).decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        message = f"is not UTF-8 text (invalid byte at offset {exc.start})"
    except _NotAConfigFileError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"cannot be read: {exc.strerror or exc}"
    return ConfigIssue(str(path), None, None, "", message)


class _NotAConfigFileError(Exception):
    """A FIFO, a device, a directory or too large; says which."""


def read_config_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: opened without blocking (a
    FIFO would otherwise wait for a writer forever), checked with ``fstat`` on what was
    opened (no race with a rename), read up to ``limit + 1`` bytes (``/dev/zero`` or a
    growing file costs no more)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO with no writer on some systems
            raise _NotAConfigFileError(_KIND_MESSAGE.format(kind="a socket or FIFO")) from exc
        raise
    with os.fdopen(fd, "rb", buffering=0) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotAConfigFileError(_KIND_MESSAGE.format(kind=_kind(info.st_mode)))
        if info.st_size > limit:
            raise _NotAConfigFileError(_size_message(info.st_size, limit))
        data = bytearray()
        while len(data) <= limit:
            chunk = file.read(limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > limit:
            raise _NotAConfigFileError(_size_message(len(data), limit, growing=True))
        return bytes(data)


_KIND_MESSAGE = "is {kind}, not a regular file: a config file must be a regular file"


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _size_message(size: int, limit: int, *, growing: bool = False) -> str:
    what = "grew past" if growing else f"has {size} bytes, more than"
    return f"{what} the limit of {limit} bytes (1 MiB, what a ConfigMap can hold)"


def _check(source: Source) -> _Checked:
    result = _Checked(source.file)
    try:
        _check_text(result, source.text)
    except RecursionError:
        result.issues.append(ConfigIssue(source.file, None, None, "", "is nested too deeply"))
    except Exception as exc:  # noqa: BLE001 -- whatever a file does to us becomes an issue of that file
        message = f"could not be checked: {type(exc).__name__}: {exc}"
        result.issues.append(ConfigIssue(source.file, None, None, "", message))
    return result


def _check_text(result: _Checked, text: str) -> None:
    file = result.file
    if not text.strip():
        result.issues.append(ConfigIssue(file, None, None, "", "is empty"))
        return
    doc, result.issues = parse_yaml(text, file)
    if doc is None:
        return
    # A value the reader already refused (a NUL character) is not checked again.
    refused = {issue.path for issue in result.issues}
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
    found = [i for i in found if i.path not in refused]
    seen = refused | {issue.path for issue in found}
    # The schema already explained these paths; a second message would only repeat it.
    found += [i for i in semantic_issues(doc, result.seconds) if i.path not in seen]
    result.issues += found + _compile_templates(result, doc, seen)


def _compile_templates(result: _Checked, doc: Document, bad: set[str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    # One pass over the bad paths, not one per resource: a file with thousands
    # of resources and thousands of problems must still be checked in linear time.
    misshapen = {int(m.group(1)) for m in map(_ALLOCATE_OF.match, bad) if m}
    for path, resource in resources_of(doc):
        if int(path[1]) in misshapen:
            continue  # compile only what has the right shape
        spec = allocate_spec(
            resource.get("allocate", {}), permissions=resource.get("permissions", "rw")
        )
        result.allocate[int(path[1])] = spec
        compiled, problems = compile_allocate(doc, (*path, "allocate"), spec)
        issues += problems
        if compiled is not None:
            result.templates[int(path[1])] = compiled
    return issues


def _finish(checked: list[_Checked]) -> Config:
    docs = [c.doc for c in checked if c.doc is not None]
    by_file = {c.file: c for c in checked if c.doc is not None}
    for issue in [*duplicate_names(docs), *too_many_resources(docs), *too_many_ids(docs)]:
        by_file[issue.file].issues.append(issue)
    issues = [issue for c in checked for issue in _capped(c.issues)]
    if issues:
        raise ConfigError(issues)
    resources: list[ResourceDefinition] = []
    for c in checked:
        if c.doc is None:
            raise RuntimeError("no issues means every file parsed")
        for path, raw in resources_of(c.doc):
            index, pos = int(path[1]), c.doc.value_pos(path)
            definition = resource_definition(
                raw,
                path=path,
                file=c.file,
                line=pos.line if pos else None,
                allocate=c.allocate[index],
                templates=c.templates.get(index),
                seconds=c.seconds,
            )
            resources.append(definition)
    return Config(tuple(resources), files=tuple(c.file for c in checked))


def _capped(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """A file's issues by position, at most MAX_ISSUES_PER_FILE then a count, shortened."""
    ordered = sorted((_shortened(i) for i in issues), key=lambda i: (i.line or 0, i.column or 0))
    if len(ordered) <= MAX_ISSUES_PER_FILE:
        return ordered
    message = (
        f"… and {len(ordered) - MAX_ISSUES_PER_FILE} more problem(s) in this file, from here on"
        f" (only the first {MAX_ISSUES_PER_FILE} are shown)"
    )
    summary = replace(ordered[MAX_ISSUES_PER_FILE], path="", message=message)
    return [*ordered[:MAX_ISSUES_PER_FILE], summary]


def _shortened(issue: ConfigIssue) -> ConfigIssue:
    if len(issue.message) <= MAX_MESSAGE_CHARS and len(issue.path) <= MAX_MESSAGE_CHARS:
        return issue
    message = cut_middle(issue.message, MAX_MESSAGE_CHARS)
    path = ellipsized(issue.path, MAX_MESSAGE_CHARS + 1)
    return replace(issue, message=message, path=path)
