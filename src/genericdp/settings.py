"""Daemon settings: command-line flags override ``GENERICDP_*`` environment variables.

Every filesystem root is a setting so tests (and ``simulate``) point the daemon
at temporary trees instead of the host's ``/dev``, ``/sys`` and kubelet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


class DiscoverySettings(BaseSettings):
    """Where discovery reads the host's device tree."""

    model_config = SettingsConfigDict(env_prefix="GENERICDP_", extra="ignore")

    dev_root: Path = Field(Path("/dev"), description="where the host's /dev is visible")
    sys_root: Path = Field(Path("/sys"), description="where the host's /sys is visible")
    udev_root: Path = Field(
        Path("/run/udev"), description="where the host's /run/udev is visible (data/ inside)"
    )


class Settings(DiscoverySettings):
    """Everything ``genericdp serve`` needs."""

    config: Path = Field(Path("/etc/genericdp"), description="config file or directory")
    plugin_dir: Path = Field(DEFAULT_PLUGIN_DIR, description="kubelet device-plugin directory")
    pod_resources_socket: Path = Field(
        DEFAULT_POD_RESOURCES_SOCKET, description="kubelet PodResources socket"
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="where CDI specs are written")
    node_name: str = Field("", description="this node's name, shown to templates")
    metrics_address: str = Field(":9090", description="host:port for /metrics, /healthz")
    rescan_interval: float = Field(60.0, description="seconds between safety-net rescans")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
