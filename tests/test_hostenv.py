"""A ``serve`` a test starts never falls back to the host's paths (``hostenv``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostenv import HOST_PATHS, own_env

TESTS = Path(__file__).resolve().parent
STRIP = 'startswith("GENERICDP_")'


def test_own_env_keeps_the_tests_host_paths_and_drops_every_other_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GENERICDP_LOG_LEVEL", "debug")
    env = own_env(GENERICDP_NODE_NAME="node-a")
    settings = {k: v for k, v in env.items() if k.startswith("GENERICDP_")}
    assert settings == {
        **{name: str(tmp_path / leaf) for name, leaf in HOST_PATHS.items()},
        "GENERICDP_NODE_NAME": "node-a",
    }


def test_no_test_that_starts_serve_strips_the_settings_itself() -> None:
    """Stripping every ``GENERICDP_*`` drops the host paths too: the daemon then tidies
    the host's /var/run/cdi (and reads its kubelet's directories)."""
    offenders = [
        path.name
        for path in sorted(TESTS.glob("test_*.py"))
        if path.name != Path(__file__).name
        and '"serve"' in (text := path.read_text())
        and STRIP in text
    ]
    assert offenders == [], f"use tests.hostenv.own_env() in {', '.join(offenders)}"
