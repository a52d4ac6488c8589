"""The stub judge's answers to Phoenix evals' classification prompts, 3.9.4's and 2.13.0's
(``ragbridge.stub``), registered by this plugin.

Phoenix sends one user message whose texts sit in XML tags inside a ``<data>`` block (``<query>``,
``<context>``, ``<response>`` for faithfulness; ``<request>``, ``<retrieved_information>`` for
retrieval relevance; ``<input>``, ``<output>`` for refusal) and asks for ``{"explanation", "label"}``
through a JSON schema named ``extract_structured_data`` whose ``label`` is an enum of the
evaluator's choices (as a strict ``json_schema`` response format or, after a 400, as a forced tool
call). The generic schema filler cannot read those tags and would answer the first label every
time, so `PhoenixResponder` decides with the stub's lexical toy judge (word overlap):

* faithful / unfaithful: unfaithful when a statement of the response has a number that neither the
  context nor the query has, or when most of its statements are not supported by the context
  (``is_supported``: half of a statement's content words occur in it); a sentence that declines, or
  has fewer than two content words ("No.", "Yes!"), makes no claim;
* relevant / irrelevant: ``is_relevant(retrieved information, request)``;
* relevant / unrelated (document relevance, before 3.5: ``<question>``, ``<document_text>``; "the
  document text contains an answer to the question"): stricter than retrieval relevance, half the
  question's content words occur in the document text (``relevance >= 0.5``);
* refused / answered: refused when the output declines (``is_noncommittal``, or one of the
  lack-of-information phrasings Phoenix's refusal rubric names, e.g. "I don't have information").

Phoenix evals 2.x's legacy evaluators and ``llm_classify`` (``LegacyResponder``) send their template
as one system message and ask for ``{"explanation", "response"}`` through OpenAI's older
``functions``/``function_call`` (a function named ``record_response``, ``response`` an enum of the
rails); the answer is that object as the message's text, which Phoenix parses the same way. Of those
it answers QA_PROMPT_TEMPLATE (correct / incorrect: the faithfulness verdict above, with the
``[Reference]`` text as the context).

Any other Phoenix evaluator, and every other request, is left to the next responder.
"""

from __future__ import annotations

import json
import re
from typing import Callable, Optional

from ragbridge.plugin import (
    JudgeReply,
    JudgeRequest,
    best_sentence,
    content_words,
    is_noncommittal,
    is_relevant,
    is_supported,
    noisy,
    numbers,
    relevance,
    short,
    split_sentences,
)

__all__ = ["PhoenixResponder", "LegacyResponder", "SCHEMA_NAME", "LEGACY_FUNCTION", "responders",
           "sections", "declines"]

#: the name Phoenix gives its response format and its forced tool
SCHEMA_NAME = "extract_structured_data"
_DATA = re.compile(r"<data>\s*(.*?)\s*</data>", re.S)
_TAG = re.compile(r"<([a-z_]+)>\n(.*?)\n</\1>", re.S)
_LACKS_INFO = re.compile(
    r"\b(i|we)\s*(?:'m|am|are)?\s*(?:don't|do not|didn't|did not)\s+have\s+(?:any\s+)?"
    r"(?:information|details|data|documentation)\b|\b(?:can't|cannot|unable to)\s+(?:help|assist)\b",
    re.I)

#: the function Phoenix evals 2.x's legacy classifications ask to be called
LEGACY_FUNCTION = "record_response"
_QA = re.compile(r"\[Question\]:\s*(?P<query>.*?)\s*\*{5,}\s*\[Reference\]:\s*(?P<context>.*?)\s*\*{5,}"
                 r"\s*\[Answer\]:\s*(?P<response>.*?)\s*\[END DATA\]", re.S)

Verdict = tuple[str, str]  # (label, explanation)


def responders() -> list:
    """This plugin's responders, in the order they are tried."""
    return [PhoenixResponder(), LegacyResponder()]


def sections(prompt: str) -> Optional[dict[str, str]]:
    """The tagged texts of Phoenix's ``<data>`` block, or None when there is none."""
    m = _DATA.search(prompt)
    if m is None:
        return None
    return {tag: text.strip() for tag, text in _TAG.findall(m.group(1))}


def declines(text: str) -> bool:
    """The text declines to answer (a decline phrase, or a lack-of-information phrasing)."""
    return is_noncommittal(text) or bool(_LACKS_INFO.search(text))


