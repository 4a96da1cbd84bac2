"""The kubelet's plugin registry directory as its plugin watcher sees it (pluginwatcher)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
from inotify_simple import flags

# What the plugin watcher reacts to: a socket (or a directory) created,
# removed or moved in or out; fsnotify hands the kubelet the same.
WATCH = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM | flags.ONLYDIR


def plugin_channel(endpoint: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"unix:{endpoint}")


def sockets(directory: Path) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Unix sockets under ``directory`` (recursively) and its subdirectories, none
    starting with ``.``."""
    found: dict[str, tuple[int, int]] = {}
    directories: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        directories.extend(os.path.join(root, d) for d in dirs)  # noqa: PTH118 -- os.walk gives strings
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(root, name)  # noqa: PTH118 -- os.walk gives strings
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(info.st_mode):
                found[path] = (info.st_ino, info.st_ctime_ns)
    return found, directories
