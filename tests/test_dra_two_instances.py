"""Two instances of the DRA driver on one node (a rolling update with maxSurge), as real
``genericdp serve --backend dra`` processes against the real kube-apiserver and the
embedded DRA kubelet. Without a pod UID one serves at a time; with one each, both serve
side by side while the old one leaves. Either way no claim is lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from genericdp.aio import Changes
from genericdp.allocation.cdi import claim_spec_name
from genericdp.dra.checkpoint import FILE_NAME
from genericdp.dra.embedded import resolve_cdi
from genericdp.kubeletplugin.claims import ClaimRef
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.kubeletplugin.nodelock import NodeLockError, node_lock
from tests.apiserver import ApiServer
from tests.dra_claims import allocated_claim, allocated_claims
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet
from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.polling import eventually

NAME = "example.com/serial"
NODE = "dra-two-instances-node"
CONFIG = f"""\
version: v1
resources:
  - name: {NAME}
    match: [glob: /dev/ttyUSB*]
"""


class Instance:
    """One ``genericdp serve --backend dra`` process, its output gathered as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.output = ""
        self._reader = asyncio.create_task(self._read(), name="instance-output")

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.output += line.decode(errors="replace")

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 15)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            await self._reader
        return code


async def start_instance(argv: list[str]) -> Instance:
    env = own_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "genericdp", *argv, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    return Instance(proc)


def published(apiserver: ApiServer) -> set[str]:
    found = json.loads(apiserver.kubectl("get", "resourceslices", "-o", "json"))["items"]
    return {
        d["name"] for s in found if s["spec"].get("nodeName") == NODE for d in s["spec"]["devices"]
    }


def checkpointed(path: Path) -> set[str]:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return set()
    return set(doc["claims"])


