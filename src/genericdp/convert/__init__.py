"""``genericdp convert``: another device plugin's config -> genericdp config v1.

Reads squat/generic-device-plugin's ``--device`` values and/or its
``--config`` file, writes config v1 YAML with a comment wherever the meaning
differs, and loads the result before handing it back, so what is printed
always validates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from genericdp import __version__
from genericdp.config import load_text
from genericdp.config.loader import MAX_FILE_BYTES, read_config_file
from genericdp.convert.emit import Note, comment, convert_device
from genericdp.convert.squat import (
    DAEMON_SETTINGS,
    DEFAULT_DOMAIN,
    SquatConfig,
    check_domain,
    parse_config_file,
    parse_device_flag,
)
from genericdp.errors import ConfigError, ConfigIssue

__all__ = ["Conversion", "convert_squat"]


@dataclass(frozen=True)
class Conversion:
    """The config v1 text, and every difference from squat (also comments in the text)."""

    text: str
    notes: tuple[Note, ...]

    @property
    def not_converted(self) -> tuple[Note, ...]:
        """What squat serves that the text does not: the config is written, but less."""
        return tuple(n for n in self.notes if n.text.startswith("NOT CONVERTED"))


def convert_squat(
    devices: Sequence[str] = (),
    config_file: Path | None = None,
    domain: str | None = None,
    daemon_flags: Mapping[str, str] | None = None,
) -> Conversion:
    """Convert squat's flags and/or ``--config`` file as squat resolves them: ``--device``
    flags replace the file's devices, ``--domain`` beats the file's. ``daemon_flags`` each
    become a note naming genericdp's setting."""
    issues: list[ConfigIssue] = []
    parsed = _read_file(config_file, issues) if config_file is not None else None
    squat = parsed or SquatConfig(domain=DEFAULT_DOMAIN)
    sources = [str(config_file)] if parsed else []
    if devices:
        if squat.devices:
            squat.ignored.append(
                f"{config_file}: its devices are ignored because --device is given (as in squat)"
            )
        squat.devices = []
        for index, text in enumerate(devices, start=1):
            if len(text.encode()) > MAX_FILE_BYTES:
                issues.append(_issue(f"--device #{index}", "is larger than 1 MiB"))
                continue
            device, problems, ignored = parse_device_flag(text, index)
            issues += problems
            squat.ignored += ignored
            if device is not None:
                squat.devices.append(device)
        sources.append(f"{len(devices)} --device flag(s)")
    for name, value in (daemon_flags or {}).items():
        squat.ignored.append(f"--{name} {value!r}: {DAEMON_SETTINGS[name]}")
    if domain is not None:
        squat.domain = domain.strip()
    problem = check_domain(squat.domain, "--domain" if domain is not None else str(config_file))
    if problem is not None:
        issues.append(problem)
    if not squat.devices and not issues:
        where = str(config_file) if config_file is not None else "command line"
        issues.append(_issue(where, "no device given (squat needs at least one)"))
    if issues:
        raise ConfigError(issues)
    return _emit(squat, sources)


def _issue(where: str, message: str) -> ConfigIssue:
    return ConfigIssue(where, None, None, "", message)


def _read_file(path: Path, issues: list[ConfigIssue]) -> SquatConfig | None:
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        issues.append(_issue(str(path), "only YAML or JSON squat config files can be converted"))
        return None
    try:
        text = read_config_file(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problem = f"is not UTF-8 (byte {exc.start})"
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror}"
    except Exception as exc:  # noqa: BLE001 -- the loader's refusals become one sentence
        problem = str(exc)
    else:
        parsed, problems = parse_config_file(text, str(path))
        issues += problems
        return parsed
    issues.append(_issue(str(path), problem))
    return None


def _emit(squat: SquatConfig, sources: Sequence[str]) -> Conversion:
    notes = [Note("", text) for text in squat.ignored]
    body: list[str] = []
    for device in squat.devices:
        converted = convert_device(device, squat.domain)
        notes += converted.notes
        if converted.lines:
            body.append("")
        body += [f"  # NOTE: {comment(str(note))}" for note in converted.notes]
        body += [f"  {line}" for line in converted.lines]
    header = [
        f"# genericdp config v1, converted by `genericdp convert` (genericdp {__version__})",
        comment(
            f"# from squat/generic-device-plugin: {', '.join(sources)}; domain {squat.domain}."
        ),
        "# Read every NOTE: it marks a place where the meaning differs from squat's.",
        *(f"# NOTE: {comment(str(n))}" for n in notes if n.where == ""),
        "version: v1",
        "resources:",
    ]
    text = "\n".join(header + body) + "\n"
    if not any(line.startswith("  - name: ") for line in body):
        raise ConfigError(
            [_issue("<converted>", f"nothing to serve: {n}") for n in notes]
            or [_issue("<converted>", "nothing genericdp can serve")]
        )
    try:
        load_text(text, "<converted>")
    except ConfigError as exc:  # a bug in the converter: said so, with what failed
        bug = "the converted config is invalid, a bug in `genericdp convert` (please report it)"
        raise ConfigError([_issue("<converted>", bug), *exc.issues]) from exc
    return Conversion(text, tuple(notes))
