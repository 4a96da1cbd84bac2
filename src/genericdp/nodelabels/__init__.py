"""Node labels from discovery: each served resource's ``labels`` rendered over its
healthy units, kept published through a ``LabelSink`` (a NodeFeature object or a
features.d file: the daemon chooses; the runtime knows neither). A rendered value
that is not a label value (a USB descriptor string is anything its maker wrote) is
dropped with one log line and a metric.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from genericdp.aio import Backoff, wait_any
from genericdp.allocation.render import template_context
from genericdp.config.model import ResourceDefinition
from genericdp.config.templates import allocation_budget, compile_label_template
from genericdp.discovery.model import Unit
from genericdp.errors import GenericdpError, clip
from genericdp.k8snames import label_value_problem
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.runtime.state import DeviceState

log = logging.getLogger(__name__)

# Changes within this long are published as one write (a reload starting several
# resources, a hub of dongles plugged at once); well inside the second labels follow in.
LABELS_SETTLE = 0.2
DROP_REASONS = ("invalid", "render_failed")

Labels = Mapping[str, str]


class LabelSink(Protocol):
    """Where the node's labels go; raises OSError or GenericdpError when it cannot."""

    @property
    def what(self) -> str: ...  # for log lines: ``NodeFeature ns/name``, a file's path

    async def current(self) -> Labels | None:
        """What is published now (None: something must be written whatever the labels)."""

    async def publish(self, labels: Labels) -> None: ...  # replacing all others


class LabelSource(Protocol):
    """The served resources and their states (the ``Supervisor``)."""

    def labelled(self) -> Iterable[tuple[ResourceDefinition, DeviceState, bool]]:
        """Each resource, its state, and whether that is settled (its first scan and
        probes done: before, a unit not found yet is not a unit gone)."""

    def next_change(self) -> asyncio.Event: ...  # set when the resources change


@dataclass(frozen=True)
class Dropped:
    """A label not published: its resource, key, why (``DROP_REASONS``) and details."""

    resource: str
    key: str
    reason: str
    detail: str


def healthy_units(state: DeviceState) -> tuple[Unit, ...]:
    """The units a label describes: present and not Unhealthy, in ID order."""
    out = state.unhealthy
    units = sorted(state.units_view().values(), key=lambda u: u.id)
    return tuple(u for u in units if u.id not in out)


def resource_labels(
    definition: ResourceDefinition, units: Sequence[Unit], node_name: str
) -> tuple[dict[str, str], list[Dropped]]:
    """The labels of one resource over ``units`` (none: no labels), and those dropped."""
    templates = definition.labels.templates(definition.name)
    if not units or not templates:
        return {}, []
    values = [(key, compile_label_template(src)) for key, src in templates]
    names = frozenset().union(*(v.names for _, v in values))
    context = template_context(definition, units, node_name, (), names=names)
    labels: dict[str, str] = {}
    dropped: list[Dropped] = []
    for key, value in values:
        try:
            with allocation_budget():
                text = value.render(context)
        except Exception as exc:  # noqa: BLE001 -- the boundary for what a template raises
            dropped.append(Dropped(definition.name, key, "render_failed", str(exc)))
            continue
        problem = label_value_problem(text)
        if problem is not None:
            dropped.append(Dropped(definition.name, key, "invalid", f"{text!r}: {problem}"))
            continue
        labels[key] = text
    return labels, dropped


def label_lines(labels: Labels, dropped: Sequence[Dropped], indent: str = "    ") -> list[str]:
    """One line per label, by key, then one per label dropped, with why."""
    lines = [f"{indent}label  {key}={value}" for key, value in sorted(labels.items())]
    lines += [
        f"{indent}dropped {d.key} ({d.reason.replace('_', ' ')}): {clip(d.detail, 200)}"
        for d in sorted(dropped, key=lambda d: d.key)
    ]
    return lines


