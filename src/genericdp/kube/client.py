"""The Kubernetes API client: lightkube, with resource.k8s.io/v1 as generic (dict) resources.

Only modules requesting through it import lightkube at import time; ``daemon``, ``cli``
and ``simulate`` import them lazily, so the device-plugin backend never loads it
(docs/contributing/architecture.md, Dependencies). Objects are plain dicts: fields
lightkube's models predate pass through. lightkube's ``ApiError`` ends here, as
``ApiRequestError`` (its HTTP status in ``code``).

Lists and watches are plain requests on lightkube's HTTP client (it carries the
credentials): lightkube's ``watch`` reopens a watch that ends cleanly at once, in a loop
of its own, where ``listwatch.py`` backs off. A version the server cannot watch from is
``ExpiredError``. Every request but a watch has an overall deadline (``REQUEST_DEADLINE``,
then ``ApiTimeoutError``): the client's timeout is per read, which a server trickling
its answer never trips. Answers are bounded by ``answersize.py``, watch lines by
``watchlines.py``, a list at ``MAX_LIST_OBJECTS`` over its pages.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from genericdp.errors import GenericdpError
from genericdp.kube.answersize import LIST_PAGE, bound, one_budget
from genericdp.kube.listwatch import BrokenWatchError, ExpiredError, version_of
from genericdp.kube.watchlines import lines

__all__ = ["AsyncClient", "version_of"]  # re-exported for its users

GROUP, VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICE = create_global_resource(GROUP, VERSION, "ResourceSlice", "resourceslices")
DEVICE_CLASS = create_global_resource(GROUP, VERSION, "DeviceClass", "deviceclasses")
RESOURCE_CLAIM = create_namespaced_resource(GROUP, VERSION, "ResourceClaim", "resourceclaims")
SLICES = f"/apis/{GROUP}/{VERSION}/resourceslices"
CLASSES = f"/apis/{GROUP}/{VERSION}/deviceclasses"
FIELD_MANAGER = "genericdp"
REQUEST_TIMEOUT = 10.0  # seconds per read (and to connect); the publisher retries after it
# Seconds for a whole request but a watch (a list, a write, a get), however the
# server answers; a list of a node's slices or of its Node takes milliseconds.
REQUEST_DEADLINE = 30.0
# Objects in one list, over its pages: a node's slices are at most a few hundred
# (docs/config.md, Limits: 10,000 units in slices of 64, one pool per resource).
MAX_LIST_OBJECTS = 10_000


class ApiSetupError(GenericdpError):
    """No way to reach the API server: no service account and no usable kubeconfig."""


def connect(kubeconfig: Path | None = None) -> AsyncClient:
    """A client for the API server: ``kubeconfig`` if given (development, tests), else the
    pod's service account (as the DaemonSet)."""
    try:
        config = (
            KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
        )
    except (ConfigError, OSError, KeyError, ValueError) as err:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the pod's service account"
        detail = f"{err} is not set" if isinstance(err, KeyError) else str(err)
        raise ApiSetupError(f"cannot reach the API server through {where}: {detail}") from err
    client = AsyncClient(
        config, field_manager=FIELD_MANAGER, timeout=httpx2.Timeout(REQUEST_TIMEOUT)
    )
    http = http_of(client)
    http.headers["Accept-Encoding"] = "identity"  # an encoded answer is refused (answersize)
    http.event_hooks = {**http.event_hooks, "response": [*http.event_hooks["response"], bound]}
    return client


class ApiRequestError(GenericdpError):
    """The API server refused a request; ``code`` is its HTTP status (0: none sent)."""

    def __init__(self, what: str, code: int, reason: str, *, message: str = "") -> None:
        super().__init__(message or f"{what}: the API server answered {code}: {reason}")
        self.code = code
        self.reason = reason


class ApiTimeoutError(ApiRequestError):
    """A request the API server did not finish answering within its deadline (code 0)."""

    def __init__(self, what: str, seconds: float) -> None:
        reason = f"no whole answer within {seconds:g}s"
        message = f"{what}: the API server did not answer within {seconds:g}s"
        super().__init__(what, 0, reason, message=message)


def unanswered(what: str, err: httpx2.HTTPError) -> ApiRequestError:
    """``err`` (no answer, a broken one, one too large) as ours, code 0."""
    reason = str(err) or type(err).__name__
    return ApiRequestError(what, 0, reason, message=f"{what}: no whole answer: {reason}")


@asynccontextmanager
async def answered(what: str, deadline: float = REQUEST_DEADLINE) -> AsyncIterator[None]:
    """lightkube's and httpx's errors as ours, naming the request, which ends after
    ``deadline`` seconds (``ApiTimeoutError``)."""
    try:
        async with asyncio.timeout(deadline):
            yield
    except TimeoutError as err:
        raise ApiTimeoutError(what, deadline) from err
    except ApiError as err:
        code = getattr(err.status, "code", None)
        code = code if isinstance(code, int) else 0
        raise ApiRequestError(what, code, str(err.status.message)) from err
    except httpx2.HTTPError as err:
        raise unanswered(what, err) from err


