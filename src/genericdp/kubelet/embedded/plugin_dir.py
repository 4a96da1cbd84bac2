"""The kubelet's device-plugin directory housekeeping."""

from __future__ import annotations

import logging
import socket
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def leave_dead_socket(path: Path) -> None:
    """Leave a socket file nobody listens on, as a killed process leaves its listener's."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))


def remove_sockets(plugin_dir: Path) -> list[Path]:
    """Delete every unix socket in ``plugin_dir``, as a starting kubelet: regular files and
    directories stay. Plugins take their socket vanishing as the sign to register again."""
    removed: list[Path] = []
    for entry in sorted(plugin_dir.iterdir()):
        try:
            mode = entry.stat().st_mode  # follows symlinks, like the kubelet's os.Stat
        except OSError as exc:
            log.warning("cannot stat %s: %s", entry, exc)
            continue
        if stat.S_ISSOCK(mode):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed
