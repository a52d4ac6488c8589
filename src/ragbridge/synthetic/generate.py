"""ragbridge's own generator: each slot of the plan made by the judge, checked and placed.

Per kind (`ragbridge.synthetic.plan`), through one `~ragbridge.rubric.parse.Asker` on the judge
gateway (every call cached, counted against the budget and audited, filed under backend
``synthetic``, the slot's kind and the slot's id):

* ``single``: the ``single`` prompt; its quote placed in the passage (`prompts.locate_quote`: whole
  words, `prompts.MIN_QUOTE_TERMS` content words or more); the span label quotes the document's own
  text at the place found;
* ``multi``: the ``multi`` prompt; one quote placed in each passage, and the answer must use each
  (`prompts.unused`). A multi slot whose passage has no related passage in another document (the
  plan's) is dropped (``unrelated``) without a call;
* ``paraphrased``: the ``single`` prompt, then ``reword``: the rewording may keep at most half the
  passage wording the question it rewords took from the passage, and no phrase of it
  (`prompts.check_reword`: words the passage does not hold, a greeting added in front, change
  nothing);
* ``unanswerable``: the ``unanswerable`` prompt, then the check (`check_passages`): the ``answered``
  prompt on every passage of a corpus of at most `WHOLE_CORPUS` passages, `CHECK_BATCH` passages a
  call, the ones BM25 ranks first for the question first, stopping at the first batch that answers
  it; in a larger corpus the `CHECK_TOP` passages BM25 ranks first and, when the judge has an
  ``embedding_model``, the `CHECK_TOP` nearest by the judge endpoint's embeddings. An unanswerable
  case carries no ``reference`` and no ``reference_contexts`` (no passage answers it); what the
  documents would have to say is ``metadata.synthetic.missing``.

A reply that fails a check is asked again naming the problem (the Asker's re-asks). What still fails
is settled as *dropped*, with the reason, when re-asking cannot mend it: a quote that is not in its
passage (``unplaced``) or too short (``short_quote``), a multi-passage answer that does not use
every passage (``one_passage``), a rewording that keeps the passage's wording (``not_reworded``),
an unanswerable question the corpus answers (``answered``), a question its group already asked
(``duplicate``). A
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
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..formats.corpus import Corpus
from ..rubric.parse import Asker, JudgeCallError, ReplyError
from . import prompts
from ..lexical import BM25
from .passages import Passage, Passages
from .plan import KIND_TAGS, Slot

__all__ = ["Generation", "run_slots", "case_of", "check_passages", "CHECK_TOP", "CHECK_BATCH", "WHOLE_CORPUS",
           "BACKEND"]

#: a corpus of at most this many passages has an unanswerable question checked against all of them
WHOLE_CORPUS = 50
#: passages shown in one check call
CHECK_BATCH = 10
#: in a larger corpus: the passages BM25 ranks first, and as many nearest by embeddings
CHECK_TOP = 20
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
    #: the judge endpoint's embedding model (None: no embeddings), and the client to ask it through
    embedding_model: Optional[str] = None
    client: Any = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    _vectors: Optional[list[list[float]]] = None
    _embedding: Optional[asyncio.Lock] = None


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
    if slot.kind == "unanswerable":  # no passage answers it: no reference answer, no gold passage
        case["answerable"] = False
    else:
        case["reference"] = made["answer"]
        case["reference_contexts"] = [p.text for p in passages]
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
            _drop_for(exc, ("unplaced", "short_quote"))
            raise
        if slot.kind == "paraphrased":
            original = made["question"]
            try:
                made["question"] = await _ask(
                    g, slot, "paraphrased:reword", prompts.messages("reword", ps[:1], question=original),
                    prompts.SCHEMAS["reword"], prompts.check_reword(ps[0], original, g.bm25))
            except ReplyError as exc:
                _drop_for(exc, ("not_reworded",), original)
                raise
            made["original_question"] = original
        return made
    if slot.kind == "multi":
        if len(ps) < 2:
            raise _Dropped("unrelated", f"no passage of another document is related to {ps[0].key} "
                                        "(the plan found none similar enough)")
        try:
            return await _ask(g, slot, "multi", prompts.messages("multi", ps, asked=asked),
                              prompts.SCHEMAS["multi"], prompts.check_multi(g.corpus, ps))
        except ReplyError as exc:
            _drop_for(exc, ("unplaced", "short_quote", "one_passage"))
            raise
    made = await _ask(g, slot, "unanswerable", prompts.messages("unanswerable", ps, asked=asked),
                      prompts.SCHEMAS["unanswerable"], prompts.check_unanswerable)
    checked = await check_passages(g, made["question"])
    for at in range(0, len(checked), CHECK_BATCH):
        batch = [g.passages[i] for i in checked[at:at + CHECK_BATCH]]
        answered, why = await _ask(g, slot, "unanswerable:check",
                                   prompts.messages("answered", batch, question=made["question"]),
                                   prompts.SCHEMAS["answered"], prompts.check_answered)
        if answered:
            raise _Dropped("answered", f"the corpus answers it: {why}", made["question"])
    made["checked_against"] = [g.passages[i].key for i in checked]
    return made


def _drop_for(exc: ReplyError, kinds: Sequence[str], question: Optional[str] = None) -> None:
    """Settle the slot as dropped when the Asker's last error was a `prompts.Problem` of ``kinds``."""
    kind = _problem(exc, kinds)
    if kind is not None:
        raise _Dropped(kind, str(exc), question) from None


