"""What to generate: the kinds of question, the mix, and the plan of slots.

Kinds (`KINDS`), each tagged on its cases with `KIND_TAGS`:

* ``single``: a question one passage answers, with the quote that answers it;
* ``multi``: a question that needs two or three passages of different documents, each labelled;
* ``paraphrased``: a single-passage question reworded away from the passage's terms (checked: its
  term overlap with the passage is lower than the question it rewords);
* ``unanswerable``: a question near the corpus's topics that it does not answer (``answerable:
  false``; checked against the corpus by BM25 retrieval and a judge call).

`parse_mix` reads ``single=0.5,multi=0.2,...`` (weights, normalised to sum to 1). `plan_slots` gives
each of ``n`` slots its kind (counts by largest remainder, so ``n=10`` at ``single=0.5`` is exactly
5 singles; the order shuffled by the seed) and its passages: singles, paraphrased and unanswerable
questions go round the passages in an order shuffled by the seed (``variant`` counts how many times
a passage came round before, so a passage asked twice is asked for another question); a multi slot
pairs its passage with related passages of other documents: those whose tf-idf cosine with it
(`ragbridge.lexical.BM25.similarity`) is at least `RELATED_MIN`, the most similar first, the
``variant``-th best; multi slots go round only the passages that have such a partner. When no
passage has one, the multi slots keep their one passage and are dropped as ``unrelated`` (counted)
without a judge call: two unrelated passages make two questions glued together, not one that needs
both. The plan depends only on the corpus, the mix, ``n`` and the seed: the same command plans the
same slots, which is what lets a generation resume.

Passages shorter than `MIN_SOURCE_CHARS` are not written from; a document with no longer passage is
left out of the plan, and `left_out` names it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..lexical import BM25
from .passages import Passages

__all__ = ["KINDS", "KIND_TAGS", "DEFAULT_MIX", "Slot", "PlanError", "parse_mix", "allocate", "plan_slots",
           "left_out", "related", "MIN_SOURCE_CHARS", "RELATED_MIN"]

KINDS = ("single", "multi", "paraphrased", "unanswerable")
#: the tag each kind's cases carry, besides ``synthetic``
KIND_TAGS = {"single": "single-passage", "multi": "multi-hop", "paraphrased": "paraphrased",
             "unanswerable": "unanswerable"}
DEFAULT_MIX = {"single": 0.5, "multi": 0.2, "paraphrased": 0.2, "unanswerable": 0.1}
#: passages shorter than this are not written from (a title line and a sentence)
MIN_SOURCE_CHARS = 80
#: the tf-idf cosine from which two passages are related enough to make one multi-passage question
#: (measured on the bundled examples: a passage and the one on the same subject in another document
#: score 0.15 to 0.3, two passages on different subjects below 0.13)
RELATED_MIN = 0.15


class PlanError(ValueError):
    """A mix or a plan that cannot be made (says what and what to do)."""


@dataclass(frozen=True)
class Slot:
    """One question to generate: its id, kind, passages (indexes into the passages) and variant."""

    id: str
    kind: str
    passages: tuple[int, ...]
    variant: int = 0
    group: str = field(default="", compare=False)  # slots of one group run in order (same passages)


def parse_mix(text: Optional[str], kinds: tuple[str, ...] = KINDS) -> dict[str, float]:
    """``"single=0.5,multi=0.2"`` as ``{"single": 0.5/0.7, ...}`` (normalised), or `DEFAULT_MIX`
    (restricted to ``kinds``) for None."""
    if text is None:
        mix = {k: w for k, w in DEFAULT_MIX.items() if k in kinds}
        if not mix:
            mix = {k: 1.0 for k in kinds}
    else:
        mix = {}
        for part in text.split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep:
                raise PlanError(f"--mix: {part.strip()!r} is not KIND=WEIGHT (e.g. single=0.5,multi=0.2)")
            if name not in KINDS:
                raise PlanError(f"--mix: unknown kind {name!r}; the kinds are {', '.join(KINDS)}")
            if name not in kinds:
                raise PlanError(f"--mix: this generator makes {', '.join(kinds)}, not {name}")
            if name in mix:
                raise PlanError(f"--mix: {name} is given twice")
            try:
                weight = float(value)
            except ValueError:
                raise PlanError(f"--mix: the weight of {name} must be a number, "
                                f"got {value.strip()!r}") from None
            if not weight >= 0 or weight == float("inf"):
                raise PlanError(f"--mix: the weight of {name} must be 0 or more, got {value.strip()}")
            mix[name] = weight
        if not mix or sum(mix.values()) <= 0:
            raise PlanError("--mix: give at least one kind a weight above 0 (e.g. single=1)")
    total = sum(mix.values())
    return {k: w / total for k, w in mix.items() if w > 0}


def allocate(mix: dict[str, float], n: int) -> dict[str, int]:
    """How many of ``n`` questions each kind gets: largest remainder, ties to the earlier kind."""
    exact = {k: w * n for k, w in mix.items()}
    counts = {k: int(v) for k, v in exact.items()}
    left = n - sum(counts.values())
    order = sorted(mix, key=lambda k: (-(exact[k] - counts[k]), KINDS.index(k)))
    for k in order[:left]:
        counts[k] += 1
    return counts


def _width(n: int) -> int:
    return max(4, len(str(n)))


def _usable(passages: Passages) -> list[int]:
    return [i for i, p in enumerate(passages) if len(p.text.strip()) >= MIN_SOURCE_CHARS]


def left_out(passages: Passages, docs: Optional[Sequence[str]] = None) -> list[str]:
    """The documents no question is written from (no passage of `MIN_SOURCE_CHARS` characters or
    more), in name order: of ``docs`` (every document of the corpus) when given."""
    usable = {passages[i].doc for i in _usable(passages)}
    names = sorted(docs) if docs is not None else sorted({p.doc for p in passages})
    return [d for d in names if d not in usable]


def plan_slots(passages: Passages, n: int, mix: dict[str, float], seed: int,
               bm25: Optional[BM25] = None) -> list[Slot]:
    """The ``n`` slots of a generation (see the module docstring); `PlanError` when the corpus cannot
    give what the mix asks (a multi-passage question needs two documents)."""
    if n < 1:
        raise PlanError(f"--n must be at least 1, got {n}")
    usable = _usable(passages)
    if not usable:
        raise PlanError("the corpus has no passage long enough to write a question from "
                        f"(at least {MIN_SOURCE_CHARS} characters)")
    counts = allocate(mix, n)
    docs = {passages[i].doc for i in usable}
    if counts.get("multi") and len(docs) < 2:
        gone = left_out(passages)
        raise PlanError("multi-passage questions need passages of two or more documents, and "
                        + (f"{len(docs)} of the corpus's {len(docs) + len(gone)} documents has one long "
                           f"enough to write from ({', '.join(gone)}: no passage of {MIN_SOURCE_CHARS} "
                           "characters or more)" if gone else f"the corpus has {len(docs)}")
                        + ": leave multi out of --mix, or add documents")
    rng = random.Random(seed)
    kinds = [k for k in KINDS for _ in range(counts.get(k, 0))]
    rng.shuffle(kinds)
    bm25 = bm25 or BM25([p.text for p in passages])
    partners: dict[int, list[int]] = {}
    if counts.get("multi"):
        partners = {i: related(i, passages, usable, bm25) for i in usable}
    paired = [i for i in usable if partners.get(i)]
    order = {k: rng.sample(usable, len(usable)) for k in KINDS}
    if paired:
        order["multi"] = rng.sample(paired, len(paired))
    used: dict[str, int] = {k: 0 for k in KINDS}
    width = _width(n)
    slots = []
    for i, kind in enumerate(kinds):
        k = used[kind]
        used[kind] += 1
        pool = order[kind]
        seed_passage = pool[k % len(pool)]
        variant = k // len(pool)
        chosen: tuple[int, ...] = (seed_passage,)
        if kind == "multi":
            others = partners.get(seed_passage, [])
            size = 3 if k % 3 == 2 else 2
            chosen = (seed_passage, *_pick(others, variant, size - 1, passages))
        elif kind == "unanswerable":
            near = [j for j in bm25.ranking(passages[seed_passage].text) if j != seed_passage and j in usable]
            chosen = (seed_passage, *near[:2])
        group = kind + ":" + ",".join(map(str, chosen[:1] if kind != "multi" else chosen))
        slots.append(Slot(f"synth-{i + 1:0{width}d}", kind, chosen, variant, group))
    return slots


def related(seed: int, passages: Passages, usable: Sequence[int], bm25: BM25) -> list[int]:
    """The usable passages of other documents related to passage ``seed`` (tf-idf cosine at least
    `RELATED_MIN`), most similar first."""
    doc = passages[seed].doc
    scored = [(bm25.similarity(seed, j), j) for j in usable if passages[j].doc != doc]
    return [j for s, j in sorted(scored, key=lambda x: (-x[0], x[1])) if s >= RELATED_MIN]


def _pick(others: list[int], variant: int, count: int, passages: Passages) -> list[int]:
    """``count`` partners of distinct documents (fewer when there are not as many), starting at the
    ``variant``-th best."""
    picked: list[int] = []
    docs: set[str] = set()
    for j in others[variant % max(1, len(others)):] + others:
        if passages[j].doc in docs or j in picked:
            continue
        picked.append(j)
        docs.add(passages[j].doc)
        if len(picked) == count:
            break
    return picked
