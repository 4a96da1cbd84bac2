"""The DRA soak: claims prepared and unprepared one after another while the daemon and
the kubelet restart at random moments, against the real kube-apiserver and a real
``genericdp serve --backend dra`` process with the embedded DRA kubelet.

Left out of the normal run (marker ``soak``; ``./dev soak`` runs it). 1,000 claims
by default; ``SOAK_DRA_CLAIMS=60`` is a short run of about a minute. Every claim
prepared is in the checkpoint and has its CDI spec; every unprepare, before or after
a restart, runs the unit's ``cleanup``; at the end no spec and no claim is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from genericdp.dra.checkpoint import FILE_NAME
from genericdp.dra.embedded import DraKubeletError
from genericdp.kubeletplugin.claims import ClaimRef
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from tests.apiserver import ApiServer
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet
from tests.fakesys import FakeHost
from tests.polling import eventually
from tests.test_dra_two_instances import (
    NODE,
    Instance,
    checkpointed,
    published,
    start_instance,
)

CLAIMS = int(os.environ.get("SOAK_DRA_CLAIMS", "1000"))
# A cycle takes about 0.4 s on a loaded 2-core machine; a restart a few seconds.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(120 + 3 * CLAIMS)]
RESTART_ODDS = 0.1  # of a restart in each cycle
BATCH = 50  # claims created with one kubectl call
RETRY_SECONDS = 120.0  # how long a call may keep failing while something restarts


def soak_config(marks: Path) -> str:
    return f"""\
version: v1
resources:
  - name: example.com/serial
    match: [glob: /dev/ttyUSB*]
    hooks:
      cleanup: {{exec: [sh, -c, "echo x >> {marks}"], timeout: 10s}}
