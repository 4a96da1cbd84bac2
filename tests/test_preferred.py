"""GetPreferredAllocation policy: must_include, size, packed vs spread, determinism."""

from __future__ import annotations

from genericdp.config.model import PreferredAllocation
from genericdp.deviceplugin.preferred import preferred_allocation
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import replica_ids

PACKED = PreferredAllocation.PACKED
SPREAD = PreferredAllocation.SPREAD


def _units(spec: dict[str, tuple[int | None, str | None]]) -> dict[str, Unit]:
    return {uid: Unit(id=uid, nodes=(), numa_node=n, parent=p) for uid, (n, p) in spec.items()}


# Four units, two per NUMA node; a0/a1 share a parent, b0/b1 share another.
UNITS = _units({"a0": (0, "pa"), "a1": (0, "pa"), "b0": (1, "pb"), "b1": (1, "pb")})
ALL = ("a0", "b0", "a1", "b1")  # interleaved on purpose: order must not decide NUMA


def _numa(ids: tuple[str, ...]) -> list[int]:
    nodes = [UNITS[i].numa_node for i in ids]
    return [n for n in nodes if n is not None]


def test_packed_fills_one_numa_node() -> None:
    """Packed keeps a request of two on a single NUMA node."""
    got = preferred_allocation(PACKED, available=ALL, must_include=(), size=2, units=UNITS)
    assert len(got) == 2
    assert len(set(_numa(got))) == 1


def test_spread_uses_every_numa_node() -> None:
    """Spread puts a request of two on two different NUMA nodes."""
    available = ("a0", "a1", "b0", "b1")
    got = preferred_allocation(SPREAD, available=available, must_include=(), size=2, units=UNITS)
    assert sorted(_numa(got)) == [0, 1]


def test_packed_follows_must_include() -> None:
    """Packed fills the NUMA node of a must_include device first, must_include leading."""
    got = preferred_allocation(PACKED, available=ALL, must_include=("b1",), size=2, units=UNITS)
    assert got == ("b1", "b0")


def test_spread_avoids_must_include_node() -> None:
    """Spread adds devices from the NUMA node not yet used by must_include."""
    got = preferred_allocation(SPREAD, available=ALL, must_include=("a1",), size=2, units=UNITS)
    assert got[0] == "a1"
    assert _numa(got) == [0, 1]


def test_size_is_honoured_and_capped_by_available() -> None:
    """The answer has allocation_size IDs, or all available when fewer exist."""
    assert (
        len(preferred_allocation(PACKED, available=ALL, must_include=(), size=3, units=UNITS)) == 3
    )
    assert (
        len(preferred_allocation(SPREAD, available=ALL, must_include=(), size=9, units=UNITS)) == 4
    )


def test_must_include_beyond_size_is_kept() -> None:
    """must_include is always part of the answer, even when it fills the size."""
    got = preferred_allocation(
        SPREAD, available=ALL, must_include=("a0", "b0"), size=1, units=UNITS
    )
    assert got == ("a0", "b0")


def test_packed_keeps_replicas_of_a_unit_together() -> None:
    """With shared units, packed takes replicas of one unit before touching another."""
    units = _units({"u0": (0, "p"), "u1": (0, "p")})
    available = (*replica_ids("u1", 3), *replica_ids("u0", 3))
    got = preferred_allocation(PACKED, available=available, must_include=(), size=2, units=units)
    assert {i.split("::")[0] for i in got} == {"u1"}


def test_spread_spreads_over_units_before_replicas() -> None:
    """With shared units, spread takes one replica of each unit before a second."""
    units = _units({"u0": (0, "p"), "u1": (0, "p")})
    available = (*replica_ids("u0", 3), *replica_ids("u1", 3))
    got = preferred_allocation(SPREAD, available=available, must_include=(), size=2, units=units)
    assert {i.split("::")[0] for i in got} == {"u0", "u1"}


def test_unknown_numa_and_ids_still_answered() -> None:
    """Units without NUMA or parent, and IDs we do not know, still get a deterministic answer."""
    units = _units({"x": (None, None), "y": (None, None)})
    first = preferred_allocation(
        SPREAD, available=("x", "zz", "y"), must_include=(), size=2, units=units
    )
    again = preferred_allocation(
        SPREAD, available=("x", "zz", "y"), must_include=(), size=2, units=units
    )
    assert first == again
    assert len(first) == 2


def test_spread_round_robins_parents_within_a_numa_node() -> None:
    """Spread alternates parents when NUMA is unknown."""
    units = _units({"a0": (None, "pa"), "a1": (None, "pa"), "b0": (None, "pb")})
    got = preferred_allocation(
        SPREAD, available=("a0", "a1", "b0"), must_include=(), size=2, units=units
    )
    assert sorted(got) == ["a0", "b0"]


def test_none_policy_takes_available_in_order() -> None:
    """Policy none answers with the available order (the kubelet should not ask)."""
    got = preferred_allocation(
        PreferredAllocation.NONE, available=ALL, must_include=(), size=2, units=UNITS
    )
    assert got == ("a0", "b0")
