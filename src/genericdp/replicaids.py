"""A unit's kubelet device IDs, ``<unit>::<i>`` for each container that may share it: the
one home of the format (discovery keeps room for the suffix and the separator out of IDs).
"""

from __future__ import annotations

SEPARATOR = "::"


def replica_id(unit_id: str, index: int) -> str:
    return f"{unit_id}{SEPARATOR}{index}"


def split_replica_id(device_id: str) -> tuple[str, str, str]:
    """``(unit, separator, index)`` as ``str.partition`` gives them: the separator is
    empty for the ID of an unshared unit, and the index is text, not yet checked."""
    return device_id.partition(SEPARATOR)