"""


def create_claims(apiserver: ApiServer, names: list[str]) -> dict[str, str]:
    """The named claims, created in one call; name -> UID."""
    items = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [{"name": "serial", "exactly": {"deviceClassName": "serial"}}]
                }
            },
        }
        for name in names
    ]
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    text = apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(doc))
    found, at, decoder = [], 0, json.JSONDecoder()  # one JSON document per claim
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in found}


def allocate(apiserver: ApiServer, name: str, device: str) -> None:
    result = {"request": "serial", "driver": DEFAULT_DRIVER, "pool": NODE, "device": device}
    status = {"status": {"allocation": {"devices": {"results": [result]}}}}
    apiserver.kubectl(
        "patch", "resourceclaim", name, "-n", "default", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip


async def retried(call: Callable[[], Awaitable[object]], what: str) -> None:
    """``call`` until it succeeds: the driver or the kubelet may be restarting."""
    deadline = time.monotonic() + RETRY_SECONDS
    delay = 0.05
    while True:
        try:
            await call()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # this test is being cancelled
            # The embedded kubelet stopped under the call and closed its channel: the
            # call is lost with it, as with a kubelet that dies; it retries once back.
        except DraKubeletError:
            pass
        else:
            return
        if time.monotonic() > deadline:
            raise DraKubeletError(f"{what}: still failing after {RETRY_SECONDS}s")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


class Soak:
    """The daemon and kubelet under test, and how to restart each."""

    def __init__(self, argv: list[str], kubelet: EmbeddedDraKubelet) -> None:
        self.argv = argv
        self.kubelet = kubelet
        self.daemon: Instance | None = None
        self.restarts = {"daemon-term": 0, "daemon-kill": 0, "kubelet": 0}

    async def start_daemon(self) -> None:
        registrations = self.kubelet.count(DraEventKind.REGISTERED, DEFAULT_DRIVER)
        self.daemon = await start_instance(self.argv)
        await self.kubelet.wait_until(
            lambda k: k.count(DraEventKind.REGISTERED, DEFAULT_DRIVER) > registrations,
            timeout=60,
        )

    async def restart(self, kind: str) -> None:
        self.restarts[kind] += 1
        if kind == "kubelet":
            registrations = self.kubelet.count(DraEventKind.REGISTERED, DEFAULT_DRIVER)
            await self.kubelet.stop()
            await self.kubelet.start()
            await self.kubelet.wait_until(
                lambda k: k.count(DraEventKind.REGISTERED, DEFAULT_DRIVER) > registrations,
                timeout=60,
            )
            return
        assert self.daemon is not None
        if kind == "daemon-kill":
            self.daemon.proc.send_signal(signal.SIGKILL)
            await self.daemon.stop()
        else:
            assert await self.daemon.stop() == 0, self.daemon.output[-4000:]
        await self.start_daemon()

    async def around(self, call: Callable[[], Awaitable[object]], what: str, kind: str) -> None:
        """``call`` with a restart of ``kind`` a random moment into it."""
        restart = asyncio.create_task(self._later(kind), name=f"restart-{kind}")
        try:
            await retried(call, what)
        finally:
            await restart
        await retried(call, what)  # the restart may have come after the call ended

    async def _later(self, kind: str) -> None:
        await asyncio.sleep(random.uniform(0, 0.05))  # noqa: S311 -- a moment, not a secret
        await self.restart(kind)


def cleanups(marks: Path) -> int:
    return len(marks.read_text().splitlines()) if marks.exists() else 0


async def test_no_claim_is_lost_and_no_spec_left_behind_across_restarts(
    apiserver: ApiServer, base: Path
) -> None:
    """Claims prepared and unprepared with daemon (SIGTERM, SIGKILL) and kubelet restarts
    at random moments: each prepared claim is checkpointed with its CDI spec, each
    unprepare runs cleanup, and nothing is left at the end."""
    rng = random.Random(int(os.environ.get("SOAK_SEED", "18")))  # noqa: S311 -- test moments
    random.seed(rng.random())
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", ttys=("ttyUSB0",))
    marks = base / "cleanups"
    config = base / "config.yaml"
    config.write_text(soak_config(marks))
    cdi_dir, plugins = base / "cdi", base / "plugins"
    argv = [
        "serve", "--backend", "dra", "--config", str(config),
        "--node-name", NODE, "--kubeconfig", str(apiserver.kubeconfig),
        "--dra-registration-dir", str(base / "registry"), "--dra-plugins-dir", str(plugins),
        "--cdi-dir", str(cdi_dir), *host.root_flags(),
        "--log-level", "info", "--metrics-address", "",
    ]  # fmt: skip
    checkpoint = plugins / DEFAULT_DRIVER / FILE_NAME
    started = time.monotonic()
    async with EmbeddedDraKubelet(base / "registry") as kubelet:
        soak = Soak(argv, kubelet)
        await soak.start_daemon()
        try:
            await eventually(lambda: bool(published(apiserver)), "the slice", timeout=60)
            (device,) = published(apiserver)
            uids: dict[str, str] = {}
            for n in range(CLAIMS):
                name = f"soak-{n}"
                if name not in uids:
                    batch = [f"soak-{m}" for m in range(n, min(n + BATCH, CLAIMS))]
                    uids |= await asyncio.to_thread(create_claims, apiserver, batch)
                await asyncio.to_thread(allocate, apiserver, name, device)
                claim = ClaimRef("default", name, uids[name])
                kind = rng.choice(list(soak.restarts)) if rng.random() < RESTART_ODDS else None
                moment = rng.choice(["prepare", "between", "unprepare"])

                async def prepare(claim: ClaimRef = claim) -> None:
                    await kubelet.prepare(DEFAULT_DRIVER, [claim])

                async def unprepare(claim: ClaimRef = claim) -> None:
                    await kubelet.unprepare(DEFAULT_DRIVER, [claim])

                if kind and moment == "prepare":
                    await soak.around(prepare, "prepare", kind)
                else:
                    await retried(prepare, "prepare")
                assert claim.uid in checkpointed(checkpoint), f"claim {n} not checkpointed"
                assert list(cdi_dir.glob(f"*{claim.uid}*")), f"claim {n} has no CDI spec"
                if kind and moment == "between":
                    await soak.restart(kind)
                    assert claim.uid in checkpointed(checkpoint), f"claim {n} lost by {kind}"
                before = cleanups(marks)
                if kind and moment == "unprepare":
                    await soak.around(unprepare, "unprepare", kind)
                else:
                    await retried(unprepare, "unprepare")
                assert cleanups(marks) > before, f"claim {n}: no cleanup ({kind} {moment})"
                assert claim.uid not in checkpointed(checkpoint), f"claim {n} still checkpointed"
                assert not list(cdi_dir.glob(f"*{claim.uid}*")), f"claim {n}: spec left"
            assert checkpointed(checkpoint) == set()
            assert not list(cdi_dir.glob("*claim*"))
        finally:
            if soak.daemon is not None:
                await soak.daemon.stop()
    seconds = time.monotonic() - started
    print(
        f"\nDRA soak: {CLAIMS} claims prepared and unprepared in {seconds:.0f} s;"
        f" restarts {soak.restarts}; cleanup runs {cleanups(marks)}; nothing left behind"
    )
