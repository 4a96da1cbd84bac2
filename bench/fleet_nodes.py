"""The fleet benchmark's nodes: one real ``genericdp serve --backend dra`` each.

Each node has a directory of its own under the run's: a fake device tree
(``tests/fakesys.py``) with one USB serial dongle and one CDC ACM modem,
the DRA registration and plugins directories (its kubelet-facing sockets),
its CDI and state directories, a kubeconfig with its own token
(``fleet_api.kubeconfig``) and its log. Every node reads the same config, as
every node of a cluster reads one ConfigMap: the dongles served everywhere,
the modems only on nodes labelled ``fleet.example.com/modem=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench import fleet_api
from bench.idle_cpu import daemon_env, serve_env
from tests.apiserver import ApiServer
from tests.fakesys import FakeHost

MODEM_LABEL = "fleet.example.com/modem"
CONFIG = f"""\
version: v1
resources:
  - name: example.com/serial
    match: [glob: /dev/ttyUSB*]
  - name: example.com/modem
    match: [glob: /dev/ttyACM*]
    nodeSelector:
      matchLabels: {{{MODEM_LABEL}: "true"}}
"""


def node_name(i: int) -> str:
    return f"fleet-{i:03d}"


class FleetNode:
    """One node's daemon, its device tree and its log."""

    def __init__(self, base: Path, name: str, server: ApiServer, config: Path) -> None:
        self.name = name
        self.base = base
        base.mkdir(parents=True)
        self.host = FakeHost(base / "host")
        self.host.add_usb_serial("1-1", serial=f"{name}-0", ttys=("ttyUSB0",))
        self.host.add_usb_acm("1-9", serial=f"{name}-acm")
        self.dongles = 1
        self.kubeconfig = fleet_api.kubeconfig(server, name, base / "kubeconfig")
        self.config = config
        self.log = base / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def plug(self) -> None:
        """One more USB serial dongle (``/dev/ttyUSB<n>``)."""
        n = self.dongles
        self.host.add_usb_serial(f"1-{n + 1}", serial=f"{self.name}-{n}", ttys=(f"ttyUSB{n}",))
        self.dongles += 1

    def start(self) -> None:
        env = serve_env(self.base) | daemon_env()
        env |= {
            "GENERICDP_BACKEND": "dra",
            "GENERICDP_NODE_NAME": self.name,
            "GENERICDP_KUBECONFIG": str(self.kubeconfig),
            "GENERICDP_CONFIG": str(self.config),
            "GENERICDP_DEV_ROOT": str(self.host.dev),
            "GENERICDP_SYS_ROOT": str(self.host.sys),
            "GENERICDP_UDEV_ROOT": str(self.host.udev),
            "GENERICDP_METRICS_ADDRESS": "",
            "GENERICDP_LOG_LEVEL": "info",
        }
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "genericdp", "serve"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int) -> str:
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


INOTIFY_PER_DAEMON = 3  # the config, the device tree, the DRA sockets' directories


def inotify_problem(count: int, proc: Path = Path("/proc")) -> str | None:
    """Why ``count`` daemons would run out of inotify instances here, or None.

    Every process of one user on one kernel shares ``fs.inotify.max_user_instances``;
    on a cluster each node has its own. A daemon that cannot get one retries
    with backoff and logs it, which is not what the benchmark measures.
    """
    limit = int((proc / "sys/fs/inotify/max_user_instances").read_text())
    uid, used = os.getuid(), 0
    for fd_dir in proc.glob("[0-9]*/fd"):
        try:
            if fd_dir.parent.stat().st_uid != uid:
                continue
            used += sum(os.readlink(fd) == "anon_inode:inotify" for fd in fd_dir.iterdir())
        except OSError:
            continue  # a process that ended, or one we may not read
    need = INOTIFY_PER_DAEMON * count
    if used + need > limit * 0.9:
        return (
            f"{count} daemons need about {need} inotify instances; this user holds {used} of"
            f" {limit} (fs.inotify.max_user_instances, shared by every process of the user):"
            " run fewer nodes or raise the limit"
        )
    return None


def make_nodes(base: Path, server: ApiServer, count: int) -> list[FleetNode]:
    """``count`` nodes under ``base``, their Node objects created (no labels)."""
    base.mkdir(parents=True, exist_ok=True)
    config = base / "config.yaml"
    config.write_text(CONFIG)
    names = [node_name(i) for i in range(count)]
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names]
    server.kubectl(
        "create",
        "-f",
        "-",
        input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    return [FleetNode(base / n, n, server, config) for n in names]


def stop_all(nodes: list[FleetNode]) -> None:
    for node in nodes:
        node.terminate()
    for node in nodes:
        node.wait(20)
