"""Rules the JSON Schema cannot express, each reported at the offending value.

They run even when the schema found problems, so they never assume a shape: what is
not of the expected type is skipped, the schema has said so.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from typing import Any

from genericdp.config.convert import label_issues
from genericdp.config.devpaths import container_path_problem, glob_problem
from genericdp.config.durations import parse_duration
from genericdp.config.names import device_class_collision, device_class_name, validate_resource_name
from genericdp.config.regex import compile_regex
from genericdp.config.templates import TemplateSyntaxErrors, compile_node_template
from genericdp.config.v1.health import DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_TIMEOUT
from genericdp.config.v1.hooks import DEFAULT_HOOK_TIMEOUT, HOOK_NAMES
from genericdp.config.v1.nodeselector import node_selector_issues
from genericdp.config.v1.resource import UNBOUNDED
from genericdp.config.yamlpos import Document, KeyPath
from genericdp.errors import ConfigIssue, ellipsized

_SHOWN = 40  # characters of a user's value quoted in a message

# Bounds of every duration, in seconds ("longer" than a day must stay a number
# the event loop can wait for); the least by key, and why.
MAX_DURATION = 24 * 3600.0
_MINIMUM = {
    "interval": (
        1.0,
        "probes run per unit; more often than once a second is a fork storm, not a probe",
    ),
    "timeout": (0.1, "a command cannot even start in less"),
}


def semantic_issues(doc: Document, seconds: dict[KeyPath, float]) -> list[ConfigIssue]:
    """Every semantic problem of one document; ``seconds`` gets every valid duration
    (given or defaulted) by its path."""
    issues: list[ConfigIssue] = []
    for path, resource in resources_of(doc):
        issues += _name(doc, path, resource)
        issues += _globs(doc, path, resource)
        issues += _udev_subsystems(doc, path, resource)
        issues += _container_paths(doc, path, resource)
        issues += _group_by(doc, path, resource)
        issues += _sharing(doc, path, resource)
        issues += _health(doc, path, resource, seconds)
        issues += _hooks(doc, path, resource, seconds)
        issues += _mounts(doc, path, resource)
        issues += node_selector_issues(doc, path, resource)
        issues += label_issues(doc, path, resource)
    return issues


def resources_of(doc: Document) -> Iterator[tuple[KeyPath, dict[str, Any]]]:
    for index, resource in _entries(doc.data, "resources"):
        yield ("resources", index), resource


def _entries(data: object, *keys: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, mapping) of each mapping in the list at ``keys`` below ``data``."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    for index, item in enumerate(data if isinstance(data, list) else ()):
        if isinstance(item, dict):
            yield index, item


def duplicate_names(docs: Sequence[Document]) -> list[ConfigIssue]:
    """A resource name, or the DeviceClass it derives, defined twice in any files."""
    first: dict[str, str] = {}
    classes: dict[str, tuple[str, str]] = {}  # DeviceClass name -> resource, where
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
                continue
            first[name] = f"{doc.file}:{pos.line}" if pos else doc.file
            other, at = classes.setdefault(device_class_name(name), (name, first[name]))
            if other != name:
                message = f"{device_class_collision(name, other)} (the other is at {at})"
                issues.append(doc.issue(where, message))
    return issues


def _name(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    name = resource.get("name")
    problem = validate_resource_name(name) if isinstance(name, str) else None
    return [doc.issue((*path, "name"), problem)] if problem else []


def _globs(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    issues = []
    for keys, what in ((("match",), "glob"), (("allocate", "devices"), "path")):
        for index, item in _entries(resource, *keys):
            pattern = item.get(what)
            problem = glob_problem(pattern, what=what) if isinstance(pattern, str) else None
            if pattern and problem:
                issues.append(doc.issue((*path, *keys, index, what), problem))
    return issues


_SUBSYSTEM = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]*")


def _udev_subsystems(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    """A udev ``subsystem`` is one directory name of /sys/class or /sys/bus: discovery
    lists that directory, so a '/' or '..' would have it read elsewhere."""
    issues = []
    for index, item in _entries(resource, "match"):
        udev = item.get("udev")
        subsystem = udev.get("subsystem") if isinstance(udev, dict) else None
        if isinstance(subsystem, str) and subsystem and not _SUBSYSTEM.fullmatch(subsystem):
            shown = subsystem if len(subsystem) <= _SHOWN else subsystem[:_SHOWN] + "…"
            message = (
                f"subsystem {shown!r} must be one name (letters, digits, '_', '-', ':', '.';"
                " not starting with '.'), as under /sys/class, e.g. tty"
            )
            issues.append(doc.issue((*path, "match", index, "udev", "subsystem"), message))
    return issues


def _container_paths(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    """Each node ``containerPath`` compiles, and its literal text keeps the rules its
    rendering must keep."""
    found = [
        ((*path, *keys, index, "containerPath"), item.get("containerPath"))
        for keys in (("match",), ("allocate", "devices"))
        for index, item in _entries(resource, *keys)
    ]
    issues: list[ConfigIssue] = []
    for where, source in found:
        if not isinstance(source, str) or not source:
            continue  # absent, or the schema says so
        try:
            compile_node_template(source)
        except TemplateSyntaxErrors as exc:
            issues += [doc.issue(where, f"containerPath: {p.message}") for p in exc.problems]
            continue
        problem = _literal_container_path_problem(source)
        if problem is not None:
            issues.append(doc.issue(where, f"containerPath {source!r} {problem}"))
    return issues


def _literal_container_path_problem(source: str) -> str | None:
    if not any(marker in source for marker in ("{{", "{%", "{#")):
        return container_path_problem(source)
    if ".." in _literal_components(source):
        return "must not contain '..'"
    if source.startswith(("{{", "{%")):
        return None  # only known when rendered: checked then
    if not source.startswith("/dev/"):
        return "must be an absolute path under /dev/ (e.g. /dev/ttyZIGBEE)"
    return None


# Subsystems a parent: grouping names, or that devices commonly sit below. Another name
# is allowed (sysfs has many) unless it is a letter or so from one of these: a typo.
KNOWN_SUBSYSTEMS = (
    "usb", "usb-serial", "usbmisc", "usbmon", "pci", "pci_bus", "pci_express", "scsi",
    "scsi_host", "scsi_disk", "scsi_generic", "platform", "i2c", "i2c-dev", "spi",
    "spidev", "hid", "hidraw", "input", "sound", "drm", "tty", "net", "block", "nvme",
    "nvme-subsystem", "nvmem", "mmc", "mmc_host", "virtio", "serio", "gpio", "gpiochip",
    "thunderbolt", "infiniband", "infiniband_verbs", "infiniband_mad", "acpi", "pnp",
    "cxl", "misc", "rtc", "tpm", "cpu", "memory", "rfkill", "leds", "power_supply",
    "thermal", "bluetooth", "ieee80211", "video4linux", "media", "dma", "iommu",
    "typec", "mei", "watchdog", "ptp", "pps", "dax", "nd", "vfio", "mdio_bus",
    "accel", "graphics", "firmware", "wmi", "usb_power_delivery",
)  # fmt: skip


def _parent_typo(doc: Document, path: KeyPath, group_by: object) -> list[ConfigIssue]:
    if not isinstance(group_by, str) or not group_by.startswith("parent:"):
        return []
    subsystem = group_by.removeprefix("parent:")
    if subsystem in KNOWN_SUBSYSTEMS:
        return []
    close = difflib.get_close_matches(subsystem, KNOWN_SUBSYSTEMS, n=1, cutoff=0.75)
    if not close:
        return []
    message = (
        f"subsystem {subsystem!r} looks like a misspelling of {close[0]!r}:"
        f" did you mean 'parent:{close[0]}'?"
    )
    return [doc.issue((*path, "groupBy"), message)]


def _group_by(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    group_by = resource.get("groupBy")
    if typo := _parent_typo(doc, path, group_by):
        return typo
    regex = group_by.get("pathRegex") if isinstance(group_by, dict) else None
    if not isinstance(regex, str):
        return []
    try:
        compile_regex(regex)
    except ValueError as exc:
        where = (*path, "groupBy", "pathRegex")
        return [doc.issue(where, f"pathRegex {regex!r} is not a valid regular expression: {exc}")]
    return []


def _sharing(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    if "freeIds" not in resource or resource.get("count") == UNBOUNDED:
        return []
    message = (
        f"freeIds applies only to count: {UNBOUNDED} (count is {resource.get('count', 1)!r}):"
        f" set count: {UNBOUNDED}, or remove freeIds"
    )
    return [doc.issue((*path, "freeIds"), message)]


def _health(
    doc: Document, path: KeyPath, resource: dict[str, Any], seconds: dict[KeyPath, float]
) -> list[ConfigIssue]:
    health = resource.get("health")
    if not isinstance(health, dict):
        return []
    here = (*path, "health")
    issues = _argv(doc, (*here, "exec"), health.get("exec"))
    issues += _sysfs_probe(doc, (*here, "sysfs"), health.get("sysfs"))
    interval, bad = _duration(doc, (*here, "interval"), health, DEFAULT_HEALTH_INTERVAL, seconds)
    issues += bad
    timeout, bad = _duration(doc, (*here, "timeout"), health, DEFAULT_HEALTH_TIMEOUT, seconds)
    issues += bad
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


def _sysfs_probe(doc: Document, path: KeyPath, probe: object) -> list[ConfigIssue]:
    attribute = probe.get("attribute") if isinstance(probe, dict) else None
    if not isinstance(attribute, str) or not attribute:
        return []
    parts = attribute.split("/")
    problem = None
    if attribute.startswith("/"):
        problem = "must be relative to the device's sysfs directory (e.g. ports/1/state)"
    elif ".." in parts or "." in parts or "" in parts:
        problem = "must not contain '..', '.' or empty components: it names a file below the device"
    elif any(part.startswith("**") for part in parts):
        problem = "must not use '**': each component matches one directory level"
    if problem is None:
        return []
    return [doc.issue((*path, "attribute"), f"attribute {attribute!r} {problem}")]


def _hooks(
    doc: Document, path: KeyPath, resource: dict[str, Any], seconds: dict[KeyPath, float]
) -> list[ConfigIssue]:
    hooks = resource.get("hooks")
    issues: list[ConfigIssue] = []
    for name in HOOK_NAMES:
        hook = hooks.get(name) if isinstance(hooks, dict) else None
        if isinstance(hook, dict):
            here = (*path, "hooks", name)
            issues += _argv(doc, (*here, "exec"), hook.get("exec"))
            issues += _duration(doc, (*here, "timeout"), hook, DEFAULT_HOOK_TIMEOUT, seconds)[1]
    return issues


def _argv(doc: Document, path: KeyPath, argv: object) -> list[ConfigIssue]:
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return []
    issues = [
        doc.issue(
            (*path, at),
            "exec items are passed as written, never rendered as templates: this {{ }} or"
            " {% %} would reach the command literally; read the unit from the GENERICDP_*"
            " variables instead (e.g. [/bin/sh, -c, 'echo \"$GENERICDP_DEVICE_PATHS\"'])",
        )
        for at, arg in enumerate(argv)
        if isinstance(arg, str) and ("{{" in arg or "{%" in arg)
    ]
    command = argv[0]
    if command.startswith("/") or (command and "/" not in command):
        return issues
    message = (
        f"command {command!r} must be an absolute path (e.g. /usr/bin/{command.rsplit('/', 1)[-1]})"
        " or a bare name looked up in PATH"
    )
    if not command:
        message = "the command (first item of exec) must not be empty"
    return [doc.issue((*path, 0), message), *issues]


def _duration(
    doc: Document,
    path: KeyPath,
    section: dict[str, Any],
    default: str,
    seconds: dict[KeyPath, float],
) -> tuple[float | None, list[ConfigIssue]]:
    """The duration at ``path`` (or its default) in seconds, also kept in ``seconds``."""
    key = str(path[-1])
    text = section.get(key, default)
    if not isinstance(text, str):
        return None, []  # the schema reports the type
    try:
        value = parse_duration(text)
    except ValueError as exc:
        return None, [doc.issue(path, str(exc))]
    minimum, why = _MINIMUM[key]
    if value < minimum:
        shown = f"{minimum:g}s" if minimum >= 1 else f"{minimum * 1000:g}ms"
        message = f"{key} {text} is shorter than {shown}: {why}"
        return None, [doc.issue(path, message)]
    if value > MAX_DURATION:
        shown = ellipsized(text, 41)
        return None, [doc.issue(path, f"{key} {shown} is longer than the maximum of 24h")]
    seconds[path] = value
    return value, []


def _mounts(doc: Document, path: KeyPath, resource: dict[str, Any]) -> list[ConfigIssue]:
    issues = []
    for index, mount in _entries(resource, "allocate", "mounts"):
        for key in ("hostPath", "containerPath"):
            value = mount.get(key)
            if not isinstance(value, str) or not value:
                continue
            where = (*path, "allocate", "mounts", index, key)
            # A value starting with a template is only known after rendering.
            if not value.startswith(("/", "{{", "{%")):
                issues.append(doc.issue(where, f"{key} {value!r} must be an absolute path"))
            elif ".." in (components := _literal_components(value)):
                message = f"{key} {value!r} must not contain '..': a mount names its path directly"
                issues.append(doc.issue(where, message))
            elif all(part in ("", ".") for part in components):
                issues.append(doc.issue(where, f"{key} {value!r} {_ROOT_MOUNT[key]}"))
    return issues


_ROOT_MOUNT = {
    "hostPath": "is the node's whole filesystem: mount the directory the device needs",
    "containerPath": "would cover the container's whole filesystem: name a directory in it",
}
_CLOSING = {"{": "}}", "%": "%}", "#": "#}"}


def _literal_components(source: str) -> list[str]:
    """The path components of a template's literal text, each templated part a NUL (what
    it renders to is checked at allocation). One pass: the source may be long."""
    parts: list[str] = []
    pos = 0
    start = source.find("{", pos)
    while start >= 0:
        closing = _CLOSING.get(source[start + 1 : start + 2])
        if closing is None:
            start = source.find("{", start + 1)
            continue
        end = source.find(closing, start + 2)
        if end < 0:
            break  # unterminated: the template compiler reports it
        parts += [source[pos:start], "\0"]
        pos = end + 2
        start = source.find("{", pos)
    parts.append(source[pos:])
    return "".join(parts).split("/")
