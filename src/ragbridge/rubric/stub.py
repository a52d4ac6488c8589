"""The stub judge's answers to the rubric prompts: deterministic, lexical, labelled as the stub's.

Registered from this plugin through the ``ragbridge_register_stub_responders`` hook, so the stub core
(``ragbridge.stub``) knows nothing of these prompts. A request is ours when the first line of its
system prompt is one of `prompts.TASKS`; the texts are read back from the user message's headings
(`prompts.HEADINGS`). Verdicts use the stub's word-overlap functions (``ragbridge.stub.responders``):

* ``split``: the answer's sentences, declining ones left out;
* ``verify``: SUPPORTED when the claim is lexically supported by the passages (half its content words
  and every number); CONTRADICTED when half its words are there but a number is not; else NOT_FOUND;
* ``check``: the same verdicts against the one text shown (a passage, the reference or the answer),
  without reasons;
* ``grade`` / ``grade_chunk``: a fraction mapped onto the scale (lowest + round(fraction * span)):
  answer_relevance: word overlap of answer and question (0 for a decline); answer_correctness: share
  of the answer's sentences supported by the reference; abstention: 1 when the answer declines exactly
  when the passages share under a third of the question's content words; a passage: relevant or not to
  the question; any other rubric: share of the answer's sentences supported by the passages (or by the
  reference, or the overlap with the question, whichever the rubric shows);
* ``compare``: the answer with the higher fraction of its rubric wins, equal fractions tie (so the
  stub has no position bias).

With the stub made noisy (``StubJudge(noise=...)``, a test device), a ``grade`` level moves to a
neighbouring level with that probability (`ragbridge.stub.responders.noisy_level`).

The reply follows the key order the prompt asks for. None of this measures judgement: it exercises
the plumbing (requests, parsing, evidence, reports) without a model.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from ragbridge.stub.responders import (
    JudgeReply,
    JudgeRequest,
    is_noncommittal,
    is_relevant,
    is_supported,
    noisy_level,
    numbers,
    relevance,
    split_sentences,
    support,
)

from .prompts import HEADINGS, TASKS

__all__ = ["RubricResponder"]

_TASK_OF = {line: task for task, line in TASKS.items()}
_HEADING = re.compile(r"^### (.+)$", re.M)
_PASSAGE = re.compile(r"^\[(\d+)\] ", re.M)


def _sections(text: str) -> dict[str, str]:
    found = list(_HEADING.finditer(text))
    out = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        out[m.group(1).strip()] = text[m.end():end].strip("\n")
    return out


def _passages(text: str) -> list[str]:
    parts = _PASSAGE.split(text or "")
    return [parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)]


def _declines(text: str) -> bool:
    t = text.lower().replace("\u2019", "'")
    return is_noncommittal(text) or any(p in t for p in ("don't have", "no information", "couldn't find"))


def _share_supported(text: str, evidence: str) -> float:
    sents = split_sentences(text) or ([text] if text.strip() else [])
    return sum(is_supported(s, evidence) for s in sents) / len(sents) if sents else 0.0


def _fraction(name: str, s: dict[str, str], answer_key: str = "Answer",
              ctx_key: str = "Context passages") -> float:
    question = s.get(HEADINGS["question"][4:], "")
    answer = s.get(answer_key, "")
    context = " ".join(_passages(s.get(ctx_key, "")))
    reference = s.get(HEADINGS["reference"][4:], "")
    if name == "answer_relevance":
        return 0.0 if is_noncommittal(answer) else relevance(answer, question)
    if name == "answer_correctness":
        return _share_supported(answer, reference)
    if name == "abstention":
        holds = relevance(context, question) >= 1 / 3
        return 1.0 if _declines(answer) != holds else 0.0
    if ctx_key in s and answer_key in s:
        return _share_supported(answer, context)
    if reference and answer_key in s:
        return _share_supported(answer, reference)
    return relevance(answer, question)


def _verdict(claim: str, context: str) -> tuple[str, str]:
    """SUPPORTED, CONTRADICTED or NOT_FOUND for ``claim`` against ``context``, with why."""
    frac, found, _ = support(claim, context)
    if is_supported(claim, context):
        return "SUPPORTED", f"{len(found)} content words of the claim are in the passages"
    if frac >= 0.5 and numbers(claim) - numbers(context):
        other = sorted(numbers(claim) - numbers(context))
        return "CONTRADICTED", "the passages give other numbers than " + ", ".join(other)
    return "NOT_FOUND", f"only {frac:.0%} of the claim's content words are in the passages"


def _on_scale(frac: float, values: list[int]) -> int:
    lo, hi = values[0], values[-1]
    target = lo + round(max(0.0, min(1.0, frac)) * (hi - lo))
    return min(values, key=lambda v: abs(v - target))


def _dump(req: JudgeRequest, obj: dict) -> JudgeReply:
    # the key order the prompt asks for: "reason" first unless another key comes before it
    sys = req.system
    keys = sorted(obj, key=lambda k: (sys.find(f'"{k}": '), k) if f'"{k}": ' in sys else (1 << 30, k))
    return JudgeReply(json.dumps({k: obj[k] for k in keys}, ensure_ascii=False), responder="rubric")


class RubricResponder:
    name = "rubric"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        task = _TASK_OF.get(req.system.split("\n", 1)[0].strip())
        if task is None:
            return None
        s = _sections(req.user)
        m = re.search(r"^Criterion: (\S+)", req.system, re.M)
        name = m.group(1) if m else ""
        if task == "split":
            answer = s.get("Answer", "")
            claims = [x for x in split_sentences(answer) if not is_noncommittal(x)]
            return _dump(req, {"claims": claims})
        if task in ("verify", "check"):
            context = (" ".join(_passages(s.get("Context passages", ""))) if task == "verify"
                       else s.get("Text", ""))
            claims = [re.sub(r"^\d+\.\s*", "", line) for line in s.get("Claims", "").splitlines()
                      if line.strip()]
            out = []
            for i, claim in enumerate(claims, 1):
                verdict, why = _verdict(claim, context)
                out.append({"claim": i, "verdict": verdict} if task == "check" else
                           {"claim": i, "reason": why + " (stub judge: word overlap)", "verdict": verdict})
            return _dump(req, {"verdicts": out})
        if task == "compare":
            a = _fraction(name, s, "Answer A", "Context passages A")
            b = _fraction(name, s, "Answer B", "Context passages B")
            winner = "tie" if abs(a - b) < 1e-9 else ("A" if a > b else "B")
            why = f"stub judge: word-overlap fraction A {a:.2f}, B {b:.2f}"
            return _dump(req, {"reason": why, "winner": winner})
        lv = re.search(r"one of: ([\d, ]+)\.", req.system)
        values = sorted(int(v) for v in lv.group(1).split(",")) if lv else [0, 1]
        if task == "grade_chunk":
            frac = 1.0 if is_relevant(s.get("Passage", ""), s.get("Question", "")) else 0.0
            level = _on_scale(frac, values)  # the relevance verdict carries the stub's noise, if any
        else:
            frac = _fraction(name, s)
            level = noisy_level(_on_scale(frac, values), values)
        return _dump(req, {"reason": f"stub judge: word-overlap fraction {frac:.2f} gives level {level}",
                           "score": level})
