"""Device metadata (KEP-5304): a JSON file a container reads about its claim's devices.

Laid out as the Go kubelet plugin helper writes it (k8s.io/dynamic-resource-allocation,
``kubeletplugin/metadata.go``, ``api/metadata``), so readers written for it (KubeVirt's
virt-launcher, the ``devicemetadata`` Go package) read ours:

- on the host, one file per claim and request, replaced atomically (mode 0644, dirs 0755):
  ``<plugins dir>/<driver>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json``;
  a ``<namespace>_<claim>`` too long for a file name (a 253-character name is valid) keeps its
  start and ends in ``~`` and a digest of both names (``claim_dir_name``: no name holds ``~``);
- in the container, mounted read-only by a CDI device of the claim's spec
  (``<driver>/claim=<claim UID>_<request>``, listed with every device of that request, so a
  container sees only the requests it uses), at
  ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json``,
  or ``resourceclaimtemplates/<pod's claim name>/...`` for a claim made from a template (its
  ``resource.kubernetes.io/pod-claim-name`` annotation);
- the file is a stream of the same ``DeviceMetadata`` once per API version, newest first
  (``API_VERSIONS``): a reader takes the first it knows.

Each device's ``attributes`` are its slice's (``slices.device``) but ``healthy`` (it changes
after prepare), and its device nodes as the container sees them (``deviceNode0``, ...): at
most 32, each value at most 64 bytes, as the API requires. Values come from discovery (USB
strings are anyone's) and only ever go into JSON; paths are made of names checked as the API
server checks them (``problem``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from genericdp.allocation.cdi import cdi_device_name, claim_kind
from genericdp.atomicfile import reason, write_atomically
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.dra.checkpoint import PreparedClaim, PreparedDevice
from genericdp.errors import CdiSpecError
from genericdp.kubeletplugin.claims import POD_CLAIM_ANNOTATION
from genericdp.kubeletplugin.slices import MAX_ATTRIBUTES, MAX_VALUE_BYTES, device

SUBDIR = "dra-device-metadata"
FILE_NAME = "metadata.json"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR = "resourceclaims"
TEMPLATES_SUBDIR = "resourceclaimtemplates"
FILE_SUFFIX = "-metadata.json"
KIND = "DeviceMetadata"
API_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
NODE_ATTRIBUTE = "deviceNode"  # deviceNode0, deviceNode1, ...
# 128 devices of 32 attributes, every value escaped to six times its bytes, in
# two versions stay under this; a bigger file is refused, never written.
MAX_FILE_BYTES = 8 * 1024 * 1024
_FILE_MODE = 0o644  # the container's user reads it, whoever that is
_DIR_MODE = 0o755
# As the API server checks them: namespaces, requests and a pod's claim names are
# DNS labels, claim names DNS subdomains. None is "." or "..", none holds "/".
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_MAX_SUBDOMAIN = 253  # characters of a DNS subdomain (a claim's name)
_REQUEST = re.compile(rf"{_LABEL}(?:/{_LABEL})?")  # <request> or <request>/<subrequest>
_FIXED = ("resource", "unitID", "nodes")


def base_request(request: str) -> str:
    """``gpu`` of ``gpu/high-memory`` (a subrequest's files are its request's)."""
    return request.partition("/")[0]


def problem(namespace: str, name: str, requests: Iterable[str], pod_claim: str) -> str:
    """Why these names cannot name metadata files ("" when they can)."""
    if not _DNS_LABEL.fullmatch(namespace):
        return f"namespace {namespace[:80]!r} is not a DNS label"
    if len(name) > _MAX_SUBDOMAIN or not _DNS_SUBDOMAIN.fullmatch(name):
        return f"name {name[:80]!r} is not a DNS subdomain"
    for request in requests:
        if not _REQUEST.fullmatch(request):
            return f"request {request[:80]!r} is not a DNS label (or <request>/<subrequest>)"
    if pod_claim and not _DNS_LABEL.fullmatch(pod_claim):
        return f"annotation {POD_CLAIM_ANNOTATION} {pod_claim[:80]!r} is not a DNS label"
    return ""


def attributes(
    definition: ResourceDefinition, unit: Unit, driver: str, nodes: Sequence[str]
) -> tuple[tuple[str, str, Any], ...]:
    """(name, type, value): its slice's but ``healthy``, its nodes' container paths after the
    fixed and standard ones, at most ``MAX_ATTRIBUTES``."""
    published = device(
        definition.name, unit, healthy=True, driver=driver, own=definition.dra.attributes
    )["attributes"]
    published.pop("healthy", None)
    head = {k: v for k, v in published.items() if k in _FIXED or "/" in k}
    paths = [p for p in nodes if len(p.encode()) <= MAX_VALUE_BYTES]
    merged = {
        **head,
        **{f"{NODE_ATTRIBUTE}{i}": {"string": p} for i, p in enumerate(paths)},
        **{k: v for k, v in published.items() if k not in head},
    }
    out = []
    for name, typed in list(merged.items())[:MAX_ATTRIBUTES]:
        ((kind, value),) = typed.items()
        out.append((name, kind, value))
    return tuple(out)


MAX_DIR_NAME = 255  # bytes of a file name (NAME_MAX)
_DIGEST_CHARS = 32


def claim_dir_name(namespace: str, name: str) -> str:
    """``<namespace>_<name>``; when longer than a file name may be, cut and ended with
    ``~<digest>`` of both (readable, unique, and no valid claim's short name)."""
    whole = f"{namespace}_{name}"
    if len(whole.encode()) <= MAX_DIR_NAME:
        return whole
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{whole[: MAX_DIR_NAME - _DIGEST_CHARS - 1]}~{digest}"


def claim_dir(plugin_dir: Path, namespace: str, name: str) -> Path:
    return plugin_dir / SUBDIR / claim_dir_name(namespace, name)


def host_path(plugin_dir: Path, namespace: str, name: str, request: str) -> Path:
    return claim_dir(plugin_dir, namespace, name) / base_request(request) / FILE_NAME


def container_path(driver: str, name: str, pod_claim: str, request: str) -> str:
    """Where the container finds the file of ``request`` of claim ``name``."""
    where = f"{TEMPLATES_SUBDIR}/{pod_claim}" if pod_claim else f"{CLAIMS_SUBDIR}/{name}"
    return f"{CONTAINER_DIR}/{where}/{base_request(request)}/{driver}{FILE_SUFFIX}"


def cdi_name(uid: str, request: str) -> str:
    """The CDI device mounting the file of ``request`` (``_`` is in no DRA device name,
    so it never meets a device of the claim)."""
    return cdi_device_name(f"{uid}_{base_request(request)}")


def cdi_id(driver: str, uid: str, request: str) -> str:
    return f"{claim_kind(driver)}={cdi_name(uid, request)}"


def cdi_devices(plugin_dir: Path, driver: str, prepared: PreparedClaim) -> list[dict[str, Any]]:
    """The claim spec's CDI devices that mount each request's file read-only."""
    claim = prepared.claim
    out = []
    for request in dict.fromkeys(base_request(d.request) for d in prepared.devices):
        mount = {
            "hostPath": str(host_path(plugin_dir, claim.namespace, claim.name, request)),
            "containerPath": container_path(driver, claim.name, prepared.pod_claim, request),
            "type": "bind",
            "options": ["ro", "bind"],
        }
        out.append({"name": cdi_name(claim.uid, request), "containerEdits": {"mounts": [mount]}})
    return out


def stream(
    driver: str, prepared: PreparedClaim, request: str, devices: Sequence[PreparedDevice]
) -> bytes:
    """The file of ``request``: one ``DeviceMetadata`` per API version, newest first."""
    claim = prepared.claim
    meta = {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid, "generation": 1}
    body: dict[str, Any] = {"metadata": meta}
    if prepared.pod_claim:
        body["podClaimName"] = prepared.pod_claim
    entries = []
    for d in devices:
        entry: dict[str, Any] = {"driver": driver, "pool": d.pool, "name": d.device}
        if d.attributes:
            entry["attributes"] = {n: {k: v} for n, k, v in d.attributes}
        entries.append(entry)
    body["requests"] = [{"name": request, "devices": entries}]
    parts = [
        json.dumps({"kind": KIND, "apiVersion": version, **body}, indent=2) + "\n"
        for version in API_VERSIONS
    ]
    return "".join(parts).encode()


def write(plugin_dir: Path, driver: str, prepared: PreparedClaim) -> list[Path]:
    """Raises CdiSpecError saying why not (names are checked: the checkpoint is hostile)."""
    claim = prepared.claim
    named = problem(
        claim.namespace, claim.name, (d.request for d in prepared.devices), prepared.pod_claim
    )
    if named:
        raise CdiSpecError(f"no device metadata is written for this claim: {named}")
    by_request: dict[str, list[PreparedDevice]] = {}  # a device two requests name is in each
    for d in prepared.devices:
        by_request.setdefault(d.request, []).append(d)
    files = []
    for request, devices in by_request.items():
        data = stream(driver, prepared, request, devices)
        path = host_path(plugin_dir, claim.namespace, claim.name, request)
        if len(data) > MAX_FILE_BYTES:
            raise CdiSpecError(
                f"the device metadata of request {request} is {len(data)} bytes,"
                f" over the {MAX_FILE_BYTES} a file may hold"
            )
        try:
            _make_dirs(plugin_dir, path.parent)
            write_atomically(path, data, mode=_FILE_MODE)
        except OSError as exc:
            raise CdiSpecError(f"cannot write device metadata {path}: {reason(exc)}") from exc
        files.append(path)
    return files


def remove(plugin_dir: Path, namespace: str, name: str) -> bool:
    """Remove the claim's files (a link is never followed; invalid names have none); whether
    there were any. Raises CdiSpecError."""
    if problem(namespace, name, (), ""):
        return False
    return _remove_dir(claim_dir(plugin_dir, namespace, name))


def _remove_dir(path: Path) -> bool:
    try:
        if stat.S_ISLNK(path.lstat().st_mode):
            path.unlink()
        else:
            shutil.rmtree(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CdiSpecError(f"cannot remove device metadata {path}: {reason(exc)}") from exc
    return True


def stale(plugin_dir: Path, keep: Iterable[tuple[str, str]]) -> list[Path]:
    """Remove the files of claims not in ``keep`` (namespace, name); never raises."""
    wanted = {claim_dir_name(namespace, name) for namespace, name in keep}
    removed: list[Path] = []
    try:
        entries = sorted((plugin_dir / SUBDIR).iterdir())
    except OSError:
        return removed
    for entry in entries:
        namespace, _, name = entry.name.partition("_")
        if entry.name in wanted or not namespace or not name:
            continue
        try:
            _remove_dir(entry)
        except CdiSpecError:
            continue
        removed.append(entry)
    return removed


def _make_dirs(top: Path, directory: Path) -> None:
    """Make ``directory`` below ``top``, each new one 0755 whatever the umask; refuse a
    link or non-directory on the way (OSError), so a file is never written elsewhere."""
    top.mkdir(parents=True, exist_ok=True)
    current = top
    for part in directory.relative_to(top).parts:
        current = current / part
        try:
            current.mkdir(_DIR_MODE)
            current.chmod(_DIR_MODE)
        except FileExistsError:
            if not stat.S_ISDIR(current.lstat().st_mode):
                raise NotADirectoryError(20, "not a directory", str(current)) from None
