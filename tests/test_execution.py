"""run_exec with real subprocesses: exit codes, output, timeouts, process groups."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from genericdp.config.model import Exec
from genericdp.hooks.execution import run_exec
from tests.polling import eventually

DEADLINE = 10.0  # seconds; generous, only reached when something is broken


def sh(script: str, *args: str, timeout: float = 10.0) -> Exec:
    return Exec(("/bin/sh", "-c", script, "sh", *args), timeout)


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited, unreaped process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def stopped(pid: int) -> Callable[[], bool]:
    return lambda: not running(pid)


def pids_in(path: Path) -> list[int]:
    try:
        return [int(word) for word in path.read_text().split()]
    except (OSError, ValueError):
        return []


@pytest.fixture
def clean_kill() -> Iterator[list[int]]:
    """Pids a test started; any still running afterwards are killed (and fail nothing)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, 9)


async def test_success_is_ok() -> None:
    """A command that exits 0 is ok, with its return code and no error."""
    result = await run_exec(Exec(("/bin/true",), 5), env={})
    assert result.ok
    assert (result.returncode, result.timed_out, result.error) == (0, False, None)
    assert result.argv == ("/bin/true",)


async def test_nonzero_exit_is_not_ok() -> None:
    """A non-zero exit is reported as such, not as an error to start."""
    result = await run_exec(sh("exit 3"), env={})
    assert not result.ok
    assert result.returncode == 3
    assert result.error is None
    assert result.describe() == "exited 3"


async def test_killed_by_signal_is_described() -> None:
    """A command killed by a signal says which one."""
    result = await run_exec(sh("kill -9 $$"), env={})
    assert result.returncode == -9
    assert result.describe() == "was killed by signal 9 (SIGKILL)"


async def test_stdout_and_stderr_are_captured_together() -> None:
    """Both streams land in one output, in the order they were written."""
    result = await run_exec(sh("echo one; echo two >&2; echo three"), env={})
    assert result.output == "one\ntwo\nthree\n"
    assert not result.truncated
    assert result.last_line() == "three"


async def test_output_keeps_the_tail_and_says_it_was_truncated() -> None:
    """Output over the limit keeps its last bytes and is marked truncated."""
    script = 'i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done'
    result = await run_exec(sh(script), env={}, output_limit=100)
    assert result.truncated
    assert result.output.endswith("line 1999\n")
    assert "line 0\n" not in result.output
    assert "dropped" in result.output.splitlines()[0]
    kept = result.output.split("\n", 1)[1]
    assert len(kept.encode()) == 100


async def test_undecodable_output_is_replaced_not_fatal() -> None:
    """Bytes that are not UTF-8 become replacement characters."""
    result = await run_exec(sh(r"printf 'ok \377\n'"), env={})
    assert result.output == "ok \ufffd\n"


async def test_timeout_kills_a_forking_child_and_its_children(
    tmp_path: Path, clean_kill: list[int]
) -> None:
    """A timed-out command's whole process group is killed, grandchildren included."""
    pidfile = tmp_path / "pids"
    script = 'sleep 100 & echo "$$ $!" > "$1"; wait'
    task = asyncio.create_task(run_exec(sh(script, str(pidfile), timeout=1.0), env={}))
    await eventually(lambda: len(pids_in(pidfile)) == 2, "the script wrote its pids")
    clean_kill.extend(pids_in(pidfile))
    result = await task
    assert result.timed_out
    assert not result.ok
    leader, grandchild = pids_in(pidfile)
    await eventually(lambda: not running(grandchild), f"grandchild {grandchild} is gone")
    assert not running(leader)


