"""What a rendered allocation may contain: paths confined to their template, clean device paths.

Templates see strings whoever made the device wrote: a USB product string
``../../../../etc`` rendered into ``hostPath: /run/foo/{{ ... }}`` must not
mount the host's ``/etc``. An allocation with a path that breaks a rule is
refused, never repaired (the container would get what the config author did
not write). A mount path stays under its template's literal prefix
(``/dev/tty{{ n }}``: a ``/dev/tty*`` name). Paths are checked as text:
symlinks on the host are the runtime's business when it mounts them.
"""

from __future__ import annotations

import functools
import re

from genericdp.errors import UnsafeAllocationError, shown

MAX_PATH_BYTES = 4096  # PATH_MAX
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MARKERS = ("{{", "{%", "{#")


def literal_prefix(source: str) -> str:
    """The text of a template before its first Jinja marker (all of it if it has none),
    without the whitespace a ``{{-``/``{%-`` marker strips."""
    cut = min((i for i in (source.find(m) for m in _MARKERS) if i >= 0), default=len(source))
    prefix = source[:cut]
    return prefix.rstrip() if source[cut + 2 : cut + 3] == "-" else prefix


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def normalised(path: str) -> str:
    """``path`` with ``//`` and ``.`` components removed (``..`` is refused before this)."""
    return "/" + "/".join(_components(path))


def confine_path(rendered: str, template: str, *, what: str) -> str:
    """The normalised ``rendered`` path, or UnsafeAllocationError saying why it is refused."""
    if len(rendered.encode(errors="surrogateescape")) > MAX_PATH_BYTES:
        raise UnsafeAllocationError(
            f"{what} rendered a path of {len(rendered)} characters, over {MAX_PATH_BYTES}"
        )
    if _CONTROL.search(rendered):
        raise UnsafeAllocationError(
            f"{what} rendered {shown(rendered)}, which contains control characters"
        )
    if not rendered.startswith("/"):
        raise UnsafeAllocationError(
            f"{what} rendered {shown(rendered)}, which is not an absolute path"
        )
    if ".." in rendered.split("/"):
        raise UnsafeAllocationError(
            f"{what} rendered {shown(rendered)}, which contains a '..' component"
        )
    path = normalised(rendered)
    prefix = literal_prefix(template)
    if prefix != template and not _within(path, prefix):
        raise UnsafeAllocationError(
            f"{what} rendered {shown(rendered)}, which leaves the template's fixed"
            f" prefix {prefix!r}"
        )
    return path


def _within(path: str, prefix: str) -> bool:
    """Whether normalised ``path`` keeps ``prefix``: its whole directories, then its
    partial last component (``/dev/tty`` of ``/dev/tty{{ n }}``) as the start of the next."""
    head, _, tail = prefix.rpartition("/")
    directories, parts = _components(head), _components(path)
    if parts[: len(directories)] != directories:
        return False
    if not tail or tail == ".":
        return True
    rest = parts[len(directories) :]
    return bool(rest) and rest[0].startswith(tail)


@functools.lru_cache(maxsize=4096)
def clean_device_path(path: str) -> bool:
    """Whether a device node path (host or container) is normalised, absolute and
    under ``/dev``: a pure function of the text, remembered, since every Allocate
    checks the same few device paths."""
    return not (
        _CONTROL.search(path)
        or not path.startswith("/dev/")
        or normalised(path) != path
        or ".." in path.split("/")
        or len(path.encode(errors="surrogateescape")) > MAX_PATH_BYTES
    )
