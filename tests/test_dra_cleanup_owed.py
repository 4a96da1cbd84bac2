"""Cleanup is owed under DRA: a unit a claim held is cleaned at its unprepare with the
hook of the definition it was handed out under, whatever selectors, reloads or
restarts happened since; a unit whose definition left the config is kept out of
service until an admin deletes its ``uncleaned-*.json`` file. Real hooks (a shell
appending to a file), the embedded DRA kubelet on real sockets."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from genericdp.config.model import Config
from genericdp.discovery.model import Unit
from genericdp.dra.backend import DraBackend
from genericdp.dra.embedded import DraKubeletError
from genericdp.hooks import run_hook
from genericdp.kubeletplugin.claims import AllocatedDevice, ClaimRef
from genericdp.kubeletplugin.naming import device_name
from genericdp.metrics import Metrics
from genericdp.probes import readiness
from genericdp.runtime import owedrecords, uncleaned
from genericdp.runtime.supervisor import Supervisor
from genericdp.settings import Settings
from tests.dra_fakes import MemoryClaims
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet
from tests.polling import eventually
from tests.runtime_harness import ScriptedDiscovery, config, settings_for, unit
from tests.test_dra_backend import FakePublisher

NAME = "example.com/serial"
DRIVER = "genericdp.io"
NODE = "node-1"
LABEL = {"example.com/serial": "true"}
USB0 = device_name(NAME, "ttyUSB0")


def config_text(log: Path, *, hook: str = "A", selector: bool = True) -> str:
    """The resource, its cleanup hook writing ``<hook> <unit IDs>`` to ``log``."""
    select = "  nodeSelector: {matchLabels: {example.com/serial: 'true'}}\n" if selector else ""
    return f"""resources:
- name: {NAME}
  match: [glob: /dev/ttyUSB*]
{select}  hooks:
    cleanup: {{exec: [/bin/sh, -c, 'echo "{hook} $GENERICDP_UNIT_IDS" >> {log}']}}
"""


@dataclass
class Node:
    settings: Settings
    claims: MemoryClaims
    publisher: FakePublisher
    backend: DraBackend
    supervisor: Supervisor
    metrics: Metrics


@asynccontextmanager
async def node(
    base: Path,
    text: str,
    units: Sequence[Unit],
    kubelet: EmbeddedDraKubelet,
    *,
    labels: Mapping[str, str] | None = LABEL,
    claims: MemoryClaims | None = None,
) -> AsyncIterator[Node]:
    """The config served through DRA with real hooks, registered with ``kubelet``."""
    settings = settings_for(
        base,
        backend="dra",
        dra_registration_dir=base / "registry",
        dra_plugins_dir=base / "plugins",
    )
    claims = claims or MemoryClaims()
    publisher = FakePublisher()
    backend = DraBackend(settings, claims=claims, publisher=publisher, run_hook=run_hook)
    discovery = ScriptedDiscovery({NAME: list(units)})
    supervisor = Supervisor(
        settings, backend, discover=discovery, run_hook=run_hook, node_labels=labels
    )
    metrics = Metrics(process=False)
    metrics.track(supervisor)
    registrations = kubelet.count(DraEventKind.REGISTERED, DRIVER)
    await supervisor.start(config(text))
    try:
        await kubelet.wait_until(lambda k: k.count(DraEventKind.REGISTERED, DRIVER) > registrations)
        yield Node(settings, claims, publisher, backend, supervisor, metrics)
    finally:
        await supervisor.stop()
        await backend.close()


def ref(n: int) -> ClaimRef:
    return ClaimRef("default", f"pod-{n}", f"11111111-2222-3333-4444-55555555555{n}")


def cleanups(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def prepare(s: Node, kubelet: EmbeddedDraKubelet, n: int) -> None:
    s.claims.allocate(ref(n), [AllocatedDevice("serial", NODE, USB0)])
    await kubelet.prepare_pod(DRIVER, [ref(n)])


async def test_a_unit_is_cleaned_although_its_selector_stopped_matching(base: Path) -> None:
    """The node loses the label while a claim holds the unit, the claim is unprepared
    meanwhile: the hook runs then, once; the label back, the next claim's unprepare
    cleans it again (one cleanup per hand-out)."""
    log = base / "cleanups"
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        node(base, config_text(log), [unit("ttyUSB0")], kubelet) as s,
    ):
        await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
        await prepare(s, kubelet, 1)
        await s.supervisor.set_node_labels({})
        assert NAME not in s.publisher.slices
        await kubelet.unprepare(DRIVER, [ref(1)])
        assert cleanups(log) == ["A ttyUSB0"]
        await s.supervisor.set_node_labels(LABEL)
        await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
        await prepare(s, kubelet, 2)
        await kubelet.unprepare(DRIVER, [ref(2)])
        assert cleanups(log) == ["A ttyUSB0", "A ttyUSB0"]


async def test_the_hook_handed_out_under_runs_after_a_reload_changed_it(base: Path) -> None:
    """A reload that changes the hook while a claim holds the unit: the hook the unit
    was handed out under cleans it; the next hand-out is cleaned with the new one."""
    log = base / "cleanups"
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        node(base, config_text(log), [unit("ttyUSB0")], kubelet) as s,
    ):
        await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
        await prepare(s, kubelet, 1)
        await s.supervisor.apply(config(config_text(log, hook="B")))
        await kubelet.unprepare(DRIVER, [ref(1)])
        await prepare(s, kubelet, 2)
        await kubelet.unprepare(DRIVER, [ref(2)])
        assert cleanups(log) == ["A ttyUSB0", "B ttyUSB0"]


async def test_a_restart_that_no_longer_serves_the_resource_still_cleans(base: Path) -> None:
    """The daemon restarts while the node lacks the label: the checkpoint carries the
    hook, so the claim's unprepare cleans the unit."""
    log = base / "cleanups"
    claims = MemoryClaims()
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        async with node(base, config_text(log), [unit("ttyUSB0")], kubelet, claims=claims) as s:
            await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
            await prepare(s, kubelet, 1)
        async with node(base, config_text(log), [unit("ttyUSB0")], kubelet, labels={}) as s:
            await kubelet.unprepare(DRIVER, [ref(1)])
            assert cleanups(log) == ["A ttyUSB0"]


