"""The labels of the node the daemon runs on, read and watched on the API server.

Only this node's Node object is read (field selector ``metadata.name``), so a
label change on one node reaches only that node's daemon, and the RBAC it
needs is get/list/watch on nodes. Loaded only when some resource has a
``nodeSelector`` (``daemon``): the API client comes with it.

One list gives the labels and a ``resourceVersion``; the watch goes on from
there, one request at a time, so a watch the server ends (at once, or at its
timeout) is reopened after a backoff, never in a tight loop; a 410 Gone (the
version is too old) lists again. lightkube's own ``watch`` reopens a
watch that ends without an error at once, so the watch request is made here
on lightkube's HTTP client, which carries the kubeconfig's or the service
account's credentials. What the server answers becomes ``ApiRequestError``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from genericdp.aio import Backoff, Sleep
from genericdp.dra.kubeapi import ApiRequestError, AsyncClient, connect

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
# The server ends each watch after this long (give or take a random tenth), so
# a half-open connection is noticed; the read timeout allows for it.
WATCH_SECONDS = 300
REQUEST_TIMEOUT = 10.0
# Seconds between warnings while the API server stays unreachable (every node
# loses it at once when it restarts: one line each, not one per retry).
FAILURE_LOG_EVERY = 30.0

Labels = Mapping[str, str] | None  # None: the Node object is not there
OnLabels = Callable[[Labels], Awaitable[object]]


class GoneError(Exception):
    """The watch's resourceVersion is too old (410): list again."""


@dataclass(frozen=True)
class Event:
    """One watch event: the Node's labels and its resourceVersion (a bookmark: only that)."""

    labels: Labels
    version: str
    bookmark: bool = False


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
    requests: int = 0  # lists and watches sent (tests and the fleet benchmark read it)
    _told: bool = field(default=False, init=False)
    _last: Labels = field(default=None, init=False)

    async def run(self) -> None:
        sleep = self.sleep or asyncio.sleep
        loop = asyncio.get_running_loop()
        version: str | None = None
        failing_since: float | None = None  # the first failure of a run of them
        last_warning = 0.0
        while True:
            started = loop.time()
            try:
                if version is None:
                    labels, version = await self._list()
                    self._answered(failing_since)
                    failing_since = None
                    await self._tell(labels)
                async for event in self._watch(version):
                    self._answered(failing_since)
                    failing_since = None
                    version = event.version
                    if not event.bookmark:
                        await self._tell(event.labels)
            except GoneError:
                log.info("node %s: the watch's version is too old: listing again", self.node)
                version = None
            except ApiRequestError as err:
                now = loop.time()
                if failing_since is None or now - last_warning >= FAILURE_LOG_EVERY:
                    log.warning("node %s: %s (retrying with backoff)", self.node, err)
                    last_warning = now
                failing_since = now if failing_since is None else failing_since
            if loop.time() - started > self.backoff.maximum:
                self.backoff.reset()  # it watched fine for a while
            await sleep(self.backoff.next())

    def _answered(self, failing_since: float | None) -> None:
        """The server answered: say so once after failures (they are warned of once)."""
        if failing_since is not None:
            took = asyncio.get_running_loop().time() - failing_since
            log.info("node %s: the API server answers again after %.1fs", self.node, took)

    async def _tell(self, labels: Labels) -> None:
        if self._told and labels == self._last:
            return
        self._told, self._last = True, labels
        self._say(labels)
        await self.on_labels(labels)

    def _say(self, labels: Labels) -> None:
        if labels is None:
            log.warning(
                "node %s: no Node object by that name: resources with a nodeSelector are"
                " not served until it appears",
                self.node,
            )
        else:
            log.info("node %s: %d label(s)", self.node, len(labels))

    def _http(self) -> httpx2.AsyncClient:
        # lightkube's HTTP client, with the server's address and credentials.
        http: httpx2.AsyncClient = self.client._client._client
        return http

    async def _list(self) -> tuple[Labels, str]:
        self.requests += 1
        what = f"listing Node {self.node}"
        try:
            response = await self._http().get(
                NODES, params=self._selector(), timeout=REQUEST_TIMEOUT
            )
        except httpx2.HTTPError as err:
            raise ApiRequestError(what, 0, str(err) or type(err).__name__) from err
        body = _answer(response, what)
        items = body.get("items") or []
        labels = _labels(items[0]) if items else None
        return labels, str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, version: str) -> AsyncIterator[Event]:
        """Each event of one watch request, until the server ends it."""
        self.requests += 1
        what = f"watching Node {self.node}"
        seconds = int(WATCH_SECONDS * (0.9 + 0.2 * self.rng.random()))
        params = {
            **self._selector(),
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        timeout = httpx2.Timeout(REQUEST_TIMEOUT, read=seconds + 30.0)
        try:
            async with self._http().stream("GET", NODES, params=params, timeout=timeout) as resp:
                if resp.status_code != httpx2.codes.OK:
                    await resp.aread()
                    _answer(resp, what)
                async for line in resp.aiter_lines():
                    if line.strip():
                        yield _event(json.loads(line), what)
        except httpx2.HTTPError as err:
            raise ApiRequestError(what, 0, str(err) or type(err).__name__) from err

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"metadata.name={self.node}"}


def _answer(response: httpx2.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code == httpx2.codes.GONE:
        raise GoneError
    if response.status_code != httpx2.codes.OK:
        reason = body.get("message") if isinstance(body, dict) else None
        raise ApiRequestError(what, response.status_code, str(reason or response.reason_phrase))
    return body if isinstance(body, dict) else {}


def _labels(node: dict[str, Any]) -> dict[str, str]:
    labels = node.get("metadata", {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def _event(event: dict[str, Any], what: str) -> Event:
    """What one watch event says: the labels (None: the Node was deleted) and the version."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        if code == httpx2.codes.GONE:
            raise GoneError
        raise ApiRequestError(what, code, str(obj.get("message") or "an error event"))
    version = str(obj.get("metadata", {}).get("resourceVersion", ""))
    if kind == "BOOKMARK":
        return Event(None, version, bookmark=True)
    return Event(None if kind == "DELETED" else _labels(obj), version)


async def watch_node_labels(kubeconfig: Path | None, node: str, on_labels: OnLabels) -> None:
    """Connect (``kubeconfig``, else the pod's service account) and watch Node ``node``
    until cancelled; raises ApiSetupError when there is no way to the API server."""
    client = connect(kubeconfig)
    try:
        await NodeWatch(client, node, on_labels).run()
    finally:
        await client.close()
