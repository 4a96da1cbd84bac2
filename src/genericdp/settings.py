"""Daemon settings: command-line flags override ``GENERICDP_*`` environment variables.
Every filesystem root is one, so tests and ``simulate`` use temporary trees.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from genericdp.k8snames import parse_labels

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_DRA_REGISTRATION_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_DRA_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_STATE_DIR = "/var/lib/genericdp"
# NFD's worker reads every file of this directory (its local feature source).
DEFAULT_FEATURES_FILE = Path("/etc/kubernetes/node-feature-discovery/features.d/genericdp")
# kubeletplugin/naming.py DEFAULT_DRIVER: settings sits below dra and cannot import it.
DEFAULT_DRA_DRIVER = "genericdp.io"
# A DRA driver name: a DNS subdomain of at most 63 characters (ResourceSlice spec.driver).
_DRIVER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_DRIVER_NAME = 63
# Kubernetes UIDs are RFC 4122 UUIDs; they name sockets, so never "/" nor a leading ".".
_POD_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_MAX_PORT = 65535
# A DNS host name (RFC 1123 labels), as getaddrinfo can resolve it to listen on.
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\.?"
)

# Bounds of the timing settings, in seconds: 0 makes a loop that never sleeps,
# infinity or NaN a wait that overflows or never ends.
MIN_INTERVAL = 0.01
MAX_INTERVAL = 24 * 3600.0
MIN_SETTLE = 0.001
MAX_SETTLE = 60.0


def _interval(default: float, description: str) -> Any:
    return Field(
        default, ge=MIN_INTERVAL, le=MAX_INTERVAL, allow_inf_nan=False, description=description
    )


def _settle(default: float, description: str) -> Any:
    return Field(
        default, ge=MIN_SETTLE, le=MAX_SETTLE, allow_inf_nan=False, description=description
    )


@dataclass(frozen=True)
class ListenAddress:
    """Where the HTTP endpoints listen; ``host`` None means every interface."""

    host: str | None
    port: int

    def __str__(self) -> str:
        host = self.host or ""
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def parse_listen_address(text: str) -> ListenAddress | None:
    """``host:port``, ``:port`` (every interface), ``[v6]:port`` or empty (None); ValueError."""
    text = text.strip()
    if not text:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} has no port: write host:port or :port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"IPv6 addresses go in brackets, as in [::1]:9090, not {text!r}")
    elif host and all(part.isdigit() for part in host.split(".")):
        try:
            ipaddress.IPv4Address(host)  # 256.1.1.1 or 1.2.3 would be looked up as a name
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv4 address") from None
    elif host and not _HOST_NAME.fullmatch(host):
        raise ValueError(f"{host!r} is not a host name or address")
    if not port_text.isdigit() or int(port_text) > _MAX_PORT:
        raise ValueError(f"port {port_text!r} is not a number from 0 to {_MAX_PORT}")
    return ListenAddress(host or None, int(port_text))


# Settings that are not flags of ``simulate``: it uses temporary kubelet and CDI
# directories (never the host's), serves no HTTP endpoints, keeps no state, never
# talks to an API server, and has its own ``--backend`` (what to simulate).
SIMULATE_SKIPS = frozenset({
    "config", "plugin_dir", "pod_resources_socket", "cdi_dir", "metrics_address",
    "dra_registration_dir", "dra_plugins_dir", "pod_uid", "kubeconfig", "backend", "state_dir",
    "node_features", "node_features_file", "node_features_namespace", "node_features_owner",
})  # fmt: skip


class DiscoverySettings(BaseSettings):
    """Where discovery reads the host's devices, and the node (all ``discover`` needs)."""

    model_config = SettingsConfigDict(env_prefix="GENERICDP_", extra="ignore")

    dev_root: Path = Field(Path("/dev"), description="where the host's /dev is visible")
    sys_root: Path = Field(Path("/sys"), description="where the host's /sys is visible")
    udev_root: Path = Field(
        Path("/run/udev"), description="where the host's /run/udev is visible (data/ inside)"
    )
    node_name: str = Field("", description="this node's name, shown to templates")
    node_labels: str = Field(
        "",
        description="this node's labels as key=value,... for nodeSelector, instead of reading"
        " its Node object from the API server (simulate, tests, a node without API access)",
    )

    @field_validator("node_labels")
    @classmethod
    def _check_node_labels(cls, value: str) -> str:
        parse_labels(value)
        return value

    @property
    def static_node_labels(self) -> dict[str, str] | None:
        """The labels ``node_labels`` gives, or None when it is empty (read them from the API)."""
        return parse_labels(self.node_labels) if self.node_labels.strip() else None


