"""squat devices -> genericdp config v1 YAML: one squat device becomes one resource
``<domain>/<name>`` (its groups map to a ``groupBy``, see ``_grouping``). What genericdp
cannot say becomes a note (a YAML comment in the resource and a line on stderr), never
dropped silently.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field

from genericdp.config.names import validate_resource_name
from genericdp.convert.goglob import fnmatch_literal, go_bang_class, go_glob
from genericdp.convert.groupkeys import group_regex
from genericdp.convert.squat import (
    MOUNT,
    USB_PERMISSIONS,
    SquatDevice,
    SquatGroup,
    SquatPath,
    Where,
)
from genericdp.discovery.globs import has_magic

MAX_COUNT = 1000  # config v1's bound on count
_PLAIN = re.compile(r"[A-Za-z0-9/][A-Za-z0-9_./:-]*")
_TEMPLATE_START = ("{{", "{%", "{#")


@dataclass
class Note:
    """A difference between squat and the converted config."""

    where: Where | str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}" if str(self.where) else self.text


@dataclass
class Converted:
    """One resource's YAML lines and notes (empty lines: nothing genericdp can serve)."""

    name: str
    lines: list[str] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def comment(text: str) -> str:
    """``text`` safe inside a YAML comment: one line, no control characters (a file
    name or a key may hold a newline, which would end the comment and start YAML)."""
    return " ".join("".join(c if c.isprintable() else "?" for c in part) for part in text.split())


def quote(text: str) -> str:
    """A YAML scalar for ``text``: plain when safe, else a JSON (= YAML) double-quoted string."""
    if _PLAIN.fullmatch(text) and text.lower() not in ("true", "false", "null", "yes", "no"):
        return text
    return json.dumps(text)


def container_path_template(p: SquatPath) -> str | None:
    """squat's ``mountPath`` as a ``containerPath`` template; None when squat keeps the
    matched path, "" when it cannot be said (not a clean path under /dev/)."""
    mount = p.mount_path
    if not mount or mount == p.path:
        return None
    if mount.endswith("/") and mount.rstrip("/") == posixpath.dirname(p.path):
        return None
    parts = mount.rstrip("/").split("/")
    if not mount.startswith("/dev/") or ".." in parts or any(c in mount for c in "{}%#"):
        return ""
    if mount.endswith("/"):  # path.go: the matched path's name inside that directory
        return mount + "{{ device.path.split('/') | last }}"
    return mount


def convert_device(device: SquatDevice, domain: str) -> Converted:
    """The config v1 resource for one squat device (lines indented for ``resources:``)."""
    name = f"{domain}/{device.name}"
    out = Converted(name)
    problem = validate_resource_name(name)
    if problem is not None:
        out.notes.append(Note(device.where, f"{name!r} is not a valid resource name: {problem}"))
        return out
    builder = _Builder(out)
    for group in device.groups:
        builder.group(group)
    builder.finish(device)
    return out


