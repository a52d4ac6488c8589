"""The request dialects the stub judge speaks, each under a path prefix of its own.

A test (or a user testing a configuration) points a judge at ``stub.url + "/<dialect>..."`` and the
stub checks every request as that server would: its paths, where the key goes and what a missing or
wrong one gets, what an unknown model gets (each server's own status and error shape), and then
answers as the plain stub does. Without a prefix the stub is a lenient OpenAI-compatible server
(``/v1/...`` or ``/...``, any key).

========== ============================================== ==========================================
prefix     paths (after the prefix)                       key
========== ============================================== ==========================================
openai     ``/v1/...``                                    ``Authorization: Bearer`` (401
                                                          ``invalid_api_key``); unknown model: 404
                                                          ``model_not_found``
azure      ``/openai/deployments/<deployment>/<endpoint>`` ``api-key`` (a Bearer key: 401, it wants
           and ``/openai/{models,responses}``, each with  an Entra token); no ``api-version``: 404
           ``?api-version=``                              ``Resource not found``; an unknown
                                                          deployment: 404 ``DeploymentNotFound``
ollama     ``/v1/...``                                    none (any Authorization is ignored);
                                                          unknown model: 404 ``not_found_error``
                                                          ``model "x" not found, try pulling it
                                                          first``
vllm       ``/v1/...``                                    Bearer when the stub has ``api_key`` (as
                                                          ``vllm serve --api-key``): 401
                                                          ``{"error": "Unauthorized"}``; unknown
                                                          model: 404 ``NotFoundError`` (the
                                                          ``{"error": {...}}`` shape of vLLM 0.10
                                                          and later)
llamacpp   ``/v1/...`` or ``/...``                        Bearer or ``X-Api-Key`` when the stub has
                                                          ``api_key`` (``--api-key``), not for
                                                          ``/health``, ``/models``; embeddings: 501
                                                          (a server started without
                                                          ``--embeddings``); any model name: it
                                                          lists its one model by its file
llama-     ``/v1/...``; no ``/v1/responses`` (404         Bearer when the stub has ``api_key``
cpp-python ``{"detail": "Not Found"}``); ``response_format``  (``--api_key``): 401; any model name;
           other than ``text`` or ``json_object`` (OpenAI  embeddings: 500 (a server started
           structured outputs, ``json_schema``): HTTP 500, without ``--embedding``); lists its one
           its request validation's words as the message   model by its path
           (`LLAMA_CPP_PYTHON_REJECTION`); a message whose
           content is a list of parts: HTTP 500 (a GGUF's
           chat template joins strings); a forced tool and
           ``json_object`` with a ``schema`` are taken
anthropic  ``/v1/...``; no ``/v1/embeddings`` (404)       ``x-api-key`` or Bearer; Anthropic's error
                                                          shape (``authentication_error``)
gemini     ``/v1beta/openai/...``                         Bearer; none: 403 ``PERMISSION_DENIED``;
                                                          wrong: 400 ``API key not valid``; errors
                                                          are a JSON list
litellm    ``/...`` or ``/v1/...``                        Bearer or ``x-litellm-api-key``; unknown
                                                          model: 400 ``Invalid model name``
========== ============================================== ==========================================

A key is right when it equals the stub's ``api_key``, or, when the stub has none, when it is not
empty. A model is known when the stub lists it in ``models``.

``GET /models`` answers as each server does (`listing`): OpenAI, LiteLLM, Ollama and vLLM list the
known models (vLLM's entries ``owned_by: vllm``, with ``root`` and ``max_model_len``); llama.cpp's
server lists its one model by its file (``owned_by: llamacpp``), whatever names it answers to;
Anthropic lists dated ids (``claude-sonnet-4-5-20250929``) and serves the undated alias too; Gemini
lists ``models/<name>``; an Azure resource lists the models it can deploy (a catalogue with their
capabilities), not its deployments. A stub made with ``lists_models=False`` is a server that does
not implement ``/models`` (older llama.cpp builds, some proxies): 404 as that server answers an
unknown path.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union
from urllib.parse import parse_qs

from ..stub.answers import CREATED

__all__ = ["DIALECTS", "NO_LISTING", "Routed", "Rejected", "listing", "route"]

ENDPOINTS = ("chat/completions", "completions", "responses", "embeddings", "models")


@dataclass
class Routed:
    """A request the dialect accepts: the stub's route (``/chat/completions``...) and, for Azure,
    the model its deployment stands for."""

    route: str
    model: Optional[str] = None


@dataclass
class Rejected:
    """What the real server answers a request it refuses."""

    status: int
    payload: Any


Outcome = Union[Routed, Rejected]


@dataclass
class Request:
    method: str
    path: str  # after the dialect's prefix, without the query
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    api_key: Optional[str]  # what the stub expects (None: any non-empty key)
    models: list[str]

    def key_ok(self, given: Optional[str]) -> bool:
        if not given:
            return False
        if self.api_key is None:
            return True
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.api_key.encode("utf-8"))

    def bearer(self) -> Optional[str]:
        value = self.headers.get("authorization") or ""
        return value[7:].strip() if value[:7].lower() == "bearer " else None

    @property
    def model(self) -> Optional[str]:
        model = self.body.get("model") if isinstance(self.body, dict) else None
        return model if isinstance(model, str) else None


def _openai_error(message: str, etype: str = "invalid_request_error", code: Any = None) -> dict:
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


def _endpoint(path: str, prefix: str = "/v1/") -> Optional[str]:
    if not path.startswith(prefix):
        return None
    endpoint = path[len(prefix):].strip("/")
    return endpoint if endpoint in ENDPOINTS else None


def _openai(r: Request) -> Outcome:
    endpoint = _endpoint(r.path)
    if endpoint is None:
        return Rejected(404, _openai_error(f"Invalid URL ({r.method} {r.path})"))
    if not r.key_ok(r.bearer()):
        return Rejected(401, _openai_error("Incorrect API key provided. You can find your API key at "
                                           "https://platform.openai.com/account/api-keys.",
                                           code="invalid_api_key"))
    if not _model_known(r, endpoint):
        return Rejected(404, _openai_error(f"The model `{r.model}` does not exist or you do not have access "
                                           "to it.", code="model_not_found"))
    return Routed("/" + endpoint)


_AZURE_KEY = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
              "a valid key for an active subscription and use a correct regional API endpoint for your "
              "resource.")


def _azure(r: Request) -> Outcome:
    if not (r.query.get("api-version") or [""])[0]:
        return Rejected(404, {"error": {"code": "404", "message": "Resource not found"}})
    if r.headers.get("api-key") is None and r.bearer() is not None:
        return Rejected(401, {"error": {"code": "401", "message": (
            "Unauthorized. Access token is missing, invalid, audience is incorrect "
            "(https://cognitiveservices.azure.com), or have expired.")}})
    if not r.key_ok(r.headers.get("api-key")):
        return Rejected(401, {"error": {"code": "401", "message": _AZURE_KEY}})
    parts = [p for p in r.path.split("/") if p]
    if parts[:1] != ["openai"]:
        return Rejected(404, {"error": {"code": "404", "message": "Resource not found"}})
    if len(parts) >= 4 and parts[1] == "deployments":
        deployment, endpoint = parts[2], "/".join(parts[3:])
        if endpoint not in ("chat/completions", "completions", "embeddings"):
            return Rejected(404, {"error": {"code": "404", "message": "Resource not found"}})
        if deployment not in r.models:
            return Rejected(404, {"error": {"code": "DeploymentNotFound", "message": (
                "The API deployment for this resource does not exist. If you created the deployment "
                "within the last 5 minutes, please wait a moment and try again.")}})
        return Routed("/" + endpoint, model=deployment)
    if parts[1:] in (["models"], ["responses"]):
        return Routed("/" + parts[1])
    return Rejected(404, {"error": {"code": "404", "message": "Resource not found"}})


def _model_known(r: Request, endpoint: str) -> bool:
    return r.method != "POST" or endpoint == "models" or r.model in r.models


def _ollama(r: Request) -> Outcome:
    endpoint = _endpoint(r.path)
    if endpoint is None:
        return Rejected(404, "404 page not found")
    if r.model and ":" not in r.model and f"{r.model}:latest" in r.models:
        return Routed("/" + endpoint)  # a name without a tag is its :latest
    if not _model_known(r, endpoint):
        return Rejected(404, _openai_error(f'model "{r.model}" not found, try pulling it first',
                                           "not_found_error"))
    return Routed("/" + endpoint)


def _vllm(r: Request) -> Outcome:
    endpoint = _endpoint(r.path)
    if r.api_key is not None and not r.key_ok(r.bearer()):
        return Rejected(401, {"error": "Unauthorized"})
    if endpoint is None:
        return Rejected(404, {"detail": "Not Found"})
    if not _model_known(r, endpoint):
        return Rejected(404, {"error": {"message": f"The model `{r.model}` does not exist.",
                                        "type": "NotFoundError", "param": "model", "code": 404}})
    return Routed("/" + endpoint)


def _llamacpp(r: Request) -> Outcome:
    endpoint = _endpoint(r.path) or _endpoint(r.path, "/")
    public = r.path.rstrip("/") in ("/health", "/models", "/v1/models")
    if r.api_key is not None and not public and not r.key_ok(r.bearer() or r.headers.get("x-api-key")):
        return Rejected(401, {"error": {"code": 401, "message": "Invalid API Key",
                                        "type": "authentication_error"}})
    if endpoint is None:
        return Rejected(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
    if endpoint == "embeddings":
        return Rejected(501, {"error": {"code": 501, "message": "This server does not support embeddings. "
                                        "Start it with `--embeddings`", "type": "not_supported_error"}})
    return Routed("/" + endpoint)


#: what llama-cpp-python's server (0.3.36, with FastAPI 0.165) answers a chat request whose
#: ``response_format`` is not ``text`` or ``json_object``: its request validation fails inside its route,
#: and its error handler answers every such exception HTTP 500 with the exception's text (``KIND``: the
#: type asked for)
LLAMA_CPP_PYTHON_REJECTION = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
    "\"Input should be 'text' or 'json_object'\", 'input': 'KIND', 'ctx': {'expected': \"'text' or "
    "'json_object'\"}}\n\n  File \"/usr/lib/python3/site-packages/llama_cpp/server/app.py\", line 376, in "
    "create_chat_completion\n    POST /v1/chat/completions")


def _llama_cpp_python(r: Request) -> Outcome:
    endpoint = _endpoint(r.path)
    if r.api_key is not None and not r.key_ok(r.bearer()):
        return Rejected(401, {"detail": "Invalid API key"})
    if endpoint is None or endpoint == "responses":
        return Rejected(404, {"detail": "Not Found"})
    if endpoint == "embeddings" and r.method == "POST":
        return _llama_cpp_python_error("Llama model must be created with embedding=True to call this method")
    messages = r.body.get("messages") if isinstance(r.body, dict) else None
    if endpoint == "chat/completions" and any(isinstance(m, dict) and isinstance(m.get("content"), list)
                                              for m in messages or ()):
        # a model's own chat template (the GGUF's) joins the contents as strings
        return _llama_cpp_python_error('can only concatenate str (not "list") to str')
    fmt = r.body.get("response_format") if isinstance(r.body, dict) else None
    if endpoint == "chat/completions" and isinstance(fmt, dict) and fmt.get("type") not in ("text",
                                                                                          "json_object"):
        return _llama_cpp_python_error(LLAMA_CPP_PYTHON_REJECTION.replace("KIND", str(fmt.get("type"))))
    return Routed("/" + endpoint)


def _llama_cpp_python_error(message: str) -> Rejected:
    return Rejected(500, {"error": {"message": message, "type": "internal_server_error", "param": None,
                                    "code": None}})


def _anthropic_error(status: int, etype: str, message: str) -> Rejected:
    return Rejected(status, {"type": "error", "error": {"type": etype, "message": message}})


ANTHROPIC_DATE = "20250929"


def _anthropic_known(r: Request) -> bool:
    """Anthropic serves a dated id and its undated alias."""
    model = r.model or ""
    return model in r.models or model.removesuffix(f"-{ANTHROPIC_DATE}") in r.models


def _anthropic(r: Request) -> Outcome:
    given = r.headers.get("x-api-key") or r.bearer()
    if not given:
        return _anthropic_error(401, "authentication_error", "x-api-key header is required")
    if not r.key_ok(given):
        return _anthropic_error(401, "authentication_error", "invalid x-api-key")
    endpoint = _endpoint(r.path)
    if endpoint is None or endpoint in ("embeddings", "responses", "completions"):
        return _anthropic_error(404, "not_found_error", "Not Found")
    if r.method == "POST" and endpoint != "models" and not _anthropic_known(r):
        return _anthropic_error(404, "not_found_error", f"model: {r.model}")
    return Routed("/" + endpoint)


def _gemini_error(status: int, code: str, message: str) -> Rejected:
    return Rejected(status, [{"error": {"code": status, "message": message, "status": code}}])


def _gemini(r: Request) -> Outcome:
    given = r.bearer()
    if not given:
        return _gemini_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers "
                             "without established identity). Please use API Key or other form of API "
                             "consumer identity to call this API.")
    if not r.key_ok(given):
        return _gemini_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
    endpoint = _endpoint(r.path, "/v1beta/openai/")
    if endpoint is None or endpoint in ("responses", "completions"):
        return _gemini_error(404, "NOT_FOUND", "Not Found")
    model = (r.model or "").removeprefix("models/")
    if r.method == "POST" and endpoint != "models" and model not in r.models:
        return _gemini_error(404, "NOT_FOUND", f"models/{model} is not found for API version v1beta")
    return Routed("/" + endpoint)


def _litellm(r: Request) -> Outcome:
    given = r.bearer() or r.headers.get("x-litellm-api-key")
    if not given:
        return Rejected(401, {"error": {"message": "Authentication Error, No api key passed in.",
                                        "type": "auth_error", "param": "None", "code": "401"}})
    if not r.key_ok(given):
        return Rejected(401, {"error": {"message": "Authentication Error, Invalid proxy server token "
                                        "passed. Received API Key = sk-...", "type": "auth_error",
                                        "param": "None", "code": "401"}})
    endpoint = _endpoint(r.path) or _endpoint(r.path, "/")
    if endpoint is None:
        return Rejected(404, {"detail": "Not Found"})
    if not _model_known(r, endpoint):
        return Rejected(400, {"error": {"message": f"{{'error': '/{endpoint}: Invalid model name passed in "
                                        f"model={r.model}. Call `/v1/models` to view available models for "
                                        f"your key.'}}", "type": "None", "param": "None", "code": "400"}})
    return Routed("/" + endpoint)


def _listed(models: list[str], owned_by: str, **extra: Any) -> dict:
    return {"object": "list", "data": [{"id": m, "object": "model", "created": CREATED, "owned_by": owned_by,
                                        **extra} for m in models]}


#: the model file llama.cpp's server lists (whatever name a request gives, it answers with this model)
LLAMACPP_FILE = "/models/stub-model-q4_k_m.gguf"
#: what an Azure resource lists at /openai/models: the models it can deploy, not its deployments
AZURE_CATALOGUE = ("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06", "text-embedding-3-small")


def listing(dialect: Optional[str], models: list[str]) -> Any:
    """What ``GET /models`` of the server ``dialect`` lists when it knows ``models`` (see the module
    docstring); None: the stub's own list."""
    if dialect == "vllm":
        return _listed(models, "vllm", root=models[0] if models else None, parent=None, max_model_len=32768,
                       permission=[])
    if dialect == "ollama":
        return {"object": "list", "data": [{"id": m, "object": "model", "created": CREATED,
                                            "owned_by": "library"} for m in models]}
    if dialect == "llamacpp":
        return {"models": [{"name": LLAMACPP_FILE, "model": LLAMACPP_FILE, "type": "model"}],
                "object": "list", "data": [{"id": LLAMACPP_FILE, "object": "model", "created": CREATED,
                                            "owned_by": "llamacpp", "meta": {"n_ctx_train": 32768}}]}
    if dialect == "llama-cpp-python":
        return {"object": "list", "data": [{"id": LLAMACPP_FILE, "object": "model", "owned_by": "me",
                                            "permissions": []}]}
    if dialect == "anthropic":
        dated = [m if m[-8:].isdigit() else f"{m}-{ANTHROPIC_DATE}" for m in models]
        return {"data": [{"type": "model", "id": m, "display_name": m, "created_at": "2025-09-29T00:00:00Z"}
                         for m in dated], "has_more": False, "first_id": dated[0] if dated else None,
                "last_id": dated[-1] if dated else None}
    if dialect == "gemini":
        return {"object": "list", "data": [{"id": f"models/{m}", "object": "model", "owned_by": "google"}
                                           for m in models]}
    if dialect == "azure":
        return {"object": "list", "data": [
            {"id": m, "object": "model", "status": "succeeded", "lifecycle_status": "generally-available",
             "capabilities": {"chat_completion": "embedding" not in m, "embeddings": "embedding" in m,
                              "inference": True, "fine_tune": False}, "created_at": CREATED}
            for m in AZURE_CATALOGUE]}
    if dialect in ("openai", "litellm"):
        return _listed(models, "openai")
    return None


