"""Runtime building blocks: device state versions, guarded tasks, backoff, socket names."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from genericdp.config.model import Config, GlobMatcher, ResourceDefinition
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.deviceplugin.kubeletwatch import DirChange, watch_plugin_dir
from genericdp.deviceplugin.replicas import Replicas, device_list
from genericdp.deviceplugin.sockets import remove_stale_sockets, socket_name
from genericdp.discovery.model import Unit
from genericdp.errors import KubeletError
from genericdp.kubelet.devices import DeviceInfo
from genericdp.kubelet.servicer import list_response
from genericdp.runtime.state import DeviceState
from genericdp.runtime.supervisor import Supervisor
from genericdp.unixgrpc import MAX_MESSAGE_BYTES
from tests.runtime_harness import settings_for


def _unit(uid: str, numa: int | None = None) -> Unit:
    return Unit(id=uid, nodes=(), numa_node=numa)


def test_state_lists_replicas_with_shared_health() -> None:
    """count makes replica IDs; an unhealthy unit makes all its replicas unhealthy."""
    state = DeviceState(Replicas(2))
    state.set_units([_unit("b", 1), _unit("a")])
    state.set_unhealthy({"b"})
    assert tuple(device_list(state)) == (
        DeviceInfo("a::0", True, None),
        DeviceInfo("a::1", True, None),
        DeviceInfo("b::0", False, 1),
        DeviceInfo("b::1", False, 1),
    )


def test_with_probes_expected_units_are_unhealthy_until_probed() -> None:
    """A unit the health monitor has not probed yet is Unhealthy, also for Allocate."""
    state = DeviceState(Replicas())
    state.expect_probes(True)
    state.set_units([_unit("a"), _unit("b")])
    assert [d.healthy for d in device_list(state)] == [False, False]
    assert state.lookup(["a"]).unhealthy == ("a",)
    assert state.set_unhealthy({"b"}, probed={"a", "b"})
    assert [d.healthy for d in device_list(state)] == [True, False]
    state.set_units([_unit("a"), _unit("b"), _unit("c")])  # hotplug: c not probed yet
    assert [d.healthy for d in device_list(state)] == [True, False, False]
    assert state.expect_probes(False)  # the probe was removed from the definition
    assert [d.healthy for d in device_list(state)] == [True, True, True]


def test_state_version_moves_only_on_change() -> None:
    """Same units or same health again do not bump the version (no ListAndWatch resend)."""
    state = DeviceState()
    assert state.set_units([_unit("a")])
    v = state.version
    assert not state.set_units([_unit("a")])
    assert not state.set_unhealthy(())
    assert state.version == v
    assert state.set_unhealthy({"a"})
    assert state.version == v + 1


def test_state_lookup_reports_unknown_and_unhealthy() -> None:
    """lookup separates unknown IDs, unhealthy IDs and the units behind the rest."""
    state = DeviceState(Replicas(2))
    state.set_units([_unit("a"), _unit("b")])
    state.set_unhealthy({"b"})
    found = state.lookup(["b::1", "a::0", "a::1", "zz"])
    assert [u.id for u in found.units] == ["a", "b"]
    assert found.unknown == ("zz",)
    assert found.unhealthy == ("b::1",)


async def test_state_wait_changed_wakes_and_closes() -> None:
    """wait_changed returns the new version on change and None once closed."""
    state = DeviceState()
    waiter = asyncio.create_task(state.wait_changed(state.version))
    await asyncio.sleep(0)
    state.set_units([_unit("a")])
    assert await waiter == 1
    closing = asyncio.create_task(state.wait_changed(state.version))
    await asyncio.sleep(0)
    state.close()
    assert await closing is None


def test_socket_name_is_unique_short_and_ours() -> None:
    """Socket names start with gdp-, differ per start and stay short for long resource names."""
    a, b = socket_name("example.com/serial"), socket_name("example.com/serial")
    assert a != b
    assert a.startswith("gdp-example.com-serial-")
    assert a.endswith(".sock")
    long = socket_name("a" * 200 + ".example.com/" + "x" * 63)
    assert len(long) < 64


def test_remove_stale_sockets_keeps_live_ones(tmp_path: Path) -> None:
    """Our sockets nobody listens on are removed; live ones and others' files stay."""
    with socket.socket(socket.AF_UNIX) as live, socket.socket(socket.AF_UNIX) as dead:
        live.bind(str(tmp_path / "gdp-live-1.sock"))
        live.listen()
        dead.bind(str(tmp_path / "gdp-dead-1.sock"))
        (tmp_path / "kubelet_internal_checkpoint").write_text("{}")
        removed = remove_stale_sockets(tmp_path)
    assert removed == [tmp_path / "gdp-dead-1.sock"]
    assert (tmp_path / "gdp-live-1.sock").exists()
    assert (tmp_path / "kubelet_internal_checkpoint").exists()


