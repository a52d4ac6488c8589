"""What the stub judge answers: OpenAI-shaped chat completions, completions, responses and
embeddings for a request body, deterministically (the verdicts come from
:mod:`ragbridge.stub.responders`). Every answer is labelled as the stub's (``model``
``ragbridge-stub/<requested model>``, ``system_fingerprint`` ``ragbridge-stub``)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from typing import Any, Optional

from .responders import JudgeReply, JudgeRequest, content_words, respond

__all__ = ["chat_completion", "completion", "response", "embeddings", "embed", "simulate", "STUB_FINGERPRINT",
           "EMBED_DIM"]

STUB_FINGERPRINT = "ragbridge-stub"
EMBED_DIM = 256
CREATED = 1735689600  # fixed, so identical requests get byte-identical answers


def _tokens(text: str) -> int:
    """Realistic-looking token count: words * 1.3, at least 1."""
    return max(1, int(math.ceil(len(re.findall(r"\S+", text or "")) * 1.3)))


def embed(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Deterministic hashed bag-of-words vector (content words, signed buckets), L2-normalised."""
    vec = [0.0] * dim
    for w in content_words(text):
        h = hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest()
        idx = int.from_bytes(h[:4], "little") % dim
        vec[idx] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


def _id(prefix: str, body: Any) -> str:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return f"{prefix}-{digest}"

def _model(body: dict) -> str:
    return f"{STUB_FINGERPRINT}/{body.get('model') or 'default'}"

def chat_completion(body: dict, *, malformed: bool = False) -> dict:
    req = JudgeRequest.from_chat(body)
    reply = respond(req)
    content = reply.content
    if malformed:
        content = _break_json(content)
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    finish = "stop"
    if reply.tool_name and not malformed:
        message["content"] = None
        message["tool_calls"] = [{"id": _id("call", body)[:32], "type": "function",
                                  "function": {"name": reply.tool_name, "arguments": content}}]
        finish = "tool_calls"
    n = int(body.get("n") or 1)
    logprobs = None
    if body.get("logprobs"):
        logprobs = _logprobs(content, reply, int(body.get("top_logprobs") or 1))
    choices = [{"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish}
               for i in range(max(1, n))]
    prompt_tokens = _tokens(req.prompt)
    completion_tokens = _tokens(content or "") * max(1, n)
    return {"id": _id("chatcmpl", body), "object": "chat.completion", "created": CREATED,
            "model": _model(body), "system_fingerprint": STUB_FINGERPRINT, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}

def completion(body: dict) -> dict:
    prompt = body.get("prompt")
    text = prompt if isinstance(prompt, str) else "\n".join(map(str, prompt or []))
    reply = respond(JudgeRequest(endpoint="chat", model=str(body.get("model", "")),
                                 messages=[("user", text)], body=body))
    pt, ct = _tokens(text), _tokens(reply.content)
    return {"id": _id("cmpl", body), "object": "text_completion", "created": CREATED,
            "model": _model(body), "system_fingerprint": STUB_FINGERPRINT,
            "choices": [{"index": 0, "text": reply.content, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}

def response(body: dict, *, malformed: bool = False) -> dict:
    req = JudgeRequest.from_responses(body)
    reply = respond(req)
    text = _break_json(reply.content) if malformed else reply.content
    it, ot = _tokens(req.prompt), _tokens(text)
    rid = _id("resp", body)
    return {
        "id": rid, "object": "response", "created_at": CREATED, "status": "completed",
        "model": _model(body), "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
        "output": [{"type": "message", "id": "msg-" + rid[5:], "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "parallel_tool_calls": True, "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": {"input_tokens": it, "output_tokens": ot, "total_tokens": it + ot,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
        "system_fingerprint": STUB_FINGERPRINT,
    }

def embeddings(body: dict) -> dict:
    inp = body.get("input")
    if isinstance(inp, str):
        texts = [inp]
    elif isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp):
        texts = [" ".join(f"t{x}" for x in inp)]
    elif isinstance(inp, list):
        texts = [x if isinstance(x, str) else " ".join(f"t{t}" for t in x) for x in inp]
    else:
        texts = [""]
    dim = int(body.get("dimensions") or EMBED_DIM)
    as_b64 = body.get("encoding_format") == "base64"
    data = []
    for i, t in enumerate(texts):
        vec = embed(t, dim)
        emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii") if as_b64 else vec
        data.append({"object": "embedding", "index": i, "embedding": emb})
    pt = sum(_tokens(t) for t in texts)
    return {"object": "list", "data": data, "model": _model(body),
            "system_fingerprint": STUB_FINGERPRINT, "usage": {"prompt_tokens": pt, "total_tokens": pt}}


def simulate(endpoint: str, body: Any) -> dict:
    """The stub's answer to a request for ``endpoint`` (``chat/completions``, ``responses``,
    ``embeddings``, ``completions``), made in this process: what a dry run answers a cache miss with
    (``JudgeGateway.simulate``)."""
    body = body if isinstance(body, dict) else {}
    if endpoint == "responses":
        return response(body)
    if endpoint == "embeddings":
        return embeddings(body)
    if endpoint == "completions":
        return completion(body)
    return chat_completion(body)


def _break_json(content: Optional[str]) -> str:
    """A reply the caller cannot read: a JSON answer cut after two thirds and left unterminated; any
    other answer (a plain number, labelled lines) replaced by an unterminated JSON fragment, as a cut
    plain answer may still read as one (``10`` cut to ``1``)."""
    content = (content or "").strip()
    if not content.startswith(("{", "[")):
        return '{"unterminated'
    cut = max(1, len(content) * 2 // 3)
    return content[:cut].rstrip("}] ") + ', "unterminated'


def _logprobs(content: Optional[str], reply: JudgeReply, top: int) -> dict:
    """Every token certain (logprob 0): a caller that weights the score token by its probabilities
    then gets the plain score."""
    out = []
    for tok in re.findall(r"\d+|[A-Za-z_]+|\s+|[^\w\s]", content or ""):
        entry = {"token": tok, "logprob": 0.0, "bytes": list(tok.encode())}
        out.append({**entry, "top_logprobs": [entry]})
    return {"content": out, "refusal": None}
