"""The stub judge's answers to TruLens's prompts, 2.16's and 1.5's (``ragbridge.stub``), registered by
this plugin.

TruLens' feedback templates put each judged text after an upper-case slot label at the start of a
line (`SLOTS`: ``SOURCE:`` / ``STATEMENT:`` for groundedness, ``USER QUERY:`` / ``SEARCH RESULT:`` for
context relevance, ``PROMPT:`` / ``RESPONSE:`` for answer relevance, ``QUESTION:`` / ``SOURCE:`` /
``ANSWERABILITY:`` and ``STATEMENT:`` / ``ABSTENTION:`` for its classifiers, ``ALL STATEMENTS:`` /
``IMPORTANT STATEMENTS:`` for the trivial-statement filter); `TruLensResponder` recognises a request by
the set of slots it fills, never by the wording of its instructions. A slot's text runs to the next
slot, or to the instructions after it: the first paragraph that names a field of TruLens' answer
model ``ChainOfThoughtResponse`` (``criteria``, ``supporting_evidence``, ``score``), with the
paragraph that introduces them. TruLens 1.5 differs in three places, each recognised beside 2.16's
form: its groundedness prompt labels the statement ``Statement:`` (`SLOT_ALIASES`), its
chain-of-thought template is introduced by "Please answer using the entire template below.", and
its agreement prompt appends the response bare, without "The response to grade is:".

The answer takes the shape the request asks for: the ``ChainOfThoughtResponse`` JSON schema (the
Responses API, as a strict ``json_schema``), a JSON object when the prompt names the model's fields
(``"supporting_evidence"``) or asks for a JSON object, TruLens' text template when it shows it
(``Supporting Evidence:``), else ``Score: N``. Three of TruLens' calls fill no slot and are
recognised by what they carry:

* the LLM sentence splitter (``use_sent_tokenize=False``): TruLens sends the template with its
  ``{statement}`` slot unfilled as the system prompt and the statement as the user message;
* the reformat call TruLens makes when a chain-of-thought reply is text: a system prompt naming the
  three fields of ``ChainOfThoughtResponse`` and the text to convert; its own ``Criteria`` /
  ``Supporting Evidence`` / ``Score`` are copied into the JSON, as a faithful model would;
* ground-truth agreement (``GroundTruthAgreement.agreement_measure``, 0-10, one integer on a line):
  one system message whose slots are introduced by ``responses to the prompt:``, ``The expected
  answer is:`` and ``The response to grade is:``; the answer is `agreement_score`, the content-word
  F1 of the response against the expected answer, capped at 3 when the response states a number
  the expected answer does not have.

Verdicts use the stub's shared lexical helpers, so a faithful answer scores higher than a flawed one
and the same request always gets the same answer.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from ragbridge.plugin import (
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

__all__ = ["TruLensResponder", "SLOTS", "SLOT_ALIASES", "ANSWER_FIELDS", "agreement_score", "responders",
           "slots"]

#: the slot labels of TruLens' feedback templates
SLOTS = ("SOURCE", "STATEMENT", "USER QUERY", "SEARCH RESULT", "PROMPT", "RESPONSE", "QUESTION",
         "ANSWERABILITY", "ABSTENTION", "ALL STATEMENTS", "IMPORTANT STATEMENTS", "RELEVANCE")
#: the fields of TruLens' answer model, ``ChainOfThoughtResponse``
ANSWER_FIELDS = ("criteria", "supporting_evidence", "score")
#: slot labels of older TruLens versions, by the label they stand for: 1.x's groundedness prompt
#: says ``Statement:`` (a slot only beside ``SOURCE:``)
SLOT_ALIASES = {"Statement": "STATEMENT"}
_SLOT = re.compile(rf"^({'|'.join(sorted((*SLOTS, *SLOT_ALIASES), key=len, reverse=True))}):[ \t]*", re.M)
_INSTRUCTIONS = re.compile(r'"criteria"|supporting_evidence|^Criteria:|^Supporting Evidence:|^Score:', re.M)
#: the paragraph that introduces the instructions: "... the following template:" (2.x), "Please answer
#: using the entire template below." (1.x's chain-of-thought template)
_INTRO = re.compile(r"(:|the entire template below\.)\Z")
#: ground-truth agreement: 2.x labels the response ("The response to grade is:"), 1.x appends it bare
#: after the instruction's last line
_AGREE = re.compile(
    r"responses to the prompt:\s*(.*?)\n\s*The expected answer is:\s*(.*?)\n\s*\n.*?"
    r"give the integer score and nothing more\.\n(?:\s*The response to grade is:\n)?(.*)\Z", re.S)


def responders() -> list:
    """This plugin's responders, in the order they are tried."""
    return [TruLensResponder()]


def _judged_text(value: str) -> str:
    """A slot's value up to the instructions that follow it (see the module docstring)."""
    paragraphs = re.split(r"\n[ \t]*\n", value)
    kept = []
    for p in paragraphs:
        if _INSTRUCTIONS.search(p.strip()):
            break
        kept.append(p)
    while len(kept) > 1 and _INTRO.search(kept[-1].strip()):  # "... the following template:"
        kept.pop()
    return "\n\n".join(kept).strip()


