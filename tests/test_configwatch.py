"""The config watch: real inotify on temporary trees, a target that records what it is given.

``ConfigMapVolume`` lays files out exactly as the kubelet's atomic writer
does (pkg/volume/util/atomic_writer.go), so the tests see the same events a
pod sees when its ConfigMap is edited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from genericdp.aio import Backoff, TaskSet
from genericdp.config import load
from genericdp.config.model import Config
from genericdp.lastgood import LastGood
from genericdp.runtime.configwatch import (
    ConfigWatcher,
    Outcome,
    ReloadResult,
    is_relevant,
    subpath_hint,
)
from genericdp.runtime.reconcile import Plan, plan

DATA = "..data"


class ConfigMapVolume:
    """A ConfigMap volume directory, updated the way the kubelet updates it.

    ``write`` follows the atomic writer: payload into a new ``..<timestamp>.<random>``
    directory, links for new keys (``key -> ..data/key``), a ``..data_tmp`` link
    renamed over ``..data``, then links of removed keys and the old directory removed.
    Like the kubelet it does nothing when the payload is what is already there.
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        target.mkdir(parents=True, exist_ok=True)

    def current(self) -> dict[str, str]:
        data = self.target / DATA
        if not data.exists():
            return {}
        return {p.name: p.read_text() for p in sorted(data.iterdir())}

    def write(self, payload: Mapping[str, str], *, force: bool = False) -> None:
        visible = {p.name for p in self.target.iterdir() if not p.name.startswith("..")}
        to_remove = visible - payload.keys()
        if not force and not to_remove and self.current() == dict(payload):
            return
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        ts_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=self.target))
        ts_dir.chmod(0o755)
        for key, text in payload.items():
            (ts_dir / key).write_text(text)
        for key in payload:
            link = self.target / key
            if not link.is_symlink():
                link.symlink_to(Path(DATA) / key)
        data = self.target / DATA
        old = os.readlink(data) if data.is_symlink() else None
        (self.target / "..data_tmp").symlink_to(ts_dir.name)
        (self.target / "..data_tmp").rename(data)
        for key in sorted(to_remove, reverse=True):
            (self.target / key).unlink()
        if old is not None:
            shutil.rmtree(self.target / old)


@dataclass
class RecordingTarget:
    """Stands in for the supervisor: keeps the config it is given and the plans."""

    config: Config
    applied: list[Plan] = field(default_factory=list)
    fail: Exception | None = None

    async def apply(self, config: Config, *, if_changed: bool = False) -> Plan:
        steps = plan(self.config.resources, config.resources)
        if if_changed and steps.empty:
            return steps
        if self.fail is not None:
            raise self.fail
        self.config = config
        self.applied.append(steps)
        return steps


