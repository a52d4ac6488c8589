"""ragbridge's own generator: each slot of the plan made by the judge, checked and placed.

Per kind (`ragbridge.synthetic.plan`), through one `~ragbridge.rubric.parse.Asker` on the judge
gateway (every call cached, counted against the budget and audited, filed under backend
``synthetic``, the slot's kind and the slot's id):

* ``single``: the ``single`` prompt; its quote placed in the passage (`prompts.locate_quote`);
* ``multi``: the ``multi`` prompt; one quote placed in each passage;
* ``paraphrased``: the ``single`` prompt, then ``reword``: the rewording must share fewer of its
  terms with the passage than the question it rewords (`ragbridge.lexical.term_overlap`);
* ``unanswerable``: the ``unanswerable`` prompt, then the check: the `CHECK_TOP` passages of the
  whole corpus that BM25 ranks first for the question, and the ``answered`` prompt on them.

A reply that fails a check is asked again naming the problem (the Asker's re-asks). What still fails
is settled as *dropped*, with the reason, when re-asking cannot mend it: a quote that is not in its
passage (``unplaced``), a rewording no further from the passage (``not_reworded``), an unanswerable
question the corpus answers (``answered``), a question its group already asked (``duplicate``). A
judge error after the gateway's retries, or a reply that is still not a usable question, leaves the
slot *pending* (an error of this session; the next session asks again, its cached answers dropped)
unless ``drop_failed``, which settles it as dropped (``unusable``); the unusable answers are dropped
from the cache, the answers to the slot's earlier prompts kept. Once the budget is spent the gateway
refuses new calls and every slot not settled stays pending (what it was answered is kept in the
cache: the next session replays it).

Slots run in groups (`Slot.group`: the same kind and passages), one after the other within a group,
each prompt listing the questions its group already made, so a passage asked again yields another
question; groups run concurrently (at most the judge's ``max_concurrency``). A group stops at its
first pending slot: the questions after it depend on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..formats.corpus import Corpus
from ..rubric.parse import Asker, JudgeCallError, ReplyError
from . import prompts
from ..lexical import BM25
from .passages import Passage, Passages
from .plan import KIND_TAGS, Slot

__all__ = ["Generation", "run_slots", "case_of", "CHECK_TOP", "BACKEND"]

#: passages of the corpus an unanswerable question is checked against
CHECK_TOP = 5
#: the backend name the generation's judge calls are filed under
BACKEND = "synthetic"


@dataclass
class Generation:
    """What the slots of one session share, and what the session found."""

    corpus: Corpus
    passages: Passages
    bm25: BM25
    asker: Asker
    gateway: Any
    record: Callable[[dict[str, Any]], None]
    judge_model: str = ""
    drop_failed: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False


def _normal(question: str) -> str:
    return " ".join(question.lower().split()).rstrip("?").strip()


def _problem(exc: ReplyError, kinds: Sequence[str]) -> Optional[str]:
    """The kind of a `prompts.Problem` that ``exc`` (the Asker's last error) ended on, if any."""
    last = getattr(exc, "problem", None)
    if isinstance(last, prompts.Problem) and last.kind in kinds and str(last) in str(exc):
        return last.kind
    return None


async def _ask(g: Generation, slot: Slot, step: str, messages: list, schema: dict, check: Callable) -> Any:
    """The checked reply to one prompt; the last `prompts.Problem` a check raised rides on the error."""
    seen: dict[str, Any] = {}

    def checked(obj: dict) -> Any:
        try:
            return check(obj)
        except prompts.Problem as p:
            seen["problem"] = p
            raise

    with g.gateway.tag_scope(BACKEND, step, slot.id):
        try:
            return await g.asker.ask(messages, schema, f"synthetic_{step.replace(':', '_')}", checked)
        except ReplyError as exc:
            exc.problem = seen.get("problem")  # type: ignore[attr-defined]
            exc.step = step  # type: ignore[attr-defined]
            raise


def case_of(slot: Slot, made: dict[str, Any], passages: Sequence[Passage],
            judge_model: str) -> dict[str, Any]:
    """The canonical record of a made question."""
    meta: dict[str, Any] = {"kind": slot.kind, "generator": "ragbridge",
                            "passages": [p.key for p in passages], "judge_model": judge_model}
    meta.update({k: made[k] for k in ("original_question", "missing", "checked_against") if k in made})
    case: dict[str, Any] = {"id": slot.id, "question": made["question"]}
    spans = [{"doc": d, "start": s, "end": e, "quote": q} for d, s, e, q in made.get("spans", ())]
    if spans:
        case["relevant_spans"] = spans
    case["reference"] = made["answer"]
    case["reference_contexts"] = [p.text for p in passages]
    if slot.kind == "unanswerable":
        case["answerable"] = False
    case["tags"] = ["synthetic", KIND_TAGS[slot.kind]]
    case["metadata"] = {"synthetic": meta}
    return case


async def _make(g: Generation, slot: Slot, asked: list[str]) -> dict[str, Any]:
    """One slot's question (``{"question", "answer", "spans", ...}``); `_Dropped` for one settled as
    dropped; `ReplyError` or `JudgeCallError` for one left pending."""
    ps = [g.passages[i] for i in slot.passages]
    if slot.kind in ("single", "paraphrased"):
        try:
            made = await _ask(g, slot, slot.kind, prompts.messages("single", ps[:1], asked=asked),
                              prompts.SCHEMAS["single"], prompts.check_single(g.corpus, ps[0]))
        except ReplyError as exc:
            if _problem(exc, ("unplaced",)):
                raise _Dropped("unplaced", str(exc)) from None
            raise
        if slot.kind == "paraphrased":
            original = made["question"]
            try:
                made["question"] = await _ask(
                    g, slot, "paraphrased:reword", prompts.messages("reword", ps[:1], question=original),
                    prompts.SCHEMAS["reword"], prompts.check_reword(ps[0], original))
            except ReplyError as exc:
                if _problem(exc, ("not_reworded",)):
                    raise _Dropped("not_reworded", str(exc), original) from None
                raise
            made["original_question"] = original
        return made
    if slot.kind == "multi":
        try:
            return await _ask(g, slot, "multi", prompts.messages("multi", ps, asked=asked),
                              prompts.SCHEMAS["multi"], prompts.check_multi(g.corpus, ps))
        except ReplyError as exc:
            if _problem(exc, ("unplaced",)):
                raise _Dropped("unplaced", str(exc)) from None
            raise
    made = await _ask(g, slot, "unanswerable", prompts.messages("unanswerable", ps, asked=asked),
                      prompts.SCHEMAS["unanswerable"], prompts.check_unanswerable)
    top = g.bm25.ranking(made["question"])[:CHECK_TOP]
    answered, why = await _ask(g, slot, "unanswerable:check",
                               prompts.messages("answered", [g.passages[i] for i in top],
                                                question=made["question"]),
                               prompts.SCHEMAS["answered"], prompts.check_answered)
    if answered:
        raise _Dropped("answered", f"the corpus answers it: {why}", made["question"])
    made["answer"] = "The documents do not answer this. " + made["missing"]
    made["checked_against"] = [g.passages[i].key for i in top]
    return made


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str, question: Optional[str] = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.question = reason, detail, question


async def _group(g: Generation, slots: list[Slot], done: dict[str, dict[str, Any]],
                 sem: asyncio.Semaphore) -> None:
    asked: list[str] = []
    for slot in slots:
        earlier = done.get(slot.id)
        if earlier is not None:
            if earlier.get("question"):
                asked.append(earlier["question"])
            continue
        if g.stopped:
            return
        async with sem:
            item: dict[str, Any] = {"slot": slot.id, "kind": slot.kind}
            try:
                made = await _make(g, slot, asked)
                if _normal(made["question"]) in {_normal(q) for q in asked}:
                    raise _Dropped("duplicate", "its group already asked this question", made["question"])
                ps = [g.passages[i] for i in slot.passages]
                item.update(status="made", question=made["question"],
                            case=case_of(slot, made, ps, g.judge_model))
            except _Dropped as d:
                item.update(status="dropped", reason=d.reason, detail=d.detail, question=d.question)
            except (ReplyError, JudgeCallError) as exc:
                if isinstance(exc, ReplyError):  # its answers are asked for again, not replayed
                    g.gateway.forget(BACKEND, getattr(exc, "step", slot.kind), slot.id)
                if g.gateway.budget_spent:
                    g.stopped = True
                    return
                if isinstance(exc, ReplyError) and g.drop_failed:
                    item.update(status="dropped", reason="unusable", detail=str(exc))
                else:
                    g.errors.append({"slot": slot.id, "kind": slot.kind,
                                     "error": ("the judge's reply could not be used: " if
                                               isinstance(exc, ReplyError) else "") + str(exc),
                                     "unusable": isinstance(exc, ReplyError)})
                    return
        g.record(item)
        if item.get("question"):
            asked.append(item["question"])


async def run_slots(g: Generation, slots: Sequence[Slot], done: dict[str, dict[str, Any]],
                    concurrency: int) -> None:
    """Make every slot of ``slots`` not in ``done`` (see the module docstring), recording each settled
    one with ``g.record``."""
    groups: dict[str, list[Slot]] = {}
    for slot in slots:
        groups.setdefault(slot.group or slot.id, []).append(slot)
    sem = asyncio.Semaphore(max(1, concurrency))
    await asyncio.gather(*(_group(g, members, done, sem) for members in groups.values()))
