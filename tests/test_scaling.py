"""Allocate and GetPreferredAllocation cost what the kubelet sends, not what the resource has.

``count: 1000`` over 1000 units is a million device IDs: an Allocate of one
must not build anything of that size, and GetPreferredAllocation over 10,000
IDs must not scan them once per pick. The fast versions are checked against
the plain greedy they replace (kept here as the reference) and against
budgets far below what the old code took.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from genericdp.config import load_text
from genericdp.config.model import PreferredAllocation, ResourceDefinition
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.deviceplugin.holders import released_units
from genericdp.deviceplugin.plugin import ResourcePlugin
from genericdp.deviceplugin.preferred import preferred_allocation
from genericdp.deviceplugin.replicas import Replicas
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kubelet.devices import replica_ids, unit_id_of
from genericdp.kubelet.podresources import PodDevices
from genericdp.kubelet.servicer import allocate_response, list_response
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.resource import ResourceRunner
from genericdp.runtime.state import DeviceState
from genericdp.settings import Settings

R = "example.com/x"


# -- the reference greedy (the straightforward O(size x n) version) -----------------------


@dataclass(frozen=True)
class _Place:
    numa: int
    parent: str
    unit: str


def _place(device_id: str, units: Mapping[str, Unit]) -> _Place:
    uid = unit_id_of(device_id)
    unit = units.get(uid)
    numa = unit.numa_node if unit is not None and unit.numa_node is not None else -1
    parent = unit.parent if unit is not None and unit.parent else f"unit:{uid}"
    return _Place(numa, parent, uid)


def reference(
    policy: PreferredAllocation,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    units: Mapping[str, Unit],
) -> tuple[str, ...]:
    chosen = list(dict.fromkeys(must_include))
    candidates = [d for d in dict.fromkeys(available) if d not in set(chosen)]
    places = {d: _place(d, units) for d in [*chosen, *candidates]}
    order = {d: i for i, d in enumerate(candidates)}
    avail_numa = Counter(places[d].numa for d in candidates)
    avail_parent = Counter(places[d].parent for d in candidates)
    used_numa = Counter(places[d].numa for d in chosen)
    used_parent = Counter(places[d].parent for d in chosen)
    used_unit = Counter(places[d].unit for d in chosen)

    def packed_key(d: str) -> tuple[int, ...]:
        p = places[d]
        return (
            -used_numa[p.numa],
            -used_parent[p.parent],
            -used_unit[p.unit],
            -avail_numa[p.numa],
            -avail_parent[p.parent],
            order[d],
        )

    def spread_key(d: str) -> tuple[int, ...]:
        p = places[d]
        return (used_numa[p.numa], used_parent[p.parent], used_unit[p.unit], order[d])

    key = spread_key if policy is PreferredAllocation.SPREAD else packed_key
    while len(chosen) < size and candidates:
        plain = policy is PreferredAllocation.NONE
        best = candidates[0] if plain else min(candidates, key=key)
        candidates.remove(best)
        chosen.append(best)
        p = places[best]
        used_numa[p.numa] += 1
        used_parent[p.parent] += 1
        used_unit[p.unit] += 1
    return tuple(chosen)


@pytest.mark.parametrize("seed", range(20))
def test_preferred_allocation_matches_the_reference_greedy(seed: int) -> None:
    """The heap-based greedy answers exactly what the plain greedy does, for any input."""
    rng = random.Random(seed)  # noqa: S311 -- reproducible test inputs
    for _ in range(150):
        units = {
            f"u{i}": Unit(
                id=f"u{i}",
                nodes=(),
                numa_node=rng.choice([None, 0, 1, 2]),
                parent=rng.choice([None, "pa", "pb", "pc"]),
            )
            for i in range(rng.randint(0, 10))
        }
        ids = [d for u in [*units, "ghost"] for d in replica_ids(u, rng.choice([1, 2, 3]))]
        rng.shuffle(ids)
        available = ids[: rng.randint(0, len(ids))]
        must = rng.sample(ids, rng.randint(0, min(3, len(ids))))
        size = rng.randint(0, len(ids) + 1)
        for policy in PreferredAllocation:
            args = (available, must, size, units)
            assert preferred_allocation(
                policy, available=available, must_include=must, size=size, units=units
            ) == reference(policy, *args), (policy, args)


@pytest.mark.parametrize("policy", [PreferredAllocation.PACKED, PreferredAllocation.SPREAD])
def test_preferred_allocation_of_thousands_is_fast(policy: PreferredAllocation) -> None:
    """2,000 IDs, all wanted: well under a CPU second (the plain greedy took several)."""
    units = {
        f"u{i:05d}": Unit(id=f"u{i:05d}", nodes=(), numa_node=i % 4, parent=f"p{i // 3}")
        for i in range(2000)
    }
    ids = list(units)
    random.Random(1).shuffle(ids)  # noqa: S311 -- reproducible test inputs
    start = time.process_time()  # CPU time: other processes on the machine barely move it
    got = preferred_allocation(policy, available=ids, must_include=(), size=2000, units=units)
    elapsed = time.process_time() - start
    assert sorted(got) == sorted(ids)
    assert elapsed < 1.0, f"{elapsed:.2f}s"


# -- release tracking: a claim costs the request -----------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_claim_releases_what_the_in_use_diff_says(seed: int) -> None:
    """claim's releases equal the diff of in_use before and after, over random histories."""
    rng = random.Random(seed)  # noqa: S311 -- reproducible test inputs
    tracker = UsageTracker()
    ids = [d for u in ("a", "b", "c") for d in replica_ids(u, 3)]
    tracker.observe([])
    for _ in range(300):
        step = rng.random()
        if step < 0.3:
            pods = [
                PodDevices("ns", f"p{i}", "c", R, tuple(rng.sample(ids, rng.randint(0, 2))))
                for i in range(rng.randint(0, 3))
            ]
            tracker.observe(pods)
        elif step < 0.6:
            tracker.handed_out(R, rng.sample(ids, rng.randint(1, 3)))
        else:
            before = tracker.in_use(R)
            claimed = rng.sample(ids, rng.randint(1, 3))
            got = tracker.claim(R, claimed)
            assert got == released_units({R: before}, {R: tracker.in_use(R)})


