"""The stub judge's answers to TruLens 2.16's prompts (``ragbridge.testing``), registered by this
plugin.

`TruLensResponder` answers TruLens' feedback prompts: groundedness (``SOURCE: ...`` /
``STATEMENT: ...``), context relevance (``USER QUERY: ...`` / ``SEARCH RESULT: ...``), answer
relevance (``PROMPT: ...`` / ``RESPONSE: ...``) and its helpers (abstention and answerability
classifiers, the trivial-statement filter), in JSON when asked, otherwise as ``Criteria: ...
Supporting Evidence: ... Score: N`` text. `TruLensPromptResponder` comes first and answers what that
one misreads:

* context relevance and answer relevance with reasons: the chain-of-thought template (``Please
  evaluate using the following template``) replaces the ``RELEVANCE:`` marker;
* the LLM sentence splitter (``use_sent_tokenize=False``): TruLens sends its system prompt with a
  literal ``{statement}`` and the statement as the user message, so the user message is split;
* the "convert the following text into a strict JSON object" reformat call TruLens makes when a
  chain-of-thought reply is text: the text's own ``Criteria``/``Supporting Evidence``/``Score`` are
  copied into the JSON, as a faithful model would;
* ground-truth agreement (``GroundTruthAgreement.agreement_measure``, 0-10, one integer on a line):
  `agreement_score`, the content-word F1 of the response against the expected answer, capped at 3
  when the response states a number the expected answer does not have.

Verdicts use the stub's shared lexical helpers, so a faithful answer scores higher than a flawed one
and the same request always gets the same answer.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from ragbridge.testing.responders import (
    Ctx,
    JudgeReply,
    JudgeRequest,
    best_sentence,
    content_words,
    find_range,
    is_noncommittal,
    is_supported,
    numbers,
    parse_list,
    relevance,
    reply_json,
    scaled,
    short,
    split_sentences,
    support,
)

__all__ = ["TruLensResponder", "TruLensPromptResponder", "agreement_score", "responders"]

_RELEVANCE_END = r"(?:\n\s*\nRELEVANCE:|\nRELEVANCE:|\Z)"
_SOURCE = re.compile(
    r"SOURCE:\s*(.*?)\n\s*\nSTATEMENT:\s*(.*?)(?:\n\s*\n(?:Respond|Return|ANSWER|Please)|\Z)", re.S)
_QUERY_RESULT = re.compile(r"USER QUERY:\s*(.*?)\nSEARCH RESULT:\s*(.*?)" + _RELEVANCE_END, re.S)
_PROMPT_RESPONSE = re.compile(r"PROMPT:\s*(.*?)\n\s*\nRESPONSE:\s*(.*?)" + _RELEVANCE_END, re.S)


def responders() -> list:
    """This plugin's responders, in the order they are tried."""
    return [TruLensPromptResponder(), TruLensResponder()]


class TruLensResponder:
    """TruLens 2.16 feedback prompts (groundedness, context relevance, answer relevance, helpers)."""

    name = "trulens"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        system, user = req.system, req.user or req.prompt
        both = system + "\n" + user
        m_src, m_cr, m_ar = _SOURCE.search(user), _QUERY_RESULT.search(user), _PROMPT_RESPONSE.search(user)
        if "Split the following statement into individual sentences" in both:
            m = re.search(r"Statement:\s*(.*?)(?:\n\s*\nReturn each sentence|\Z)", both, re.S)
            return JudgeReply("\n".join(split_sentences(m.group(1) if m else user)), responder=self.name)
        if "Identify and remove sentences that are stylistic" in both:
            m = re.search(r"ALL STATEMENTS:\s*(.*?)\n\s*\nIMPORTANT STATEMENTS:", user, re.S)
            items = parse_list(m.group(1)) if m else []
            return JudgeReply(repr([str(s) for s in items]), responder=self.name)
        ctx: Optional[Ctx] = None
        if "ABSTENTION classifier" in system:
            m = re.search(r"STATEMENT:\s*(.*?)\n\s*\nABSTENTION:", user, re.S)
            v = 1 if is_noncommittal(m.group(1) if m else user) else 0
            return self.answer(req, Ctx(scorer=lambda: float(v), score_range=(0, 1), prompt=both))
        if "ANSWERABILITY classifier" in system:
            m = re.search(r"QUESTION:\s*(.*?)\n\s*\nSOURCE:\s*(.*?)\n\s*\nANSWERABILITY:", user, re.S)
            q, s = (m.group(1), m.group(2)) if m else (user, "")
            return self.answer(req, Ctx(query=q, context=s, scorer=lambda: float(relevance(s, q) >= 0.5),
                                        score_range=(0, 1), prompt=both))
        if m_src and ("INFORMATION OVERLAP" in system or "groundedness" in both.lower()):
            source, statement = m_src.group(1).strip(), m_src.group(2).strip()
            ctx = Ctx(context=source, subject=statement, prompt=both)
            if is_noncommittal(statement):
                ctx.scorer = lambda: 1.0
            else:
                frac = support(statement, source)[0]
                ok = is_supported(statement, source)
                ctx.scorer = lambda: frac if ok else min(frac, 0.34)
        elif m_cr:
            q, res = m_cr.group(1).strip(), m_cr.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=both, scorer=lambda: relevance(res, q))
        elif m_ar:
            q, res = m_ar.group(1).strip(), m_ar.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=both,
                      scorer=lambda: 0.0 if is_noncommittal(res) else relevance(res, q))
        if ctx is None:
            return None
        ctx.score_range = find_range(system) or find_range(user) or (0, 3)
        return self.answer(req, ctx)

    def answer(self, req: JudgeRequest, ctx: Ctx) -> JudgeReply:
        """The reply for what ``ctx`` judges: JSON when asked, else TruLens' text template."""
        lo, hi = ctx.score_range or (0, 3)
        score = int(scaled(ctx.fraction(), lo, hi, True))
        if req.schema is not None:
            ctx.score_range = (lo, hi)
            return reply_json(req, req.schema, ctx, self.name)
        crit = ctx.subject or ctx.query or "the criteria"
        evidence = (best_sentence(ctx.context, ctx.subject) if ctx.context else None) or ctx.reason(None)
        prompt = req.prompt
        if req.json_mode or "JSON object" in prompt:
            obj = {"criteria": crit, "supporting_evidence": evidence, "score": score}
            return JudgeReply(json.dumps(obj, ensure_ascii=False), score=score, responder=self.name)
        if "Supporting Evidence" in prompt:
            text = f"Criteria: {short(crit, 200)}\nSupporting Evidence: {evidence}\nScore: {score}"
            return JudgeReply(text, score=score, responder=self.name)
        return JudgeReply(f"Score: {score}", score=score, responder=self.name)


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
            ctx = Ctx(query=q, subject=res, prompt=prompt, scorer=lambda: relevance(res, q),
                      score_range=(0, 3))
            return self._finish(req, ctx)
        m = _AR.search(user)
        if m:
            q, res = m.group(1).strip(), m.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=prompt, score_range=(0, 3),
                      scorer=lambda: 0.0 if is_noncommittal(res) else relevance(res, q))
            return self._finish(req, ctx)
        return None

    def _finish(self, req: JudgeRequest, ctx: Ctx) -> JudgeReply:
        ctx.score_range = find_range(req.system) or (0, 3)
        reply = self._base.answer(req, ctx)
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
