"""The kubelet's ``v1beta1.Registration`` service, handing requests to a callback.

The real kubelet (grpc-go) turns a plain Go error into status UNKNOWN with the
error's text as the message; plugins see exactly that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from genericdp.kubelet.api import deviceplugin_pb2 as pb

# Returns None when accepted, else the kubelet's error message.
RegisterHandler = Callable[[pb.RegisterRequest], Awaitable[str | None]]


class RegistrationServicer:
    """Answers Register after the handler has dialed the plugin back."""

    def __init__(self, handler: RegisterHandler) -> None:
        self._handler = handler

    async def Register(  # noqa: N802 -- the gRPC method name
        self,
        request: pb.RegisterRequest,
        context: grpc.aio.ServicerContext[pb.RegisterRequest, pb.Empty],
    ) -> pb.Empty:
        """Accept or refuse one registration."""
        error = await self._handler(request)
        if error is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, error)
        return pb.Empty()