def test_list_response_clipped_under_limit(caplog: pytest.LogCaptureFixture) -> None:
    """A device list over 4 MiB is clipped to fit, with an error log naming the resource."""
    devices = [DeviceInfo(f"{i:060d}::{i % 1000}", True, 0) for i in range(60_000)]
    response = list_response(devices, resource="example.com/big")
    assert response.ByteSize() <= MAX_MESSAGE_BYTES
    assert 0 < len(response.devices) < len(devices)
    assert "example.com/big" in caplog.text
    small = list_response(devices[:10], resource="example.com/big")
    assert len(small.devices) == 10
    assert small.devices[0].topology.nodes[0].ID == 0


async def test_plugin_dir_watch_reports_batches_and_loss(tmp_path: Path) -> None:
    """The watch reports created and deleted names, and fails clearly when the dir goes."""
    watched = tmp_path / "dp"
    watched.mkdir()
    changes: list[DirChange] = []
    changed = asyncio.Event()
    ready = asyncio.Event()

    def record(change: DirChange) -> None:
        changes.append(change)
        changed.set()

    task = asyncio.create_task(watch_plugin_dir(watched, record, on_ready=ready.set))
    await asyncio.wait_for(ready.wait(), 5)
    (watched / "kubelet.sock").write_text("")
    await asyncio.wait_for(changed.wait(), 5)
    assert "kubelet.sock" in changes[0].created
    changed.clear()
    (watched / "kubelet.sock").unlink()
    await asyncio.wait_for(changed.wait(), 5)
    assert "kubelet.sock" in changes[-1].deleted
    watched.rmdir()
    with pytest.raises(KubeletError, match="removed or replaced"):
        await asyncio.wait_for(task, 5)
    assert changes[-1].lost


async def test_watch_of_missing_dir_fails_clearly(tmp_path: Path) -> None:
    """Watching a directory that does not exist raises KubeletError naming it."""
    with pytest.raises(KubeletError, match="cannot watch"):
        await watch_plugin_dir(tmp_path / "absent", lambda _change: None)


async def test_socket_path_too_long_is_a_clear_error(tmp_path: Path) -> None:
    """A plugin dir too deep for a unix socket path leaves a status error naming the limit."""
    plugin_dir = tmp_path / ("d" * 100)
    plugin_dir.mkdir()
    settings = settings_for(tmp_path, plugin_dir=plugin_dir)
    definition = ResourceDefinition(name="example.com/serial", match=(GlobMatcher("/dev/x"),))
    supervisor = Supervisor(
        settings, DevicePluginBackend(settings), discover=lambda _d, _r: [_unit("x")]
    )
    try:
        await supervisor.start(Config(resources=(definition,)))
        statuses = await supervisor.wait_for(
            lambda s: s["example.com/serial"].last_error is not None
        )
    finally:
        assert await supervisor.stop() == ()
    error = statuses["example.com/serial"].last_error or ""
    assert "107 bytes" in error
    assert not statuses["example.com/serial"].registered
