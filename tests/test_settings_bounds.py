"""Timing settings are finite and bounded: 0 was a busy loop, infinity a wait that never ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from genericdp.settings import MAX_INTERVAL, MAX_SETTLE, MIN_INTERVAL, MIN_SETTLE, Settings
from tests.test_cli import GOOD, run

TIMINGS = {
    "rescan_interval": (MIN_INTERVAL, MAX_INTERVAL),
    "pod_resources_poll_interval": (MIN_INTERVAL, MAX_INTERVAL),
    "hotplug_settle": (MIN_SETTLE, MAX_SETTLE),
    "reload_settle": (MIN_SETTLE, MAX_SETTLE),
}


@pytest.mark.parametrize("name", sorted(TIMINGS))
@pytest.mark.parametrize("value", ["0", "-1", "inf", "-inf", "nan", "1e12"])
def test_timing_setting_out_of_bounds_is_refused(name: str, value: str) -> None:
    """Zero, negative, infinite, NaN and absurdly long timings are settings errors."""
    with pytest.raises(ValidationError) as caught:
        Settings(**{name: value})  # type: ignore[arg-type]
    assert [e["loc"] for e in caught.value.errors()] == [(name,)]


@pytest.mark.parametrize("name", sorted(TIMINGS))
def test_timing_setting_bounds_are_accepted(name: str) -> None:
    """The minimum and the maximum themselves are valid."""
    low, high = TIMINGS[name]
    assert getattr(Settings(**{name: low}), name) == low  # type: ignore[arg-type]
    assert getattr(Settings(**{name: high}), name) == high  # type: ignore[arg-type]


def test_rescan_interval_zero_exits_2_naming_flag_and_variable(tmp_path: Path) -> None:
    """`serve --rescan-interval 0` (a busy loop) exits 2 with the flag, variable and value."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("serve", "--config", str(cfg), "--rescan-interval", "0")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: setting rescan_interval (flag --rescan-interval or GENERICDP_RESCAN_INTERVAL):"
        f" Input should be greater than or equal to {MIN_INTERVAL}, not '0.0'"
    ), result.stderr
    assert "Traceback" not in result.stderr


def test_infinite_settle_in_environment_exits_2(tmp_path: Path) -> None:
    """GENERICDP_RELOAD_SETTLE=inf exits 2 saying the value must be finite."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("serve", "--config", str(cfg), env={"GENERICDP_RELOAD_SETTLE": "inf"})
    assert result.returncode == 2
    assert "GENERICDP_RELOAD_SETTLE" in result.stderr
    assert "finite number, not 'inf'" in result.stderr


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("256.1.1.1:80", "'256.1.1.1' is not an IPv4 address"),
        ("1.2.3:80", "'1.2.3' is not an IPv4 address"),
        ("-bad-.example:80", "'-bad-.example' is not a host name or address"),
        ("a..b:80", "'a..b' is not a host name or address"),
        ("under_score:80", "'under_score' is not a host name or address"),
    ],
)
def test_metrics_address_with_an_impossible_host_exits_2(
    tmp_path: Path, address: str, reason: str
) -> None:
    """`--metrics-address 256.1.1.1:80` exits 2 naming the flag, the variable and the value."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    roots = [f"--{name}={tmp_path / name}" for name in ("plugin-dir", "cdi-dir")]
    result = run("serve", "--config", str(cfg), *roots, f"--metrics-address={address}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "error: setting metrics_address (flag --metrics-address or GENERICDP_METRICS_ADDRESS):"
    ), result.stderr
    assert reason in result.stderr
    assert repr(address) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "address",
    [
        ":9090",
        "0.0.0.0:9090",
        "127.0.0.1:0",
        "[::1]:9090",
        "localhost:80",
        "node-1.example.com:8080",
    ],
)
def test_metrics_addresses_that_can_be_listened_on_are_accepted(address: str) -> None:
    """Host names, IPv4 and bracketed IPv6 addresses, and an empty host, all parse."""
    assert Settings(metrics_address=address).metrics_listen is not None  # type: ignore[call-arg]
