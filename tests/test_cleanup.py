"""Cleanup hooks end to end: the embedded kubelet's PodResources List, real hook processes."""

from __future__ import annotations

import asyncio
import logging
import stat
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest

from genericdp.aio import Backoff
from genericdp.config.model import Config
from genericdp.kubelet.embedded.admission import AllocationError
from genericdp.runtime.supervisor import Supervisor
from tests.kubelet_fakes import EmbeddedKubelet
from tests.polling import eventually
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    allocate_request,
    config,
    device_plugin,
    plugin_stub,
    running,
    settings_for,
    unit,
)

SERIAL = "example.com/serial"

# Records each run, then waits while <dir>/hold exists and fails while <dir>/fail exists.
HOOK = """#!/bin/sh
dir="$1"
env | grep '^GENERICDP_' | sort > "$dir/.env-$$" && mv "$dir/.env-$$" "$dir/env-$GENERICDP_UNIT_ID"
echo "$GENERICDP_UNIT_ID" >> "$dir/runs"
while [ -e "$dir/hold" ]; do sleep 0.01; done
if [ -e "$dir/fail" ]; then echo "scrub: device busy"; exit 3; fi
echo "$GENERICDP_UNIT_ID" >> "$dir/done"
"""


class Hook:
    """The cleanup script in ``dir`` and what it left there."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir()
        self.script = directory / "cleanup.sh"
        self.script.write_text(HOOK)
        self.script.chmod(self.script.stat().st_mode | stat.S_IXUSR)

    def config(self, *, count: int = 1, extra: str = "") -> Config:
        return config(
            f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n  count: {count}\n"
            f"  hooks:\n    cleanup: {{exec: [{self.script}, {self.dir}], timeout: 5s}}\n{extra}"
        )

    def lines(self, name: str) -> list[str]:
        path = self.dir / name
        return path.read_text().split() if path.exists() else []

    def env(self, unit_id: str) -> dict[str, str]:
        text = (self.dir / f"env-{unit_id}").read_text()
        return dict(line.split("=", 1) for line in text.splitlines())

    def flag(self, name: str, *, on: bool) -> None:
        path = self.dir / name
        if on:
            path.touch()
        else:
            path.unlink(missing_ok=True)


def serving(
    base: Path,
    cfg: Config,
    discovery: ScriptedDiscovery,
    *,
    pod_resources: bool = True,
    poll: float = 0.05,
    **overrides: Any,
) -> AbstractAsyncContextManager[Running]:
    """The supervisor against an embedded kubelet that serves PodResources (or not)."""
    return running(
        base,
        cfg,
        discover=discovery,
        cleanup_backoff=lambda: Backoff(initial=0.05, maximum=0.1),  # retries in tests are quick
        pod_resources=pod_resources,
        pod_resources_socket=base / "pr.sock",
        pod_resources_poll_interval=poll,
        **overrides,
    )


async def _allocatable(rt: Running, count: int) -> None:
    await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == count)


async def _listed(rt: Running, *ids: str) -> None:
    """Wait until the poller has seen these IDs held (and no others)."""
    await eventually(lambda: rt.usage.listed(SERIAL) == set(ids))


async def test_release_runs_cleanup_with_the_unit_in_its_environment(base: Path) -> None:
    """A released unit's cleanup runs once, with the GENERICDP_* variables of that unit."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    async with serving(base, hook.config(), discovery) as rt:
        await _allocatable(rt, 2)
        response = await rt.kubelet.allocate(SERIAL, 1, pod="p")
        (taken,) = [d.host_path for d in response.container_responses[0].devices]
        uid = taken.removeprefix("/dev/")
        await _listed(rt, uid)
        assert hook.lines("runs") == []
        rt.kubelet.release("default", "p")
        await eventually(lambda: hook.lines("done") == [uid])
        env = hook.env(uid)
        assert len(env.pop("GENERICDP_RUN_ID")) == 16  # marks what the hook starts
        assert env == {
            "GENERICDP_CONTAINER_PATHS": f"/dev/{uid}",
            "GENERICDP_DEVICE_IDS": uid,
            "GENERICDP_DEVICE_PATHS": f"/dev/{uid}",
            "GENERICDP_HOOK": "cleanup",
            "GENERICDP_NODE_NAME": "node-1",
            "GENERICDP_RESOURCE": SERIAL,
            "GENERICDP_UNIT_ID": uid,
            "GENERICDP_UNIT_IDS": uid,
        }
        await _allocatable(rt, 2)
        assert hook.lines("runs") == [uid]


