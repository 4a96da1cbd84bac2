"""``genericdp serve`` as a real process, restarted with a broken config: it stays up and
serves the last good config kept on the node (or nothing), not ready, until the config is
fixed live. The embedded kubelet is the peer; /readyz and /metrics are read over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from genericdp.lastgood import STATE_FILE
from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet
from tests.test_configwatch import ConfigMapVolume
from tests.test_httpserver import Reply, get
from tests.test_observability import sample, samples, wait_for_log

NULL = "example.com/null"
GOOD = f"""\
version: v1
resources:
  - name: {NULL}
    match: [glob: /dev/null]
    count: 2
"""
FIXED = GOOD.replace("count: 2", "count: 3")
# An unquoted ID as Helm renders 0403: a number.
BROKEN = GOOD + "  - name: example.com/ftdi\n    match: [udev: {attributes: {idVendor: 259}}]\n"
BROKEN_AT = "gdp.yaml:7:43: resources[1].match[0].udev.attributes.idVendor: must be a string"


@dataclass
class Serving:
    proc: asyncio.subprocess.Process
    log: Path
    port: int

    async def readyz(self) -> Reply:
        return await get(self.port, "/readyz")

    async def until_ready(self, ready: bool) -> Reply:
        async with asyncio.timeout(20):
            while ((reply := await self.readyz()).status == 200) is not ready:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return reply

    async def metric(self, name: str, **labels: str) -> float | None:
        return sample(samples(await get(self.port, "/metrics")), name, **labels)


@asynccontextmanager
async def serving(
    base: Path, volume: ConfigMapVolume, state: Path, run: str = "serve"
) -> AsyncIterator[Serving]:
    """``genericdp serve`` on ``volume`` keeping its state in ``state``; SIGTERM at the end,
    which must exit 0 with no traceback."""
    host = FakeHost(base / "host")
    host.add_plain("/dev/null")
    log = base / f"{run}.log"
    env = own_env()
    argv = [
        "-m", "genericdp", "serve",
        "--config", str(volume.target),
        "--plugin-dir", str(base / "dp"),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--cdi-dir", str(base / "cdi"),
        "--state-dir", str(state),
        "--metrics-address", "127.0.0.1:0",
        *host.root_flags(),
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdout=out, stderr=out
        )
    try:
        found = await wait_for_log(log, r"serving /metrics, /healthz and /readyz on [\d.]+:(\d+)")
        yield Serving(proc, log, int(found.group(1)))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def allocatable(kubelet: EmbeddedKubelet, count: int) -> bool:
    snap = kubelet.resources.get(NULL)
    return snap is not None and snap.connected and snap.allocatable == count


def kept_texts(state: Path) -> list[str]:
    return [f["text"] for f in json.loads((state / STATE_FILE).read_text())["files"]]


async def test_a_valid_start_keeps_the_config_it_applied(base: Path) -> None:
    """(a) A valid config is applied, then kept in the state directory, 0600 in 0700."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": GOOD})
    state = base / "state"
    async with EmbeddedKubelet(base / "dp") as kubelet, serving(base, volume, state) as daemon:
        await kubelet.wait_until(lambda k: allocatable(k, 2), timeout=20)
        assert (await daemon.until_ready(True)).body.startswith(b"ready: 1 resource(s)")
        assert await daemon.metric("genericdp_config_source", source="config") == 1
        assert kept_texts(state) == [GOOD]
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / STATE_FILE).st_mode) == 0o600


