"""The stub judge's answers to the prompts of RAGAS 0.4.3's test-set generator, registered by this
plugin (``ragbridge synthesize --generator ragas`` against ``ragbridge.testing``'s stub judge).

A request is the generator's when the JSON schema it asks for is one of the output models of the
prompts behind it (`OUTPUT_MODELS`); the texts are the last ``input: {...}`` object of the user
message, as for the metrics' prompts (`stub`). The answers are made from the chunk's own words,
deterministically:

* a summary (``StringIO``): the chunk's first two sentences;
* themes (``ThemesAndConcepts``) and named entities (``NEROutput``): its content words, in order;
* a chunk's question potential (``QuestionPotentialOutput``): 4 of 5;
* a persona (``Persona``): a reader of the summary's first content words;
* personas to themes (``PersonaThemesMapping``): every persona to every theme;
* concept combinations (``ConceptCombinations``): the lists' items paired in order;
* a question and its answer (``GeneratedQueryAnswer``, single- and multi-hop): per context, the
  sentence holding the term (or a theme), asked about as "What is said about ...?" and answered by
  that sentence.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from ragbridge.plugin import JudgeReply, JudgeRequest, json_after, schema_in_prompt

__all__ = ["RagasGeneratorResponder", "OUTPUT_MODELS"]

OUTPUT_MODELS = frozenset({"StringIO", "ThemesAndConcepts", "NEROutput", "QuestionPotentialOutput", "Persona",
                           "PersonaThemesMapping", "ConceptCombinations", "GeneratedQueryAnswer"})
_SMALL = frozenset("""a about above after all also an and any are as at be been before being below between
both but by can could did do does each every few for from had has have he her here his how i if in into is
it its just may might more most must no not of off on once only or other our out over own per same she
should so some such than that the their them then there these they this those through to too under until
up very was we were what when where which while who why will with within would you your""".split())
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def _words(text: str) -> list[str]:
    seen, out = set(), []
    for w in re.findall(r"[A-Za-z][A-Za-z'-]+", text or ""):
        key = w.lower()
        if key in _SMALL or len(key) < 4 or key in seen:
            continue
        seen.add(key)
        out.append(key)
    return out


def _sentences(text: str) -> list[str]:
    lines = [ln for ln in (text or "").splitlines() if not ln.lstrip().startswith(("#", "<"))]
    flat = " ".join(" ".join(lines).split())
    return [s for s in _SENTENCE.split(flat) if s.strip()]


def _about(sentence: str) -> str:
    head = re.split(r"[,;:(]", sentence.rstrip(".!?"), maxsplit=1)[0].split()[:12] or ["this"]
    phrase = " ".join(head)
    return phrase[:1].lower() + phrase[1:] if len(head[0]) > 1 and not head[0].isupper() else phrase


def _holding(sentences: list[str], words: list[str]) -> str:
    for s in sentences:
        if any(w.lower() in s.lower() for w in words):
            return s
    return sentences[0] if sentences else ""


def _schema_name(req: JudgeRequest) -> Optional[str]:
    schema = req.schema or schema_in_prompt(req.system) or schema_in_prompt(req.user)
    name = (schema or {}).get("title") if isinstance(schema, dict) else None
    name = name or req.schema_name
    return name if name in OUTPUT_MODELS else None


def _answer(name: str, inputs: dict[str, Any]) -> Optional[dict[str, Any]]:
    text = inputs.get("text") if isinstance(inputs.get("text"), str) else ""
    if name == "StringIO":
        return {"text": " ".join(_sentences(text)[:2]) or text}
    if name == "ThemesAndConcepts":
        return {"output": _words(text)[: int(inputs.get("max_num") or 10)]}
    if name == "NEROutput":
        return {"entities": _words(text)[: int(inputs.get("max_num") or 10)]}
    if name == "QuestionPotentialOutput":
        return {"score": 4}
    if name == "Persona":
        words = _words(text)[:2] or ["the", "documents"]
        return {"name": "Reader of " + " and ".join(words), "role_description": "Wants to know about "
                + ", ".join(_words(text)[:5]) + "."}
    if name == "PersonaThemesMapping":
        themes = [t for t in inputs.get("themes") or [] if isinstance(t, str)]
        personas = [p for p in inputs.get("personas") or [] if isinstance(p, dict)]
        return {"mapping": {p.get("name", ""): themes for p in personas}}
    if name == "ConceptCombinations":
        lists = [x for x in inputs.get("lists_of_concepts") or [] if isinstance(x, list) and x]
        pairs = [[a, b] for a, b in zip(lists[0], lists[1])] if len(lists) >= 2 else []
        return {"combinations": pairs[: int(inputs.get("max_combinations") or 5)]}
    # GeneratedQueryAnswer: single-hop (term, context) or multi-hop (themes, context list)
    context = inputs.get("context")
    contexts = context if isinstance(context, list) else [context or ""]
    terms = [inputs["term"]] if isinstance(inputs.get("term"), str) else [
        t for t in inputs.get("themes") or [] if isinstance(t, str)]
    chosen = [_holding(_sentences(c), terms) for c in contexts if isinstance(c, str)]
    chosen = [s for s in chosen if s] or ["the documents"]
    return {"query": "What is said about " + ", and about ".join(_about(s) for s in chosen) + "?",
            "answer": " ".join(chosen)}


class RagasGeneratorResponder:
    """Answers the prompts of RAGAS' test-set generator (None for any other request)."""

    name = "ragas-generator"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        name = _schema_name(req)
        if name is None:
            return None
        inputs = json_after(req.user, "input:", last=True)
        if not isinstance(inputs, dict):
            return None
        obj = _answer(name, inputs)
        if obj is None:
            return None
        return JudgeReply(json.dumps(obj, ensure_ascii=False), tool_name=req.tool_name, responder=self.name)
