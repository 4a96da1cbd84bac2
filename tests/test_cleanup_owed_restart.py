"""Cleanup is owed across a restart of the device-plugin daemon: a unit handed out is
cleaned with the hook it was handed out under (kept in ``stateDir``), whether its pod
went while the daemon was down or still holds it, never with the hook of the config the
daemon restarts with; a record that cannot be used keeps its unit out of service. One
embedded kubelet (its PodResources too) outlives two daemons; real hook processes."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from genericdp.aio import Backoff
from genericdp.config.model import Config
from genericdp.dra.backend import DraBackend
from genericdp.runtime.owed import Owed
from genericdp.runtime.supervisor import Supervisor
from tests.kubelet_fakes import EmbeddedKubelet
from tests.polling import eventually
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    allocate_request,
    device_plugin,
    plugin_stub,
    settings_for,
    unit,
)
from tests.test_cleanup import SERIAL, Hook

RECORDS = "owed-device-plugin-*.json"


@asynccontextmanager
async def _kubelet(base: Path) -> AsyncIterator[EmbeddedKubelet]:
    async with EmbeddedKubelet(base / "dp", pod_resources_socket=base / "pr.sock") as kubelet:
        yield kubelet


@asynccontextmanager
async def _daemon(
    base: Path, kubelet: EmbeddedKubelet, cfg: Config, discovery: ScriptedDiscovery
) -> AsyncIterator[Running]:
    """One daemon's life against ``kubelet``: started on ``cfg``, stopped as on SIGTERM."""
    settings = settings_for(
        base, pod_resources_socket=base / "pr.sock", pod_resources_poll_interval=0.05
    )
    backend = device_plugin(settings)
    supervisor = Supervisor(
        settings,
        backend,
        discover=discovery,
        cleanup_backoff=lambda: Backoff(initial=0.05, maximum=0.1),
    )
    await supervisor.start(cfg)
    try:
        yield Running(kubelet, supervisor, settings, backend)
    finally:
        supervisor.shutting_down()
        assert await supervisor.stop() == ()


async def _hand_out(rt: Running, pod: str) -> str:
    """Allocate one unit to ``pod`` and wait until PodResources shows it held."""
    await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable >= 1)
    response = await rt.kubelet.allocate(SERIAL, 1, pod=pod)
    uid = response.container_responses[0].devices[0].host_path.removeprefix("/dev/")
    await eventually(lambda: uid in rt.usage.listed(SERIAL))
    return uid


async def _refused(rt: Running, uid: str, reason: str) -> None:
    async with plugin_stub(rt.socket(SERIAL)) as stub:
        with pytest.raises(grpc.aio.AioRpcError, match=reason):
            await stub.Allocate(allocate_request(uid))


async def test_a_unit_released_while_down_is_cleaned_with_its_hook_before_reuse(
    base: Path,
) -> None:
    """Handed out under one hook, its pod gone while the daemon is down, the daemon back
    with another hook: the first hook runs once, and until it has passed nobody gets
    the unit; the next hand-out is cleaned with the new hook."""
    first, second = Hook(base / "first"), Hook(base / "second")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _kubelet(base) as kubelet:
        async with _daemon(base, kubelet, first.config(), discovery) as rt:
            uid = await _hand_out(rt, "p")
        assert len(list((base / "state").glob(RECORDS))) == 1
        kubelet.release("default", "p")
        first.flag("hold", on=True)  # the cleanup, once started, waits for us
        async with _daemon(base, kubelet, second.config(), discovery) as rt:
            await eventually(lambda: first.lines("runs") == [uid], "the recorded hook started")
            await rt.registered([SERIAL])
            await rt.until(lambda k: k.resources[SERIAL].capacity == 1)
            assert kubelet.resources[SERIAL].allocatable == 0
            await _refused(rt, uid, "cleanup owed by its last hand-out is running")
            first.flag("hold", on=False)
            await eventually(lambda: first.lines("done") == [uid])
            await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
            assert list((base / "state").glob(RECORDS)) == []
            assert await _hand_out(rt, "q") == uid
            rt.kubelet.release("default", "q")
            await eventually(lambda: second.lines("done") == [uid])
            await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        assert first.lines("runs") == [uid]
        assert second.lines("runs") == [uid]