async def test_unit_is_out_of_service_while_cleaned(base: Path) -> None:
    """During cleanup the unit is Unhealthy, the kubelet cannot pick it and Allocate refuses it."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(), discovery) as rt:
        await _allocatable(rt, 1)
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        await _listed(rt, "ttyUSB0")
        hook.flag("hold", on=True)
        rt.kubelet.release("default", "p")
        await rt.until(
            lambda k: k.resources[SERIAL].capacity == 1 and k.resources[SERIAL].allocatable == 0
        )
        assert rt.supervisor.status()[SERIAL].healthy == 0
        with pytest.raises(AllocationError):
            await rt.kubelet.allocate(SERIAL, 1, pod="q")
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Allocate(allocate_request("ttyUSB0"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unit ttyUSB0 is being cleaned up" in (info.value.details() or "")
        hook.flag("hold", on=False)
        await _allocatable(rt, 1)
        assert hook.lines("done") == ["ttyUSB0"]
        await rt.kubelet.allocate(SERIAL, 1, pod="q")


async def test_shared_unit_is_cleaned_after_its_last_replica(base: Path) -> None:
    """With count > 1, releasing one replica cleans nothing; releasing the last cleans once."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(count=2), discovery) as rt:
        await _allocatable(rt, 2)
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        await rt.kubelet.allocate(SERIAL, 1, pod="q")
        await _listed(rt, "ttyUSB0::0", "ttyUSB0::1")
        rt.kubelet.release("default", "p")
        await eventually(lambda: len(rt.usage.listed(SERIAL)) == 1)
        assert rt.kubelet.resources[SERIAL].allocatable == 2  # nothing went out of service
        assert hook.lines("runs") == []
        rt.kubelet.release("default", "q")
        await eventually(lambda: hook.lines("done") == ["ttyUSB0"])
        assert hook.env("ttyUSB0")["GENERICDP_DEVICE_IDS"] in ("ttyUSB0::0", "ttyUSB0::1")
        await _allocatable(rt, 2)
        assert hook.lines("runs") == ["ttyUSB0"]


