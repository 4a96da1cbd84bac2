"""An API server that drops device taints (DRADeviceTaints off: the default before
1.36) never gets an unhealthy device as allocatable: the publisher sees the taint
dropped in what the server stored, says so once, and leaves tainted devices out of
the slices until they are healthy again. Against a real kube-apiserver started
with ``--feature-gates=DRADeviceTaints=false``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from genericdp.dra.backend import DraBackend
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.naming import device_name
from genericdp.metrics import Metrics
from genericdp.runtime.supervisor import Supervisor
from tests.apiserver import ApiServer, start
from tests.apiserver import missing as apiserver_missing
from tests.dra_apislices import api_slices, connected, devices_held, fresh_node, running, unit
from tests.dra_fakes import MemoryClaims
from tests.runtime_harness import settings_for

RESOURCE = "example.com/serial"


@pytest.fixture(scope="module")
def untainting() -> Iterator[ApiServer]:
    """A kube-apiserver whose DRADeviceTaints feature gate is off."""
    reason = apiserver_missing()
    if reason is not None:
        pytest.skip(f"needs a real kube-apiserver: {reason}")
    server = start(["--feature-gates=DRADeviceTaints=false"])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def untainting_client(untainting: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    async with connected(untainting) as api:
        yield api


async def _no_hook(hook: object) -> None:
    """No hook runs in this test."""


async def test_unhealthy_devices_are_left_out_when_the_server_drops_taints(
    untainting_client: kubeapi.AsyncClient, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The unhealthy device is not in the slices the server holds (with its taint gone it
    would be allocatable), one warning says why, the metrics count it; healthy again,
    it is published."""
    caplog.set_level(logging.WARNING, logger="genericdp.kubeletplugin.publisher")
    node = fresh_node("untainted")
    store = api_slices(untainting_client, node)
    async with running(store) as publisher:
        settings = settings_for(base, backend="dra", node_name=node)
        backend = DraBackend(
            settings, claims=MemoryClaims(), publisher=publisher, run_hook=_no_hook
        )
        metrics = Metrics(process=False)
        metrics.track(Supervisor(settings, backend))
        units = [unit("ttyUSB0"), unit("ttyUSB1")]
        await publisher.publish(RESOURCE, units, {"ttyUSB1"})
        assert await publisher.flush()
        found = await devices_held(untainting_client, node)
        assert sorted(found) == [device_name(RESOURCE, "ttyUSB0")]
        warnings = [r.message for r in caplog.records if "DRADeviceTaints" in r.message]
        assert len(warnings) == 1
        sample = metrics.registry.get_sample_value
        assert sample("genericdp_dra_taints_dropped") == 1
        assert sample("genericdp_dra_unhealthy_devices_unpublished") == 1
        # Another device fails: left out at once, no second warning.
        await publisher.publish(RESOURCE, units, {"ttyUSB0", "ttyUSB1"})
        assert await publisher.flush()
        assert await devices_held(untainting_client, node) == {}
        assert sample("genericdp_dra_unhealthy_devices_unpublished") == 2
        await publisher.publish(RESOURCE, units, set())
        assert await publisher.flush()
        found = await devices_held(untainting_client, node)
        assert sorted(found) == sorted(device_name(RESOURCE, u.id) for u in units)
        assert not any("taints" in d for d in found.values())
        assert sample("genericdp_dra_unhealthy_devices_unpublished") == 0
        assert len([r for r in caplog.records if "DRADeviceTaints" in r.message]) == 1