class Settings(DiscoverySettings):
    """Everything ``genericdp serve`` needs."""

    config: Path = Field(Path("/etc/genericdp"), description="config file or directory")
    # The one list of backends: each name is a package (``daemon.backend_serving``).
    backend: Literal["device-plugin", "dra"] = Field(
        "device-plugin",
        description="serve the resources through the kubelet's device-plugin API or as a DRA"
        " driver (ResourceSlices, NodePrepareResources)",
    )
    dra_driver_name: str = Field(
        DEFAULT_DRA_DRIVER,
        description="the DRA driver name (a DNS subdomain of at most 63 characters)",
        # What _check_driver_name checks, for the chart's values schema.
        json_schema_extra={"pattern": f"^{_DRIVER_NAME.pattern}$", "maxLength": MAX_DRIVER_NAME},
    )
    dra_registration_dir: Path = Field(
        DEFAULT_DRA_REGISTRATION_DIR,
        description="the kubelet's plugin registration directory (backend dra)",
    )
    dra_plugins_dir: Path = Field(
        DEFAULT_DRA_PLUGINS_DIR,
        description="the kubelet's plugins directory: the DRA socket and the prepared-claims"
        " checkpoint go in <this>/<driver name>/, a path the kubelet must see too (backend dra)",
    )
    pod_uid: str = Field(
        "",
        description="this pod's UID (the downward API's metadata.uid), for rolling updates of the"
        " DRA backend: its sockets carry it, so the old and the new pod serve the node side by"
        " side; empty: fixed socket names, one instance at a time (backend dra)",
    )
    plugin_dir: Path = Field(DEFAULT_PLUGIN_DIR, description="kubelet device-plugin directory")
    pod_resources_socket: Path = Field(
        DEFAULT_POD_RESOURCES_SOCKET, description="kubelet PodResources socket"
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="where CDI specs are written")
    state_dir: str = Field(
        DEFAULT_STATE_DIR,
        description="where the last config applied (served when the pod starts with an invalid"
        " one) and the cleanups owed are kept (an absolute path on the node; empty: nothing kept)",
    )
    kubeconfig: str = Field(
        "",
        description="kubeconfig file for the API server (DRA backend, the Node for nodeSelector); "
        "empty: the pod's service account",
    )
    metrics_address: str = Field(
        ":9090",
        description="host:port, :port or [v6]:port for /metrics, /healthz, /readyz; empty: off",
    )
    rescan_interval: float = _interval(60.0, "seconds between safety-net rescans")
    pod_resources_poll_interval: float = _interval(
        5.0,
        "seconds between PodResources List calls while any device is held: "
        "which devices containers hold (cleanup hooks, unbounded sharing, units unplugged "
        "while in use); none held: one a minute; after an Allocate, one 0.25 s later and at "
        "doubling gaps until List shows its devices",
    )
    hotplug_settle: float = _settle(
        0.1, "seconds of device events merged into one rescan (udev bursts)"
    )
    reload_settle: float = _settle(
        0.2, "seconds without config changes before a reload (merges bursts)"
    )
    node_features: Literal["off", "nodefeature", "file"] = Field(
        "off",
        description="publish the resources' node labels (config labels) for Node Feature"
        " Discovery: as a NodeFeature object (nodefeature), as a features.d file (file), or"
        " not at all (off)",
    )
    node_features_file: Path = Field(
        DEFAULT_FEATURES_FILE,
        description="the file node_features file writes, in the directory NFD's worker reads"
        " (features.d)",
    )
    node_features_namespace: str = Field(
        "",
        description="the namespace of the NodeFeature object; empty: the service account's"
        " (or the kubeconfig context's)",
    )
    node_features_owner: str = Field(
        "",
        description="the DaemonSet (in that namespace) that owns the NodeFeature object, so"
        " that it outlives pod restarts and goes with the DaemonSet; empty: no owner",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="the least severe log lines written"
    )
    log_format: Literal["text", "json"] = Field("text", description="log lines as text or JSON")

    @field_validator("dra_driver_name")
    @classmethod
    def _check_driver_name(cls, value: str) -> str:
        if len(value) > MAX_DRIVER_NAME or not _DRIVER_NAME.fullmatch(value):
            raise ValueError(
                f"{value[:80]!r} is not a DNS subdomain of at most {MAX_DRIVER_NAME} characters"
                " (lowercase letters, digits, '-' and '.')"
            )
        return value

    @field_validator("pod_uid")
    @classmethod
    def _check_pod_uid(cls, value: str) -> str:
        if value and not _POD_UID.fullmatch(value):
            raise ValueError(
                f"{value[:80]!r} is not a pod UID (letters, digits and '-', at most 128)"
            )
        return value

    @field_validator("state_dir")
    @classmethod
    def _check_state_dir(cls, value: str) -> str:
        if value and not Path(value).is_absolute():
            raise ValueError(f"{value[:80]!r} is not an absolute path (empty turns it off)")
        return value

    @field_validator("metrics_address")
    @classmethod
    def _check_metrics_address(cls, value: str) -> str:
        parse_listen_address(value)
        return value.strip()

    def node_features_problem(self) -> str | None:
        """Why node labels cannot be published with these settings, or None."""
        if self.node_features == "nodefeature" and not self.node_name:
            return (
                "node_features nodefeature needs the node's name (--node-name or"
                " GENERICDP_NODE_NAME): it names the NodeFeature object and its node"
            )
        if self.node_features == "file" and not self.node_features_file.is_absolute():
            return f"node_features_file {str(self.node_features_file)[:80]!r} is not absolute"
        return None

    def dra_problem(self) -> str | None:
        """Why the DRA backend cannot run with these settings (for serve and the backend)."""
        if not self.node_name:
            return (
                "backend dra needs the node's name (--node-name or GENERICDP_NODE_NAME, from"
                " the downward API): it names the node's device pool"
            )
        return None

    @property
    def state_path(self) -> Path | None:
        return Path(self.state_dir) if self.state_dir else None

    @property
    def metrics_listen(self) -> ListenAddress | None:
        return parse_listen_address(self.metrics_address)


