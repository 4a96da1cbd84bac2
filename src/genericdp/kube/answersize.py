"""What an API server's answer may make us hold: every answer but a watch's, bounded.

lightkube and httpx read an answer whole before parsing it, and ``json.loads`` of small
values costs many times their bytes: a server (or something in its place) could have the
daemon hold gigabytes with one list. ``bound``, a response hook on the client, counts an
answer's decoded bytes and JSON values as they arrive and drops it
(``AnswerTooLargeError``) past its ``Budget``, before anything parses it. Values are
counted as commas, colons and opening brackets: at least the number of values. Answers
come unencoded (``Accept-Encoding: identity``): a compressed answer of a few megabytes
can decompress to any size, so an encoded one is refused.

Decoded, not received: Python holds text in 1, 2 or 4 bytes a character, the widest
deciding, so 31 MiB of UTF-8 with one emoji (or one ``\\ud83d`` escape) decodes, and
parses, to 124 MiB (``_Cost``). A list of many pages whose objects are all kept is read
within one ``Budget`` (``one_budget``), so its pages cannot add up to more.

The figures: a node lists its own slices, its Node, its NodeFeatures and one claim at a
time, in pages of ``LIST_PAGE``. A hundred slices at the API's limits (64 devices each,
every device with 31 attributes of 64 bytes) is about 25 MiB and 870,000 values; what
genericdp publishes is a small part of that. Parsing 1,000,000 values of the smallest
kinds measured 32-75 MiB (Python 3.11), so an answer, or a list, at the bounds costs
under about 110 MiB while parsed, within the DaemonSet's 256 MiB.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx2

MAX_ANSWER_BYTES = 32 * 1024 * 1024  # decoded, for one answer or one whole list
MAX_ANSWER_VALUES = 1_000_000
LIST_PAGE = 100  # objects per page of a list (its ``limit``)
_VALUE_MARKS = (b",", b":", b"[", b"{")
# Bytes to delete to keep only UTF-8 continuation bytes (0x80-0xBF): one character
# is one byte that is not one.
_NOT_CONTINUATION = bytes(range(0x80)) + bytes(range(0xC0, 0x100))
# A character past U+FFFF (4 bytes a character): a 4-byte sequence's lead, or an
# escaped surrogate. Past U+00FF (2 bytes): a 2- or 3-byte sequence's lead from
# U+0100, or an escape not of 00XX.
_FOUR, _TWO = 4, 2  # bytes a character
_WIDE4 = re.compile(rb"[\xf0-\xff]|\\u[dD][89a-fA-F]")
_WIDE2 = re.compile(rb"[\xc4-\xef]|\\u(?!00)")


class AnswerTooLargeError(httpx2.HTTPError):
    """An answer (or a list) past its ``Budget``, or an encoded one."""


@dataclass
class Budget:
    """What the answers of one request (a list: all its pages) may still cost."""

    decoded: int = MAX_ANSWER_BYTES
    values: int = MAX_ANSWER_VALUES
    pages: int = 0  # answers read against it

    def over(self) -> str:
        """How it was spent past its end, for an error message ('' while it holds)."""
        whole = " over its pages" if self.pages > 1 else ""
        if self.decoded < 0:
            return f"more than {MAX_ANSWER_BYTES} bytes decoded{whole}"
        if self.values < 0:
            return f"more than {MAX_ANSWER_VALUES} JSON values{whole}"
        return ""


_budget: ContextVar[Budget | None] = ContextVar("genericdp_answer_budget", default=None)


@contextmanager
def one_budget() -> Iterator[Budget]:
    """Every answer read within: one ``Budget`` in all (a list over its pages)."""
    budget = Budget()
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


async def bound(response: httpx2.Response) -> None:
    """The response hook: refuse or bound ``response`` before its body is read."""
    request = response.request
    if request.url.params.get("watch") == "true":
        return
    what = f"{request.method} {request.url.path}"
    encoding = response.headers.get("content-encoding", "identity")
    if encoding.lower() != "identity":
        raise AnswerTooLargeError(f"{what}: an answer encoded {encoding}, asked for none")
    budget = _budget.get() or Budget()
    budget.pages += 1
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > budget.decoded:
        raise AnswerTooLargeError(
            f"{what}: an answer of {declared} bytes, more than the {budget.decoded} left"
            f" of {MAX_ANSWER_BYTES} to read"
        )
    if isinstance(response.stream, httpx2.AsyncByteStream):
        response.stream = _Bounded(response.stream, what, budget)


class _Cost:
    """What the text read so far decodes to: its characters times the widest one's bytes."""

    def __init__(self) -> None:
        self.chars = 0
        self.width = 1
        self._tail = b""  # the last bytes of the previous chunk: an escape cut in two

    def add(self, chunk: bytes) -> int:
        """The decoded bytes of everything read, ``chunk`` included."""
        self.chars += len(chunk) - len(chunk.translate(None, _NOT_CONTINUATION))
        seen = self._tail + chunk
        if self.width < _FOUR and _WIDE4.search(seen):
            self.width = _FOUR
        elif self.width < _TWO and _WIDE2.search(seen):
            self.width = _TWO
        self._tail = seen[-5:]
        return self.chars * self.width


class _Bounded(httpx2.AsyncByteStream):
    """An answer's body that ends in ``AnswerTooLargeError`` past its budget."""

    def __init__(self, inner: httpx2.AsyncByteStream, what: str, budget: Budget) -> None:
        self._inner = inner
        self._what = what
        self._budget = budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        budget = self._budget
        cost = _Cost()
        charged = 0
        async for chunk in self._inner:
            decoded = cost.add(chunk)
            budget.decoded -= decoded - charged
            charged = decoded
            budget.values -= sum(chunk.count(mark) for mark in _VALUE_MARKS)
            if over := budget.over():
                raise AnswerTooLargeError(f"{self._what}: {over}: not read further")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