class Results:
    """Collects reload results; ``until`` waits for a condition on them."""

    def __init__(self) -> None:
        self.items: list[ReloadResult] = []
        self._changed = asyncio.Event()

    def __call__(self, result: ReloadResult) -> None:
        self.items.append(result)
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def until(
        self,
        predicate: Callable[[list[ReloadResult]], bool],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[ReloadResult]:
        async with asyncio.timeout(timeout):
            while not predicate(self.items):
                changed = self._changed
                await changed.wait()
        return self.items

    async def count(self, n: int) -> list[ReloadResult]:
        return await self.until(lambda items: len(items) >= n)


def resources(*specs: str) -> str:
    """A v1 config with one /dev/null resource per ``name`` or ``name:count``."""
    text = "version: v1\nresources:\n"
    for spec in specs:
        name, _, count = spec.partition(":")
        text += f"  - name: example.com/{name}\n    match: [glob: /dev/null]\n"
        if count:
            text += f"    count: {count}\n"
    return text


def names(config: Config) -> list[str]:
    return [r.name.removeprefix("example.com/") for r in config.resources]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


class LogWatch(logging.Handler):
    """Log messages, with a wait for one to show up (no polling)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self._changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def until(self, text: str, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not any(text in m for m in self.messages):
                changed = self._changed
                await changed.wait()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[LogWatch]:
    caplog.set_level(logging.INFO, "genericdp.runtime.configwatch")
    handler = LogWatch()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


@asynccontextmanager
async def watching(
    path: Path, target: RecordingTarget, *, settle: float = 0.2
) -> AsyncIterator[tuple[ConfigWatcher, Results]]:
    """A running watcher on ``path`` (guarded, quick backoff), ready for changes.

    The daemon's settle time: a loaded machine may pause between the writes of one save.
    """
    results = Results()
    watcher = ConfigWatcher(path, target, settle=settle, on_result=results)
    tasks = TaskSet(logging.getLogger("test"))
    tasks.spawn("config-watch", watcher.run, backoff=Backoff(initial=0.02, maximum=0.1))
    try:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        yield watcher, results
    finally:
        assert await tasks.stop() == ()


def start(path: Path) -> RecordingTarget:
    return RecordingTarget(load([path]))


# -- what counts as a change ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "watched", "expected"),
    [
        ("a.yaml", None, True),
        ("b.yml", None, True),
        (DATA, None, True),
        ("..data_tmp", None, False),
        ("..2024_01_01_00_00_00.123456789", None, False),
        ("notes.txt", None, False),
        (".a.yaml.swp", None, False),
        ("gdp.conf", "gdp.conf", True),
        ("other.yaml", "gdp.conf", True),
        ("4913", "gdp.conf", False),
    ],
)
def test_relevant_names(name: str, watched: str | None, expected: bool) -> None:
    """Only the config file, ``..data`` and YAML files wake a reload; editor droppings do not."""
    assert is_relevant(name, watched) is expected


def test_result_summary_names_every_step() -> None:
    """The reload log line names what started, stopped, was updated and re-registered."""
    result = ReloadResult(
        Outcome.APPLIED, started=("a", "b"), stopped=("c",), updated=("d",), renewed=("e",)
    )
    assert result.summary == "started a, b, stopped c, updated d, re-registered e"
    assert result.ok
    assert result.changed
    refused = ReloadResult(Outcome.REFUSED, issues=("x",))
    assert not refused.ok
    assert not refused.changed
    assert ReloadResult(Outcome.UNCHANGED).ok
    assert not ReloadResult(Outcome.UNCHANGED).changed


# -- plain files -----------------------------------------------------------------------


async def test_edit_in_directory_is_applied_once(tmp: Path) -> None:
    """Editing a file of a config directory applies the new config, once per burst."""
    config_dir = tmp / "config"
    config_dir.mkdir()
    (config_dir / "a.yaml").write_text(resources("a"))
    target = start(config_dir)
    async with watching(config_dir, target) as (_, results):
        with (config_dir / "a.yaml").open("w") as f:  # a burst: several writes, one close
            for line in resources("a", "b").splitlines(keepends=True):
                f.write(line)
                f.flush()
        await results.count(1)
        (config_dir / "c.yml").write_text(resources("c"))
        await results.count(2)
    assert [r.outcome for r in results.items] == [Outcome.APPLIED, Outcome.APPLIED]
    assert results.items[0].started == ("example.com/b",)
    assert results.items[1].started == ("example.com/c",)
    assert names(target.config) == ["a", "b", "c"]


async def test_file_saved_by_rename_is_applied(tmp: Path) -> None:
    """An editor's save (write a temporary file, rename it over the config) is seen."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    (tmp / "unrelated").write_text("x")
    target = start(config)
    async with watching(config, target) as (_, results):
        scratch = tmp / ".gdp.yaml.tmp"
        scratch.write_text(resources("a:2"))
        scratch.rename(config)
        await results.count(1)
        (tmp / "unrelated").unlink()  # not ours: no reload
        config.write_text(resources("a:2", "b"))
        await results.count(2)
    assert [r.updated for r in results.items] == [("example.com/a",), ()]
    assert results.items[1].started == ("example.com/b",)


async def test_same_content_is_not_applied(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Saving the same content (or only reordering resources) applies nothing and logs no reload."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a", "b"))
    target = start(config)
    caplog.set_level(logging.INFO, "genericdp.runtime.configwatch")
    async with watching(config, target) as (_, results):
        config.write_text(resources("a", "b"))
        await results.count(1)
        config.write_text(resources("b", "a") + "# a comment\n")
        await results.count(2)
    assert [r.outcome for r in results.items] == [Outcome.UNCHANGED] * 2
    assert target.applied == []
    assert "config reloaded" not in caplog.text


