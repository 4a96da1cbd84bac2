"""Scale cases with budgets: Allocate and GetPreferredAllocation over huge resources.

Run alone with ``.venv/bin/python -m bench.scale`` (``./dev bench`` runs it
too). Unlike the rest of bench/, these cases have budgets: the process exits
1 when one is exceeded. The budgets are several times what a loaded 2-core CI
machine measures, and far below what the code took before it was made to
scale (``count: 1000`` over 1000 units: 0.2-0.6 s and 44 MB per Allocate of
one ID, 410 MB in all; GetPreferredAllocation over 10,000 IDs: 6-100 s).
"""

from __future__ import annotations

import asyncio
import functools
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from genericdp.config import load_text  # noqa: E402
from genericdp.config.model import PreferredAllocation  # noqa: E402
from genericdp.deviceplugin.backend import DevicePluginBackend  # noqa: E402
from genericdp.deviceplugin.plugin import ResourcePlugin  # noqa: E402
from genericdp.deviceplugin.preferred import preferred_allocation  # noqa: E402
from genericdp.deviceplugin.replicas import Replicas  # noqa: E402
from genericdp.discovery.model import DeviceNode, Unit  # noqa: E402
from genericdp.kubelet.devices import replica_ids  # noqa: E402
from genericdp.kubelet.servicer import allocate_response, list_response  # noqa: E402
from genericdp.runtime.context import ResourceContext  # noqa: E402
from genericdp.runtime.resource import ResourceRunner  # noqa: E402
from genericdp.runtime.state import DeviceState  # noqa: E402
from genericdp.settings import Settings  # noqa: E402

MIB = 1024 * 1024


@dataclass(frozen=True)
class Result:
    name: str
    value: float
    budget: float
    unit: str

    @property
    def ok(self) -> bool:
        return self.value <= self.budget

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "OVER BUDGET"
        return (
            f"{self.name:<62} {self.value:10.3f} {self.unit:<3} budget {self.budget:8.3f}"
            f" {self.unit:<3} {verdict}"
        )


def _units(n: int, *, numa: bool = False) -> list[Unit]:
    return [
        Unit(
            id=f"u{i:05d}",
            nodes=(DeviceNode(f"/dev/x{i}", f"/dev/x{i}"),),
            numa_node=i % 4 if numa else None,
            parent=f"p{i // 4}" if numa else None,
        )
        for i in range(n)
    ]


async def _no_hook(*_args: object, **_kwargs: object) -> None:
    return None


def _median_seconds(call: Callable[[], object], trials: int) -> float:
    """Median CPU seconds of ``call``: the budget is about our work, and the CPU time of a
    single-threaded call barely moves when other processes share the machine."""
    samples = []
    for _ in range(trials):
        start = time.process_time()
        call()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def allocate_cases(units: int = 1000, count: int = 1000) -> list[Result]:
    """``count: 1000`` over 1000 units (a million IDs): Allocate of one, and the list."""
    text = "version: v1\nresources:\n- name: example.com/x\n  match: [glob: /dev/x*]\n"
    definition = load_text(f"{text}  count: {count}\n", "scale.yaml").resources[0]
    label = f"{units} units x count {count}"
    results = []
    start = time.perf_counter()
    state = DeviceState(Replicas(count), units=_units(units))
    results.append(Result(f"{label}: device state", time.perf_counter() - start, 0.5, "s"))
    settings = Settings.model_validate({"plugin_dir": Path("/nonexistent")})
    context = ResourceContext(settings, discover=lambda *_: (), run_hook=_no_hook)
    backend = DevicePluginBackend(settings)
    plugin = ResourceRunner(definition, context, backend, state=state).edge
    if not isinstance(plugin, ResourcePlugin):
        raise TypeError("plugin is not ResourcePlugin")
    rng = random.Random(7)  # noqa: S311 -- which IDs are asked for does not matter
    ids = [f"u{rng.randrange(units):05d}::{rng.randrange(count)}" for _ in range(50)]

    async def allocate_all() -> list[float]:
        samples = []
        for device_id in ids:
            begin = time.perf_counter()
            await plugin.allocate([(device_id,)], allocate_response)
            samples.append(time.perf_counter() - begin)
        return samples

    samples = asyncio.run(allocate_all())
    median_ms = statistics.median(samples) * 1000
    results.append(Result(f"{label}: Allocate of 1 ID (median)", median_ms, 20.0, "ms"))
    tracemalloc.start()
    asyncio.run(plugin.allocate([(ids[0],)], allocate_response))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    results.append(Result(f"{label}: Allocate of 1 ID, peak memory", peak / MIB, 1.0, "MiB"))
    start = time.perf_counter()
    state.set_unhealthy({"u00001"})
    results.append(
        Result(f"{label}: a health change", (time.perf_counter() - start) * 1000, 50.0, "ms")
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    response = list_response(plugin.devices()[1], resource="example.com/x")
    seconds = time.perf_counter() - start
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
    name = f"{label}: ListAndWatch message ({len(response.devices)} IDs fit 4 MiB)"
    results.append(Result(name, seconds, 10.0, "s"))
    results.append(Result(f"{name}, max RSS growth", grown, 64.0, "MiB"))
    return results


def preferred_cases(n: int = 10_000) -> list[Result]:
    """GetPreferredAllocation over ``n`` IDs (one per unit, and 100 units x 100 replicas)."""
    results = []
    spread_units = {u.id: u for u in _units(n, numa=True)}
    shared_units = {u.id: u for u in _units(n // 100, numa=True)}
    layouts = {
        f"{n} units": (spread_units, list(spread_units)),
        f"{n // 100} units x 100": (
            shared_units,
            [d for u in shared_units for d in replica_ids(u, 100)],
        ),
    }
    for layout, (units, ids) in layouts.items():
        random.Random(3).shuffle(ids)  # noqa: S311 -- the kubelet sends them in random order
        for policy in (PreferredAllocation.PACKED, PreferredAllocation.SPREAD):
            for size in (2, len(ids) // 2, len(ids)):
                call = functools.partial(
                    preferred_allocation,
                    policy,
                    available=ids,
                    must_include=ids[:1],
                    size=size,
                    units=units,
                )
                seconds = _median_seconds(call, 3)
                name = f"GetPreferredAllocation {layout}, {policy.value}, size {size} (CPU)"
                results.append(Result(name, seconds, 3.0, "s"))
    return results


def main() -> int:
    """Run every case, print one line each; 1 when any is over its budget."""
    with tempfile.TemporaryDirectory(prefix="gdp-scale-"):
        results = [*allocate_cases(), *preferred_cases()]
    for result in results:
        print(result)
    over = [r for r in results if not r.ok]
    if over:
        print(f"{len(over)} case(s) over budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
