"""Pure pieces of the embedded kubelet: the name rule and device choice."""

from __future__ import annotations

import pytest

from genericdp.k8snames import is_extended_resource_name
from genericdp.kubelet.embedded.admission import choose_devices


@pytest.mark.parametrize(
    "name",
    [
        "example.com/serial",
        "a.b/c_d.e-f",
        "x/y",
        "example.com/" + "s" * 63,
        "sub.example.com/GPU",  # the name part may be upper case
    ],
)
def test_kubelet_accepts_extended_names(name: str) -> None:
    """Names the kubelet's IsExtendedResourceName accepts pass."""
    assert is_extended_resource_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "serial",
        "kubernetes.io/serial",
        "foo.kubernetes.io/serial",  # any *kubernetes.io/ namespace is native
        "requests.example.com/serial",
        "Example.com/serial",
        "example.com/",
        "/serial",
        "example.com/-serial",
        "example.com/serial_",
        "example.com/" + "s" * 64,
        "-example.com/serial",
        "example..com/serial",
        "example.com/a/b",
        "example.com/ser ial",
        "d" * 250 + ".com/x",  # "requests." + domain exceeds 253 characters
    ],
)
def test_kubelet_refuses_other_names(name: str) -> None:
    """Names the kubelet refuses at Register fail."""
    assert not is_extended_resource_name(name)


def test_choose_takes_valid_preferred_ids_first() -> None:
    """Preferred IDs that are available come first, in the plugin's order."""
    assert choose_devices(["a", "b", "c", "d"], 2, ["d", "b"]) == ("d", "b")


def test_choose_fills_up_past_invalid_preferences() -> None:
    """Unknown or duplicate preferred IDs are skipped and the rest comes from available."""
    assert choose_devices(["a", "b", "c"], 3, ["zz", "c", "c"]) == ("c", "a", "b")


def test_choose_ignores_extra_preferred_ids() -> None:
    """A preference longer than the request is cut to the requested count."""
    assert choose_devices(["a", "b", "c"], 1, ["b", "c"]) == ("b",)


def test_choose_refuses_more_than_available() -> None:
    """Asking for more than available is a programming error, caught before any RPC."""
    with pytest.raises(ValueError, match="cannot choose 3 of 2"):
        choose_devices(["a", "b"], 3)
