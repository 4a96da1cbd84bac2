"""The DRA backend in the supervisor: each resource's runner feeds the driver's
inventory and the slices; the embedded DRA kubelet registers the driver, sees
the probes' health and prepares claims of discovered units."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.discovery.model import Unit
from genericdp.dra.backend import DraBackend, DraSetupError
from genericdp.dra.embedded import DraKubeletError, resolve_cdi
from genericdp.hooks import HookRun
from genericdp.kubeletplugin.claims import AllocatedDevice, ClaimRef
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.kubeletplugin.slices import DEFAULT_OPTIONS, DeviceOptions
from genericdp.metrics import Metrics
from genericdp.probes import readiness
from genericdp.runtime.supervisor import Supervisor
from genericdp.settings import Settings
from tests.dra_fakes import MemoryClaims, MemorySlices
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet
from tests.polling import eventually
from tests.runtime_harness import ScriptedDiscovery, config, settings_for, unit

NAME = "example.com/serial"
DRIVER = "genericdp.io"
NODE = "node-1"
CONFIG = f"""resources:
- name: {NAME}
  match: [glob: /dev/ttyUSB*]
  allocate:
    env: {{SERIAL: "{{{{ units[0].id }}}}"}}
  health:
    exec: [/bin/sh, -c, 'test "$GENERICDP_UNIT_ID" != ttyUSB1 || {{ echo no carrier; exit 3; }}']
    interval: 60s
  hooks:
    init: {{exec: [/bin/true]}}
    cleanup: {{exec: [/bin/true]}}
"""


class FakePublisher:
    """The contract's SlicePublisher, recording what it is told."""

    def __init__(self) -> None:
        self.slices: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        self.options: dict[str, DeviceOptions] = {}
        self.withdrawn: list[str] = []
        self.expected: list[str] = []
        self._changed = asyncio.Condition()

    async def until(self, check: Callable[[FakePublisher], bool]) -> None:
        """Wait until ``check(self)`` holds, checked at each publish (10 s at most)."""
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: check(self))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def expect(self, resource: str) -> None:
        self.expected.append(resource)

    async def publish(
        self,
        resource: str,
        units: Sequence[Unit],
        unhealthy: AbstractSet[str],
        *,
        options: DeviceOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.slices[resource] = (tuple(u.id for u in units), frozenset(unhealthy))
        self.options[resource] = options
        await self._notify()

    async def withdraw(self, resource: str) -> None:
        self.slices.pop(resource, None)
        self.withdrawn.append(resource)
        await self._notify()


@dataclass
class Served:
    """A DRA backend on fakes (claims, publisher) under a supervisor of scripted units."""

    settings: Settings
    claims: MemoryClaims
    publisher: FakePublisher
    backend: DraBackend
    discovery: ScriptedDiscovery
    supervisor: Supervisor
    hooks: list[HookRun]


@asynccontextmanager
async def serving(
    base: Path, text: str, units: Sequence[Unit], *, broken: bool = False
) -> AsyncIterator[tuple[Served, EmbeddedDraKubelet]]:
    """The config ``text`` served through DRA (hooks recorded, not run) with the embedded
    DRA kubelet, once it has registered the driver; ``broken``: the first scans fail."""
    hooks: list[HookRun] = []

    async def run_hook(hook: HookRun) -> None:
        hooks.append(hook)

    settings = settings_for(
        base,
        backend="dra",
        dra_registration_dir=base / "registry",
        dra_plugins_dir=base / "plugins",
    )
    claims, publisher = MemoryClaims(), FakePublisher()
    backend = DraBackend(settings, claims=claims, publisher=publisher, run_hook=run_hook)
    discovery = ScriptedDiscovery({NAME: list(units)}, broken={NAME} if broken else set())
    supervisor = Supervisor(settings, backend, discover=discovery, run_hook=run_hook)
    served = Served(settings, claims, publisher, backend, discovery, supervisor, hooks)
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        await supervisor.start(config(text))
        try:
            await kubelet.wait_until(lambda k: k.registered(DRIVER))
            yield served, kubelet
        finally:
            await supervisor.stop()
            await backend.close()


async def test_resources_are_served_through_dra(base: Path) -> None:
    async with serving(base, CONFIG, [unit("ttyUSB0"), unit("ttyUSB1")]) as (s, kubelet):
        usb0, usb1 = device_name(NAME, "ttyUSB0"), device_name(NAME, "ttyUSB1")
        verdicts = {
            (NODE, usb0): ("Healthy", ""),
            (NODE, usb1): ("Unhealthy", "health probe exited 3: no carrier"),
        }
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == verdicts)
        published = (("ttyUSB0", "ttyUSB1"), frozenset({"ttyUSB1"}))
        await s.publisher.until(lambda p: p.slices.get(NAME) == published)
        await s.supervisor.wait_for(lambda statuses: statuses[NAME].registered)
        assert s.supervisor.status()[NAME].devices == 2
        ref = ClaimRef("default", "pod-serial", "11111111-2222-3333-4444-555555555555")
        s.claims.allocate(ref, [AllocatedDevice("serial", NODE, usb0)])
        ids = await kubelet.prepare_pod(DRIVER, [ref])
        edits = resolve_cdi(s.settings.cdi_dir, ids)
        assert edits["env"] == ["SERIAL=ttyUSB0"]
        assert [(h.name, tuple(u.id for u in h.units)) for h in s.hooks] == [("init", ("ttyUSB0",))]
        # A claim for the unhealthy unit fails, saying so.
        bad = ClaimRef("default", "pod-bad", "11111111-2222-3333-4444-000000000000")
        s.claims.allocate(bad, [AllocatedDevice("serial", NODE, usb1)])
        with pytest.raises(DraKubeletError, match="is not healthy"):
            await kubelet.prepare(DRIVER, [bad])
        # Hotplug: a new unit reaches the slice and the health stream.
        s.discovery.units[NAME] = [unit("ttyUSB0"), unit("ttyUSB1"), unit("ttyUSB2")]
        s.supervisor.rescan("hotplug")
        three = ("ttyUSB0", "ttyUSB1", "ttyUSB2")
        await s.publisher.until(lambda p: p.slices.get(NAME, ((),))[0] == three)
        usb2 = (NODE, device_name(NAME, "ttyUSB2"))
        await kubelet.wait_until(lambda k: k.device_health(DRIVER).get(usb2) == ("Healthy", ""))
        # A required allocate.devices node goes missing: Unhealthy, saying which.
        incomplete = replace(unit("ttyUSB2"), missing=("/dev/gdp-ctl",))
        s.discovery.units[NAME] = [unit("ttyUSB0"), unit("ttyUSB1"), incomplete]
        s.supervisor.rescan("unplug of a control node")
        missing = ("Unhealthy", "required device node(s) missing: /dev/gdp-ctl")
        await kubelet.wait_until(lambda k: k.device_health(DRIVER).get(usb2) == missing)
        await kubelet.unprepare(DRIVER, [ref])
        assert [h.name for h in s.hooks] == ["init", "cleanup"]
    assert s.publisher.withdrawn == [NAME]
    assert not (base / "registry" / f"{DRIVER}-reg.sock").exists()


