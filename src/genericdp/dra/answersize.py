"""What an API server's answer may make us hold: every answer but a watch's, bounded.

lightkube and httpx read an answer whole before parsing it, however long it
is, and ``json.loads`` of small values costs many times their bytes: an API
server (or something in its place) could have the daemon hold gigabytes
with one list. ``bound`` is a response hook on the client (``kubeapi.connect``)
that counts an answer's bytes and JSON values as they arrive and drops it
(``AnswerTooLargeError``) once it passes ``MAX_ANSWER_BYTES`` or
``MAX_ANSWER_VALUES``, before anything parses it. Values are counted as the
JSON text's commas, colons and opening brackets, which is at least the
number of values it holds. Answers come unencoded (``Accept-Encoding:
identity``): a compressed answer of a few megabytes can decompress to any
size, so an encoded one is refused. A watch's lines are bounded one by one
instead (``dra/watchlines.py``).

The figures: a node lists its own slices, its Node, its NodeFeatures and one
claim at a time, and lists are read in pages (``kubeapi.list_objects``,
``LIST_PAGE`` objects each). A hundred slices at the API's limits (64
devices each, every device with 31 attributes of 64 bytes) is about 25 MiB
and 870,000 values; what genericdp publishes is a small part of that. Parsing
1,000,000 values of the smallest kinds measured 32-75 MiB (Python 3.11), so
an answer at the bounds costs under about 110 MiB on top of the daemon while
it is parsed, within the DaemonSet's 256 MiB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

MAX_ANSWER_BYTES = 32 * 1024 * 1024
MAX_ANSWER_VALUES = 1_000_000
LIST_PAGE = 100  # objects per page of a list (its ``limit``)
_VALUE_MARKS = (b",", b":", b"[", b"{")


class AnswerTooLargeError(httpx2.HTTPError):
    """An answer past ``MAX_ANSWER_BYTES`` or ``MAX_ANSWER_VALUES``, or an encoded one."""


async def bound(response: httpx2.Response) -> None:
    """The response hook: refuse or bound ``response`` before its body is read."""
    request = response.request
    if request.url.params.get("watch") == "true":
        return
    what = f"{request.method} {request.url.path}"
    encoding = response.headers.get("content-encoding", "identity")
    if encoding.lower() != "identity":
        raise AnswerTooLargeError(f"{what}: an answer encoded {encoding}, asked for none")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise AnswerTooLargeError(
            f"{what}: an answer of {declared} bytes, more than the {MAX_ANSWER_BYTES} read"
        )
    if isinstance(response.stream, httpx2.AsyncByteStream):
        response.stream = _Bounded(response.stream, what)


class _Bounded(httpx2.AsyncByteStream):
    """An answer's body that ends in ``AnswerTooLargeError`` past the bounds."""

    def __init__(self, inner: httpx2.AsyncByteStream, what: str) -> None:
        self._inner = inner
        self._what = what

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = values = 0
        async for chunk in self._inner:
            size += len(chunk)
            values += sum(chunk.count(mark) for mark in _VALUE_MARKS)
            if size > MAX_ANSWER_BYTES:
                raise AnswerTooLargeError(
                    f"{self._what}: an answer of more than {MAX_ANSWER_BYTES} bytes:"
                    " not read further"
                )
            if values > MAX_ANSWER_VALUES:
                raise AnswerTooLargeError(
                    f"{self._what}: an answer of more than {MAX_ANSWER_VALUES} JSON values:"
                    " not read further"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
