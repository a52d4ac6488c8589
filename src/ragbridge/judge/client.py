"""The judge as a backend sees it: :class:`JudgeClient`, the one interface that the run's
:class:`~ragbridge.judge.JudgeGateway` and a Ray worker's
:class:`~ragbridge.judge.remote.GatewayClient` both implement.

A backend gets a ``JudgeClient`` as ``ctx.judge`` and uses

* ``config`` (the judge configuration, without secrets for a remote client) and ``api_key`` (the
  gateway's own per-run key: never the judge's real key);
* ``transport()`` / ``async_transport()`` for its library's ``httpx`` client, with
  ``base_url(backend, metric, case_id, in_process=True)``; or ``base_url(...)`` alone for a library
  that only takes a URL (the gateway's loopback socket);
* ``tag_scope(backend, metric, case_id)`` around each case, so every call made in that context is
  counted under it, and ``httpx_event_hooks()`` for a client that reaches the socket;
* ``stub_detected``.

The repeat a call belongs to is not the backend's business: the runner hands each job the client of
its repeat (:meth:`JudgeClient.for_repeat`), whose ``base_url`` and ``tag_scope`` file the calls
under it. The tag map (which path token stands for which tag) is written here, once.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any, Optional

from .config import JudgeConfig
from .tag import TAG_HEADER, CallTag, current_tag, scoped

__all__ = ["JudgeClient", "RepeatClient", "IN_PROCESS_ORIGIN"]

IN_PROCESS_ORIGIN = "http://ragbridge-gateway.invalid"  # the host of in-process URLs: no socket serves it


class JudgeClient:
    """The interface a backend uses (see the module docstring); subclasses give ``config``,
    ``api_key``, ``url`` (the socket's root), ``transport()``, ``async_transport()`` and
    ``require_started()``."""

    config: JudgeConfig
    #: True once an answer came from ragbridge's stub judge (run outputs are then labelled)
    stub_detected: bool = False
    #: the repeat this client files calls under (see `for_repeat`)
    repeat: int = 0

    def __init__(self) -> None:
        self._tag_lock = threading.Lock()
        self._tags: dict[str, CallTag] = {}
        self._token_of: dict[CallTag, str] = {}

    # -- what subclasses provide ------------------------------------------------------------------
    @property
    def api_key(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def url(self) -> str:  # pragma: no cover - abstract
        """The root URL of the gateway's socket (``http://127.0.0.1:PORT``)."""
        raise NotImplementedError

    def transport(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def async_transport(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def require_started(self) -> None:
        """Raise ``JudgeError`` when the client cannot serve (a gateway not started)."""

    # -- tags -------------------------------------------------------------------------------------
    def for_repeat(self, repeat: int) -> "JudgeClient":
        """This client, filing its calls under ``repeat`` (itself for repeat 0)."""
        return self if not repeat else RepeatClient(self, repeat)

    def base_url(self, backend: Optional[str] = None, metric: Optional[str] = None,
                 case_id: Optional[str] = None, *, in_process: bool = False,
                 repeat: Optional[int] = None) -> str:
        """An OpenAI base URL (``.../v1``) whose calls are counted under (backend, metric, case_id,
        repeat); without a backend, an untagged one (attribution then comes from ``tag_scope`` or
        the tag header). The loopback socket's (which opens it), or with ``in_process=True`` one for
        a library client on :meth:`transport` / :meth:`async_transport` (no socket)."""
        root = IN_PROCESS_ORIGIN if in_process else self.url
        if backend is None:
            return f"{root}/v1"
        tag = CallTag(backend, metric, case_id, self.repeat if repeat is None else repeat)
        return f"{root}/t/{self.token(tag)}/v1"

    def token(self, tag: CallTag) -> str:
        """The path token that stands for ``tag`` (made once per tag)."""
        with self._tag_lock:
            token = self._token_of.get(tag)
            if token is None:
                token = secrets.token_urlsafe(9)
                self._token_of[tag] = token
                self._tags[token] = tag
            return token

    def tag_of(self, token: str) -> Optional[CallTag]:
        """The tag a path token stands for, or None."""
        return self._tags.get(token)

    def tag_scope(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None, *,
                  repeat: Optional[int] = None) -> scoped:
        """Count requests made in this context (thread / asyncio task) under (backend, metric,
        case_id) and this client's repeat. The in-process transports read it; for the socket,
        :meth:`httpx_event_hooks` carry it in the ``X-Ragbridge-Tag`` header."""
        return scoped(CallTag(backend, metric, case_id, self.repeat if repeat is None else repeat))

    @staticmethod
    def current_tag() -> Optional[CallTag]:
        """The tag of the innermost ``tag_scope`` of this context, or None."""
        return current_tag()

    @staticmethod
    def httpx_event_hooks() -> dict[str, list]:
        """``httpx.Client(event_hooks=...)``: adds the X-Ragbridge-Tag header from ``tag_scope``."""

        def add_tag(request: Any) -> None:
            tag = current_tag()
            if tag is not None:
                request.headers[TAG_HEADER] = tag.header()

        return {"request": [add_tag]}

    @staticmethod
    def async_httpx_event_hooks() -> dict[str, list]:
        """``httpx.AsyncClient(event_hooks=...)``: as :meth:`httpx_event_hooks`, for async clients."""

        async def add_tag(request: Any) -> None:
            tag = current_tag()
            if tag is not None:
                request.headers[TAG_HEADER] = tag.header()

        return {"request": [add_tag]}


class RepeatClient(JudgeClient):
    """A client's view that files every call under ``repeat``: the same gateway, tag map, transports
    and key; only the tags its ``base_url`` and ``tag_scope`` make differ."""

    def __init__(self, client: JudgeClient, repeat: int) -> None:  # noqa: D107 - no tag map of its own
        self._client = client
        self.repeat = int(repeat)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def api_key(self) -> str:
        return self._client.api_key

    @property
    def url(self) -> str:
        return self._client.url

    @property
    def stub_detected(self) -> bool:  # type: ignore[override]
        return self._client.stub_detected

    def transport(self) -> Any:
        return self._client.transport()

    def async_transport(self) -> Any:
        return self._client.async_transport()

    def require_started(self) -> None:
        self._client.require_started()

    def for_repeat(self, repeat: int) -> JudgeClient:
        return self._client.for_repeat(repeat)

    def token(self, tag: CallTag) -> str:
        return self._client.token(tag)

    def tag_of(self, token: str) -> Optional[CallTag]:
        return self._client.tag_of(token)
