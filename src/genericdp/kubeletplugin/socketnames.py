"""The names of the driver's two sockets, which carry the pod UID during rolling updates.

The kubelet (1.33+) keeps every registration of a driver and uses the newest, so during a
rolling update two instances serve a node, each on sockets of its own, named as the upstream
helper (``kubeletplugin.RollingUpdate``) names them: ``<registry dir>/<driver>-<pod
UID>-reg.sock`` and ``<plugins dir>/<driver>/dra-<pod UID>.sock`` (without a pod UID
``<driver>-reg.sock`` and ``dra.sock``, one instance at a time).

A unix socket path holds at most 107 bytes; where the helper's name would not fit, the UID
becomes 12 hex digits of a hash of driver and UID and the part before it is cut (or left out):
unique per instance, the same for the same pod. No one parses these names: the kubelet reads
the DRA socket's path from ``GetInfo``.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
from pathlib import Path

from genericdp.unixgrpc import MAX_UNIX_PATH_BYTES

_HASH_LENGTH = 12
REGISTRATION_SUFFIX = "-reg.sock"
DRA_STEM, DRA_SUFFIX = "dra", ".sock"


def registration_socket(registry_dir: Path, driver: str, pod_uid: str = "") -> Path:
    """Where the kubelet's plugin watcher finds this instance's registration socket."""
    return _fitted(registry_dir, driver, REGISTRATION_SUFFIX, driver, pod_uid)


def dra_socket(plugin_dir: Path, driver: str, pod_uid: str = "") -> Path:
    """This instance's DRA services socket, in the driver's own plugin directory."""
    return _fitted(plugin_dir, DRA_STEM, DRA_SUFFIX, driver, pod_uid)


def _fitted(directory: Path, stem: str, suffix: str, driver: str, pod_uid: str) -> Path:
    if not pod_uid:
        return directory / f"{stem}{suffix}"
    full = directory / f"{stem}-{pod_uid}{suffix}"
    if len(str(full.absolute()).encode()) <= MAX_UNIX_PATH_BYTES:
        return full
    digest = hashlib.sha256(f"{driver}\0{pod_uid}".encode()).hexdigest()[:_HASH_LENGTH]
    room = MAX_UNIX_PATH_BYTES - len(str((directory / f"-{digest}{suffix}").absolute()).encode())
    head = stem.encode()[: max(room, 0)].decode(errors="ignore").rstrip(".-")
    # Still too long (a very long directory): the socket cannot be served, and
    # serving says so with the path and the limit (unixgrpc.unix_address).
    return directory / (f"{head}-{digest}{suffix}" if head else f"{digest}{suffix}")


# A name made here: what is left of the stem, and the pod UID or its hash.
_INSTANCE = re.compile(
    r"(?:(?P<head>.+?)-)?(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    rf"|[0-9a-f]{{{_HASH_LENGTH}}})"
)


def stale_sockets(own: Path, stem: str, suffix: str) -> list[Path]:
    """Sockets beside ``own`` named as another pod's of this driver that nothing listens on
    (a pod killed with SIGKILL leaves them, the kubelet keeps dialing them). Only a refused
    connection counts: one that answers or cannot be tried (permissions, a timeout) is kept.
    """
    mine = _INSTANCE.fullmatch(own.name.removesuffix(suffix))
    heads = {stem, (mine.group("head") if mine else None) or ""}
    try:
        names = sorted(p.name for p in own.parent.iterdir())
    except OSError:
        return []
    found = []
    for name in names:
        if name == own.name or name.startswith(".") or not name.endswith(suffix):
            continue
        match = _INSTANCE.fullmatch(name.removesuffix(suffix))
        if match is None or (match.group("head") or "") not in heads:
            continue
        if _refused(own.parent / name):
            found.append(own.parent / name)
    return found


def _refused(path: Path) -> bool:
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def remove_stale(registration: Path, dra: Path, driver: str) -> list[Path]:
    """Remove the sockets other pods of this driver left behind (``stale_sockets``)."""
    removed = []
    for path in [
        *stale_sockets(registration, driver, REGISTRATION_SUFFIX),
        *stale_sockets(dra, DRA_STEM, DRA_SUFFIX),
    ]:
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed
