"""Sharing and unplug under DRA without an API server: what ``count`` and
``dra.taintEffect`` make of a device, and claims that share one unit at prepare."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from genericdp.config import load_text
from genericdp.config.model import Hooks
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra.edge import MAX_MESSAGE, gone_message
from genericdp.errors import ConfigError
from genericdp.hooks import HookRun
from genericdp.kubeletplugin.claims import AllocatedDevice
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.slices import SHARES_CAPACITY, DeviceOptions, devices
from tests.dra_fakes import (
    HOOK,
    NODE,
    SERIAL,
    RecordedHooks,
    allocated,
    claim,
    definition,
    setup,
    unit,
)

CONFIG = """\
version: v1
resources:
  - name: example.com/kvm
    match: [glob: /dev/kvm]
"""


def test_count_and_unbounded_become_shares_and_multiple_allocations() -> None:
    """count: 3 is three shares of one device, unbounded any number, count: 1 none."""
    second = "  - {name: example.com/tun, match: [glob: /dev/net/tun], count: unbounded}\n"
    text = CONFIG + "    count: 3\n" + second
    config = load_text(text, "c.yaml")
    kvm, tun = (DeviceOptions.of(d) for d in config.resources)
    u = Unit("kvm", (DeviceNode("/dev/kvm", "/dev/kvm"),))
    [shared] = devices("example.com/kvm", [u], set(), driver="d.io", options=kvm)
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"][SHARES_CAPACITY]["value"] == "3"
    assert shared["capacity"][SHARES_CAPACITY]["requestPolicy"]["default"] == "1"
    [unbounded] = devices("example.com/tun", [u], set(), driver="d.io", options=tun)
    assert unbounded["allowMultipleAllocations"] is True
    assert "capacity" not in unbounded
    [alone] = devices("example.com/kvm", [u], set(), driver="d.io")
    assert "allowMultipleAllocations" not in alone
    assert "capacity" not in alone
    [off] = devices(
        "example.com/kvm", [u], set(), driver="d.io", options=DeviceOptions(shares=3, sharing=False)
    )
    assert "allowMultipleAllocations" not in off


@pytest.mark.parametrize("effect", ["None", "NoSchedule", "NoExecute"])
def test_the_taint_effect_is_the_resources(effect: str) -> None:
    """dra.taintEffect reaches the taint of an unhealthy device; NoSchedule by default."""
    config = load_text(CONFIG + f"    dra: {{taintEffect: {effect}}}\n", "c.yaml")
    options = DeviceOptions.of(config.resources[0])
    u = Unit("kvm", (DeviceNode("/dev/kvm", "/dev/kvm"),))
    [made] = devices("example.com/kvm", [u], {"kvm"}, driver="d.io", options=options)
    assert made["taints"] == [{"key": "d.io/unhealthy", "value": "true", "effect": effect}]
    default = DeviceOptions.of(load_text(CONFIG, "c.yaml").resources[0])
    assert default.taint_effect == "NoSchedule"


def test_an_unknown_taint_effect_is_refused_where_it_is() -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(CONFIG + "    dra: {taintEffect: Evict}\n", "c.yaml")
    [issue] = caught.value.issues
    assert (issue.line, issue.path) == (5, "resources[0].dra.taintEffect")
    assert "NoExecute" in issue.message


def test_the_gone_message_names_the_nodes_and_stays_short() -> None:
    nodes = tuple(DeviceNode(f"/dev/{'x' * 200}{i}", "/dev/x") for i in range(20))
    message = gone_message(Unit("u", nodes))
    assert message.startswith(f"device nodes gone: /dev/{'x' * 200}0, ")
    assert len(message) <= MAX_MESSAGE
    assert gone_message(Unit("u", ())) == "device nodes gone: not found since the daemon started"


async def test_claims_sharing_a_unit_each_init_and_the_last_cleans(base: Path) -> None:
    """init per claim, as per Allocate under the device plugin; cleanup once the
    unit's last claim is unprepared; each claim its own CDI spec."""
    s = setup(base, [(definition(hooks=Hooks(init=HOOK, cleanup=HOOK)), [unit(0)])])
    changes: list[int] = []
    s.preparer.on_change = lambda: changes.append(len(list(s.checkpoint)))
    for n in (1, 2, 3):
        s.claims.allocate(claim(n), allocated(SERIAL, unit(0)))
    answer = await s.preparer.prepare([claim(1), claim(2)])
    assert [r.error for r in answer.values()] == ["", ""]
    assert (await s.preparer.prepare([claim(3)]))[claim(3).uid].error == ""
    assert s.hooks.names() == ["init", "init", "init"]
    assert len(list(s.cdi_dir.glob("*.json"))) == 3
    assert await s.preparer.unprepare([claim(1)]) == {claim(1).uid: ""}
    assert s.hooks.names() == ["init"] * 3  # two claims still hold it
    # The last two at once: the unit is cleaned once, by whichever goes last.
    assert await s.preparer.unprepare([claim(2), claim(3)]) == {claim(2).uid: "", claim(3).uid: ""}
    assert s.hooks.names() == ["init"] * 3 + ["cleanup"]
    assert s.hooks.runs[-1][2] == ("A0",)
    assert list(s.cdi_dir.glob("*.json")) == []
    assert changes == [1, 2, 3, 2, 1, 0]  # each claim recorded, then forgotten: all seen


async def test_a_claim_with_several_shares_of_one_device_prepares_it_once(base: Path) -> None:
    """Two requests of one claim may each get a share of the same device."""
    s = setup(base, [(definition(hooks=Hooks(init=HOOK)), [unit(0)])])
    name = device_name(SERIAL, "A0")
    s.claims.allocate(claim(), [AllocatedDevice("a", NODE, name), AllocatedDevice("b", NODE, name)])
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert result.error == ""
    assert s.hooks.runs == [("init", SERIAL, ("A0",), (name,))]


class SlowCleanup(RecordedHooks):
    """Hooks whose cleanup waits for ``release``; ``order`` says when each began and ended."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.cleaning = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, hook: HookRun) -> object:
        self.order.append(f"{hook.name} start")
        if hook.name == "cleanup":
            self.cleaning.set()
            await self.release.wait()
        self.order.append(f"{hook.name} end")
        return await super().__call__(hook)


async def test_an_init_waits_for_the_cleanup_of_its_unit(base: Path) -> None:
    """A prepare of a unit whose last claim is being cleaned runs init after cleanup."""
    hooks = SlowCleanup()
    d = definition(hooks=Hooks(init=HOOK, cleanup=HOOK))
    s = setup(base, [(d, [unit(0)])], hooks=hooks)
    for n in (1, 2):
        s.claims.allocate(claim(n), allocated(SERIAL, unit(0)))
    await s.preparer.prepare([claim(1)])
    unprepare = asyncio.create_task(s.preparer.unprepare([claim(1)]))
    await hooks.cleaning.wait()
    prepare = asyncio.create_task(s.preparer.prepare([claim(2)]))
    for _ in range(50):  # turns of the loop (no timer): the prepare gets as far as it can
        await asyncio.sleep(0)
    assert hooks.order == ["init start", "init end", "cleanup start"]
    hooks.release.set()
    await unprepare
    assert (await prepare)[claim(2).uid].error == ""
    assert hooks.order[3:] == ["cleanup end", "init start", "init end"]
