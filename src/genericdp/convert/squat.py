"""squat/generic-device-plugin's config, read as its own code reads it.

The format (squat/generic-device-plugin at 179b1fe, ``config.go``,
``main.go``, ``deviceplugin/{generic,path,usb}.go``)::

    --device '{"name": "serial", "groups": [{"paths": [{"path": "/dev/ttyUSB*"}]}]}'
    --domain squat.ai              (default; resource = <domain>/<name>)
    --config FILE                  (YAML/JSON: ``devices:`` or ``device:``, ``domain:``)

Keys match case-insensitively (as Go's encoding/json and mapstructure do);
unknown keys are ignored by squat, and we report them.

Everything is parsed with genericdp's own YAML reader, so a flag value or a
file gets a genericdp config's limits and ``source:line:column`` messages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from genericdp.config.yamlpos import Document, KeyPath, describe, parse_yaml
from genericdp.convert.goglob import go_pattern_problem
from genericdp.errors import ConfigIssue
from genericdp.k8snames import is_dns1123_subdomain

DEFAULT_DOMAIN = "squat.ai"  # config.go defaultDomain
DEFAULT_PERMISSIONS = "mrw"  # path.go Default(): device paths only
USB_PERMISSIONS = "rw"  # usb.go discoverUSB
DEVICE, MOUNT = "Device", "Mount"
_DEVICE_TYPE = re.compile(r"[a-z0-9][-a-z0-9]*[a-z0-9]")  # main.go deviceTypeFmt
# YAML 1.1 booleans, as ghodss/yaml (yaml.v2) reads a --device value.
_YAML11_BOOL = {
    **dict.fromkeys(("y", "yes", "on", "true"), True),
    **dict.fromkeys(("n", "no", "off", "false"), False),
}
# Where squat's daemon flags live in genericdp: settings (`genericdp serve --help`).
DAEMON_SETTINGS = {
    "listen": "squat's metrics and health address; genericdp's is GENERICDP_METRICS_ADDRESS"
    " (--metrics-address; /metrics, /healthz, /readyz: squat's /health is /healthz)",
    "log-level": "genericdp's is GENERICDP_LOG_LEVEL (--log-level: debug, info, warning, error)",
    "plugin-directory": "genericdp's is GENERICDP_PLUGIN_DIR (--plugin-dir)",
}


@dataclass(frozen=True)
class Where:
    source: str  # "--device #2" or a file name
    path: str  # "groups[0].paths[1]"
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        at = self.source
        if self.line:
            at += f":{self.line}:{self.column}" if self.column else f":{self.line}"
        return f"{at}: {self.path}" if self.path else at


@dataclass(frozen=True)
class SquatPath:
    path: str
    mount_path: str
    permissions: str
    read_only: bool
    type: str
    limit_given: bool
    optional: bool
    where: Where


@dataclass(frozen=True)
class SquatUsb:
    vendor: int
    product: int
    serial: str
    where: Where


@dataclass(frozen=True)
class SquatGroup:
    paths: tuple[SquatPath, ...]
    usb: tuple[SquatUsb, ...]
    count: int  # defaulted: 1
    where: Where


@dataclass(frozen=True)
class SquatDevice:
    name: str  # trimmed, without the domain
    groups: tuple[SquatGroup, ...]
    where: Where


@dataclass
class SquatConfig:
    """What squat would run with, and what it would silently ignore."""

    domain: str
    devices: list[SquatDevice] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # "where: what", for notes


@dataclass
class _Reader:
    """Reads one document's values, collecting issues instead of stopping at the first."""

    doc: Document
    from_flag: bool  # ghodss/yaml (YAML 1.1, then JSON) rather than viper + mapstructure
    issues: list[ConfigIssue] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def fail(self, path: KeyPath, message: str) -> None:
        self.issues.append(self.doc.issue(path, message))

    def where(self, path: KeyPath, *, at_key: bool = False) -> Where:
        pos = self.doc.key_pos(path) if at_key else self.doc.value_pos(path)
        line, column = (pos.line, pos.column) if pos is not None else (None, None)
        return Where(self.doc.file, _format(path), line, column)

    def fields(self, value: Any, path: KeyPath, known: Sequence[str]) -> dict[str, KeyPath]:
        """Each known key found in mapping ``value`` -> its path; Go matches keys
        case-insensitively (an exact match first); others are ignored, as by squat."""
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping, not {describe(value)}")
            return {}
        found: dict[str, KeyPath] = {}
        for key in value:
            exact = key if key in known else None
            name = exact or next((k for k in known if k.lower() == key.lower()), None)
            if name is None:
                where = self.where((*path, key), at_key=True)
                self.ignored.append(
                    f"{where}: unknown key {key!r}, which squat ignores"
                    f" (it knows {', '.join(known)})"
                )
            elif name not in found or exact:
                found[name] = (*path, key)
        return found

    def value(self, path: KeyPath) -> Any:
        data: Any = self.doc.data
        for key in path:
            data = data[key]
        return data

    # string, boolean, unsigned: a key that is absent (None) or null gives the default.
    def string(self, path: KeyPath | None, default: str = "") -> str:
        if path is None or (value := self.value(path)) is None:
            return default
        if not isinstance(value, str):
            self.fail(path, f"must be a string, not {describe(value)}: quote it")
            return default
        return value

    def boolean(self, path: KeyPath | None) -> bool:
        if path is None or (value := self.value(path)) is None:
            return False
        if isinstance(value, bool):
            return value
        if self.from_flag and isinstance(value, str) and value.lower() in _YAML11_BOOL:
            return _YAML11_BOOL[value.lower()]  # YAML 1.1, as squat reads a flag
        self.fail(path, f"must be true or false, not {describe(value)}")
        return False

    def unsigned(self, path: KeyPath | None) -> int:
        if path is None or (value := self.value(path)) is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(path, f"must be a whole number of at least 0, not {describe(value)}")
            return 0
        return value

    def usb_id(self, path: KeyPath) -> int | None:
        """A USB ID as squat reads it (usb.go): a string is hexadecimal; a bare number
        depends on how squat was given it, and is reported."""
        value = self.value(path)
        token = self.doc.token(path)
        if isinstance(value, str):
            text = value.strip()
            if re.fullmatch(r"[0-9A-Fa-f]{1,4}", text):
                return int(text, 16)
            self.fail(path, f"{value!r} is not a USB ID: squat wants 1 to 4 hexadecimal digits")
            return None
        if isinstance(value, int) and not isinstance(value, bool) and token:
            number = _go_int(token)
            if number is not None:
                # A flag goes YAML -> JSON -> UnmarshalJSON, which reads the digits of the
                # JSON number as hexadecimal; a config file goes through mapstructure,
                # which keeps the number's value.
                read = int(str(number), 16) if self.from_flag else number
                if read <= 0xFFFF:  # noqa: PLR2004 -- USB IDs are 16 bits
                    how = "a --device value" if self.from_flag else "a config file"
                    self.ignored.append(
                        f"{self.where(path)}: the bare number {token} in {how} is USB ID"
                        f" {read:04x} to squat (write it quoted, as a string)"
                    )
                    return read
        self.fail(path, f"must be a USB ID as a quoted hexadecimal string, not {describe(value)}")
        return None


