"""The DeviceClass reconciler's watches against an API server that ends every watch
at once: each is reopened after our own backoff (``ListWatch``), from the list's
resourceVersion, never in a loop of its own; the list and each event wake the sync."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from genericdp.aio import TaskSet
from genericdp.deviceclasses.api import ClassApi
from genericdp.deviceclasses.sync import ClassReconciler
from genericdp.kube.client import connect
from tests.ending_api import EndingServer, kubeconfig
from tests.polling import eventually

# Backoff(initial=0.5) with its jitter: no reopen comes sooner than this.
LEAST_GAP = 0.25


@pytest.mark.parametrize(
    ("kind", "path"), [("classes", "deviceclasses"), ("slices", "resourceslices")]
)
async def test_a_watch_the_server_ends_at_once_is_reopened_after_a_backoff(
    tmp_path: Path, kind: str, path: str
) -> None:
    ending = EndingServer()
    async with ending as url:
        client = connect(kubeconfig(tmp_path / "kubeconfig", url))
        sync = ClassReconciler(ClassApi(client, driver="gdp.example"), leading=lambda: True)
        tasks = TaskSet()
        tasks.spawn(f"watch-{kind}", lambda: sync.watch(kind))
        try:
            await eventually(lambda: len(ending.watches()) >= 3, "three watch requests")
        finally:
            await tasks.stop()
            await client.close()
    watches = ending.watches()
    gaps = [b - a for a, b in itertools.pairwise(watches)]
    assert min(gaps) >= LEAST_GAP, f"watches reopened {gaps} s apart"
    assert all(path in p for p in ending.paths)
    assert all("resourceVersion=7" in p for p in ending.paths if "watch=true" in p)
    if kind == "slices":
        assert all("spec.driver%3Dgdp.example" in p for p in ending.paths)
    # the list, then one watch at a time
    assert "watch=true" not in ending.paths[0]
