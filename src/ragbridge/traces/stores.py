"""Trace stores: a tracing server that spans are pulled from and span evaluations pushed to.

A plugin registers a `TraceStore` (``ragbridge_register_trace_stores``) under a URL scheme:
``ragbridge sample --from SCHEME://HOST[:PORT]/PROJECT`` pulls spans from it, ``ragbridge
export-scores RUN --to SCHEME://HOST[:PORT]/PROJECT`` pushes the run's span evaluations to it.

The address (`StoreAddress`): the scheme names the store; the server is reached over HTTPS, or plain
HTTP on the loopback interface (``127.0.0.1``, ``::1``, ``localhost``); ``SCHEME+http://`` and
``SCHEME+https://`` say which. Plain HTTP to another host would carry the key and the spans in the
clear: it is refused unless the environment says so (`PLAIN_HTTP`: ``RAGBRIDGE_ALLOW_PLAIN_HTTP=1``,
for a server on a private network). The path is the project (the store's default when empty). An address
never holds a key (``user:password@`` is refused): the store reads its key from the environment,
names the variables in its description, and sends it only to the server it was given. Nothing
ragbridge writes holds the key or the address's credentials.

Pulling is page by page, and memory holds one page: a store's ``pull(address, query)`` yields
`Span` objects. ``query`` (`Query`) carries the time window (spans that start in it; both bounds
fixed before the first page, so that two passes read the same traces), the trace ids when only
those are wanted (the second pass of a sample), whether only the root spans are (``roots``: the
earlier turns of sessions), and whether the spans' inputs, outputs and documents are needed
(``full``; a store may leave them out of a pass that only draws trace ids).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlsplit

from ..formats.files import DatasetError
from .spans import Span

__all__ = ["TraceStore", "StoreAddress", "Query", "parse_address", "is_address", "store_for", "key_from",
           "PLAIN_HTTP"]

#: the environment variable that allows plain HTTP to a host other than this machine
PLAIN_HTTP = "RAGBRIDGE_ALLOW_PLAIN_HTTP"


@dataclass(frozen=True)
class StoreAddress:
    """Where a store is: ``scheme`` (the store's name), ``base_url`` (``http(s)://host[:port]``),
    ``project`` (None: the store's default), and the address as the user wrote it (``text``)."""

    scheme: str
    base_url: str
    project: Optional[str]
    text: str


@dataclass(frozen=True)
class Query:
    """What to pull: spans starting in ``[since, until)`` (Unix nanoseconds; None: unbounded),
    only of ``trace_ids`` when given, only the root spans when ``roots``, with their inputs, outputs
    and documents when ``full``."""

    since: Optional[int] = None
    until: Optional[int] = None
    trace_ids: Optional[frozenset[str]] = None
    full: bool = True
    roots: bool = False


@dataclass
class TraceStore:
    """A tracing server, as a plugin registers it: ``pull(address, query)`` streams spans,
    ``push(address, rows)`` sends span evaluations (`ragbridge.traces.evaluations.evaluation_rows`;
    those with a score, and the document evaluations when ``documents``) and returns warning lines;
    ``keys`` names the environment variables the key is read from."""

    name: str
    description: str
    pull: Optional[Callable[[StoreAddress, Query], Iterator[Span]]] = None
    push: Optional[Callable[[StoreAddress, list[dict[str, Any]]], list[str]]] = None
    keys: tuple[str, ...] = field(default_factory=tuple)
    documents: bool = True


def is_address(text: Any) -> bool:
    """Whether ``text`` is written as a store's address (``scheme://...``), not a path."""
    return isinstance(text, str) and "://" in text and text.split("://", 1)[0].replace("+", "").isalpha()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_address(text: str) -> StoreAddress:
    """A store's address (see the module docstring); raises `DatasetError` saying what is wrong."""
    parts = urlsplit(text)
    scheme, _, transport = parts.scheme.partition("+")
    if not scheme or not parts.hostname:
        raise DatasetError(f"{text!r} is not a store's address", hint="write SCHEME://HOST[:PORT]/PROJECT")
    if parts.username is not None or parts.password is not None:
        raise DatasetError("the address holds a user or key; keys come from the environment only",
                           hint="remove 'user:key@' and set the store's key variable")
    if parts.query or parts.fragment:
        raise DatasetError(f"the address {parts.scheme}://{parts.hostname}... takes no '?' or '#' part",
                           hint="give the time window and filters as options")
    if transport not in ("", "http", "https"):
        raise DatasetError(f"unknown transport {transport!r} in {parts.scheme!r}",
                           hint=f"write {scheme}://, {scheme}+http:// or {scheme}+https://")
    try:
        port = parts.port
    except ValueError:
        raise DatasetError(f"the port of {text!r} is not a number from 0 to 65535") from None
    host = parts.hostname
    if transport == "http" and not _loopback(host) and os.environ.get(PLAIN_HTTP) != "1":
        raise DatasetError(f"{text}: plain HTTP to {host}, which is not this machine, would send the key and "
                           "the spans unencrypted", hint=f"use {scheme}:// (HTTPS), or set {PLAIN_HTTP}=1 "
                           "to send them in the clear anyway")
    transport = transport or ("http" if _loopback(host) else "https")
    netloc = f"[{host}]" if ":" in host else host
    base = f"{transport}://{netloc}" + (f":{port}" if port is not None else "")
    project = parts.path.strip("/") or None
    return StoreAddress(scheme=scheme, base_url=base, project=project, text=text)


def store_for(address: StoreAddress, stores: dict[str, TraceStore], what: str) -> TraceStore:
    """The store an address names, able to ``what`` (``pull`` or ``push``)."""
    store = stores.get(address.scheme)
    if store is None or getattr(store, what) is None:
        able = sorted(n for n, s in stores.items() if getattr(s, what) is not None)
        raise DatasetError(f"no trace store {address.scheme!r} to {what} "
                           + ("spans from" if what == "pull" else "evaluations to"),
                           hint="known: " + (", ".join(f"{n}://" for n in able) or "none (install a plugin)"))
    return store


def key_from(names: tuple[str, ...]) -> Optional[str]:
    """The first of the environment variables ``names`` that is set (the key, never written)."""
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def http_client(address: StoreAddress, headers: Optional[dict[str, str]] = None, auth: Any = None):
    """An HTTP client for the store's server (60 s a request)."""
    import httpx

    return httpx.Client(base_url=address.base_url, headers=headers or {}, auth=auth, timeout=60.0)


def request(client: Any, address: StoreAddress, method: str, path: str, keys: tuple[str, ...],
            secret: Optional[str] = None, **kwargs: Any) -> Any:
    """One request to the store's server, its JSON answer; raises `DatasetError` saying what went
    wrong (unreachable, the key refused, not found, another error with the server's words, where
    ``secret`` is never shown)."""
    import httpx

    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise DatasetError(f"{address.text}: cannot reach {address.base_url} ({type(exc).__name__})",
                           hint="is the server running, and is the address right?") from None
    if response.status_code in (401, 403):
        given = [k for k in keys if os.environ.get(k)]
        raise DatasetError(f"{address.text}: the server refused the request ({response.status_code})",
                           hint=(f"check the key in {', '.join(given)}" if given else
                                 f"set the key in {' and '.join(keys)}") if keys else None)
    if response.status_code >= 400:
        text = " ".join(response.text.split())[:300]
        if secret:
            text = text.replace(secret, "***")
        raise DatasetError(f"{address.text}: {method} {path} answered {response.status_code}: {text}",
                           hint="check the project and the address" if response.status_code == 404 else None)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise DatasetError(f"{address.text}: {method} {path} answered something that is not JSON",
                           hint="is this the store's address?") from None
