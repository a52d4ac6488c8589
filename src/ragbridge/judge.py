"""The judge: one configuration, and one gateway that every backend's library talks to.

Each backend points its library (or its own client) at a :class:`JudgeGateway` with the
gateway's own key :attr:`JudgeGateway.api_key`. Two ways in, one behaviour:

* **in-process transport** (what ragbridge's own backends use): the library's ``httpx`` client gets
  ``transport=gw.transport()`` (or ``gw.async_transport()``) and the base URL
  ``gw.base_url(backend, metric, case_id, in_process=True)`` (a ``.invalid`` host that no socket
  serves), so a request goes from the library to the gateway's code without crossing a socket. That
  is the fast path: ~0.1 ms of CPU per call, against ~0.5 ms for a loopback HTTP hop, which made a
  run 13-20 % slower than calling the library directly;
* **loopback HTTP**: an OpenAI-compatible server on 127.0.0.1 (a background thread of this process) at
  ``gw.base_url(backend, metric, case_id)``, for libraries whose HTTP client cannot be given a
  transport. The socket is opened the first time a socket URL is asked for (a run whose backends
  all use the transports listens on nothing), and every request on it must carry the gateway's key
  (``Authorization: Bearer <gw.api_key>`` or ``api-key: <gw.api_key>``; any other request gets 401 and
  is neither forwarded nor counted). That key is random per gateway, lives in memory only and dies
  with the gateway: another local process cannot use the socket to spend the real key.

The real key (read from the environment variable named by ``JudgeConfig.api_key_env``) never enters
a library object or file; the gateway adds it when it forwards a request to the real endpoint. The
gateway is the one place that

* caches responses in SQLite, keyed by the full request (upstream URL without credentials, path, and
  the whole JSON body: model, messages, every parameter), so a re-run of an unchanged suite makes no
  calls and CI can replay a recorded cache with no key (``cache_mode = "read-only"``); when a score
  fails, :meth:`JudgeGateway.forget` drops every answer served for its (backend, metric, case_id)
  and no answer for it is stored afterwards (one still in flight then included), so a malformed
  answer is asked for again on the next run instead of being replayed;
* bounds concurrency across all backends together (``max_concurrency`` requests in flight);
* retries 429, 500, 502, 503, 504, connection errors, timeouts and 2xx bodies that are not JSON,
  with exponential backoff and full jitter (0.5 s base, 20 s cap), honouring ``Retry-After``;
* counts calls, cache hits, tokens, retries and errors per (backend, metric, case_id), attributed by a
  path tag (``base_url(backend, metric, case_id)``) or by the ``X-Ragbridge-Tag`` request header
  (``tag_scope`` + ``httpx_event_hooks``);
* writes an audit log (JSONL, flushed every 0.2 s and on close; never a header or a key): one line
  per judge call with who asked (backend, metric, case_id), the endpoint, ``request_key`` (the
  SHA-256 of the upstream URL, path and exact request bytes: the key the cache files the answer
  under, table ``aliases``, column ``raw``), the status, cache outcome, attempts, seconds, the tokens
  the call spent (0 for a cache hit) and the SHA-256 and size of both bodies. The bodies themselves
  are written only for a call that did not succeed (status outside 2xx), where they are the
  evidence; a successful answer's body is in the cache under ``request_key``. That keeps the log
  to about 0.5 KB a call (the bundled 53 cases with three libraries: 1.1 MB instead of 9.9 MB);
* notices answers from ragbridge's stub judge (``stub_detected``), so runs can be labelled.

Upstream requests go through a small keep-alive pool of ``http.client`` connections (about 0.2 ms of
CPU per request on a 2-vCPU machine, against about 0.9 ms for ``httpx``); the shared
``httpx.Client`` is used for the preflight check, when an environment proxy applies to the endpoint,
for URLs with userinfo, or everywhere with ``JudgeGateway.upstream_transport = "httpx"``.

After its own retries the gateway passes the last error status and body to the library with
``x-should-retry: false``, so the OpenAI SDK does not multiply the retries; the library raises and
the backend records that score's error.

A client that must not wait forever should use a timeout of at least
``timeout * (max_retries + 1)`` plus the backoff (``JudgeConfig.client_timeout()``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.thread
import contextlib
import contextvars
import email.utils
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import secrets
import select
import socket
import sqlite3
import ssl
import threading
import time
import tomllib
from dataclasses import dataclass, fields as dc_fields
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Literal, Optional
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "JudgeConfig",
    "JudgeGateway",
    "JudgeCache",
    "Usage",
    "JudgeError",
    "JudgeConfigError",
    "JudgeUnavailable",
    "redact_url",
    "TAG_HEADER",
    "FastRequestHandler",
    "JudgeTransport",
    "AsyncJudgeTransport",
]

IN_PROCESS_ORIGIN = "http://ragbridge-gateway.invalid"  # the host of in-process URLs: no socket serves it
STUB_MARKER = b'"system_fingerprint": "ragbridge-stub"'  # what ragbridge.testing's stub judge puts in answers
TAG_HEADER = "X-Ragbridge-Tag"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_BASE = 0.5
BACKOFF_CAP = 20.0
RETRY_AFTER_CAP = 60.0
AUDIT_FLUSH_SECONDS = 0.2  # the audit log is written in the background at most this late
ENDPOINTS = ("chat/completions", "responses", "embeddings", "models", "completions")
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


class JudgeError(Exception):
    """Base class of judge errors."""


class JudgeConfigError(JudgeError, ValueError):
    """The judge configuration is invalid or incomplete (names the file and the key)."""


class JudgeUnavailable(JudgeError):
    """The judge endpoint cannot be used (unreachable, key rejected, nothing recorded to replay)."""


# ------------------------------------------------------------------------------------------------
# Secrets hygiene
# ------------------------------------------------------------------------------------------------

_KEYLIKE = re.compile(r"(key|token|secret|passw|pwd|auth|sig|credential|session|code)", re.I)


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
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _KEYLIKE.search(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def _default_cache_path() -> Path:
    return Path.cwd() / ".ragbridge" / "judge-cache.sqlite"


class JudgeConfig(BaseModel):
    """One judge for every backend: model, OpenAI-compatible endpoint, and the name of the key's env var.

    ``max_tokens`` is for the backends to pass to their libraries (a library's own default of 1024 can
    truncate long verdict lists); the gateway never edits a request body. ``cache_path = None`` means no cache.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str = Field(min_length=1)
    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    embedding_model: Optional[str] = None
    cache_path: Optional[Path] = Field(default_factory=_default_cache_path)
    cache_mode: Literal["read-write", "read-only", "off"] = "read-write"
    max_concurrency: int = Field(8, ge=1)
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(5, ge=0)
    max_tokens: Optional[int] = Field(None, ge=1)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, v: str) -> str:
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

    @field_validator("api_key_env")
    @classmethod
    def _check_env_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v or ""):
            raise ValueError(
                f"api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                f"not a key; got a value of {len(v or '')} characters")
        return v

    # -- derived --------------------------------------------------------------------------------
    @property
    def upstream_host(self) -> str:
        return (urlsplit(self.base_url).hostname or "").lower()

    @property
    def is_local(self) -> bool:
        """The endpoint is on this machine (a local server or ragbridge's stub): a key may be absent."""
        return self.upstream_host in _LOCAL_HOSTS or self.upstream_host.startswith("127.")

    @property
    def public_base_url(self) -> str:
        return redact_url(self.base_url)

    def api_key(self) -> Optional[str]:
        """The key's value from the environment (never stored on this object)."""
        return os.environ.get(self.api_key_env) or None

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
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "max_tokens": self.max_tokens,
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

        pyproject = cwd / "pyproject.toml"
        if pyproject.is_file():
            data = _read_toml(pyproject)
            table = data.get("tool", {}).get("ragbridge", {}).get("judge") if isinstance(data.get("tool"), dict) \
                and isinstance(data["tool"].get("ragbridge"), dict) else None
            if table is not None:
                if not isinstance(table, dict):
                    raise JudgeConfigError(f"{pyproject}: [tool.ragbridge.judge] must be a table")
                take(table, str(pyproject), pyproject.parent, "[tool.ragbridge.judge]")

        rb = Path(config_file) if config_file is not None else cwd / "ragbridge.toml"
        if not rb.is_absolute():
            rb = cwd / rb
        if config_file is not None and not rb.is_file():
            raise JudgeConfigError(f"{rb}: config file not found")
        if rb.is_file():
            data = _read_toml(rb)
            table = data.get("judge")
            if table is not None:
                if not isinstance(table, dict):
                    raise JudgeConfigError(f"{rb}: [judge] must be a table")
                take(table, str(rb), rb.parent, "[judge]")

        cli = {k: v for k, v in (cli_overrides or {}).items() if v is not None}
        take(cli, "command line", cwd, "the judge options")

        if "cache_path" not in merged:
            merged["cache_path"] = cwd / ".ragbridge" / "judge-cache.sqlite"
        for required in ("model", "base_url"):
            if required not in merged:
                raise JudgeConfigError(
                    f"judge {required} is not set: set `{required}` in [judge] of {rb.name}, in "
                    f"[tool.ragbridge.judge] of pyproject.toml, or pass --judge-{required.replace('_', '-')}")
        try:
            return cls(**merged)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0]) if err.get("loc") else "?"
            msg = str(err.get("msg", "invalid value"))
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            raise JudgeConfigError(f"{source_of.get(key, 'defaults')}: judge {key}: {msg}") from None


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise JudgeConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise JudgeConfigError(f"{path}: cannot read: {exc.strerror}") from None


