"""kubeletplugin/slices.py without an API server: names, limits, splitting, comparison."""

from __future__ import annotations

import re

import pytest

from genericdp.config.model import Version
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.k8snames import is_dns1123_subdomain
from genericdp.kubeletplugin.slices import (
    MAX_DEVICES_PER_SLICE,
    SliceError,
    comparable,
    device,
    devices,
    pool_slices,
    slice_name,
    typed,
)


def unit(uid: str, **props: str) -> Unit:
    return Unit(uid, (DeviceNode(f"/dev/{uid}", f"/dev/{uid}"),), properties=props)


def test_slice_names_are_stable_subdomains_and_distinct() -> None:
    plain = slice_name("node-1", "genericdp.io", "example.com/serial", 0)
    assert re.fullmatch(r"node-1\.genericdp\.io\.example\.com\.serial\.0-[0-9a-f]{8}", plain)
    odd = slice_name("node-1", "genericdp.io", "Example.com/Serial_Port", 0)
    assert is_dns1123_subdomain(odd)
    assert odd != slice_name("node-1", "genericdp.io", "example.com/serial-port", 0)
    long = slice_name("n" * 250, "genericdp.io", "example.com/serial", 3)
    assert is_dns1123_subdomain(long)
    assert long == slice_name("n" * 250, "genericdp.io", "example.com/serial", 3)


def test_names_whose_readable_parts_agree_derive_distinct_slice_names() -> None:
    """Two valid resources, or nodes and drivers, whose names read the same once '/'
    is '.' never share a slice name (one of them was never published)."""
    assert slice_name("n", "genericdp.io", "a.com/x.y", 0) != slice_name(
        "n", "genericdp.io", "a.com.x/y", 0
    )
    assert slice_name("n.a", "b.io", "a.com/x", 0) != slice_name("n", "a.b.io", "a.com/x", 0)
    pool = pool_slices(
        {"a.com/x.y": [], "a.com.x/y": []}, node="n", driver="genericdp.io", generation=1
    )
    assert len(pool) == 2


def test_values_too_long_for_the_api_are_left_out() -> None:
    made = device("example.com/a", unit("u", ID_SERIAL_SHORT="s" * 65), healthy=True, driver="d.io")
    assert "serial" not in made["attributes"]
    assert typed("x" * 64) == {"string": "x" * 64}
    assert typed(True) == {"bool": True}
    assert typed(3) == {"int": 3}
    assert typed(Version("1.2.3")) == {"version": "1.2.3"}


def test_a_resource_name_longer_than_an_attribute_is_refused() -> None:
    with pytest.raises(SliceError, match="holds at most 64"):
        devices("example.com/" + "x" * 60, [unit("u")], set(), driver="d.io")


def test_an_unhealthy_device_is_tainted_and_says_so() -> None:
    made = device("example.com/a", unit("u"), healthy=False, driver="d.io")
    assert made["attributes"]["healthy"] == {"bool": False}
    assert made["taints"] == [{"key": "d.io/unhealthy", "value": "true", "effect": "NoSchedule"}]


def test_a_pool_splits_per_resource_and_every_slice_counts_them_all() -> None:
    many = devices("example.com/a", [unit(f"u{i}") for i in range(65)], set(), driver="d.io")
    pool = pool_slices(
        {"example.com/a": many, "example.com/b": []}, node="n", driver="d.io", generation=7
    )
    assert len(pool) == 3
    counts = {
        (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
        for s in pool.values()
    }
    assert counts == {(7, 3)}
    sizes = sorted(len(s["spec"]["devices"]) for s in pool.values())
    assert sizes == [0, 1, MAX_DEVICES_PER_SLICE]


def test_comparison_ignores_generation_and_what_the_server_adds() -> None:
    ours = pool_slices(
        {"example.com/a": devices("example.com/a", [unit("u")], {"u"}, driver="d.io")},
        node="n",
        driver="d.io",
        generation=1,
    )
    spec = next(iter(ours.values()))["spec"]
    theirs = {**spec, "pool": {**spec["pool"], "generation": 9}}
    theirs["devices"] = [
        {**d, "taints": [{**t, "timeAdded": "2026-12-01T00:00:00Z"} for t in d["taints"]]}
        for d in spec["devices"]
    ]
    assert comparable(spec) == comparable(theirs)
    empty = {**spec, "devices": []}
    assert comparable(empty) == comparable({k: v for k, v in spec.items() if k != "devices"})
    assert comparable(spec) != comparable(empty)
