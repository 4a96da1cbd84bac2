"""Small shared rules of the config: durations, resource names, key paths."""

from __future__ import annotations

import pytest

from genericdp.config.durations import parse_duration
from genericdp.config.names import validate_resource_name
from genericdp.config.yamlpos import format_path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300ms", 0.3),
        ("10s", 10.0),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("1h2m3s4ms", 3723.004),
        ("250us", 0.00025),
    ],
)
def test_parse_duration_reads_go_durations(text: str, seconds: float) -> None:
    """Go-style durations parse to float seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "10 s", "s", "1d", "-1s", "1s ", "", "1m30", "ten seconds"])
def test_parse_duration_rejects_unparsable_with_the_value_quoted(text: str) -> None:
    """A value that is not a duration is rejected, and the message quotes it."""
    with pytest.raises(ValueError, match="duration") as caught:
        parse_duration(text)
    if text:
        assert repr(text) in str(caught.value)


@pytest.mark.parametrize("text", ["0s", "0ms", "0h0m"])
def test_parse_duration_rejects_zero(text: str) -> None:
    """Durations must be positive."""
    with pytest.raises(ValueError, match="greater than zero"):
        parse_duration(text)


@pytest.mark.parametrize(
    "name",
    [
        "example.com/serial",
        "example.com/Serial_Port.1",
        "a/b",
        "gpu.intel.com/i915",
        "example.com/" + "a" * 63,
        "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 52 + "/x",  # 244 chars
        "kubernetes.iox/serial",  # only kubernetes.io/ is reserved
    ],
)
def test_valid_resource_names(name: str) -> None:
    """Names the kubelet accepts are accepted."""
    assert validate_resource_name(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "must not be empty"),
        ("serial", "exactly one '/'"),
        ("a/b/c", "exactly one '/'"),
        ("kubernetes.io/serial", "reserved"),
        ("gpu.kubernetes.io/serial", "reserved"),
        ("requests.example.com/serial", "'requests.'"),
        ("/serial", "empty domain"),
        ("example.com/", "empty name"),
        ("Example.com/serial", "DNS subdomain"),
        ("-example.com/serial", "DNS subdomain"),
        ("example..com/serial", "DNS subdomain"),
        ("example_com/serial", "DNS subdomain"),
        ("example.com/" + "a" * 64, "longer than 63"),
        ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 53 + "/x", "longer than 244"),
        ("example.com/-serial", "start and end"),
        ("example.com/serial.", "start and end"),
        ("example.com/se rial", "letters, digits"),
    ],
)
def test_invalid_resource_names_say_why(name: str, reason: str) -> None:
    """Names the kubelet rejects come with the reason."""
    problem = validate_resource_name(name)
    assert problem is not None
    assert reason in problem


def test_format_path_joins_keys_and_indexes() -> None:
    """Key paths read like resources[0].match[1].udev.attributes.idVendor."""
    path = ("resources", 0, "match", 1, "udev", "attributes", "idVendor")
    assert format_path(path) == "resources[0].match[1].udev.attributes.idVendor"


def test_format_path_quotes_keys_with_dots() -> None:
    """Keys that would be ambiguous in a dotted path are quoted."""
    assert format_path(("allocate", "annotations", "example.com/u")) == (
        'allocate.annotations["example.com/u"]'
    )
