"""JSON log lines of a resource's tasks carry ``resource`` (and ``unit``) as fields;
text lines stay as they were."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from genericdp import logsetup
from genericdp.aio import TaskSet

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def _log_from_a_task(fmt: str) -> list[str]:
    stream = io.StringIO()
    logsetup.configure("info", fmt, stream)
    log = logging.getLogger("genericdp.test.fields")
    tasks = TaskSet(log)

    async def work() -> None:
        log.info("example.com/a: unit u1: cleaned")

    fields = {"resource": "example.com/a", "unit": "u1"}
    await tasks.spawn("example.com/a/cleanup/u1", work, log_fields=fields)
    log.info("outside any resource")
    await tasks.stop()
    return stream.getvalue().splitlines()


@pytest.mark.usefixtures("restore_root_logger")
async def test_a_resource_task_logs_its_fields_in_json() -> None:
    """A line logged in a task spawned with log_fields has them as JSON fields; others not."""
    inside, outside = (json.loads(line) for line in await _log_from_a_task("json"))
    assert inside["resource"] == "example.com/a"
    assert inside["unit"] == "u1"
    assert inside["message"] == "example.com/a: unit u1: cleaned"
    assert "resource" not in outside


@pytest.mark.usefixtures("restore_root_logger")
async def test_text_lines_do_not_repeat_the_fields() -> None:
    """The text format is unchanged: the message already names the resource and unit."""
    inside, _outside = await _log_from_a_task("text")
    assert inside.endswith("genericdp.test.fields: example.com/a: unit u1: cleaned")


def test_the_daemon_logs_resource_fields() -> None:
    """In `simulate`, every JSON line a resource's own tasks log names the resource."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    env |= {"GENERICDP_LOG_FORMAT": "json", "GENERICDP_LOG_LEVEL": "info"}
    result = subprocess.run(
        [sys.executable, "-m", "genericdp", "simulate", "configs/examples/demo.yaml", "--once"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    ours = [d for d in lines if d["logger"] in ("genericdp.runtime.resource",)]
    registered = [d for d in lines if "registered with the kubelet" in d["message"]]
    assert ours
    assert len(registered) == 4
    for line in ours + registered:
        assert line["message"].startswith(line["resource"] + ":"), line
