"""`genericdp simulate`: the real daemon against the embedded kubelet, as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakesys import FakeHost

CONFIG = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - glob: /dev/ttyUSB*
    groupBy: parent:usb
    allocate:
      env:
        PORTS: "{{ devices | map(attribute='path') | join(',') }}"
  - name: example.com/shared
    match:
      - glob: /dev/fuse
    count: 3
"""


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    host.add_usb_serial(port="1-3", serial="BBB222", ttys=("ttyUSB1",))
    host.add_misc("fuse")
    return host


def _cmd(tmp_path: Path, host: FakeHost, *extra: str) -> list[str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    return [
        sys.executable,
        "-m",
        "genericdp",
        "simulate",
        str(cfg),
        "--dev-root",
        str(host.dev),
        "--sys-root",
        str(host.sys),
        "--udev-root",
        str(host.udev),
        *extra,
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}


def test_simulate_once_shows_capacity_and_allocation(tmp_path: Path) -> None:
    """--once registers every resource, prints capacity/allocatable and an allocation."""
    host = _host(tmp_path)
    result = subprocess.run(
        _cmd(tmp_path, host, "--once", "--allocate", "example.com/serial=2"),
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "example.com/serial: registered" in out
    assert "example.com/shared: registered" in out
    rows = {
        line.split()[0]: line.split()[1:3]
        for line in out.splitlines()
        if "example.com/" in line and ".sock" in line
    }
    assert rows["example.com/serial"] == ["2", "2"]
    assert rows["example.com/shared"] == ["3", "3"]
    assert "env    PORTS=/dev/ttyUSB0,/dev/ttyUSB1" in out
    assert "device /dev/ttyUSB0 (host /dev/ttyUSB0, rw)" in out


def test_simulate_refuses_more_than_available(tmp_path: Path) -> None:
    """Asking for more units than exist is refused like the kubelet would, exit 4."""
    host = _host(tmp_path)
    result = subprocess.run(
        _cmd(tmp_path, host, "--once", "--allocate", "example.com/serial=3"),
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )
    assert result.returncode == 4
    assert "refused: 3 device(s) of example.com/serial asked for, 2 free and healthy;" in (
        result.stdout
    )
    assert "Requested: 3, Available: 2" in result.stdout


def test_simulate_bad_allocate_flag_is_a_usage_error(tmp_path: Path) -> None:
    """A malformed --allocate exits 2 with a message saying the expected form."""
    host = _host(tmp_path)
    result = subprocess.run(
        _cmd(tmp_path, host, "--once", "--allocate", "example.com/serial=two"),
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )
    assert result.returncode == 2
    assert "RESOURCE=N" in result.stderr


def test_simulate_watches_hotplug_until_interrupted(tmp_path: Path) -> None:
    """Without --once it keeps running, shows a device added to the tree, and exits 0 on SIGINT."""
    host = _host(tmp_path)
    proc = subprocess.Popen(
        _cmd(tmp_path, host, "--log-level", "error"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), "GENERICDP_RESCAN_INTERVAL": "0.2"},
    )
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 30
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("watching"):
                break
            assert time.monotonic() < deadline, "".join(lines)
        host.add_usb_serial(port="1-4", serial="CCC333", ttys=("ttyUSB2",))
        for line in proc.stdout:
            lines.append(line)
            if "example.com/serial" in line and ".sock" in line and line.split()[1] == "3":
                break
            assert time.monotonic() < deadline, "".join(lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()


def test_simulate_says_in_plain_words_why_an_unhealthy_resource_is_refused(
    tmp_path: Path,
) -> None:
    """What happened and what to do first, then the kubelet's own event text."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "version: v1\nresources:\n  - name: acme.io/zero\n    match: [{glob: /dev/zero}]\n"
        "    health:\n      exec: [/bin/false]\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "genericdp", "simulate", str(config), "--once",
         "--allocate", "acme.io/zero=1"],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    refused = next(line for line in result.stdout.splitlines() if "refused:" in line)
    assert refused == (
        "  refused: every device of acme.io/zero is unhealthy (ALLOCATABLE 0), so no pod gets"
        " one; the log says why (its health probe or a missing node): fix the device or its"
        " health check"
    ), result.stdout
    assert "(the kubelet's event: Allocate failed due to no healthy devices" in result.stdout