async def no_hook(hook: HookRun) -> None:  # noqa: ARG001 -- the HookRunner signature
    return None


def test_the_backend_needs_the_node_name(base: Path) -> None:
    settings = settings_for(base, backend="dra", node_name="")
    with pytest.raises(DraSetupError, match="GENERICDP_NODE_NAME"):
        DraBackend(settings, claims=MemoryClaims(), publisher=FakePublisher(), run_hook=no_hook)


async def test_ready_only_once_every_resource_is_scanned_and_published(base: Path) -> None:
    """/readyz under DRA: the kubelet's registration of the driver is not enough."""
    async with serving(base, CONFIG, [unit("ttyUSB0")], broken=True) as (s, kubelet):
        await kubelet.wait_until(lambda k: k.count(DraEventKind.REGISTERED, DRIVER) > 0)
        assert s.backend.driver.registration.service.registrations > 0, "told so"
        await s.discovery.wait_calls(NAME, 1)  # its first scan failed
        verdict = readiness(s.supervisor.status(), started=True)
        assert not verdict.ok
        assert NAME in verdict.text
        assert NAME not in s.publisher.slices
        s.discovery.broken.clear()
        s.supervisor.rescan("the device is back")
        # Polled: a DRA resource's first publish signals no status change.
        await eventually(
            lambda: readiness(s.supervisor.status(), started=True).ok, "ready after the scan"
        )
        # Published before ready; Healthy once its probe (a shell, run apart
        # from the scan) has passed: readiness does not wait for probes.
        assert s.publisher.slices[NAME][0] == ("ttyUSB0",)
        await s.publisher.until(lambda p: p.slices[NAME] == (("ttyUSB0",), frozenset()))


async def _no_hook(hook: HookRun) -> None:
    """No hook runs in this test."""


