"""Before a run calls the judge: :func:`preflight` checks that the key is there, the judge answers,
and it serves the models the configuration names, so a run with a wrong URL, key or model stops
before anything is scored or written, with one line that says what to fix.

The model check, per model (``model`` on the chat endpoint, ``embedding_model`` on the embeddings
endpoint):

* the server's list (``GET /models``, in its dialect) names it: served. A name without a tag is
  the same as its ``:latest`` tag (Ollama's rule), and ``models/NAME`` is ``NAME`` (Gemini's list);
* else one request of the model is made (one token of chat, or one short embedding): a list does not
  always name what a server serves (llama.cpp's server answers any name with its one model,
  Anthropic serves aliases it does not list, an Azure resource lists the models it may deploy but
  not its deployments, a server may not implement ``/models`` at all). A 404, or a 400 that says the
  model is unknown, is refused with the models the server lists and the fix for that server
  (``ollama pull``, vLLM's ``--served-model-name``, the Azure deployment's name); an answer is
  served; anything else (a 5xx, a timeout, a 501) cannot tell, and the run goes on, as the check says.

ragbridge's stub judge answers any model name unless it speaks a server's dialect; it says so with
the header ``X-Ragbridge-Stub-Models: any`` on its list, and is not asked.

A model's request is a judge call the upstream may charge for: a run passes its budget
(:class:`Probes`), so a request is sent only while the budget has room, and the run counts each one
sent in its budget and its ``judge-calls.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any, Optional

import httpx

from .config import JudgeConfig, JudgeConfigError, JudgeUnavailable
from .dialect import Endpoint, shape_body
from .ledger import Probes
from .redact import Redactor
from .upstream import httpx_client

__all__ = ["preflight", "detect_stub", "ModelNotServed", "Probes"]

#: how long the model's request may take (a local server may load the model first)
PROBE_SECONDS = 30.0
#: how long a server on this machine may take to list its models
LOCAL_LIST_SECONDS = 60.0
#: the most listed models an error names
SHOWN_MODELS = 12
_UNKNOWN_MODEL = re.compile(r"invalid model|unknown model|no such model|model_not_found|deploymentnotfound"
                            r"|model\b.{0,120}\b(not found|does not exist|not exist)", re.I | re.S)


#: where a fix names the setting (Python's or the command line's words for it)
WHERE = "\x00setting\x00"


class ModelNotServed(JudgeUnavailable):
    """The judge's server does not serve a model the configuration names."""


def preflight(cfg: JudgeConfig, endpoints: tuple[Endpoint, Endpoint],
              probes: Optional[Probes] = None) -> dict[str, Any]:
    """Check, before any case is scored, that the judge can answer with the models it is configured
    with. Raises JudgeUnavailable (`ModelNotServed` for a model the server does not serve) /
    JudgeConfigError with a one-line message; returns what was checked: ``endpoint``, ``stub``,
    ``stub_settings`` (ragbridge's stub judge's, when it is one: `detect_stub`),
    ``models_status`` (of ``GET /models``), ``models`` (the names the server lists, or None),
    ``model_check`` (how the model was found: ``listed``, ``answered``, ``any name``, or why it
    could not be told), ``model_listed``; with a separate embeddings server, the same under
    ``embeddings``; with ``embedding_model``, ``embedding_model_check``. ``probes``: the model
    requests it may send, and counts those it sends (none is sent when it has no room)."""
    probes = probes if probes is not None else Probes()
    url = endpoints[0].public_url
    if cfg.cache_mode == "read-only":
        if cfg.cache_path is None or not Path(cfg.cache_path).is_file():
            raise JudgeUnavailable(
                f"judge cache_mode is read-only but there is no recorded cache at {cfg.cache_path}: "
                f"record one with JudgeConfig(cache_mode=\"read-write\") first (or set cache_path)",
                cli=f"judge cache_mode is read-only but there is no recorded cache at {cfg.cache_path}: "
                    f"record one with cache_mode = \"read-write\" first (or set cache_path)")
        return {"mode": "read-only", "endpoint": url, "upstream_checked": False}
    checked = _reach(cfg, endpoints[0])
    checked["model_check"] = _check_model(cfg, endpoints[0], checked, cfg.model, "chat/completions",
                                          probes)
    checked["model_listed"] = checked["model_check"] == "listed" if checked["models"] is not None else None
    embedded = checked
    if endpoints[1] != endpoints[0]:
        embedded = checked["embeddings"] = _reach(cfg, endpoints[1])
    if cfg.embedding_model:
        found = _check_model(cfg, endpoints[1], embedded, cfg.embedding_model, "embeddings", probes)
        checked["embedding_model_check"] = found
    return _public(checked)


def detect_stub(cfg: JudgeConfig, endpoint: Endpoint) -> Optional[str]:
    """The settings of ragbridge's stub judge when it is the judge at ``endpoint`` on this machine
    (its list of models says so), else None: any other server, one that does not answer, one not on
    this machine (no request is made to it). For a run that calls nothing (a dry run), which checks
    nothing else."""
    if not endpoint.is_local:
        return None
    try:
        with httpx_client(cfg, endpoint, 1) as client:
            r = client.get(endpoint.target("models"), headers=endpoint.headers(None, "GET"), timeout=2.0)
    except (httpx.HTTPError, ValueError):
        return None
    return _stub_settings(r)