# The settings of ``serve`` that ``reconcile-classes`` reads too; the others are
# not its flags (it runs in a Deployment: no node, no kubelet, no devices).
CLASS_SETTINGS_SHARED = frozenset({
    "config", "dra_driver_name", "kubeconfig", "metrics_address", "reload_settle", "log_level",
    "log_format",
})  # fmt: skip


class ClassSettings(Settings):
    """Everything ``genericdp reconcile-classes`` needs (``CLASS_SETTINGS_SHARED`` and these)."""

    lease_namespace: str = Field(
        "",
        description="the namespace of the reconciler's Lease (empty: the pod's own, from its"
        " service account)",
    )
    lease_name: str = Field(
        "",
        description="the reconciler's Lease (empty: genericdp-deviceclasses-<driver name>)",
    )
    lease_duration: int = Field(
        15,
        ge=1,
        le=3600,
        description="seconds a replica that stopped renewing keeps the Lease before another"
        " takes it",
    )
    identity: str = Field(
        "",
        description="this replica's name in the Lease (empty: the host name, which is the pod's"
        " name, and the process ID)",
    )
    resync_interval: float = _interval(
        60.0,
        "seconds between comparisons of the DeviceClasses with the config when nothing changed"
        " (watches see changes at once)",
    )

    @property
    def lease(self) -> str:
        return self.lease_name or f"genericdp-deviceclasses-{self.dra_driver_name}"[:253]
