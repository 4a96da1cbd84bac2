"""What ``/healthz`` and ``/readyz`` answer (pure: the daemon hands in its statuses), and
the routes of the HTTP server."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from genericdp.httpserver import Response, Route

if TYPE_CHECKING:
    from genericdp.runtime.edge import PluginStatus


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: ``ok`` gives 200, else 503; ``text`` is the body."""

    ok: bool
    text: str


def liveness() -> Verdict:
    """Any answer means the loop is alive; no other trouble we know is cured by a restart."""
    return Verdict(ok=True, text="ok")


def readiness(
    statuses: Mapping[str, PluginStatus], *, started: bool, notes: Sequence[str] = ()
) -> Verdict:
    """Ready once the config is applied and each of its resources registered at least once.
    Faults and ``notes`` are listed but never fail it: a driver not loaded on one node must
    not stall a rollout (docs/contributing/architecture.md, "Observability")."""
    if not started:
        return Verdict(ok=False, text="not ready: starting")
    waiting = {n: s for n, s in statuses.items() if s.registrations == 0}
    faults = [f"{n}: Unhealthy: {s.fault}" for n, s in statuses.items() if s.fault]
    faults += [s.limited for s in statuses.values() if s.limited]
    faults += notes
    if not waiting:
        text = f"ready: {len(statuses)} resource(s) registered"
        return Verdict(ok=True, text="\n".join([text, *faults]))
    lines = [f"not ready: {len(waiting)} of {len(statuses)} resource(s) never registered"]
    lines += [f"{n}: {s.last_error or 'not registered yet'}" for n, s in waiting.items()]
    return Verdict(ok=False, text="\n".join([*lines, *faults]))


def with_config_problem(verdict: Verdict, problem: str | None) -> Verdict:
    """``verdict``, not ready while ``problem`` (the config was invalid at start and
    has not been fixed since) holds: the rollout stops at the first node."""
    if problem is None:
        return verdict
    rest = verdict.text.removeprefix("ready: ")
    return Verdict(ok=False, text=f"not ready: {problem}\n{rest}")


class Exposition(Protocol):
    """What /metrics serves: ``Metrics``, or ``reconcile-classes``' own."""

    def exposition(self) -> bytes: ...


def routes(metrics: Exposition, ready: Callable[[], Verdict]) -> dict[str, Route]:
    return {
        "/metrics": lambda: Response(200, metrics.exposition(), CONTENT_TYPE_LATEST),
        "/healthz": lambda: _answer(liveness()),
        "/readyz": lambda: _answer(ready()),
    }


def _answer(verdict: Verdict) -> Response:
    return Response(200 if verdict.ok else 503, (verdict.text + "\n").encode())