def _go_int(token: str) -> int | None:
    """A plain YAML scalar as Go's yaml parsers read an integer (base prefixes, 0777 octal)."""
    text = token.replace("_", "")
    try:
        if re.fullmatch(r"0[0-7]+", text):
            return int(text, 8)
        return int(text, 0) if text.isascii() else None
    except ValueError:
        return None


def _format(path: KeyPath) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def parse_device_flag(
    text: str, index: int
) -> tuple[SquatDevice | None, list[ConfigIssue], list[str]]:
    """One ``--device`` value (JSON or YAML, as squat reads it); ``index`` is 1-based."""
    doc, issues = parse_yaml(text, f"--device #{index}")
    if doc is None or issues:
        return None, issues, []
    reader = _Reader(doc, from_flag=True)
    return _device(reader, ()), reader.issues, reader.ignored


def parse_config_file(text: str, file: str) -> tuple[SquatConfig | None, list[ConfigIssue]]:
    """squat's ``--config`` file: ``devices``/``device`` and ``domain`` at the top."""
    doc, issues = parse_yaml(text, file)
    if doc is None or issues:
        return None, issues
    if not isinstance(doc.data, dict):
        what = "only comments" if doc.data is None else describe(doc.data)
        return None, [ConfigIssue(file, 1, 1, "", f"must be a mapping with devices, not {what}")]
    reader = _Reader(doc, from_flag=False)
    known = ("devices", "device", "domain", *DAEMON_SETTINGS)
    found = reader.fields(doc.data, (), known)
    config = SquatConfig(domain=reader.string(found.get("domain"), DEFAULT_DOMAIN).strip())
    for key, setting in DAEMON_SETTINGS.items():
        if key in found:
            reader.ignored.append(f"{reader.where(found[key])}: {setting}")
    # viper moves an alias's value onto its key: `devices` wins over `device`.
    key_path = found.get("devices") or found.get("device")
    if "devices" in found and "device" in found:
        reader.ignored.append(f"{reader.where(found['device'])}: `devices` is also set and wins")
    if key_path is not None:
        items = reader.value(key_path)
        if not isinstance(items, list):
            reader.fail(key_path, f"must be a list of devices, not {describe(items)}")
        else:
            read = (_device(reader, (*key_path, i)) for i in range(len(items)))
            config.devices = [device for device in read if device is not None]
    config.ignored = reader.ignored
    return config, reader.issues


