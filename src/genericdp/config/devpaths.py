"""Rules for device node paths a config names or renders: globs under /dev, and node
container paths, checked again at every render (a device's strings are never trusted)."""

from __future__ import annotations

import re

MAX_PATH_BYTES = 4096  # PATH_MAX
MAX_NAME_BYTES = 255  # NAME_MAX: one component
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def glob_problem(pattern: str, *, what: str = "glob") -> str | None:
    """Why ``pattern`` is not an absolute host path glob under /dev, or None."""
    if not pattern.startswith("/"):
        relative = pattern.lstrip("./")
        example = "/" + relative if relative.startswith("dev/") else "/dev/" + relative
        return f"{what} {pattern!r} must be an absolute path under /dev/, e.g. {example}"
    if not pattern.startswith("/dev/"):
        return f"{what} {pattern!r} must be under /dev/: only device nodes are matched"
    if ".." in pattern.split("/"):
        return f"{what} {pattern!r} must not contain '..'"
    unclosed = next((c for c in pattern.split("/") if _unclosed_bracket(c)), None)
    if unclosed is not None:
        return (
            f"{what} {pattern!r} has a '[' that is never closed in {unclosed!r}: close it"
            " ('[0-9]'), or write '[[]' for a literal '['"
        )
    if not pattern.removeprefix("/dev/").strip("/."):
        return (
            f"{what} {pattern!r} names the /dev directory itself, which is not a device:"
            " add a pattern, e.g. /dev/ttyUSB*"
        )
    return None


def _unclosed_bracket(component: str) -> bool:
    """Whether a ``[`` opens a set with no ``]`` after it (fnmatch would then
    match the ``[`` literally, which is never what was meant)."""
    at = component.find("[")
    while at != -1:
        end = at + 1
        if end < len(component) and component[end] == "!":
            end += 1
        if end < len(component) and component[end] == "]":
            end += 1  # a ']' first in the set is part of it
        close = component.find("]", end)
        if close == -1:
            return True
        at = component.find("[", close + 1)
    return False


def container_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be where a container sees a device node, or None."""
    encoded = path.encode(errors="surrogateescape")
    parts = path.split("/")[1:]
    rules = (
        (len(encoded) > MAX_PATH_BYTES, f"is {len(encoded)} bytes long; at most {MAX_PATH_BYTES}"),
        (bool(_CONTROL.search(path)), "contains control characters"),
        (not path.startswith("/"), "is not an absolute path"),
        (".." in parts, "contains a '..' component"),
        (
            not path.startswith("/dev/") or not path.removeprefix("/dev/"),
            "is not under /dev/ (device nodes are seen under /dev in a container)",
        ),
        (any(p in ("", ".") for p in parts), "is not a clean path (empty or '.' components)"),
        (
            any(len(p.encode(errors="surrogateescape")) > MAX_NAME_BYTES for p in parts),
            f"has a component over {MAX_NAME_BYTES} bytes",
        ),
    )
    return next((message for broken, message in rules if broken), None)
