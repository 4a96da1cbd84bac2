"""The node's DRA driver: prepare, the DRA and registration sockets, the checkpoint.

One per daemon, shared by every resource served through DRA (the kubelet
knows a driver, not resources). Each resource's edge keeps the inventory
up to date; the driver serves what is in it.

Layout, as the upstream helper (k8s.io/dynamic-resource-allocation/kubeletplugin)
lays it out, which the kubelet expects of no one but which admins know:

- ``<registry dir>/<driver>-reg.sock``: registration (``registration.py``);
- ``<plugins dir>/<driver>/dra.sock``: the DRA services (``service.py``);
- ``<plugins dir>/<driver>/checkpoint.json``: prepared claims (``checkpoint.py``).

Both sockets are watched (``guard_interval``) and served again when deleted
or replaced: the kubelet's plugin watcher registers the driver again when it
sees the new registration socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from genericdp.dra.cdispec import remove_stale_claim_specs
from genericdp.dra.checkpoint import FILE_NAME, Checkpoint
from genericdp.dra.claims import ClaimSource
from genericdp.dra.inventory import Inventory
from genericdp.dra.prepare import Preparer
from genericdp.dra.registration import (
    RegistrationServer,
    RegistrationService,
    registration_socket,
    socket_id,
)
from genericdp.dra.service import HEARTBEAT, SERVICES, DraServer
from genericdp.errors import GenericdpError
from genericdp.hooks import HookRunner
from genericdp.runtime.recorder import NO_METRICS, Recorder

log = logging.getLogger(__name__)

DRA_SOCKET = "dra.sock"
GUARD_INTERVAL = 1.0  # seconds between checks that both sockets are still ours


@dataclass(frozen=True)
class DriverPaths:
    registry_dir: Path  # /var/lib/kubelet/plugins_registry
    plugins_dir: Path  # /var/lib/kubelet/plugins
    cdi_dir: Path  # /var/run/cdi

    def plugin_dir(self, driver: str) -> Path:
        return self.plugins_dir / driver


class DraDriver:
    """The driver's sockets and state; ``start`` then ``close``."""

    def __init__(
        self,
        *,
        driver: str,
        node_name: str,
        paths: DriverPaths,
        claims: ClaimSource,
        run_hook: HookRunner,
        heartbeat: float = HEARTBEAT,
        guard_interval: float = GUARD_INTERVAL,
        recorder: Recorder = NO_METRICS,
    ) -> None:
        self.driver = driver
        self.paths = paths
        self.inventory = Inventory(node_name)
        plugin_dir = paths.plugin_dir(driver)
        self.dra_socket = plugin_dir / DRA_SOCKET
        self.checkpoint = Checkpoint(plugin_dir / FILE_NAME)
        self.preparer = Preparer(
            driver=driver,
            inventory=self.inventory,
            claims=claims,
            checkpoint=self.checkpoint,
            cdi_dir=paths.cdi_dir,
            run_hook=run_hook,
            node_name=node_name,
            recorder=recorder,
        )
        self.registration = RegistrationServer(
            RegistrationService(driver, self.dra_socket, SERVICES),
            registration_socket(paths.registry_dir, driver),
        )
        self._heartbeat = heartbeat
        self._guard_interval = guard_interval
        self._server: DraServer | None = None
        self._dra_id: tuple[int, int] | None = None
        self._guard: asyncio.Task[None] | None = None

    @property
    def server(self) -> DraServer | None:
        return self._server

    async def start(self) -> None:
        """Load the checkpoint, clear stale specs, serve DRA, then registration.

        Raises GenericdpError (KubeletError) when a socket cannot be served.
        """
        await asyncio.to_thread(self.checkpoint.load)
        kept = [*(p.claim.uid for p in self.checkpoint), *self.checkpoint.unaccounted]
        removed: list[Path] = []
        if self.checkpoint.complete:  # else an unusable file may list claims still in use
            removed = await asyncio.to_thread(
                remove_stale_claim_specs, self.paths.cdi_dir, self.driver, kept
            )
        for path in removed:
            log.info("removed the CDI spec %s of a claim no longer prepared", path)
        await self._serve_dra()
        await self.registration.start()  # last: the kubelet dials the DRA socket at once
        log.info(
            "DRA driver %s: registration on %s, DRA services on %s",
            self.driver,
            self.registration.socket,
            self.dra_socket,
        )
        self._guard = asyncio.create_task(self._keep_sockets(), name=f"dra/{self.driver}/sockets")

    async def close(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._guard
        await self.registration.stop()
        if self._server is not None:
            await self._server.stop()
            self._server = None

    async def _serve_dra(self) -> None:
        if self._server is not None:
            await self._server.stop(0.5)
        self._server = await DraServer.start(
            self.preparer, self.inventory, self.dra_socket, heartbeat=self._heartbeat
        )
        self._dra_id = socket_id(self.dra_socket)

    async def _keep_sockets(self) -> None:
        while True:
            await asyncio.sleep(self._guard_interval)
            try:
                if socket_id(self.dra_socket) != self._dra_id:
                    log.warning("the DRA socket %s was removed: serving it again", self.dra_socket)
                    await self._serve_dra()
                if not self.registration.intact():
                    log.warning(
                        "the registration socket %s was removed: serving it again",
                        self.registration.socket,
                    )
                    await self.registration.start()
            except GenericdpError as exc:
                log.error("DRA driver %s: %s (retrying)", self.driver, exc)