@dataclass
class _Builder:
    out: Converted
    mounts: list[tuple[str, str, bool, str]] = field(default_factory=list)
    path_groups: list[tuple[SquatGroup, list[SquatPath]]] = field(default_factory=list)
    usb_groups: list[SquatGroup] = field(default_factory=list)
    counts: set[int] = field(default_factory=set)
    permissions: set[str] = field(default_factory=set)
    all_required: list[str] = field(default_factory=list)  # groups of several required paths

    def note(self, where: Where | str, text: str) -> None:
        self.out.notes.append(Note(where, text))

    def group(self, group: SquatGroup) -> None:
        for mount in (p for p in group.paths if p.type == MOUNT):
            self._mount(mount)
        devices = [p for p in group.paths if p.type != MOUNT and self._device_path_ok(p)]
        if group.usb:
            self.usb_groups.append(group)
            self.counts.add(group.count)
            self.permissions.add(USB_PERMISSIONS)
        elif devices:
            self.path_groups.append((group, devices))
            self.counts.add(group.count)
            self.permissions |= {"".join(sorted(p.permissions)) for p in devices}
            self._path_notes(group, devices)
        elif group.paths:
            self.note(
                group.where,
                "NOT CONVERTED: this group has no device node genericdp can match (a unit is"
                " device nodes; mounts alone are not a unit)",
            )

    def _device_path_ok(self, p: SquatPath) -> bool:
        pattern = go_glob(p.path)
        parts = pattern.split("/")
        if not pattern.startswith("/dev/") or ".." in parts or pattern.rstrip("/") == "/dev":
            self.note(
                p.where,
                f"NOT CONVERTED: device path {p.path!r}: genericdp matches device nodes under"
                " /dev/ only (absolute, no '..')",
            )
            return False
        if p.read_only:
            self.note(p.where, "readOnly applies to Mount paths only; squat ignores it here too")
        if go_bang_class(p.path):
            self.note(
                p.where,
                f"{p.path!r}: in Go (and so in squat) a class starting with '!' holds '!'"
                f" itself, not a negation: converted as squat reads it, {pattern!r}; Go and"
                " genericdp's negation is written [^...] in squat",
            )
        return True

    def _mount(self, p: SquatPath) -> None:
        host = p.path
        if has_magic(host) or not host.startswith("/") or ".." in host.split("/"):
            self.note(
                p.where,
                f"NOT CONVERTED: Mount path {host!r}: genericdp mounts are fixed absolute paths"
                " (allocate.mounts), not globs found per unit",
            )
            return
        target = p.mount_path or host
        if target.endswith("/"):  # path.go: a trailing "/" adds the name
            target += posixpath.basename(host)
        if not target.startswith("/") or any(
            t in s for s in (host, target) for t in _TEMPLATE_START
        ):
            self.note(p.where, f"NOT CONVERTED: Mount path {host!r} -> {target!r}")
            return
        self.mounts.append((host, target, p.read_only, str(p.where)))
        self.note(
            p.where,
            f"the Mount {host} is given with every allocation of this resource (allocate.mounts);"
            " squat gives it only with units of its own group, and only while it exists",
        )

    def _path_notes(self, group: SquatGroup, devices: list[SquatPath]) -> None:
        for p in devices:
            if container_path_template(p) == "":  # None: squat's path; else a containerPath
                self.note(
                    p.where,
                    f"NOT CONVERTED: mountPath {p.mount_path!r}: a container path is absolute,"
                    " under /dev/, without '..' or template braces; the node keeps its path",
                )
            if p.limit_given and len(devices) == 1:
                self.note(p.where, "limit has no effect on a group of one path (in squat too)")
        if len(devices) > 1:
            if any(has_magic(p.path) for p in devices):
                self.note(
                    group.where,
                    "NOT EQUIVALENT: squat pairs the i-th match of each path of this group"
                    " (sorted; `limit` lets a path repeat), making one unit per i; here the"
                    " nodes are grouped as groupBy says",
                )
            if any(not p.optional for p in devices):
                self.all_required.append(group.where.path)

    def finish(self, device: SquatDevice) -> None:
        if self.all_required:
            self.note(
                device.where,
                f"squat lists the unit of {', '.join(self.all_required)} only when every"
                " non-optional path of the group exists; genericdp lists it with the nodes"
                " that exist",
            )
        matchers, group_by = self._matchers_and_grouping()
        if not matchers:
            self.note(
                device.where, f"NOT CONVERTED: {self.out.name} has nothing genericdp can serve"
            )
            return
        lines = self.out.lines
        lines += [f"- name: {quote(self.out.name)}  # from {comment(str(device.where))}"]
        lines += ["  match:", *matchers, *group_by]
        count = max(self.counts) if self.counts else 1
        if len(self.counts) > 1:
            self.note(
                device.where,
                f"squat's groups have different counts {sorted(self.counts)}; genericdp has one"
                f" count per resource: {min(count, MAX_COUNT)}",
            )
        if count > MAX_COUNT:
            self.note(device.where, f"count {count} is above genericdp's limit; {MAX_COUNT} used")
            count = MAX_COUNT
        if count > 1:
            lines.append(
                f"  count: {count}  # as squat's count: {count} containers share each unit"
                " (IDs <unit>::<i>)"
            )
        self._permissions(device)
        if self.mounts:
            lines += ["  allocate:", "    mounts:"]
            for host, target, read_only, where in self.mounts:
                ro = ", readOnly: true" if read_only else ""
                lines.append(
                    f"      - {{hostPath: {quote(host)}, containerPath: {quote(target)}{ro}}}"
                    f"  # {comment(where)}"
                )
        lines.append("  preferredAllocation: none  # squat has no preference")

    def _permissions(self, device: SquatDevice) -> None:
        letters = set("".join(self.permissions))
        text = "".join(c for c in "rwm" if c in letters) or "rw"
        if len(self.permissions) > 1:
            self.note(
                device.where,
                f"squat's paths have different permissions ({', '.join(sorted(self.permissions))});"
                f" genericdp has one per resource: all of them together, {text}",
            )
        why = "squat's default for device paths is mrw" if "m" in text else "as in squat"
        self.out.lines.append(f"  permissions: {text}  # {why}")

    def _matchers_and_grouping(self) -> tuple[list[str], list[str]]:
        lines: list[str] = []
        single_literal = (
            len(self.path_groups) == 1
            and not self.usb_groups
            and len(self.path_groups[0][1]) == 1
            and not has_magic(self.path_groups[0][1][0].path)
        )
        seen: set[str] = set()
        for _group, devices in self.path_groups:
            for p in devices:
                pattern = go_glob(p.path)
                if pattern in seen:
                    continue
                seen.add(pattern)
                lines.append(f"    - glob: {quote(pattern)}  # {comment(str(p.where))}")
                template = container_path_template(p)
                if template:
                    lines.append(f"      containerPath: {json.dumps(template)}  # mountPath")
                if single_literal:
                    lines.append(
                        f"    - glob: {quote(pattern + '/**')}  # squat hands out a directory"
                        " whole: every node below it, one unit"
                    )
        for usb in (usb for group in self.usb_groups for usb in group.usb):
            attributes = {"idVendor": f"{usb.vendor:04x}", "idProduct": f"{usb.product:04x}"}
            if usb.serial:
                attributes["serial"] = fnmatch_literal(usb.serial)
            shown = ", ".join(f"{k}: {json.dumps(v)}" for k, v in attributes.items())
            where = comment(str(usb.where))
            lines.append(f"    - udev: {{subsystem: usb, attributes: {{{shown}}}}}  # {where}")
        if not lines:
            return [], []
        return lines, self._grouping(single_literal)

    def _grouping(self, single_literal: bool) -> list[str]:
        groups = len(self.path_groups) + len(self.usb_groups)
        one_glob = len(self.path_groups) == 1 and len(self.path_groups[0][1]) == 1
        if single_literal or (groups == 1 and not one_glob):
            if self.usb_groups:
                self.note(
                    self.usb_groups[0].where,
                    "squat makes one unit of every device this group matches (two identical"
                    " sticks are one unit of two nodes); so does groupBy: all. Use"
                    " groupBy: node to hand them out one by one",
                )
            return ["  groupBy: all  # squat: one group, one unit"]
        if all(len(devices) == 1 for _g, devices in self.path_groups):
            if len(self.usb_groups) > 1 or (self.usb_groups and self.path_groups):
                self.note(
                    self.usb_groups[0].where,
                    "squat makes one unit per USB group of every device it matches; here"
                    " each device is a unit: the same while each group matches one device",
                )
            return ["  groupBy: node  # squat: each match of a one-path group is a unit"]
        if not self.usb_groups and all(
            not has_magic(p.path) for _g, devices in self.path_groups for p in devices
        ):
            regex = group_regex(
                [[go_glob(p.path) for p in devices] for _g, devices in self.path_groups]
            )
            if regex is not None:
                return [
                    f"  groupBy: {{pathRegex: {json.dumps(regex)}}}  # one unit per squat group",
                ]
        self.note(
            self.path_groups[0][0].where,
            "NOT EQUIVALENT: genericdp cannot group these nodes as squat's groups do; each"
            " node is a unit here. Check `genericdp discover` and adjust groupBy",
        )
        return ["  groupBy: node"]