async def test_a_unit_whose_definition_left_stays_out_until_released(base: Path) -> None:
    """The resource leaves the config while a claim holds the unit: no hook runs at its
    unprepare; the unit is recorded uncleaned (log, metric, /readyz) and, the resource
    back, left out of the slice and refused by prepare, through a restart, until
    its file is deleted."""
    log = base / "cleanups"
    text = config_text(log, selector=False)
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        async with node(base, text, [unit("ttyUSB0"), unit("ttyUSB1")], kubelet) as s:
            both = (("ttyUSB0", "ttyUSB1"), frozenset[str]())
            await s.publisher.until(lambda p: p.slices.get(NAME) == both)
            await prepare(s, kubelet, 1)
            await s.supervisor.apply(Config(resources=()))
            await kubelet.unprepare(DRIVER, [ref(1)])
            assert cleanups(log) == []
            (owed,) = (base / "plugins" / DRIVER).glob("uncleaned-*.json")
            gauge = "genericdp_dra_units_uncleaned"
            assert s.metrics.registry.get_sample_value(gauge) == 1
            (note,) = s.supervisor.notes()
            assert f"{NAME}: unit ttyUSB0 out of service" in note
            assert str(owed) in note
            assert note in readiness(s.supervisor.status(), started=True, notes=[note]).text
        async with node(base, text, [unit("ttyUSB0"), unit("ttyUSB1")], kubelet) as s:
            await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB1",), frozenset()))
            s.claims.allocate(ref(2), [AllocatedDevice("serial", NODE, USB0)])
            with pytest.raises(DraKubeletError, match="is out of service"):
                await kubelet.prepare(DRIVER, [ref(2)])
            owed.unlink()  # the admin cleaned the device by hand
            await s.publisher.until(lambda p: p.slices.get(NAME) == both)
            await eventually(lambda: not s.supervisor.notes(), "the note gone")
            assert s.metrics.registry.get_sample_value(gauge) == 0
            await kubelet.prepare_pod(DRIVER, [ref(2)])
            await kubelet.unprepare(DRIVER, [ref(2)])
            assert cleanups(log) == ["A ttyUSB0"]


def test_uncleaned_files_are_read_as_hostile_input(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO, a symbolic link, an oversized file, non-JSON and a record under another
    unit's name are logged and not used (none blocks, is followed or is trusted); a record
    under its own name is."""
    directory = base / "plugin"
    directory.mkdir()
    entry = uncleaned.Uncleaned(NAME, "ttyUSB0", USB0, "default/pod-1", "now", "why")
    uncleaned.record(directory, entry)
    (directory / "uncleaned-link.json").symlink_to(next(directory.glob("uncleaned-*.json")))
    os.mkfifo(directory / "uncleaned-fifo.json")
    (directory / "uncleaned-big.json").write_bytes(b" " * (owedrecords.MAX_BYTES + 1))
    (directory / "uncleaned-text.json").write_text("not json")
    other = uncleaned.Uncleaned(NAME, "ttyUSB9", "x", "default/pod-2", "now", "why")
    (directory / "uncleaned-moved.json").write_text(
        json.dumps(
            {k: getattr(other, k) for k in ("resource", "unit", "device", "claim", "since", "why")}
        )
    )
    assert uncleaned.load(directory) == {(NAME, "ttyUSB0"): entry}
    logged = [r.getMessage() for r in caplog.records if "uncleaned-" in r.getMessage()]
    assert len(logged) == 5
    assert any("uncleaned-link.json" in m and "symbolic link, never followed" in m for m in logged)
