"""The events the runtime reports, through an interface it owns.

``Recorder`` is what the runtime calls (``NO_METRICS`` when nobody listens);
``genericdp.metrics.Metrics`` is the Prometheus one, and the daemon plugs it
in. The result labels are decided here, one place each, so that every
recorder sees the same outcomes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from genericdp.errors import (
    CdiSpecError,
    HookError,
    InvalidDevicesError,
    TemplateRenderError,
    UnsafeAllocationError,
)
from genericdp.hooks import HookRun, HookRunError, HookRunner

if TYPE_CHECKING:
    from genericdp.hooks.execution import ExecResult

ALLOCATION_RESULTS = (
    "ok",
    "invalid",
    "hook_failed",
    "render_failed",
    "refused",
    "cdi_failed",
    "error",
)
REGISTRATION_RESULTS = ("ok", "error")
# One claim of a DRA NodePrepareResources or NodeUnprepareResources call: the
# allocation results, and what only a claim can fail on (``dra/prepare.py``
# tells them apart): ``invalid`` the kubelet's reference to it (UID, names),
# ``claim_failed`` its allocation (unreadable, another node's, a device
# unknown or unhealthy here), ``checkpoint_failed`` writing the checkpoint.
CLAIM_RESULTS = (
    "ok",
    "invalid",
    "claim_failed",
    "hook_failed",
    "render_failed",
    "refused",
    "cdi_failed",
    "checkpoint_failed",
    "error",
)


class Recorder(Protocol):
    """The events the runtime reports; ``Metrics`` counts them, ``NoMetrics`` drops them."""

    def registration(self, resource: str, *, ok: bool) -> None: ...
    def allocation(self, resource: str, result: str, seconds: float) -> None: ...
    def hook_run(self, resource: str, hook: str, result: str, seconds: float) -> None: ...
    def health_probe(self, resource: str, result: str, seconds: float) -> None: ...
    def kubelet_restart(self) -> None: ...
    def config_reload(self, result: str) -> None: ...
    def claim_prepare(self, driver: str, result: str, seconds: float) -> None: ...
    def claim_unprepare(self, driver: str, result: str, seconds: float) -> None: ...
    def label_dropped(self, resource: str, reason: str) -> None: ...
    def label_write(self, *, ok: bool) -> None: ...


class NoMetrics:
    """A ``Recorder`` that records nothing: the runtime's default."""

    def registration(self, resource: str, *, ok: bool) -> None: ...
    def allocation(self, resource: str, result: str, seconds: float) -> None: ...
    def hook_run(self, resource: str, hook: str, result: str, seconds: float) -> None: ...
    def health_probe(self, resource: str, result: str, seconds: float) -> None: ...
    def kubelet_restart(self) -> None: ...
    def config_reload(self, result: str) -> None: ...
    def claim_prepare(self, driver: str, result: str, seconds: float) -> None: ...
    def claim_unprepare(self, driver: str, result: str, seconds: float) -> None: ...
    def label_dropped(self, resource: str, reason: str) -> None: ...
    def label_write(self, *, ok: bool) -> None: ...


NO_METRICS: Recorder = NoMetrics()


_ALLOCATION_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (InvalidDevicesError, "invalid"),
    (HookError, "hook_failed"),
    (TemplateRenderError, "render_failed"),
    (CdiSpecError, "cdi_failed"),
    (UnsafeAllocationError, "refused"),
)


def allocation_result(exc: BaseException | None) -> str:
    """The ``result`` label of an Allocate that raised ``exc`` (None: it succeeded)."""
    if exc is None:
        return "ok"
    for kind, result in _ALLOCATION_ERRORS:
        if isinstance(exc, kind):
            return result
    return "error"  # a bug of ours, or the kubelet cancelled the call


def exec_result(result: ExecResult) -> str:
    """``ok``, ``timeout`` or ``failed`` (non-zero exit, killed, could not start)."""
    if result.timed_out:
        return "timeout"
    return "ok" if result.ok else "failed"


class TimedHooks:
    """A ``HookRunner`` that reports each run's result and duration, then the same outcome."""

    def __init__(
        self, inner: HookRunner, recorder: Recorder, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._inner = inner
        self._recorder = recorder
        self._clock = clock

    async def __call__(self, hook: HookRun) -> object:
        started, result = self._clock(), "failed"
        try:
            outcome = await self._inner(hook)
            result = "ok"
        except HookRunError as exc:
            result = exec_result(exc.result)
            raise
        finally:
            self._recorder.hook_run(hook.resource, hook.name, result, self._clock() - started)
        return outcome