async def test_invalid_config_is_refused_with_locations(
    tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An invalid config is refused with file:line:column in the log; a later valid one applies."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    target = start(config)
    running = target.config
    async with watching(config, target) as (_, results):
        config.write_text(resources("a") + "    count: zero\n    colour: red\n")
        await results.count(1)
        assert target.config is running
        config.write_text(resources("a", "b"))
        await results.count(2)
    refused, applied = results.items
    assert refused.outcome is Outcome.REFUSED
    assert len(refused.issues) == 2
    located = re.compile(re.escape(str(config)) + r":\d+:\d+: resources\[0\]\.")
    assert all(located.match(issue) for issue in refused.issues), refused.issues
    line = next(r.message for r in caplog.records if "config refused" in r.message)
    assert line.startswith("config refused, still serving the previous one: ")
    assert all(issue in line for issue in refused.issues)
    assert applied.outcome is Outcome.APPLIED
    assert names(target.config) == ["a", "b"]


async def test_emptied_directory_is_refused(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A directory left without config files does not stop every resource: it is refused."""
    config_dir = tmp / "config"
    config_dir.mkdir()
    (config_dir / "a.yaml").write_text(resources("a"))
    target = start(config_dir)
    async with watching(config_dir, target) as (_, results):
        (config_dir / "a.yaml").unlink()
        await results.count(1)
    (result,) = results.items
    assert result.outcome is Outcome.REFUSED
    assert "no *.yaml or *.yml files" in result.issues[0]
    assert "never applied" in result.issues[0]
    assert target.applied == []
    assert "config refused, still serving the previous one" in caplog.text


async def test_directory_removed_then_back(tmp: Path, logs: LogWatch) -> None:
    """A config directory that goes away (its parent too) is reported, retried, watched again."""
    config_dir = tmp / "etc" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "a.yaml").write_text(resources("a"))
    target = start(config_dir)
    async with watching(config_dir, target) as (watcher, results):
        shutil.rmtree(tmp / "etc")
        await logs.until(f"{tmp / 'etc'}: cannot be watched (No such file or directory)")
        (tmp / "etc").mkdir()
        await logs.until(f"watching {tmp / 'etc'} for config changes")
        staged = tmp / "staged"
        staged.mkdir()
        (staged / "a.yaml").write_text(resources("a", "b"))
        staged.rename(config_dir)  # seen through the parent's watch
        await results.until(lambda items: any(r.changed for r in items))
        assert names(target.config) == ["a", "b"]
        await asyncio.wait_for(watcher.ready.wait(), 5)
        (config_dir / "a.yaml").write_text(resources("b"))  # and the directory is watched again
        await results.until(lambda _items: names(target.config) == ["b"])
    assert f"{config_dir} was removed or replaced; watching again" in logs.messages
    assert target.applied[0].start[0].name == "example.com/b"
    assert target.applied[1].stop == ("example.com/a",)


async def test_apply_failure_keeps_watching(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A config the target fails to apply is reported as failed, and the next change applies."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    target = start(config)
    target.fail = RuntimeError("boom")
    async with watching(config, target) as (_, results):
        config.write_text(resources("a", "b"))
        await results.count(1)
        target.fail = None
        config.write_text(resources("a", "c"))
        await results.count(2)
    assert results.items[0].outcome is Outcome.FAILED
    assert results.items[0].issues == ("RuntimeError: boom",)
    assert results.items[1].started == ("example.com/c",)
    assert "config reload failed while applying" in caplog.text


async def test_observer_failure_does_not_stop_reloads(tmp: Path) -> None:
    """An ``on_result`` observer that raises is logged; later changes still apply."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    target = start(config)
    calls: list[ReloadResult] = []

    def broken(result: ReloadResult) -> None:
        calls.append(result)
        raise ValueError("observer bug")

    watcher = ConfigWatcher(config, target, settle=0.01, on_result=broken)
    config.write_text(resources("a", "b"))
    first = await watcher.reload()
    config.write_text(resources("a", "b", "c"))
    second = await watcher.reload()
    assert (first.started, second.started) == (("example.com/b",), ("example.com/c",))
    assert len(calls) == 2


async def test_change_before_watch_is_armed_is_applied(tmp: Path) -> None:
    """A change made between the first load and arming the watch is not lost."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    target = start(config)
    config.write_text(resources("a", "b"))
    async with watching(config, target) as (_, results):
        await results.count(1)
    assert results.items[0].started == ("example.com/b",)


# -- ConfigMap volumes ---------------------------------------------------------------


async def test_configmap_directory_updates(tmp: Path) -> None:
    """Kubelet ConfigMap updates (edit a key, add one, remove one) each apply once."""
    volume = ConfigMapVolume(tmp / "cm")
    volume.write({"a.yaml": resources("a"), "b.yaml": resources("b")})
    target = start(volume.target)
    async with watching(volume.target, target) as (_, results):
        volume.write({"a.yaml": resources("a:3"), "b.yaml": resources("b")})
        await results.count(1)
        volume.write({"a.yaml": resources("a:3"), "b.yaml": resources("b"), "c.yaml": ""})
        await results.count(2)  # an empty key is invalid: refused
        volume.write({"a.yaml": resources("a:3"), "c.yaml": resources("c")})
        await results.count(3)
    updated, refused, swapped = results.items
    assert updated.updated == ("example.com/a",)
    assert refused.outcome is Outcome.REFUSED
    assert refused.issues == (f"{volume.target / 'c.yaml'}: is empty",)
    assert (swapped.started, swapped.stopped) == (("example.com/c",), ("example.com/b",))
    assert names(target.config) == ["a", "c"]


async def test_configmap_key_as_config_file(tmp: Path) -> None:
    """A config path that is a ConfigMap key (a link through ``..data``) follows the swaps."""
    volume = ConfigMapVolume(tmp / "cm")
    volume.write({"gdp.yaml": resources("a")})
    config = volume.target / "gdp.yaml"
    target = start(config)
    async with watching(config, target) as (_, results):
        volume.write({"gdp.yaml": resources("a", "b")})
        await results.count(1)
        volume.write({"gdp.yaml": resources("a", "b")}, force=True)  # same content, new swap
        await results.count(2)
    assert results.items[0].started == ("example.com/b",)
    assert results.items[1].outcome is Outcome.UNCHANGED
    assert len(target.applied) == 1


# -- subPath ---------------------------------------------------------------------------


def test_subpath_hint(tmp: Path) -> None:
    """A config file that is a mount point of its own (subPath) gets a hint; other paths none."""
    config = tmp / "etc gdp" / "gdp.yaml"
    config.parent.mkdir()
    config.write_text(resources("a"))
    mountinfo = tmp / "mountinfo"
    escaped = str(config).replace(" ", "\\040")
    mountinfo.write_text(
        "22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n"
        f"40 22 8:1 /var/lib/kubelet/pods/x/volume-subpaths/cm/gdp/0 {escaped} ro"
        " - ext4 /dev/sda1 rw\n"
    )
    hint = subpath_hint(config, mountinfo)
    assert hint is not None
    assert "subPath" in hint
    assert "mount the ConfigMap as a directory" in hint
    other = tmp / "other.yaml"
    other.write_text(resources("a"))
    assert subpath_hint(other, mountinfo) is None
    assert subpath_hint(config.parent, mountinfo) is None
    assert subpath_hint(config, tmp / "missing") is None
    link = tmp / "link.yaml"
    link.symlink_to(config)
    assert subpath_hint(link, mountinfo) is None


# -- after serve started on an invalid config -------------------------------------------


async def test_a_config_fixed_before_the_watch_is_armed_is_reported_though_unchanged(
    tmp: Path,
) -> None:
    """Refused at start, then fixed to what is served: the check on arming reports it (the
    daemon turns ready), though nothing changes; a still-refused one is not said twice."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    target = start(config)  # serving "a", as the last good config
    results = Results()
    watcher = ConfigWatcher(config, target, on_result=results, refused=("at start",))
    assert (await watcher.reload(quiet=True)).outcome is Outcome.UNCHANGED
    assert [r.outcome for r in results.items] == [Outcome.UNCHANGED]
    assert target.applied == []
    assert (await watcher.reload(quiet=True)).outcome is Outcome.UNCHANGED
    assert len(results.items) == 1, "once reported, unchanged is quiet again"

    config.write_text("version: v1\nresources: {}\n")
    refused = await ConfigWatcher(config, target, on_result=results).reload()
    again = ConfigWatcher(config, target, on_result=results, refused=refused.issues)
    assert (await again.reload(quiet=True)).outcome is Outcome.REFUSED
    assert len(results.items) == 2, "the refusal serve reported is not reported again"


async def test_each_config_applied_or_unchanged_is_kept(tmp: Path) -> None:
    """The watch keeps what it applies in the state directory, and never a refused config."""
    config = tmp / "gdp.yaml"
    config.write_text(resources("a"))
    store = LastGood(tmp / "state")
    watcher = ConfigWatcher(config, start(config), store=store)
    await watcher.reload()
    kept = LastGood(tmp / "state").read().kept
    assert kept is not None
    assert [s.text for s in kept.sources] == [resources("a")]
    config.write_text(resources("a", "b"))
    assert (await watcher.reload()).outcome is Outcome.APPLIED
    config.write_text(resources("a", "b").replace("example.com/b", "b"))
    assert (await watcher.reload()).outcome is Outcome.REFUSED
    kept = LastGood(tmp / "state").read().kept
    assert kept is not None
    assert names(kept.config) == ["a", "b"]
