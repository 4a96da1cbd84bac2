"""Hot reload: watch the config with inotify and reconcile each valid change.

- Editors save by renaming a temporary file over the old one, so the inode we
  would watch is gone after the first save: we watch the *directory* (the
  config directory, or a config file's parent) for events naming the file,
  ``..data`` or any ``*.yaml``/``*.yml``.
- The kubelet updates a ConfigMap volume with its atomic writer: new content
  in a fresh ``..<timestamp>`` directory, links for new keys (dangling for a
  moment), then ``..data_tmp`` renamed over ``..data``, then the links of
  removed keys and the old directory deleted. For an edited key only
  ``..data`` changes.
- One save or ConfigMap update is several events: a reload waits until
  ``settle`` seconds pass without a relevant one (capped), then loads once.
  Events during a reload lead to one more, so the last state on disk is
  always the one looked at.

An invalid config, or one with no files at all (a ConfigMap being rewritten,
a directory emptied), is refused: the previous config keeps serving. One
applied (or found unchanged) is kept in the state directory
(``genericdp.lastgood``) for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Protocol, TypeVar

from inotify_simple import INotify, flags

from genericdp.aio import Backoff, TaskSet, inotify_events, wait_event
from genericdp.config.loader import HIDDEN_PREFIX, SUFFIXES, Source, config_files, load_sources
from genericdp.config.model import Config
from genericdp.errors import ConfigError, ConfigIssue, GenericdpError
from genericdp.lastgood import LastGood
from genericdp.runtime.reconcile import Plan
from genericdp.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

DATA_LINK = "..data"  # the kubelet's atomic writer swaps this link on every update
MOUNTINFO = Path("/proc/self/mountinfo")

# CLOSE_WRITE and MODIFY: edits in place; CREATE/MOVED_TO/DELETE/MOVED_FROM: saves by
# rename, ConfigMap keys added or removed, the ``..data`` swap.
_MASK = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM | flags.CLOSE_WRITE
_MASK |= flags.MODIFY | flags.ATTRIB | flags.DELETE_SELF | flags.MOVE_SELF | flags.ONLYDIR
_GONE = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED


class ReloadTarget(Protocol):
    """What a reload applies to: the supervisor."""

    async def apply(self, config: Config, *, if_changed: bool = False) -> Plan: ...


class Outcome(StrEnum):
    """How a reload ended (also a good metrics label)."""

    APPLIED = "applied"  # a valid config that differs: reconciled
    UNCHANGED = "unchanged"  # valid, and every resource is as it runs
    REFUSED = "refused"  # invalid, or no config files at all: the old one keeps serving
    FAILED = "failed"  # valid, but applying it raised


@dataclass(frozen=True)
class ReloadResult:
    """One reload, as ``on_result`` observers see it."""

    outcome: Outcome
    issues: tuple[str, ...] = ()  # why it was refused or failed, each ``file:line:column: ...``
    started: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()  # updated in place
    renewed: tuple[str, ...] = ()  # updated, and told to the kubelet anew (re-registered)

    @property
    def ok(self) -> bool:
        """Whether the daemon now serves what is on disk."""
        return self.outcome in (Outcome.APPLIED, Outcome.UNCHANGED)

    @property
    def changed(self) -> bool:
        """Whether the running resources changed."""
        return self.outcome is Outcome.APPLIED

    @property
    def summary(self) -> str:
        """``started a, stopped b, updated c`` (empty parts left out)."""
        parts = [
            ("started", self.started),
            ("stopped", self.stopped),
            ("updated", self.updated),
            ("re-registered", self.renewed),
        ]
        return ", ".join(f"{verb} {', '.join(names)}" for verb, names in parts if names)


def is_relevant(name: str, watched: str | None) -> bool:
    """Whether an event on ``name`` may change the config (``watched``: the config file's
    name, or None for a directory). Other ``..`` entries only matter through the
    ``..data`` swap that follows them."""
    if name in (watched, DATA_LINK):
        return True
    return not name.startswith(HIDDEN_PREFIX) and name.endswith(SUFFIXES)


def subpath_hint(config: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """A warning when ``config`` is a file mounted on its own (a ConfigMap key mounted
    with ``subPath``: the kubelet never updates it)."""
    if config.is_symlink() or not config.is_file():
        return None  # ConfigMap keys in a directory mount are symlinks into ..data
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    wanted = {str(config.absolute()), str(config.resolve())}
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and _unescape(fields[4]) in wanted:  # noqa: PLR2004 -- mountinfo's 5th field
            return (
                f"{config} is a file mounted on its own (a ConfigMap key mounted with "
                "subPath?): the kubelet never updates such mounts, so edits will not "
                "reach this daemon; mount the ConfigMap as a directory and pass the "
                "directory as the config"
            )
    return None


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


async def in_daemon_thread(func: Callable[[], T]) -> T:
    """``func()`` in a thread of its own that shutdown does not wait for (its result is
    dropped when the caller is cancelled). ``asyncio.run`` joins the executor's threads
    of ``asyncio.to_thread`` on the way out: a load parsing a large or hostile file
    would hold up SIGTERM, and exiting must not depend on loading's bounds."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(outcome: Callable[[], None]) -> None:
        if not future.done():  # else the caller was cancelled
            outcome()

    def run() -> None:
        try:
            result = func()
        except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting coroutine
            outcome = functools.partial(future.set_exception, exc)
        else:
            outcome = functools.partial(future.set_result, result)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(deliver, outcome)

    threading.Thread(target=run, name="config-load", daemon=True).start()
    return await future