# ------------------------------------------------------------------------------------------------
# Accounting
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Judge traffic summed over some (backend, metric, case_id) triples.

    ``calls`` are requests that went upstream (one per library request, however many attempts);
    ``cache_hits`` were answered from the cache; ``retries`` are extra attempts; ``errors`` are
    requests whose final answer to the library was not 2xx (read-only cache misses included)."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    errors: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in dc_fields(self)))

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


Triple = tuple[Optional[str], Optional[str], Optional[str]]
_CURRENT_TAG: contextvars.ContextVar[Optional[Triple]] = contextvars.ContextVar("ragbridge_judge_tag", default=None)


def _tag_header_value(triple: Triple) -> str:
    return "/".join(quote(p or "", safe="") for p in triple)


def _parse_tag_header(value: str) -> Triple:
    parts = value.split("/", 2) + ["", ""]
    return tuple(unquote(p) or None for p in parts[:3])  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# Cache
# ------------------------------------------------------------------------------------------------


class JudgeCache:
    """SQLite response cache (WAL). One connection shared by all threads under a lock.

    Two tables: ``responses`` (canonical request key -> status, body) and ``aliases`` (key of the
    exact request bytes -> canonical key, so a byte-identical request is found without parsing).
    A cache whose bodies total at most ``memory_bytes`` is also loaded into memory when opened, and
    new answers are added while they fit: a warm re-run then never waits on SQLite. A lookup that
    misses in memory still asks SQLite (another process may have written the file since).

    New answers are served from memory at once and written to SQLite by a background thread, one
    transaction per batch, at most ``write_delay`` seconds later (and on :meth:`close`): a judge
    call does not wait for a commit. A crash loses at most that last fraction of a second of
    answers, which the next run asks for again."""

    memory_bytes = 64 << 20
    write_delay = 0.1

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._mem: dict[str, tuple[int, bytes]] = {}
        self._mem_alias: dict[str, str] = {}
        self._mem_size = 0
        # written by the background writer: (key, path, model, status, body, created) and (raw, key)
        self._pending: dict[str, tuple] = {}
        self._pending_alias: dict[str, str] = {}
        self._plock = threading.Lock()
        self._closed = threading.Event()
        self._writer: Optional[threading.Thread] = None
        if read_only:
            if self.path.is_file():
                uri = self.path.resolve().as_uri()
                try:
                    self._conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False,
                                                 isolation_level=None)
                    self._conn.execute("SELECT 1 FROM responses LIMIT 1").fetchall()
                except sqlite3.OperationalError:
                    # e.g. a WAL database in a read-only directory (CI checkouts): open it as immutable.
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True,
                                                 check_same_thread=False, isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None,
                                         timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, path TEXT NOT NULL, model TEXT, "
                "status INTEGER NOT NULL, body BLOB NOT NULL, created REAL NOT NULL)")
            self._conn.execute("CREATE TABLE IF NOT EXISTS aliases (raw TEXT PRIMARY KEY, key TEXT NOT NULL)")
            self._writer = threading.Thread(target=self._write_periodically, name="ragbridge-judge-cache-writer",
                                            daemon=True)
            self._writer.start()
        self._preload()

    def _write_periodically(self) -> None:
        while not self._closed.wait(self.write_delay):
            with contextlib.suppress(sqlite3.Error):
                self.flush()

    def flush(self) -> None:
        """Write the answers not yet in SQLite (one transaction)."""
        with self._lock:  # taken before the pending entries: delete() cannot slip in between
            with self._plock:
                rows, self._pending = list(self._pending.values()), {}
                aliases, self._pending_alias = list(self._pending_alias.items()), {}
            if not (rows or aliases) or self._conn is None:
                return
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", rows)
                self._conn.executemany("INSERT OR REPLACE INTO aliases VALUES (?, ?)", aliases)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _preload(self) -> None:
        if self._conn is None:
            return
        try:
            total = self._conn.execute("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM responses").fetchone()[0]
            if total > self.memory_bytes:
                return
            for key, status, body in self._conn.execute("SELECT key, status, body FROM responses"):
                self._mem[key] = (int(status), bytes(body))
            self._mem_size = int(total)
            self._mem_alias.update(self._conn.execute("SELECT raw, key FROM aliases").fetchall())
        except sqlite3.OperationalError:
            pass  # an older or foreign file: SQLite lookups still work where they can

    def _remember(self, key: str, status: int, body: bytes) -> None:
        if key not in self._mem and self._mem_size + len(body) <= self.memory_bytes:
            self._mem[key] = (status, body)
            self._mem_size += len(body)

    @staticmethod
    def key(upstream: str, path: str, body: Any) -> str:
        canon = json.dumps({"upstream": upstream, "path": path, "body": body}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()

    @staticmethod
    def raw_key(upstream: str, path: str, raw: bytes) -> str:
        """Key of the exact request bytes (an alias of the canonical key, to skip JSON parsing)."""
        h = hashlib.sha256(upstream.encode("utf-8"))
        h.update(b"\0" + path.encode("utf-8") + b"\0")
        h.update(raw)
        return h.hexdigest()

    def get_raw(self, raw_key: str) -> Optional[tuple[int, bytes]]:
        key = self._mem_alias.get(raw_key)
        if key is not None:
            hit = self._mem.get(key)
            if hit is None:
                hit = self._pending_hit(key)
            if hit is not None:
                return hit
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT r.key, r.status, r.body FROM aliases a JOIN responses r ON r.key = a.key WHERE a.raw = ?",
                    (raw_key,)).fetchone()
            except sqlite3.OperationalError:
                return None
        if row is None:
            return None
        hit = (int(row[1]), bytes(row[2]))
        self._remember(row[0], *hit)
        self._mem_alias[raw_key] = row[0]
        return hit

    def add_alias(self, raw_key: str, key: str) -> None:
        self._mem_alias[raw_key] = key
        if self._conn is None or self.read_only:
            return
        with self._plock:
            self._pending_alias[raw_key] = key

    def _pending_hit(self, key: str) -> Optional[tuple[int, bytes]]:
        row = self._pending.get(key)
        return (row[3], row[4]) if row is not None else None

    def get(self, key: str) -> Optional[tuple[int, bytes]]:
        hit = self._mem.get(key) or self._pending_hit(key)
        if hit is not None:
            return hit
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute("SELECT status, body FROM responses WHERE key = ?", (key,)).fetchone()
            except sqlite3.OperationalError:
                return None  # e.g. a read-only file without the table
        if row is None:
            return None
        hit = (int(row[0]), bytes(row[1]))
        self._remember(key, *hit)
        return hit

    def put(self, key: str, path: str, model: Optional[str], status: int, body: bytes,
            raw_key: Optional[str] = None) -> None:
        if self._conn is None or self.read_only:
            return
        with self._plock:
            self._pending[key] = (key, path, model, status, body, time.time())
            if raw_key is not None:
                self._pending_alias[raw_key] = key
        self._remember(key, status, body)
        if raw_key is not None:
            self._mem_alias[raw_key] = key

    def delete(self, keys: set[str], raw_keys: set[str]) -> int:
        """Forget these responses (canonical keys, and the ones the raw keys alias). Returns how many."""
        if self.read_only:
            return 0
        keys = set(keys)
        with self._lock:
            with self._plock:
                for raw in raw_keys:  # the canonical keys the raw keys stand for, wherever they are
                    key = self._pending_alias.get(raw) or self._mem_alias.get(raw)
                    if key is None and self._conn is not None:
                        row = self._conn.execute("SELECT key FROM aliases WHERE raw = ?", (raw,)).fetchone()
                        key = row[0] if row else None
                    if key is not None:
                        keys.add(key)
                # answers not yet written are dropped here, so the writer never adds them back
                for key in keys:
                    self._pending.pop(key, None)
                for raw in [r for r, k in self._pending_alias.items() if k in keys or r in raw_keys]:
                    del self._pending_alias[raw]
            for key in keys:
                hit = self._mem.pop(key, None)
                if hit is not None:
                    self._mem_size -= len(hit[1])
            for raw in [r for r, k in self._mem_alias.items() if k in keys or r in raw_keys]:
                del self._mem_alias[raw]
            if self._conn is None or not keys:
                return len(keys)
            marks = ",".join("?" * len(keys))
            self._conn.execute(f"DELETE FROM responses WHERE key IN ({marks})", tuple(keys))
            self._conn.execute(f"DELETE FROM aliases WHERE key IN ({marks})", tuple(keys))
        return len(keys)

    def __len__(self) -> int:
        if self._conn is None:
            return 0
        self.flush()
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        self._closed.set()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._conn is not None and not self.read_only:
            self.flush()
        with self._lock:
            if self._conn is not None:
                if not self.read_only:
                    with contextlib.suppress(sqlite3.Error):  # fold the WAL back: one portable file
                        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._conn.close()
                self._conn = None


