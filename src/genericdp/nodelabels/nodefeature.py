"""The node's labels as an NFD ``NodeFeature`` object (``nfd.k8s-sigs.io/v1alpha1``;
docs/deploy.md): nfd-master labels node N with the ``spec.labels`` of every
NodeFeature labelled ``nfd.node.kubernetes.io/node-name: N``.

The object is owned by the DaemonSet, not the pod: a pod's restart keeps the labels,
deleting the DaemonSet removes them. Each write is one server-side apply (labels no
longer given go, nobody else's fields are touched); the object is read once at start,
so a restart that changes nothing writes nothing. One object per DaemonSet and node,
``<DaemonSet>-<node>``, with the DaemonSet's name as field manager, so two DaemonSets
never take each other's labels; the ``genericdp-<node>`` every DaemonSet used before
is deleted at start when this DaemonSet alone owns it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from genericdp.kube.client import (
    FIELD_MANAGER,
    ApiRequestError,
    AsyncClient,
    connect,
    http_of,
    unanswered,
)

log = logging.getLogger(__name__)

GROUP, VERSION, KIND = "nfd.k8s-sigs.io", "v1alpha1", "NodeFeature"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
NAME_PREFIX = "genericdp-"
MAX_NAME = 253
MAX_MANAGER = 128
REQUEST_TIMEOUT = 10.0
_NOT_FOUND, _CONFLICT = 404, 409


def object_name(node: str, owner: str = "") -> str:
    """``<owner>-<node>`` (``genericdp-<node>``), shortened with a hash to 253 characters."""
    name = f"{owner or NAME_PREFIX.rstrip('-')}-{node}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256((name if owner else node).encode()).hexdigest()[:12]
    head = name[: MAX_NAME - len(digest) - 1].rstrip(".-")
    return f"{head}-{digest}"


def field_manager(owner: str) -> str:
    """The DaemonSet's name (``genericdp``), shortened with a hash to 128 characters."""
    name = owner or FIELD_MANAGER
    if len(name) <= MAX_MANAGER:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[: MAX_MANAGER - len(digest) - 1]}-{digest}"


