"""What the slice publisher writes through: the ResourceSlices of one node and driver, in the
API server (``apislices.py``) or, for the tests, in memory (``tests/dra_fakes.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Listing:
    """Every slice of the node and driver (``{name: slice}``), and the list's resourceVersion."""

    slices: dict[str, dict[str, Any]]
    version: str


class SliceStore(Protocol):
    """Failures are ``GenericdpError`` when the server answered (a conflict, a refusal), any
    other exception when it could not be reached."""

    @property
    def node(self) -> str: ...

    @property
    def driver(self) -> str: ...

    async def owner(self) -> dict[str, str] | None:
        """The ownerReference to the node's Node object, or None when it cannot be read
        (not there, or no access): then the slices carry no owner."""

    async def list(self) -> Listing: ...

    def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """``(ADDED|MODIFIED|DELETED|BOOKMARK, slice)`` after ``version``, in order, as
        one watch request that the server ends after ``seconds`` (or sooner); raises
        ``ExpiredError`` (``kube/listwatch.py``) when ``version`` cannot be watched from."""

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What the server holds now of ``obj``, named by it from ``generateName``."""

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the slice at ``obj``'s ``resourceVersion``; what the server holds now."""

    async def delete(self, name: str) -> None:
        """Delete slice ``name``; one already gone is no error."""
