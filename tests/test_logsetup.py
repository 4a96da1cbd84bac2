"""RateLimitedLog: a flood of one message becomes a few lines and a count."""

from __future__ import annotations

import logging

import pytest

from genericdp.logsetup import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.ratelimit"]


def test_a_burst_per_period_then_the_count_of_what_was_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """burst lines per period and key; the next period's first line says how many were dropped."""
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), period=10, burst=3, clock=clock)
    logged = [limited.warning("flood", "client %d", i) for i in range(1000)]
    assert logged.count(True) == 3
    assert messages(caplog) == ["client 0", "client 1", "client 2"]
    clock.now = 10.0
    assert limited.warning("flood", "client %d", 1000)
    assert (
        messages(caplog)[-1] == "client 1000 (997 more like this were not logged before this one)"
    )


def test_keys_are_limited_separately(caplog: pytest.LogCaptureFixture) -> None:
    """One noisy kind of message does not silence another."""
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), burst=1, clock=Clock())
    for _ in range(10):
        limited.warning("a", "a")
        limited.warning("b", "b")
    assert messages(caplog) == ["a", "b"]


def test_the_key_table_is_bounded() -> None:
    """Even with ever new keys the table stays at MAX_KEYS entries."""
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), clock=Clock())
    for i in range(RateLimitedLog.MAX_KEYS * 4):
        limited.log(logging.DEBUG, f"k{i}", "m")
    assert len(limited._windows) <= RateLimitedLog.MAX_KEYS