async def test_the_kubelet_watch_gauge_is_the_device_plugin_backends_alone(base: Path) -> None:
    """Under DRA nothing watches the device-plugin directory, so its gauge is not exported;
    the device-plugin backend exports it (0 until its watch runs)."""
    settings = settings_for(base, backend="dra", node_name=NODE)
    dra = DraBackend(settings, claims=MemoryClaims(), publisher=FakePublisher(), run_hook=_no_hook)
    under_dra, under_device_plugin = Metrics(process=False), Metrics(process=False)
    under_dra.track(Supervisor(settings, dra))
    under_device_plugin.track(Supervisor(settings, DevicePluginBackend(settings)))
    watch = "genericdp_kubelet_watch_up"
    assert under_dra.registry.get_sample_value(watch) is None
    assert under_dra.registry.get_sample_value("genericdp_dra_slices_foreign") == 0
    assert under_device_plugin.registry.get_sample_value(watch) == 0


SHARED_CONFIG = f"""resources:
- name: {NAME}
  match: [glob: /dev/ttyUSB*]
  count: 2
  dra: {{taintEffect: NoExecute}}
  hooks:
    cleanup: {{exec: [/bin/true]}}
"""


async def test_a_unit_unplugged_under_claims_stays_tainted_until_their_unprepare(
    base: Path,
) -> None:
    """Unplug while in use, as under the device plugin: the unit stays in the slice,
    tainted with the resource's effect and streamed Unhealthy saying its nodes are
    gone, to both claims that share it; it leaves once the last claim is unprepared
    (cleanup runs then, once), and a replug with the same ID is Healthy again."""
    usb0 = device_name(NAME, "ttyUSB0")
    async with serving(base, SHARED_CONFIG, [unit("ttyUSB0")]) as (s, kubelet):
        await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
        options = s.publisher.options[NAME]
        assert (options.shares, options.taint_effect) == (2, "NoExecute")
        refs = [
            ClaimRef("default", f"pod-{n}", f"11111111-2222-3333-4444-55555555555{n}")
            for n in (1, 2)
        ]
        for ref in refs:
            s.claims.allocate(ref, [AllocatedDevice("serial", NODE, usb0)])
        await kubelet.prepare_pod(DRIVER, refs)
        assert kubelet.claims_of(NODE, usb0) == tuple(sorted(r.uid for r in refs))
        s.discovery.units[NAME] = []
        s.supervisor.rescan("unplug")
        await s.publisher.until(
            lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset({"ttyUSB0"}))
        )
        gone = ("Unhealthy", "device nodes gone: /dev/ttyUSB0")
        await kubelet.wait_until(
            lambda k: all(k.claim_health(DRIVER, r.uid) == {usb0: gone} for r in refs)
        )
        await kubelet.unprepare(DRIVER, refs[:1])
        assert not s.hooks, "cleanup waits for the unit's last claim"
        assert s.publisher.slices[NAME] == (("ttyUSB0",), frozenset({"ttyUSB0"}))
        await kubelet.unprepare(DRIVER, refs[1:])
        await s.publisher.until(lambda p: p.slices.get(NAME) == ((), frozenset()))
        assert [
            (h.name, tuple(n.host_path for u in h.units for n in u.nodes)) for h in s.hooks
        ] == [("cleanup", ("/dev/ttyUSB0",))]
        assert s.backend.driver.inventory.locate(usb0) is None  # nor in the health stream
        s.discovery.units[NAME] = [unit("ttyUSB0")]
        s.supervisor.rescan("replug")
        await s.publisher.until(lambda p: p.slices.get(NAME) == (("ttyUSB0",), frozenset()))
        healthy = ("Healthy", "no health check configured")
        await kubelet.wait_until(lambda k: k.device_health(DRIVER).get((NODE, usb0)) == healthy)


async def test_slice_watch_restarts_are_counted_by_reason(base: Path) -> None:
    """``genericdp_dra_slice_watch_restarts_total``: every reason at 0 from the start,
    and a watch the server ends counted as ``ended``."""
    settings = settings_for(base, backend="dra", node_name=NODE)
    store = MemorySlices()
    publisher = SlicePublisher(store, adopt_grace=0)
    dra = DraBackend(settings, claims=MemoryClaims(), publisher=publisher, run_hook=_no_hook)
    metrics = Metrics(process=False)
    metrics.track(Supervisor(settings, dra))
    name = "genericdp_dra_slice_watch_restarts_total"

    def restarts(reason: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"reason": reason})

    assert [restarts(r) for r in ("ended", "expired", "failed")] == [0, 0, 0]
    await publisher.start()
    try:
        await eventually(lambda: store.watches == 1, "the watch open")
        store.end_watches()
        await eventually(lambda: restarts("ended") == 1, "the end counted")
        assert [restarts(r) for r in ("expired", "failed")] == [0, 0]
    finally:
        await publisher.close()
