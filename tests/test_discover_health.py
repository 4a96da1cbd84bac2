"""`discover` shows the health the daemon would advertise: Healthy with no
probe, "not probed" with one, and a health command that could never pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakesys import FakeHost


def _config(notexec: Path) -> str:
    return f"""\
version: v1
resources:
  - name: example.com/plain
    match: [glob: /dev/ttyUSB0]
  - name: example.com/probed
    match: [glob: /dev/ttyUSB0]
    health: {{exec: [/bin/sh, -c, "true"]}}
  - name: example.com/gone
    match: [glob: /dev/ttyUSB0]
    health: {{exec: [/nonexistent/check-port]}}
  - name: example.com/bare
    match: [glob: /dev/ttyUSB0]
    health: {{exec: [no-such-checker-here]}}
  - name: example.com/notexec
    match: [glob: /dev/ttyUSB0]
    health: {{exec: [{notexec}]}}
"""


def _discover(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="A1", ttys=("ttyUSB0",))
    notexec = tmp_path / "check.sh"
    notexec.write_text("#!/bin/sh\ntrue\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(_config(notexec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    return subprocess.run(
        [sys.executable, "-m", "genericdp", "discover", str(cfg), *host.root_flags(), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _section(text: str, name: str) -> str:
    return text.split(f"{name}  (", 1)[1].split("\nexample.com/", 1)[0]


def test_discover_text_shows_the_health_the_daemon_would_advertise(tmp_path: Path) -> None:
    """No probe: Healthy; a probe: not probed, and a command that is missing or not executable."""
    done = _discover(tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "unknown" not in out
    plain = _section(out, "example.com/plain")
    assert "Healthy " in plain
    assert "health:" not in plain
    probed = _section(out, "example.com/probed")
    assert "not probed" in probed
    assert "health: command /bin/sh every 10s, not probed here" in probed
    assert "health command /nonexistent/check-port does not exist" in _section(
        out, "example.com/gone"
    )
    assert "is not executable" in _section(out, "example.com/notexec")
    assert "no-such-checker-here is not in PATH" in _section(out, "example.com/bare")


def test_discover_json_shows_health_and_the_probes_problem(tmp_path: Path) -> None:
    """The JSON carries the same: a health per unit and a probe's problem."""
    done = _discover(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    by_name = {r["resource"]: r for r in json.loads(done.stdout)["resources"]}
    assert by_name["example.com/plain"]["units"][0]["health"] == "healthy"
    assert by_name["example.com/plain"]["healthProbe"] is None
    assert by_name["example.com/probed"]["units"][0]["health"] == "not probed"
    assert by_name["example.com/probed"]["healthProbe"]["problem"] is None
    assert "does not exist" in by_name["example.com/gone"]["healthProbe"]["problem"]