@dataclass
class NodeFeatureSink:
    """NodeFeature ``<owner>-<node>`` in ``namespace``, owned by DaemonSet ``owner``."""

    client: AsyncClient
    node: str
    namespace: str
    owner: str = ""
    _owner_ref: dict[str, Any] | None = field(default=None, init=False)
    _owner_known: bool = field(default=False, init=False)

    @property
    def name(self) -> str:
        return object_name(self.node, self.owner)

    @property
    def what(self) -> str:
        return f"NodeFeature {self.namespace}/{self.name}"

    def _path(self, name: str = "") -> str:
        objects = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/nodefeatures"
        return f"{objects}/{name or self.name}"

    async def current(self) -> Mapping[str, str] | None:
        """The object's labels (none when it is missing); None when its node label or
        owner is not what this daemon writes, so that the next write fixes them."""
        await self._find_owner()
        await self._drop_old()
        response = await self._send("GET", self._path(), f"reading {self.what}")
        if response.status_code == _NOT_FOUND:
            return {}
        obj = _body(response, f"reading {self.what}")
        metadata = obj.get("metadata") or {}
        if (metadata.get("labels") or {}).get(NODE_NAME_LABEL) != self.node:
            return None
        owners = {ref.get("uid") for ref in metadata.get("ownerReferences") or ()}
        if self._owner_ref is not None and self._owner_ref["uid"] not in owners:
            return None
        labels = (obj.get("spec") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    async def publish(self, labels: Mapping[str, str]) -> None:
        """One server-side apply: the object with exactly ``labels`` from this manager."""
        await self._find_owner()
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {NODE_NAME_LABEL: self.node},
        }
        if self._owner_ref is not None:
            metadata["ownerReferences"] = [self._owner_ref]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": metadata,
            "spec": {"labels": dict(labels)},
            "status": {},  # the CRD requires it (nfd's Go type always sends it)
        }
        what = f"writing {self.what}"
        response = await self._send(
            "PATCH",
            self._path(),
            what,
            params={"fieldManager": field_manager(self.owner), "force": "true"},
            content=json.dumps(body),  # JSON is YAML
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        if response.status_code == _NOT_FOUND:
            what += " (a 404 here: is NFD's NodeFeature CRD installed, and the namespace there?)"
        _body(response, what)

    async def close(self) -> None:
        await self.client.close()

    async def _drop_old(self) -> None:
        """Delete ``genericdp-<node>`` when this DaemonSet alone owns it (an upgrade's
        leftover); a failure is a warning: the labels are published all the same."""
        old = object_name(self.node)
        if old == self.name or self._owner_ref is None:
            return
        what = f"NodeFeature {self.namespace}/{old}"
        try:
            await self._delete_if_ours(old, what, str(self._owner_ref["uid"]))
        except ApiRequestError as err:
            log.warning("node labels: %s; its labels stay until it is deleted", err)

    async def _delete_if_ours(self, old: str, what: str, uid: str) -> None:
        response = await self._send("GET", self._path(old), f"reading {what}")
        if response.status_code == _NOT_FOUND:
            return
        metadata = _body(response, f"reading {what}").get("metadata") or {}
        owners = [ref.get("uid") for ref in metadata.get("ownerReferences") or ()]
        if owners != [uid]:
            return
        precondition = {k: metadata.get(k) for k in ("uid", "resourceVersion")}
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": precondition}
        response = await self._send(
            "DELETE",
            self._path(old),
            f"deleting {what}",
            content=json.dumps(options),
            headers={"Content-Type": "application/json"},
        )
        if response.status_code not in (_NOT_FOUND, _CONFLICT):
            _body(response, f"deleting {what}")
            log.info("node labels: deleted %s, this DaemonSet's object before %s", what, self.name)

    async def _find_owner(self) -> None:
        """The DaemonSet's UID for the owner reference, looked up once."""
        if not self._owner_known and self.owner:
            self._owner_ref = await self._owner_reference()
        self._owner_known = True

    async def _owner_reference(self) -> dict[str, Any] | None:
        path = f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{self.owner}"
        what = f"reading DaemonSet {self.namespace}/{self.owner}"
        response = await self._send("GET", path, what)
        code = response.status_code
        if code in (403, _NOT_FOUND):
            log.warning(
                "%s: the API server answered %d: %s is written without an owner and stays"
                " when the DaemonSet is deleted",
                what,
                code,
                self.what,
            )
            return None
        uid = _body(response, what).get("metadata", {}).get("uid")
        if not uid:
            raise ApiRequestError(what, code, "no metadata.uid")
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": self.owner, "uid": str(uid)}

    async def _send(self, method: str, path: str, what: str, **kwargs: Any) -> httpx2.Response:
        http = http_of(self.client)  # lightkube's HTTP client
        try:
            return await http.request(method, path, timeout=REQUEST_TIMEOUT, **kwargs)
        except httpx2.HTTPError as err:
            raise unanswered(what, err) from err


def _body(response: httpx2.Response, what: str) -> dict[str, Any]:
    """The answer's object; raises ApiRequestError on anything but success."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not response.is_success:
        reason = body.get("message") if isinstance(body, dict) else None
        raise ApiRequestError(what, response.status_code, str(reason or response.reason_phrase))
    return body if isinstance(body, dict) else {}


def node_feature_sink(
    kubeconfig: Path | None, node: str, namespace: str, owner: str
) -> NodeFeatureSink:
    """A sink on a new client (``kubeconfig``, else the pod's service account); an empty
    ``namespace`` is the client's. Raises ApiSetupError when there is no way to the server."""
    client = connect(kubeconfig)
    return NodeFeatureSink(client, node, namespace or client.namespace, owner)
