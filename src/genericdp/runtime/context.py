"""What every resource shares, built once by the supervisor: ``ResourceContext``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    by the supervisor (``of``) instead of a dozen arguments per constructor. Its
    settings have their defaults in ``Settings`` alone."""

    roots: Roots
    discover: Discover
    run_hook: HookRunner
    node_name: str
    rescan_interval: float
    cdi_dir: Path
    settle: float = SETTLE
    recorder: Recorder = NO_METRICS
    cleanup_backoff: Callable[[], Backoff] | None = None
    on_status: Callable[[], None] = lambda: None  # any resource's status changed
    # The longest a first wake waits for the backend's usage to settle
    # (``Backend.settled_timeout``; 0: nothing to wait for).
    settled_timeout: float = 0.0
    # The units and IDs every resource of the node holds, against the node's limits.
    budget: NodeBudget = field(default_factory=NodeBudget)
    # The units handed out and owed a cleanup, and those whose cleanup cannot run.
    owed: Owed = field(default_factory=lambda: Owed(None))

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        discover: Discover,
        run_hook: HookRunner,
        settle: float = SETTLE,
        recorder: Recorder = NO_METRICS,
        cleanup_backoff: Callable[[], Backoff] | None = None,
        on_status: Callable[[], None] = lambda: None,
        settled_timeout: float = 0.0,
        owed_records: str | None = None,
    ) -> ResourceContext:
        """The context of ``settings``, with the runtime's own pieces; ``owed_records``:
        the backend's ``owed_records``."""
        return cls(
            roots=Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root),
            discover=discover,
            run_hook=run_hook,
            node_name=settings.node_name,
            rescan_interval=settings.rescan_interval,
            cdi_dir=settings.cdi_dir,
            settle=settle,
            recorder=recorder,
            cleanup_backoff=cleanup_backoff,
            on_status=on_status,
            settled_timeout=settled_timeout,
            owed=Owed(settings.state_path, owed_records),
        )
