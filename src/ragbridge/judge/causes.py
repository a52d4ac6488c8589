"""Why judged scores failed, and what to change: the causes a run's summary groups its errors by.

The gateway knows why a call failed (:attr:`ragbridge.judge.server.Result.cause`, kept per score by
the ledger: `ragbridge.judge.JudgeGateway.failure`); a score that failed with no failed call failed
on the judge's reply (the library could not use it) or in the library. `cause_of` gives a failed
score its cause and reason, `fix` the setting to change for it, in the words of the command line,
``ragbridge.toml`` and Python alike.
"""

from __future__ import annotations

import re
from typing import Any, Optional

__all__ = ["CAUSES", "cause_of", "fix", "one_line"]

#: each cause, as the summary names it
CAUSES = {
    "timeout": "timed out",
    "structured_output": "structured output refused",
    "rate_limited": "rate limited",
    "server_error": "judge server error",
    "unreachable": "judge unreachable",
    "key_rejected": "key rejected",
    "not_found": "not found at the judge",
    "rejected": "request refused",
    "reply_too_large": "answer too large",
    "invalid_json": "answer not JSON",
    "unreadable": "answer unreadable",
    "unusable_reply": "reply unusable",
    "cache_miss": "not in the recorded cache",
    "plugin": "plugin error",
    "other": "backend error",
}

#: a score's error that says the judge's reply could not be used (not JSON, a value out of range, cut
#: off), as ragbridge's rubric and the libraries word it
_REPLY = re.compile(r"unusable reply|not one JSON object|JSONDecodeError|Expecting value|ValidationError"
                    r"|invalid JSON|Unterminated string|Extra data"
                    r"|invalid label|received invalid label|not a chat completion|max_tokens|finish_reason"
                    r"|could not parse|failed to parse|OutputParserException|InstructorRetryException"
                    r"|No tool calls|returned no content|None content", re.I)


def cause_of(error: str, failure: Optional[tuple[str, str]]) -> tuple[str, str]:
    """(cause, reason) of a score that failed with ``error``; ``failure``: the (cause, words) of its
    first judge call that failed, if one did."""
    if failure is not None and failure[0] in CAUSES:
        return failure[0], failure[1].removeprefix("ragbridge judge gateway: ")
    if str(error).startswith("PluginError: "):  # what a backend returned breaks the plugin API
        return "plugin", one_line(str(error).removeprefix("PluginError: "))
    text = " ".join(str(error).split())
    return ("unusable_reply" if _REPLY.search(text) else "other"), one_line(str(error))


#: the words of the first attempt's exception in a retrying library's dump (instructor's)
_INNER = re.compile(r"<exception>(?P<words>.*?)</exception>", re.S)
#: pydantic's pointer to its documentation, a line of its own in every validation error
_DOCS_LINK = re.compile(r"\s*For further information visit \S+")
#: the longest reason a summary quotes
REASON_CHARS = 300


def one_line(error: str) -> str:
    """A score's error as one line of a summary: its exception's name and first line, the words of
    the first attempt in a retrying library's dump (not the dump of every attempt and completion),
    pydantic's validation error on one line without its documentation link; at most `REASON_CHARS`."""
    text = str(error).strip()
    inner = _INNER.search(text)
    name = re.match(r"^(\w+(?:Error|Exception)):", text)
    prefix = f"{name.group(1)}: " if inner is not None and name is not None else ""
    body = _DOCS_LINK.sub("", inner.group("words") if inner is not None else text)
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        lines = lines[-1:]  # the exception itself, not the frames
    head = lines[0] if lines else ""
    if re.search(r"\d+ validation errors? for ", head):  # pydantic's: the field and why, on the lines after
        head = " ".join(lines[:3])
    head = prefix + head
    return head if len(head) <= REASON_CHARS else head[:REASON_CHARS - 1] + "…"


def fix(cause: str, backend: str, config: Any, mode: str = "auto") -> str:
    """What to change for a score of ``backend`` that failed for ``cause``, the judge's configuration
    being ``config`` and the backend's structured-output mode ``mode`` (their current values named)."""
    timeout = getattr(config, "timeout", None)
    concurrency = getattr(config, "max_concurrency", None)
    if cause == "timeout":
        return (f"raise the judge's timeout (now {timeout:g} s: timeout in [judge] of ragbridge.toml, "
                f"--judge-timeout, JudgeConfig(timeout=...)) or lower max_concurrency (now {concurrency}, "
                "--max-concurrency): a call waits at the server for the calls ahead of it; "
                "`ragbridge judge check` times one call, measures how many the server runs at once and "
                "proposes both")
    if cause == "structured_output":
        return (f"choose a structured-output mode the server takes for {backend} (now {mode!r}): "
                f"--option {backend}.structured_output=MODE ([backends.{backend}] in ragbridge.toml), or "
                "for every backend structured_output in [judge] (--judge-structured-output); `ragbridge "
                "judge check` lists the modes the server takes")
    if cause == "rate_limited":
        return ("set requests_per_minute in [judge] of ragbridge.toml (--requests-per-minute) to the "
                f"judge's limit, or lower max_concurrency (now {concurrency}); then run the same command "
                "again to retry them")
    if cause == "server_error":
        return ("see the judge server's log for the error; when it was passing, run the same command again "
                "to retry them")
    if cause == "unreachable":
        return ("check that the judge server is running and that base_url is right "
                "(`ragbridge judge check`), then run the same command again to retry them")
    if cause == "key_rejected":
        return "check the key in the environment variable api_key_env names (`ragbridge judge check`)"
    if cause == "not_found":
        return "check base_url and the model (`ragbridge judge check` says what the server serves)"
    if cause == "rejected":
        return ("the server refuses this request every time (or gave the same error twice): change what "
                "its reason names (the context size the server was started with, max_tokens in [judge], "
                f"the model); a reason that says the server is busy (\"try again\") asks for fewer calls at "
                f"once: lower max_concurrency (now {concurrency}, --max-concurrency; `ragbridge judge "
                "check` measures what the server runs at once)")
    if cause == "reply_too_large":
        return "raise max_reply_bytes in [judge] of ragbridge.toml if such answers are expected"
    if cause in ("invalid_json", "unreadable"):
        return "check that base_url is the judge's OpenAI-compatible API (usually ending in /v1)"
    if cause == "unusable_reply":
        return ("ask in a mode that constrains the reply (structured_output json_object or tool, when the "
                "server takes it: `ragbridge judge check`), raise max_tokens in [judge] if replies are cut "
                "off, or use a stronger judge model; then run the same command again")
    if cause == "cache_miss":
        return ("record the judge cache again (cache_mode = \"read-write\" with a key), or check that the "
                "judge settings match the recording")
    if cause == "plugin":
        return (f"fix the plugin of the {backend} backend (the reason says what it returned), or tell its "
                "author; the judge and the cases are not at fault")
    return "run the same command again to retry them; if they fail again, the reason says why"
