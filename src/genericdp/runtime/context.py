"""What every resource shares, built once by the supervisor: ``ResourceContext``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from genericdp.aio import Backoff
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Roots, Unit
from genericdp.hooks import HookRunner
from genericdp.runtime.recorder import NO_METRICS, Recorder

Discover = Callable[[ResourceDefinition, Roots], Sequence[Unit]]


@dataclass(frozen=True)
class ResourceContext:
    """What every resource's runner, edge, allocator and cleaner share: built once
    by the supervisor from its settings, instead of a dozen arguments per constructor."""

    plugin_dir: Path
    roots: Roots
    discover: Discover
    run_hook: HookRunner
    node_name: str = ""
    rescan_interval: float = 60.0
    settle: float = 0.05  # seconds a burst of state changes may take (ListAndWatch)
    recorder: Recorder = NO_METRICS
    cleanup_backoff: Callable[[], Backoff] | None = None
    cdi_dir: Path = Path("/var/run/cdi")
    on_status: Callable[[], None] = lambda: None  # any resource's status changed