#: what a server that does not implement ``/models`` answers it (status, body)
NO_LISTING: dict[Optional[str], tuple[int, Any]] = {
    None: (404, _openai_error("ragbridge stub: no route GET /models")),
    "openai": (404, _openai_error("Invalid URL (GET /v1/models)")),
    "azure": (404, {"error": {"code": "404", "message": "Resource not found"}}),
    "ollama": (404, "404 page not found"),
    "vllm": (404, {"detail": "Not Found"}),
    "llamacpp": (404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}),
    "llama-cpp-python": (404, {"detail": "Not Found"}),
    "anthropic": (404, {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}),
    "gemini": (404, [{"error": {"code": 404, "message": "Not Found", "status": "NOT_FOUND"}}]),
    "litellm": (404, {"detail": "Not Found"}),
}


DIALECTS: dict[str, Callable[[Request], Outcome]] = {
    "openai": _openai, "azure": _azure, "ollama": _ollama, "vllm": _vllm, "llamacpp": _llamacpp,
    "llama-cpp-python": _llama_cpp_python,
    "anthropic": _anthropic, "gemini": _gemini, "litellm": _litellm,
}


def route(dialect: str, method: str, path: str, query: str, headers: Mapping[str, str], body: Any,
          api_key: Optional[str], models: list[str]) -> Outcome:
    """What the server ``dialect`` does with this request (``path`` after the dialect's prefix)."""
    return DIALECTS[dialect](Request(method, path, parse_qs(query, keep_blank_values=True), headers, body,
                                     api_key, models))