async def test_timeout_escalates_to_sigkill(tmp_path: Path, clean_kill: list[int]) -> None:
    """Processes that ignore SIGTERM are killed after the grace period."""
    pidfile = tmp_path / "pids"
    script = 'trap "" TERM; sleep 100 & echo "$$ $!" > "$1"; while :; do wait; done'
    task = asyncio.create_task(
        run_exec(sh(script, str(pidfile), timeout=1.0), env={}, kill_grace=0.2)
    )
    await eventually(lambda: len(pids_in(pidfile)) == 2, "the script wrote its pids")
    clean_kill.extend(pids_in(pidfile))
    result = await task
    assert result.timed_out
    assert result.returncode == -9
    for pid in pids_in(pidfile):
        await eventually(stopped(pid), f"process {pid} is gone")


async def test_children_left_behind_do_not_hold_the_result(
    tmp_path: Path, clean_kill: list[int]
) -> None:
    """A command that exits leaving a background child returns at once; the child is stopped."""
    pidfile = tmp_path / "pid"
    script = 'sleep 100 & echo $! > "$1"; echo started'
    result = await run_exec(sh(script, str(pidfile), timeout=30), env={})
    clean_kill.extend(pids_in(pidfile))
    assert result.ok
    assert not result.timed_out
    assert result.output == "started\n"
    assert result.duration < 30
    (child,) = pids_in(pidfile)
    await eventually(lambda: not running(child), f"background child {child} is gone")


async def test_cancellation_kills_the_group_and_reraises(
    tmp_path: Path, clean_kill: list[int]
) -> None:
    """Cancelling run_exec (daemon shutdown) stops the command and all it forked."""
    pidfile = tmp_path / "pids"
    script = 'sleep 100 & echo "$$ $!" > "$1"; wait'
    task = asyncio.create_task(run_exec(sh(script, str(pidfile), timeout=60), env={}))
    await eventually(lambda: len(pids_in(pidfile)) == 2, "the script wrote its pids")
    clean_kill.extend(pids_in(pidfile))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for pid in pids_in(pidfile):
        await eventually(stopped(pid), f"process {pid} is gone")


async def test_missing_executable_is_an_error_not_an_exception(tmp_path: Path) -> None:
    """A command that does not exist is reported in ``error``, never raised."""
    missing = str(tmp_path / "no-such-program")
    result = await run_exec(Exec((missing, "arg"), 5), env={})
    assert not result.ok
    assert result.returncode is None
    assert result.error is not None
    assert missing in result.error
    assert "No such file" in result.error
    assert result.describe().startswith("could not start: ")


async def test_not_executable_is_an_error(tmp_path: Path) -> None:
    """A file without execute permission is reported as an error to start."""
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    result = await run_exec(Exec((str(script),), 5), env={})
    assert result.returncode is None
    assert result.error is not None
    assert "Permission denied" in result.error


async def test_missing_working_directory_is_an_error(tmp_path: Path) -> None:
    """A working directory that does not exist is named in the error."""
    cwd = tmp_path / "gone"
    result = await run_exec(Exec(("/bin/true",), 5), env={}, cwd=cwd)
    assert result.error is not None
    assert str(cwd) in result.error


async def test_working_directory_is_used(tmp_path: Path) -> None:
    """The command runs in the given working directory."""
    (tmp_path / "marker-file").write_text("")
    result = await run_exec(Exec(("/bin/ls",), 5), env={}, cwd=tmp_path)
    assert result.output == "marker-file\n"


async def test_empty_argv_is_an_error() -> None:
    """An empty argv cannot run and says so."""
    result = await run_exec(Exec((), 5), env={})
    assert result.error == "empty argv"
    assert not result.ok


async def test_environment_is_path_plus_given_variables() -> None:
    """The child sees PATH, its run ID and the given variables, nothing else of ours."""
    result = await run_exec(Exec(("/usr/bin/env",), 5), env={"FOO": "bar baz"})
    lines = result.output.splitlines()
    assert sorted(line.split("=", 1)[0] for line in lines) == ["FOO", "GENERICDP_RUN_ID", "PATH"]
    assert "FOO=bar baz" in lines


