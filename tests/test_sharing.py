"""Unbounded sharing and units held after they vanish, in the device state alone."""

from __future__ import annotations

from genericdp.config import load_text
from genericdp.config.model import UNBOUNDED_INDEX_LIMIT
from genericdp.deviceplugin.replicas import Replicas, counts, device_list
from genericdp.deviceplugin.sharing import advertised_indices, idle_ids, replica_index, sharing_text
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import DeviceInfo
from genericdp.report import build_report, report_dict
from genericdp.runtime.state import DeviceState


def _unit(uid: str, numa: int | None = None) -> Unit:
    return Unit(id=uid, nodes=(), numa_node=numa)


def _ids(state: DeviceState) -> list[str]:
    return [d.id for d in device_list(state)]


def _healthy(state: DeviceState) -> dict[str, bool]:
    return {d.id: d.healthy for d in device_list(state)}


def test_replica_index_reads_only_ids_we_write() -> None:
    """Only <unit>::<i> with i in canonical decimal, below the limit, has an index."""
    assert replica_index("kvm::0") == 0
    assert replica_index("kvm::17") == 17
    for bad in ("kvm", "kvm::", "kvm::07", "kvm::-1", "kvm::x", "kvm::\u0661", "kvm::1.0"):
        assert replica_index(bad) is None, bad
    assert replica_index(f"kvm::{UNBOUNDED_INDEX_LIMIT}") is None
    assert replica_index(f"kvm::{UNBOUNDED_INDEX_LIMIT - 1}") == UNBOUNDED_INDEX_LIMIT - 1


def test_advertised_indices_are_the_held_plus_the_lowest_free() -> None:
    """The free IDs are the lowest indices nobody holds: a released index is reused first."""
    assert advertised_indices((), 4) == (0, 1, 2, 3)
    assert advertised_indices((0, 1), 4) == (0, 1, 2, 3, 4, 5)
    assert advertised_indices((0, 2, 5), 2) == (0, 1, 2, 3, 5)
    assert advertised_indices((9,), 1) == (0, 9)


def test_unbounded_unit_lists_a_few_free_ids_and_follows_what_is_held() -> None:
    """Taking IDs adds new ones, releasing reclaims them; never more than freeIds free."""
    state = DeviceState(Replicas(free=3))
    state.set_units([_unit("kvm", numa=0)])
    assert tuple(device_list(state)) == tuple(DeviceInfo(f"kvm::{i}", True, 0) for i in range(3))
    state.set_in_use({"kvm::0", "kvm::1"})
    assert _ids(state) == ["kvm::0", "kvm::1", "kvm::2", "kvm::3", "kvm::4"]
    assert counts(state) == (5, 5)
    version = state.version
    state.set_in_use({"kvm::1"})  # kvm::0 released: it is free again, kvm::4 goes
    assert _ids(state) == ["kvm::0", "kvm::1", "kvm::2", "kvm::3"]
    assert state.version > version
    version = state.version
    state.set_in_use({"kvm::1"})
    assert state.version == version, "the same holders again change nothing"


def test_unbounded_allocate_accepts_any_index_of_a_unit() -> None:
    """An ID just dropped from the list (the kubelet picked it meanwhile) is still ours."""
    state = DeviceState(Replicas(free=2))
    state.set_units([_unit("fuse")])
    assert state.known("fuse::0")
    assert state.known("fuse::40")
    assert not state.known("fuse")
    assert not state.known("fuse::04")
    assert not state.known("other::0")
    found = state.lookup(["fuse::40", "fuse::x"])
    assert [u.id for u in found.units] == ["fuse"]
    assert found.unknown == ("fuse::x",)


def test_unbounded_health_applies_to_every_id_of_the_unit() -> None:
    """An unhealthy unbounded unit lists its held and free IDs Unhealthy."""
    state = DeviceState(Replicas(free=2))
    state.set_units([_unit("tun")])
    state.set_in_use({"tun::0"})
    state.set_unhealthy({"tun"})
    assert _healthy(state) == {"tun::0": False, "tun::1": False, "tun::2": False}
    assert counts(state) == (3, 0)


