"""The stub judge's answers to the generation prompts: questions made from the passages' own words,
deterministically.

Registered from this plugin through the ``ragbridge_register_stub_responders`` hook. A request is
ours when the first line of its system prompt is one of `prompts.TASKS`; the passages and questions
are read back from the user message's headings (`prompts.HEADINGS`). What the stub writes:

* ``single``: the passage's first sentence (headings left out) that no question already written was
  made from, as "What is said about <its first clause>?", answered by the sentence, which is the
  quote; when every sentence was used, another wording of the first one;
* ``multi``: the same from each passage, joined into one question; one quote per passage;
* ``reword``: the question's first two terms that the passage holds, each replaced by a word of a
  small list of everyday synonyms when it has one, in "In plain words, what are the rules on ...?"
  (so its term overlap with the passage is lower than the question's);
* ``unanswerable``: "Is there <something the stub's list names> for <the passage's topic>?", the
  thing drawn by the passages and the variant from a fixed list; the documents may happen to answer
  it, which the check then finds;
* ``answered``: true when one passage holds at least 60% of the question's content words and every
  number in it (the stub's word-overlap judgement, `ragbridge.stub.responders`).

None of this is judgement: it exercises the plumbing (prompts, checks, placement, resumption)
without a model, and its questions copy the passages' wording, the first weakness the measures show.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Optional

from ..stub.responders import JudgeReply, JudgeRequest, numbers, support
from .prompts import HEADINGS, TASKS

__all__ = ["SynthResponder"]

_TASK_OF = {line: task for task, line in TASKS.items()}
_HEADING = re.compile(r"^### (.+)$", re.M)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_SMALL = frozenset("a an the of to in on at for and or is are be by with as it its that this your you "
                   "what is said about".split())

#: everyday words for a handbook's terms: what the stub's rewording swaps in
SYNONYMS = {
    "refund": "money back", "refunds": "money back", "booking": "reservation", "bookings": "reservations",
    "cancelled": "called off", "cancel": "call off", "cancelling": "calling off", "bike": "bicycle",
    "bikes": "bicycles", "rental": "hire", "rentals": "hires", "deposit": "security hold",
    "card": "payment method", "theft": "stealing", "stolen": "taken", "insurance": "protection",
    "cover": "protection", "membership": "subscription", "member": "subscriber", "repair": "fix",
    "repairs": "fixes", "workshop": "service shop", "battery": "power pack", "charge": "fee",
    "charged": "billed", "price": "cost", "return": "bring back", "returned": "brought back",
    "late": "overdue", "damage": "harm", "claim": "request", "tyre": "wheel", "tyres": "wheels",
    "chain": "drive", "brake": "stopping", "brakes": "stopping", "days": "daily periods",
}
#: what the stub asks about in an unanswerable question
UNASKED = ("a student discount", "a night-time surcharge", "delivery to a hotel", "payment in cryptocurrency",
           "a seat for a dog", "a loyalty app", "a winter waiting list", "a discount for veterans",
           "a lost-property desk", "gift vouchers")


def _sections(text: str) -> dict[str, str]:
    found = list(_HEADING.finditer(text))
    out = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        out[m.group(1).strip()] = text[m.end():end].strip("\n")
    return out


def _body(section: str) -> str:
    """A passage section's text, without its "(doc)" line."""
    lines = section.split("\n")
    if lines and lines[0].startswith("(") and lines[0].endswith(")"):
        lines = lines[1:]
    return "\n".join(lines).strip()


def _sentences(passage: str) -> list[str]:
    lines = [ln for ln in passage.splitlines() if not ln.lstrip().startswith("#")]
    flat = " ".join(" ".join(lines).split())
    return [s.strip() for s in _SENTENCE.split(flat) if len(s.split()) >= 4]


def _clause(sentence: str) -> str:
    head = re.split(r"[,;:(]", sentence.rstrip(".!?"), maxsplit=1)[0]
    return " ".join(head.split()[:12])


def _asked(user: str) -> list[str]:
    block = _sections(user).get(HEADINGS["asked"][4:], "")
    return [re.sub(r"^\d+\.\s*", "", ln).strip() for ln in block.splitlines() if ln.strip()]


def _passages(user: str) -> list[str]:
    s = _sections(user)
    if HEADINGS["passage"][4:] in s:
        return [_body(s[HEADINGS["passage"][4:]])]
    out, i = [], 1
    while f"{HEADINGS['passage'][4:]} {i}" in s:
        out.append(_body(s[f"{HEADINGS['passage'][4:]} {i}"]))
        i += 1
    return out


def _fresh(sentences: list[str], asked: list[str], skip: int = 0) -> tuple[str, str]:
    """(question, sentence): the first sentence not asked about yet; when each was, another wording."""
    for s in sentences[skip:] + sentences[:skip]:
        q = f"What is said about {_clause(s)}?"
        if q not in asked:
            return q, s
    s = sentences[0]
    for form in ("How does it work: {}?", "What should I know about {}?", "Can you tell me about {}?"):
        q = form.format(_clause(s))
        if q not in asked:
            return q, s
    return f"What is said about {_clause(s)}?", s


def _reword(question: str, passage: str) -> str:
    held = {w.lower() for w in _WORD.findall(passage)}
    words = [w for w in _WORD.findall(question.removeprefix("What is said about"))
             if w.lower() not in _SMALL and w.lower() in held]
    picked = [SYNONYMS.get(w.lower(), w.lower()) for w in words[:2]] or ["this"]
    return f"In plain words, what are the rules on {' and '.join(picked)}?"


def _answered(question: str, passages: list[str]) -> tuple[bool, str]:
    for i, p in enumerate(passages, 1):
        frac, found, _ = support(question, p)
        if frac >= 0.6 and not numbers(question) - numbers(p):
            return True, f"passage {i} holds {', '.join(found[:6])} (stub judge: word overlap)"
    return False, "no passage holds most of the question's words (stub judge: word overlap)"


def _reply(obj: dict) -> JudgeReply:
    return JudgeReply(json.dumps(obj, ensure_ascii=False), responder="synthetic")


class SynthResponder:
    name = "synthetic"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        task = _TASK_OF.get(req.system.split("\n", 1)[0].strip())
        if task is None:
            return None
        user = req.user
        passages = _passages(user)
        asked = _asked(user)
        if task == "single":
            sentences = _sentences(passages[0]) or [passages[0]]
            q, s = _fresh(sentences, asked)
            return _reply({"question": q, "answer": s, "quote": s})
        if task == "multi":
            parts = [_fresh(_sentences(p) or [p], [], skip=len(asked)) for p in passages]
            q = "What is said about " + ", and about ".join(_clause(s) for _, s in parts) + "?"
            return _reply({"question": q, "answer": " ".join(s for _, s in parts),
                           "quotes": [s for _, s in parts]})
        if task == "reword":
            question = _sections(user).get(HEADINGS["question"][4:], "").strip()
            return _reply({"question": _reword(question, passages[0] if passages else "")})
        if task == "unanswerable":
            head = passages[0].splitlines()[0].lstrip("# ").strip() if passages else "this"
            n = zlib.crc32("\n".join(passages).encode()) + len(asked)
            thing = UNASKED[n % len(UNASKED)]
            return _reply({"question": f"Is there {thing} for {head.lower()}?",
                           "missing": f"The documents would have to say whether there is {thing}."})
        question = _sections(user).get(HEADINGS["question"][4:], "").strip()
        answered, why = _answered(question, passages)
        return _reply({"answered": answered, "reason": why})
