"""What ``ragbridge judge check`` asks the judge beyond `ragbridge.judge.preflight`: which ways of
asking for a JSON object the server takes (`probe_modes`), how long one judge-sized call takes
(`time_call`), whether it runs two at once (`time_two_at_once`), and the timeout and concurrency that
follow for this machine (`propose`).

Every request goes through a gateway of its own (no cache, no retry), so a mode is reshaped exactly
as a run's requests are (`ragbridge.judge.structured`). A mode is *taken* when the server answers it
with the JSON object the schema asks for; *refused* when it says no (`rejects_structured_output`);
*answered, unusable* when it answers with something else (a server that ignores a forced tool, a
model that rambles).
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any, Optional

from .config import JudgeConfig
from .structured import FALLBACK, error_text

__all__ = ["probe_modes", "time_call", "time_two_at_once", "propose", "auto_mode"]

#: two calls at once that take this many times one alone: the server ran them one after the other
SERIAL_RATIO = 1.7
#: a call shorter than this is too short to tell waiting from noise
MIN_TIMED_SECONDS = 0.25

#: the schema of every probe: a verdict and its reason
_SCHEMA = {"type": "object", "properties": {"reason": {"type": "string", "maxLength": 200},
                                             "verdict": {"type": "string", "enum": ["yes", "no"]}},
           "required": ["reason", "verdict"], "additionalProperties": False}
#: the gateway's words around a server's refusal (`ragbridge.judge.pipeline`)
_REFUSED = re.compile(r"^ragbridge judge gateway: the judge refuses .*?: HTTP \d+: ")
_ASK = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": _SCHEMA, "strict": True}}

_CONTEXT = (
    "Refunds. A customer may ask for a refund of a monthly plan within 14 days of the charge; annual plans "
    "are refunded pro rata for the unused months, less a 10% fee, within 30 days of the renewal. Refunds go "
    "back to the card that was charged and take 5 to 10 business days to appear. A refund cannot be sent "
    "to another card or as store credit, except where a card has expired, when support issues credit. "
    "Invoices. Each charge has an invoice in Settings > Billing; a VAT number added there appears on "
    "invoices issued after it was added, not on earlier ones, which support can reissue on request. "
    "Cancelling. A plan cancelled before its renewal date stays active until that date and is not renewed; "
    "data is kept for 60 days after the end of the plan and can be exported until then. A cancelled plan can "
    "be resumed within those 60 days with its data and settings. Seats. Seats added in the middle of a "
    "billing period are charged pro rata; seats removed are credited at the next renewal, not refunded. ")


def _probe_body(model: str, max_tokens: int, big: bool = False) -> dict[str, Any]:
    """A judge's request: is an answer supported by a context; ``big``: a judge-sized one (a context of
    some 600 tokens, as a faithfulness verdict sends)."""
    context = _CONTEXT * 2 if big else "Refunds of monthly plans are possible within 14 days."
    answer = "You can get a refund within 14 days of the charge; it goes back to your card."
    return {"model": model, "temperature": 0, "max_tokens": max_tokens, "response_format": _ASK,
            "messages": [{"role": "system", "content": "You judge whether an answer is supported by a "
                          "context. Reply with a JSON object: a short reason, then the verdict yes or no."},
                         {"role": "user", "content": f"Context:\n{context}\n\nAnswer:\n{answer}\n\n"
                          "Is every claim of the answer supported by the context?"}]}


def _gateway(cfg: JudgeConfig, modes: dict[str, str], timeout: float, concurrency: int = 1) -> Any:
    from .gateway import JudgeGateway

    probe_cfg = cfg.model_copy(update={"cache_mode": "off", "max_retries": 0, "timeout": timeout,
                                       "max_concurrency": concurrency})
    return JudgeGateway(probe_cfg, structured_output=modes)


def _post(gw: Any, backend: str, body: dict, timeout: float) -> tuple[int, dict[str, Any], bytes]:
    import httpx

    with httpx.Client(transport=gw.transport(), timeout=timeout + 30) as client:
        r = client.post(gw.base_url(backend, "check", "probe", in_process=True) + "/chat/completions",
                        json=body)
    try:
        doc = r.json()
    except ValueError:
        doc = {}
    return r.status_code, doc if isinstance(doc, dict) else {}, r.content


def _verdict(doc: dict[str, Any]) -> Optional[str]:
    """What is wrong with an answer to a probe (None: it holds the JSON object asked for)."""
    try:
        message = doc["choices"][0]["message"]
        value = json.loads(message.get("content") or "")
    except (KeyError, IndexError, TypeError, ValueError):
        return "the answer holds no JSON object"
    if not isinstance(value, dict) or value.get("verdict") not in ("yes", "no"):
        return "the JSON object is not the one asked for"
    return None


def probe_modes(cfg: JudgeConfig, timeout: float = 120.0) -> dict[str, dict[str, Any]]:
    """For each mode of `FALLBACK`: ``status`` (``taken``, ``refused``, ``unusable``, ``failed``),
    the HTTP status, the seconds, and the server's words when it was not taken."""
    modes = {f"check-{m}": m for m in FALLBACK}
    out: dict[str, dict[str, Any]] = {}
    with _gateway(cfg, modes, timeout) as gw:
        for backend, mode in modes.items():
            t0 = time.monotonic()
            body = _probe_body(cfg.model, max(cfg.max_tokens or 0, 120))
            status, doc, raw = _post(gw, backend, body, timeout)
            seconds = round(time.monotonic() - t0, 3)
            cause = (gw.failure(backend, "check", "probe") or (None, ""))[0]
            if 200 <= status < 300:
                problem = _verdict(doc)
                out[mode] = {"status": "unusable" if problem else "taken", "http": status, "seconds": seconds,
                             **({"said": problem} if problem else {})}
            else:
                said = _REFUSED.sub("", error_text(raw)).split(' File "')[0]  # its words, no traceback
                out[mode] = {"status": "refused" if cause == "structured_output" else "failed",
                             "http": status, "seconds": seconds, "said": said[:300]}
    return out


