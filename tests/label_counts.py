"""The node-label follower and NodeFeature sink of ``genericdp.nodelabels``, counting
what the tests compare: publishes, idle rounds and API requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx2

from genericdp.nodelabels import LabelFollower, Labels, LabelSink
from genericdp.nodelabels.nodefeature import NodeFeatureSink


@dataclass
class _CountedSink:
    """``inner``, counting the publishes that landed."""

    inner: LabelSink
    published: int = 0

    @property
    def what(self) -> str:
        return self.inner.what

    async def current(self) -> Labels | None:
        return await self.inner.current()

    async def publish(self, labels: Labels) -> None:
        await self.inner.publish(labels)
        self.published += 1


@dataclass
class CountingFollower(LabelFollower):
    """``writes``: publishes that landed; ``rounds``: times the labels, every resource
    settled, were found published (written or already there)."""

    rounds: int = field(default=0, init=False)
    _counted: _CountedSink = field(init=False)
    _settled: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._counted = _CountedSink(self.sink)
        self.sink = self._counted

    @property
    def writes(self) -> int:
        return self._counted.published

    def labels(self) -> dict[str, str]:
        self._settled = all(ready for _, _, ready in self.source.labelled())
        return super().labels()

    async def _sync(self) -> bool:
        done = await super()._sync()
        if done and self._settled:
            self.rounds += 1
        return done


@dataclass
class CountingNodeFeatureSink(NodeFeatureSink):
    """``requests``: the requests it sent to the API server."""

    requests: int = field(default=0, init=False)

    async def _send(self, method: str, path: str, what: str, **kwargs: Any) -> httpx2.Response:
        self.requests += 1
        return await super()._send(method, path, what, **kwargs)
