"""Hooks that leave their process group: nothing they start outlives their timeout.

Each case runs ``run_exec`` in a fresh Python process that is a child subreaper,
as ``genericdp serve`` is (the subreaper attribute is per process, and the test
runner must not become one). The hook double-forks with ``setsid`` and records
the escaped pids; the driver reports which of them still run, and which of its
children are zombies, once ``run_exec`` has returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genericdp.hooks.reaper import descendants, process_table, read_stat

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 0.5  # the hook's timeout
GRACE = 0.3  # SIGTERM to SIGKILL

DRIVER = r"""
import asyncio, json, os, sys, time
from pathlib import Path
from genericdp.config.model import Exec
from genericdp.hooks.execution import run_exec
from genericdp.hooks.reaper import SUBREAPER, process_table

async def main(scripts, subreaper, pidfile):
    if subreaper:
        assert SUBREAPER.enable(asyncio.get_running_loop())
    started = time.monotonic()
    results = await asyncio.gather(*(
        run_exec(Exec(("/bin/sh", "-c", s), float(sys.argv[4])), env={"P": pidfile},
                 kill_grace=float(sys.argv[5]))
        for s in scripts
    ))
    duration = time.monotonic() - started
    pids = [int(w) for w in Path(pidfile).read_text().split()]
    table = process_table()
    alive = [p for p in pids if p in table and table[p].alive]
    me = os.getpid()
    deadline = time.monotonic() + 5  # SIGCHLD is handled on the loop: let it run
    while time.monotonic() < deadline:
        zombies = [i.pid for i in process_table().values() if i.ppid == me and not i.alive]
        if not zombies:
            break
        await asyncio.sleep(0.01)
    print(json.dumps({"duration": duration, "pids": pids, "alive": alive, "zombies": zombies,
                      "outcomes": [r.describe() for r in results],
                      "last_lines": [r.last_line() for r in results]}))

asyncio.run(main(json.loads(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]))
"""

SETPGID = (
    "import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    'open(os.environ["P"], "a").write(f"{os.getpid()}\\n"); time.sleep(600)'
)
SLOW_TO_DIE = (
    'import os, time; ballast = b"x" * (1 << 30); '
    'open(os.environ["P"], "a").write(f"{os.getpid()}\\n"); time.sleep(600)'
)
# Wait (as the leader) until the escaped process has written its pid.
WAIT_FOR_PID = 'while [ ! -s "$P" ]; do sleep 0.01; done'
ESCAPES = {
    "a setsid child while the hook runs past its timeout": (
        "setsid sh -c 'echo $$ >> \"$P\"; exec sleep 600' & exec sleep 600"
    ),
    "a double fork with setsid, the hook exiting at once": (
        f"(setsid sh -c 'echo $$ >> \"$P\"; exec sleep 600' &); {WAIT_FOR_PID}"
    ),
    "a double fork that clears its environment (env -i)": (
        f'(setsid env -i P="$P" sh -c \'echo $$ >> "$P"; exec sleep 600\' &); {WAIT_FOR_PID}'
    ),
    "a double fork that ignores SIGTERM": (
        f'(setsid sh -c \'trap "" TERM; echo $$ >> "$P"; exec sleep 600\' &); {WAIT_FOR_PID}'
    ),
    "a daemon that double-forks twice": (
        '(setsid sh -c \'(setsid sh -c "echo \\$\\$ >> \\"\\$P\\"; exec sleep 600" &)\' &); '
        f"{WAIT_FOR_PID}"
    ),
    "a setpgid child that ignores SIGTERM, the hook timing out": (
        f"{sys.executable} -c '{SETPGID}' & exec sleep 600"
    ),
}


@pytest.fixture
def escaped() -> Iterator[list[int]]:
    """Pids a case reports; whatever still runs afterwards is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def drive(
    tmp_path: Path, scripts: list[str], *, subreaper: bool = True, timeout: float = TIMEOUT
) -> dict[str, Any]:
    pidfile = tmp_path / "pids"
    pidfile.touch()
    args = [json.dumps(scripts), "1" if subreaper else "0", str(pidfile), str(timeout), str(GRACE)]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


