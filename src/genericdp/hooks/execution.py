"""Running one user-configured argv: no shell, bounded output, a hard timeout.

Hooks and probes may fork, ignore SIGTERM, print megabytes, never exit or leave
their process group. Each runs in a session of its own, and whatever is left of it
when it ends, times out or is cancelled (its group and all ``reaper`` finds it
started) gets SIGTERM, then SIGKILL after a short grace. stdout and stderr share one
pipe of ours, not asyncio's, so a grandchild holding it never keeps us waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from genericdp.config.model import Exec
from genericdp.hooks.reaper import RUN_ID_VAR, SUBREAPER, process_table, read_stat

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_OUTPUT_LIMIT = 64 * 1024
DEFAULT_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
_POLL = 0.02  # how often we look whether a signalled group is gone
_REAP_WAIT = 1.0  # how long a hurried stop waits for SIGKILL to take effect


@dataclass(frozen=True)
class ExecResult:
    """What happened when one argv ran. ``returncode`` is None when it could not start
    (``error`` says why), negative when a signal killed it. ``output``: the last
    ``output_limit`` bytes of stdout and stderr interleaved, bad UTF-8 replaced
    (``truncated``: head dropped)."""

    argv: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    output: str
    duration: float
    error: str | None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.returncode == 0

    def describe(self) -> str:
        """How it ended, in words: ``exited 3``, ``timed out``, ``could not start: ...``."""
        if self.error is not None:
            return f"could not start: {self.error}"
        if self.timed_out:
            return "timed out"
        if self.returncode is not None and self.returncode < 0:
            return f"was killed by signal {-self.returncode} ({_signal_name(-self.returncode)})"
        return f"exited {self.returncode}"

    def last_line(self, limit: int = 200) -> str:
        """The last non-blank output line, shortened to ``limit`` characters."""
        for raw in reversed(self.output.splitlines()):
            line = raw.strip()
            if line:
                return line if len(line) <= limit else line[: limit - 3] + "..."
        return ""


async def run_exec(
    spec: Exec,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    kill_grace: float = DEFAULT_KILL_GRACE,
    clock: Callable[[], float] = time.monotonic,
) -> ExecResult:
    """Run ``spec.argv`` with a minimal environment plus ``env``; never raises for a command
    that fails or cannot start. Cancellation stops all of it before re-raising."""
    argv = tuple(spec.argv)
    started = clock()

    def result(
        returncode: int | None, timed_out: bool, tail: _Tail | None, error: str | None
    ) -> ExecResult:
        output, truncated = tail.text() if tail is not None else ("", False)
        duration = max(0.0, clock() - started)
        return ExecResult(argv, returncode, timed_out, output, duration, error, truncated)

    if not argv:
        return result(None, False, None, "empty argv")
    run_id = SUBREAPER.new_run()
    # Nothing else leaks from the daemon (settings, its pod's credentials): a hook
    # behaves the same whatever the daemon was started with.
    full_env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, **env, RUN_ID_VAR: run_id}
    try:
        proc, transport, tail = await _start(
            argv, full_env, cwd, output_limit, grace=kill_grace, run_id=run_id
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte or "=" in argv or env
        SUBREAPER.end_run(run_id, None)
        return result(None, False, None, _start_error(argv, cwd, exc))
    try:
        timed_out = await _wait(proc, spec.timeout, kill_grace, run_id)
        await tail.finished(kill_grace)
    finally:
        transport.close()
        SUBREAPER.end_run(run_id, proc.pid if proc.returncode is not None else None)
    return result(proc.returncode, timed_out, tail, None)


class _Tail(asyncio.Protocol):
    """Reads the shared stdout/stderr pipe, keeping only the last ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._dropped = 0
        self._done = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        excess = len(self._buffer) - self._limit
        if excess > 0:
            del self._buffer[:excess]
            self._dropped += excess

    def eof_received(self) -> None:
        self._set_done()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 -- asyncio.Protocol's signature
        self._set_done()

    def _set_done(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    async def finished(self, grace: float) -> None:
        """Wait for EOF, but not for a writer that escaped our process group."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):  # not wait_for: see aio.wait_event
                await asyncio.shield(self._done)

    def text(self) -> tuple[str, bool]:
        text = self._buffer.decode("utf-8", "replace")
        if self._dropped:
            text = f"[{self._dropped} bytes of earlier output dropped]\n{text}"
        return text, self._dropped > 0


async def _start(
    argv: tuple[str, ...],
    env: dict[str, str],
    cwd: Path | None,
    limit: int,
    *,
    grace: float,
    run_id: str,
) -> tuple[asyncio.subprocess.Process, asyncio.BaseTransport, _Tail]:
    """``_spawn``, shielded: the command may run (and fork) before asyncio has set up its
    transport, so a cancelled start is completed, then stopped like any command."""
    starting = asyncio.create_task(_spawn(argv, env, cwd, limit), name=f"start {argv[0]}")
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            proc, transport, _ = await starting  # milliseconds; cancelling again cuts it short
            try:
                await _stop_firmly(proc, grace, run_id)
            finally:
                transport.close()
        raise


async def _spawn(
    argv: tuple[str, ...], env: dict[str, str], cwd: Path | None, limit: int
) -> tuple[asyncio.subprocess.Process, asyncio.BaseTransport, _Tail]:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    try:
        with SUBREAPER.starting():  # its zombie is asyncio's to reap, not the subreaper's
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                env=env,
                cwd=cwd,
                start_new_session=True,  # own process group: we can kill all it forks
            )
            SUBREAPER.leader_started(proc.pid)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)  # only the child holds the write end now: EOF when it is done
    reader = os.fdopen(read_fd, "rb", buffering=0)
    try:
        transport, tail = await loop.connect_read_pipe(lambda: _Tail(limit), reader)
    except BaseException:
        reader.close()
        _signal_group(proc.pid, signal.SIGKILL)
        raise
    return proc, transport, tail


async def _wait(proc: asyncio.subprocess.Process, limit: float, grace: float, run_id: str) -> bool:
    """Wait for the command, then stop what is left of it; True if it timed out."""
    timed_out = False
    try:
        async with asyncio.timeout(limit):
            await proc.wait()
    except TimeoutError:
        timed_out = True
    finally:  # on cancellation too: the command must not outlive us
        await _stop_firmly(proc, grace, run_id)
    return timed_out


async def _stop_firmly(proc: asyncio.subprocess.Process, grace: float, run_id: str) -> None:
    """``_stop``; cancelled meanwhile (shutdown in a hurry), SIGKILL at once and a short
    wait for asyncio to reap the leader, so no zombie is left."""
    try:
        await _stop(proc, grace, run_id)
    except asyncio.CancelledError:
        _signal_all(proc, run_id, signal.SIGKILL, {})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REAP_WAIT):
                await proc.wait()
        if proc.returncode is not None:  # else reaping could steal the leader's status
            _reap_group(proc.pid)
        raise


async def _stop(proc: asyncio.subprocess.Process, grace: float, run_id: str) -> None:
    """SIGTERM what is left of the command, SIGKILL whatever outlives ``grace``. What was
    signalled once stays in view until gone, even re-parented to init (no subreaper)."""
    signalled: dict[int, int] = {}  # pid -> start time, against pid reuse
    if not _signal_all(proc, run_id, signal.SIGTERM, signalled):
        return
    if not await _ended(proc, grace, run_id, signalled):
        _signal_all(proc, run_id, signal.SIGKILL, signalled)
        await _ended(proc, grace, run_id, signalled)


def _signal_all(
    proc: asyncio.subprocess.Process, run_id: str, sig: int, signalled: dict[int, int]
) -> bool:
    """Signal the command's group and every process it started; False if none is left."""
    # The tree first: once the group's leader dies, its children are re-parented.
    family = SUBREAPER.family(run_id, proc.pid if proc.returncode is None else None)
    hit = _signal_group(proc.pid, sig)  # start_new_session made the child its group's leader
    for pid in family | _still_running(signalled):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            hit = True
            info = read_stat(Path(f"/proc/{pid}"))
            if info is not None:
                signalled.setdefault(pid, info.start)
    return hit


def _still_running(signalled: dict[int, int]) -> set[int]:
    infos = {pid: read_stat(Path(f"/proc/{pid}")) for pid in signalled}
    return {p for p, i in infos.items() if i is not None and i.start == signalled[p] and i.alive}


async def _ended(
    proc: asyncio.subprocess.Process, grace: float, run_id: str, signalled: dict[int, int]
) -> bool:
    """Wait up to ``grace`` for the leader, its group and all it started to exit."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        # returncode is set once asyncio has reaped the leader: only then may we reap.
        if (
            proc.returncode is not None
            and not _group_alive(proc.pid)
            and not SUBREAPER.family(run_id, None)
            and not _still_running(signalled)
        ):
            _reap_group(proc.pid)
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL)


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal every process of the group; False if the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a setuid member we may not signal: nothing more we can do
        return True
    return True


def _group_alive(pgid: int) -> bool:
    """Whether any member of the group still runs. Not signal 0 alone: it sees zombies,
    which some init processes reap only now and then."""
    if not _signal_group(pgid, 0):
        return False
    table = process_table()
    if not table:  # no /proc: trust the signal
        return True
    return any(info.pgrp == pgid and info.alive for info in table.values())


def _reap_group(pgid: int) -> None:
    """Reap members of the group re-parented to us (PID 1 or subreaper), whom nobody
    else reaps; only once asyncio reaped the leader, never stealing its status."""
    with contextlib.suppress(ChildProcessError):  # none left
        while os.waitpid(-pgid, os.WNOHANG)[0]:  # 0: those left still run
            pass


def _start_error(argv: tuple[str, ...], cwd: Path | None, exc: OSError | ValueError) -> str:
    if isinstance(exc, ValueError):
        return f"{argv[0]!r}: {exc}"
    reason = exc.strerror or str(exc)
    if cwd is not None and exc.filename is not None and str(exc.filename) == str(cwd):
        return f"working directory {cwd}: {reason}"
    return f"{argv[0]}: {reason}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
