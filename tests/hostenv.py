"""The environment of a genericdp process a test starts.

None of the caller's ``GENERICDP_*`` settings reach it, except the host paths,
which ``conftest.no_host_paths`` points into the test's own tree. A ``serve``
left to the defaults would use the host's kubelet directories and tidy the
host's /var/run/cdi at start, removing the specs of any genericdp running
there (a local-node e2e beside the suite).
"""

from __future__ import annotations

import os

# Each setting that defaults to a path on the host, and its name under a test's tree.
HOST_PATHS = {
    "GENERICDP_PLUGIN_DIR": "default-plugin-dir",
    "GENERICDP_POD_RESOURCES_SOCKET": "default-pod-resources.sock",
    "GENERICDP_CDI_DIR": "default-cdi",
    "GENERICDP_DRA_REGISTRATION_DIR": "default-registry",
    "GENERICDP_DRA_PLUGINS_DIR": "default-plugins",
    "GENERICDP_STATE_DIR": "default-state",
    "GENERICDP_NODE_FEATURES_FILE": "default-features.d/genericdp",
}


def own_env(**settings: str) -> dict[str, str]:
    """This process's environment without its ``GENERICDP_*`` settings but the test's
    host paths, and with ``settings``; raises outside a test (no host paths set)."""
    missing = [name for name in HOST_PATHS if name not in os.environ]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not set: call own_env from a test")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_") or k in HOST_PATHS}
    return {**env, **settings}