def slots(text: str) -> dict[str, str]:
    """``{slot label: judged text}`` of the TruLens slots filled in ``text``."""
    marks = list(_SLOT.finditer(text))
    labels = {m.group(1) for m in marks}
    marks = [m for m in marks if m.group(1) not in SLOT_ALIASES or "SOURCE" in labels]
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[SLOT_ALIASES.get(m.group(1), m.group(1))] = _judged_text(text[m.end():end])
    return out


def _names_answer_fields(text: str) -> bool:
    return all(re.search(rf"[\"']{f}[\"']", text) for f in ANSWER_FIELDS)


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


class TruLensResponder:
    """TruLens 2.16's feedback prompts (groundedness, context relevance, answer relevance, helpers)."""

    name = "trulens"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        system, user = req.system, req.user
        if "{statement}" in system and user:  # the LLM sentence splitter
            return JudgeReply("\n".join(split_sentences(user)), responder=self.name)
        s = slots(user)
        if not s:
            if _names_answer_fields(system) and user:
                return self._reformat(user)
            m = _AGREE.search(req.prompt)
            if m:
                score = agreement_score(m.group(3).strip(), m.group(2).strip())
                return JudgeReply(str(score), score=score, responder=self.name)
            return None
        ctx = self._judged(s, req.prompt)
        if isinstance(ctx, JudgeReply):
            return ctx
        if ctx is None:
            return None
        if ctx.score_range is None:  # the scale the instructions name (not a number of a judged text)
            instructions = user
            for value in s.values():
                instructions = instructions.replace(value, "")
            ctx.score_range = find_range(system) or find_range(instructions) or (0, 3)
        return self.answer(req, ctx)

    def _judged(self, s: dict[str, str], prompt: str) -> Optional[Ctx | JudgeReply]:
        """What the slots ``s`` judge against what (a reply right away for the statement filter)."""
        if "ALL STATEMENTS" in s:
            return JudgeReply(repr([str(x) for x in parse_list(s["ALL STATEMENTS"])]), responder=self.name)
        if "ABSTENTION" in s and "STATEMENT" in s:
            v = 1.0 if is_noncommittal(s["STATEMENT"]) else 0.0
            return Ctx(scorer=lambda: v, score_range=(0, 1), prompt=prompt)
        if "ANSWERABILITY" in s and {"QUESTION", "SOURCE"} <= s.keys():
            q, src = s["QUESTION"], s["SOURCE"]
            return Ctx(query=q, context=src, scorer=lambda: float(relevance(src, q) >= 0.5),
                       score_range=(0, 1), prompt=prompt)
        if {"SOURCE", "STATEMENT"} <= s.keys():  # groundedness
            source, statement = s["SOURCE"], s["STATEMENT"]
            ctx = Ctx(context=source, subject=statement, prompt=prompt)
            if is_noncommittal(statement):
                ctx.scorer = lambda: 1.0
            else:
                frac = support(statement, source)[0]
                ok = is_supported(statement, source)
                ctx.scorer = lambda: frac if ok else min(frac, 0.34)
            return ctx
        if {"USER QUERY", "SEARCH RESULT"} <= s.keys():  # context relevance
            q, res = s["USER QUERY"], s["SEARCH RESULT"]
            return Ctx(query=q, subject=res, prompt=prompt, scorer=lambda: relevance(res, q))
        if {"PROMPT", "RESPONSE"} <= s.keys():  # answer relevance
            q, res = s["PROMPT"], s["RESPONSE"]
            return Ctx(query=q, subject=res, prompt=prompt,
                       scorer=lambda: 0.0 if is_noncommittal(res) else relevance(res, q))
        return None

    def answer(self, req: JudgeRequest, ctx: Ctx) -> JudgeReply:
        """The reply for what ``ctx`` judges, in the shape the request asks for."""
        lo, hi = ctx.score_range or (0, 3)
        score = int(scaled(ctx.fraction(), lo, hi, True))
        if req.schema is not None:
            ctx.score_range = (lo, hi)
            return reply_json(req, req.schema, ctx, self.name)
        crit = ctx.subject or ctx.query or "the criteria"
        evidence = (best_sentence(ctx.context, ctx.subject) if ctx.context else None) or ctx.reason(None)
        prompt = req.prompt
        if req.json_mode or "supporting_evidence" in prompt or "JSON object" in prompt:
            obj = {"criteria": crit, "supporting_evidence": evidence, "score": score}
            return JudgeReply(json.dumps(obj, ensure_ascii=False), score=score, responder=self.name)
        if "Supporting Evidence" in prompt:
            text = f"Criteria: {short(crit, 200)}\nSupporting Evidence: {evidence}\nScore: {score}"
            return JudgeReply(text, score=score, responder=self.name)
        return JudgeReply(f"Score: {score}", score=score, responder=self.name)

    def _reformat(self, text: str) -> JudgeReply:
        crit = re.search(r"Criteria:\s*(.*?)(?:\nSupporting Evidence:|\Z)", text, re.S)
        ev = re.search(r"Supporting Evidence:\s*(.*?)(?:\nScore:|\Z)", text, re.S)
        sc = re.search(r"Score:\s*(\d+)", text)
        score = int(sc.group(1)) if sc else 0
        obj = {"criteria": (crit.group(1).strip() if crit else "") or "criteria",
               "supporting_evidence": (ev.group(1).strip() if ev else "") or "none",
               "score": score}
        return JudgeReply(json.dumps(obj, ensure_ascii=False), score=score, responder=self.name)
