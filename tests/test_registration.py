"""Registering with the kubelet: success, refusals and an absent or silent kubelet."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from genericdp.errors import RegistrationError
from genericdp.kubelet.embedded import EmbeddedKubelet
from genericdp.kubelet.options import PluginOptions
from genericdp.kubelet.registration import register
from tests.kubelet_fakes import FakePlugin, device, serving

SERIAL = "example.com/serial"


async def test_register_is_accepted_after_the_kubelet_dials_back(base: Path) -> None:
    """When register returns, the kubelet already knows the resource and its endpoint."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        plugin = FakePlugin([device("d1")], get_preferred_allocation_available=True)
        async with serving(plugin, kubelet.plugin_dir / "serial-1.sock"):
            await register(
                kubelet.socket,
                endpoint="serial-1.sock",
                resource_name=SERIAL,
                options=PluginOptions(get_preferred_allocation_available=True),
            )
            snap = kubelet.resources[SERIAL]
            assert (snap.endpoint, snap.connected, snap.registrations) == ("serial-1.sock", True, 1)
            assert snap.options == PluginOptions(get_preferred_allocation_available=True)


async def test_refusal_carries_the_kubelets_message(base: Path) -> None:
    """A refused Register raises RegistrationError with the kubelet's own words."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        with pytest.raises(RegistrationError) as caught:
            await register(
                kubelet.socket, endpoint="x.sock", resource_name="serial", options=PluginOptions()
            )
    message = str(caught.value)
    assert message == 'kubelet refused to register serial: the ResourceName "serial" is invalid'
    assert isinstance(caught.value.__cause__, grpc.aio.AioRpcError)


async def test_missing_kubelet_socket_is_a_registration_error(base: Path) -> None:
    """No kubelet listening gives a RegistrationError naming the socket, not a gRPC error."""
    socket = base / "kubelet.sock"
    with pytest.raises(RegistrationError, match="is not reachable") as caught:
        await register(socket, endpoint="x.sock", resource_name=SERIAL, options=PluginOptions())
    assert str(socket) in str(caught.value)


async def test_silent_kubelet_times_out(base: Path) -> None:
    """A kubelet that does not answer within the timeout gives a RegistrationError."""
    # The kubelet waits up to 5 s to dial a plugin socket that nobody serves.
    async with EmbeddedKubelet(base / "dp", dial_timeout=5.0) as kubelet:
        with pytest.raises(RegistrationError, match="did not answer Register"):
            await register(
                kubelet.socket,
                endpoint="nobody.sock",
                resource_name=SERIAL,
                options=PluginOptions(),
                timeout=0.2,
            )


async def test_socket_path_too_long_is_a_registration_error(base: Path) -> None:
    """A kubelet socket path beyond the unix limit is refused before dialing."""
    socket = base / ("d" * 100) / "kubelet.sock"
    with pytest.raises(RegistrationError, match="limit is 107 bytes"):
        await register(socket, endpoint="x.sock", resource_name=SERIAL, options=PluginOptions())
