"""The clients a backend's library talks to the judge through, made in one place with one timeout
policy.

Every client here is on the judge's in-process transport (``judge.transport()`` /
``judge.async_transport()``: the run's :class:`~ragbridge.judge.JudgeGateway`, or a Ray worker's
``GatewayClient``), never reads proxy settings from the environment, and waits `timeout` for an
answer: ``JudgeConfig.client_timeout()``, which outlasts the gateway's own retries, so a library
never gives up on a call the gateway is still retrying (the connect phase, which only a worker's
socket has, is bounded by `CONNECT_TIMEOUT`). The OpenAI SDK's clients also get the gateway's own
key (never the judge's real key), the untagged in-process base URL and ``max_retries=0`` (the
gateway retries 429, 5xx and timeouts itself). Calls are counted under the ``tag_scope`` they are
made in (`ragbridge.judged_backend.JudgedBackend` opens one around each case).

The caller closes what it gets (``close()`` / ``await aclose()``; an OpenAI client's ``close``
closes its httpx client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # pragma: no cover
    from .client import JudgeClient
    from .config import JudgeConfig

__all__ = ["CONNECT_TIMEOUT", "timeout", "http_client", "async_http_client", "openai_client",
           "async_openai_client"]

#: the longest wait for a connection (only a Ray worker's client opens one: to the gateway's socket)
CONNECT_TIMEOUT = 10.0


def timeout(config: "JudgeConfig") -> httpx.Timeout:
    """The one timeout of every judge client: ``config.client_timeout()`` for an answer, at most
    `CONNECT_TIMEOUT` to connect."""
    seconds = config.client_timeout()
    return httpx.Timeout(seconds, connect=min(seconds, CONNECT_TIMEOUT))


def http_client(judge: "JudgeClient", **kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` on ``judge``'s in-process transport (``kwargs``: more of httpx's
    arguments, such as ``base_url`` and ``headers``)."""
    return httpx.Client(transport=judge.transport(), timeout=timeout(judge.config), trust_env=False, **kwargs)


def async_http_client(judge: "JudgeClient", **kwargs: Any) -> httpx.AsyncClient:
    """`http_client` for asyncio: an ``httpx.AsyncClient`` on ``judge.async_transport()``."""
    return httpx.AsyncClient(transport=judge.async_transport(), timeout=timeout(judge.config),
                             trust_env=False, **kwargs)


def openai_client(judge: "JudgeClient") -> Any:
    """The OpenAI SDK's ``OpenAI`` client on `http_client` (the ``openai`` package must be installed:
    every library backend that wants it depends on it)."""
    from openai import OpenAI

    return OpenAI(base_url=judge.base_url(in_process=True), api_key=judge.api_key, max_retries=0,
                  timeout=timeout(judge.config), http_client=http_client(judge))


def async_openai_client(judge: "JudgeClient") -> Any:
    """`openai_client` for asyncio: ``AsyncOpenAI`` on `async_http_client`."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=judge.base_url(in_process=True), api_key=judge.api_key, max_retries=0,
                       timeout=timeout(judge.config), http_client=async_http_client(judge))
