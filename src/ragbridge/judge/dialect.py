"""Request dialects: how the gateway addresses and authorises a request at the real judge.

The libraries always speak plain OpenAI to ragbridge's gateway (``/v1/chat/completions`` with the
gateway's own key); what differs between judges is only how the gateway forwards a request, and
all of that is here. An :class:`Endpoint` is one upstream server as the configuration names it (its
base URL, dialect, key and extra headers); :meth:`Endpoint.target` is the URL of one request and
:meth:`Endpoint.headers` its headers.

* ``openai``: ``<base_url>/<endpoint>`` (a query string of ``base_url`` is kept at the end),
  ``Authorization: Bearer <key>``, no header at all without a key (a local server). OpenAI itself,
  vLLM, Ollama, llama.cpp's server, a LiteLLM proxy and the OpenAI-compatible endpoints of
  Anthropic (``https://api.anthropic.com/v1``) and Gemini
  (``https://generativelanguage.googleapis.com/v1beta/openai``) all speak it.
* ``azure``: Azure OpenAI. ``base_url`` is the resource endpoint (``https://NAME.openai.azure.com``);
  chat, completions and embeddings go to ``/openai/deployments/<deployment>/<endpoint>``, the
  deployment being the model the request names; the responses API and the model list to
  ``/openai/responses`` and ``/openai/models``; each with ``?api-version=<api_version>``; the key in
  the ``api-key`` header.

:func:`shape_body` sets the configuration's request fields (``temperature``, ``seed``,
``extra_body``) on a generation request, and sends a content of text parts alone as one string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from .config import JudgeConfig, header_values, is_local_url, redact_url

__all__ = ["Endpoint", "endpoints_of", "shape_body", "GENERATION_ENDPOINTS"]

#: the endpoints whose requests generate text (the request fields of the config apply to them)
GENERATION_ENDPOINTS = frozenset({"chat/completions", "completions", "responses"})
_DEPLOYMENT_ENDPOINTS = frozenset({"chat/completions", "completions", "embeddings"})


@dataclass(frozen=True)
class Endpoint:
    """One upstream server: where requests go, in which dialect, with which key and headers.

    ``key_env`` names the environment variable of the key (read by the gateway when it starts; None:
    this server gets no key);
    ``identity`` is what the cache files its answers under for this server (its URL without
    credentials, plus whatever the gateway changes in a request), so answers of another server,
    dialect or request settings are never replayed here."""

    base_url: str
    api: str = "openai"
    api_version: Optional[str] = None
    key_env: Optional[str] = "OPENAI_API_KEY"
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # secrets, most of them
    settings: str = ""  # the canonical JSON of JudgeConfig.answer_settings(), "" when none
    _parts: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        base = self.base_url.rstrip("/")
        if self.api == "azure" and base.endswith("/openai"):
            base = base[: -len("/openai")]
        object.__setattr__(self, "base_url", base)
        object.__setattr__(self, "_parts", urlsplit(base))

    @property
    def public_url(self) -> str:
        return redact_url(self.base_url)

    @property
    def identity(self) -> str:
        return self.public_url + (f"|{self.settings}" if self.settings else "")

    @property
    def is_local(self) -> bool:
        return is_local_url(self.base_url)

    def target(self, endpoint: str, model: Optional[str] = None, *, public: bool = False) -> str:
        """The URL of a request to ``endpoint`` (``chat/completions``, ``embeddings``, ``models``...)
        naming ``model``; ``public``: without credentials (for what is shown or logged).

        Raises ValueError when the dialect cannot address it (an Azure request that names no model)."""
        parts = urlsplit(self.public_url) if public else self._parts
        prefix = parts.path.rstrip("/")
        query = parts.query
        if self.api == "azure":
            if endpoint in _DEPLOYMENT_ENDPOINTS:
                if not model:
                    raise ValueError(f"an Azure OpenAI request to /{endpoint} must name its deployment "
                                     f"in \"model\"")
                path = f"{prefix}/openai/deployments/{quote(model, safe='')}/{endpoint}"
            else:
                path = f"{prefix}/openai/{endpoint}"
            query = "&".join(filter(None, [query, urlencode({"api-version": self.api_version or ""})]))
        else:
            path = f"{prefix}/{endpoint}"
        return urlunsplit((parts.scheme, parts.netloc, path, query, ""))

    def headers(self, key: Optional[str], method: str = "POST",
                extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """The headers of a request: the configured ones (``extra``: as `header_values` read them),
        the content type and the key as the dialect wants it (none without a key)."""
        out = {"Accept": "application/json",
               **(extra if extra is not None else header_values(self.extra_headers))}
        if method == "POST":
            out["Content-Type"] = "application/json"
        if key:
            if self.api == "azure":
                out["api-key"] = key
            else:
                out["Authorization"] = f"Bearer {key}"
        return out


def endpoints_of(config: JudgeConfig) -> tuple[Endpoint, Endpoint]:
    """(the judge's endpoint, the embeddings endpoint): the same one unless ``embedding_base_url``
    is set."""
    settings = config.answer_settings()
    headers = tuple(sorted(config.headers.items()))
    chat = Endpoint(config.base_url, config.api, config.api_version, config.api_key_env, headers,
                    json.dumps(settings, sort_keys=True, separators=(",", ":")) if settings else "")
    if not config.embedding_base_url:
        return chat, chat
    api = config.embedding_api or config.api
    embed_settings = {"api": api, "api_version": config.api_version} if api != "openai" else {}
    embeddings = Endpoint(config.embedding_base_url, api, config.api_version, config.embedding_api_key_env,
                          headers,
                          json.dumps(embed_settings, sort_keys=True) if embed_settings else "")
    return chat, embeddings


def shape_body(config: JudgeConfig, endpoint: str, body: Any) -> Any:
    """``body`` with the configuration's request fields set (a new dict), or ``body`` itself when
    none applies: ``temperature`` and ``extra_body`` on every generation request, ``seed`` on chat
    and completions (the responses API has none). A chat message whose content is a list of text
    parts alone is sent as one string (the same text: a server that fills a chat template from the
    content, as llama-cpp-python does, answers such a list with HTTP 500)."""
    if endpoint not in GENERATION_ENDPOINTS or not isinstance(body, dict):
        return body
    changes: dict[str, Any] = {}
    messages = body.get("messages") if endpoint == "chat/completions" else None
    if isinstance(messages, list) and any(_text_parts(m) is not None for m in messages):
        changes["messages"] = [{**m, "content": _text_parts(m)} if _text_parts(m) is not None else m
                               for m in messages]
    if config.temperature is not None:
        changes["temperature"] = config.temperature
    if config.seed is not None and endpoint != "responses":
        changes["seed"] = config.seed
    changes.update(config.extra_body)
    if not changes:
        return body
    return {**body, **changes}


def _text_parts(message: Any) -> Optional[str]:
    """The text of a message whose content is a list of text parts alone, or None."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or not content or not all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return None
    return "\n".join(p["text"] for p in content)
