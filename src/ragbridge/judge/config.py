"""The judge's configuration: :class:`JudgeConfig`, where it is read from, and the judge's errors.

One judge serves every backend: a model, an endpoint (``base_url``) that speaks a request dialect
(``api``: ``openai`` for every OpenAI-compatible server, ``azure`` for Azure OpenAI's deployment
paths, see :mod:`ragbridge.judge.dialect`), optionally a separate endpoint for embeddings, and the
NAME of the environment variable that holds the key (``api_key_env``); the key's value is read from
the environment when it is needed and is never stored on the configuration, nor written by
:meth:`JudgeConfig.public_dict` (what a run's ``run.json`` records). A judge on this machine
(loopback) needs no key. :meth:`JudgeConfig.load`
merges ``[tool.ragbridge.judge]`` of ``pyproject.toml``, ``[judge]`` of ``ragbridge.toml`` and the
command line; a bad value is a :class:`JudgeConfigError` that names the file and the key.

:func:`redact_url` strips credentials from a URL, for anything that is shown or written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Literal, Optional
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import UserError
from ..limits import MAX_CONCURRENCY, MAX_RETRIES, MAX_TIMEOUT, REQUESTS_PER_MINUTE
from .structured import StructuredMode

#: the gateway's backoff between attempts (full jitter, seconds): what client_timeout() outlasts
BACKOFF_BASE = 0.5
BACKOFF_CAP = 20.0
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
#: the request dialects an upstream can speak (how a request is addressed and authorised)
APIS = ("openai", "azure")
#: the headers that carry the judge's key in a dialect: the key belongs in the variable ``api_key_env``
#: names
_KEY_HEADERS = ("authorization", "api-key")
#: header names that look like they carry a credential: never public
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|passw|cookie|session|signature|credential", re.I)
#: a reference to an environment variable in a header's value: ``${NAME}``
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: what run.json and every output show for a header's secret value
SECRET = "[secret]"


class JudgeError(UserError):
    """Base class of judge errors."""


class JudgeConfigError(JudgeError, ValueError):
    """The judge configuration is invalid or incomplete (names the file and the key)."""


class JudgeUnavailable(JudgeError):
    """The judge endpoint cannot be used (unreachable, key rejected, nothing recorded to replay)."""


# ------------------------------------------------------------------------------------------------
# Secrets hygiene
# ------------------------------------------------------------------------------------------------

_KEYLIKE = re.compile(r"(key|token|secret|passw|pwd|auth|sig|credential|session|code)", re.I)


def is_local_url(url: str) -> bool:
    """Whether ``url``'s host is this machine (loopback): a server there may need no key."""
    host = (urlsplit(url).hostname or "").lower()
    return host in _LOCAL_HOSTS or host.startswith("127.")


def redact_url(url: str) -> str:
    """``url`` without userinfo (``user:password@``) and without key-like query parameters."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if not _KEYLIKE.search(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def identity_url(url: str, stub: Optional[str] = None) -> str:
    """``url`` as it is part of the judge's identity: what decides the judge's scores, and so whether
    a run folder's scores and a new session's come from one judge, and the score cache's keys. That
    is the server, without credentials: two servers on two ports of one machine are two judges.
    ragbridge's stub judge on this machine is the exception: started again it gets another port and
    answers exactly the same, so its identity is its ``stub`` settings (what its list of models says
    changes its answers, ``X-Ragbridge-Stub-Settings``) and the path, not the port. (The judge's
    response cache stays keyed by the URL a request went to, so that a recording replays where no
    server answers, as in CI; a stub started again answers a miss the same.)"""
    public = redact_url(url)
    if stub is None or not is_local_url(url):
        return public
    parts = urlsplit(public)
    return urlunsplit((parts.scheme, f"ragbridge-stub[{stub}]", parts.path, parts.query, ""))


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


class ModelPrice(BaseModel):
    """What one model costs: ``input`` and ``output`` in the config's currency per million tokens."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


def _default_cache_path() -> Path:
    return Path.cwd() / ".ragbridge" / "judge-cache.sqlite"


