"""One error tree for genericdp.

Foreign errors (OSError, jsonschema, jinja2, grpc) are translated into these
at one boundary each, with ``raise ... from exc``, so callers and the CLI only
ever handle our own types::

    GenericdpError
     ├── ConfigError            a config file is unreadable or invalid; carries every issue
     ├── TemplateRenderError    a compiled template failed while rendering an allocation
     ├── UnsafeAllocationError  an answer that must not reach the kubelet (a rendered
     │                          path escaping its template, an answer over 4 MiB)
     ├── DiscoveryError         a device root (dev, sys, udev) cannot be read at all
     ├── InvalidDevicesError    a kubelet request named unknown, unhealthy or busy device IDs
     ├── CdiSpecError           a resource's CDI spec cannot be written or removed
     ├── HookError              an init/preStart/cleanup hook failed or timed out
     │    └── HookRunError      (hooks) the same, with the command's result
     ├── KubeletError           talking to the kubelet failed
     │    ├── RegistrationError  the kubelet refused or did not answer Register
     │    ├── EndpointError     (kubelet.embedded) the embedded kubelet cannot dial a plugin
     │    └── AllocationError   (kubelet.embedded) it cannot give a container its devices
     ├── ListenError            (httpserver) the HTTP endpoints cannot listen on their address
     ├── SimulateUsageError     (simulate) a malformed ``--allocate`` value
     ├── DraSetupError          (dra) the DRA backend cannot start with these settings
     ├── NodeLockError          (dra.nodelock) the plugin directory's lock cannot be used
     ├── TurnError              (dra.turns) the node's call lock cannot be had (in time, or at all)
     ├── DeviceClassError       (deviceclasses) two resources derive one DeviceClass name
     ├── ApiSetupError          (kube.client) no way to reach the API server
     ├── ApiRequestError        (kube.client) the API server refused or failed a request
     │    └── ApiTimeoutError   (kube.client) the same, not answered whole within its deadline
     ├── ExpiredError           (kube.listwatch) a watch's version is gone: list again
     ├── BrokenWatchError       (kube.listwatch) a watch stream open too long or a line too long
     ├── SliceError             (dra.slices) a resource that cannot be published as DRA devices
     ├── ClaimError             (dra.claims) what is wrong with which claim
     └── RecordError            a unit's owed cleanup cannot be kept in stateDir

Classes outside this module say where they live; tests/test_error_tree.py
checks that the drawing holds every subclass, each under its parent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config file, located as precisely as we can."""

    file: str
    line: int | None  # 1-based
    column: int | None  # 1-based
    path: str  # key path like ``resources[0].match[1].udev.attributes.idVendor``
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = f" {self.path}:" if self.path else ""
        return f"{where}:{key} {self.message}"


class GenericdpError(Exception):
    """Base of every error genericdp raises on purpose."""


class ConfigError(GenericdpError):
    """A config is unreadable or invalid. ``issues`` lists every problem found."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class TemplateRenderError(GenericdpError):
    """A template compiled at load time failed while rendering an allocation."""


class UnsafeAllocationError(GenericdpError):
    """An Allocate answer that must not be sent (``allocation.confine``'s rules, or an
    answer over the kubelet's 4 MiB message limit)."""


class DiscoveryError(GenericdpError):
    """A device root cannot be read at all (individual odd entries are skipped)."""


class InvalidDevicesError(GenericdpError):
    """A request named device IDs that are unknown, unhealthy or being cleaned up."""


class CdiSpecError(GenericdpError):
    """A resource's CDI spec cannot be written, so its CDI names would not resolve."""


class HookError(GenericdpError):
    """A hook exited non-zero, could not start, or timed out."""


class KubeletError(GenericdpError):
    """Talking to the kubelet failed."""


class RegistrationError(KubeletError):
    """The kubelet refused our Register call, or did not answer it."""


class RecordError(GenericdpError):
    """A unit's owed cleanup cannot be kept in ``stateDir``: it is not handed out."""


# What errors and logs say about values: the one home of every clipper. A 1 MB
# device ID must not become a 1 MB log line or gRPC status.

MAX_SHOWN = 120  # characters of a hostile value quoted in an error


def shown(value: str, limit: int = MAX_SHOWN) -> str:
    """``repr`` of at most ``limit`` characters of ``value``, saying how much was left out."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def clip(value: str, limit: int = MAX_SHOWN) -> str:
    """``value`` as it is when short and printable, else ``shown(value, limit)``."""
    return value if len(value) <= limit and value.isprintable() else shown(value, limit)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def ellipsized(text: str, limit: int, mark: str = "…") -> str:
    """``text`` when at most ``limit`` characters, else its start and ``mark``, ``limit`` in all."""
    return text if len(text) <= limit else text[: limit - len(mark)] + mark


def cut_middle(text: str, limit: int) -> str:
    """``text`` when at most ``limit`` characters, else its two ends around how much is left
    out (the end of a message often says what to do)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} …[{len(text) - 2 * half} characters]… {text[-half:]}"


def first_of(
    items: Sequence[str], limit: int, *, empty: str = "", show: Callable[[str], str] = str
) -> str:
    """``a, b, c and 4 more``: the first ``limit`` items (each through ``show``), then how
    many more there are; ``empty`` when there are none."""
    listed = ", ".join(show(item) for item in items[:limit]) or empty
    more = len(items) - limit
    return listed + (f" and {more} more" if more > 0 else "")
