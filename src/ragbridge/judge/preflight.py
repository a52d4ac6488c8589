"""Before a run calls the judge: :func:`preflight` checks that the key is there and the judge
answers (``GET /models`` of each endpoint, in its dialect), so a run with a wrong URL or key stops
before anything is scored or written, with one line that says what to fix."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import httpx

from .config import JudgeConfig, JudgeConfigError, JudgeUnavailable
from .dialect import Endpoint
from .upstream import httpx_client

__all__ = ["preflight"]


def preflight(cfg: JudgeConfig, endpoints: tuple[Endpoint, Endpoint]) -> dict[str, Any]:
    """Check, before any case is scored, that the judge can answer. Raises JudgeUnavailable /
    JudgeConfigError with a one-line message; returns what was checked."""
    url = endpoints[0].public_url
    if cfg.cache_mode == "read-only":
        if cfg.cache_path is None or not Path(cfg.cache_path).is_file():
            raise JudgeUnavailable(
                f"judge cache_mode is read-only but there is no recorded cache at {cfg.cache_path}: "
                f"record one with cache_mode = \"read-write\" first (or set cache_path)")
        return {"mode": "read-only", "endpoint": url, "upstream_checked": False}
    checked = _check(cfg, endpoints[0])
    if endpoints[1] != endpoints[0]:
        checked["embeddings"] = _check(cfg, endpoints[1])
    return checked

def _check(cfg: JudgeConfig, ep: Endpoint) -> dict[str, Any]:
    url = ep.public_url
    key = (os.environ.get(ep.key_env) or None) if ep.key_env else None
    # a server elsewhere needs a key, and Azure OpenAI always does, wherever it is reached
    if not key and ep.key_env and (not ep.is_local or ep.api == "azure"):
        raise JudgeConfigError(_unset(ep, url, "needs it" + (" (Azure OpenAI always does)"
                                                              if ep.api == "azure" else "")))
    timeout = min(cfg.timeout, 10.0)
    try:
        with httpx_client(cfg, ep, 1) as client:
            r = client.get(ep.target("models"), headers=ep.headers(key, "GET"), timeout=timeout)
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
    if r.status_code in (401, 403) or (r.status_code == 400 and b"api key" in r.content.lower()):
        if not key and ep.key_env:  # a local server that asks for a key: none was sent
            raise JudgeConfigError(_unset(ep, url, f"asks for one (HTTP {r.status_code})"))
        raise JudgeUnavailable(
            f"judge endpoint {url} rejected the API key from {ep.key_env or 'nowhere'} "
            f"(HTTP {r.status_code}): "
            f"check the key" + (" and api_version" if ep.api == "azure" else ""))
    listed = None
    stub = r.headers.get("x-ragbridge-stub") == "1"
    if r.status_code == 200:
        with contextlib.suppress(Exception):
            listed = cfg.model in {m.get("id") for m in r.json().get("data", [])}
    return {"mode": cfg.cache_mode, "endpoint": url, "upstream_checked": True,
            "models_status": r.status_code, "model_listed": listed, "key_set": bool(key), "stub": stub}


def _unset(ep: Endpoint, url: str, why: str) -> str:
    """The error of a key whose variable is not set: which variable, and how to set it."""
    return (f"judge API key missing: the environment variable {ep.key_env} is not set, and the judge at "
            f"{url} {why}: set it (export {ep.key_env}=... in the shell that runs ragbridge), or name the "
            f"variable that holds the key with api_key_env (--judge-api-key-env), or replay a recorded "
            f"cache with cache_mode = \"read-only\"")
