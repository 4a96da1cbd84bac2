#!/usr/bin/env python3
"""What the DRA round (e2e/local/dra.sh) reads out of ResourceSlices and the kubelet's log.

Standard library only: it runs with the host's python3, not genericdp's venv.

  kubectl get resourceslices -o json | dra-inspect.py devices RESOURCE
      one line per device of RESOURCE: "NAME UNIT_ID healthy|unhealthy"
  kubectl get resourceslices -o json | dra-inspect.py attributes RESOURCE
      the attributes of RESOURCE's devices by their qualified names, one
      "DEVICE NAME=VALUE" line each (resource.kubernetes.io/pcieRoot...)
  kubectl get resourceslices -o json | dra-inspect.py taints RESOURCE
      one line per device of RESOURCE: "NAME KEY=VALUE:EFFECT..." ("-": none)
  kubectl get resourceslices -o json | dra-inspect.py counts RESOURCE=N...
      checks that each RESOURCE has N devices (one read and one process per
      poll, however many resources); says which differ and exits 1
  kubectl get resourceslices -o json | dra-inspect.py pool NODE DRIVER
      checks that the slices form one pool named NODE (nodeName NODE, driver
      DRIVER, one generation, resourceSliceCount = number of slices); prints
      "SLICES DEVICES GENERATION", or says what is wrong and exits 1
  dra-inspect.py prepares KUBELET_LOG DRIVER [SINCE]
      the kubelet's NodePrepareResources calls to DRIVER (its JSON log at -v=4)
      after the unix time SINCE: one line "SECONDS CLAIM_NAMES" per call
  dra-inspect.py calls KUBELET_LOG DRIVER SINCE [UNTIL]
      every NodePrepareResources and NodeUnprepareResources call to DRIVER
      that ended after SINCE (and began before UNTIL): one line "Prepare|Unprepare
      SECONDS SOCKET ok|error END" per call, paired by endpoint and claim UIDs
      (the calls of one endpoint overlap), SOCKET the endpoint's file name, END
      the unix time it ended
  kubectl get --watch --output-watch-events -o json ... | dra-inspect.py watch-events
      one line "TYPE NAME" per event of the stream (ADDED, MODIFIED, DELETED)
  kubectl get resourceclaims -A -o json | dra-inspect.py held CHECKPOINT CDI_DIR NODE DRIVER
      checks that the driver's checkpoint lists, as prepared, exactly the
      claims allocated on NODE by DRIVER that are reserved for a consumer,
      and that CDI_DIR holds exactly their claim specs; prints one
      "NAMESPACE/NAME UID" line per claim, or says what differs and exits 1

An unhealthy device carries both marks docs/dra.md names: a taint
<driver>/unhealthy and the attribute healthy: false. A device with one and
not the other is reported as inconsistent.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def _attribute_value(attribute: dict[str, Any]) -> object:
    for kind in ("string", "bool", "int", "version"):
        if kind in attribute:
            return attribute[kind]
    return None


def _attributes(device: dict[str, Any]) -> dict[str, object]:
    """Attribute values by short name (a qualified name loses its domain)."""
    found: dict[str, object] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        found[name.rpartition("/")[2]] = _attribute_value(attribute or {})
    return found


def _health(device: dict[str, Any], attributes: dict[str, object]) -> str:
    """healthy, unhealthy (taint and attribute agree), or what disagrees."""
    tainted = any(
        str(taint.get("key", "")).endswith("/unhealthy") for taint in device.get("taints") or []
    )
    marked = attributes.get("healthy") is False
    if tainted == marked:
        return "unhealthy" if tainted else "healthy"
    return f"inconsistent(taint={tainted},healthy-attribute-false={marked})"


def _items(document: dict[str, Any]) -> list[dict[str, Any]]:
    items = document.get("items")
    return items if isinstance(items, list) else [document]


def devices(document: dict[str, Any], resource: str) -> list[str]:
    lines = []
    for item in _items(document):
        for device in item.get("spec", {}).get("devices") or []:
            attributes = _attributes(device)
            if attributes.get("resource") != resource:
                continue
            health = _health(device, attributes)
            lines.append(f"{device.get('name')} {attributes.get('unitID', '-')} {health}")
    return sorted(lines)


def _devices_of(document: dict[str, Any], resource: str) -> list[dict[str, Any]]:
    found = []
    for item in _items(document):
        for device in item.get("spec", {}).get("devices") or []:
            if _attributes(device).get("resource") == resource:
                found.append(device)
    return sorted(found, key=lambda d: str(d.get("name")))


def attributes(document: dict[str, Any], resource: str) -> list[str]:
    """Each attribute under its qualified name (a bare name is the driver's own)."""
    return [
        f"{device.get('name')} {name}={_attribute_value(attribute or {})}"
        for device in _devices_of(document, resource)
        for name, attribute in sorted((device.get("attributes") or {}).items())
    ]


def taints(document: dict[str, Any], resource: str) -> list[str]:
    lines = []
    for device in _devices_of(document, resource):
        said = [
            f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
            for t in device.get("taints") or []
        ]
        lines.append(f"{device.get('name')} {' '.join(said) or '-'}")
    return lines


def counts(document: dict[str, Any], specs: list[str]) -> str:
    """ "" when each RESOURCE=N spec holds; else raises ValueError naming those that do not."""
    wrong = []
    for spec in specs:
        resource, _, count = spec.partition("=")
        if not count.isdigit():
            raise ValueError(f"{spec}: not RESOURCE=N")
        found = len(devices(document, resource))
        if found != int(count):
            wrong.append(f"{found} devices of {resource}, not {count}")
    if wrong:
        raise ValueError("; ".join(wrong))
    return ""


def pool(document: dict[str, Any], node: str, driver: str) -> str:
    items = _items(document)
    if not items:
        raise ValueError(f"no ResourceSlice of driver {driver} on node {node}")
    problems = []
    generations = set()
    counts = set()
    total = 0
    for item in items:
        name = item.get("metadata", {}).get("name", "?")
        spec = item.get("spec", {})
        pool_spec = spec.get("pool", {})
        if spec.get("nodeName") != node:
            problems.append(f"{name}: nodeName {spec.get('nodeName')!r}, not {node!r}")
        if spec.get("driver") != driver:
            problems.append(f"{name}: driver {spec.get('driver')!r}, not {driver!r}")
        if pool_spec.get("name") != node:
            problems.append(f"{name}: pool {pool_spec.get('name')!r}, not the node name {node!r}")
        generations.add(pool_spec.get("generation"))
        counts.add(pool_spec.get("resourceSliceCount"))
        total += len(spec.get("devices") or [])
    if len(generations) != 1:
        problems.append(
            f"the slices of one pool have several generations: {sorted(map(str, generations))}"
        )
    if counts != {len(items)}:
        problems.append(f"resourceSliceCount {sorted(map(str, counts))} but {len(items)} slices")
    if problems:
        raise ValueError("; ".join(problems))
    return f"{len(items)} {total} {generations.pop()}"


_CALL = re.compile(r"Calling NodePrepareResources rpc")
_DONE = re.compile(r"Done calling NodePrepareResources rpc")
_CLAIM_NAME = re.compile(r'name:\\?"([^"\\]+)\\?"')


def prepares(log_path: str, driver: str, since: float) -> list[str]:
    """Durations of the kubelet's prepare calls, paired in order per endpoint."""
    started: list[tuple[float, str]] = []
    lines = []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if "NodePrepareResources" not in line or not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("driverName") != driver:
                continue
            at = float(entry.get("ts", 0)) / 1000
            if at <= since:
                continue
            message = str(entry.get("msg", ""))
            if _DONE.search(message) and started:
                began, claims = started.pop(0)
                lines.append(f"{at - began:.3f} {claims}")
            elif _CALL.search(message):
                claims = ",".join(_CLAIM_NAME.findall(str(entry.get("request", ""))))
                started.append((at, claims or "-"))
    return lines


_UID = re.compile(r'uid:\\?"([^"\\]+)\\?"')
_KEY = re.compile(r'key:\\?"([^"\\]+)\\?"')
# The 1.36 kubelet logs "Calling NodeUnprepareResource rpc" (singular), then
# "Done calling NodeUnprepareResources rpc".
_CALLS = {
    "Calling NodePrepareResources rpc": ("Prepare", True),
    "Done calling NodePrepareResources rpc": ("Prepare", False),
    "Calling NodeUnprepareResource rpc": ("Unprepare", True),
    "Calling NodeUnprepareResources rpc": ("Unprepare", True),
    "Done calling NodeUnprepareResources rpc": ("Unprepare", False),
}


def calls(log_path: str, driver: str, since: float, until: float) -> list[str]:
    """Both kinds of call, each paired with its end on the same endpoint by claim UIDs.

    The end of a failed call may name no claim: it ends the oldest call
    still open on its endpoint.
    """
    open_calls: dict[tuple[str, str], list[tuple[float, frozenset[str]]]] = {}
    lines = []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if " rpc" not in line or not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            call = _CALLS.get(str(entry.get("msg", "")))
            if call is None or entry.get("driverName") != driver:
                continue
            method, begins = call
            at = float(entry.get("ts", 0)) / 1000
            endpoint = str(entry.get("endpoint", "-"))
            pending = open_calls.setdefault((method, endpoint), [])
            if begins:
                if at < until:
                    pending.append((at, frozenset(_UID.findall(str(entry.get("request", ""))))))
                continue
            uids = frozenset(_KEY.findall(str(entry.get("response", ""))))
            match = next((i for i, (_, u) in enumerate(pending) if uids and u == uids), None)
            if not pending:
                continue  # began before the log we have, or after UNTIL
            began, _ = pending.pop(0 if match is None else match)
            if at <= since:
                continue
            failed = entry.get("err") is not None
            socket = endpoint.rpartition("/")[2]
            result = "error" if failed else "ok"
            lines.append(f"{method} {at - began:.3f} {socket} {result} {at:.3f}")
    return lines


def watch_events(text: str) -> list[str]:
    """kubectl writes one JSON document per event, pretty-printed, one after another."""
    decoder, at, lines = json.JSONDecoder(), 0, []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return lines
        event, at = decoder.raw_decode(text, at)
        name = event.get("object", {}).get("metadata", {}).get("name", "?")
        lines.append(f"{event.get('type', '?')} {name}")


def _held_claims(document: dict[str, Any], node: str, driver: str) -> dict[str, str]:
    """UID -> namespace/name of the claims allocated on NODE by DRIVER with a consumer."""
    found = {}
    for claim in _items(document):
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        ours = any(r.get("driver") == driver and r.get("pool") == node for r in results)
        if ours and status.get("reservedFor"):
            meta = claim.get("metadata", {})
            found[str(meta.get("uid"))] = f"{meta.get('namespace')}/{meta.get('name')}"
    return found


def held(document: dict[str, Any], checkpoint: str, cdi_dir: str, node: str, driver: str) -> str:
    """The held claims, one a line; raises ValueError saying how the node's state differs."""
    wanted = _held_claims(document, node, driver)
    with open(checkpoint, encoding="utf-8") as file:
        recorded = json.load(file).get("claims") or {}
    prefix = f"gdp-claim-{driver}_"
    specs = set()
    for path in Path(cdi_dir).iterdir():
        if path.name.startswith(prefix) and path.name.endswith(".json"):
            specs.add(path.name[len(prefix) : -len(".json")])
    problems = []
    for uid in sorted(wanted.keys() - recorded.keys()):
        problems.append(f"{wanted[uid]} ({uid}) is held but not in the checkpoint")
    for uid in sorted(recorded.keys() - wanted.keys()):
        entry = recorded[uid]
        where = f"{entry.get('namespace')}/{entry.get('name')}"
        problems.append(f"the checkpoint lists {where} ({uid}), which nothing holds")
    for uid in sorted(wanted.keys() & recorded.keys()):
        entry = recorded[uid]
        if entry.get("state") != "prepared" or entry.get("spec") != f"{prefix}{uid}.json":
            state, spec = entry.get("state"), entry.get("spec")
            problems.append(f"{wanted[uid]} is {state!r} in the checkpoint, spec {spec!r}")
    for uid in sorted(wanted.keys() - specs):
        problems.append(f"no CDI spec {prefix}{uid}.json for {wanted[uid]}")
    for uid in sorted(specs - wanted.keys()):
        problems.append(f"the CDI spec {prefix}{uid}.json is of no held claim")
    if problems:
        raise ValueError("; ".join(problems))
    return "\n".join(f"{wanted[uid]} {uid}" for uid in sorted(wanted, key=wanted.__getitem__))


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["devices"] and len(argv) == 2:
            print("\n".join(devices(json.load(sys.stdin), argv[1])))
        elif argv[:1] == ["attributes"] and len(argv) == 2:
            print("\n".join(attributes(json.load(sys.stdin), argv[1])))
        elif argv[:1] == ["taints"] and len(argv) == 2:
            print("\n".join(taints(json.load(sys.stdin), argv[1])))
        elif argv[:1] == ["counts"] and len(argv) >= 2:
            counts(json.load(sys.stdin), argv[1:])
        elif argv[:1] == ["pool"] and len(argv) == 3:
            print(pool(json.load(sys.stdin), argv[1], argv[2]))
        elif argv[:1] == ["prepares"] and len(argv) in (3, 4):
            since = float(argv[3]) if len(argv) == 4 else 0.0
            print("\n".join(prepares(argv[1], argv[2], since)))
        elif argv[:1] == ["calls"] and len(argv) in (4, 5):
            until = float(argv[4]) if len(argv) == 5 else float("inf")
            print("\n".join(calls(argv[1], argv[2], float(argv[3]), until)))
        elif argv[:1] == ["watch-events"] and len(argv) == 1:
            print("\n".join(watch_events(sys.stdin.read())))
        elif argv[:1] == ["held"] and len(argv) == 5:
            print(held(json.load(sys.stdin), *argv[1:]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (ValueError, OSError) as exc:
        print(f"dra-inspect: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
