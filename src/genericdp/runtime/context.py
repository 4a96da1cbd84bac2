"""What every resource shares, built once by the supervisor: ``ResourceContext``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from genericdp.aio import Backoff
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Roots, Unit
from genericdp.hooks import HookRunner
from genericdp.runtime.budget import NodeBudget
from genericdp.runtime.owed import Owed
from genericdp.runtime.recorder import NO_METRICS, Recorder
from genericdp.settings import Settings

Discover = Callable[[ResourceDefinition, Roots], Sequence[Unit]]


@dataclass(frozen=True)
class ResourceContext:
    """What every resource's runner, edge, allocator and cleaner share (its settings
    have their defaults in ``Settings`` alone)."""

    settings: Settings
    discover: Discover
    run_hook: HookRunner
    recorder: Recorder = NO_METRICS
    cleanup_backoff: Callable[[], Backoff] | None = None
    on_status: Callable[[], None] = lambda: None  # any resource's status changed
    settled_timeout: float = 0.0  # the backend's ``settled_timeout``
    owed_records: str | None = None  # the backend's ``owed_records``
    budget: NodeBudget = field(default_factory=NodeBudget)

    @cached_property
    def roots(self) -> Roots:
        settings = self.settings
        return Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)

    @cached_property
    def owed(self) -> Owed:
        return Owed(self.settings.state_path, self.owed_records)
