"""Every process a command starts, found and stopped: the daemon as child subreaper.

A process group is not enough: a child that calls ``setsid`` leaves it, and once
its parent exits init adopts it. So ``serve`` makes itself a child subreaper
(``prctl``, unprivileged) and orphans come to it. What a command started is its
process tree and the orphans that carry its ``GENERICDP_RUN_ID`` (inherited through
fork and exec) or lost it (``env -i``) and appeared while it ran; orphans several
running commands may own are stopped when the last of those ends.

Orphans' zombies are reaped on SIGCHLD, never a pid asyncio's child watcher owns:
a command's own process is registered, nothing is reaped while one is starting
(its pid is not known yet), and ``waitpid(-1)`` is never called. Without the
subreaper (a library, tests) only the command's tree and group are stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import secrets
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

RUN_ID_VAR = "GENERICDP_RUN_ID"
PR_SET_CHILD_SUBREAPER = 36
_DEAD = ("Z", "X", "x")  # zombie, dead: nothing left to signal


@dataclass(frozen=True)
class ProcInfo:
    """The fields of ``/proc/<pid>/stat`` we use."""

    pid: int
    ppid: int
    pgrp: int
    state: str
    start: int  # start time in clock ticks: with pid, a process's identity

    @property
    def alive(self) -> bool:
        return self.state not in _DEAD


def process_table(proc_root: Path = Path("/proc")) -> dict[int, ProcInfo]:
    """Every process we can see, by pid (empty without /proc)."""
    try:
        entries = [e.name for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        return {}
    infos = (read_stat(proc_root / name) for name in entries)
    return {info.pid: info for info in infos if info is not None}


def read_stat(proc_dir: Path) -> ProcInfo | None:
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:  # exited while we looked
        return None
    # ``pid (comm) state ppid pgrp ...``; comm may contain spaces and parentheses.
    head, _, rest = stat.rpartition(")")
    fields = rest.split()
    try:
        pid = int(head.split(" (", 1)[0])
        return ProcInfo(pid, int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    except (IndexError, ValueError):
        return None


def descendants(table: dict[int, ProcInfo], roots: Iterable[int]) -> set[int]:
    """``roots`` (those in ``table``) and every process below them."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: set[int] = set()
    stack = [r for r in roots if r in table]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    return found


def run_id_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The ``GENERICDP_RUN_ID`` a process was started with; None if absent or unreadable."""
    try:
        environ = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or not ours to read (a setuid program)
        return None
    prefix = RUN_ID_VAR.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("ascii", "replace")
    return None


def set_child_subreaper() -> bool:
    """Make this process a child subreaper; False (and why, in the log) if it cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            return True
        reason = os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:  # no libc, no prctl: not Linux
        reason = str(exc)
    log.warning(
        "cannot become child subreaper (%s): processes that hooks start in a session "
        "of their own may outlive the hook's timeout",
        reason,
    )
    return False


class Subreaper:
    """Which processes belong to which running command; reaps orphans' zombies. One per
    process (``SUBREAPER``), as the subreaper attribute is; used from the loop only."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._proc = proc_root
        self.enabled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leaders: set[int] = set()  # asyncio owns these: never reap them
        self._starting = 0  # commands forked whose pid we do not know yet
        self._reap_deferred = False
        self._runs: set[str] = set()
        # Orphans without a run ID, by (pid, start): the runs they may belong to.
        self._strays: dict[tuple[int, int], set[str]] = {}

    def enable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Become child subreaper and reap orphans on SIGCHLD (``serve`` calls this)."""
        if self.enabled:
            return True
        if not set_child_subreaper():
            return False
        loop.add_signal_handler(signal.SIGCHLD, self.reap_orphans)
        self._loop = loop
        self.enabled = True
        return True

    def disable(self) -> None:
        """Stop handling SIGCHLD (the subreaper attribute stays: orphans still come to us)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_signal_handler(signal.SIGCHLD)
        self._loop = None
        self.enabled = False

    def reap_orphans(self) -> None:
        """Reap exited children that are not a running command's own process."""
        if self._starting:
            self._reap_deferred = True  # a new command's pid may be among them
            return
        me = os.getpid()
        for info in process_table(self._proc).values():
            if info.ppid == me and not info.alive and info.pid not in self._leaders:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(info.pid, os.WNOHANG)

    def new_run(self) -> str:
        run_id = secrets.token_hex(8)
        self._runs.add(run_id)
        return run_id

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around the fork of a command: its zombie must not be reaped before we know it."""
        self._starting += 1
        try:
            yield
        finally:
            self._starting -= 1
            if not self._starting and self._reap_deferred:
                self._reap_deferred = False
                self.reap_orphans()

    def leader_started(self, pid: int) -> None:
        self._leaders.add(pid)

    def family(self, run_id: str, leader: int | None) -> set[int]:
        """The live processes a run started: ``leader``'s tree (None: reaped), its orphans
        with its run ID, and orphans without one that no other running command may own
        (found while it is stopped, so that ``execution`` waits for them to be gone)."""
        if leader is None and not self.enabled:
            return set()  # the usual case without subreaper: nothing to look for
        table = process_table(self._proc)
        roots = set() if leader is None else {leader}
        if self.enabled:
            self._adopt_strays(table)
            orphans = self._orphans(table)
            roots |= {i.pid for i in orphans if run_id_of(i.pid, self._proc) == run_id}
            for (pid, start), owners in self._strays.items():
                stray = table.get(pid)
                mine = owners <= {run_id} and pid not in self._leaders
                if mine and stray is not None and stray.start == start:
                    roots.add(pid)
        return {p for p in descendants(table, roots) if table[p].alive}

    def _orphans(self, table: dict[int, ProcInfo]) -> list[ProcInfo]:
        """Our live children that are no command's own process: adopted orphans."""
        me = os.getpid()
        return [
            i for i in table.values() if i.ppid == me and i.alive and i.pid not in self._leaders
        ]

    def _adopt_strays(self, table: dict[int, ProcInfo]) -> None:
        """Note orphans without run ID seen for the first time, with the runs that may own
        them: they appeared since the last look, so a run running now started them."""
        for info in self._orphans(table):
            key = (info.pid, info.start)
            if key not in self._strays and run_id_of(info.pid, self._proc) is None:
                self._strays[key] = set(self._runs)

    def end_run(self, run_id: str, leader: int | None) -> None:
        """The run is over: kill the orphans only it could own that ``execution`` missed.
        ``leader``: the command's pid once asyncio reaped it (else None: left alone)."""
        if leader is not None:
            self._leaders.discard(leader)
        if not self.enabled:
            self._runs.discard(run_id)
            return
        table = process_table(self._proc)
        self._adopt_strays(table)
        self._runs.discard(run_id)
        for key, owners in list(self._strays.items()):
            owners.discard(run_id)
            info_now = table.get(key[0])
            if info_now is None or info_now.start != key[1] or not info_now.alive:
                del self._strays[key]
            elif not owners:
                del self._strays[key]
                for pid in descendants(table, [key[0]]):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                log.warning(
                    "killed pid %d: a command started it in a session of its own "
                    "and it outlived the command",
                    key[0],
                )


SUBREAPER = Subreaper()
