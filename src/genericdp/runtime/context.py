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


SETTLE = 0.05  # seconds a burst of state changes may take (ListAndWatch, Register)


@dataclass(frozen=True)
class ResourceContext:
    """What every resource's runner, edge, allocator and cleaner share: built once
    by the supervisor instead of a dozen arguments per constructor. Its settings
    have their defaults in ``Settings`` alone."""

    settings: Settings
    discover: Discover
    run_hook: HookRunner
    settle: float = SETTLE
    recorder: Recorder = NO_METRICS
    cleanup_backoff: Callable[[], Backoff] | None = None
    on_status: Callable[[], None] = lambda: None  # any resource's status changed
    # The longest a first wake waits for the backend's usage to settle
    # (``Backend.settled_timeout``; 0: nothing to wait for).
    settled_timeout: float = 0.0
    owed_records: str | None = None  # the backend's ``owed_records``
    # The units and IDs every resource of the node holds, against the node's limits.
    budget: NodeBudget = field(default_factory=NodeBudget)

    @cached_property
    def roots(self) -> Roots:
        settings = self.settings
        return Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)

    @cached_property
    def owed(self) -> Owed:
        """The units handed out and owed a cleanup, and those whose cleanup cannot run."""
        return Owed(self.settings.state_path, self.owed_records)