def check_domain(domain: str, source: str) -> ConfigIssue | None:
    """main.go: the domain must be a DNS-1123 subdomain."""
    if is_dns1123_subdomain(domain):
        return None
    return ConfigIssue(source, None, None, "domain", f"{domain!r} is not a DNS subdomain")


def _device(reader: _Reader, path: KeyPath) -> SquatDevice | None:
    found = reader.fields(reader.value(path), path, ("name", "groups"))
    if not isinstance(reader.value(path), dict):
        return None
    name = reader.string(found.get("name")).strip()
    if not _DEVICE_TYPE.fullmatch(name):
        at = found.get("name", path)
        reader.fail(
            at,
            f"name {name!r} must match {_DEVICE_TYPE.pattern} (squat refuses it:"
            " lower-case letters, digits and '-', at least two characters)",
        )
    read = [_group(reader, p) for p in _items(reader, found.get("groups"), " of groups")]
    groups = tuple(group for group in read if group is not None)
    if not groups:
        reader.ignored.append(f"{reader.where(path)}: no groups: squat serves no device for it")
    return SquatDevice(name, groups, reader.where(path))


def _group(reader: _Reader, path: KeyPath) -> SquatGroup | None:
    found = reader.fields(reader.value(path), path, ("paths", "usb", "count"))
    if not isinstance(reader.value(path), dict):
        return None
    count = reader.unsigned(found.get("count"))
    paths = [_path(reader, p) for p in _items(reader, found.get("paths"))]
    usb = [_usb(reader, p) for p in _items(reader, found.get("usb"))]
    if paths and usb:
        reader.fail(path, "a group cannot have both paths and usb (squat refuses it)")
    return SquatGroup(
        tuple(p for p in paths if p is not None),
        tuple(u for u in usb if u is not None),
        count or 1,
        reader.where(path),
    )


def _items(reader: _Reader, path: KeyPath | None, what: str = "") -> list[KeyPath]:
    if path is None or (value := reader.value(path)) is None:
        return []
    if not isinstance(value, list):
        reader.fail(path, f"must be a list{what}, not {describe(value)}")
        return []
    return [(*path, i) for i in range(len(value))]


_PATH_KEYS = ("path", "mountPath", "permissions", "readOnly", "type", "limit", "optional")


def _path(reader: _Reader, path: KeyPath) -> SquatPath | None:
    found = reader.fields(reader.value(path), path, _PATH_KEYS)
    if not isinstance(reader.value(path), dict):
        return None
    host = _host_path(reader, found.get("path"), path)
    if host is None:
        return None
    kind = reader.string(found.get("type"))
    if kind not in ("", DEVICE, MOUNT):
        # path.go: neither case of its switch: squat gives the container nothing for it.
        reader.fail(found["type"], f"type {kind!r} must be {DEVICE} or {MOUNT} (exactly so)")
        return None
    kind = kind or DEVICE
    permissions = reader.string(found.get("permissions"))
    if kind == DEVICE:
        permissions = permissions or DEFAULT_PERMISSIONS
        if set(permissions) - set("rwm") or len(set(permissions)) != len(permissions):
            reader.fail(
                found["permissions"], f"permissions {permissions!r}: use r, w and m once each"
            )
            return None
    limit = reader.unsigned(found.get("limit"))
    return SquatPath(
        path=host,
        mount_path=reader.string(found.get("mountPath")).strip(),
        permissions=permissions,
        read_only=reader.boolean(found.get("readOnly")),
        type=kind,
        limit_given=limit > 1,
        optional=reader.boolean(found.get("optional")),
        where=reader.where(path),
    )


def _host_path(reader: _Reader, key: KeyPath | None, path: KeyPath) -> str | None:
    """A path's ``path``: a string, not empty, a glob Go accepts (trimmed, as main.go does)."""
    if key is not None and not isinstance(reader.value(key), str | None):
        reader.string(key)  # says what it is instead
        return None
    host = reader.string(key).strip()
    if not host:
        reader.fail(key or path, "path is missing or empty")
        return None
    bad = go_pattern_problem(host)
    if bad is not None:
        reader.fail(key or path, f"{host!r} is not a valid Go glob ({bad}); squat fails on it")
        return None
    return host


def _usb(reader: _Reader, path: KeyPath) -> SquatUsb | None:
    found = reader.fields(reader.value(path), path, ("vendor", "product", "serial"))
    if not isinstance(reader.value(path), dict):
        return None
    ids: list[int | None] = []
    for key in ("vendor", "product"):
        if key not in found or reader.value(found[key]) in (None, ""):
            # usb.go leaves it 0: squat would look for ID 0000, which no device has.
            reader.fail(found.get(key, path), f"{key} is missing (squat would match nothing)")
            ids.append(None)
        else:
            ids.append(reader.usb_id(found[key]))
    serial = reader.string(found.get("serial"))
    vendor, product = ids
    if vendor is None or product is None:
        return None
    return SquatUsb(vendor, product, serial, reader.where(path))