def faithfulness(sec: dict[str, str]) -> Optional[Verdict]:
    if not {"context", "response"} <= sec.keys():
        return None
    context, response = sec["context"], sec["response"]
    claims = [s for s in split_sentences(response) or [response]
              if not declines(s) and len(set(content_words(s))) >= 2]
    for s in claims:
        missing = sorted(numbers(s) - numbers(context) - numbers(sec.get("query", "")))
        if missing:
            return "unfaithful", (f'The response says "{short(s, 80)}", but the number(s) '
                                  f"{', '.join(missing)} do not appear in the context.")
    unsupported = [s for s in claims if not is_supported(s, context)]
    if 2 * len(unsupported) > len(claims):
        return "unfaithful", (f"Only {len(claims) - len(unsupported)} of {len(claims)} statements of the "
                              "response are supported by the context; e.g. "
                              f'"{short(unsupported[0], 80)}" is not.')
    if not claims:
        return "faithful", "The response makes no claim beyond declining, so nothing contradicts the context."
    quote = best_sentence(context, claims[0])
    return "faithful", (f"{len(claims) - len(unsupported)} of {len(claims)} statements of the response are "
                        "supported by the context" + (f', e.g. "{short(quote, 80)}".' if quote else "."))


def retrieval_relevance(sec: dict[str, str]) -> Optional[Verdict]:
    if not {"request", "retrieved_information"} <= sec.keys():
        return None
    request, info = sec["request"], sec["retrieved_information"]
    shared = sorted(set(content_words(request)) & set(content_words(info)))
    if is_relevant(info, request):
        return "relevant", f"The retrieved information bears on the request ({', '.join(shared[:6])})."
    return "irrelevant", ("The retrieved information does not address the request"
                          + (f"; it shares only {', '.join(shared)}." if shared else "."))


def document_relevance(sec: dict[str, str]) -> Optional[Verdict]:
    if not {"question", "document_text"} <= sec.keys():
        return None
    question, text = sec["question"], sec["document_text"]
    shared = sorted(set(content_words(question)) & set(content_words(text)))
    if noisy(relevance(text, question) >= 0.5):
        return "relevant", f"The document text can answer the question ({', '.join(shared[:6])})."
    return "unrelated", ("The document text does not contain an answer to the question"
                         + (f"; it shares only {', '.join(shared)}." if shared else "."))


def refusal(sec: dict[str, str]) -> Optional[Verdict]:
    if "output" not in sec:
        return None
    if declines(sec["output"]):
        return "refused", f'The output declines to answer: "{short(sec["output"], 80)}".'
    return "answered", "The output gives a substantive answer to the input."


#: the evaluator's choices -> the verdict for its prompt
JUDGES: dict[frozenset[str], Callable[[dict[str, str]], Optional[Verdict]]] = {
    frozenset({"faithful", "unfaithful"}): faithfulness,
    frozenset({"relevant", "irrelevant"}): retrieval_relevance,
    frozenset({"relevant", "unrelated"}): document_relevance,
    frozenset({"refused", "answered"}): refusal,
}


class PhoenixResponder:
    """Phoenix's faithfulness, retrieval (document) relevance and refusal prompts (json_schema or
    forced tool)."""

    name = "phoenix"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        if req.schema_name != SCHEMA_NAME or not isinstance(req.schema, dict):
            return None
        props = req.schema.get("properties") or {}
        labels = (props.get("label") or {}).get("enum")
        judge = JUDGES.get(frozenset(labels)) if isinstance(labels, list) else None
        sec = sections(req.user) if judge is not None else None
        verdict = judge(sec) if sec is not None and judge is not None else None
        if verdict is None:
            return None
        label, explanation = verdict
        answer = {"explanation": explanation, "label": label} if "explanation" in props else {"label": label}
        return JudgeReply(json.dumps(answer, ensure_ascii=False), tool_name=req.tool_name,
                          responder=self.name)


def qa_correctness(prompt: str) -> Optional[Verdict]:
    """QA_PROMPT_TEMPLATE's verdict: correct when the answer is faithful to the reference text."""
    m = _QA.search(prompt)
    if m is None:
        return None
    label, explanation = faithfulness(m.groupdict()) or ("", "")
    said = explanation.replace("the context", "the reference text").replace("the response", "the answer")
    return ("correct" if label == "faithful" else "incorrect"), said.replace("The response", "The answer")


#: the rails of a legacy classification -> the verdict for its prompt
LEGACY_JUDGES: dict[frozenset[str], Callable[[str], Optional[Verdict]]] = {
    frozenset({"correct", "incorrect"}): qa_correctness,
}


class LegacyResponder:
    """Phoenix evals 2.x's legacy classification templates asked through ``functions`` (see the
    module docstring)."""

    name = "phoenix"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        functions = req.body.get("functions")
        fn = next((f for f in functions if isinstance(f, dict) and f.get("name") == LEGACY_FUNCTION), None) \
            if isinstance(functions, list) else None
        props = ((fn or {}).get("parameters") or {}).get("properties") or {}
        rails = (props.get("response") or {}).get("enum")
        judge = LEGACY_JUDGES.get(frozenset(rails)) if isinstance(rails, list) else None
        verdict = judge(req.prompt) if judge is not None else None
        if verdict is None:
            return None
        label, explanation = verdict
        answer = {"response": label}
        if "explanation" in props:
            answer = {"explanation": explanation, **answer}
        return JudgeReply(json.dumps(answer, ensure_ascii=False), responder=self.name)
