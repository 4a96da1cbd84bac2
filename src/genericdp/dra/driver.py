"""The node's DRA driver: prepare, the DRA and registration sockets, the checkpoint.

One per daemon, shared by every resource served through DRA (the kubelet knows a driver, not
resources). Its files, laid out as the upstream Go helper does (admins know it):
``<registry dir>/<driver>-reg.sock`` (``registration.py``) and, in ``<plugins dir>/<driver>/``,
``dra.sock`` (``service.py``), ``checkpoint.json``, ``dra-device-metadata/`` (written again
from the checkpoint at start) and ``serialize.lock`` (``turns.py``). Given the pod's UID both
socket names carry it (``socketnames.py``).

Both sockets' directories are watched and a socket deleted or replaced is served again at
once: the kubelet registers the driver again when it sees the new registration socket.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from inotify_simple import flags

from genericdp.aio import Backoff, TaskSet, inotify_events
from genericdp.allocation.cdi import remove_stale_claim_specs
from genericdp.dra import metadata
from genericdp.dra.checkpoint import FILE_NAME, PREPARED, Checkpoint
from genericdp.dra.inventory import Inventory
from genericdp.dra.prepare import Preparer
from genericdp.dra.turns import FILE_NAME as TURNS_FILE
from genericdp.dra.turns import Turns
from genericdp.errors import CdiSpecError, KubeletError, clip
from genericdp.hooks import HookRunner
from genericdp.kubeletplugin.claims import ClaimSource
from genericdp.kubeletplugin.registration import RegistrationServer, RegistrationService
from genericdp.kubeletplugin.service import HEARTBEAT, SERVICES, DraServer
from genericdp.kubeletplugin.socketnames import dra_socket, registration_socket, remove_stale
from genericdp.runtime.recorder import NO_METRICS, Recorder

log = logging.getLogger(__name__)

# What can take a socket away: a file deleted, moved or created over it, or
# the directory itself gone (then the watch is set up again).
_CHANGES = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM
_LOST = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED | flags.Q_OVERFLOW
_MASK = _CHANGES | flags.DELETE_SELF | flags.MOVE_SELF | flags.ONLYDIR


@dataclass(frozen=True)
class DriverPaths:
    registry_dir: Path  # /var/lib/kubelet/plugins_registry
    plugins_dir: Path  # /var/lib/kubelet/plugins
    cdi_dir: Path  # /var/run/cdi


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
        recorder: Recorder = NO_METRICS,
        pod_uid: str = "",
    ) -> None:
        self.driver = driver
        self.paths = paths
        self.inventory = Inventory(node_name)
        plugin_dir = paths.plugins_dir / driver
        self.dra_socket = dra_socket(plugin_dir, driver, pod_uid)
        self._pod_uid = pod_uid
        self.checkpoint = Checkpoint(plugin_dir / FILE_NAME)
        self.turns = Turns(self.checkpoint, plugin_dir / TURNS_FILE)
        self.preparer = Preparer(
            driver=driver,
            inventory=self.inventory,
            claims=claims,
            checkpoint=self.checkpoint,
            cdi_dir=paths.cdi_dir,
            run_hook=run_hook,
            node_name=node_name,
            recorder=recorder,
            turns=self.turns,
        )
        self.registration = RegistrationServer(
            RegistrationService(driver, self.dra_socket, SERVICES),
            registration_socket(paths.registry_dir, driver, pod_uid),
        )
        self._heartbeat = heartbeat
        self.server: DraServer | None = None  # serving from ``start`` on
        self._tasks = TaskSet(log)

    async def start(self, *, register: bool = True) -> None:
        """Raises GenericdpError (KubeletError, TurnError) when a socket cannot be served or
        another instance holds the node's call lock for too long."""
        async with self.turns.turn():  # another instance may be preparing a claim
            await asyncio.to_thread(self.checkpoint.load)
            kept = [*(p.claim.uid for p in self.checkpoint), *self.checkpoint.unaccounted]
            removed: list[Path] = []
            if self.checkpoint.complete:  # else an unusable file may list claims still in use
                removed = await asyncio.to_thread(
                    remove_stale_claim_specs, self.paths.cdi_dir, self.driver, kept
                )
            # In the turn too: the other instance writes a claim's metadata in its own.
            await asyncio.to_thread(self._rebuild_metadata)
        for path in removed:
            log.info("removed the CDI spec %s of a claim no longer prepared", path)
        await self._serve_dra()
        self._tasks.spawn(f"dra/{self.driver}/checkpoint", self.turns.follow, backoff=Backoff())
        if register:
            await self.register()

    async def register(self) -> None:
        """Serve the registration socket and keep both served; raises KubeletError. The newest
        registration gets the calls, so it waits for the inventory (``backend.py``)."""
        if self._pod_uid:  # pods killed with SIGKILL leave theirs: the kubelet would keep dialing
            for path in await asyncio.to_thread(
                remove_stale, self.registration.socket, self.dra_socket, self.driver
            ):
                log.info("removed %s: no instance of this driver serves it any more", path)
        await self.registration.start()  # last: the kubelet dials the DRA socket at once
        log.info(
            "DRA driver %s: registration on %s, DRA services on %s",
            self.driver,
            self.registration.socket,
            self.dra_socket,
        )
        self._tasks.spawn(f"dra/{self.driver}/sockets", self._keep_sockets, backoff=Backoff())

    def _rebuild_metadata(self) -> None:
        """Write every prepared claim's device metadata again (the files may be gone or older)
        and remove the others'. Never raises."""
        plugin_dir = self.checkpoint.path.parent
        prepared = [p for p in self.checkpoint if p.state == PREPARED]
        for claim in prepared:
            try:
                metadata.write(plugin_dir, self.driver, claim)
            except CdiSpecError as exc:
                log.error(
                    "DRA checkpoint: the device metadata of claim %s/%s cannot be written"
                    " again: %s",
                    clip(claim.claim.namespace, 80),
                    clip(claim.claim.name, 80),
                    exc,
                )
        if self.checkpoint.complete and not self.checkpoint.unaccounted:
            keep = [(p.claim.namespace, p.claim.name) for p in self.checkpoint]
            for path in metadata.stale(plugin_dir, keep):
                log.info("removed the device metadata %s of a claim no longer prepared", path)

    async def close(self) -> None:
        await self._tasks.stop()
        await self.registration.stop()
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def _serve_dra(self) -> None:
        if self.server is not None:
            await self.server.stop(0.5)
        self.server = await DraServer.start(
            self.preparer, self.inventory, self.dra_socket, heartbeat=self._heartbeat
        )

    async def _keep_sockets(self) -> None:
        """Serve a socket again whenever it is deleted or replaced. Raises KubeletError when
        a directory cannot be watched or goes away: the guard starts over with backoff."""
        directories = sorted({self.dra_socket.parent, self.registration.socket.parent})
        for directory in directories:  # removed ones come back, as on start
            await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        started = inotify_events(lambda exc: KubeletError(f"cannot start inotify: {exc}"))
        async with started as (inotify, readable):
            for directory in directories:
                try:
                    inotify.add_watch(directory, _MASK)
                except OSError as exc:
                    raise KubeletError(f"cannot watch {directory}: {exc.strerror}") from exc
            while True:
                # After the watches are set: a loss just before them is seen here.
                await self._repair()
                await readable.wait()
                readable.clear()
                if any(event.mask & _LOST for event in inotify.read(timeout=0)):
                    raise KubeletError(
                        f"{' or '.join(map(str, directories))} was removed or replaced;"
                        " watching again"
                    )

    async def _repair(self) -> None:
        if self.server is None or not self.server.intact():
            log.warning("the DRA socket %s was removed: serving it again", self.dra_socket)
            await self._serve_dra()
        if not self.registration.intact():
            log.warning(
                "the registration socket %s was removed: serving it again", self.registration.socket
            )
            await self.registration.start()
