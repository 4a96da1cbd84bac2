"""A backend of its own plugs into the runtime (``runtime/backend.py``, ``runtime/edge.py``).

The runner's discovery, health, hooks, cleanup and state serve an edge that
is not the device plugin: no socket, no Register, no kubelet. The backend
here is one class of this test: what a third backend (an NRI plugin, say)
would write.
"""

from __future__ import annotations

from pathlib import Path

from genericdp.config.model import Config
from genericdp.deviceplugin.allocator import Allocator
from genericdp.deviceplugin.cleanup import Cleaner
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.hooks import HookRun
from genericdp.runtime.backend import Backend, Fleet, Gauge, ResourceParts
from genericdp.runtime.edge import Edge, PluginStatus
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
    """What a DRA edge does with the runner: publish the units; and allocate, through an
    allocator of its own (the device plugin's)."""

    task = "publish"

    def __init__(self, parts: ResourceParts, usage: UsageTracker) -> None:
        self.definition, self.state = parts.definition, parts.state
        self.allocator = Allocator(parts, usage=usage, cleaner=Cleaner(parts))
        self.wakes = 0
        self.published: list[tuple[str, ...]] = []
        self.closed = False
        EDGES.append(self)

    async def run(self) -> None:
        version = -1
        while (changed := await self.state.wait_changed(version)) is not None:
            version = changed
            self.published.append(tuple(sorted(self.state.units)))

    def wake(self) -> None:
        self.wakes += 1

    def status(self) -> PluginStatus:
        units, out = self.state.units_view(), self.state.out
        healthy = sum(1 for uid in units if uid not in out)
        return PluginStatus(self.definition().name, bool(self.wakes), 0, len(units), healthy)

    async def close(self) -> tuple[str, ...]:
        self.closed = True
        self.state.close()
        return ()


EDGES: list[PublishingEdge] = []


class PublishingBackend:
    """A whole backend: one edge per resource, no daemon-wide task, no metric of its own."""

    settled_timeout = 0.0
    owed_records = None
    where = "a test"

    def __init__(self) -> None:
        self.usage = UsageTracker()  # what the allocator hands out is kept
        self.usage.settled.set()

    def edge(self, parts: ResourceParts) -> PublishingEdge:
        return PublishingEdge(parts, self.usage)

    async def start(self, fleet: Fleet) -> None:
        pass

    def started(self, fleet: Fleet) -> None:
        pass

    def gauges(self) -> tuple[Gauge, ...]:
        return ()

    def shutting_down(self) -> None:
        pass

    def configured(self, config: Config) -> None:
        pass

    def notes(self) -> tuple[str, ...]:
        return ()


def _is_edge(edge: Edge) -> Edge:  # mypy checks that PublishingEdge meets the protocol
    return edge


def _is_backend(backend: Backend) -> Backend:  # and that PublishingBackend meets its own
    return backend


async def test_a_supervisor_runs_another_edge_with_the_same_runner(tmp_path: Path) -> None:
    """Discovery reaches the edge through the state, the edge is woken after the first
    scan, allocates through the allocator (template and init hook), and is closed."""
    EDGES.clear()
    hooks: list[HookRun] = []

    async def run_hook(hook: HookRun) -> None:
        hooks.append(hook)

    (tmp_path / "dp").mkdir()  # the device-plugin directory: nothing is served there
    discovery = ScriptedDiscovery({NAME: [unit("ttyUSB0"), unit("ttyUSB1")]})
    backend = PublishingBackend()
    supervisor = Supervisor(
        settings_for(tmp_path), _is_backend(backend), discover=discovery, run_hook=run_hook
    )
    await supervisor.start(config(CONFIG))
    try:
        (edge,) = EDGES
        _is_edge(edge)
        await eventually(lambda: ("ttyUSB0", "ttyUSB1") in edge.published, "units published")
        assert edge.wakes == 1
        assert supervisor.status()[NAME].devices == 2
        (answer,) = await edge.allocator.allocate([("ttyUSB1",)], tuple)
        assert dict(answer.env) == {"SERIAL": "ttyUSB1"}
        assert [(h.name, h.device_ids) for h in hooks] == [("init", ("ttyUSB1",))]
        assert backend.usage.in_use(NAME) == {"ttyUSB1"}
        assert not list(tmp_path.joinpath("dp").glob("*.sock"))  # no device plugin served
    finally:
        assert await supervisor.stop() == ()
    assert edge.closed
