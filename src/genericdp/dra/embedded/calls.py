"""The embedded DRA kubelet's prepare and unprepare calls and how it reads their answers
(pkg/kubelet/cm/dra/manager.go, see kubelet.py), and the plugins it makes them to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from genericdp.grpcservices import Stub
from genericdp.kubeletplugin.api import dra_v1_pb2, dra_v1beta1_pb2
from genericdp.kubeletplugin.claims import ClaimRef


class DraKubeletError(Exception):
    """What the kubelet would report in the pod's events."""


@dataclass(frozen=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None  # v1 only: the share of a device several claims hold


@dataclass
class Plugin:
    """One registered endpoint of a driver (a rolling upgrade has two for a while)."""

    driver: str
    endpoint: str
    service: str  # the chosen one
    socket: str  # its registration socket
    channel: grpc.aio.Channel


def _stub(plugin: Plugin) -> tuple[Any, Any]:
    pb = dra_v1_pb2 if plugin.service == "v1.DRAPlugin" else dra_v1beta1_pb2
    return Stub(plugin.channel, pb.DESCRIPTOR.services_by_name["DRAPlugin"]), pb


def _claims(pb: Any, claims: Sequence[ClaimRef]) -> list[Any]:
    return [pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


async def _call(method: Any, request: Any, timeout: float, name: str) -> Any:  # noqa: ASYNC109 -- the call's gRPC deadline
    """One call with the kubelet's deadline; a gRPC failure is ``<name> failed: ...``."""
    try:
        return await method(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise DraKubeletError(f"{name} failed: {exc.details()}") from exc


async def node_prepare(
    plugin: Plugin,
    claims: Sequence[ClaimRef],
    timeout: float,  # noqa: ASYNC109 -- the call's gRPC deadline
) -> dict[str, tuple[PreparedDevice, ...]]:
    """NodePrepareResources for ``claims``: each claim's UID and devices."""
    stub, pb = _stub(plugin)
    request = pb.NodePrepareResourcesRequest(claims=_claims(pb, claims))
    response = await _call(stub.NodePrepareResources, request, timeout, "NodePrepareResources")
    asked = {c.uid: c for c in claims}
    prepared: dict[str, tuple[PreparedDevice, ...]] = {}
    for uid, result in response.claims.items():
        claim = asked.get(uid)
        if claim is None:
            raise DraKubeletError(
                f"NodePrepareResources returned result for unknown claim UID {uid}"
            )
        if result.error:
            raise DraKubeletError(
                f"NodePrepareResources failed for claim {claim.namespace}/{claim.name}:"
                f" {result.error}"
            )
        prepared[uid] = tuple(
            PreparedDevice(
                tuple(d.request_names),
                d.pool_name,
                d.device_name,
                tuple(d.cdi_device_ids),
                d.share_id if pb is dra_v1_pb2 and d.HasField("share_id") else None,
            )
            for d in result.devices
        )
    missing = len(claims) - len(response.claims)
    if missing:
        raise DraKubeletError(f"NodePrepareResources left out {missing} claims")
    return prepared


async def node_unprepare(
    plugin: Plugin,
    claims: Sequence[ClaimRef],
    timeout: float,  # noqa: ASYNC109 -- the call's gRPC deadline
) -> list[str]:
    """NodeUnprepareResources for ``claims``: the UIDs unprepared."""
    stub, pb = _stub(plugin)
    request = pb.NodeUnprepareResourcesRequest(claims=_claims(pb, claims))
    response = await _call(stub.NodeUnprepareResources, request, timeout, "NodeUnprepareResources")
    done = []
    for uid, result in response.claims.items():
        if result.error:
            raise DraKubeletError(f"NodeUnprepareResources failed for claim {uid}: {result.error}")
        done.append(uid)
    missing = len(claims) - len(response.claims)
    if missing:
        raise DraKubeletError(f"NodeUnprepareResources skipped {missing} ResourceClaims")
    return done
