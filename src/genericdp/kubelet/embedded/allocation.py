"""How the kubelet picks device IDs for a container, without topology alignment.

With no Topology Manager hint every available device is in the kubelet's
"no affinity" set, so its order is: the plugin's preferred IDs that are
really available, then any other available IDs. Go iterates sets in random
order; we fill up in the plugin's list order so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

from genericdp.errors import KubeletError

UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
PRE_START_FAILED = "PreStartContainerError"


class AllocationError(KubeletError):
    """The kubelet could not give a container its devices.

    ``reason`` is what the kubelet would put on the pod: ``UnexpectedAdmissionError``
    when admission fails (not enough devices, plugin errors), or
    ``PreStartContainerError`` when the container could not start.
    """

    def __init__(
        self, message: str, *, reason: str = UNEXPECTED_ADMISSION, plain: str = ""
    ) -> None:
        super().__init__(message)
        self.reason = reason
        # What happened and what to do, in a person's words (``simulate`` shows it
        # before the kubelet's message); empty: the message says it.
        self.plain = plain


def admission_error(cause: str, plain: str = "") -> AllocationError:
    """The kubelet's wording for a failed device admission; PLAIN says it for a person."""
    return AllocationError(f"Allocate failed due to {cause}, which is unexpected", plain=plain)


def choose_devices(
    available: Sequence[str], count: int, preferred: Sequence[str] = ()
) -> tuple[str, ...]:
    """Pick ``count`` IDs from ``available``: valid preferred ones first, then the rest.

    Preferred IDs that are not available (unknown, unhealthy, taken) are ignored,
    as the kubelet intersects the plugin's answer with what is available.
    """
    if count > len(available):
        raise ValueError(f"cannot choose {count} of {len(available)} devices")
    allowed = set(available)
    chosen: dict[str, None] = {}
    for device_id in (*preferred, *available):
        if len(chosen) == count:
            break
        if device_id in allowed:
            chosen[device_id] = None
    return tuple(chosen)
