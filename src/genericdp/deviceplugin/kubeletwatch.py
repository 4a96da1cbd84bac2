"""Watch the kubelet's device-plugin directory with inotify (no polling).

Each batch of events read together is one ``DirChange``, so one kubelet
restart (every socket deleted, a new ``kubelet.sock``) wakes the plugins once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from inotify_simple import flags

from genericdp.aio import inotify_events
from genericdp.errors import KubeletError
from genericdp.runtime.devwatch import InotifyEvent

log = logging.getLogger(__name__)

_MASK = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE_SELF
_MASK |= flags.MOVE_SELF | flags.ONLYDIR


@dataclass(frozen=True)
class DirChange:
    """File names created and deleted in one batch; ``lost`` if the dir itself went."""

    created: frozenset[str] = frozenset()
    deleted: frozenset[str] = frozenset()
    lost: bool = False  # the directory was removed or moved, or events were dropped


def _changes(events: Iterable[InotifyEvent]) -> DirChange:
    created: set[str] = set()
    deleted: set[str] = set()
    lost = False
    for event in events:
        mask, name = event.mask, event.name
        if mask & (flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED | flags.Q_OVERFLOW):
            lost = True
        elif mask & (flags.CREATE | flags.MOVED_TO):
            created.add(name)
            deleted.discard(name)
        elif mask & (flags.DELETE | flags.MOVED_FROM):
            deleted.add(name)
            created.discard(name)
    return DirChange(frozenset(created), frozenset(deleted), lost)


async def watch_plugin_dir(
    plugin_dir: Path,
    on_change: Callable[[DirChange], None],
    *,
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Report changes in ``plugin_dir`` until cancelled; KubeletError when the directory
    cannot be watched or goes away (the caller's guard restarts the watch)."""
    started = inotify_events(lambda exc: KubeletError(f"cannot start inotify: {exc}"))
    async with started as (inotify, readable):
        try:
            inotify.add_watch(plugin_dir, _MASK)
        except OSError as exc:
            raise KubeletError(f"cannot watch {plugin_dir}: {exc.strerror}") from exc
        on_ready()
        while True:
            await readable.wait()
            readable.clear()
            change = _changes(inotify.read(timeout=0))
            if change.created or change.deleted or change.lost:
                on_change(change)
            if change.lost:
                raise KubeletError(f"{plugin_dir} was removed or replaced; watching again")