async def test_given_path_wins_and_is_used_to_find_the_program(tmp_path: Path) -> None:
    """A PATH in ``env`` replaces ours, and bare program names are looked up in it."""
    program = tmp_path / "hello-genericdp"
    program.write_text("#!/bin/sh\necho hello from $PATH\n")
    program.chmod(0o755)
    result = await run_exec(
        Exec(("hello-genericdp",), 5), env={"PATH": f"{tmp_path}:/usr/bin:/bin"}
    )
    assert result.ok, result
    assert result.output == f"hello from {tmp_path}:/usr/bin:/bin\n"


async def test_duration_comes_from_the_given_clock() -> None:
    """Duration is measured with the injected (monotonic) clock."""
    ticks = iter([100.0, 102.5])
    result = await run_exec(Exec(("/bin/true",), 5), env={}, clock=lambda: next(ticks))
    assert result.duration == 2.5


async def test_no_zombies_when_orphans_are_ours(tmp_path: Path) -> None:
    """As a child subreaper (PID 1 in a container), the command's orphans get reaped."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux only")
    helper = tmp_path / "helper.py"
    helper.write_text(SUBREAPER_HELPER)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(helper),
        str(tmp_path / "pid"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(DEADLINE * 2):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    assert out.decode().strip() == "no zombies"


SUBREAPER_HELPER = """
import asyncio, ctypes, os, sys
from pathlib import Path
from genericdp.config.model import Exec
from genericdp.hooks.execution import run_exec

PR_SET_CHILD_SUBREAPER = 36
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl failed")

def zombies():
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rfind(")") + 2 :].split()[:2]
        if state == "Z" and int(ppid) == os.getpid():
            found.append(entry.name)
    return found

async def main():
    script = 'sleep 100 & echo $! > "$1"; wait'
    spec = Exec(("/bin/sh", "-c", script, "sh", sys.argv[1]), 0.5)
    result = await run_exec(spec, env={})
    assert result.timed_out, result
    script = 'sleep 100 & echo started'
    result = await run_exec(Exec(("/bin/sh", "-c", script), 5), env={})
    assert result.ok, result
    left = zombies()
    print("zombies: " + " ".join(left) if left else "no zombies")

asyncio.run(main())
"""


async def test_second_cancellation_kills_at_once(tmp_path: Path, clean_kill: list[int]) -> None:
    """Cancelled again during the grace period, run_exec SIGKILLs the group instead of waiting."""
    pidfile = tmp_path / "pids"
    script = 'trap "" TERM; sleep 100 & echo "$$ $!" > "$1"; while :; do wait; done'
    task = asyncio.create_task(
        run_exec(sh(script, str(pidfile), timeout=60), env={}, kill_grace=3600)
    )
    await eventually(lambda: len(pids_in(pidfile)) == 2, "the script wrote its pids")
    clean_kill.extend(pids_in(pidfile))
    task.cancel()
    await asyncio.sleep(0)  # let the first cancellation start the graceful stop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for pid in pids_in(pidfile):
        await eventually(stopped(pid), f"process {pid} is gone")


async def test_cancellation_asks_politely_first(tmp_path: Path, clean_kill: list[int]) -> None:
    """The first cancellation sends SIGTERM, so a command can clean up before it goes."""
    pidfile, said = tmp_path / "pids", tmp_path / "said"
    script = 'trap \'echo bye > "$2"; exit 0\' TERM; sleep 100 & echo $$ > "$1"; wait'
    task = asyncio.create_task(run_exec(sh(script, str(pidfile), str(said), timeout=60), env={}))
    await eventually(lambda: len(pids_in(pidfile)) == 1, "the script wrote its pid")
    clean_kill.extend(pids_in(pidfile))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert said.read_text() == "bye\n"


async def test_impossible_argv_or_env_is_an_error() -> None:
    """A NUL byte in argv or a bad variable name is reported, never raised."""
    result = await run_exec(Exec(("/bin/echo", "a\0b"), 5), env={})
    assert result.error is not None
    assert "null byte" in result.error
    result = await run_exec(Exec(("/bin/true",), 5), env={"A=B": "c"})
    assert result.error is not None
    assert "environment variable" in result.error
