"""The labels of the node the daemon runs on, read and watched on the API server.

Only this node's Node object is read (field selector ``metadata.name``); loaded only
when some resource has a ``nodeSelector``, as the API client comes with it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genericdp.aio import Backoff, Sleep
from genericdp.kube.client import (
    REQUEST_DEADLINE,
    AsyncClient,
    connect,
    http_of,
    list_objects,
    watch_events,
)
from genericdp.kube.listwatch import ListWatch, version_of

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"

Labels = Mapping[str, str] | None  # None: the Node object is not there
OnLabels = Callable[[Labels], Awaitable[object]]


@dataclass
class NodeWatch:
    """Tells ``on_labels`` the labels of Node ``node`` now and at each change, until cancelled."""

    client: AsyncClient
    node: str
    on_labels: OnLabels
    # Wide jitter: every node's watch ends at once when the API server restarts.
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, maximum=30.0, jitter=0.5))
    sleep: Sleep | None = None
    rng: random.Random = field(default_factory=random.Random)
    deadline: float = REQUEST_DEADLINE  # seconds for each list
    _told: bool = field(default=False, init=False)
    _last: Labels = field(default=None, init=False)

    async def run(self) -> None:
        what = f"Node {self.node}"
        await ListWatch(what, self, self.backoff, sleep=self.sleep, rng=self.rng).run()

    async def relist(self) -> str:
        """List this Node: tell its labels; the list's resourceVersion."""
        http, what = http_of(self.client), f"Node {self.node}"
        items, version = await list_objects(
            http, NODES, self._selector(), what, deadline=self.deadline
        )
        await self._tell(_labels(items[0]) if items else None)
        return version

    async def follow(self, version: str, seconds: int) -> AsyncIterator[str]:
        """One watch request: tell each change of the labels."""
        http, what = http_of(self.client), f"Node {self.node}"
        events = watch_events(
            http, NODES, self._selector(), version=version, seconds=seconds, what=what
        )
        async for kind, obj in events:
            if kind != "BOOKMARK":
                await self._tell(None if kind == "DELETED" else _labels(obj))
            yield version_of(obj)

    async def _tell(self, labels: Labels) -> None:
        if self._told and labels == self._last:
            return
        self._told, self._last = True, labels
        if labels is None:
            log.warning(
                "node %s: no Node object by that name: resources with a nodeSelector are"
                " not served until it appears",
                self.node,
            )
        else:
            log.info("node %s: %d label(s)", self.node, len(labels))
        await self.on_labels(labels)

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"metadata.name={self.node}"}


def _labels(node: dict[str, Any]) -> dict[str, str]:
    labels = node.get("metadata", {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


async def watch_node_labels(kubeconfig: Path | None, node: str, on_labels: OnLabels) -> None:
    """Connect (``kubeconfig``, else the pod's service account) and watch Node ``node``
    until cancelled; raises ApiSetupError when there is no way to the API server."""
    client = connect(kubeconfig)
    try:
        await NodeWatch(client, node, on_labels).run()
    finally:
        await client.close()