def source_lines(source: LabelSource, node_name: str) -> list[str]:
    """The labels each of ``source``'s resources would publish now (``simulate``)."""
    lines = []
    for definition, state, settled in sorted(source.labelled(), key=lambda p: p[0].name):
        name = definition.name
        if not definition.labels.templates(name):
            continue
        if not settled:
            lines.append(f"  {name}: none yet (its first scan or probes are not done)")
            continue
        labels, dropped = resource_labels(definition, healthy_units(state), node_name)
        if not labels and not dropped:
            lines.append(f"  {name}: none (no healthy unit)")
            continue
        lines += [f"  {name}:", *label_lines(labels, dropped)]
    return lines or ["  (none)"]


@dataclass
class LabelFollower:
    """Keeps ``sink`` equal to the labels of ``source``'s resources, until cancelled:
    recomputed at every change (hotplug, health, reload), written when they differ."""

    source: LabelSource
    sink: LabelSink
    node_name: str
    recorder: Recorder = NO_METRICS
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, maximum=30.0))
    _published: Labels | None = field(default=None, init=False)
    _known: bool = field(default=False, init=False)
    _dropped: frozenset[Dropped] = field(default=frozenset(), init=False)
    _cache: dict[str, tuple[object, tuple[dict[str, str], list[Dropped]]]] = field(
        default_factory=dict, init=False
    )

    async def run(self) -> None:
        while True:
            events = self._events()
            if not await self._sync():
                await wait_any(events, self.backoff.next())
                continue
            await wait_any(events, None)
            await asyncio.sleep(LABELS_SETTLE)  # the rest of a burst joins this change

    def labels(self) -> dict[str, str]:
        """The node's labels now; a key two resources publish is the first's by name. A
        resource not settled yet keeps the values published under its keys: a restart
        publishes no transient, a failing discovery holds back no other resource."""
        labels: dict[str, str] = {}
        dropped: list[Dropped] = []
        live = set()
        published = self._published or {}
        for definition, state, ready in sorted(self.source.labelled(), key=lambda p: p[0].name):
            live.add(definition.name)
            if not ready:
                for key, _ in definition.labels.templates(definition.name):
                    if key in published:
                        labels.setdefault(key, published[key])
                continue
            units = healthy_units(state)
            basis = (definition, units)
            cached = self._cache.get(definition.name)
            if cached is None or cached[0] != basis:
                cached = (basis, resource_labels(definition, units, self.node_name))
                self._cache[definition.name] = cached
            found, lost = cached[1]
            for name, value in found.items():
                labels.setdefault(name, value)
            dropped += lost
        for name in self._cache.keys() - live:
            del self._cache[name]
        self._report(dropped)
        return labels

    def _events(self) -> list[asyncio.Event]:
        states = (state for _, state, _ in self.source.labelled())
        return [self.source.next_change(), *(state.next_change() for state in states)]

    def _report(self, dropped: list[Dropped]) -> None:
        """One line and one count per label newly dropped, not at every recompute."""
        now = frozenset(dropped)
        for drop in sorted(now - self._dropped, key=lambda d: (d.resource, d.key)):
            self.recorder.label_dropped(drop.resource, drop.reason)
            log.warning(
                "resource %s: node label %s not published (%s): %s",
                drop.resource,
                drop.key,
                drop.reason.replace("_", " "),
                clip(drop.detail, 200),
            )
        self._dropped = now

    async def _sync(self) -> bool:
        """Publish the labels unless they are what is published; False when it failed."""
        try:
            if not self._known:
                self._published, self._known = await self.sink.current(), True
            labels = self.labels()
            if labels == self._published:
                return True
            await self.sink.publish(labels)
        except (OSError, GenericdpError) as err:
            self.recorder.label_write(ok=False)
            log.warning("node labels: %s: %s", self.sink.what, err)
            return False
        self._published = dict(labels)
        self.backoff.reset()
        self.recorder.label_write(ok=True)
        log.info("node labels: %s holds %d label(s)", self.sink.what, len(labels))
        return True