async def test_failing_cleanup_keeps_the_unit_out_of_service_until_it_passes(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed cleanup is logged with its output and retried; the unit serves once it passes."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    caplog.set_level(logging.INFO)
    async with serving(base, hook.config(), discovery) as rt:
        await _allocatable(rt, 1)
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        await _listed(rt, "ttyUSB0")
        hook.flag("fail", on=True)
        rt.kubelet.release("default", "p")
        await eventually(lambda: len(hook.lines("runs")) >= 3)
        assert rt.kubelet.resources[SERIAL].allocatable == 0
        assert hook.lines("done") == []
        messages = [r.getMessage() for r in caplog.records]
        assert any("scrub: device busy" in m for m in messages)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(
            "unit ttyUSB0 out of service until its cleanup passes" in m and "exited 3" in m
            for m in errors
        )
        hook.flag("fail", on=False)
        await _allocatable(rt, 1)
        assert hook.lines("done") == ["ttyUSB0"]


async def test_missing_pod_resources_socket_cleans_nothing_and_recovers(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without PodResources nothing is cleaned, one line is logged; it recovers when it appears."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    caplog.set_level(logging.INFO, logger="genericdp.deviceplugin.poller")
    async with serving(base, hook.config(), discovery, pod_resources=False) as rt:
        await _allocatable(rt, 2)
        response = await rt.kubelet.allocate(SERIAL, 1, pod="p")
        first = response.container_responses[0].devices[0].host_path.removeprefix("/dev/")
        await eventually(lambda: any("cannot read PodResources" in m for m in caplog.messages))
        rt.kubelet.release("default", "p")
        # The kubelet comes back with PodResources: the first answer is a baseline.
        rt.kubelet.pod_resources_socket = rt.settings.pod_resources_socket
        await rt.kubelet.restart()
        await eventually(lambda: any("answers again" in m for m in caplog.messages))
        warnings = [m for m in caplog.messages if "cannot read PodResources" in m]
        assert len(warnings) == 1
        assert str(rt.settings.pod_resources_socket) in warnings[0]
        assert hook.lines("runs") == []
        await _allocatable(rt, 2)
        await rt.kubelet.allocate(SERIAL, 2, pod="q")
        # No List ever showed p's unit free: it is cleaned before q gets it.
        assert hook.lines("done") == [first]
        await _listed(rt, "ttyUSB0", "ttyUSB1")
        rt.kubelet.release("default", "q")
        expected = sorted([first, "ttyUSB0", "ttyUSB1"])
        await eventually(lambda: sorted(hook.lines("done")) == expected)


async def test_unit_shorter_lived_than_a_poll_is_cleaned_before_its_next_allocate(
    base: Path,
) -> None:
    """A unit freed and asked for again before any poll saw it is cleaned inside Allocate."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(), discovery, poll=3600.0) as rt:
        await _allocatable(rt, 1)
        await eventually(lambda: rt.usage.has_baseline)
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        rt.kubelet.release("default", "p")
        assert hook.lines("runs") == []
        await rt.kubelet.allocate(SERIAL, 1, pod="q")
        assert hook.lines("done") == ["ttyUSB0"]  # before the Allocate answered
        await _allocatable(rt, 1)  # Healthy again (and held by q)


async def test_failed_cleanup_inside_allocate_refuses_the_pod(base: Path) -> None:
    """When the cleanup Allocate runs first fails, the pod is rejected and the unit retried."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(), discovery, poll=3600.0) as rt:
        await _allocatable(rt, 1)
        await eventually(lambda: rt.usage.has_baseline)
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        rt.kubelet.release("default", "p")
        hook.flag("fail", on=True)
        with pytest.raises(AllocationError, match="unit ttyUSB0 is being cleaned up"):
            await rt.kubelet.allocate(SERIAL, 1, pod="q")
        await eventually(lambda: len(hook.lines("runs")) >= 2)  # retried in the background
        assert rt.kubelet.resources[SERIAL].allocatable == 0
        hook.flag("fail", on=False)
        await _allocatable(rt, 1)
        await rt.kubelet.allocate(SERIAL, 1, pod="r")
        assert hook.lines("done") == ["ttyUSB0"]


async def test_units_unplugged_while_held_are_cleaned_once_at_release(base: Path) -> None:
    """Units that leave discovery while a pod holds them are not cleaned under it: one
    comes back with the same ID, one stays gone; the release cleans each once (the gone
    one as it was handed out)."""
    hook = Hook(base / "hook")
    units = [unit("ttyUSB0"), unit("ttyUSB1"), unit("ttyUSB2")]
    discovery = ScriptedDiscovery({SERIAL: units})
    async with serving(base, hook.config(), discovery, rescan_interval=0.05) as rt:
        await _allocatable(rt, 3)
        await rt.kubelet.allocate(SERIAL, 3, pod="p")
        await _listed(rt, "ttyUSB0", "ttyUSB1", "ttyUSB2")
        discovery.units[SERIAL] = [unit("ttyUSB0")]
        await rt.until(lambda k: not k.resources[SERIAL].devices["ttyUSB1"].healthy)
        discovery.units[SERIAL] = [unit("ttyUSB0"), unit("ttyUSB1")]
        await rt.until(lambda k: k.resources[SERIAL].devices["ttyUSB1"].healthy)
        assert hook.lines("runs") == []
        rt.kubelet.release("default", "p")
        await eventually(lambda: sorted(hook.lines("done")) == ["ttyUSB0", "ttyUSB1", "ttyUSB2"])
        assert hook.env("ttyUSB2")["GENERICDP_DEVICE_PATHS"] == "/dev/ttyUSB2"
        await _allocatable(rt, 2)
        assert sorted(hook.lines("runs")) == ["ttyUSB0", "ttyUSB1", "ttyUSB2"]


async def test_shutdown_lets_a_running_cleanup_finish(base: Path) -> None:
    """On stop a cleanup that is running finishes (within the grace), and nothing is left over."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    settings = settings_for(
        base, pod_resources_socket=base / "pr.sock", pod_resources_poll_interval=0.05
    )
    async with EmbeddedKubelet(
        settings.plugin_dir, pod_resources_socket=base / "pr.sock"
    ) as kubelet:
        backend = device_plugin(settings)
        supervisor = Supervisor(settings, backend, discover=discovery)
        await supervisor.start(hook.config())
        rt = Running(kubelet, supervisor, settings, backend)
        await _allocatable(rt, 1)
        await kubelet.allocate(SERIAL, 1, pod="p")
        await _listed(rt, "ttyUSB0")
        hook.flag("hold", on=True)
        kubelet.release("default", "p")
        await eventually(lambda: hook.lines("runs") == ["ttyUSB0"])
        stopping = asyncio.create_task(supervisor.stop())
        await rt.until(lambda k: not k.resources[SERIAL].connected)
        assert not stopping.done()
        hook.flag("hold", on=False)
        assert await stopping == ()
        assert hook.lines("done") == ["ttyUSB0"]
