"""The node's ResourceSlices as others change them: what the publisher's watch follows.

A ``ListWatch`` source (``kube/listwatch.py``) watching from its list's resourceVersion, so
nothing between list and watch is missed. Whenever the server holds something else than the
publisher's ``held`` (names or resourceVersions differ, an event not the echo of our own write,
anything while the publisher is listing), it calls ``stale``: the publisher lists again and
rewrites the pool if it differs. The kubelet deletes a node's slices when it starts; an admin
may edit one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from genericdp.kube.listwatch import version_of
from genericdp.kubeletplugin.slicestore import SliceStore

log = logging.getLogger(__name__)

Held = Mapping[str, Mapping[str, Any]] | None  # None: a list and a comparison are coming anyway


class SliceWatch:
    """Tells ``stale`` when the node's slices on the server are not those ``held()`` says."""

    def __init__(
        self,
        store: SliceStore,
        *,
        held: Callable[[], Held],
        stale: Callable[[], None],
        writing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._held = held
        self._stale = stale
        self._writing = writing
        # Events seen while a write is in flight: the echo of a write can come
        # before its answer (and the resourceVersion the publisher holds).
        self._deferred: list[tuple[str, Mapping[str, Any]]] = []

    def written(self) -> None:
        """The write's answers are held now: tell the events held back during it."""
        deferred, self._deferred = self._deferred, []
        for kind, obj in deferred:
            self._observed(kind, obj)

    async def relist(self) -> str:
        """List the slices and compare them with what is held; the list's resourceVersion."""
        listing = await self._store.list()
        held = self._held()
        if held is None or _versions(held) != _versions(listing.slices):
            log.debug("ResourceSlices of node %s changed by someone else", self._store.node)
            self._stale()
        return listing.version

    async def follow(self, version: str, seconds: int) -> AsyncIterator[str]:
        """One watch of the slices from ``version``: each change by someone else is told."""
        async for kind, obj in self._store.watch(version, seconds):
            if kind != "BOOKMARK":
                self._observed(kind, obj)
            yield version_of(obj)

    def _observed(self, kind: str, obj: Mapping[str, Any]) -> None:
        if self._writing():
            self._deferred.append((kind, obj))
            return
        held = self._held()
        metadata = obj.get("metadata")
        name = str(metadata.get("name")) if isinstance(metadata, dict) else ""
        mine = held.get(name) if held is not None else None
        # Without what is held (a list is under way) nothing can be told ours: it
        # counts as a change, so a list that the change may postdate is done again.
        if held is not None and kind == "DELETED" and mine is None:
            return  # our own delete, or a slice we never had
        if kind != "DELETED" and mine is not None and version_of(mine) == version_of(obj):
            return  # our own write
        log.debug("ResourceSlice %s %s by someone else: comparing again", name, kind.lower())
        self._stale()


def _versions(slices: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    return {name: version_of(obj) for name, obj in slices.items()}
