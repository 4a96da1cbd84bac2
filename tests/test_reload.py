"""Hot reload end to end: files and ConfigMap volumes change, the embedded kubelet sees it.

The supervisor and the embedded kubelet run on real unix sockets
(``tests.runtime_harness``); the last test runs a real ``genericdp serve``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from genericdp.aio import Backoff, TaskSet
from genericdp.config import load
from genericdp.kubelet.embedded.state import EventKind
from genericdp.runtime.configwatch import ConfigWatcher, Outcome
from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import Running, ScriptedDiscovery, running, unit
from tests.test_configwatch import ConfigMapVolume, Results

A, B, C = "example.com/a", "example.com/b", "example.com/c"


def discovery() -> ScriptedDiscovery:
    return ScriptedDiscovery({A: [unit("a0")], B: [unit("b0"), unit("b1")], C: [unit("c0")]})


def definition(name: str, *, count: int = 1, extra: str = "") -> str:
    return f"  - name: {name}\n    match: [glob: /dev/tty*]\n    count: {count}\n" + "".join(
        f"    {line}\n" for line in extra.splitlines()
    )


def config_text(*definitions: str) -> str:
    return "version: v1\nresources:\n" + "".join(definitions)


@asynccontextmanager
async def reloading(base: Path, path: Path) -> AsyncIterator[tuple[Running, Results]]:
    """Supervisor and kubelet serving the config at ``path``, with the config watch running."""
    async with running(base, load([path]), discover=discovery()) as rt:
        results = Results()
        # The daemon's settle time: a loaded machine may pause between the writes of one save.
        watcher = ConfigWatcher(path, rt.supervisor, settle=0.2, on_result=results)
        tasks = TaskSet(logging.getLogger("test"))
        tasks.spawn("config-watch", watcher.run, backoff=Backoff(initial=0.02, maximum=0.1))
        try:
            await asyncio.wait_for(watcher.ready.wait(), 5)
            yield rt, results
        finally:
            assert await tasks.stop() == ()


def registrations(rt: Running) -> dict[str, int]:
    return {name: r.registrations for name, r in rt.kubelet.resources.items()}


async def test_edit_adds_and_removes_resources(base: Path) -> None:
    """Editing the file starts a new plugin (registered) and stops a removed one (socket gone)."""
    path = base / "gdp.yaml"
    path.write_text(config_text(definition(A), definition(B)))
    async with reloading(base, path) as (rt, results):
        await rt.registered([A, B])
        b_socket = rt.socket(B)
        path.write_text(config_text(definition(A), definition(C)))
        await rt.until(lambda k: C in k.resources and k.resources[C].allocatable == 1)
        await rt.until(lambda k: not k.resources[B].connected)
        assert not b_socket.exists()
        assert B not in rt.supervisor.status()
        assert registrations(rt) == {A: 1, B: 1, C: 1}
        ended = [e for e in rt.kubelet.events if e.kind is EventKind.STREAM_ENDED]
        assert [e.resource for e in ended] == [B]
        (result,) = await results.count(1)
    assert (result.started, result.stopped, result.updated) == ((C,), (B,), ())


async def test_configmap_swap_updates_in_place(base: Path) -> None:
    """A ``..data`` swap updates a changed resource in place; others are not registered again."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"a.yaml": config_text(definition(A)), "b.yaml": config_text(definition(B))})
    async with reloading(base, volume.target) as (rt, results):
        await rt.registered([A, B])
        a_endpoint = rt.kubelet.resources[A].endpoint
        volume.write(
            {"a.yaml": config_text(definition(A, count=3)), "b.yaml": config_text(definition(B))}
        )
        await rt.until(lambda k: k.resources[A].capacity == 3 and k.resources[A].allocatable == 3)
        assert registrations(rt) == {A: 1, B: 1}
        assert rt.kubelet.resources[A].endpoint == a_endpoint
        # Options the kubelet learns only at Register: that resource alone registers again.
        volume.write(
            {
                "a.yaml": config_text(definition(A, count=3)),
                "b.yaml": config_text(definition(B, extra="preferredAllocation: none")),
            }
        )
        await rt.until(lambda k: k.resources[B].registrations == 2 and k.resources[B].connected)
        options = rt.kubelet.resources[B].options
        assert options is not None
        assert not options.get_preferred_allocation_available
        assert registrations(rt) == {A: 1, B: 2}
        updated, reregistered = await results.count(2)
    assert updated.updated == (A,)
    assert reregistered.renewed == (B,)