def test_switching_between_bounded_and_unbounded_changes_the_list() -> None:
    """A reload from count: 2 to unbounded and back re-lists the IDs."""
    state = DeviceState(Replicas(2))
    state.set_units([_unit("kvm")])
    assert _ids(state) == ["kvm::0", "kvm::1"]
    assert state.set_ids(Replicas(1, 4))
    assert _ids(state) == ["kvm::0", "kvm::1", "kvm::2", "kvm::3"]
    assert state.set_ids(Replicas(1))
    assert _ids(state) == ["kvm"]


def test_a_held_unit_that_vanishes_stays_listed_unhealthy_until_released() -> None:
    """Gone while held: listed Unhealthy, refused by Allocate; dropped once released."""
    state = DeviceState(Replicas())
    state.set_units([_unit("a"), _unit("b")])
    state.set_in_use({"a"})
    assert state.set_units([_unit("b")])
    assert _healthy(state) == {"a": False, "b": True}
    assert state.gone == {"a"}
    assert "a" not in state.units, "gone units are no longer discovered units"
    assert state.lookup(["a"]).unhealthy == ("a",)
    assert counts(state) == (2, 1)
    assert state.set_in_use(set()) == ("a",)
    assert _healthy(state) == {"b": True}
    assert state.gone == frozenset()


def test_an_unheld_unit_that_vanishes_leaves_the_list_at_once() -> None:
    """Nobody holds it: it simply leaves, as before."""
    state = DeviceState(Replicas())
    state.set_units([_unit("a"), _unit("b")])
    state.set_in_use({"b"})
    state.set_units([_unit("b")])
    assert _ids(state) == ["b"]


def test_a_held_unit_that_comes_back_is_healthy_again_under_its_id() -> None:
    """Replugged with the same ID while still held: one entry, Healthy again."""
    state = DeviceState(Replicas(2))
    state.set_units([_unit("a")])
    state.set_in_use({"a::1"})
    state.set_units([])
    assert _healthy(state) == {"a::0": False, "a::1": False}
    state.set_units([_unit("a")])
    assert _healthy(state) == {"a::0": True, "a::1": True}
    assert state.gone == frozenset()
    assert state.set_in_use(set()) == ()
    assert _ids(state) == ["a::0", "a::1"]


def test_a_vanished_unbounded_unit_lists_only_its_held_ids() -> None:
    """Gone: no free IDs are offered any more, the held ones stay Unhealthy."""
    state = DeviceState(Replicas(free=2))
    state.set_units([_unit("kvm")])
    state.set_in_use({"kvm::0", "kvm::1"})
    state.set_units([])
    assert _healthy(state) == {"kvm::0": False, "kvm::1": False}
    state.set_units([_unit("kvm")])  # back: the held IDs again, plus two free ones
    assert _healthy(state) == {f"kvm::{i}": True for i in range(4)}


def test_held_ids_of_a_unit_never_seen_are_listed_unhealthy() -> None:
    """After a restart, an ID the kubelet's checkpoint holds for a unit now missing
    stays in the list (Unhealthy) until it is released."""
    state = DeviceState(Replicas())
    state.set_units([_unit("b")])
    state.set_in_use({"a"})
    assert _healthy(state) == {"a": False, "b": True}
    assert state.lookup(["a"]).unhealthy == ("a",)
    assert state.set_in_use(set()) == ("a",)
    assert _ids(state) == ["b"]


def test_discover_shows_the_ids_an_idle_unit_advertises() -> None:
    """`discover` lists an unbounded unit's first free IDs and says how it is shared."""
    text = (
        "version: v1\nresources:\n  - name: example.com/kvm\n    match: [{glob: /dev/kvm}]\n"
        "    count: unbounded\n    freeIds: 2\n  - name: example.com/tun\n"
        "    match: [{glob: /dev/net/tun}]\n    count: 3\n"
    )
    kvm, tun = load_text(text, "k.yaml").resources
    assert idle_ids(kvm, "kvm") == ("kvm::0", "kvm::1")
    assert idle_ids(tun, "tun") == ("tun::0", "tun::1", "tun::2")
    assert sharing_text(kvm) == "unbounded, 2 free IDs"
    assert sharing_text(tun) == "3"
    shown = report_dict(build_report(kvm, [_unit("kvm")]))
    assert (shown["count"], shown["freeIds"], shown["capacity"]) == ("unbounded", 2, 2)
    assert shown["units"][0]["deviceIds"] == ["kvm::0", "kvm::1"]
    assert "freeIds" not in report_dict(build_report(tun, [_unit("tun")]))