async def test_a_second_instance_waits_for_the_first_and_takes_over_every_claim(
    apiserver: ApiServer, base: Path
) -> None:
    """Of six claims prepared while two instances run, all six are in the checkpoint, and
    the second instance, once the first exits, unprepares every one and removes its spec."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    config = base / "config.yaml"
    config.write_text(CONFIG)
    cdi_dir, plugins = base / "cdi", base / "plugins"
    argv = [
        "serve", "--backend", "dra", "--config", str(config),
        "--node-name", NODE, "--kubeconfig", str(apiserver.kubeconfig),
        "--dra-registration-dir", str(base / "registry"), "--dra-plugins-dir", str(plugins),
        "--cdi-dir", str(cdi_dir), *host.root_flags(),
        "--log-level", "info", "--metrics-address", "", "--state-dir", str(base / "state"),
    ]  # fmt: skip
    checkpoint = plugins / DEFAULT_DRIVER / FILE_NAME
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        first = await start_instance(argv)
        second: Instance | None = None
        try:
            await kubelet.wait_until(lambda k: k.registered(DEFAULT_DRIVER), timeout=30)
            await eventually(lambda: bool(published(apiserver)), "the slice", timeout=30)
            (device,) = published(apiserver)
            claims = [allocated_claim(apiserver, f"surge-{n}", device, node=NODE) for n in range(6)]
            for claim in claims[:3]:
                await kubelet.prepare_pod(DEFAULT_DRIVER, [claim], attempts=8)
            second = await start_instance(argv)
            started = second
            await eventually(
                lambda: "holds" in started.output or "DRA services on" in started.output,
                "the second instance waiting or serving",
                timeout=30,
            )
            for claim in claims[3:]:
                await kubelet.prepare_pod(DEFAULT_DRIVER, [claim], attempts=8)
            uids = {c.uid for c in claims}
            assert checkpointed(checkpoint) == uids, first.output + second.output
            assert "DRA services on" not in second.output  # it waits, serving nothing

            registrations = kubelet.count(DraEventKind.REGISTERED, DEFAULT_DRIVER)
            assert await first.stop() == 0, first.output
            await kubelet.wait_until(
                lambda k: k.count(DraEventKind.REGISTERED, DEFAULT_DRIVER) > registrations,
                timeout=30,
            )
            assert "taking over" in second.output
            await kubelet.unprepare(DEFAULT_DRIVER, claims)
            assert checkpointed(checkpoint) == set(), second.output
            assert not list(cdi_dir.glob("*claim*")), second.output
        finally:
            await first.stop()
            if second is not None:
                await second.stop()


async def test_the_lock_is_waited_for_and_handed_on_within_one_poll(base: Path) -> None:
    """A second holder waits while the first holds the lock and gets it once it is released."""
    plugin_dir = base / "plugins" / "driver"
    order: list[str] = []
    async with node_lock(plugin_dir, poll=0.01):
        waiter = asyncio.create_task(_hold(plugin_dir, order), name="waiter")
        order.append("first released")
    await asyncio.wait_for(waiter, 5)
    assert order == ["first released", "second holds"]


async def _hold(plugin_dir: Path, order: list[str]) -> None:
    async with node_lock(plugin_dir, poll=0.01):
        order.append("second holds")


async def test_a_lock_file_that_is_not_a_regular_file_is_a_clear_error(base: Path) -> None:
    """A FIFO where the lock file goes never blocks the start: it is refused, named."""
    plugin_dir = base / "driver"
    plugin_dir.mkdir()
    os.mkfifo(plugin_dir / "lock")
    with pytest.raises(NodeLockError, match="is not a regular file") as caught:
        async with node_lock(plugin_dir):
            pass
    assert str(plugin_dir / "lock") in str(caught.value)


UID_FIRST = "0a0a0a0a-1111-4111-8111-111111111111"
UID_SECOND = "0b0b0b0b-2222-4222-8222-222222222222"
WINDOW = 3  # claims held at once while the churn goes on


class Churn:
    """Prepares and unprepares through the embedded kubelet, back to back, until stopped:
    each step prepares the next claim and unprepares the oldest once more than ``WINDOW``
    are held. A failed call ends the churn with its error (the test fails)."""

    def __init__(self, kubelet: EmbeddedDraKubelet, claims: list[ClaimRef]) -> None:
        self.kubelet = kubelet
        self.claims = claims
        self.held: list[ClaimRef] = []
        self.steps = 0
        self._stop = asyncio.Event()
        self._changes = Changes()
        self.task = asyncio.create_task(self._run(), name="churn")

    async def _run(self) -> None:
        try:
            while not self._stop.is_set():
                claim = self.claims[self.steps % len(self.claims)]
                if self.kubelet.prepared(claim.uid) is None:
                    await self.kubelet.prepare(DEFAULT_DRIVER, [claim])
                    self.held.append(claim)
                if len(self.held) > WINDOW:
                    await self.kubelet.unprepare(DEFAULT_DRIVER, [self.held.pop(0)])
                self.steps += 1
                self._changes.notify()
        finally:
            self._changes.notify()

    async def more(self, steps: int) -> None:
        """Wait for ``steps`` more steps (raises the churn's error if it failed)."""
        target = self.steps + steps
        await self._changes.until(lambda: self.steps >= target or self.task.done(), 60)
        if self.task.done():
            await self.task
        assert self.steps >= target, f"the churn made {self.steps} of {target} steps"

    async def stop(self) -> None:
        self._stop.set()
        await self.task


async def test_a_rolling_update_loses_no_prepare_or_unprepare(
    apiserver: ApiServer, base: Path
) -> None:
    """Prepares and unprepares go on back to back while a second instance (its own pod UID)
    starts beside the first and the first is stopped: none fails; the second serves before
    the first leaves, then publishes the slices; the checkpoint lists exactly the claims
    the kubelet holds prepared, and their CDI specs resolve to the device."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    config = base / "config.yaml"
    config.write_text(CONFIG)
    cdi_dir, plugins, registry = base / "cdi", base / "plugins", base / "registry"

    def argv(pod_uid: str) -> list[str]:
        return [
            "serve", "--backend", "dra", "--config", str(config),
            "--node-name", NODE, "--kubeconfig", str(apiserver.kubeconfig),
            "--dra-registration-dir", str(registry), "--dra-plugins-dir", str(plugins),
            "--cdi-dir", str(cdi_dir), *host.root_flags(), "--pod-uid", pod_uid,
            "--log-level", "info", "--metrics-address", "",
        ]  # fmt: skip

    checkpoint = plugins / DEFAULT_DRIVER / FILE_NAME
    async with EmbeddedDraKubelet(registry) as kubelet:
        first = await start_instance(argv(UID_FIRST))
        second: Instance | None = None
        churn: Churn | None = None
        try:
            await kubelet.wait_until(lambda k: k.registered(DEFAULT_DRIVER), timeout=30)
            await eventually(lambda: bool(published(apiserver)), "the slice", timeout=30)
            (device,) = published(apiserver)
            claims = allocated_claims(apiserver, [f"roll-{n}" for n in range(8)], device, node=NODE)
            churn = Churn(kubelet, claims)
            await churn.more(4)

            second = await start_instance(argv(UID_SECOND))
            await kubelet.wait_until(
                lambda k: k.count(DraEventKind.REGISTERED, DEFAULT_DRIVER) == 2, timeout=30
            )
            assert "waiting for it to exit before publishing" in second.output, second.output
            served_before = second.output.count("prepared claim")
            await churn.more(6)
            assert second.output.count("prepared claim") > served_before, "the newest serves"

            assert await first.stop() == 0, first.output
            await kubelet.wait_until(
                lambda k: k.count(DraEventKind.DEREGISTERED, DEFAULT_DRIVER) == 1, timeout=30
            )
            assert kubelet.registered(DEFAULT_DRIVER)
            started = second
            await eventually(lambda: "taking over" in started.output, "the second publishes")
            await churn.more(6)
            await churn.stop()

            held = {c.uid for c in churn.held}
            assert len(held) == WINDOW
            assert checkpointed(checkpoint) == held, second.output
            specs = {p.name for p in cdi_dir.glob("*claim*")}
            assert specs == {claim_spec_name(DEFAULT_DRIVER, uid) for uid in held}
            for claim in churn.held:
                ids = [i for d in kubelet.prepared(claim.uid) or () for i in d.cdi_ids]
                nodes = resolve_cdi(cdi_dir, ids)["deviceNodes"]
                assert [n["hostPath"] for n in nodes] == ["/dev/ttyUSB0"], nodes
            assert published(apiserver) == {device}

            await kubelet.unprepare(DEFAULT_DRIVER, churn.held)
            assert checkpointed(checkpoint) == set(), second.output
            assert not list(cdi_dir.glob("*claim*")), second.output
        finally:
            if churn is not None and not churn.task.done():
                churn.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await churn.task
            await first.stop()
            if second is not None:
                await second.stop()
