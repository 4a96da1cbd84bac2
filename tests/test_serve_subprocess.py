"""``genericdp serve`` as a real process: registers with a kubelet, exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet

CONFIG = """\
version: v1
resources:
  - name: example.com/null
    match: [glob: /dev/null]
    count: 2
  - name: example.com/serial
    match: [glob: /dev/ttyUSB*]
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serve_registers_and_exits_cleanly_on_signal(base: Path, sig: signal.Signals) -> None:
    """The daemon registers every resource, and on SIGTERM/SIGINT exits 0 with sockets gone."""
    host = FakeHost(base / "host")
    host.add_plain("/dev/null")
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    config = base / "config.yaml"
    config.write_text(CONFIG)
    plugin_dir = base / "dp"
    argv = [
        "-m", "genericdp", "serve",
        "--config", str(config),
        "--plugin-dir", str(plugin_dir),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--state-dir", str(base / "state"),
        *host.root_flags(),
        "--log-level", "info",
        "--metrics-address", "",  # no fixed port: tests run side by side
    ]  # fmt: skip
    env = own_env()
    async with EmbeddedKubelet(plugin_dir) as kubelet:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            expected = {"example.com/null": 2, "example.com/serial": 1}
            await kubelet.wait_until(
                lambda k: {n: r.allocatable for n, r in k.resources.items()} == expected,
                timeout=20,
            )
            assert len(list(plugin_dir.glob("gdp-*.sock"))) == 2
            proc.send_signal(sig)
            output, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log = output.decode()
        assert proc.returncode == 0, log
        assert not list(plugin_dir.glob("gdp-*.sock")), log
        assert "registered with the kubelet" in log
        assert "shutting down" in log
        await kubelet.wait_until(
            lambda k: not any(r.connected for r in k.resources.values()), timeout=5
        )


# Passes, leaving a daemon behind in a session of its own (a double fork).
PROBE_SCRIPT = (
    '(setsid sh -c "echo \\$\\$ > {pidfile}; exec sleep 600" &); '
    "while [ ! -s {pidfile} ]; do sleep 0.01; done"
)
PROBE_CONFIG = """\
version: v1
resources:
  - name: example.com/null
    match: [glob: /dev/null]
    health: {{exec: {argv}, interval: 1h, timeout: 5s}}
"""


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")  # zombies too: reaped means gone


async def test_serve_kills_and_reaps_what_a_probe_left_in_its_own_session(base: Path) -> None:
    """serve is a child subreaper: a probe's double-forked setsid child is killed and reaped."""
    host = FakeHost(base / "host")
    host.add_plain("/dev/null")
    pidfile = base / "escaped.pid"
    config = base / "config.yaml"
    argv_json = json.dumps(["/bin/sh", "-c", PROBE_SCRIPT.format(pidfile=pidfile)])
    config.write_text(PROBE_CONFIG.format(argv=argv_json))
    plugin_dir = base / "dp"
    argv = [
        "-m", "genericdp", "serve", "--config", str(config), "--plugin-dir", str(plugin_dir),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--state-dir", str(base / "state"),
        *host.root_flags(),
        "--metrics-address", "",
    ]  # fmt: skip
    env = own_env()
    async with EmbeddedKubelet(plugin_dir) as kubelet:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        pid = 0
        try:
            await kubelet.wait_until(
                lambda k: (
                    "example.com/null" in k.resources
                    and k.resources["example.com/null"].allocatable == 1
                ),
                timeout=20,
            )  # the probe passed, so it has ended
            pid = int(pidfile.read_text())
            async with asyncio.timeout(10):
                while _exists(pid):  # noqa: ASYNC110 - another process's state
                    await asyncio.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            if pid and _exists(pid):
                os.kill(pid, signal.SIGKILL)
        assert proc.returncode == 0, output.decode()
