"""The config validator and the embedded kubelet agree on which resource names are valid."""

from __future__ import annotations

import pytest

from genericdp.config.names import validate_resource_name
from genericdp.k8snames import is_extended_resource_name

NAMES = [
    "example.com/serial",
    "example.com/a",
    "a.b.c/x_y.z-1",
    "example.com/" + "a" * 63,
    "example.com/" + "a" * 64,
    "kubernetes.io/serial",
    "foo.kubernetes.io/serial",
    "requests.example.com/serial",
    "serial",
    "example.com/",
    "/serial",
    "Example.com/serial",
    "example.com/-serial",
    "example.com/serial-",
    "example.com/se rial",
    "example.com/a/b",
    "exa_mple.com/serial",
    ("a" * 63 + ".") * 3 + "b" * 51 + "/x",
    ("a" * 63 + ".") * 3 + "b" * 53 + "/x",
]


@pytest.mark.parametrize("name", NAMES)
def test_validator_and_kubelet_agree(name: str) -> None:
    """A name the config accepts is one the kubelet accepts, and the other way round."""
    assert (validate_resource_name(name) is None) == is_extended_resource_name(name)


def test_known_answers() -> None:
    """The rules themselves: a few names with the kubelet's verdict."""
    assert is_extended_resource_name("example.com/serial")
    assert not is_extended_resource_name("kubernetes.io/serial")
    assert not is_extended_resource_name("example.com/" + "a" * 64)
    assert not is_extended_resource_name("requests.example.com/serial")


def test_domain_length_boundary() -> None:
    """The kubelet checks "requests.<domain>" against 253 characters: 244 fits, 245 does not."""
    assert is_extended_resource_name(("a" * 63 + ".") * 3 + "b" * 52 + "/x")
    assert not is_extended_resource_name(("a" * 63 + ".") * 3 + "b" * 53 + "/x")
