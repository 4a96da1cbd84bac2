"""Register a device plugin with the kubelet (``v1beta1.Registration/Register``).

The kubelet dials the plugin's socket back while it handles Register, so the
plugin must already be serving when this is called.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from genericdp.errors import KubeletError, RegistrationError
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.api import deviceplugin_pb2_grpc as pb_grpc
from genericdp.kubelet.options import API_VERSION, PluginOptions, unix_address


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource_name: str,
    options: PluginOptions,
    timeout: float = 10.0,  # noqa: ASYNC109 -- sent to the kubelet as the gRPC deadline
) -> None:
    """Register ``resource_name`` served on ``endpoint`` (a file name in the kubelet's dir).

    Raises RegistrationError with the kubelet's own message when it refuses, and
    when its socket is missing, unreachable or does not answer within ``timeout``.
    """
    try:
        target = unix_address(kubelet_socket)
    except KubeletError as exc:
        raise RegistrationError(f"cannot register {resource_name}: {exc}") from exc
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource_name,
        options=pb.DevicePluginOptions(
            pre_start_required=options.pre_start_required,
            get_preferred_allocation_available=options.get_preferred_allocation_available,
        ),
    )
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        try:
            await stub.Register(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise RegistrationError(_describe(exc, kubelet_socket, resource_name)) from exc


def _describe(exc: grpc.aio.AioRpcError, kubelet_socket: Path, resource_name: str) -> str:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"kubelet at {kubelet_socket} is not reachable: {exc.details()}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"kubelet at {kubelet_socket} did not answer Register for {resource_name} in time"
    return f"kubelet refused to register {resource_name}: {exc.details()}"
