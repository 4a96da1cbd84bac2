"""ResourceClaims allocated by hand on the real API server (no scheduler in the tests)."""

from __future__ import annotations

import json

from genericdp.kubeletplugin.claims import ClaimRef
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from tests.apiserver import ApiServer


def allocated_claims(
    apiserver: ApiServer, names: list[str], device: str, *, node: str
) -> list[ClaimRef]:
    """ResourceClaims in ``default`` allocated ``device`` of our driver's pool ``node``,
    made with two kubectl calls whatever their number."""
    spec = {"devices": {"requests": [{"name": "serial", "exactly": {"deviceClassName": "serial"}}]}}
    items = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
        for name in names
    ]
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    text = apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(doc))
    made, at, decoder = [], 0, json.JSONDecoder()  # one JSON object per claim, back to back
    while text[at:].strip():
        item, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        made.append(item)
        at = end
    result = {"request": "serial", "driver": DEFAULT_DRIVER, "pool": node, "device": device}
    for item in made:
        item["status"] = {"allocation": {"devices": {"results": [result]}}}
    apiserver.kubectl(
        "replace", "--subresource=status", "-f", "-",
        input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": made}),
    )  # fmt: skip
    return [ClaimRef("default", i["metadata"]["name"], i["metadata"]["uid"]) for i in made]


def allocated_claim(apiserver: ApiServer, name: str, device: str, *, node: str) -> ClaimRef:
    """One claim, as ``allocated_claims`` makes them."""
    (claim,) = allocated_claims(apiserver, [name], device, node=node)
    return claim