async def test_a_unit_held_across_a_restart_is_cleaned_with_its_hook_at_release(
    base: Path,
) -> None:
    """Handed out under one hook, still held when the daemon comes back with another:
    nothing runs under the pod; its release runs the first hook, once."""
    first, second = Hook(base / "first"), Hook(base / "second")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _kubelet(base) as kubelet:
        async with _daemon(base, kubelet, first.config(), discovery) as rt:
            uid = await _hand_out(rt, "p")
        async with _daemon(base, kubelet, second.config(), discovery) as rt:
            await rt.registered([SERIAL])
            await eventually(lambda: uid in rt.usage.listed(SERIAL))
            answers = rt.usage.answers
            await eventually(lambda: rt.usage.answers > answers + 2)
            assert first.lines("runs") == []
            assert second.lines("runs") == []
            rt.kubelet.release("default", "p")
            await eventually(lambda: first.lines("done") == [uid])
            await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
            assert list((base / "state").glob(RECORDS)) == []
        assert first.lines("runs") == [uid]
        assert second.lines("runs") == []


async def test_unusable_records_keep_their_units_out_of_service(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Records changed while the daemon was down (a hook that is not a command, a file
    anyone may write) and one that is not JSON: each is refused with a log line and set
    aside; the units they name stay out of service as uncleaned, until an admin deletes
    their files; no hook runs."""
    caplog.set_level(logging.INFO, logger="genericdp")
    first, second = Hook(base / "first"), Hook(base / "second")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    state = base / "state"
    async with _kubelet(base) as kubelet:
        async with _daemon(base, kubelet, first.config(), discovery) as rt:
            held = {await _hand_out(rt, "p"), await _hand_out(rt, "q")}
        kubelet.release("default", "p")
        kubelet.release("default", "q")
        records = {json.loads(p.read_text())["unit"]: p for p in state.glob(RECORDS)}
        assert set(records) == held == {"ttyUSB0", "ttyUSB1"}
        doc = json.loads(records["ttyUSB0"].read_text())
        doc["cleanup"]["argv"] = "rm -rf /"
        records["ttyUSB0"].write_text(json.dumps(doc))
        records["ttyUSB1"].chmod(0o666)
        garbage = state / "owed-device-plugin-0000.json"
        garbage.write_bytes(b"\x00not json")
        async with _daemon(base, kubelet, second.config(), discovery) as rt:
            await rt.registered([SERIAL])
            await rt.until(lambda k: k.resources[SERIAL].capacity == 2)
            assert kubelet.resources[SERIAL].allocatable == 0
            for uid in held:
                await _refused(rt, uid, "out of service")
            assert len(list(state.glob("uncleaned-*.json"))) == 2
            assert len(rt.supervisor.notes()) == 2
            for path in state.glob("uncleaned-*.json"):
                path.unlink()  # the admin cleaned both devices by hand
            await rt.until(lambda k: k.resources[SERIAL].allocatable == 2)
        assert first.lines("runs") == []
        assert second.lines("runs") == []
        assert list(state.glob(RECORDS)) == []
        assert len(list(state.glob("owed-device-plugin-*.unusable"))) == 3
    refused = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(refused) == 3
    assert any("cleanup.argv is not a list" in m for m in refused)
    assert any("writable by it alone" in m for m in refused)
    assert any(str(garbage) in m and "JSON" in m for m in refused)
    assert not any(r.exc_info for r in caplog.records)


async def test_no_unit_is_handed_out_without_its_record(base: Path) -> None:
    """The state directory cannot be written (a file stands in its place): Allocate is
    refused with FAILED_PRECONDITION, saying why, and the unit stays free; nothing is
    owed a cleanup."""
    hook = Hook(base / "hook")
    (base / "state").write_text("not a directory\n")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _kubelet(base) as kubelet, _daemon(base, kubelet, hook.config(), discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError, match="cannot keep the owed cleanup") as no:
                await stub.Allocate(allocate_request("ttyUSB0"))
        assert no.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # not UNKNOWN
        assert rt.usage.in_use(SERIAL) == frozenset()
        assert rt.supervisor.watched() == {SERIAL}  # served; no cleanup owed


async def test_a_dra_daemon_reads_no_record_of_the_device_plugin(base: Path) -> None:
    """The records' names are the device plugin's own: a DRA daemon given the same
    state directory neither loads them nor touches them."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _kubelet(base) as kubelet, _daemon(base, kubelet, hook.config(), discovery) as rt:
        await _hand_out(rt, "p")
    (record,) = (base / "state").glob(RECORDS)
    before = record.read_bytes()
    owed = Owed(base / "state", DraBackend.owed_records)
    owed.load()
    assert not owed.resources()
    assert owed.uncleaned == {}
    assert record.read_bytes() == before