async def get_claim(client: AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    """The ResourceClaim ``namespace/name``; raises ApiRequestError (404: not there)."""
    async with answered(f"ResourceClaim {namespace}/{name}"):
        return dict(await client.get(RESOURCE_CLAIM, name, namespace=namespace))


def http_of(client: AsyncClient) -> httpx2.AsyncClient:
    """lightkube's HTTP client: the server's address and credentials."""
    http: httpx2.AsyncClient = client._client._client  # noqa: SLF001 -- no public accessor
    return http


async def list_objects(
    http: httpx2.AsyncClient,
    path: str,
    params: Mapping[str, str],
    what: str,
    *,
    deadline: float = REQUEST_DEADLINE,
) -> tuple[list[dict[str, Any]], str]:
    """The objects at ``path`` (``params``: the selectors) and the list's resourceVersion,
    all pages within one answer's budget (``answersize.one_budget``) and ``deadline``."""
    objects: list[dict[str, Any]] = []
    with one_budget():
        version = await read_pages(http, path, params, what, objects.extend, deadline=deadline)
    return objects, version


async def read_pages(
    http: httpx2.AsyncClient,
    path: str,
    params: Mapping[str, str],
    what: str,
    on_page: Callable[[list[dict[str, Any]]], object],
    *,
    deadline: float = REQUEST_DEADLINE,
    max_objects: int = MAX_LIST_OBJECTS,
) -> str:
    """Call ``on_page`` with each page of the list at ``path`` (at most ``max_objects`` in
    all, within ``deadline``); the list's resourceVersion. Each page has its own budget."""
    what = f"listing {what}"
    query = {**params, "limit": str(LIST_PAGE)}
    version = ""
    count = 0
    async with answered(what, deadline):
        while True:
            body = _answer(await http.get(path, params=query, timeout=REQUEST_TIMEOUT), what)
            items = body.get("items")
            kept = [dict(item) for item in items if isinstance(item, dict)] if items else []
            count += len(kept)
            if count > max_objects:
                raise ApiRequestError(what, 200, f"more than {max_objects} objects")
            version = version or version_of(body)  # every page is of the first one's version
            on_page(kept)
            metadata = body.get("metadata")
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if not token or not isinstance(token, str):
                return version
            query["continue"] = token


async def list_version(
    http: httpx2.AsyncClient, path: str, params: Mapping[str, str], what: str
) -> str:
    """The resourceVersion of a list at ``path``, with one object at most read."""
    what = f"listing {what}"
    async with answered(what):
        response = await http.get(path, params={**params, "limit": "1"}, timeout=REQUEST_TIMEOUT)
        return version_of(_answer(response, what))


async def watch_events(
    http: httpx2.AsyncClient,
    path: str,
    params: Mapping[str, str],
    *,
    version: str,
    seconds: int,
    what: str,
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``(ADDED|MODIFIED|DELETED|BOOKMARK, object)`` of one watch request from ``version``,
    until the server ends it (after ``seconds``)."""
    what = f"watching {what}"
    query = {
        **params,
        "watch": "true",
        "resourceVersion": version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(seconds),
    }
    timeout = httpx2.Timeout(REQUEST_TIMEOUT, read=seconds + 30.0)
    # Raw bytes, cut into lines here: only then is a line's length ours to bound.
    headers = {"Accept-Encoding": "identity"}
    try:
        async with http.stream(
            "GET", path, params=query, headers=headers, timeout=timeout
        ) as response:
            if response.status_code != httpx2.codes.OK:
                await response.aread()
                _answer(response, what)
            encoding = response.headers.get("content-encoding", "identity")
            if encoding.lower() != "identity":
                raise BrokenWatchError(f"{what}: an answer encoded {encoding}, asked for none")
            async for line in lines(response.aiter_raw(), what=what):
                if line.strip():
                    yield _event(line, what)
    except httpx2.HTTPError as err:
        raise unanswered(what, err) from err


async def get_object(
    http: httpx2.AsyncClient, path: str, what: str, *, deadline: float = REQUEST_DEADLINE
) -> dict[str, Any]:
    """The object at ``path``, answered within ``deadline`` seconds."""
    async with answered(what, deadline):
        return _answer(await http.get(path, timeout=REQUEST_TIMEOUT), what)


def _answer(response: httpx2.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code != httpx2.codes.OK:
        status = body if isinstance(body, dict) else {}
        _raise(what, response.status_code, status, response.reason_phrase)
    if not isinstance(body, dict):
        raise ApiRequestError(what, response.status_code, "the answer is not a JSON object")
    return body


def _event(line: bytes, what: str) -> tuple[str, dict[str, Any]]:
    try:
        event = json.loads(line)
    except ValueError as err:
        raise ApiRequestError(what, 200, f"a watch event that is not JSON: {err}") from err
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise ApiRequestError(what, 200, "a watch event without type or object")
    if kind == "ERROR":
        code = obj.get("code")
        _raise(what, code if isinstance(code, int) else 0, obj, "an error event")
    return kind, obj


def _raise(what: str, code: int, status: Mapping[str, Any], default: str) -> None:
    """Raise what a failure Status says: ExpiredError when the version cannot be watched
    from."""
    message = str(status.get("message") or default)
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    reasons = {c.get("reason") for c in causes if isinstance(c, dict)} if causes else set()
    too_large = "ResourceVersionTooLarge" in reasons or "too large resource version" in (
        message.lower()
    )
    if code == httpx2.codes.GONE or (code == httpx2.codes.GATEWAY_TIMEOUT and too_large):
        raise ExpiredError(f"{what}: the API server answered {code}: {message}")
    raise ApiRequestError(what, code, message)