# ------------------------------------------------------------------------------------------------
# The gateway
# ------------------------------------------------------------------------------------------------


class _JsonBytes(bytes):
    """Bytes known to hold a JSON document."""


def _error_body(message: str, etype: str = "ragbridge_gateway_error", code: Optional[str] = None) -> bytes:
    return _JsonBytes(json.dumps({"error": {"message": message, "type": etype, "param": None, "code": code}}).encode())


def _usage_of(parsed: Any) -> tuple[int, int]:
    if not isinstance(parsed, dict):
        return 0, 0
    u = parsed.get("usage")
    if not isinstance(u, dict):
        return 0, 0

    def num(*names: str) -> int:
        for n in names:
            v = u.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return 0

    return num("prompt_tokens", "input_tokens"), num("completion_tokens", "output_tokens")


def _retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


@dataclass
class _Result:
    status: int
    body: bytes
    content_type: str = "application/json"
    cache: str = "miss"  # hit | miss | off | bypass | readonly-miss
    attempts: int = 0
    parsed: Any = None
    counted: bool = True  # a judge call (POST), counted in usage
    json_ok: bool = False  # body known to be a JSON document (parsed, cached or made here)
    request_json: bool = False  # the request body was parsed as JSON

    def __post_init__(self) -> None:
        if self.parsed is not None or isinstance(self.body, _JsonBytes):
            self.json_ok = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class _Headers(dict):
    """Request headers, keys lowercased (``get`` is case-insensitive)."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, key.lower(), default)


class FastRequestHandler(BaseHTTPRequestHandler):
    """BaseHTTPRequestHandler with a lean request parser (the stdlib one runs the email package's
    header parser on every request, a large part of the per-call cost on loopback), keep-alive
    (HTTP/1.1) and one write per response."""

    protocol_version = "HTTP/1.1"
    sys_version = ""
    max_headers = 100
    #: the server object whose ``_track(conn, add)`` keeps its open connections (set on a subclass)
    owner: Any = None

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.owner is not None:
            self.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.owner is not None:
                self.owner._track(self.connection, False)

    def parse_request(self) -> bool:
        self.command = None
        self.request_version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.send_error(400, "Bad request line")
            return False
        self.command, self.path, self.request_version = words
        headers = _Headers()
        while True:
            line = self.rfile.readline(65537)
            if len(line) > 65536:
                self.send_error(431, "Header line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, sep, value = line.decode("iso-8859-1").partition(":")
            if not sep:
                self.send_error(400, "Bad header line")
                return False
            headers[name.strip().lower()] = value.strip()
            if len(headers) > self.max_headers:
                self.send_error(431, "Too many headers")
                return False
        self.headers = headers  # type: ignore[assignment]
        conn = headers.get("connection", "").lower()
        if conn == "close":
            self.close_connection = True
        elif conn == "keep-alive" or self.request_version == "HTTP/1.1":
            self.close_connection = False
        if headers.get("expect", "").lower() == "100-continue" and self.request_version == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def read_body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def write_response(self, status: int, body: bytes, headers: list[str]) -> None:
        head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                f"Content-Length: {len(body)}", *headers]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class _Handler(FastRequestHandler):
    server_version = "ragbridge-judge-gateway"
    gateway: "JudgeGateway"

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _reply(self, res: _Result) -> None:
        extra = [f"Content-Type: {res.content_type}", f"X-Ragbridge-Cache: {res.cache}"]
        if not 200 <= res.status < 300:
            extra.append("x-should-retry: false")  # the gateway already retried
        self.write_response(res.status, res.body, extra)

    def _handle(self, method: str) -> None:
        gw = self.gateway
        gw.http_requests += 1
        t0 = time.perf_counter()
        raw = self.read_body() if method == "POST" else b""
        # Loopback only, and not from a web page (DNS rebinding / cross-site requests).
        host = (self.headers.get("Host") or "").lower()
        if self.headers.get("Origin") or host not in gw._allowed_hosts:
            self._reply(_Result(403, _error_body("ragbridge judge gateway: forbidden host or origin"), cache="off"))
            return
        if not gw._authorized(self.headers.get("Authorization"), self.headers.get("api-key")):
            self._reply(_Result(401, _error_body(
                "ragbridge judge gateway: missing or wrong API key: use the gateway's api_key",
                "invalid_request_error", "invalid_api_key"), cache="off"))
            return
        routed = gw._route(self.path, self.headers.get(TAG_HEADER))
        if isinstance(routed, _Result):
            if routed.status == 503:
                self.close_connection = True
            self._reply(routed)
            return
        endpoint, triple = routed
        res = gw._answer(method, endpoint, raw, triple)
        if res.counted:  # before replying, as the transports do: the log is in the order clients got answers
            gw._audit(triple, endpoint, raw, res, time.perf_counter() - t0)
        self._reply(res)


class _UpstreamTimeout(Exception):
    pass


class _UpstreamError(Exception):
    pass


class _StdlibPool:
    """Keep-alive HTTP/1.1 connections to the upstream host over the standard library's http.client.

    The gateway's hot path: on a 2-vCPU machine it costs ~0.2 ms of CPU per forwarded request where
    an ``httpx.Client`` costs ~0.9 ms (measured against the stub judge; see the report). Used for
    plain http/https upstreams; ``httpx`` remains the transport when a proxy is configured for the
    upstream or the URL carries userinfo. At most ``size`` idle connections are kept; an idle one that
    the server closed is dropped before reuse, and a request that fails on a reused connection before
    any response is sent once more on a fresh one (not counted as a retry)."""

    def __init__(self, base_url: str, *, timeout: float, connect_timeout: float, size: int) -> None:
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.size = size
        self._idle: list[http.client.HTTPConnection] = []
        self._busy: set[http.client.HTTPConnection] = set()  # in use: shut down by close()
        self._closed = False
        self._lock = threading.Lock()
        self._ssl: Optional[ssl.SSLContext] = None
        if self.https:
            import certifi  # a dependency of httpx: the same CA bundle httpx would use

            cafile = os.environ.get("SSL_CERT_FILE") or certifi.where()
            self._ssl = ssl.create_default_context(cafile=cafile, capath=os.environ.get("SSL_CERT_DIR"))

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.connect_timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise _UpstreamTimeout(f"connect timed out: {exc}") from None
        except OSError as exc:
            conn.close()
            raise _UpstreamError(f"{type(exc).__name__}: {exc}") from None
        conn.sock.settimeout(self.timeout)
        with contextlib.suppress(OSError):
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _idle_conn(self) -> Optional[http.client.HTTPConnection]:
        while True:
            # Only the pop is under the lock: the liveness check is a system call, which releases the
            # GIL; holding the lock across it would queue every other caller behind this thread
            # getting the GIL back.
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            sock = conn.sock
            try:
                alive = sock is not None and not select.select([sock], [], [], 0)[0]
            except (OSError, ValueError):
                alive = False
            if alive:
                return conn
            conn.close()  # readable while idle = closed by the server (or junk): drop it

    def request(self, method: str, target: str, body: Optional[bytes],
                headers: dict[str, str]) -> tuple[int, Optional[str], Optional[str], bytes]:
        """(status, content-type, retry-after, body); raises _UpstreamTimeout / _UpstreamError."""
        for fresh in (False, True):
            conn = None if fresh else self._idle_conn()
            reused = conn is not None
            if conn is None:
                conn = self._connect()
            with self._lock:
                if self._closed:
                    conn.close()
                    raise _UpstreamError("the judge gateway is shut down")
                self._busy.add(conn)
            try:
                conn.request(method, target, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except TimeoutError as exc:
                conn.close()
                raise _UpstreamTimeout(f"read timed out after {self.timeout:g} s: {exc}") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if reused:
                    continue  # a stale keep-alive connection: once more on a fresh one
                raise _UpstreamError(f"{type(exc).__name__}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _UpstreamError(f"{type(exc).__name__}: {exc}") from None
            finally:
                with self._lock:
                    self._busy.discard(conn)
            if r.will_close:
                conn.close()
            else:
                with self._lock:
                    if len(self._idle) < self.size and not self._closed:
                        self._idle.append(conn)
                        conn = None
                if conn is not None:
                    conn.close()
            return r.status, r.getheader("content-type"), r.getheader("retry-after"), data
        raise _UpstreamError("connection closed by the server")  # pragma: no cover - loop always returns

    def close(self) -> None:
        """Close idle connections, and end requests in flight (their threads get an error at once)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for conn in idle:
            conn.close()
        for conn in busy:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _proxy_for(url: str) -> bool:
    """True when the environment configures a proxy that applies to ``url`` (then httpx is used)."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "")


class JudgeGateway:
    """The loopback OpenAI-compatible gateway in front of the real judge (see the module docstring).

    ``with JudgeGateway(config, audit_log=run_dir / "judge-audit.jsonl") as gw:`` ... give each
    library ``gw.transport()`` and ``gw.base_url(backend, metric, case_id, in_process=True)``, or
    point it at ``gw.base_url(backend, metric, case_id)`` (the loopback socket), with
    ``api_key=gw.api_key``.

    ``backoff_base`` / ``backoff_cap`` (seconds) may be lowered on an instance, e.g. in tests."""

    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP
    #: "stdlib": forward with a keep-alive http.client pool (the fast path; httpx is still used when a
    #: proxy applies or the URL has userinfo); "httpx": forward with the shared httpx.Client.
    upstream_transport: Literal["stdlib", "httpx"] = "stdlib"

    def __init__(self, config: JudgeConfig, audit_log: Optional[Path] = None) -> None:
        self.config = config
        self.audit_log = Path(audit_log) if audit_log is not None else None
        self._upstream = config.base_url.rstrip("/")
        self._upstream_public = redact_url(self._upstream)
        self._lock = threading.Lock()
        self._tags: dict[str, Triple] = {}
        self._tag_of: dict[Triple, str] = {}
        self._usage: dict[Triple, list[int]] = {}
        self._served: dict[Triple, set[tuple[str, str]]] = {}
        self._failed: set[Triple] = set()  # forgotten: no answer is stored for these any more
        self._sem = threading.BoundedSemaphore(config.max_concurrency)
        self._inflight: dict[str, threading.Event] = {}
        self._closing = threading.Event()
        self._conns: set = set()
        self._key: Optional[str] = None
        self._key_bytes: Optional[bytes] = None
        self._cache: Optional[JudgeCache] = None
        self._audit_fh: Any = None
        self._audit_flusher: Optional[threading.Thread] = None
        self._audit_lock = threading.Lock()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._client: Optional[httpx.Client] = None
        self._pool: Optional[_StdlibPool] = None
        self._targets: dict[str, tuple[str, str, str]] = {}
        self._allowed_hosts: set[str] = set()
        self._listen_lock = threading.Lock()
        #: what a request on the loopback socket must present (memory only; see the module docstring)
        self._secret = secrets.token_urlsafe(32)
        self._secret_bytes = self._secret.encode("ascii")
        self.port: Optional[int] = None
        #: True once an answer (from upstream or the cache) came from ragbridge's stub judge:
        #: run outputs must then be labelled as stub scores.
        self.stub_detected = False
        #: requests that came over the loopback socket rather than through a transport (diagnostics)
        self.http_requests = 0
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def _endpoint_url(self, endpoint: str, *, public: bool = False) -> str:
        """``base_url`` + ``/endpoint``, keeping a query string (e.g. ``?api-version=``) at the end."""
        parts = urlsplit(self._upstream_public if public else self._upstream)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + endpoint, parts.query, ""))

    # -- lifecycle ------------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        if self._client is None:
            n = self.config.max_concurrency
            self._client = httpx.Client(
                timeout=httpx.Timeout(self.config.timeout, connect=min(self.config.timeout, 10.0)),
                limits=httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2),
                trust_env=not self.config.is_local, follow_redirects=False,
                # plain http on loopback: no TLS, so no CA bundle to load (~30 ms)
                verify=not (self.config.is_local and self._upstream.startswith("http://")))
        return self._client

    def start(self) -> "JudgeGateway":
        if self._executor is not None:
            return self
        cfg = self.config
        self._closing.clear()
        if cfg.cache_mode != "read-only":
            self._key = cfg.api_key()
            self._key_bytes = self._key.encode() if self._key else None
        if cfg.cache_mode != "off" and cfg.cache_path is not None:
            self._cache = JudgeCache(cfg.cache_path, read_only=cfg.cache_mode == "read-only")
        if self.audit_log is not None:
            self.audit_log.parent.mkdir(parents=True, exist_ok=True)
            self._audit_fh = open(self.audit_log, "ab", buffering=1 << 20)
            self._audit_flusher = threading.Thread(target=self._flush_audit_periodically,
                                                   name="ragbridge-judge-audit-flush", daemon=True)
            self._audit_flusher.start()
        parts = urlsplit(self._upstream)
        trust_env = not cfg.is_local  # as the httpx client's (see _http)
        if self.upstream_transport == "stdlib" and not (parts.username or parts.password) and not (
                trust_env and _proxy_for(self._upstream)):
            self._pool = _StdlibPool(self._upstream, timeout=cfg.timeout, connect_timeout=min(cfg.timeout, 10.0),
                                     size=cfg.max_concurrency + 2)
        else:
            self._http()  # forwarding uses it from many threads: made now, not on the first request
        # Worker threads of the async transport: enough for every request the libraries may have
        # open (the upstream bound is the semaphore in _forward, not the pool size).
        self._executor = _stdlib_thread_pool()(max_workers=4 * cfg.max_concurrency + 8,
                                               thread_name_prefix="ragbridge-judge")
        return self

    def _listen(self) -> int:
        """Open the loopback socket (once, on the first request for a socket URL); returns its port."""
        with self._listen_lock:
            self._require_started()
            if self._closing.is_set():
                raise JudgeError("the judge gateway is closing: no new socket")
            if self._server is None:
                handler = type("JudgeGatewayHandler", (_Handler,), {"gateway": self, "owner": self})
                server = _Server(("127.0.0.1", 0), handler)
                self.port = server.server_address[1]
                self._allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
                self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                                name=f"ragbridge-judge-gateway-{self.port}", daemon=True)
                self._thread.start()
                self._server = server
            return self.port  # type: ignore[return-value]

    @property
    def listening(self) -> bool:
        """Whether the loopback socket is open (it is only once a socket URL was asked for)."""
        return self._server is not None

    def close(self) -> None:
        self._closing.set()
        with self._listen_lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            with self._lock:
                conns = list(self._conns)
            for c in conns:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
            if self._thread is not None:
                self._thread.join(timeout=5)
        # Upstream requests in flight end now (their connections are shut down), so the worker
        # threads finish at once instead of waiting for the judge's answers.
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        with self._audit_lock:
            if self._audit_fh is not None:
                self._audit_fh.close()
                self._audit_fh = None
        self._key = self._key_bytes = None
        self.port = None

    def __enter__(self) -> "JudgeGateway":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _track(self, conn: Any, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    # -- what the backends use ------------------------------------------------------------------
    @property
    def api_key(self) -> str:
        """The key the libraries get: this gateway's own random key, which its loopback socket
        requires (the real key stays in the gateway). It is never written anywhere."""
        return self._secret

    def _authorized(self, authorization: Optional[str], api_key: Optional[str]) -> bool:
        """A socket request presents this gateway's key (``Bearer`` or ``api-key``); constant time."""
        if authorization and authorization[:7].lower() == "bearer ":
            given = authorization[7:].strip()
        else:
            given = (api_key or "").strip()
        return hmac.compare_digest(given.encode("utf-8", "replace"), self._secret_bytes)

    @property
    def url(self) -> str:
        """The loopback socket's root URL (``http://127.0.0.1:PORT``); opens the socket if needed."""
        return f"http://127.0.0.1:{self._listen()}"

    def _require_started(self) -> None:
        """For the transports: until start() (and after close()) there is no key, cache or pool."""
        if self._executor is None:
            raise JudgeError("the judge gateway is not started (or already closed): call start() or use it "
                             "as a context manager")

    def base_url(self, backend: Optional[str] = None, metric: Optional[str] = None,
                 case_id: Optional[str] = None, *, in_process: bool = False) -> str:
        """An OpenAI base URL (``.../v1``) whose calls are counted under (backend, metric, case_id);
        without a backend, an untagged one (attribution then comes from ``tag_scope`` or the
        X-Ragbridge-Tag header). The loopback socket's, which opens the socket; ``in_process=True``:
        one for a library client on :meth:`transport` / :meth:`async_transport` (no socket)."""
        root = IN_PROCESS_ORIGIN if in_process else self.url
        if backend is None:
            return f"{root}/v1"
        triple: Triple = (backend, metric, case_id)
        with self._lock:
            tag = self._tag_of.get(triple)
            if tag is None:
                tag = secrets.token_urlsafe(9)
                self._tag_of[triple] = tag
                self._tags[tag] = triple
        return f"{root}/t/{tag}/v1"

    @property
    def plain_base_url(self) -> str:
        """The loopback socket's untagged base URL: ``base_url()``."""
        return self.base_url()

    @staticmethod
    @contextlib.contextmanager
    def tag_scope(backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> Iterator[None]:
        """Attribute requests made in this context (thread / asyncio task) to (backend, metric, case_id).

        The in-process transports read it directly; for the loopback socket, the event hooks
        (:meth:`httpx_event_hooks`) carry it in the ``X-Ragbridge-Tag`` header."""
        token = _CURRENT_TAG.set((backend, metric, case_id))
        try:
            yield
        finally:
            _CURRENT_TAG.reset(token)

    @staticmethod
    def httpx_event_hooks() -> dict[str, list]:
        """``httpx.Client(event_hooks=...)``: adds the X-Ragbridge-Tag header from ``tag_scope``."""

        def add_tag(request: httpx.Request) -> None:
            triple = _CURRENT_TAG.get()
            if triple is not None:
                request.headers[TAG_HEADER] = _tag_header_value(triple)

        return {"request": [add_tag]}

    @staticmethod
    def async_httpx_event_hooks() -> dict[str, list]:
        """``httpx.AsyncClient(event_hooks=...)``: as :meth:`httpx_event_hooks`, for async clients."""

        async def add_tag(request: httpx.Request) -> None:
            triple = _CURRENT_TAG.get()
            if triple is not None:
                request.headers[TAG_HEADER] = _tag_header_value(triple)

        return {"request": [add_tag]}

    def usage(self, backend: Optional[str] = None, metric: Optional[str] = None,
              case_id: Optional[str] = None) -> Usage:
        """Summed over the triples matching every argument that is not None."""
        if backend is not None and metric is not None and case_id is not None:  # one score's: no scan
            with self._lock:
                v = self._usage.get((backend, metric, case_id))
                return Usage(*v) if v is not None else Usage()
        total = Usage()
        with self._lock:
            items = [(k, list(v)) for k, v in self._usage.items()]
        for (b, m, c), v in items:
            if backend is not None and b != backend:
                continue
            if metric is not None and m != metric:
                continue
            if case_id is not None and c != case_id:
                continue
            total = total + Usage(*v)
        return total

    def forget(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> int:
        """Drop from the cache every response served for this (backend, metric, case) in this run, and
        store none for it from now on. Returns the number of distinct requests served for it (their
        answers dropped, or not to be stored when they arrive).

        The runner calls it when a score fails, so a malformed answer that made a library fail is
        asked for again on the next run instead of being replayed from the cache forever, whatever
        the order of arrival: an answer to a request of that score still in flight (a library's
        concurrent calls for one case) is not stored when it arrives. The mark and the store are
        checked under one lock, so every answer is either dropped here or never stored.
        """
        triple: Triple = (backend, metric, case_id)
        with self._lock:
            self._failed.add(triple)
            entries = self._served.pop(triple, set())
        if not entries or self._cache is None:
            return 0
        return self._cache.delete({v for k, v in entries if k == "key"}, {v for k, v in entries if k == "raw"})

    def _attribute(self, triple: Triple, entry: tuple[str, str]) -> None:
        """Remember that this cache entry was served for ``triple`` (what :meth:`forget` drops)."""
        with self._lock:
            if triple not in self._failed:
                self._served.setdefault(triple, set()).add(entry)

    def usage_by_triple(self) -> dict[Triple, Usage]:
        with self._lock:
            return {k: Usage(*v) for k, v in self._usage.items()}

    # -- serving (shared by the loopback socket and the in-process transports) ---------------------
    def _route(self, path: str, tag_header: Optional[str],
               scope: Optional[Triple] = None) -> "tuple[str, Triple] | _Result":
        """The endpoint and the (backend, metric, case_id) a request is counted under, or the error.

        Attribution, strongest first: the ``X-Ragbridge-Tag`` header, the ``tag_scope`` the request
        was made in (in-process transports only), the path tag of ``base_url(...)``."""
        if self._closing.is_set():
            return _Result(503, _error_body("ragbridge judge gateway is shut down"), cache="off", counted=False)
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        triple: Triple = (None, None, None)
        if len(parts) >= 2 and parts[0] == "t":
            triple = self._tags.get(parts[1], triple)
            parts = parts[2:]
        if tag_header:
            triple = _parse_tag_header(tag_header)
        elif scope is not None:
            triple = scope
        if parts and parts[0] == "v1":
            parts = parts[1:]
        endpoint = "/".join(parts)
        if endpoint not in ENDPOINTS:
            return _Result(404, _error_body(f"ragbridge judge gateway: no such endpoint /{endpoint}",
                                            "invalid_request_error"), cache="off", counted=False)
        return endpoint, triple

    def _answer(self, method: str, endpoint: str, raw: bytes, triple: Triple) -> _Result:
        """Serve one routed request (cache, upstream, retries) and count it."""
        try:
            res = self._serve(method, endpoint, raw, triple)
        except Exception as exc:  # a gateway bug must reach the library as an error, not a hang
            res = _Result(500, _JsonBytes(self._redact(_error_body(
                f"ragbridge judge gateway internal error: {type(exc).__name__}: {exc}"))), cache="off")
        if not self.stub_detected and res.status == 200 and STUB_MARKER in res.body:
            self.stub_detected = True
        if res.counted:
            self._account(triple, res)  # before replying: usage() is current once the client has its answer
        return res

    def _respond(self, request: httpx.Request, raw: bytes, scope: Optional[Triple]) -> httpx.Response:
        """One request from an in-process transport, answered as the loopback socket would."""
        t0 = time.perf_counter()
        routed = self._route(request.url.raw_path.decode("ascii", "replace"),
                             request.headers.get(TAG_HEADER), scope)
        if isinstance(routed, _Result):
            res = routed
        else:
            endpoint, triple = routed
            res = self._answer(request.method, endpoint, raw, triple)
            if res.counted:
                self._audit(triple, endpoint, raw, res, time.perf_counter() - t0)
        headers = [("content-type", res.content_type), ("x-ragbridge-cache", res.cache)]
        if not 200 <= res.status < 300:
            headers.append(("x-should-retry", "false"))  # the gateway already retried
        return httpx.Response(res.status, headers=headers, content=res.body, request=request)

    def transport(self) -> "JudgeTransport":
        """``httpx.Client(transport=gw.transport())``: requests go to this gateway in this process."""
        return JudgeTransport(self)

    def async_transport(self) -> "AsyncJudgeTransport":
        """``httpx.AsyncClient(transport=gw.async_transport())``: as :meth:`transport`, for async clients
        (the gateway's work runs on its own worker threads, never on the event loop)."""
        return AsyncJudgeTransport(self)

    # -- preflight ------------------------------------------------------------------------------
    def preflight(self) -> dict[str, Any]:
        """Check, before any case is scored, that the judge can answer. Raises JudgeUnavailable /
        JudgeConfigError with a one-line message; returns what was checked."""
        cfg = self.config
        url = self._upstream_public
        if cfg.cache_mode == "read-only":
            if cfg.cache_path is None or not Path(cfg.cache_path).is_file():
                raise JudgeUnavailable(
                    f"judge cache_mode is read-only but there is no recorded cache at {cfg.cache_path}: "
                    f"record one with cache_mode = \"read-write\" first (or set cache_path)")
            return {"mode": "read-only", "endpoint": url, "upstream_checked": False}
        key = cfg.api_key()
        if not key and not cfg.is_local:
            raise JudgeConfigError(
                f"judge API key missing: environment variable {cfg.api_key_env} is not set, and the judge at "
                f"{url} needs it; set it, or replay a recorded cache with cache_mode = \"read-only\"")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = min(cfg.timeout, 10.0)
        try:
            r = self._http().get(self._endpoint_url("models"), headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise JudgeUnavailable(
                f"judge endpoint {url} did not answer within {timeout:g} s: check that the server is up "
                f"and reachable from here") from None
        except httpx.TransportError as exc:
            text = str(exc)
            if re.search(r"refused|Errno 111|Errno 61", text, re.I):
                cause = "connection refused"
                hint = "check that the server is running and that the port in base_url is right"
            elif re.search(r"CERTIFICATE_VERIFY_FAILED|certificate verify", text, re.I):
                cause = "its TLS certificate is not trusted"
                hint = "set SSL_CERT_FILE to the CA bundle that signed it, or check base_url"
            elif re.search(r"name or service|nodename|getaddrinfo|Errno -[235]|resolve", text, re.I):
                cause = "host name does not resolve"
                hint = "check the host in base_url and your DNS / network"
            else:
                cause = type(exc).__name__
                hint = "check base_url and your network"
            raise JudgeUnavailable(f"judge endpoint {url} is unreachable ({cause}): {hint}") from None
        if r.status_code in (401, 403):
            raise JudgeUnavailable(
                f"judge endpoint {url} rejected the API key from {cfg.api_key_env} (HTTP {r.status_code}): "
                f"check the key")
        listed = None
        stub = r.headers.get("x-ragbridge-stub") == "1"
        if stub:
            self.stub_detected = True
        if r.status_code == 200:
            with contextlib.suppress(Exception):
                listed = cfg.model in {m.get("id") for m in r.json().get("data", [])}
        return {"mode": cfg.cache_mode, "endpoint": url, "upstream_checked": True,
                "models_status": r.status_code, "model_listed": listed, "key_set": bool(key), "stub": stub}

    # -- serving --------------------------------------------------------------------------------
    def _redact(self, data: bytes) -> bytes:
        kb = self._key_bytes
        if kb and kb in data:
            return data.replace(kb, b"[REDACTED]")
        return data

    def _serve(self, method: str, endpoint: str, raw: bytes, triple: Triple) -> _Result:
        cfg = self.config
        if method == "GET":
            if endpoint != "models":
                return _Result(405, _error_body(f"use POST for /{endpoint}", "invalid_request_error"), counted=False)
            if cfg.cache_mode == "read-only":
                data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "ragbridge-cache"}
                                                   for m in filter(None, [cfg.model, cfg.embedding_model])]}
                return _Result(200, json.dumps(data).encode(), cache="readonly", counted=False)
            res = self._forward("GET", endpoint, b"")
            res.cache, res.counted = "bypass", False
            return res
        if endpoint == "models":
            return _Result(405, _error_body("use GET for /models", "invalid_request_error"), counted=False)
        cache = self._cache
        use_cache = cfg.cache_mode != "off" and (cache is not None or cfg.cache_mode == "read-only")
        path = "/" + endpoint
        raw_key = None
        if use_cache and cache is not None:
            # Fast path: byte-identical request bodies map to the canonical key without parsing.
            raw_key = JudgeCache.raw_key(self._upstream_public, path, raw)
            self._attribute(triple, ("raw", raw_key))
            hit = cache.get_raw(raw_key)
            if hit is not None:
                return _Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        try:
            body = json.loads(raw)
        except ValueError:
            return _Result(400, _error_body("ragbridge judge gateway: request body is not valid JSON",
                                            "invalid_request_error"), cache="off")
        if isinstance(body, dict) and body.get("stream"):
            res = self._forward("POST", endpoint, raw, stream=True)
            res.cache, res.request_json = "bypass", True
            return res
        if not use_cache:
            res = self._forward("POST", endpoint, raw)
            res.cache, res.request_json = "off", True
            return res
        key = JudgeCache.key(self._upstream_public, path, body)
        self._attribute(triple, ("key", key))
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            if raw_key is not None and cache is not None:
                cache.add_alias(raw_key, key)
            return _Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        if cfg.cache_mode == "read-only":
            model = body.get("model") if isinstance(body, dict) else None
            return _Result(400, _error_body(
                f"ragbridge judge cache miss in read-only mode: no recorded response for this /{endpoint} "
                f"request (model {model!r}); re-record the cache with cache_mode = \"read-write\" "
                f"and a key, or check that the judge settings match the recording",
                "invalid_request_error", "ragbridge_cache_miss"), cache="readonly-miss", request_json=True)
        # read-write: one upstream call per distinct request in flight (single flight).
        with self._lock:
            waiter = self._inflight.get(key)
            if waiter is None:
                self._inflight[key] = threading.Event()
        if waiter is not None:
            waiter.wait(self.config.client_timeout())
            hit = cache.get(key)
            if hit is not None:
                return _Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
            return self._forward_and_store(endpoint, raw, body, key, raw_key, triple)
        try:
            return self._forward_and_store(endpoint, raw, body, key, raw_key, triple)
        finally:
            with self._lock:
                ev = self._inflight.pop(key, None)
            if ev is not None:
                ev.set()

    def _forward_and_store(self, endpoint: str, raw: bytes, body: Any, key: str, raw_key: Optional[str],
                           triple: Triple) -> _Result:
        res = self._forward("POST", endpoint, raw)
        res.request_json = True
        cache = self._cache
        if 200 <= res.status < 300 and cache is not None:
            model = body.get("model") if isinstance(body, dict) else None
            with self._lock:  # against forget(): the score may have failed while this call was out
                if triple not in self._failed:
                    cache.put(key, "/" + endpoint, model if isinstance(model, str) else None, res.status,
                              res.body, raw_key=raw_key)
        return res

    def _forward(self, method: str, endpoint: str, raw: bytes, *, stream: bool = False) -> _Result:
        cfg = self.config
        if self._closing.is_set():
            return _Result(503, _error_body("ragbridge judge gateway is shut down"), attempts=0)
        pool = self._pool
        client = self._http() if pool is None else None
        urls = self._targets.get(endpoint)
        if urls is None:
            url = self._endpoint_url(endpoint)
            parts = urlsplit(url)
            urls = self._targets[endpoint] = (url, self._endpoint_url(endpoint, public=True),
                                              parts.path + (f"?{parts.query}" if parts.query else ""))
        url, public, target = urls
        headers = {"Accept": "application/json"}
        if method == "POST":
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        last = _Result(502, _error_body(f"ragbridge judge gateway: no attempt made to {public}"))
        attempt = 0
        for attempt in range(1, cfg.max_retries + 2):
            retry_after: Optional[float] = None
            exc: Optional[Exception] = None
            with self._sem:
                if pool is not None:
                    try:
                        status, ctype_or_none, ra, content = pool.request(
                            method, target, raw if method == "POST" else None, headers)
                        ctype = ctype_or_none or "application/json"
                        retry_after = _retry_after(ra)
                    except _UpstreamTimeout as e:
                        status, content, ctype, exc = 504, b"", "application/json", e
                    except _UpstreamError as e:
                        status, content, ctype, exc = 502, b"", "application/json", e
                else:
                    try:
                        r = client.request(method, url, content=raw if method == "POST" else None, headers=headers)
                        status, content = r.status_code, r.content
                        ctype = r.headers.get("content-type", "application/json")
                        retry_after = _retry_after(r.headers.get("retry-after"))
                    except httpx.TimeoutException as e:
                        status, content, ctype, exc = 504, b"", "application/json", e
                    except httpx.TransportError as e:
                        status, content, ctype, exc = 502, b"", "application/json", e
            if exc is not None:
                kind = "timed out" if status == 504 else f"failed ({type(exc).__name__})"
                last = _Result(status, _error_body(
                    f"ragbridge judge gateway: request to {public} {kind} after {attempt} attempt(s)",
                    code="upstream_timeout" if status == 504 else "upstream_unreachable"))
            elif 200 <= status < 300:
                if stream:
                    return _Result(status, self._redact(content), content_type=ctype, attempts=attempt)
                try:
                    parsed = json.loads(content)
                except ValueError:
                    last = _Result(502, _error_body(
                        f"ragbridge judge gateway: {public} answered HTTP {status} with a body that is not JSON "
                        f"({attempt} attempt(s))", code="upstream_invalid_json"))
                else:
                    return _Result(status, self._redact(content), attempts=attempt, parsed=parsed)
            else:
                last = _Result(status, self._redact(content) or _error_body(f"upstream HTTP {status}"),
                               content_type=ctype if content else "application/json")
                if status not in RETRY_STATUSES:
                    last.attempts = attempt
                    return last
            last.attempts = attempt
            if attempt > cfg.max_retries or self._closing.is_set():
                break
            delay = random.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1)))
            if retry_after is not None:
                delay = min(retry_after, RETRY_AFTER_CAP)
            if delay > 0 and self._closing.wait(delay):
                break
        return last

    # -- accounting and audit -------------------------------------------------------------------
    def _account(self, triple: Triple, res: _Result) -> None:
        prompt = completion = 0
        if res.parsed is not None:
            prompt, completion = _usage_of(res.parsed)
        with self._lock:
            u = self._usage.get(triple)
            if u is None:
                u = self._usage[triple] = [0, 0, 0, 0, 0, 0]
            if res.cache == "hit":
                u[1] += 1
                return
            if res.attempts > 0:
                u[0] += 1
                u[4] += res.attempts - 1
            u[2] += prompt
            u[3] += completion
            if not 200 <= res.status < 300:
                u[5] += 1

    def _audit(self, triple: Triple, endpoint: str, raw: bytes, res: _Result, seconds: float) -> None:
        if self._audit_fh is None:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        prompt, completion = _usage_of(res.parsed) if res.cache != "hit" else (0, 0)
        line = (f'{{"time": "{stamp}", "backend": {_js(triple[0])}, "metric": {_js(triple[1])}, '
                f'"case_id": {_js(triple[2])}, "path": {_js("/" + endpoint)}, "status": {res.status}, '
                f'"cache_hit": {"true" if res.cache == "hit" else "false"}, "cache": "{res.cache}", '
                f'"attempts": {res.attempts}, "seconds": {seconds:.6f}, '
                f'"prompt_tokens": {prompt}, "completion_tokens": {completion}, '
                f'"request_key": "{JudgeCache.raw_key(self._upstream_public, "/" + endpoint, raw)}", '
                f'"request_bytes": {len(raw)}, "response_sha256": "{hashlib.sha256(res.body).hexdigest()}", '
                f'"response_bytes": {len(res.body)}}}').encode("utf-8")
        if not 200 <= res.status < 300:
            # The evidence of a failed call, embedded as the JSON text it is (no re-encoding); raw
            # newlines in JSON can only be whitespace, so flattening them keeps one record per line.
            line = b"".join((line[:-1], b', "request": ', _json_or_string(raw, trusted=res.request_json),
                             b', "response": ', _json_or_string(res.body, trusted=res.json_ok), b"}"))
            line = line.replace(b"\r", b" ").replace(b"\n", b" ")
        line = self._redact(line) + b"\n"
        with self._audit_lock:
            if self._audit_fh is not None:
                self._audit_fh.write(line)  # flushed every AUDIT_FLUSH_SECONDS and on close

    def _flush_audit_periodically(self) -> None:
        while not self._closing.wait(AUDIT_FLUSH_SECONDS):
            with self._audit_lock:
                if self._audit_fh is None:
                    return
                self._audit_fh.flush()


