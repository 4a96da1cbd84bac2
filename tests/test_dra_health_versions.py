"""Device health over both DRAResourceHealth versions, against the embedded DRA kubelet:
a 1.37 kubelet watches v1, a 1.36 one v1alpha1, a driver serving only v1alpha1 is
watched over it, one advertising none is not watched; the message carries the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from genericdp.config.model import HealthCheck
from genericdp.dra.driver import DraDriver
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.registration import RegistrationServer, RegistrationService
from genericdp.kubeletplugin.service import (
    DRA_V1,
    HEALTH_V1,
    HEALTH_V1ALPHA1,
    MAX_HEALTH_MESSAGE,
    SERVICES,
    DraServer,
)
from genericdp.kubeletplugin.socketnames import registration_socket
from tests.dra_drivers import new_driver
from tests.dra_fakes import (
    DRIVER,
    HOOK,
    NODE,
    SERIAL,
    MemoryClaims,
    definition,
)
from tests.dra_kubelet import KUBELET_1_36_HEALTH, DraEventKind, EmbeddedDraKubelet

A0, A1 = (NODE, device_name(SERIAL, "A0")), (NODE, device_name(SERIAL, "A1"))


def make_driver(base: Path) -> DraDriver:
    d = new_driver(
        base, MemoryClaims(), resource=definition(health=HealthCheck(HOOK)), heartbeat=0.2
    )
    d.inventory.set_health(
        SERIAL, {"A1"}, {"A0", "A1"}, {"A1": "health probe exited 3: no carrier"}
    )
    return d


@asynccontextmanager
async def serving(base: Path) -> AsyncIterator[DraDriver]:
    d = make_driver(base)
    await d.start()
    try:
        yield d
    finally:
        await d.close()


@asynccontextmanager
async def older_driver(
    base: Path, services: Sequence[str], advertised: Sequence[str] | None = None
) -> AsyncIterator[DraServer]:
    """A driver that serves only ``services`` (one built before v1, say) and advertises
    ``advertised`` (the same by default)."""
    d = make_driver(base)
    server = await DraServer.start(
        d.preparer, d.inventory, d.dra_socket, heartbeat=0.2, services=services
    )
    registration = RegistrationServer(
        RegistrationService(DRIVER, d.dra_socket, services if advertised is None else advertised),
        registration_socket(base / "registry", DRIVER),
    )
    await registration.start()
    try:
        yield server
    finally:
        await registration.stop()
        await server.stop()


VERDICTS = {A0: ("Healthy", ""), A1: ("Unhealthy", "health probe exited 3: no carrier")}


def test_we_advertise_both_health_versions_newest_first() -> None:
    """The registration lists v1 before v1alpha1, after the DRA services."""
    assert SERVICES.index(HEALTH_V1) < SERVICES.index(HEALTH_V1ALPHA1)
    assert SERVICES[:2] == (DRA_V1, "v1beta1.DRAPlugin")


async def test_a_1_37_kubelet_watches_health_over_v1(base: Path) -> None:
    """Offered both, the kubelet picks v1: the messages arrive there and v1alpha1 stays unused."""
    async with EmbeddedDraKubelet(base / "registry") as kubelet, serving(base) as d:
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == VERDICTS)
        assert kubelet.health_service(DRIVER) == HEALTH_V1
        assert d.server is not None
        assert d.server.health.opened == {HEALTH_V1: 1}


async def test_a_1_36_kubelet_watches_the_same_health_over_v1alpha1(base: Path) -> None:
    """A kubelet that knows only v1alpha1 gets the same devices, states and messages."""
    async with (
        EmbeddedDraKubelet(
            base / "registry", health_services=KUBELET_1_36_HEALTH, health_announced=False
        ) as kubelet,
        serving(base) as d,
    ):
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == VERDICTS)
        assert kubelet.health_service(DRIVER) == HEALTH_V1ALPHA1
        assert d.server is not None
        assert d.server.health.opened == {HEALTH_V1ALPHA1: 1}


async def test_a_1_37_kubelet_falls_back_to_v1alpha1_when_only_that_is_served(
    base: Path,
) -> None:
    """A driver from before v1 (v1alpha1 only) is still watched, over v1alpha1."""
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        older_driver(base, (DRA_V1, HEALTH_V1ALPHA1)) as server,
    ):
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == VERDICTS)
        assert kubelet.health_service(DRIVER) == HEALTH_V1ALPHA1
        assert server.health.opened == {HEALTH_V1ALPHA1: 1}


async def test_a_driver_advertising_no_health_service_is_not_watched(base: Path) -> None:
    """No health version in supported_versions: registered, but no health stream at all."""
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        older_driver(base, (DRA_V1,)) as server,
    ):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        assert kubelet.health_service(DRIVER) is None
        assert kubelet.count(DraEventKind.HEALTH_STREAM) == 0
        assert server.health.opened == {}


async def test_a_1_36_kubelet_opens_v1alpha1_even_unannounced(base: Path) -> None:
    """As seen on 1.36.2: the v1alpha1 stream is opened whatever supported_versions says."""
    async with (
        EmbeddedDraKubelet(
            base / "registry", health_services=KUBELET_1_36_HEALTH, health_announced=False
        ) as kubelet,
        older_driver(base, (DRA_V1, HEALTH_V1ALPHA1), advertised=(DRA_V1,)) as server,
    ):
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == VERDICTS)
        assert server.health.opened == {HEALTH_V1ALPHA1: 1}


async def test_a_long_reason_is_clipped_to_what_the_kubelet_keeps(base: Path) -> None:
    """A message past 1024 characters reaches the kubelet as 1021 and "...", whole otherwise."""
    async with EmbeddedDraKubelet(base / "registry") as kubelet, serving(base) as d:
        long = "health probe exited 1: " + "x" * 3000
        d.inventory.set_health(SERIAL, {"A0", "A1"}, {"A0", "A1"}, {"A0": long, "A1": "short"})
        await kubelet.wait_until(
            lambda k: k.device_health(DRIVER).get(A1) == ("Unhealthy", "short")
        )
        health, message = kubelet.device_health(DRIVER)[A0]
        assert health == "Unhealthy"
        assert len(message) == MAX_HEALTH_MESSAGE
        assert message == long[: MAX_HEALTH_MESSAGE - 3] + "..."
