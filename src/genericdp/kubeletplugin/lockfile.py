"""The DRA driver's lock files (``nodelock.py``'s and ``turns.py``'s): opened and flocked.

Only a regular file is used: ``O_NONBLOCK`` and ``O_NOFOLLOW`` make a FIFO or
a symlink put in its place an error, never a blocked start or a lock taken
elsewhere. Each caller names the error it raises.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from genericdp.errors import GenericdpError


def open_lock_file(path: Path, error: type[GenericdpError]) -> int:
    """The lock file's descriptor, the file created when missing; raises ``error``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, mode, 0o600)
    except OSError as exc:
        raise error(f"cannot open the DRA lock file {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"the DRA lock file {path} is not a regular file")
    return fd


def try_lock(fd: int, path: Path, error: type[GenericdpError]) -> bool:
    """Take the exclusive lock if free (True), else False at once; raises ``error``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        raise error(f"cannot lock the DRA lock file {path}: {exc.strerror}") from exc
    return True
