"""gRPC services read from their protobuf descriptors: a server's handler, a client's stub.

protoc's gRPC plugin would generate both (``*_pb2_grpc.py``) from the same method table.
A method's path is ``/<proto package>.<Service>/<Method>`` (``/v1beta1.DevicePlugin/Allocate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message_factory import GetMessageClass

if TYPE_CHECKING:
    from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor


def _kind(method: MethodDescriptor) -> str:
    """``unary_unary``, ``unary_stream``, ...: how ``method`` sends and answers."""
    sends = "stream" if method.client_streaming else "unary"
    answers = "stream" if method.server_streaming else "unary"
    return f"{sends}_{answers}"


def service_handler(
    service: ServiceDescriptor, servicer: object
) -> grpc.GenericRpcHandler[Any, Any]:
    """Serve ``service`` by ``servicer``'s methods of the same names (coroutines or
    async generators taking the request and the context, for ``grpc.aio``).

    Only the generic handler: registering the methods as well makes ``grpc.aio`` keep a
    call (a task) requested for every method of every server at all times. A method
    the servicer lacks is one no handler knows: gRPC answers it UNIMPLEMENTED.
    """
    handlers = {
        method.name: getattr(grpc, f"{_kind(method)}_rpc_method_handler")(
            getattr(servicer, method.name),
            request_deserializer=GetMessageClass(method.input_type).FromString,
            response_serializer=GetMessageClass(method.output_type).SerializeToString,
        )
        for method in service.methods
        if hasattr(servicer, method.name)
    }
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class Stub:
    """A client of ``service`` on ``channel``: one attribute per method, named as in
    the proto (``await stub.Allocate(request)``, ``stub.ListAndWatch(request)``)."""

    def __init__(self, channel: grpc.aio.Channel, service: ServiceDescriptor) -> None:
        for method in service.methods:
            multicallable = getattr(channel, _kind(method))(
                f"/{service.full_name}/{method.name}",
                request_serializer=GetMessageClass(method.input_type).SerializeToString,
                response_deserializer=GetMessageClass(method.output_type).FromString,
            )
            setattr(self, method.name, multicallable)

    if TYPE_CHECKING:  # the methods are set in __init__; their calls are untyped

        def __getattr__(self, name: str) -> Any: ...