class JudgeConfig(BaseModel):
    """One judge for every backend: model, endpoint and dialect, and the name of the key's env var.

    ``api`` is the dialect the upstream speaks: ``openai`` (``base_url`` + ``/chat/completions``,
    ``Authorization: Bearer``: OpenAI, vLLM, Ollama, llama.cpp's server, a LiteLLM proxy, the
    OpenAI-compatible endpoints of Anthropic and Gemini) or ``azure`` (``base_url`` is the resource
    endpoint; a request goes to ``/openai/deployments/<model>/...?api-version=<api_version>`` with an
    ``api-key`` header, the deployment being the model the request names). The libraries always
    speak plain OpenAI to ragbridge's gateway; only the gateway speaks the dialect.

    ``embedding_base_url`` (with ``embedding_api_key_env`` and ``embedding_api``, default ``api``)
    sends ``/embeddings`` requests to another server than the chat requests, e.g. a judge without
    embeddings (Anthropic) beside an embedding server; that server gets the key
    ``embedding_api_key_env`` names, never the judge's (none when it is unset).

    ``headers`` are sent with every upstream request (``Helicone-Auth``, ``cf-aig-authorization``,
    ``anthropic-workspace-id``...). Every header's value is a secret, as the key is (never written,
    printed or sent to a worker, and redacted from every answer), unless its name is listed in
    ``public_headers`` (then run.json records it; a name that looks like it carries a credential
    cannot be listed). A value may name environment variables, ``"Bearer ${HELICONE_API_KEY}"``, read
    when the gateway opens (:func:`header_values`), so the secret need not sit in a file. The key's
    own header (``Authorization``, ``api-key``) is the dialect's: the key goes in ``api_key_env``.
    ``temperature``, ``seed`` and ``extra_body`` are request fields the gateway sets on every
    generation request (chat, completions, responses; not embeddings; ``seed`` not on responses),
    over what the library sent: ``extra_body`` is merged into the JSON body (e.g. Ollama's
    ``{"options": {"num_ctx": 8192}}``). They are part of the cache key.

    ``structured_output`` is how a request that asks for a JSON object is sent (``auto``, ``schema``,
    ``json_object``, ``tool`` or ``prompt``: `ragbridge.judge.structured`), for every backend but one
    whose option ``structured_output`` sets its own (`ragbridge.judged_backend.JudgedOptions`).

    ``max_tokens`` is for the backends to pass to their libraries (a library's own default of 1024 can
    truncate long verdict lists). ``cache_path = None`` means no cache.

    ``prices`` is the price table, per model name as requests name it (the judge model, the embedding
    model): ``{"gpt-4o-mini": {"input": 0.15, "output": 0.60}}`` in ``currency`` per million tokens,
    set by the user (``[judge.prices."gpt-4o-mini"]`` in ragbridge.toml); nothing is looked up on
    the network. A call to a model without a price costs None (unknown), never 0.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    model: str = Field(min_length=1)
    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    api: Literal["openai", "azure"] = "openai"
    api_version: Optional[str] = None
    embedding_model: Optional[str] = None
    embedding_base_url: Optional[str] = None
    embedding_api_key_env: Optional[str] = None
    embedding_api: Optional[Literal["openai", "azure"]] = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # secrets: see public_dict
    public_headers: list[str] = Field(default_factory=list)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    seed: Optional[int] = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    cache_path: Optional[Path] = Field(default_factory=_default_cache_path)
    cache_mode: Literal["read-write", "read-only", "off"] = "read-write"
    max_concurrency: int = Field(8, ge=1, le=MAX_CONCURRENCY)
    #: upstream requests started per minute, across every backend and worker (None: no limit); for
    #: hosted judges with a rate limit: starts are spaced 60 / requests_per_minute seconds apart
    requests_per_minute: Optional[float] = Field(None, ge=REQUESTS_PER_MINUTE[0], le=REQUESTS_PER_MINUTE[1],
                                                 allow_inf_nan=False)
    #: seconds one attempt may take in all (connect, send, the whole answer), however the answer
    #: trickles in
    timeout: float = Field(120.0, gt=0, le=MAX_TIMEOUT, allow_inf_nan=False)
    #: the largest answer taken from the judge; a larger one is an error of that call (not retried)
    max_reply_bytes: int = Field(32 << 20, ge=1024)
    max_retries: int = Field(5, ge=0, le=MAX_RETRIES)
    max_tokens: Optional[int] = Field(None, ge=1)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    currency: str = "USD"
    #: how a request that asks for a JSON object is sent (`ragbridge.judge.structured`), for every
    #: backend whose own option ``structured_output`` is unset
    structured_output: StructuredMode = "auto"

    @field_validator("base_url", "embedding_base_url")
    @classmethod
    def _check_base_url(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return None
        v = (v or "").strip()
        try:
            parts = urlsplit(v)
            host = parts.hostname
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            host, parts = None, None
        if parts is None or parts.scheme not in ("http", "https") or not host:
            raise ValueError(
                f"judge base_url must be an http:// or https:// URL with a host "
                f"(e.g. https://api.openai.com/v1), got {redact_url(v)!r}")
        return v.rstrip("/")

    @field_validator("structured_output", mode="before")
    @classmethod
    def _one_mode(cls, v: Any) -> Any:
        if isinstance(v, dict):  # a mode per backend is each backend's own option
            name, mode = next(iter(v.items()), ("NAME", "tool"))
            raise ValueError(f"the judge takes one mode for every backend; a backend's own is its option "
                             f"structured_output: [backends.{name}] structured_output = \"{mode}\" in "
                             f"ragbridge.toml, or --option {name}.structured_output={mode}")
        return v

    @field_validator("api_key_env", "embedding_api_key_env")
    @classmethod
    def _check_env_name(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return None
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v or ""):
            raise ValueError(
                f"must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                f"not a key; got a value of {len(v or '')} characters")
        return v

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if name.lower() in _KEY_HEADERS:
                raise ValueError(
                    f"header {name!r} is where the key goes: put the key in the environment variable "
                    f"that api_key_env names instead")
            if not isinstance(value, str) or "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r}: the value must be one line of text")
        return v

    @model_validator(mode="after")
    def _check_public_headers(self) -> "JudgeConfig":
        given = {name.lower() for name in self.headers}
        for name in self.public_headers:
            if name.lower() not in given:
                raise ValueError(f"public_headers names {name!r}, which is not in headers")
            if _CREDENTIAL_HEADER.search(name):
                raise ValueError(f"header {name!r} looks like it carries a credential: it cannot be public "
                                 f"(leave it out of public_headers, and its value stays secret)")
        return self

    @model_validator(mode="after")
    def _check_dialect(self) -> "JudgeConfig":
        if "azure" in (self.api, self.embedding_api) and not self.api_version:
            raise ValueError("api = \"azure\" needs api_version (e.g. \"2024-10-21\"): Azure OpenAI "
                             "answers 404 without it")
        return self

    # -- derived --------------------------------------------------------------------------------
    @property
    def upstream_host(self) -> str:
        return (urlsplit(self.base_url).hostname or "").lower()

    @property
    def is_local(self) -> bool:
        """The endpoint is on this machine (a local server or ragbridge's stub): a key may be absent."""
        return is_local_url(self.base_url)

    @property
    def public_base_url(self) -> str:
        return redact_url(self.base_url)

    def api_key(self) -> Optional[str]:
        """The key's value from the environment (never stored on this object)."""
        return os.environ.get(self.api_key_env) or None

    def answer_settings(self) -> dict[str, Any]:
        """What the gateway changes in a request on its way upstream, which changes the answers:
        part of every cache key (empty when nothing is changed, so earlier keys stay valid)."""
        doc: dict[str, Any] = {}
        if self.api != "openai":
            doc.update(api=self.api, api_version=self.api_version)
        for name in ("temperature", "seed"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        if self.extra_body:
            doc["extra_body"] = self.extra_body
        return doc

    def price_of(self, model: Optional[str]) -> Optional[ModelPrice]:
        """The price of ``model`` (as a request names it; a ``provider/`` prefix may be left out of
        the table), or None when the table has none."""
        if not model:
            return None
        found = self.prices.get(model)
        if found is None and "/" in model:
            found = self.prices.get(model.rsplit("/", 1)[-1])
        return found

    def is_public_header(self, name: str) -> bool:
        return name.lower() in {n.lower() for n in self.public_headers}

    def public_header_values(self) -> dict[str, str]:
        """``headers`` as they may be shown: every value not named public replaced by ``[secret]``."""
        return {name: value if self.is_public_header(name) else SECRET
                for name, value in self.headers.items()}

    def client_timeout(self) -> float:
        """A library-side timeout that outlasts the gateway's own retries."""
        return self.timeout * (self.max_retries + 1) + BACKOFF_CAP * self.max_retries + 5.0

    def public_dict(self) -> dict[str, Any]:
        """The configuration for run.json: no secrets (credentials stripped from the URL)."""
        return {
            "model": self.model,
            "base_url": self.public_base_url,
            "api_key_env": self.api_key_env,
            "embedding_model": self.embedding_model,
            "cache_path": str(self.cache_path) if self.cache_path else None,
            "cache_mode": self.cache_mode,
            "max_concurrency": self.max_concurrency,
            "requests_per_minute": self.requests_per_minute,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            **({"max_reply_bytes": self.max_reply_bytes} if self.max_reply_bytes != 32 << 20 else {}),
            "max_tokens": self.max_tokens,
            **({"prices": {m: p.model_dump() for m, p in self.prices.items()}, "currency": self.currency}
               if self.prices else {}),
            **{k: v for k, v in (
                ("api", self.api if self.api != "openai" else None), ("api_version", self.api_version),
                ("embedding_base_url", redact_url(self.embedding_base_url) if self.embedding_base_url
                 else None),
                ("embedding_api_key_env", self.embedding_api_key_env), ("embedding_api", self.embedding_api),
                ("headers", self.public_header_values() or None),
                ("public_headers", list(self.public_headers) or None), ("temperature", self.temperature),
                ("seed", self.seed), ("extra_body", self.extra_body or None),
                ("structured_output", self.structured_output if self.structured_output != "auto" else None))
               if v is not None},
        }

    # -- loading --------------------------------------------------------------------------------
    @classmethod
    def load(cls, cli_overrides: Optional[dict[str, Any]] = None, config_file: Optional[Path] = None,
             cwd: Optional[Path] = None) -> "JudgeConfig":
        """Merge, lowest first: ``[tool.ragbridge.judge]`` in ``cwd/pyproject.toml``, ``[judge]`` in
        ``cwd/ragbridge.toml`` (or ``config_file``), then the CLI values that are not None.
        Relative ``cache_path`` values are relative to the file that sets them (CLI: to ``cwd``)."""
        cwd = Path(cwd) if cwd is not None else Path.cwd()
        known = set(cls.model_fields)
        merged: dict[str, Any] = {}
        source_of: dict[str, str] = {}

        def take(values: dict[str, Any], source: str, base: Path, where: str) -> None:
            for key, value in values.items():
                if key not in known:
                    raise JudgeConfigError(
                        f"{source}: unknown key {key!r} in {where}; known keys: {', '.join(sorted(known))}")
                if key == "cache_path" and isinstance(value, (str, Path)) and value != "":
                    p = Path(value).expanduser()
                    value = p if p.is_absolute() else base / p
                merged[key] = value
                source_of[key] = source

        from ..config_files import config_sections

        for path, where, table in config_sections("judge", config_file, cwd, JudgeConfigError):
            if not isinstance(table, dict):
                raise JudgeConfigError(f"{path}: {where} must be a table")
            take(table, str(path), path.parent, where)

        cli = {k: v for k, v in (cli_overrides or {}).items() if v is not None}
        take(cli, "command line", cwd, "the judge options")

        if "cache_path" not in merged:
            merged["cache_path"] = cwd / ".ragbridge" / "judge-cache.sqlite"
        for required in ("model", "base_url"):
            if required not in merged:
                raise JudgeConfigError(
                    f"judge {required} is not set: set `{required}` in [judge] of "
                    f"{Path(config_file).name if config_file is not None else 'ragbridge.toml'}, in "
                    f"[tool.ragbridge.judge] of pyproject.toml, or pass --judge-{required.replace('_', '-')}")
        try:
            return cls(**merged)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0]) if err.get("loc") else "api"
            msg = str(err.get("msg", "invalid value"))
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            raise JudgeConfigError(f"{source_of.get(key, 'defaults')}: judge {key}: {msg}") from None


def header_values(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers with their ``${NAME}`` references replaced by those environment variables'
    values; JudgeConfigError naming the header and the variable when one is not set."""
    out = {}
    for name, value in headers:
        def read(match: "re.Match[str]") -> str:
            found = os.environ.get(match.group(1))
            if not found:
                raise JudgeConfigError(
                    f"judge header {name!r} takes its value from the environment variable "
                    f"{match.group(1)}, which is not set: set it (export {match.group(1)}=...) or "
                    f"change headers in the judge config")
            return found

        out[name] = _ENV_REFERENCE.sub(read, value)
    return out