def _read_config(path: Path) -> tuple[Config, tuple[Source, ...]]:
    """Load ``path`` (and the texts loaded); a path with no config files at all raises
    ConfigError saying so."""
    log.debug("loading the config from %s", path)  # from the loading thread
    _, problems = config_files(path)
    if problems:
        why = (
            " (a config with no files is never applied: it would stop every resource;"
            " is the ConfigMap being rewritten?)"
        )
        raise ConfigError([replace(p, message=p.message + why) for p in problems])
    return load_sources([path])


class ConfigWatcher:
    """Reloads ``path`` into ``target`` when it changes on disk.

    Each time the watch is armed the config is checked once more, so a change
    made while nothing watched is not lost; that check is silent when nothing
    changed since the last result reported (``refused``: the issues ``serve``
    reported at start). Each config applied or found unchanged is kept in ``store``.
    """

    def __init__(
        self,
        path: Path,
        target: ReloadTarget,
        *,
        settle: float = 0.2,
        on_result: Callable[[ReloadResult], None] | None = None,
        store: LastGood | None = None,
        refused: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self._target = target
        self._settle = settle
        # A file rewritten without pause must still be reloaded now and then.
        self._max_delay = max(settle * 10, 1.0)
        self._on_result = on_result
        self._store = store
        self._reported = refused  # the issues of the last refusal reported, () once ok
        # Set once the watch is armed and the config on disk was checked; any later
        # change is seen. Cleared when the watch stops.
        self.ready = asyncio.Event()

    async def reload(self, *, quiet: bool = False) -> ReloadResult:
        """Load the config, apply it if it differs; never raises (but on cancellation).
        ``quiet``: report nothing when nothing changed (the check on arming)."""
        result = await self._reload()
        same = result.ok if not self._reported else result.issues == self._reported
        if quiet and same and result.outcome in (Outcome.UNCHANGED, Outcome.REFUSED):
            return result
        self._reported = result.issues if result.outcome is Outcome.REFUSED else ()
        self._log(result)
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:
                log.exception("config reload observer failed")  # an observer never stops reloads
        return result

    async def _reload(self) -> ReloadResult:
        try:
            config, sources = await in_daemon_thread(functools.partial(_read_config, self.path))
        except ConfigError as exc:
            return ReloadResult(Outcome.REFUSED, issues=tuple(str(i) for i in exc.issues))
        except Exception as exc:  # the loader turns bad input into issues; this is a bug
            log.exception("loading %s failed", self.path)
            return ReloadResult(Outcome.REFUSED, issues=(f"{self.path}: {exc}",))
        try:
            steps = await self._target.apply(config, if_changed=True)
        except GenericdpError as exc:
            return ReloadResult(Outcome.FAILED, issues=(str(exc),))
        except Exception as exc:
            log.exception("applying the config from %s failed", self.path)
            return ReloadResult(Outcome.FAILED, issues=(f"{type(exc).__name__}: {exc}",))
        if self._store is not None:
            await asyncio.to_thread(self._store.keep, sources)
        if steps.empty:
            return ReloadResult(Outcome.UNCHANGED)
        return ReloadResult(
            Outcome.APPLIED,
            started=tuple(d.name for d in steps.start),
            stopped=steps.stop,
            updated=tuple(d.name for d in steps.update),
            renewed=tuple(d.name for d in steps.renew),
        )

    def _log(self, result: ReloadResult) -> None:
        issues = "; ".join(result.issues)
        if result.outcome is Outcome.APPLIED:
            log.info("config reloaded from %s: %s", self.path, result.summary or "no resource")
        elif result.outcome is Outcome.UNCHANGED:
            log.debug("config %s changed on disk, resources unchanged", self.path)
        elif result.outcome is Outcome.REFUSED:
            log.error("config refused, still serving the previous one: %s", issues)
        else:
            log.error("config reload failed while applying: %s", issues)

    async def run(self) -> None:
        """Watch and reload until cancelled; raises ConfigError if nothing can be watched."""
        while True:
            await self._watch()

    async def _watch(self) -> None:
        """Arm a watch, check the config, reload on changes; return to be armed again
        (a config directory that disappears is watched through its parent, and back)."""
        is_dir = self.path.is_dir()
        directory, watched = (self.path, None) if is_dir else (self.path.parent, self.path.name)
        async with inotify_events(
            lambda exc: _watch_error(directory, f"cannot start inotify: {exc}")
        ) as (inotify, readable):
            try:
                inotify.add_watch(directory, _MASK)
            except OSError as exc:
                message = f"cannot be watched ({exc.strerror}); still serving the previous config"
                raise _watch_error(directory, message) from exc
            try:
                log.info("watching %s for config changes", directory)
                await self.reload(quiet=True)  # whatever changed while nobody watched
                self.ready.set()
                while self.path.is_dir() == is_dir:
                    await readable.wait()
                    readable.clear()
                    relevant, gone = _drain(inotify, watched)
                    if relevant and not gone:
                        gone = await self._settle_burst(inotify, readable, watched)
                    if gone:
                        log.warning("%s was removed or replaced; watching again", directory)
                        return
                    if relevant:
                        await self.reload()
            finally:
                self.ready.clear()

    async def _settle_burst(
        self, inotify: INotify, readable: asyncio.Event, watched: str | None
    ) -> bool:
        """Wait for ``settle`` seconds without relevant events (at most ``max_delay``);
        whether the watched directory went away meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_delay
        quiet_until = loop.time() + self._settle
        while (wait := min(quiet_until, deadline) - loop.time()) > 0:
            if not await wait_event(readable, wait):
                break
            readable.clear()
            relevant, gone = _drain(inotify, watched)
            if gone:
                return True
            if relevant:
                quiet_until = loop.time() + self._settle
        return False


def start_config_watch(
    tasks: TaskSet,
    settings: Settings,
    target: ReloadTarget,
    *,
    on_result: Callable[[ReloadResult], None] | None = None,
    store: LastGood | None = None,
    refused: tuple[str, ...] = (),
) -> ConfigWatcher:
    """Spawn the ``config-watch`` task (restarted with backoff when the watch is lost)."""
    if (hint := subpath_hint(settings.config)) is not None:
        log.warning("%s", hint)
    watcher = ConfigWatcher(
        settings.config,
        target,
        settle=settings.reload_settle,
        on_result=on_result,
        store=store,
        refused=refused,
    )
    tasks.spawn("config-watch", watcher.run, backoff=Backoff(maximum=10.0))
    return watcher


def _drain(inotify: INotify, watched: str | None) -> tuple[bool, bool]:
    """Read pending events: (any relevant, the directory itself went away)."""
    relevant = gone = False
    for event in inotify.read(timeout=0):
        if event.mask & _GONE:
            gone = True
        elif event.mask & flags.Q_OVERFLOW or is_relevant(event.name, watched):
            relevant = True  # an overflow may have dropped relevant events
    return relevant, gone


def _watch_error(directory: Path, message: str) -> ConfigError:
    return ConfigError([ConfigIssue(str(directory), None, None, "", message)])
