"""The kubelet's ``v1beta1.Registration`` service: a refusal is status UNKNOWN with the
error's text, as grpc-go turns a plain Go error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from genericdp.kubelet.api import deviceplugin_pb2 as pb

RegisterHandler = Callable[[pb.RegisterRequest], Awaitable[str | None]]


class RegistrationServicer:
    """Answers Register once the handler (None: accepted, else the error) has returned."""

    def __init__(self, handler: RegisterHandler) -> None:
        self._handler = handler

    async def Register(  # noqa: N802 -- the gRPC method name
        self,
        request: pb.RegisterRequest,
        context: grpc.aio.ServicerContext[pb.RegisterRequest, pb.Empty],
    ) -> pb.Empty:
        error = await self._handler(request)
        if error is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, error)
        return pb.Empty()