def _stub_settings(r: httpx.Response) -> Optional[str]:
    """What ragbridge's stub judge says of its settings (`ragbridge.judge.config.identity_url`), or
    None when the answer is not the stub's."""
    if r.headers.get("x-ragbridge-stub") != "1":
        return None
    return r.headers.get("x-ragbridge-stub-settings") or "unknown"


def _public(checked: dict[str, Any]) -> dict[str, Any]:
    """``checked`` without the internals kept for the model checks."""
    out = {k: v for k, v in checked.items() if not k.startswith("_")}
    if "embeddings" in out:
        out["embeddings"] = _public(out["embeddings"])
    return out


def _reach(cfg: JudgeConfig, ep: Endpoint) -> dict[str, Any]:
    """``GET /models`` of ``ep``: raises for a server that cannot be reached or rejects the key;
    returns what it said (the models it lists, None when it lists none)."""
    url = ep.public_url
    key = (os.environ.get(ep.key_env) or None) if ep.key_env else None
    # a server elsewhere needs a key, and Azure OpenAI always does, wherever it is reached
    if not key and ep.key_env and (not ep.is_local or ep.api == "azure"):
        raise _unset(ep, url, "needs it" + (" (Azure OpenAI always does)" if ep.api == "azure" else ""))
    # a server on this machine that runs one request at a time (llama-cpp-python's) answers nothing,
    # its list of models included, while it computes an answer: it is given longer
    timeout = min(cfg.timeout, LOCAL_LIST_SECONDS if ep.is_local else 10.0)
    try:
        with httpx_client(cfg, ep, 1) as client:
            r = client.get(ep.target("models"), headers=ep.headers(key, "GET"), timeout=timeout)
    except httpx.TimeoutException:
        busy = (" (or busy: a server that runs one request at a time answers nothing while it computes "
                "another)") if ep.is_local else ""
        raise JudgeUnavailable(
            f"judge endpoint {url} did not answer within {timeout:g} s: check that the server is up "
            f"and reachable from here{busy}") from None
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
            raise _unset(ep, url, f"asks for one (HTTP {r.status_code})")
        raise JudgeUnavailable(
            f"judge endpoint {url} rejected the API key from {ep.key_env or 'nowhere'} "
            f"(HTTP {r.status_code}): "
            f"check the key" + (" and api_version" if ep.api == "azure" else ""))
    stub = r.headers.get("x-ragbridge-stub") == "1"
    models = _listed(r) if r.status_code == 200 else None
    return {"mode": cfg.cache_mode, "endpoint": url, "upstream_checked": True, "models_status": r.status_code,
            "models": models, "key_set": bool(key), "stub": stub, "stub_settings": _stub_settings(r),
            "_any": stub and r.headers.get("x-ragbridge-stub-models") == "any", "_key": key,
            "_owners": _owners(r) if models is not None else set()}


def _listed(r: httpx.Response) -> Optional[list[str]]:
    """The model names a ``/models`` answer lists (OpenAI's ``data[].id``; Ollama's ``models[].name``
    as llama.cpp also gives them), or None when the answer is not such a list."""
    with contextlib.suppress(ValueError):
        doc = r.json()
        if isinstance(doc, dict):
            names = [m.get("id") for m in doc.get("data") or [] if isinstance(m, dict)]
            names += [m.get("name") for m in doc.get("models") or [] if isinstance(m, dict)]
            if isinstance(doc.get("data"), list) or isinstance(doc.get("models"), list):
                return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))
    return None


def _owners(r: httpx.Response) -> set[str]:
    """The ``owned_by`` of a list's entries: vLLM and llama.cpp's server write their own name there."""
    with contextlib.suppress(ValueError, AttributeError):
        return {m.get("owned_by") for m in r.json().get("data") or [] if isinstance(m, dict)} - {None}
    return set()


def _names(name: str) -> set[str]:
    """The names a list may give ``name`` under (see the module docstring)."""
    bare = name.removeprefix("models/")
    found = {name, bare, f"models/{bare}"}
    if ":" not in bare:
        found.add(f"{bare}:latest")
    elif bare.endswith(":latest"):
        found.add(bare[: -len(":latest")])
    return found


def _check_model(cfg: JudgeConfig, ep: Endpoint, reached: dict[str, Any], model: str, endpoint: str,
                 probes: Probes) -> str:
    """How ``model`` was found served at ``ep`` (``listed``, ``any name``, ``answered``), or why it could
    not be told; raises `ModelNotServed` when the server says it does not serve it."""
    listed = reached["models"]
    if reached["_any"]:
        return "any name"
    if listed is not None and ep.api != "azure" and _names(model) & set(listed):
        return "listed"
    if not probes.take():
        return "not checked: the run's budget of judge calls is spent, so no request of it was sent"
    try:
        r = _probe(cfg, ep, model, endpoint, reached["_key"])
    except httpx.TimeoutException:
        return f"not checked: a request of it had no answer within {min(cfg.timeout, PROBE_SECONDS):g} s"
    except (httpx.HTTPError, ValueError) as exc:
        return f"not checked: a request of it failed ({type(exc).__name__})"
    if r.status_code < 300:
        return "answered"
    said = _message(r, reached["_key"])
    if r.status_code == 404 or (r.status_code == 400 and _UNKNOWN_MODEL.search(said)):
        raise _not_served(cfg, ep, reached, model, endpoint, r.status_code, said)
    return f"not checked: a request of it got HTTP {r.status_code}" + (f" ({said})" if said else "")


