"""The reason a failed probe gives (what the DRA health stream and pod status show):
exit code and output's tail, timeout, a start failure, a signal, or the sysfs value."""

from __future__ import annotations

from pathlib import Path

from genericdp.config.model import (
    Exec,
    GlobMatcher,
    GroupBy,
    HealthCheck,
    ResourceDefinition,
    SysfsProbe,
)
from genericdp.discovery import discover
from genericdp.discovery.attributes import probe_unit
from genericdp.health import REASON_TAIL, failure_reason
from genericdp.hooks.execution import ExecResult, run_exec
from tests.fakesys import FakeHost


def check(*argv: str, timeout: float = 5.0) -> HealthCheck:
    return HealthCheck(Exec(argv, timeout))


async def test_an_exit_gives_its_code_and_the_output_tail() -> None:
    """The last lines of stdout and stderr, in order, after the code."""
    probe = check("/bin/sh", "-c", "echo checking; echo 'no carrier' >&2; exit 3")
    assert probe.exec is not None
    result = await run_exec(probe.exec, env={})
    assert failure_reason(probe, result) == "health probe exited 3: checking | no carrier"


async def test_a_timeout_says_after_how_long() -> None:
    """A probe that outlives its timeout is named so, with what it printed first."""
    probe = check("/bin/sh", "-c", "echo waiting; exec sleep 30", timeout=0.2)
    assert probe.exec is not None
    result = await run_exec(probe.exec, env={})
    assert failure_reason(probe, result) == "health probe timed out after 0.2s: waiting"


def test_start_failures_signals_and_long_output() -> None:
    """Could not start, killed by a signal, and a tail kept to its end."""
    probe = check("/nonexistent")
    failed = ExecResult(("/nonexistent",), None, False, "", 0.0, "no such file")
    assert failure_reason(probe, failed) == "health probe could not start: no such file"
    killed = ExecResult(("p",), -9, False, "", 0.1, None)
    assert failure_reason(probe, killed) == "health probe was killed by signal 9 (SIGKILL)"
    chatty = ExecResult(("p",), 1, False, "x" * 5000 + "\nthe end\n", 0.1, None)
    reason = failure_reason(probe, chatty)
    assert reason.endswith("| the end")
    assert len(reason) == len("health probe exited 1: ") + REASON_TAIL


def test_a_sysfs_probe_gives_the_value_it_read(tmp_path: Path) -> None:
    """The attribute, where it was read and its value against what was expected."""
    host = FakeHost(tmp_path / "host")
    host.add_drm_card("0000:3b:00.0")
    definition = ResourceDefinition("example.com/x", (GlobMatcher("/dev/dri/card0"),), GroupBy(), 1)
    (unit,) = discover(definition, host.roots)
    sysfs = SysfsProbe("vendor", "0x10de")
    reading = probe_unit(unit, sysfs, host.roots)
    result = ExecResult(("sysfs", "vendor"), 1, False, reading.detail, 0.0, None)
    reason = failure_reason(HealthCheck(None, sysfs=sysfs), result)
    assert reason == (
        "sysfs vendor: devices/pci0000:00/0000:00:01.0/0000:3b:00.0/vendor is '0x8086',"
        " not '0x10de'"
    )
    stuck = ExecResult(("sysfs", "vendor"), None, True, "read timed out", 3.0, None)
    assert failure_reason(HealthCheck(None, sysfs=sysfs), stuck) == (
        f"sysfs vendor: read timed out (after {sysfs.timeout:g}s)"
    )
