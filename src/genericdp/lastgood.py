"""The last good config, kept in the state directory (a hostPath) so that a pod starting
with an invalid config serves it instead of crash-looping on every node of a rollout.

One JSON file, written atomically (0600 in a 0700 directory) with a SHA-256 of each
text and of them all, read back as distrustfully as a ConfigMap; anything wrong is a
``problem`` in words, never an exception: a bad state file must not stop the daemon.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genericdp.atomicfile import reason, write_atomically
from genericdp.config.loader import MAX_FILE_BYTES, Source, load_texts
from genericdp.config.model import Config
from genericdp.errors import ConfigError, clip

log = logging.getLogger(__name__)

STATE_FILE = "last-good-config.json"
KIND = "genericdp.io/last-good-config"
FORMAT = 1
# What a ConfigMap holds in all (1 MiB): a bigger config is not kept. JSON
# escapes at most double a config's text (quotes, backslashes, newlines, tabs:
# YAML allows no other control character), plus the paths and digests.
MAX_KEPT_TEXT = MAX_FILE_BYTES
MAX_STATE_BYTES = 2 * MAX_KEPT_TEXT + 64 * 1024
MAX_FILES = 1000
_MAX_PATH = 4096
_DIRECTORY_MODE = 0o700  # the kept config names the node's devices: root only
_FILE_MODE = 0o600


@dataclass(frozen=True)
class Kept:
    """A last good config read back: valid, as it was applied."""

    config: Config
    sources: tuple[Source, ...]
    applied: float  # Unix time it was first applied
    digest: str

    @property
    def when(self) -> str:
        """When it was applied, for people: ``2026-12-01 22:30:00 UTC``."""
        return datetime.fromtimestamp(self.applied, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Reading:
    """A ``kept`` config, or a ``problem`` with it, or neither (nothing kept yet)."""

    kept: Kept | None = None
    problem: str | None = None


def digest_of(sources: Sequence[Source]) -> str:
    """One SHA-256 over every file's path and text, in order."""
    whole = hashlib.sha256()
    for s in sources:
        whole.update(_sha256(s.file.encode()).encode() + b"\0")
        whole.update(_sha256(s.text.encode()).encode() + b"\0")
    return whole.hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LastGood:
    """``read`` at start; ``keep`` after every apply, writing only when the config differs."""

    def __init__(self, directory: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self._clock = clock
        self._digest: str | None = None  # of what the file holds, once known

    def read(self) -> Reading:
        """The kept config, or why it cannot be used; never raises."""
        try:
            data = self._read_bytes()
            if data is None:
                return Reading()
            kept = self._parse(data)
        except _StateError as exc:
            return Reading(problem=f"{self.path}: {exc}")
        except ConfigError as exc:
            issues = "; ".join(str(i) for i in exc.issues[:10])
            return Reading(problem=f"{self.path}: the kept config is invalid: {issues}")
        self._digest = kept.digest
        return Reading(kept=kept)

    def _read_bytes(self) -> bytes | None:
        """The state file's bytes, None if there is none; never through a symlink."""
        try:
            info = os.lstat(self.directory)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _StateError(f"cannot be read: {reason(exc)}") from exc
        if stat.S_ISLNK(info.st_mode):
            raise _StateError(f"{self.directory} is a symbolic link: never followed")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _StateError("is a symbolic link: never followed") from exc
            raise _StateError(f"cannot be read: {reason(exc)}") from exc
        with os.fdopen(fd, "rb", buffering=0) as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _StateError("is not a regular file")
            data = file.read(MAX_STATE_BYTES + 1)
        if len(data) > MAX_STATE_BYTES:
            raise _StateError(
                f"is larger than {MAX_STATE_BYTES} bytes: not a config genericdp kept"
            )
        return data

    def _parse(self, data: bytes) -> Kept:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _StateError(f"is not the JSON genericdp writes ({clip(str(exc), 120)})") from exc
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise _StateError(f"is not a kept config (no kind: {KIND})")
        if doc.get("format") != FORMAT:
            raise _StateError(f"has format {clip(repr(doc.get('format')), 40)}, not {FORMAT}")
        files, applied, digest = doc.get("files"), doc.get("applied"), doc.get("sha256")
        if not isinstance(files, list) or not 0 < len(files) <= MAX_FILES:
            raise _StateError(f"files must be a list of 1 to {MAX_FILES} files")
        if not isinstance(applied, int | float) or not math.isfinite(applied) or applied < 0:
            raise _StateError("applied must be a Unix time")
        sources = tuple(_source(i, entry) for i, entry in enumerate(files))
        if digest != digest_of(sources):
            raise _StateError(
                "its sha256 does not match its files: changed or damaged since written"
            )
        # Checked as the config itself is; messages name the file as kept.
        named = [Source(f"{self.path}[{s.file}]", s.text) for s in sources]
        config = load_texts(named)
        return Kept(config, sources, float(applied), digest)

    def keep(self, sources: Sequence[Source]) -> bool:
        """Keep ``sources`` (a config just applied) unless already kept; whether the file
        was written. Never raises: a failure is logged and the daemon serves on."""
        sources = tuple(sources)
        digest = digest_of(sources)
        if digest == self._digest or not sources:
            return False
        size = sum(len(s.text.encode()) for s in sources)
        if size > MAX_KEPT_TEXT or len(sources) > MAX_FILES:
            log.warning(
                "the config applied is not kept in %s: %d bytes in %d file(s), more than"
                " %d bytes or %d files",
                self.path, size, len(sources), MAX_KEPT_TEXT, MAX_FILES,
            )  # fmt: skip
            return False
        doc = {
            "kind": KIND,
            "format": FORMAT,
            "applied": self._clock(),
            "sha256": digest,
            "files": [
                {"path": s.file, "sha256": _sha256(s.text.encode()), "text": s.text}
                for s in sources
            ],
        }
        try:
            self._prepare_directory()
            text = json.dumps(doc, ensure_ascii=False).encode()
            write_atomically(self.path, text, mode=_FILE_MODE)
        except (OSError, _StateError) as exc:
            why = reason(exc) if isinstance(exc, OSError) else str(exc)
            log.warning(
                "cannot keep the applied config in %s (%s): a restart with an invalid config"
                " will not find it",
                self.path, why,
            )  # fmt: skip
            return False
        self._digest = digest
        log.debug("kept the applied config in %s", self.path)
        return True

    def _prepare_directory(self) -> None:
        """The directory exists, is ours (no symlink) and is mode 0700."""
        try:
            info = os.lstat(self.directory)
        except FileNotFoundError:
            self.directory.mkdir(mode=_DIRECTORY_MODE, parents=True)
            info = os.lstat(self.directory)
        if stat.S_ISLNK(info.st_mode):
            raise _StateError(f"{self.directory} is a symbolic link: never followed")
        if not stat.S_ISDIR(info.st_mode):
            raise _StateError(f"{self.directory} is not a directory")
        if stat.S_IMODE(info.st_mode) != _DIRECTORY_MODE:
            self.directory.chmod(_DIRECTORY_MODE)  # a hostPath DirectoryOrCreate is made 0755


class _StateError(Exception):
    """What is wrong with the state file, in words (never leaves this module)."""


def _source(index: int, entry: Any) -> Source:
    if not isinstance(entry, dict):
        raise _StateError(f"files[{index}] must be a mapping")
    path, text, digest = entry.get("path"), entry.get("text"), entry.get("sha256")
    if not isinstance(path, str) or not 0 < len(path) <= _MAX_PATH:
        raise _StateError(f"files[{index}].path must be a file name")
    if not isinstance(text, str):
        raise _StateError(f"files[{index}].text must be text")
    if digest != _sha256(text.encode("utf-8", "surrogatepass")):
        raise _StateError(f"files[{index}] ({clip(path, 200)}): its sha256 does not match its text")
    return Source(path, text)