def _probe(cfg: JudgeConfig, ep: Endpoint, model: str, endpoint: str, key: Optional[str]) -> httpx.Response:
    """One small request of ``model``: a one-token chat completion, or the embedding of one word."""
    if endpoint == "embeddings":
        body: dict[str, Any] = {"model": model, "input": "ok"}
    else:
        body = shape_body(cfg, endpoint, {"model": model, "max_tokens": 1,
                                          "messages": [{"role": "user", "content": "Say OK."}]})
    with httpx_client(cfg, ep, 1) as client:
        return client.post(ep.target(endpoint, model), content=json.dumps(body).encode(),
                           headers=ep.headers(key), timeout=min(cfg.timeout, PROBE_SECONDS))


def _message(r: httpx.Response, key: Optional[str]) -> str:
    """The server's own words in an error answer (its ``message``, ``error`` or ``detail``), one line,
    without the key in any form."""
    redact = Redactor()
    if key:
        redact.keys([key])
    raw = redact(r.content[:4096]).decode("utf-8", "replace")
    text = raw
    with contextlib.suppress(ValueError):
        doc = json.loads(raw)
        doc = doc[0] if isinstance(doc, list) and doc else doc  # Gemini answers a list
        inner = doc.get("error", doc) if isinstance(doc, dict) else doc
        if isinstance(inner, dict):
            text = str(inner.get("message") or inner.get("detail") or inner.get("code") or raw)
        elif isinstance(inner, str):
            text = inner
    text = " ".join(text.split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _not_served(cfg: JudgeConfig, ep: Endpoint, reached: dict[str, Any], model: str, endpoint: str,
                status: int, said: str) -> ModelNotServed:
    """The refusal: which model, what the server said, what it lists, and that server's fix (in
    Python's terms, and the command line's as ``cli``)."""
    setting, option = ("embedding_model", "--embedding-model") if endpoint == "embeddings" else \
        ("model", "--judge-model")
    what = "embedding model" if endpoint == "embeddings" else "judge model"
    head = f"{what} {model!r} is not served at {ep.public_url} (HTTP {status}" + (
        f": {said})" if said else ")")
    listed, owners = reached["models"], reached["_owners"]
    if ep.api == "azure":
        kind = "embedding" if endpoint == "embeddings" else "chat"
        parts = [f"the resource has no deployment named {model!r}",
                 f"set {WHERE} to the name of your {kind} deployment (listed under Deployments in the "
                 f"Azure portal, or by `az cognitiveservices account deployment list`)"]
    else:
        if listed is None:
            lists = (f"the server lists no models (GET /models: HTTP {reached['models_status']}): check "
                     f"base_url too (an OpenAI-compatible server's usually ends in /v1)")
        elif not listed:
            lists = "the server lists no models"
        else:
            lists = "it serves: " + ", ".join(listed[:SHOWN_MODELS]) + (
                f" and {len(listed) - SHOWN_MODELS} more" if len(listed) > SHOWN_MODELS else "")
        if "try pulling it" in said:
            fix = f"pull it first (`ollama pull {model}`), or set {WHERE} to one it serves"
        elif "vllm" in owners:
            fix = (f"set {WHERE} to the name vLLM serves (its --served-model-name, else the model's path as "
                   "given to vllm serve)")
        else:
            fix = f"set {WHERE} to one it serves"
        parts = [lists, fix]
    text = "; ".join([head, *parts])
    return ModelNotServed(text.replace(WHERE, f"JudgeConfig({setting}=...)"),
                          cli=text.replace(WHERE, f"{setting} in [judge] of ragbridge.toml (or {option})"))


def _unset(ep: Endpoint, url: str, why: str) -> JudgeConfigError:
    """The error of a key whose variable is not set: which variable, and how to set it (in Python's
    terms, and the command line's as ``cli``)."""
    head = (f"judge API key missing: the environment variable {ep.key_env} is not set, and the judge at "
            f"{url} {why}")
    return JudgeConfigError(
        f"{head}: set it (os.environ[{ep.key_env!r}] = ...), or name the variable that holds the key "
        f"with JudgeConfig(api_key_env=...), or replay a recorded cache with "
        f"JudgeConfig(cache_mode=\"read-only\")",
        cli=f"{head}: set it (export {ep.key_env}=... in the shell that runs ragbridge), or name the "
            f"variable that holds the key with api_key_env (--judge-api-key-env), or replay a recorded "
            f"cache with cache_mode = \"read-only\"")
