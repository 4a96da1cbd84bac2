"""One writer among the reconciler's replicas: a ``coordination.k8s.io/v1`` Lease.

As client-go's leader election: the holder renews every ``duration / 5`` seconds; another
replica takes the Lease only once it has watched its record stay unchanged for
``leaseDurationSeconds`` by its own clock (never comparing the holder's timestamps with
its own: clock skew does not matter), by a replace carrying the resourceVersion it read
(of two replicas taking at once, one gets a 409). The holder counts itself leader only
until ``2/3 * duration`` after the start of its last successful renewal, so a holder cut
off from the API server stops writing well before anyone else may start. ``release`` at
shutdown empties the holder: the next replica takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from lightkube import AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from genericdp.kube.client import ApiRequestError, answered

log = logging.getLogger(__name__)

NOT_FOUND, CONFLICT = 404, 409
RENEW_SHARE = 2 / 3  # of the duration: how long a renewal keeps us leader
RETRY_SHARE = 1 / 5  # of the duration: how often we renew or try to take it


class Leases:
    """The Lease requests (lightkube's model), each failure as ``ApiRequestError``."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get_lease(self, namespace: str, name: str) -> Lease | None:
        try:
            async with answered(f"reading Lease {namespace}/{name}"):
                lease: Lease = await self.client.get(Lease, name, namespace=namespace)
                return lease
        except ApiRequestError as err:
            if err.code == NOT_FOUND:
                return None
            raise

    async def write_lease(self, lease: Lease, *, create: bool) -> Lease:
        """Create ``lease``, or replace it (its resourceVersion makes a race a 409)."""
        if lease.metadata is None:
            raise TypeError("a Lease without metadata")
        verb = "creating" if create else "updating"
        async with answered(f"{verb} Lease {lease.metadata.namespace}/{lease.metadata.name}"):
            made: Lease = await (
                self.client.create(lease) if create else self.client.replace(lease)
            )
            return made


class LeaseElector:
    """Holds Lease ``namespace/name`` as ``identity`` while ``run`` runs, when it can;
    ``changed`` gets each flip of ``leading()`` (whether writes may go ahead now)."""

    def __init__(
        self,
        api: Leases,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration: int = 15,
        changed: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration = duration
        self._changed = changed
        self._clock = clock
        self._valid_until = 0.0  # our clock: leader until then, from the last renewal
        self._was_leading = False
        self._observed: tuple[object, ...] | None = None  # the other holder's last record
        self._observed_at = 0.0
        self._lease: Lease | None = None  # the Lease as we last wrote it

    def leading(self) -> bool:
        return self._clock() < self._valid_until

    async def run(self) -> None:
        """Take and renew the Lease until cancelled; API failures are logged and retried."""
        while True:
            started = self._clock()
            try:
                if await self._try():
                    self._valid_until = started + self.duration * RENEW_SHARE
            except ApiRequestError as err:
                log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            self._tell()
            await asyncio.sleep(self._until_next(started))

    def _until_next(self, started: float) -> float:
        wait = started + self.duration * RETRY_SHARE - self._clock()
        if self._was_leading:  # wake in time to stop at the deadline if renewals fail
            wait = min(wait, self._valid_until - self._clock())
        return max(wait, 0.01)

    def _tell(self) -> None:
        now = self.leading()
        if now == self._was_leading:
            return
        self._was_leading = now
        if now:
            log.info("lease %s/%s taken as %s: writing", self.namespace, self.name, self.identity)
        else:
            log.warning(
                "lease %s/%s lost (or not renewed in time): no more writes",
                self.namespace, self.name,
            )  # fmt: skip
        if self._changed is not None:
            self._changed(now)

    async def _try(self) -> bool:
        """Take or renew the Lease once; whether we hold it now."""
        lease = await self._api.get_lease(self.namespace, self.name)
        now = datetime.now(UTC)
        if lease is None:
            return await self._write(self._fresh(now), create=True)
        spec = lease.spec or LeaseSpec()
        if spec.holderIdentity and spec.holderIdentity != self.identity:
            record = (spec.holderIdentity, spec.renewTime, spec.leaseTransitions)
            if record != self._observed:
                self._observed, self._observed_at = record, self._clock()
            held_for = spec.leaseDurationSeconds or self.duration
            if self._clock() < self._observed_at + held_for:
                self._valid_until = 0.0
                return False
            log.info(
                "lease %s/%s: holder %s has not renewed for %ss: taking it",
                self.namespace, self.name, spec.holderIdentity, held_for,
            )  # fmt: skip
        if spec.holderIdentity != self.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = self.identity
        spec.renewTime = now
        spec.leaseDurationSeconds = self.duration
        lease.spec = spec
        return await self._write(lease, create=False)

    def _fresh(self, now: datetime) -> Lease:
        return Lease(
            metadata=ObjectMeta(name=self.name, namespace=self.namespace),
            spec=LeaseSpec(
                holderIdentity=self.identity,
                leaseDurationSeconds=self.duration,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            ),
        )

    async def _write(self, lease: Lease, *, create: bool) -> bool:
        try:
            self._lease = await self._api.write_lease(lease, create=create)
        except ApiRequestError as err:
            if err.code == CONFLICT:  # another replica wrote it first
                self._valid_until = 0.0
                return False
            raise
        return True

    async def release(self) -> None:
        """Give the Lease up if we hold it (at shutdown): the next replica need not wait."""
        held, self._valid_until = self.leading(), 0.0
        self._tell()
        if not held or self._lease is None or self._lease.spec is None:
            return
        self._lease.spec.holderIdentity = None
        self._lease.spec.leaseDurationSeconds = 1
        self._lease.spec.renewTime = datetime.now(UTC)
        try:
            await self._api.write_lease(self._lease, create=False)
        except ApiRequestError as err:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, err)
        else:
            log.info("lease %s/%s released", self.namespace, self.name)
