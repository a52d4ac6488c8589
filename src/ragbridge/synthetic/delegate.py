"""A library's own test-set generator, driven through the judge gateway (``--generator NAME``).

A plugin registers a `Generator` through the ``ragbridge_register_generators`` hook. ragbridge gives
it a `GeneratorRequest`: the corpus cut into passages (the library gets them as its chunks or
contexts), how many questions of each kind the mix asks for (only kinds in its ``kinds``) and the
plan's slots (which passages each question is to be written from, for a library that takes
contexts rather than building its own), the seed,
and the judge (a `~ragbridge.judge.JudgeClient`: the library's LLM and embeddings go through the
gateway, so they are cached, counted against the budget and audited like every judge call). It
returns `GeneratedItem` objects: the question, the reference answer, the reference contexts the
library recorded, the kind, and whatever the library says about the item (``metadata``).

`cases_from_items` turns them into canonical cases: each reference context is placed in the corpus
(a passage given to the library, exactly; else located in a document, exactly or with white space
collapsed) and becomes a span label quoting it; an item with a context that cannot be placed is
dropped and counted (``unplaced``), never given a label that points nowhere. An item whose question
is not one (`ragbridge.synthetic.prompts.not_a_question`: empty, a list written out as a library's
generator sometimes writes its inputs, a copy of its context) is dropped and counted (``not_a_question``).

A library's generator is one call that makes the whole set: a session killed part way leaves
nothing written, and the same command again replays from the judge cache every call the library
asks again. Python's ``random`` is seeded first, but a library may draw in concurrent steps whose
order varies, or name things with random ids: then a second session asks part of its calls anew, and
its set differs in those questions (each plugin's ``generator.py`` says what its library does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..formats.corpus import Corpus
from .passages import Passage
from .plan import KIND_TAGS

__all__ = ["Generator", "GeneratorRequest", "GeneratedItem", "cases_from_items"]


@dataclass
class GeneratorRequest:
    """What a library generator is asked for (see the module docstring)."""

    passages: Sequence[Passage]
    counts: dict[str, int]
    seed: int
    judge: Any
    #: the plan's slots for the generator's kinds (`ragbridge.synthetic.plan.Slot`: a kind and the
    #: indexes of its passages), for a library that writes from contexts it is given
    slots: Sequence[Any] = ()
    options: dict[str, Any] = field(default_factory=dict)
    #: what the generator has to say about the set (a kind it could not make, and why): printed
    notes: list[str] = field(default_factory=list)


@dataclass
class GeneratedItem:
    """One question a library generated."""

    question: str
    answer: Optional[str]
    contexts: list[str]
    kind: str = "single"
    metadata: dict[str, Any] = field(default_factory=dict)


class Generator:
    """A library's generator (subclass it in the library's plugin)."""

    #: the name ``--generator`` takes
    name: str = ""
    #: the library's import name, for `available`
    module: str = ""
    install_hint: str = ""
    #: the kinds of question it makes (`ragbridge.synthetic.plan.KINDS`)
    kinds: tuple[str, ...] = ("single",)

    def available(self) -> bool:
        import importlib.util

        return not self.module or importlib.util.find_spec(self.module) is not None

    def version(self) -> Optional[str]:
        import importlib.metadata

        try:
            return importlib.metadata.version(self.module) if self.module else None
        except importlib.metadata.PackageNotFoundError:
            return None

    def environment(self) -> dict[str, str]:
        """Variables set (where the user has not) while the generator runs: the library's telemetry off."""
        return {}

    def generate(self, request: GeneratorRequest) -> list[GeneratedItem]:  # pragma: no cover - abstract
        """The items (synchronous; run in a worker thread, with no event loop of its own)."""
        raise NotImplementedError


def _place(text: str, corpus: Corpus, by_text: dict[str, Passage]) -> Optional[tuple[str, int, int]]:
    p = by_text.get(text)
    if p is not None:
        return p.doc, p.start, p.end
    for doc in sorted(corpus.texts):
        found = corpus.locate(doc, text)
        if found is not None:
            return doc, found[0], found[1]
    return None


def cases_from_items(items: Sequence[GeneratedItem], corpus: Corpus, passages: Sequence[Passage],
                     generator: str, judge_model: str, width: int = 4) -> tuple[list[dict], list[dict]]:
    """The canonical records of the items that can be placed, and a record per dropped item
    (``slot``, ``kind``, ``reason``, ``detail``, ``question``)."""
    from .prompts import not_a_question

    by_text = {p.text: p for p in passages}
    made, dropped = [], []
    for i, item in enumerate(items, 1):
        cid = f"synth-{generator}-{i:0{width}d}"
        kind = item.kind if item.kind in KIND_TAGS else "single"
        why = not_a_question(item.question, [c for c in item.contexts if isinstance(c, str)])
        if why is not None:
            dropped.append({"slot": cid, "kind": kind, "status": "dropped", "reason": "not_a_question",
                            "detail": why,
                            "question": item.question if isinstance(item.question, str) else None})
            continue
        spans, missing = [], []
        for j, ctx in enumerate(item.contexts, 1):
            where = _place(ctx, corpus, by_text) if isinstance(ctx, str) and ctx.strip() else None
            if where is None:
                missing.append(j)
            else:
                spans.append({"doc": where[0], "start": where[1], "end": where[2], "quote": ctx})
        if missing or not spans:
            what = (f"reference context(s) {', '.join(map(str, missing))} of {len(item.contexts)} are not in "
                    "the corpus" if item.contexts else "the library recorded no reference context")
            dropped.append({"slot": cid, "kind": kind, "status": "dropped", "reason": "unplaced",
                            "detail": what, "question": item.question})
            continue
        case: dict[str, Any] = {"id": cid, "question": " ".join(item.question.split()),
                                "relevant_spans": spans}
        if item.answer:
            case["reference"] = item.answer
        case["reference_contexts"] = list(item.contexts)
        case["tags"] = ["synthetic", KIND_TAGS[kind]]
        case["metadata"] = {"synthetic": {"kind": kind, "generator": generator, "judge_model": judge_model,
                                          **({"library": item.metadata} if item.metadata else {})}}
        made.append({"slot": cid, "kind": kind, "status": "made", "question": case["question"], "case": case})
    return made, dropped