async def test_invalid_config_keeps_the_old_one_serving(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An invalid config is refused with file:line; Allocate still works; a valid one applies."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": config_text(definition(A), definition(B))})
    async with reloading(base, volume.target) as (rt, results):
        await rt.registered([A, B])
        await rt.until(lambda k: k.resources[A].allocatable == 1)
        volume.write({"gdp.yaml": config_text(definition(A, count=0), definition(C))})
        (refused,) = await results.count(1)
        assert refused.outcome is Outcome.REFUSED
        response = await rt.kubelet.allocate(A, 1, pod="p")
        assert [d.host_path for d in response.container_responses[0].devices] == ["/dev/a0"]
        assert set(rt.supervisor.status()) == {A, B}
        volume.write({"gdp.yaml": config_text(definition(A), definition(C))})
        await rt.until(lambda k: C in k.resources and k.resources[C].connected)
        await rt.until(lambda k: not k.resources[B].connected)
        assert registrations(rt) == {A: 1, B: 1, C: 1}
        assert rt.kubelet.resources[A].allocated == frozenset({"a0"})
        assert (await results.count(2))[1].outcome is Outcome.APPLIED
    line = next(r.message for r in caplog.records if "config refused" in r.message)
    where = re.escape(str(volume.target / "gdp.yaml"))
    assert re.search(where + r":\d+:\d+: resources\[0\]\.count: ", line), line


async def test_identical_content_is_not_applied(base: Path) -> None:
    """Rewriting the same content touches nothing: same config object, no registration."""
    path = base / "gdp.yaml"
    text = config_text(definition(A), definition(B))
    path.write_text(text)
    async with reloading(base, path) as (rt, results):
        await rt.until(lambda k: {n: r.allocatable for n, r in k.resources.items()} == {A: 1, B: 2})
        running_config = rt.supervisor.config
        events = len(rt.kubelet.events)
        path.write_text(text)
        (result,) = await results.count(1)
        assert result.outcome is Outcome.UNCHANGED
        assert rt.supervisor.config is running_config
        assert registrations(rt) == {A: 1, B: 1}
        assert len(rt.kubelet.events) == events


# -- a real daemon ---------------------------------------------------------------------


async def _read_until(stream: asyncio.StreamReader, text: str, seen: list[str]) -> str:
    """Read log lines (kept in ``seen``) until one contains ``text``; return it."""
    async with asyncio.timeout(15):
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError(f"output ended before {text!r}:\n{''.join(seen)}")
            seen.append(raw.decode())
            if text in seen[-1]:
                return seen[-1]


async def test_serve_reloads_a_configmap(base: Path) -> None:
    """``genericdp serve`` follows ConfigMap swaps: adds, updates, refuses invalid, removes."""
    host = FakeHost(base / "host")
    host.add_plain("/dev/null")
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    null = "  - name: example.com/null\n    match: [glob: /dev/null]\n    count: {}\n"
    serial = "  - name: example.com/serial\n    match: [glob: /dev/ttyUSB*]\n"
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": config_text(null.format(2))})
    plugin_dir = base / "dp"
    argv = [
        "-m", "genericdp", "serve",
        "--config", str(volume.target),
        "--plugin-dir", str(plugin_dir),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--state-dir", str(base / "state"),
        *host.root_flags(),
        "--log-level", "info",
    ]  # fmt: skip
    env = own_env()
    env["GENERICDP_METRICS_ADDRESS"] = ""  # not this test's concern; no port to collide on
    seen: list[str] = []
    async with EmbeddedKubelet(plugin_dir) as kubelet:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert proc.stdout is not None
        try:
            await kubelet.wait_until(
                lambda k: (
                    "example.com/null" in k.resources
                    and k.resources["example.com/null"].allocatable == 2
                ),
                timeout=20,
            )
            volume.write({"gdp.yaml": config_text(null.format(3), serial)})
            await kubelet.wait_until(
                lambda k: (
                    {n: r.allocatable for n, r in k.resources.items()}
                    == {"example.com/null": 3, "example.com/serial": 1}
                ),
                timeout=10,
            )
            assert kubelet.resources["example.com/null"].registrations == 1
            volume.write({"gdp.yaml": config_text(null.format("three"), serial)})
            refused = await _read_until(proc.stdout, "config refused", seen)
            assert f"{volume.target / 'gdp.yaml'}:5:12: resources[0].count:" in refused
            volume.write({"gdp.yaml": config_text(null.format(3))})
            await kubelet.wait_until(
                lambda k: not k.resources["example.com/serial"].connected, timeout=10
            )
            assert kubelet.resources["example.com/null"].allocatable == 3
            # The kubelet sees the stream end before the reload is done and logged.
            await _read_until(proc.stdout, "stopped example.com/serial", seen)
            proc.send_signal(signal.SIGTERM)
            rest, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = "".join(seen) + rest.decode()
    assert proc.returncode == 0, log
    assert "config reloaded from" in log
    assert "started example.com/serial, updated example.com/null" in log
    assert "stopped example.com/serial" in log
    assert "Traceback" not in log
