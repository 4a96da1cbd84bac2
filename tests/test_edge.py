"""A second backend's edge plugs into the per-resource runner (``runtime/edge.py``).

The runner's discovery, health, hooks, cleanup and state serve an edge that
is not the device plugin: no socket, no Register, no kubelet.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from genericdp.config.model import ResourceDefinition
from genericdp.hooks import HookRun
from genericdp.runtime.allocator import Allocator
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.edge import Edge, PluginStatus
from genericdp.runtime.kubeletwatch import DirChange
from genericdp.runtime.state import DeviceState
from genericdp.runtime.supervisor import Supervisor
from tests.polling import eventually
from tests.runtime_harness import ScriptedDiscovery, config, settings_for, unit

NAME = "example.com/serial"
CONFIG = f"""resources:
- name: {NAME}
  match: [glob: /dev/ttyUSB*]
  allocate:
    env: {{SERIAL: "{{{{ units[0].id }}}}"}}
  hooks:
    init: {{exec: [/bin/true]}}
"""


class PublishingEdge:
    """What a DRA edge does with the runner: publish the units, prepare through the allocator."""

    task = "publish"

    def __init__(
        self,
        definition: Callable[[], ResourceDefinition],
        state: DeviceState,
        context: ResourceContext,
        allocator: Allocator,
    ) -> None:
        self.definition, self.state, self.allocator = definition, state, allocator
        self.wakes: list[str] = []
        self.published: list[tuple[str, ...]] = []
        self.closed = False
        EDGES.append(self)

    async def run(self) -> None:
        version = -1
        while (changed := await self.state.wait_changed(version)) is not None:
            version = changed
            self.published.append(tuple(sorted(self.state.units)))

    def wake(self, reason: str, *, renew: bool = False) -> None:
        self.wakes.append(reason)

    def plugin_dir_changed(self, change: DirChange) -> None:
        pass

    def status(self) -> PluginStatus:
        devices, healthy = self.state.counts()
        return PluginStatus(self.definition().name, None, bool(self.wakes), 0, 0, devices, healthy)

    async def close(self) -> None:
        self.closed = True
        self.state.close()


EDGES: list[PublishingEdge] = []


def _is_edge(edge: Edge) -> Edge:  # mypy checks that PublishingEdge meets the protocol
    return edge


async def test_a_supervisor_runs_another_edge_with_the_same_runner(tmp_path: Path) -> None:
    """Discovery reaches the edge through the state, the edge is woken after the first
    scan, allocates through the allocator (template and init hook), and is closed."""
    EDGES.clear()
    hooks: list[HookRun] = []

    async def run_hook(hook: HookRun) -> None:
        hooks.append(hook)

    (tmp_path / "dp").mkdir()  # the kubelet's directory, watched as usual
    discovery = ScriptedDiscovery({NAME: [unit("ttyUSB0"), unit("ttyUSB1")]})
    supervisor = Supervisor(
        settings_for(tmp_path), discover=discovery, run_hook=run_hook, edge=PublishingEdge
    )
    await supervisor.start(config(CONFIG))
    try:
        (edge,) = EDGES
        _is_edge(edge)
        await eventually(lambda: ("ttyUSB0", "ttyUSB1") in edge.published, "units published")
        assert edge.wakes == ["start"]
        assert supervisor.status()[NAME].devices == 2
        (answer,) = await edge.allocator.allocate([("ttyUSB1",)], tuple)
        assert dict(answer.env) == {"SERIAL": "ttyUSB1"}
        assert [(h.name, h.device_ids) for h in hooks] == [("init", ("ttyUSB1",))]
        assert supervisor.usage.in_use(NAME) == frozenset({"ttyUSB1"})
        assert not list(tmp_path.joinpath("dp").glob("*.sock"))  # no device plugin served
    finally:
        assert await supervisor.stop() == ()
    assert edge.closed
