"""The watch of the node's ResourceSlices against a hostile API server on loopback that
ends every watch at once, answers it 410 Gone, or 504 Too large resource version: the
requests stay bounded by our own backoff, and an unwatchable version lists again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.publisher import SlicePublisher
from tests.ending_api import EndingServer, kubeconfig
from tests.polling import eventually

NODE = "hostile-node"
# The watch's backoff (0.5 s doubling, jittered by half) puts at least this long
# between the first watch request and the fifth.
FIVE_WATCHES = 0.25 + 0.5 + 1.0 + 2.0


@dataclass(frozen=True)
class Seen:
    """What the server was asked, and the publisher's watch restarts by reason."""

    server: EndingServer
    restarts: dict[str, int]


@pytest.fixture
async def watching(tmp_path: Path, request: pytest.FixtureRequest) -> Seen:
    """A publisher with nothing to publish, watching the slices on ``EndingServer(**param)``
    until the server has seen five watch requests."""
    ending = EndingServer(**request.param)
    async with ending as url:
        client = kubeapi.connect(kubeconfig(tmp_path / "kubeconfig", url))
        publisher = SlicePublisher(ApiSlices(client, node=NODE), adopt_grace=0)
        await publisher.start()
        try:
            await eventually(lambda: len(ending.watches()) >= 5, "five watches", timeout=30)
            restarts = publisher.watch_restarts
        finally:
            await publisher.close()
            await client.close()
    return Seen(ending, restarts)


@pytest.mark.parametrize("watching", [{}], indirect=True, ids=["ending at once"])
async def test_watches_the_server_ends_at_once_are_reopened_after_a_backoff(
    watching: Seen,
) -> None:
    """Each ends cleanly and is opened again from the same version after a growing delay,
    never at once; the one list at start (the publisher's, which the watch goes on from)
    is not repeated."""
    server = watching.server
    times = server.watches()
    assert times[4] - times[0] >= FIVE_WATCHES * 0.9, times
    assert server.busiest(5.0) < 20
    slices = [p for p in server.paths if "/nodes/" not in p]  # not the Node's owner read
    kinds = ["watch" if "watch=true" in p else "list" for p in slices]
    assert kinds[:1] == ["list"]
    assert set(kinds[1:]) == {"watch"}
    assert all("resourceVersion=7" in p for p in server.paths if "watch=true" in p)
    assert all(
        "fieldSelector=spec.nodeName%3Dhostile-node%2Cspec.driver%3Dgenericdp.io" in p
        for p in slices
    )
    assert watching.restarts["ended"] >= 4


@pytest.mark.parametrize(
    "watching",
    [{"gone": 1000}, {"too_large": 1000}],
    indirect=True,
    ids=["410 Gone", "504 Too large resource version"],
)
async def test_a_version_the_server_cannot_watch_from_lists_again_after_a_backoff(
    watching: Seen,
) -> None:
    """Every watch answered 410 or 504 too large: a list before each next watch, and the
    pair waits for the backoff like any other end."""
    server = watching.server
    times = server.watches()
    assert times[4] - times[0] >= FIVE_WATCHES * 0.9, times
    assert server.busiest(5.0) < 20
    slices = [p for p in server.paths if "/nodes/" not in p]  # not the Node's owner read
    kinds = ["watch" if "watch=true" in p else "list" for p in slices]
    assert kinds[:3] == ["list", "watch", "list"]
    assert all(kinds[i - 1] == "list" for i in range(2, len(kinds)) if kinds[i] == "watch"), kinds
    assert watching.restarts["expired"] >= 4
