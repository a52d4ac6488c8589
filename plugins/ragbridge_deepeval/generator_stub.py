"""The stub judge's answers to the prompts of DeepEval 4.3.1's ``Synthesizer``, registered by this
plugin (``ragbridge synthesize --generator deepeval`` against ``ragbridge.testing``'s stub judge).

DeepEval sends its synthesizer's prompts as one user message; with a model name of its registry it
also asks for a JSON schema (its ``SyntheticDataList``, ``InputFeedback``, ``RewrittenInput``,
``Response``), otherwise it cuts the JSON out of the reply. A request is the synthesizer's when its
prompt starts as one of DeepEval's templates (`TEMPLATES`). The answers come from the context's own
words, deterministically:

* inputs from a context: per input asked for, "What is said about <a sentence's first clause>?",
  the sentences taken in turn across the context's passages;
* the critic's score of an input: 1.0 (clear and answerable), so nothing is rewritten;
* a rewrite of an input after the critic's feedback, or an evolution of it: the input as it was
  (the stub neither rewrites nor evolves);
* the expected output: the context's sentence (headings left out) holding most of the input's
  content words.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Optional

from ragbridge.plugin import JudgeReply, JudgeRequest, support

__all__ = ["DeepEvalGeneratorResponder", "TEMPLATES"]

#: how each synthesizer prompt starts (DeepEval's ``SynthesizerTemplate``, ``FilterTemplate`` and
#: ``EvolutionTemplate``), by what the stub answers
TEMPLATES = {
    "inputs": "I want you act as a copywriter. Based on the given context, which is list of strings",
    "critic": "Evaluate the provided synthetic query",
    "requery": "I want you to act as a query rewriter.",
    "rewrite": "I want you to act as an input rewriter.",
    "expected": "Given the input, which may or may not be a question, generate a response",
}
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def _after(prompt: str, label: str, until: str) -> str:
    m = re.search(rf"^\s*{re.escape(label)}\s*$(.*?)^\s*{re.escape(until)}", prompt, re.M | re.S)
    return m.group(1).strip() if m else ""


def _sentences(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return [s for s in _SENTENCE.split(" ".join(" ".join(lines).split())) if len(s.split()) >= 4]


def _clause(sentence: str) -> str:
    head = re.split(r"[,;:(]", sentence.rstrip(".!?"), maxsplit=1)[0].split()[:12] or ["this"]
    phrase = " ".join(head)
    return phrase[:1].lower() + phrase[1:] if len(head[0]) > 1 and not head[0].isupper() else phrase


def _inputs(prompt: str) -> dict:
    raw = _after(prompt, "Context:", "JSON:")
    try:
        context = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        context = [raw]
    context = [c for c in context if isinstance(c, str)] if isinstance(context, list) else [str(context)]
    m = re.search(r"Max Goldens Per Context:\s*(\d+)", prompt)
    n = int(m.group(1)) if m else 1
    pools = [_sentences(c) or [c] for c in context]
    data = []
    for i in range(n):
        pool = pools[i % len(pools)]
        data.append({"input": f"What is said about {_clause(pool[(i // len(pools)) % len(pool)])}?"})
    return {"data": data}


class DeepEvalGeneratorResponder:
    """Answers the prompts of DeepEval's synthesizer (None for any other request)."""

    name = "deepeval-generator"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        prompt = req.user.strip()
        task = next((t for t, start in TEMPLATES.items() if prompt.startswith(start)), None)
        if task is None:
            return None
        if task == "inputs":
            obj = _inputs(prompt)
        elif task == "critic":
            obj = {"feedback": "The query is clear and answerable (stub judge).", "score": 1.0}
        elif task == "requery":
            obj = {"rewritten_input": _after(prompt, "Query:", "Feedback:") or "What is this about?"}
        elif task == "rewrite":  # the input, which some evolutions show before the context
            text = _after(prompt + "\nRewritten Input:", "Input:", "Rewritten Input:")
            text = re.split(r"^\s*Context:\s*$", text, maxsplit=1, flags=re.M)[0].strip()
            obj = {"rewritten_input": text.splitlines()[0].strip() if text else "What is this about?"}
        else:
            question = _after(prompt, "Input:", "Generated Response:")
            context = _after(prompt, "Context:", "Input:")
            sentences = _sentences(context) or [context]
            obj = {"response": max(sentences, key=lambda x: support(question, x)[0])}
        if req.schema is None and task in ("rewrite", "expected"):  # DeepEval asked for plain text
            text = obj.get("rewritten_input") or obj.get("response")
            return JudgeReply(text, responder=self.name)
        return JudgeReply(json.dumps(obj, ensure_ascii=False), tool_name=req.tool_name, responder=self.name)
