"""Hooks: the unit environment, logging, and failure messages fit for pod events."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from genericdp.config.model import Exec
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import HookError
from genericdp.hooks import HookRun, HookRunError, run_hook, unit_env

RESOURCE = "example.com/serial"


def unit(uid: str, *paths: str, numa: int | None = None) -> Unit:
    nodes = tuple(DeviceNode(host_path=f"/dev/{p}", container_path=f"/dev/c-{p}") for p in paths)
    return Unit(id=uid, nodes=nodes, numa_node=numa)


def sh(script: str, timeout: float = 10.0) -> Exec:
    return Exec(("/bin/sh", "-c", script), timeout)


def test_env_of_one_unit() -> None:
    """A single unit is described fully, including its ID and NUMA node."""
    env = unit_env(
        RESOURCE,
        [unit("A1B2", "ttyUSB0", "ttyUSB1", numa=1)],
        device_ids=["A1B2::0"],
        node_name="node-7",
        hook="init",
    )
    assert env == {
        "GENERICDP_RESOURCE": RESOURCE,
        "GENERICDP_HOOK": "init",
        "GENERICDP_NODE_NAME": "node-7",
        "GENERICDP_UNIT_IDS": "A1B2",
        "GENERICDP_UNIT_ID": "A1B2",
        "GENERICDP_DEVICE_IDS": "A1B2::0",
        "GENERICDP_DEVICE_PATHS": "/dev/ttyUSB0,/dev/ttyUSB1",
        "GENERICDP_CONTAINER_PATHS": "/dev/c-ttyUSB0,/dev/c-ttyUSB1",
        "GENERICDP_NUMA_NODE": "1",
    }


def test_env_of_several_units_has_lists_but_no_single_id() -> None:
    """Several units give comma-separated lists and no per-unit variables."""
    env = unit_env(RESOURCE, [unit("A", "a0", numa=0), unit("B", "b0", "b1", numa=0)])
    assert env["GENERICDP_UNIT_IDS"] == "A,B"
    assert env["GENERICDP_DEVICE_PATHS"] == "/dev/a0,/dev/b0,/dev/b1"
    assert env["GENERICDP_CONTAINER_PATHS"] == "/dev/c-a0,/dev/c-b0,/dev/c-b1"
    assert "GENERICDP_UNIT_ID" not in env
    assert "GENERICDP_NUMA_NODE" not in env


def test_env_lists_each_unit_once() -> None:
    """Replicas of one unit (count > 1) describe the unit once."""
    shared = unit("A", "a0")
    env = unit_env(RESOURCE, [shared, shared], device_ids=["A::0", "A::1"])
    assert env["GENERICDP_UNIT_IDS"] == "A"
    assert env["GENERICDP_UNIT_ID"] == "A"
    assert env["GENERICDP_DEVICE_PATHS"] == "/dev/a0"
    assert env["GENERICDP_DEVICE_IDS"] == "A::0,A::1"


def test_env_without_numa_node_leaves_it_unset() -> None:
    """An unknown NUMA node is absent, not an empty or made-up value."""
    env = unit_env(RESOURCE, [unit("A", "a0")])
    assert "GENERICDP_NUMA_NODE" not in env
    assert env["GENERICDP_HOOK"] == ""


async def test_hook_sees_its_units(caplog: pytest.LogCaptureFixture) -> None:
    """A hook runs with the unit environment and its output is logged per line."""
    caplog.set_level(logging.INFO, logger="genericdp.hooks")
    result = await run_hook(
        HookRun(
            "init",
            sh('echo "$GENERICDP_HOOK $GENERICDP_UNIT_ID $GENERICDP_DEVICE_PATHS"; echo second'),
            resource=RESOURCE,
            units=[unit("A1B2", "ttyUSB0")],
            node_name="node-7",
        )
    )
    assert result.ok
    assert result.output == "init A1B2 /dev/ttyUSB0\nsecond\n"
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "init hook [example.com/serial]: init A1B2 /dev/ttyUSB0" in lines
    assert "init hook [example.com/serial]: second" in lines
    assert any("starting" in line for line in lines)
    assert any("done in" in line for line in lines)


async def test_failed_hook_message_names_hook_resource_unit_code_and_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A non-zero exit raises HookError with what a pod event reader needs."""
    caplog.set_level(logging.INFO, logger="genericdp.hooks")
    with pytest.raises(HookError) as caught:
        await run_hook(
            HookRun(
                "init",
                sh("echo trying; echo 'port busy' >&2; exit 3"),
                resource=RESOURCE,
                units=[unit("A1B2", "ttyUSB0")],
            )
        )
    assert (
        str(caught.value)
        == "init hook /bin/sh for example.com/serial unit A1B2 exited 3: port busy"
    )
    assert isinstance(caught.value, HookRunError)
    assert caught.value.result.returncode == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(caught.value) in warnings[0].getMessage()


async def test_timed_out_hook_says_after_how_long() -> None:
    """A hook that does not finish in time fails with its timeout in the message."""
    with pytest.raises(HookError) as caught:
        await run_hook(
            HookRun(
                "cleanup",
                sh("exec sleep 100", timeout=0.5),
                resource=RESOURCE,
                units=[unit("A", "a0"), unit("B", "b0")],
            )
        )
    assert (
        str(caught.value)
        == "cleanup hook /bin/sh for example.com/serial units A, B timed out after 0.5s"
    )


async def test_hook_that_cannot_start_is_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing hook program fails with the reason, logged at error."""
    missing = str(tmp_path / "missing-hook")
    with pytest.raises(HookError) as caught:
        await run_hook(
            HookRun("preStart", Exec((missing,), 5), resource=RESOURCE, units=[unit("A", "a0")])
        )
    message = str(caught.value)
    assert message.startswith(
        f"preStart hook {missing} for example.com/serial unit A could not start:"
    )
    assert "No such file or directory" in message
    assert any(r.levelno == logging.ERROR for r in caplog.records)


async def test_many_units_are_abbreviated_in_the_message() -> None:
    """A message about many units stays short enough for an event."""
    units = [unit(f"U{i}", f"n{i}") for i in range(10)]
    with pytest.raises(HookError) as caught:
        await run_hook(HookRun("init", Exec(("/bin/false",), 5), resource=RESOURCE, units=units))
    assert "units U0, U1, U2 and 7 more exited 1" in str(caught.value)


async def test_long_last_line_is_shortened() -> None:
    """Only a bounded part of the last output line goes into the message."""
    with pytest.raises(HookError) as caught:
        await run_hook(
            HookRun(
                "init",
                sh("printf '%0500d\\n' 0; exit 1"),
                resource=RESOURCE,
                units=[unit("A", "a")],
            )
        )
    assert len(str(caught.value)) < 300
    assert str(caught.value).endswith("...")


async def test_given_logger_is_used(caplog: pytest.LogCaptureFixture) -> None:
    """Callers may pass their own logger (per resource), and it gets the lines."""
    caplog.set_level(logging.INFO, logger="genericdp.test.resource")
    await run_hook(
        HookRun(
            "init",
            sh("echo hi"),
            resource=RESOURCE,
            units=[unit("A", "a")],
            logger=logging.getLogger("genericdp.test.resource"),
        )
    )
    assert any(
        r.name == "genericdp.test.resource" and r.getMessage().endswith(": hi")
        for r in caplog.records
    )