async def check_passages(g: Generation, question: str) -> list[int]:
    """The passages an unanswerable ``question`` is checked against, the likeliest to answer it first
    (see the module docstring)."""
    ranked = g.bm25.ranking(question)
    if len(ranked) <= WHOLE_CORPUS:
        return ranked
    chosen = list(ranked[:CHECK_TOP])
    if g.embedding_model and g.client is not None:
        for i in await _nearest(g, question):
            if i not in chosen:
                chosen.append(i)
    return chosen


async def _embed(g: Generation, texts: Sequence[str]) -> list[list[float]]:
    """The judge endpoint's embeddings of ``texts`` (through the gateway: cached, counted, audited)."""
    with g.gateway.tag_scope(BACKEND, "unanswerable:embeddings"):
        r = await g.client.post("embeddings", json={"model": g.embedding_model, "input": list(texts)})
    if r.status_code != 200:
        raise JudgeCallError(f"the judge's embeddings answered HTTP {r.status_code}: {r.text[:200]}")
    try:
        data = sorted(r.json()["data"], key=lambda d: d["index"])
        vectors = [[float(x) for x in d["embedding"]] for d in data]
    except (ValueError, KeyError, TypeError) as exc:
        raise JudgeCallError(f"the judge's embeddings could not be read: {exc}") from None
    if len(vectors) != len(texts):
        raise JudgeCallError(f"the judge's embeddings gave {len(vectors)} vectors for {len(texts)} texts")
    return vectors


async def _nearest(g: Generation, question: str) -> list[int]:
    """The `CHECK_TOP` passages whose embeddings are nearest the question's (cosine)."""
    if g._embedding is None:
        g._embedding = asyncio.Lock()
    async with g._embedding:  # the passages are embedded once a session, 64 a request
        if g._vectors is None:
            texts = [p.text for p in g.passages]
            vectors: list[list[float]] = []
            for at in range(0, len(texts), 64):
                vectors += await _embed(g, texts[at:at + 64])
            g._vectors = vectors
    (q,) = await _embed(g, [question])

    def cosine(v: list[float]) -> float:
        dot = sum(a * b for a, b in zip(q, v))
        norm = math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(b * b for b in v))
        return dot / norm if norm else 0.0

    scores = [cosine(v) for v in g._vectors]
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:CHECK_TOP]


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
