"""A sysfs or udev database that is not there is said, not silent: ``discover``
warns and exits 3, ``serve`` lists it in ``/readyz``."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet
from tests.test_httpserver import get
from tests.test_observability import wait_for_log

CONFIG = """\
version: v1
resources:
  - name: example.com/null
    match: [glob: /dev/null]
  - name: example.com/serial
    match:
      - udev: {subsystem: tty, kernel: "ttyUSB*"%s}
"""
PROPERTIES = ", properties: {ID_SERIAL_SHORT: 'A*'}"


def _env() -> dict[str, str]:
    return own_env()


def _discover(tmp_path: Path, config: str, **roots: Path) -> subprocess.CompletedProcess[str]:
    host = FakeHost(tmp_path / "host")
    host.add_plain("/dev/null")
    host.add_usb_serial(port="1-2", serial="A1", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config)
    given = {"dev": host.dev, "sys": host.sys, "udev": host.udev, **roots}
    flags = [f for name, root in given.items() for f in (f"--{name}-root", str(root))]
    return subprocess.run(
        [sys.executable, "-m", "genericdp", "discover", str(cfg), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )


def test_discover_without_sysfs_warns_and_exits_3(tmp_path: Path) -> None:
    """A udev: matcher over a missing --sys-root is exit 3 naming the resource and the root."""
    done = _discover(tmp_path, CONFIG % "", sys=tmp_path / "nonexistent")
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        f"warning: example.com/serial: sysfs root {tmp_path / 'nonexistent'} does not exist"
        in done.stderr
    )
    assert "example.com/null:" not in done.stderr  # a glob needs no sysfs


def test_discover_without_udev_database_warns_only_for_properties(tmp_path: Path) -> None:
    """A missing udev database matters to properties: filters only."""
    missing = tmp_path / "nonexistent"
    done = _discover(tmp_path, CONFIG % PROPERTIES, udev=missing)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"udev database {missing / 'data'} does not exist" in done.stderr
    plain = _discover(tmp_path / "2", CONFIG % "", udev=missing)
    assert plain.returncode == 0, plain.stderr
    assert "warning" not in plain.stderr


def test_discover_with_every_root_is_quiet(tmp_path: Path) -> None:
    """The roots there: exit 0, no warning, the unit found."""
    done = _discover(tmp_path, CONFIG % PROPERTIES)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert "/dev/ttyUSB0" in done.stdout


@pytest.mark.timeout(60)
async def test_readyz_names_the_missing_udev_database(tmp_path: Path) -> None:
    """`serve` with no udev database stays ready (the node is fine) and says why a
    properties: resource finds nothing."""
    host = FakeHost(tmp_path / "host")
    host.add_plain("/dev/null")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG % PROPERTIES)
    missing = tmp_path / "nonexistent"
    argv = [
        sys.executable, "-m", "genericdp", "serve", "--config", str(cfg),
        "--plugin-dir", str(tmp_path / "dp"), "--dev-root", str(host.dev),
        "--pod-resources-socket", str(tmp_path / "pod-resources.sock"),
        "--sys-root", str(host.sys), "--udev-root", str(missing),
    ]  # fmt: skip
    log = tmp_path / "serve.log"
    env = {**_env(), "GENERICDP_METRICS_ADDRESS": "127.0.0.1:0"}
    async with EmbeddedKubelet(tmp_path / "dp"):
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=out, stderr=out)
        try:
            found = await wait_for_log(
                log, r"serving /metrics, /healthz and /readyz on [\d.]+:(\d+)"
            )
            port = int(found.group(1))
            async with asyncio.timeout(20):
                while (ready := await get(port, "/readyz")).status != 200:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            text = ready.body.decode()
            assert "ready: 2 resource(s) registered" in text
            assert f"example.com/serial: udev database {missing / 'data'} does not exist" in text
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0, log.read_text()
