"""The API server side of the fleet benchmark: who asked what, when, and what it holds.

The real kube-apiserver and etcd of the tests (tests/apiserver.py) with two
flags more: a static token file, so each node's daemon is a user of its own
(``fleet:<node>``, in ``system:masters`` and ``genericdp:fleet``), and an
audit log of every request of that group (level Metadata, one JSON line a
stage; the benchmark's own reads, as the admin, are not logged). A request
is one ``auditID``: counted once, at the time the server received it, with
its verb (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``), resource and user. A watch that has started and not completed
is open.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.apiserver import ApiServer
from tests.apiserver import start as start_apiserver

FLEET_GROUP = "genericdp:fleet"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["{FLEET_GROUP}"]
  - level: None
"""


def user(node: str) -> str:
    return f"fleet:{node}"


def token(node: str) -> str:
    return f"token-{node}"


def start(workdir: Path, nodes: Iterable[str]) -> tuple[ApiServer, Path]:
    """The API server, with a token for each of ``nodes`` and the audit log (its path)."""
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = workdir / "tokens.csv"
    tokens.write_text(
        "".join(f'{token(n)},{user(n)},{n},"system:masters,{FLEET_GROUP}"\n' for n in nodes)
    )
    policy = workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit = workdir / "audit.log"
    server = start_apiserver(
        [
            f"--token-auth-file={tokens}",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit}",
            "--audit-log-maxsize=0",  # one file, never rotated
        ]
    )
    return server, audit


def kubeconfig(server: ApiServer, node: str, path: Path) -> Path:
    """A kubeconfig for ``node``'s daemon: its own token, the server's CA."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: fleet\n  cluster:\n    server: {server.url}\n"
        f"    certificate-authority: {server.pki / 'ca.crt'}\n"
        f"users:\n- name: {node}\n  user:\n    token: {token(node)}\n"
        f"contexts:\n- name: fleet\n  context: {{cluster: fleet, user: {node}}}\n"
        "current-context: fleet\n"
    )
    return path


@dataclass(frozen=True)
class Request:
    """One request of a fleet daemon, as the audit log has it."""

    id: str
    at: float  # the server received it (seconds since the epoch)
    user: str
    verb: str
    resource: str
    code: int  # 0 while a watch is open (its ResponseStarted carries no final code)
    open: bool = False  # a watch that has started and not ended

    @property
    def write(self) -> bool:
        return self.verb in WRITES


class AuditLog:
    """The requests in the audit log, read on as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._seen: dict[str, Request] = {}

    def requests(self) -> list[Request]:
        """Every request so far, in the order the server received them."""
        self._read()
        return sorted(self._seen.values(), key=lambda r: r.at)

    def _read(self) -> None:
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            if line.strip():
                self._add(json.loads(line))

    def _add(self, event: dict[str, Any]) -> None:
        status = event.get("responseStatus") or {}
        received = _seconds(event["requestReceivedTimestamp"])
        started = event.get("stage") == "ResponseStarted"
        self._seen[event["auditID"]] = Request(
            id=event["auditID"],
            at=received,
            user=str(event.get("user", {}).get("username", "")),
            verb=str(event.get("verb", "")),
            resource=str((event.get("objectRef") or {}).get("resource", "")),
            code=0 if started else int(status.get("code") or 0),
            open=started,
        )


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def between(requests: Iterable[Request], start: float, end: float) -> list[Request]:
    return [r for r in requests if start <= r.at < end]


def by_user(requests: Iterable[Request]) -> Counter[str]:
    return Counter(r.user for r in requests)


def peak_rate(requests: Iterable[Request], window: float = 1.0) -> float:
    """The most requests received in any ``window`` seconds, per second."""
    times = sorted(r.at for r in requests)
    best, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        best = max(best, last - first + 1)
    return best / window


def admin_get(server: ApiServer, path: str) -> dict[str, Any]:
    """GET ``path`` as the admin (not in the audit log); the decoded JSON."""
    context = ssl.create_default_context(cafile=str(server.pki / "ca.crt"))
    context.load_cert_chain(str(server.pki / "admin.crt"), str(server.pki / "admin.key"))
    with urllib.request.urlopen(  # noqa: S310 - our own https URL
        f"{server.url}{path}", context=context, timeout=10
    ) as answer:
        body: dict[str, Any] = json.loads(answer.read())
        return body


def devices_by_node(server: ApiServer) -> dict[str, Counter[str]]:
    """``{node: {resource pool slice's short name: devices}}`` of every complete pool.

    A pool counts only when each of its slices is of its newest generation and
    the pool has all ``resourceSliceCount`` of them, as the scheduler reads it.
    """
    items = admin_get(server, "/apis/resource.k8s.io/v1/resourceslices")["items"]
    pools: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        pools.setdefault(str(item["spec"].get("nodeName", "")), []).append(item)
    found: dict[str, Counter[str]] = {}
    for node, held in pools.items():
        newest = max(int(s["spec"]["pool"]["generation"]) for s in held)
        current = [s for s in held if int(s["spec"]["pool"]["generation"]) == newest]
        if len(current) != int(current[0]["spec"]["pool"]["resourceSliceCount"]):
            continue
        counts: Counter[str] = Counter()
        for piece in current:
            for device in piece["spec"].get("devices") or []:
                counts[str(device["name"]).split("-", 1)[0]] += 1
        found[node] = counts
    return found


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:"))
    return kib / 1024
