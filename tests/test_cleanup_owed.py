"""Cleanup is owed on the device-plugin path: a unit handed out is cleaned at its release
with the hook of the definition it was handed out under, whatever selectors or
reloads happened since, and never while a container holds it; a unit whose
definition left the config is kept out of service until an admin deletes its
``uncleaned-*.json``. The embedded kubelet's PodResources, real hook processes."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from genericdp.kubelet.embedded.admission import AllocationError
from genericdp.metrics import Metrics
from genericdp.probes import readiness
from tests.polling import eventually
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    allocate_request,
    config,
    plugin_stub,
    unit,
)
from tests.test_cleanup import SERIAL, Hook, serving

LABEL = {"example.com/serial": "present"}
SELECTED = "  nodeSelector: {matchLabels: {example.com/serial: present}}\n"
OTHER = "resources:\n- name: example.com/other\n  match: [glob: /dev/other*]\n"


async def _hand_out(rt: Running, pod: str) -> str:
    """Allocate the one unit to ``pod`` and wait until PodResources shows it held.

    A cleanup's hook may have ended while the kubelet still shows the unit as before
    it (the list that says Unhealthy, cleaning, still on its way): an Allocate the
    kubelet refuses for that, as it would a pod's, is tried again once the unit is
    allocatable anew."""
    for attempt in range(3):
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        try:
            response = await rt.kubelet.allocate(SERIAL, 1, pod=pod)
            break
        except AllocationError as exc:
            if "no healthy devices" not in str(exc) or attempt == 2:
                raise
    uid = response.container_responses[0].devices[0].host_path.removeprefix("/dev/")
    await eventually(lambda: rt.usage.listed(SERIAL) == {uid})
    return uid


async def test_a_selector_flap_cleans_at_release_not_under_the_pod(base: Path) -> None:
    """The node loses the label while a pod holds the unit: nothing runs under the pod;
    its release runs the hook once, although nothing serves the resource; the label
    back, the next hand-out is cleaned once more (one cleanup per hand-out)."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(extra=SELECTED), discovery, node_labels=LABEL) as rt:
        uid = await _hand_out(rt, "p")
        await rt.supervisor.set_node_labels({})
        await rt.until(lambda k: not k.resources[SERIAL].connected)
        # A poll or two while the pod still holds the unit: still nothing runs.
        answers = rt.usage.answers
        await eventually(lambda: rt.usage.answers > answers + 2)
        assert hook.lines("runs") == []
        rt.kubelet.release("default", "p")
        await eventually(lambda: hook.lines("done") == [uid])
        await rt.supervisor.set_node_labels(LABEL)
        assert await _hand_out(rt, "q") == uid
        rt.kubelet.release("default", "q")
        await eventually(lambda: hook.lines("done") == [uid, uid])
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        assert hook.lines("runs") == [uid, uid]


async def test_the_hook_handed_out_under_runs_after_a_reload_changed_it(base: Path) -> None:
    """A reload changes the hook while a pod holds the unit: its release runs the hook
    it was handed out under; the next hand-out is cleaned with the new one."""
    first, second = Hook(base / "first"), Hook(base / "second")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, first.config(), discovery) as rt:
        uid = await _hand_out(rt, "p")
        await rt.supervisor.apply(second.config())
        rt.kubelet.release("default", "p")
        await eventually(lambda: first.lines("done") == [uid])
        assert await _hand_out(rt, "q") == uid
        rt.kubelet.release("default", "q")
        await eventually(lambda: second.lines("done") == [uid])
        assert first.lines("runs") == [uid]


async def test_a_unit_whose_definition_left_stays_out_until_an_admin_releases_it(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The resource leaves the config while a pod holds the unit: nothing runs then nor
    at the release (its hook is no longer the config's); the unit is recorded
    uncleaned (log, metric, /readyz) and, the resource back, refused by Allocate and
    listed Unhealthy until its file is deleted."""
    caplog.set_level(logging.INFO, logger="genericdp")
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with serving(base, hook.config(), discovery) as rt:
        metrics = Metrics(process=False)
        metrics.track(rt.supervisor)
        uid = await _hand_out(rt, "p")
        await rt.supervisor.apply(config(OTHER))
        assert list(rt.supervisor.status()) == ["example.com/other"]
        rt.kubelet.release("default", "p")
        state = base / "state"
        await eventually(lambda: list(state.glob("uncleaned-*.json")) != [], "recorded")
        (owed,) = state.glob("uncleaned-*.json")
        assert hook.lines("runs") == []
        assert metrics.registry.get_sample_value("genericdp_units_uncleaned") == 1
        (note,) = rt.supervisor.notes()
        assert f"{SERIAL}: unit {uid} out of service" in note
        assert str(owed) in note
        assert note in readiness(rt.supervisor.status(), started=True, notes=[note]).text
        assert any(
            r.levelno == logging.ERROR and "is not cleaned" in r.getMessage()
            for r in caplog.records
        )

        await rt.supervisor.apply(hook.config())
        await rt.registered([SERIAL])
        await rt.until(lambda k: k.resources[SERIAL].capacity == 1)
        assert rt.kubelet.resources[SERIAL].allocatable == 0
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError, match="out of service"):
                await stub.Allocate(allocate_request(uid))
        owed.unlink()  # the admin cleaned the device by hand
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        assert rt.supervisor.notes() == ()
        assert metrics.registry.get_sample_value("genericdp_units_uncleaned") == 0
        assert await _hand_out(rt, "q") == uid
        rt.kubelet.release("default", "q")
        await eventually(lambda: hook.lines("done") == [uid])