async def test_a_restart_with_a_broken_config_serves_the_last_good_until_fixed(
    base: Path,
) -> None:
    """(b) Restarted on a broken config, the daemon serves the kept one (registered, Allocate
    works), not ready with the error; (c) the config fixed live is served, ready, and kept."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": GOOD})
    state = base / "state"
    async with EmbeddedKubelet(base / "dp") as kubelet:
        async with serving(base, volume, state, "first"):
            await kubelet.wait_until(lambda k: allocatable(k, 2), timeout=20)
        volume.write({"gdp.yaml": BROKEN})
        async with serving(base, volume, state) as daemon:
            await kubelet.wait_until(lambda k: allocatable(k, 2), timeout=20)
            answer = await kubelet.allocate(NULL, 1, pod="consumer")
            assert [d.host_path for d in answer.container_responses[0].devices] == ["/dev/null"]
            reply = await daemon.until_ready(False)
            assert reply.status == 503
            body = reply.body.decode()
            assert body.startswith(f"not ready: the config at {volume.target} is invalid;")
            assert "serving the last good config, applied 20" in body
            assert BROKEN_AT in body
            assert "1 resource(s) registered" in body
            assert (await get(daemon.port, "/healthz")).status == 200
            assert await daemon.metric("genericdp_config_source", source="last_good") == 1
            assert await daemon.metric("genericdp_config_last_reload_successful") == 0
            log = daemon.log.read_text()
            assert "config refused at start, serving the last good config (applied 20" in log
            assert BROKEN_AT in log
            assert kept_texts(state) == [GOOD], "a broken config is never kept"

            volume.write({"gdp.yaml": FIXED})
            await kubelet.wait_until(lambda k: allocatable(k, 3), timeout=20)
            assert (await daemon.until_ready(True)).body.startswith(b"ready: 1 resource(s)")
            assert await daemon.metric("genericdp_config_source", source="config") == 1
            assert await daemon.metric("genericdp_config_source", source="last_good") == 0
            assert kept_texts(state) == [FIXED]
            await wait_for_log(daemon.log, "is valid again and served")


async def test_a_broken_config_and_nothing_kept_serves_nothing_and_stays_up(base: Path) -> None:
    """(d) No last good config: nothing registers, /healthz OK, /readyz 503 saying why."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": BROKEN})
    async with (
        EmbeddedKubelet(base / "dp") as kubelet,
        serving(base, volume, base / "state") as daemon,
    ):
        body = (await daemon.until_ready(False)).body.decode()
        assert "serving nothing (no last good config: none kept in" in body
        assert BROKEN_AT in body
        assert (await get(daemon.port, "/healthz")).status == 200
        assert await daemon.metric("genericdp_config_source", source="none") == 1
        assert "config refused at start, serving nothing" in daemon.log.read_text()
        assert daemon.proc.returncode is None
        assert not kubelet.resources
        assert not (base / "state" / STATE_FILE).exists()


async def test_a_tampered_state_file_is_refused_and_nothing_served(base: Path) -> None:
    """(e) A state file changed since it was written: refused in the log, no traceback,
    not ready, nothing served."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": GOOD})
    state = base / "state"
    async with EmbeddedKubelet(base / "dp") as kubelet:
        async with serving(base, volume, state):
            await kubelet.wait_until(lambda k: allocatable(k, 2), timeout=20)
        doc = json.loads((state / STATE_FILE).read_text())
        doc["files"][0]["text"] = GOOD.replace("/dev/null", "/dev/mem")
        (state / STATE_FILE).write_text(json.dumps(doc))
        volume.write({"gdp.yaml": BROKEN})
        async with serving(base, volume, state) as daemon:
            body = (await daemon.until_ready(False)).body.decode()
            assert "serving nothing (no last good config: the one kept is refused)" in body
            log = daemon.log.read_text()
            assert f"the last good config is refused: {state / STATE_FILE}: files[0]" in log
            assert "its sha256 does not match its text" in log
            await kubelet.wait_until(lambda k: not k.resources[NULL].connected, timeout=20)


async def test_a_state_directory_that_cannot_be_written_only_warns(base: Path) -> None:
    """A read-only or wrong state path costs the restart protection, never the serving."""
    volume = ConfigMapVolume(base / "cm")
    volume.write({"gdp.yaml": GOOD})
    (base / "state").write_text("not a directory")
    async with (
        EmbeddedKubelet(base / "dp") as kubelet,
        serving(base, volume, base / "state") as daemon,
    ):
        await kubelet.wait_until(lambda k: allocatable(k, 2), timeout=20)
        await daemon.until_ready(True)
        await wait_for_log(daemon.log, "cannot keep the applied config in")