# -- Allocate: a million IDs, one asked for ----------------------------------------------


async def _no_hook(*_args: object, **_kwargs: object) -> None:
    return None


def _plugin(definition: ResourceDefinition, state: DeviceState, tmp_path: Path) -> ResourcePlugin:
    """One resource's device-plugin edge over ``state`` (never started)."""
    settings = Settings.model_validate({"plugin_dir": tmp_path})
    context = ResourceContext(settings, discover=lambda *_: (), run_hook=_no_hook)
    plugin = ResourceRunner(definition, context, DevicePluginBackend(settings), state=state).edge
    assert isinstance(plugin, ResourcePlugin)
    return plugin


async def test_allocate_of_one_id_among_hundreds_of_thousands_is_small(tmp_path: Path) -> None:
    """Allocate of one ID of ``count: 1000`` over 300 units allocates kilobytes, not megabytes."""
    text = "version: v1\nresources:\n- name: example.com/x\n  match: [glob: /dev/x*]\n"
    definition = load_text(text + "  count: 1000\n", "t.yaml").resources[0]
    units = [
        Unit(id=f"u{i:04d}", nodes=(DeviceNode(f"/dev/x{i}", f"/dev/x{i}"),)) for i in range(300)
    ]
    state = DeviceState(Replicas(1000), units=units)
    plugin = _plugin(definition, state, tmp_path)
    await plugin.allocate([("u0000::0",)], allocate_response)  # warm up imports and caches
    tracemalloc.start()
    try:
        await plugin.allocate([("u0123::999",)], allocate_response)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"{peak} bytes"
    unknown = state.lookup(["u0123::1000", "u0123::01", "u0123", "nope::1", "u0123::٣"]).unknown
    assert len(unknown) == 5


def test_a_million_ids_are_not_built_to_change_or_list_them(tmp_path: Path) -> None:
    """State changes and status cost units; ListAndWatch builds only what fits in 4 MiB."""
    text = "version: v1\nresources:\n- name: example.com/x\n  match: [glob: /dev/x*]\n"
    definition = load_text(text + "  count: 1000\n", "t.yaml").resources[0]
    units = [
        Unit(id=f"u{i:04d}", nodes=(DeviceNode(f"/dev/x{i}", f"/dev/x{i}"),), numa_node=i % 2)
        for i in range(1000)
    ]
    tracemalloc.start()
    try:
        state = DeviceState(Replicas(1000), units=units)
        plugin = _plugin(definition, state, tmp_path)
        assert state.set_unhealthy({"u0001"})
        assert not state.set_unhealthy({"u0001"})
        assert state.set_cleaning("u0002", cleaning=True)
        status = plugin.status()
        _, devices = plugin.devices()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, f"{peak} bytes"
    assert (status.devices, status.healthy) == (1_000_000, 998_000)
    response = list_response(devices, resource="example.com/x")
    assert 100_000 < len(response.devices) < 1_000_000
    assert response.ByteSize() <= 4 * 1024 * 1024
    assert (response.devices[1000].ID, response.devices[1000].health) == ("u0001::0", "Unhealthy")
    assert response.devices[3999].ID == "u0003::999"
