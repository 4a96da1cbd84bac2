"""The node's labels as an NFD feature file, for clusters that run NFD's workers only.

NFD's local source reads every file of ``features.d``, one ``key=value`` per line,
ignoring names that start with a dot, as ``atomicfile``'s temporary files do: it reads
the old file or the new, never half. No labels removes the file (NFD removes the
labels it gave). Anything but a regular file at the path (a FIFO would block its
reader for ever) is replaced, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from genericdp.atomicfile import write_atomically

log = logging.getLogger(__name__)

MAX_READ = 1 << 20  # what ``current`` reads of an existing file: far more than 64 labels a resource


class FeaturesFile:
    """The feature file at ``path`` (its directory is NFD's ``features.d``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def what(self) -> str:
        return f"feature file {self.path}"

    async def current(self) -> Mapping[str, str] | None:
        """The labels the file holds (none when it is missing); None when it is unreadable."""
        return await asyncio.to_thread(self._read)

    async def publish(self, labels: Mapping[str, str]) -> None:
        await asyncio.to_thread(self._write, dict(labels))

    def _read(self) -> dict[str, str] | None:
        try:
            # Not blocking: opening a FIFO for reading waits for a writer, for ever.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError:
            return None  # whatever it is, writing it anew is the way out
        with os.fdopen(fd, "rb") as file:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                log.warning(
                    "node labels: %s is %s, not a regular file: not read, replaced by one",
                    self.what,
                    _kind(mode),
                )
                return None
            data = file.read(MAX_READ)
        try:
            return parse_features(data.decode())
        except UnicodeDecodeError:
            return None

    def _write(self, labels: dict[str, str]) -> None:
        if not labels:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        # Safe as it is: no label key holds "=", no key or value a newline.
        text = "".join(f"{key}={labels[key]}\n" for key in sorted(labels))
        write_atomically(self.path, text.encode(), mode=0o644)  # NFD may run as anyone


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISDIR: "a directory",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "of another kind")


def parse_features(text: str) -> dict[str, str]:
    """The labels of a feature file: ``key=value`` lines; comments and blank lines skipped."""
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.partition("=") for line in lines if line and not line.startswith("#"))
    return {key: value for key, _, value in pairs}
