"""The ``glob`` matcher: host path patterns evaluated inside the dev root.

We walk the tree ourselves instead of using ``glob.glob``: it would follow
directory symlinks out of the root (``/dev/fd`` points into ``/proc``) and
read absolute link targets against the real ``/``. Here ``**`` never enters
a symlinked directory, and links are resolved with the dev root as ``/dev``.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

_MAGIC = frozenset("*?[")
_MAX_LINK_HOPS = 40  # the kernel's own limit (ELOOP)


def has_magic(part: str) -> bool:
    return any(char in _MAGIC for char in part)


def expand(dev_root: Path, pattern: str) -> list[str]:
    """Paths (relative to ``dev_root``) matching the host glob ``pattern``, sorted, no dirs."""
    relative = pattern.removeprefix("/dev/")
    if relative == pattern or not relative.strip("/"):
        log.warning("glob %s is not under /dev; it matches nothing", pattern)
        return []
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts:
        log.warning("glob %s climbs out of /dev with '..'; it matches nothing", pattern)
        return []
    matches = set(_expand(dev_root, (), parts))
    return sorted(m for m in matches if m and not _is_dir(dev_root / m))


def _expand(root: Path, done: tuple[str, ...], parts: list[str]) -> Iterator[str]:
    if not parts:
        yield "/".join(done)
        return
    head, rest = parts[0], parts[1:]
    here = root.joinpath(*done)
    if head == "**":
        yield from _expand(root, done, rest)  # ** matches zero directories too
        for name, is_dir in _entries(here):
            if is_dir:
                yield from _expand(root, (*done, name), parts)
            elif not rest:
                yield "/".join((*done, name))
        return
    if not has_magic(head):
        if os.path.lexists(here / head) and (not rest or _is_dir(here / head, follow=False)):
            yield from _expand(root, (*done, head), rest)
        return
    for name, is_dir in _entries(here):
        if fnmatch.fnmatchcase(name, head) and (is_dir or not rest):
            yield from _expand(root, (*done, name), rest)


def _entries(directory: Path) -> list[tuple[str, bool]]:
    """(name, is a real directory) for each entry; symlinked directories count as files."""
    try:
        with os.scandir(directory) as scan:
            return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in scan]
    except OSError:
        return []


def _is_dir(path: Path, *, follow: bool = True) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path, follow_symlinks=follow).st_mode)
    except OSError:
        return False


def resolve_in_root(dev_root: Path, relative: str) -> str | None:
    """The real node behind ``<dev_root>/<relative>``, relative to the root, following
    symlinks as if ``dev_root`` were ``/dev``; None for a link that leaves the root,
    dangles or loops."""
    pending = relative.split("/")
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        candidate = dev_root.joinpath(*resolved, part)
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link (or gone): take the name as it is
            resolved.append(part)
            continue
        hops += 1
        if hops > _MAX_LINK_HOPS:
            return None
        if target.startswith("/"):
            if target != "/dev" and not target.startswith("/dev/"):
                return None
            resolved = []
            target = target.removeprefix("/dev")
        pending = target.split("/") + pending
    if not resolved or not os.path.lexists(dev_root.joinpath(*resolved)):
        return None
    return "/".join(resolved)
