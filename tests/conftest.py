"""Fixtures every test file shares."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from genericdp.kube import client as kubeapi
from tests.apiserver import ApiServer
from tests.apiserver import missing as apiserver_missing
from tests.apiserver import start as start_apiserver
from tests.dra_apislices import connected
from tests.hostenv import HOST_PATHS
from tests.kubelet_fakes import EmbeddedKubelet, short_tmp_dir
from tests.leaks import reap_leaked


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async test checks for leaked tasks, set up first and so torn down last."""
    for item in items:
        if isinstance(item, pytest.Function) and asyncio.iscoroutinefunction(item.obj):
            item.fixturenames.insert(0, "no_leaked_tasks")


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running after it and its fixtures ended.

    A leaked task outlives what it works on: it fails later in someone else's
    test, or hides a shutdown that does not stop what it started.
    """
    before = asyncio.all_tasks()
    yield
    if leaked := await reap_leaked(before):
        pytest.fail(f"the test left asyncio tasks running: {', '.join(leaked)}")


@pytest.fixture
def base() -> Iterator[Path]:
    """A temporary directory short enough for unix sockets (sun_path is 107 bytes)."""
    with short_tmp_dir() as path:
        yield path


@pytest.fixture
async def kubelet(base: Path) -> AsyncIterator[EmbeddedKubelet]:
    """A running embedded kubelet on ``base/dp``, serving PodResources too."""
    pod_resources = base / "pod-resources" / "kubelet.sock"
    async with EmbeddedKubelet(base / "dp", pod_resources_socket=pod_resources) as kubelet:
        yield kubelet


@pytest.fixture(autouse=True)
def no_host_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings built in-process (and ``serve`` run with this environment) never default to
    the host's kubelet, CDI, state or NFD directories (``hostenv``)."""
    for name, leaf in HOST_PATHS.items():
        monkeypatch.setenv(name, str(tmp_path / leaf))


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ApiServer]:
    """A real kube-apiserver and etcd for the session (tests/apiserver.py); skipped without them."""
    reason = apiserver_missing()
    if reason is not None:
        pytest.skip(f"needs a real kube-apiserver: {reason}")
    server = start_apiserver()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    """A client of the session's API server, closed after the test."""
    async with connected(apiserver) as api:
        yield api
