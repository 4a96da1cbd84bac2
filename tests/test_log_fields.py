"""JSON log lines of a resource's tasks carry ``resource`` (and ``unit``) as fields;
text lines stay as they were."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet
from genericdp.config import load_text
from genericdp.config.model import Config
from genericdp.runtime.supervisor import Supervisor
from tests.kubelet_fakes import EmbeddedKubelet
from tests.polling import eventually
from tests.runtime_harness import (
    ScriptedDiscovery,
    config,
    device_plugin,
    recorded,
    settings_for,
    unit,
)

REPO = Path(__file__).resolve().parents[1]
SERIAL = "example.com/serial"


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
    await tasks.spawn("example.com/a/cleanup/u1", work, log_fields=fields, finishable=True)
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
    ours = [d for d in lines if d["logger"] == "genericdp.runtime.resource"]
    registered = [d for d in lines if "registered with the kubelet" in d["message"]]
    assert ours
    assert len(registered) == 4
    for line in ours + registered:
        assert line["message"].startswith(line["resource"] + ":"), line
    demo = (REPO / "configs/examples/demo.yaml").read_text()
    names = {d.name for d in load_text(demo, "demo.yaml").resources}
    everything = [d for d in lines if d["logger"].startswith("genericdp.")]
    assert _missing_fields(everything, names) == []


def _missing_fields(lines: list[dict[str, str]], resources: set[str]) -> list[str]:
    """JSON lines about one resource without its ``resource`` field, or about one unit
    (``unit <id>``, or a hook run for one unit) without its ``unit`` field."""
    wrong = []
    for line in lines:
        message = line["message"]
        named = {r for r in resources if re.search(rf"{re.escape(r)}\b", message)}
        if len(named) == 1 and line.get("resource") != named.pop():
            wrong.append(f"no resource: {message}")
        unit = re.search(r"\bunit ([\w.-]+)", message)
        if unit and line.get("unit") != unit.group(1):
            wrong.append(f"no unit: {message}")
    return wrong


def test_the_check_finds_a_line_without_its_fields() -> None:
    """The check below is not vacuous: it names lines that lack either field."""
    lines = [
        {"message": "example.com/a: serving", "resource": "example.com/a"},
        {"message": "example.com/a: stopped serving"},
        {"message": "example.com/a: unit u1 cleaned", "resource": "example.com/a"},
        {"message": "applying config: start example.com/a, example.com/b"},
    ]
    assert _missing_fields(lines, {"example.com/a", "example.com/b"}) == [
        "no resource: example.com/a: stopped serving",
        "no unit: example.com/a: unit u1 cleaned",
    ]


@pytest.mark.usefixtures("restore_root_logger")
async def test_every_line_about_a_resource_or_unit_carries_them(tmp_path: Path) -> None:
    """Start, Allocate with an init hook, release and cleanup (failing once), a reload, and
    the resource leaving the config: every JSON line about it names it as a field, and
    every line about one unit names the unit, supervisor-level calls included."""
    stream = io.StringIO()
    logsetup.configure("debug", "json", stream)
    flag = tmp_path / "fail-once"
    flag.touch()
    cleanup = f"[/bin/sh, -c, 'echo scrubbing; if rm {flag} 2>/dev/null; then exit 3; fi']"
    text = (
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"
        f"  hooks:\n    init: {{exec: [/bin/echo, ready]}}\n"
        f"    cleanup: {{exec: {cleanup}, timeout: 5s}}\n"
    )
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    socket = tmp_path / "pr.sock"
    settings = settings_for(tmp_path, pod_resources_socket=socket, pod_resources_poll_interval=0.05)
    async with EmbeddedKubelet(settings.plugin_dir, pod_resources_socket=socket) as kubelet:
        backend = device_plugin(settings)
        supervisor = Supervisor(
            settings,
            backend,
            discover=discovery,
            cleanup_backoff=lambda: Backoff(initial=0.05, maximum=0.1),
        )
        await supervisor.start(config(text))
        try:
            await kubelet.wait_until(
                lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 2, 10
            )
            await kubelet.allocate(SERIAL, 1, pod="p")
            await eventually(lambda: len(recorded(backend).listed(SERIAL)) == 1, "listed")
            kubelet.release("default", "p")
            await eventually(lambda: "cleanup hook for" in stream.getvalue(), "cleanup")
            await eventually(lambda: not flag.exists(), "the first cleanup failed")
            await eventually(lambda: "cleanup hook for" in stream.getvalue().split("again in")[-1])
            await supervisor.apply(config(text + "  count: 2\n"))
            await kubelet.wait_until(lambda k: k.resources[SERIAL].allocatable == 4, 10)
            await kubelet.allocate(SERIAL, 1, pod="q")
            await supervisor.apply(Config(resources=()))  # it leaves: unit in use cleaned
        finally:
            assert await supervisor.stop() == ()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    ours = [line for line in lines if line["logger"].startswith("genericdp.")]
    missing = _missing_fields(ours, {SERIAL})
    assert missing == [], "\n".join(missing)
    by_unit = [line for line in ours if "unit" in line]
    for what in ("init hook", "cleanup hook", "out of service until its cleanup passes"):
        assert any(what in line["message"] for line in by_unit), what
    assert any(SERIAL in line["message"] and "embedded" in line["logger"] for line in ours)
