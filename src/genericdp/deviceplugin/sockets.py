"""Our sockets in the kubelet's device-plugin directory: their names, identity, leftovers.

A fresh name per start never collides with what the kubelet knows; a socket
is known by its inode (``unixgrpc.file_id``), not its path.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import socket as socketlib
from pathlib import Path

from genericdp.errors import KubeletError
from genericdp.unixgrpc import MAX_UNIX_PATH_BYTES

log = logging.getLogger(__name__)

SOCKET_PREFIX = "gdp-"
_MAX_SLUG = 40


def socket_name(resource: str, token: str | None = None, *, max_bytes: int | None = None) -> str:
    """``gdp-<slug>-<token>.sock``: unique per start, recognisably ours. Past ``max_bytes``
    the slug is cut and a hash of the resource name keeps it unique; KubeletError
    when not even ``gdp-<hash>-<token>.sock`` fits."""
    token = token or secrets.token_hex(4)
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", resource).strip("-.") or "resource"
    digest = hashlib.sha256(resource.encode()).hexdigest()[:8]
    room = _MAX_SLUG if max_bytes is None else min(_MAX_SLUG, max_bytes - _fixed_bytes(token))
    if room < len(digest):
        raise KubeletError(
            f"a socket name for {resource} needs {_fixed_bytes(token) + len(digest)} bytes"
            f" but only {max_bytes} are left"
        )
    if len(slug) > room:
        keep = room - len(digest) - 1
        slug = f"{slug[:keep].rstrip('-.')}-{digest}" if keep > 0 else digest
    return f"{SOCKET_PREFIX}{slug}-{token}.sock"


def _fixed_bytes(token: str) -> int:
    return len(f"{SOCKET_PREFIX}-{token}.sock")


def socket_path(plugin_dir: Path, resource: str, token: str | None = None) -> tuple[Path, bool]:
    """Where to serve ``resource`` in ``plugin_dir``, and whether the name was shortened
    (a socket path is at most 107 bytes); KubeletError when even the shortest does not fit."""
    directory = plugin_dir.absolute()
    left = MAX_UNIX_PATH_BYTES - len(str(directory).encode()) - 1
    usual = socket_name(resource, token)
    if len(usual.encode()) <= left:
        return directory / usual, False
    try:
        name = socket_name(resource, usual.rsplit("-", 1)[1].removesuffix(".sock"), max_bytes=left)
    except KubeletError:
        raise KubeletError(
            f"the device-plugin directory {directory} is too long for a unix socket in it"
            f" (paths are limited to {MAX_UNIX_PATH_BYTES} bytes): use a shorter --plugin-dir"
        ) from None
    return directory / name, True


def remove_stale_sockets(plugin_dir: Path) -> list[Path]:
    """Remove our sockets that nothing listens on (left by a killed predecessor); one
    that accepts a connection is a live process's (the old pod of a rolling update)."""
    removed: list[Path] = []
    for path in sorted(plugin_dir.glob(f"{SOCKET_PREFIX}*.sock")):
        with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)
                removed.append(path)
            except OSError as exc:
                log.warning("cannot check socket %s, leaving it: %s", path, exc)
    return removed