def auto_mode(probed: dict[str, dict[str, Any]]) -> Optional[str]:
    """The mode ``auto`` ends up asking in on this server: the first of `FALLBACK` not refused."""
    return next((m for m in FALLBACK if probed.get(m, {}).get("status") != "refused"), None)


def time_call(cfg: JudgeConfig, mode: str, timeout: float) -> dict[str, Any]:
    """One judge-sized call (a context of some 600 tokens, up to 256 tokens of answer) in ``mode``:
    ``seconds``, ``status``, the tokens the answer reports, and the server's slots when it says (the
    parallel requests llama.cpp's server runs: ``GET /props``)."""
    with _gateway(cfg, {"check-time": mode}, timeout) as gw:
        t0 = time.monotonic()
        body = _probe_body(cfg.model, max(cfg.max_tokens or 0, 256), big=True)
        status, doc, raw = _post(gw, "check-time", body, timeout)
        seconds = time.monotonic() - t0
    usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    out = {"seconds": round(seconds, 3), "http": status, "prompt_tokens": usage.get("prompt_tokens"),
           "completion_tokens": usage.get("completion_tokens"), "slots": _slots(cfg)}
    if not 200 <= status < 300:
        out["said"] = error_text(raw)[:300]
    return out


def time_two_at_once(cfg: JudgeConfig, mode: str, timeout: float) -> dict[str, Any]:
    """Whether the server runs two requests at once: one small request alone, then two identical ones
    sent together. ``alone`` and ``together`` (the later of the two) in seconds, and ``one_at_a_time``:
    the pair took `SERIAL_RATIO` times one alone or more (the second waited for the first), None when
    a call failed or was too short to tell."""
    import threading

    body = _probe_body(cfg.model, max(cfg.max_tokens or 0, 120))
    with _gateway(cfg, {"check-pair": mode}, timeout, concurrency=2) as gw:
        t0 = time.monotonic()
        alone = _post(gw, "check-pair", body, timeout)[0]
        alone_s = time.monotonic() - t0
        statuses: list[int] = []
        t0 = time.monotonic()
        pair = [threading.Thread(target=lambda: statuses.append(_post(gw, "check-pair", body, timeout)[0]))
                for _ in range(2)]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        together_s = time.monotonic() - t0
    answered = 200 <= alone < 300 and len(statuses) == 2 and all(200 <= x < 300 for x in statuses)
    told = answered and alone_s >= MIN_TIMED_SECONDS
    return {"alone": round(alone_s, 3), "together": round(together_s, 3),
            "one_at_a_time": (together_s >= SERIAL_RATIO * alone_s) if told else None}


def _slots(cfg: JudgeConfig) -> Optional[int]:
    """How many requests the server runs at once, when it says (llama.cpp's ``/props``:
    ``total_slots``); None when it does not."""
    import httpx

    from .dialect import endpoints_of
    from .upstream import httpx_client

    ep = endpoints_of(cfg)[0]
    root = ep.base_url.removesuffix("/v1")
    try:
        with httpx_client(cfg, ep, 1) as client:
            r = client.get(f"{root}/props", headers=ep.headers(None, "GET"), timeout=5.0)
        slots = r.json().get("total_slots") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return slots if isinstance(slots, int) and slots > 0 else None


def propose(cfg: JudgeConfig, timed: dict[str, Any]) -> dict[str, Any]:
    """The timeout and concurrency for this judge on this machine, from one timed call.

    A judge's largest prompts are about twice the timed one's (a faithfulness verdict over many
    claims), so a call may take twice as long. A server that ran two identical calls at once one after
    the other (``timed["pair"]``, `time_two_at_once`) runs one request at a time: its concurrency is 1,
    since a call sent beside another only waits there, and one abandoned at its timeout is still
    computed, delaying every later one. A judge on this machine that takes more than 5 s a call is
    computing on these cores: more calls at once than it runs (its ``slots``) only wait there, so
    its concurrency is its slots, or 2 when it does not say (one call ready while the other runs), and
    each call may wait for the ones ahead of it (``max_concurrency / slots``, a server that does not
    say taken to run one at a time), its attempt counting that wait. The timeout covers the largest
    call behind the others, with half again as margin, rounded up to 30 s, never below the current
    one; any other judge keeps its concurrency."""
    t = float(timed["seconds"])
    slow_local = cfg.is_local and t > 5.0
    slots = timed.get("slots")
    serial = bool((timed.get("pair") or {}).get("one_at_a_time"))
    concurrency = 1 if serial else (slots or 2) if slow_local else cfg.max_concurrency
    behind = 1 if serial else math.ceil(concurrency / (slots or 1)) if slow_local else 1
    needed = t * 2 * behind * 1.5
    timeout = max(cfg.timeout, 30 * math.ceil(needed / 30))
    return {"timeout": timeout, "max_concurrency": concurrency, "call_seconds": round(t, 1),
            "one_at_a_time": serial,
            "timeout_now": cfg.timeout, "max_concurrency_now": cfg.max_concurrency}
