"""The gateway's audit log: :class:`AuditLog`, one JSON line per judge call.

Each line says who asked (backend, metric, case_id, and the repeat when it is not 0), the endpoint,
``request_key`` (the SHA-256 of the upstream, path and exact request bytes: the key the cache files
the answer under, table ``aliases``, column ``raw``), the status, the cache outcome, attempts,
``seconds`` (from the request's arrival to its answer), of them ``wait_seconds`` waiting for a slot
(the bound on calls in flight, the rate limit), ``call_seconds`` at the judge (every attempt) and
``backoff_seconds`` between attempts (the rest: a wait for the same request already in flight, the
gateway's own work), the tokens
the call spent (0 for a cache hit) and the SHA-256 and size of both bodies. The
bodies themselves are written only for a call that did not succeed (status outside 2xx), where they
are the evidence; a successful answer's body is in the cache under ``request_key``. Never a header or
a key: every line passes the gateway's redaction. Lines are buffered and flushed every
:data:`FLUSH_SECONDS` and on close.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from .server import Result
from .tag import CallTag

__all__ = ["AuditLog", "FLUSH_SECONDS", "usage_of", "calls_phrase"]

FLUSH_SECONDS = 0.2  # the audit log is written in the background at most this late


class AuditLog:
    """Appends to ``path`` (made with its folder on `open`); ``redact`` cleans every line."""

    def __init__(self, path: Path, redact: Callable[[bytes], bytes]) -> None:
        self.path = Path(path)
        self.redact = redact
        self._fh: Any = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._flusher: Optional[threading.Thread] = None

    def open(self) -> "AuditLog":
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # never through a symbolic link put in its place
        self._fh = open(self.path, "ab", buffering=1 << 20,
                        opener=lambda path, flags: os.open(path, flags | os.O_NOFOLLOW, 0o666))
        self._closing.clear()
        self._flusher = threading.Thread(target=self._flush_periodically, name="ragbridge-judge-audit-flush",
                                         daemon=True)
        self._flusher.start()
        return self

    def write(self, tag: CallTag, endpoint: str, raw: bytes, res: Result, seconds: float, request_key: str,
              tokens: Optional[tuple[int, int]]) -> None:
        if self._fh is None:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        prompt, completion = tokens if tokens is not None and res.cache != "hit" else (0, 0)
        repeat_field = f'"repeat": {tag.repeat}, ' if tag.repeat else ""
        invalid = '"usage_invalid": true, ' if tokens is None else ""
        line = (f'{{"time": "{stamp}", "backend": {_js(tag.backend)}, "metric": {_js(tag.metric)}, '
                f'"case_id": {_js(tag.case_id)}, {repeat_field}"path": {_js("/" + endpoint)}, '
                f'"status": {res.status}, '
                f'"cache_hit": {"true" if res.cache == "hit" else "false"}, "cache": "{res.cache}", '
                f'"attempts": {res.attempts}, "seconds": {seconds:.6f}, '
                f'"wait_seconds": {res.wait_seconds:.6f}, "call_seconds": {res.call_seconds:.6f}, '
                f'"backoff_seconds": {res.backoff_seconds:.6f}, '
                f'"prompt_tokens": {prompt}, "completion_tokens": {completion}, {invalid}'
                f'"request_key": "{request_key}", '
                f'"request_bytes": {len(raw)}, "response_sha256": "{hashlib.sha256(res.body).hexdigest()}", '
                f'"response_bytes": {len(res.body)}}}').encode("utf-8")
        if not 200 <= res.status < 300:
            # The evidence of a failed call, embedded as the JSON text it is (no re-encoding); raw
            # newlines in JSON can only be whitespace, so flattening them keeps one record per line.
            line = b"".join((line[:-1], b', "request": ', _json_or_string(raw, trusted=res.request_json),
                             b', "response": ', _json_or_string(res.body, trusted=res.json_ok), b"}"))
            line = line.replace(b"\r", b" ").replace(b"\n", b" ")
        line = self.redact(line) + b"\n"
        with self._lock:
            if self._fh is not None:
                self._fh.write(line)  # flushed every FLUSH_SECONDS and on close

    def _flush_periodically(self) -> None:
        while not self._closing.wait(FLUSH_SECONDS):
            with self._lock:
                if self._fh is None:
                    return
                self._fh.flush()

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def usage_of(path: Path) -> dict[tuple[Optional[str], Optional[str]], dict[str, int]]:
    """What the audit log at ``path`` counts, per (backend, metric), over every session of the run
    (a resumed one's calls too): ``calls`` sent upstream (cache hits not among them), ``requests``
    (their attempts, retries included), ``retries``, ``cache_hits`` and the tokens. Empty when there is
    no such file; a line that is not JSON (a session killed mid-write) is skipped."""
    out: dict[tuple[Optional[str], Optional[str]], dict[str, int]] = {}
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return out
    with fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            u = out.setdefault((rec.get("backend"), rec.get("metric")), dict.fromkeys(
                ("calls", "requests", "retries", "cache_hits", "prompt_tokens", "completion_tokens"), 0))
            attempts = int(rec.get("attempts") or 0)
            if rec.get("cache_hit"):
                u["cache_hits"] += 1
            elif attempts > 0:
                u["calls"] += 1
                u["requests"] += attempts
                u["retries"] += attempts - 1
            u["prompt_tokens"] += int(rec.get("prompt_tokens") or 0)
            u["completion_tokens"] += int(rec.get("completion_tokens") or 0)
    return out


def calls_phrase(counts: dict) -> str:
    """A run's judge calls in words, as the terminal and the report say them: the calls sent upstream,
    the requests they took (retries included) and the answers from the cache, e.g. "51 calls, 153
    requests with 102 retries, 3 from cache"."""
    calls, retries = int(counts.get("calls") or 0), int(counts.get("retries") or 0)
    words = f"{calls} call{'' if calls == 1 else 's'}"
    if retries:
        words += f", {calls + retries} requests with {retries} retr{'y' if retries == 1 else 'ies'}"
    return words + f", {int(counts.get('cache_hits') or 0)} from cache"


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
