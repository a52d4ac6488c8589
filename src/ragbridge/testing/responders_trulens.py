"""Stub-judge answers for the TruLens 2.16 prompts that the generic TruLens responder misreads.

Registered ahead of the built-in responders (see the end of :mod:`ragbridge.testing.responders`):

* context relevance with reasons: ``USER QUERY: ...\\nSEARCH RESULT: ...`` followed by the
  chain-of-thought template (``Please evaluate using the following template``), which replaces the
  ``RELEVANCE:`` marker the generic pattern waits for;
* answer relevance with reasons: ``PROMPT: ...\\n\\nRESPONSE: ...`` followed by the same template;
* the LLM sentence splitter (``use_sent_tokenize=False``): TruLens sends its system prompt with a
  literal ``{statement}`` and the statement as the user message, so the user message is split;
* the "convert the following text into a strict JSON object" reformat call TruLens makes when a
  chain-of-thought reply is text: the text's own ``Criteria``/``Supporting Evidence``/``Score`` are
  copied into the JSON, as a faithful model would;
* ground-truth agreement (``GroundTruthAgreement.agreement_measure``, 0-10, one integer on a line):
  the content-word F1 of the response against the expected answer, capped at 3 when the response
  states a number the expected answer does not have.

Verdicts use the shared lexical helpers, so a faithful answer scores higher than a flawed one and
the same request always gets the same answer.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from ragbridge.testing.responders import (
    Ctx,
    JudgeReply,
    JudgeRequest,
    TruLensResponder,
    content_words,
    is_noncommittal,
    numbers,
    register,
    relevance,
    split_sentences,
)

__all__ = ["TruLensPromptResponder", "agreement_score"]

_COT = r"(?:\n\s*\n\s*Please evaluate using the following template|\n\s*\n\s*RELEVANCE:|\nRELEVANCE:|\Z)"
_CR = re.compile(r"USER QUERY:\s*(.*?)\nSEARCH RESULT:\s*(.*?)" + _COT, re.S)
_AR = re.compile(r"PROMPT:\s*(.*?)\n\s*\nRESPONSE:\s*(.*?)" + _COT, re.S)
_AGREE = re.compile(
    r"responses to the prompt:\s*(.*?)\n\s*The expected answer is:\s*(.*?)\n\s*Answer only with an integer"
    r".*?The response to grade is:\n(.*)\Z", re.S)
_REFORMAT = "Convert the following text into a strict JSON object"
_SPLIT = "Split the following statement into individual sentences"


def agreement_score(response: str, expected: str) -> int:
    """0..10: content-word F1 of ``response`` against ``expected``; at most 3 with a foreign number."""
    r, e = set(content_words(response)), set(content_words(expected))
    if not r or not e:
        return 0
    inter = len(r & e)
    if not inter:
        return 0
    p, rec = inter / len(r), inter / len(e)
    score = int(round(10 * 2 * p * rec / (p + rec)))
    if numbers(response) - numbers(expected):
        score = min(score, 3)
    return max(0, min(10, score))


class TruLensPromptResponder:
    name = "trulens"

    def __init__(self) -> None:
        self._base = TruLensResponder()

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        system = req.system
        user = req.user
        prompt = req.prompt
        if _SPLIT in system and user:
            return JudgeReply("\n".join(split_sentences(user)), responder=self.name)
        if _REFORMAT in system and user:
            return self._reformat(user)
        m = _AGREE.search(prompt)
        if m:
            s = agreement_score(m.group(3).strip(), m.group(2).strip())
            return JudgeReply(str(s), score=s, responder=self.name)
        if "Please evaluate using the following template" not in user:
            return None
        m = _CR.search(user)
        if m:
            q, res = m.group(1).strip(), m.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=prompt, scorer=lambda: relevance(res, q), score_range=(0, 3))
            return self._finish(req, ctx)
        m = _AR.search(user)
        if m:
            q, res = m.group(1).strip(), m.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=prompt, score_range=(0, 3),
                      scorer=lambda: 0.0 if is_noncommittal(res) else relevance(res, q))
            return self._finish(req, ctx)
        return None

    def _finish(self, req: JudgeRequest, ctx: Ctx) -> JudgeReply:
        from ragbridge.testing.responders import find_range

        ctx.score_range = find_range(req.system) or (0, 3)
        reply = self._base._answer(req, ctx)
        reply.responder = self.name
        return reply

    def _reformat(self, text: str) -> JudgeReply:
        crit = re.search(r"Criteria:\s*(.*?)(?:\nSupporting Evidence:|\Z)", text, re.S)
        ev = re.search(r"Supporting Evidence:\s*(.*?)(?:\nScore:|\Z)", text, re.S)
        sc = re.search(r"Score:\s*(\d+)", text)
        score = int(sc.group(1)) if sc else 0
        obj = {"criteria": (crit.group(1).strip() if crit else "") or "criteria",
               "supporting_evidence": (ev.group(1).strip() if ev else "") or "none",
               "score": score}
        return JudgeReply(json.dumps(obj, ensure_ascii=False), score=score, responder=self.name)


register(TruLensPromptResponder(), first=True)