@pytest.mark.parametrize("script", ESCAPES.values(), ids=list(ESCAPES))
def test_nothing_a_hook_starts_outlives_it(tmp_path: Path, script: str, escaped: list[int]) -> None:
    """Processes that left the hook's process group are dead and reaped when run_exec returns."""
    report = drive(tmp_path, [script])
    escaped.extend(report["pids"])
    assert report["pids"], report
    assert report["alive"] == [], report
    assert report["zombies"] == [], report
    # The timeout, then SIGTERM, and SIGKILL after the grace: nothing waits longer.
    assert report["duration"] < TIMEOUT + 2 * GRACE + 2.0, report


def test_an_escapee_without_run_id_waits_only_for_the_hooks_running_with_it(
    tmp_path: Path, escaped: list[int]
) -> None:
    """An orphan that cleared its environment is killed once every hook it may belong to ends."""
    fast = f'(setsid env -i P="$P" sh -c \'echo $$ >> "$P"; exec sleep 600\' &); {WAIT_FOR_PID}'
    slow = "exec sleep 600"  # times out: ends last
    report = drive(tmp_path, [fast, slow])
    escaped.extend(report["pids"])
    assert report["outcomes"] == ["exited 0", "timed out"], report
    assert report["alive"] == [], report
    assert report["zombies"] == [], report


def test_an_escapee_slow_to_die_is_dead_when_the_hook_returns(
    tmp_path: Path, escaped: list[int]
) -> None:
    """An orphan without run ID whose exit takes a while (a large address space to
    free) is waited for: a SIGKILL sent is not a process gone."""
    slow = f"(setsid env -i P=\"$P\" {sys.executable} -c '{SLOW_TO_DIE}' &); {WAIT_FOR_PID}"
    report = drive(tmp_path, [slow], timeout=30)
    escaped.extend(report["pids"])
    assert report["outcomes"] == ["exited 0"], report
    assert report["pids"], report
    assert report["alive"] == [], report


def test_without_the_subreaper_an_orphan_escapes(tmp_path: Path, escaped: list[int]) -> None:
    """The control: a process-group kill alone misses a double-forked setsid child."""
    report = drive(
        tmp_path, [ESCAPES["a double fork with setsid, the hook exiting at once"]], subreaper=False
    )
    escaped.extend(report["pids"])
    assert report["alive"] == report["pids"] != [], report


@pytest.mark.parametrize(
    "case",
    [
        "a setsid child while the hook runs past its timeout",
        "a setpgid child that ignores SIGTERM, the hook timing out",
    ],
)
def test_without_the_subreaper_a_timed_out_hooks_tree_is_still_killed(
    tmp_path: Path, case: str, escaped: list[int]
) -> None:
    """Library use: what a hook that is still running has started is found through its tree."""
    report = drive(tmp_path, [ESCAPES[case]], subreaper=False)
    escaped.extend(report["pids"])
    assert report["pids"], report
    assert report["alive"] == [], report


def test_a_hooks_escapees_are_not_killed_when_another_hook_ends(
    tmp_path: Path, escaped: list[int]
) -> None:
    """Run IDs attribute orphans exactly: a hook ending never kills what another one started."""
    keeper = (
        f"(setsid sh -c 'echo $$ >> \"$P\"; exec sleep 600' &); {WAIT_FOR_PID}; "
        'sleep 0.5; kill -0 "$(cat "$P")" && echo "still running after the other hook ended"'
    )
    report = drive(tmp_path, [keeper, "true"], timeout=10)
    escaped.extend(report["pids"])
    assert report["outcomes"] == ["exited 0", "exited 0"], report
    assert report["last_lines"][0] == "still running after the other hook ended", report
    assert report["alive"] == [], report  # and gone once its own hook ended


def test_process_stat_parsing_survives_hostile_command_names(tmp_path: Path) -> None:
    """A program named ``x) S 1 (y`` cannot fool the /proc/<pid>/stat parser."""
    program = tmp_path / "x) S 1 (y"
    program.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(program), "600"])
    try:
        info = read_stat(Path(f"/proc/{child.pid}"))
        assert info is not None
        assert (info.pid, info.ppid, info.alive) == (child.pid, os.getpid(), True)
        assert child.pid in descendants(process_table(), [os.getpid()])
    finally:
        child.kill()
        child.wait()