def _stdlib_thread_pool() -> type:
    """The standard library's ThreadPoolExecutor, even after a backend library's import replaced
    ``concurrent.futures.ThreadPoolExecutor`` with a subclass that records a stack on every submit."""
    cls = concurrent.futures.thread.ThreadPoolExecutor
    while cls.__module__ != "concurrent.futures.thread" and cls.__bases__:
        cls = cls.__bases__[0]
    return cls


class JudgeTransport(httpx.BaseTransport):
    """An httpx transport that hands each request to a :class:`JudgeGateway` in this process.

    The request never crosses a socket: the gateway routes it by URL path (``/v1/chat/completions``,
    ``/t/<tag>/v1/...`` from :meth:`JudgeGateway.base_url`) and attributes it to the
    :meth:`JudgeGateway.tag_scope` it was made in (no event hook needed), then caches, bounds,
    retries, counts and audits it exactly as it does requests to its loopback socket. The host part
    of the URL is not used."""

    def __init__(self, gateway: "JudgeGateway") -> None:
        self.gateway = gateway

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.gateway._require_started()
        return self.gateway._respond(request, request.read(), _CURRENT_TAG.get())


class AsyncJudgeTransport(httpx.AsyncBaseTransport):
    """:class:`JudgeTransport` for ``httpx.AsyncClient``: the gateway's blocking work (cache, upstream
    call, retries with their sleeps) runs on the gateway's worker threads; the event loop only waits."""

    def __init__(self, gateway: "JudgeGateway") -> None:
        self.gateway = gateway

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        gw = self.gateway
        gw._require_started()
        raw = await request.aread()
        # the tag_scope is read here, in the caller's context (the worker thread does not inherit it)
        return await asyncio.get_running_loop().run_in_executor(gw._executor, gw._respond, request, raw,
                                                                _CURRENT_TAG.get())


def _js(value: Optional[str]) -> str:
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


def _json_or_string(data: bytes, *, trusted: bool = False) -> bytes:
    """``data`` itself when it is a JSON document, else ``data`` as a JSON string."""
    if not data:
        return b"null"
    if not trusted:
        try:
            json.loads(data)
        except ValueError:
            return json.dumps(data.decode("utf-8", "replace"), ensure_ascii=False).encode("utf-8")
    return data
