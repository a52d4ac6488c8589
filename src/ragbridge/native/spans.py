"""Character-level retrieval metrics on span labels, as in Chroma's chunking evaluation.

In the style of `ragbridge.native.ranking`: one pass over the cases (:func:`prepare`) turns their
span labels and placed chunks into flat NumPy arrays (:class:`SpanSets`), and each metric is a
small vectorised kernel over them returning one ``float64`` per case (``NaN`` where undefined). The
dispatcher is `ragbridge.native.ranking.evaluate`, which runs these kernels for the names
``span_recall@k``, ``span_precision@k``, ``span_iou@k`` and ``precision_omega``.

Conventions
    The labels are a case's span labels of grade >= 1 (``relevant_spans``; grades count only as >= 1
    or not); the retrieved characters are those of its top ``k`` chunks after repeated chunk ids are
    dropped (as for ranking). Every chunk and label must be placed (``doc``, ``start``, ``end``:
    `ragbridge.formats.corpus.SpanPlacer` does it when a golden set is read). Offsets are characters,
    ``end`` exclusive; two stretches of different documents never overlap. ``I`` is the number of
    labelled characters that some top-k chunk covers.
Merged arithmetic (``arithmetic="merged"``, the default)
    ``G`` is the union of the labels, ``R`` the union of the top-k chunks, each character counted
    once however many labels or chunks hold it: ``span_recall@k = I / |G|``, ``span_precision@k =
    I / |R|`` (0 when nothing was retrieved), ``span_iou@k = I / |R ∪ G|``. Overlapping
    (sliding-window) chunks are counted once, so an overlap neither inflates nor deflates a figure.
Chroma's arithmetic (``arithmetic="chroma"``, brandonstarxel/chunking_evaluation,
evaluation_framework/base_evaluation.py)
    The same ``I``, over sums that are not merged: ``span_recall@k = I / Σ|label|``,
    ``span_precision@k = I / Σ|chunk|`` over the top-k chunks (an overlap counted twice),
    ``span_iou@k = I / (Σ|chunk| + Σ |label not covered by R|)``.
Precision-omega
    The best precision a chunking allows, with perfect retrieval: ``C`` is the union of every chunk of
    the chunking (`ragbridge.formats.corpus.Chunking`) that overlaps a label,
    ``precision_omega = |C ∩ G| / |C ∪ G|``. Merged,
    a chunk overlaps a label when they share a character; Chroma's arithmetic also takes a chunk that
    only touches a label (ends where it starts), as Chroma's ``intersect_two_ranges`` does. Undefined
    without a chunking.
Undefined values
    A case without a span label of grade >= 1 is ``NaN`` for every metric here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["ARITHMETICS", "SpanSets", "prepare", "recall", "precision", "iou", "precision_omega", "KERNELS",
           "placement", "grade_of", "span_lists", "unplaced", "check_arithmetic", "missed_spans",
           "describe_missed", "MISSED_BY", "missed_reason"]

ARITHMETICS = ("merged", "chroma")


def check_arithmetic(arithmetic: str) -> None:
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"span arithmetic must be one of {', '.join(ARITHMETICS)}, got {arithmetic!r}")


@dataclass(frozen=True, eq=False)
class SpanSets:
    """Every case's span labels and placed chunks as flat arrays (built by :func:`prepare`).

    Per case (``n_cases``): ``defined`` (a span label of grade >= 1). A *group* is one (case,
    document) pair: ``group_case``. Per label of grade >= 1: ``lab_case``, ``lab_group``,
    ``lab_doc``, ``lab_start``, ``lab_end``. Per chunk of a span-labelled case, repeated ids
    dropped, in rank order: ``ch_case``, ``ch_rank`` (1-based), ``ch_group``, ``ch_start``,
    ``ch_end``. ``docs``: the document names, ``lab_doc`` indexing them.
    """

    n_cases: int
    defined: np.ndarray
    group_case: np.ndarray
    lab_case: np.ndarray
    lab_group: np.ndarray
    lab_doc: np.ndarray
    lab_start: np.ndarray
    lab_end: np.ndarray
    ch_case: np.ndarray
    ch_rank: np.ndarray
    ch_group: np.ndarray
    ch_start: np.ndarray
    ch_end: np.ndarray
    docs: tuple


def placement(item: Any) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """``(doc, start, end)`` of a chunk or span label (a mapping or an object)."""
    if type(item) is dict:
        return item.get("doc"), item.get("start"), item.get("end")
    return item.doc, item.start, item.end


def grade_of(span: Any) -> int:
    return span.get("grade", 1) if type(span) is dict else span.grade


def span_lists(cases: Sequence[Any]):
    span_lists = getattr(cases, "span_lists", None)
    if span_lists is not None:
        return span_lists()
    return (getattr(case, "relevant_spans", None) or None for case in cases)


def _chunks_of(cases: Sequence[Any]):
    chunk_lists = getattr(cases, "chunk_lists", None)
    if chunk_lists is not None:
        return ((ids, ctx) for ids, ctx, _ in chunk_lists())
    return (([c.id for c in case.contexts], case.contexts) for case in cases)


def unplaced(what: str) -> ValueError:
    return ValueError(f"{what} has no doc, start and end: place the cases against their corpus first "
                      "(ragbridge run --corpus, or ragbridge.evaluate(..., corpus=...))")


def prepare(cases: Sequence[Any]) -> SpanSets:
    """Walk the cases once and return the arrays of their span labels and placed chunks.

    ``cases``: `~ragbridge.schema.Case` objects or a `~ragbridge.formats.batches.CaseBatch`. Only
    span-labelled cases are read chunk by chunk. ValueError for a chunk or label of a span-labelled
    case that is not placed.
    """
    docs: dict[str, int] = {}
    defined: list[int] = []
    group_case: list[int] = []
    lab = ([], [], [], [], [])  # case, group, doc, start, end
    ch = ([], [], [], [], [])  # case, rank, group, start, end
    ci = -1
    for ci, (spans, (ids, ctx)) in enumerate(zip(span_lists(cases), _chunks_of(cases))):
        if not spans:
            continue
        groups: dict[int, int] = {}

        def group_of(doc: str) -> tuple[int, int]:
            d = docs.setdefault(doc, len(docs))
            g = groups.get(d)
            if g is None:
                g = groups[d] = len(group_case)
                group_case.append(ci)
            return d, g

        any_label = False
        for span in spans:
            if grade_of(span) <= 0:
                continue
            doc, start, end = placement(span)
            if start is None:
                raise unplaced(f"a span label of case {ci}")
            d, g = group_of(doc)
            for column, value in zip(lab, (ci, g, d, start, end)):
                column.append(value)
            any_label = True
        if not any_label:
            continue
        defined.append(ci)
        if ctx is None:
            if ids:
                raise unplaced(f"chunk {ids[0]!r} of case {ci}")
            continue
        seen: set = set()
        rank = 0
        for cid, chunk in zip(ids, ctx):
            if cid in seen:
                continue
            seen.add(cid)
            rank += 1
            doc, start, end = placement(chunk)
            if start is None:
                raise unplaced(f"chunk {cid!r} of case {ci}")
            _, g = group_of(doc)
            for column, value in zip(ch, (ci, rank, g, start, end)):
                column.append(value)
    n = ci + 1
    is_defined = np.zeros(n, dtype=bool)
    is_defined[np.array(defined, dtype=np.int64)] = True
    a = [np.array(c, dtype=np.int64) for c in lab]
    b = [np.array(c, dtype=np.int64) for c in ch]
    return SpanSets(n_cases=n, defined=is_defined, group_case=np.array(group_case, dtype=np.int64),
                    lab_case=a[0], lab_group=a[1], lab_doc=a[2], lab_start=a[3], lab_end=a[4],
                    ch_case=b[0], ch_rank=b[1], ch_group=b[2], ch_start=b[3], ch_end=b[4],
                    docs=tuple(docs))


# --------------------------------------------------------------------------------------------- arithmetic


def _union(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the number of characters the group's stretches cover (each counted once)."""
    if not group.size:
        return np.zeros(n_groups, dtype=np.float64)
    width = int(end.max()) + 1  # each group on its own stretch of one line: a running maximum per group
    s = group * width + start
    e = group * width + end
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    before = np.empty_like(reach)
    before[0] = s[0]
    before[1:] = reach[:-1]
    return np.bincount(group[order], weights=np.clip(e - np.maximum(s, before), 0, None),
                       minlength=n_groups).astype(np.float64)


def _pairs(left_group: np.ndarray, right_group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (left index, right index) pair of the same group."""
    order = np.argsort(right_group, kind="stable")
    sorted_groups = right_group[order]
    lo = np.searchsorted(sorted_groups, left_group, "left")
    hi = np.searchsorted(sorted_groups, left_group, "right")
    counts = hi - lo
    total = int(counts.sum())
    left = np.repeat(np.arange(left_group.size, dtype=np.int64), counts)
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return left, order[np.repeat(lo, counts) + within]


def _per_case(s: SpanSets, per_group: np.ndarray) -> np.ndarray:
    return np.bincount(s.group_case, weights=per_group, minlength=s.n_cases)[: s.n_cases]


class _TopK:
    """The sums every kernel at one cut-off needs, computed once."""

    def __init__(self, s: SpanSets, k: int) -> None:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        n_groups = s.group_case.size
        top = s.ch_rank <= k
        cg, cs, ce = s.ch_group[top], s.ch_start[top], s.ch_end[top]
        li, ci = _pairs(s.lab_group, cg)
        i_start = np.maximum(s.lab_start[li], cs[ci])
        i_end = np.minimum(s.lab_end[li], ce[ci])
        hit = i_end > i_start
        li, i_start, i_end = li[hit], i_start[hit], i_end[hit]
        self.covered = _per_case(s, _union(s.lab_group[li], i_start, i_end, n_groups))  # I
        self.labelled = _per_case(s, _union(s.lab_group, s.lab_start, s.lab_end, n_groups))  # |G|
        self.retrieved = _per_case(s, _union(cg, cs, ce, n_groups))  # |R|
        self.label_sum = np.bincount(s.lab_case, weights=s.lab_end - s.lab_start, minlength=s.n_cases)
        self.chunk_sum = np.bincount(s.ch_case[top], weights=ce - cs, minlength=s.n_cases)
        per_label = _union(li, i_start, i_end, s.lab_case.size)  # each label's covered characters
        self.uncovered_sum = np.bincount(s.lab_case, weights=(s.lab_end - s.lab_start) - per_label,
                                         minlength=s.n_cases)


def _ratio(s: SpanSets, numer: np.ndarray, denom: np.ndarray, empty: float = np.nan) -> np.ndarray:
    out = np.full(s.n_cases, empty, dtype=np.float64)
    np.divide(numer, denom, out=out, where=denom > 0)
    out[~s.defined] = np.nan
    return out


def recall(s: SpanSets, k: int, arithmetic: str = "merged") -> np.ndarray:
    """Labelled characters covered by the top k chunks / labelled characters (merged: ``I / |G|``;
    chroma: ``I / Σ|label|``). NaN where the case has no span label of grade >= 1."""
    check_arithmetic(arithmetic)
    t = _TopK(s, k)
    return _ratio(s, t.covered, t.labelled if arithmetic == "merged" else t.label_sum)


def precision(s: SpanSets, k: int, arithmetic: str = "merged") -> np.ndarray:
    """Labelled characters covered by the top k chunks / characters of the top k chunks (merged:
    ``I / |R|``; chroma: ``I / Σ|chunk|``), 0 when nothing was retrieved. NaN where the case has no
    span label of grade >= 1."""
    check_arithmetic(arithmetic)
    t = _TopK(s, k)
    return _ratio(s, t.covered, t.retrieved if arithmetic == "merged" else t.chunk_sum, empty=0.0)


def iou(s: SpanSets, k: int, arithmetic: str = "merged") -> np.ndarray:
    """Intersection over union of the top k chunks and the labels (merged: ``I / |R ∪ G|``; chroma:
    ``I / (Σ|chunk| + Σ|label not covered|)``). NaN where the case has no span label of grade >= 1."""
    check_arithmetic(arithmetic)
    t = _TopK(s, k)
    if arithmetic == "merged":
        return _ratio(s, t.covered, t.retrieved + t.labelled - t.covered)
    return _ratio(s, t.covered, t.chunk_sum + t.uncovered_sum)


# --------------------------------------------------------------------------------------------- omega


def precision_omega(s: SpanSets, chunking: Optional[Any], arithmetic: str = "merged") -> np.ndarray:
    """``|C ∩ G| / |C ∪ G|`` with ``C`` the chunks of ``chunking`` that overlap a label (chroma: or
    touch one). NaN where the case has no span label of grade >= 1, and everywhere without a chunking.
    ``chunking`` is what the run's options hold (`ragbridge.backend.RunOptions.chunking`, read by the
    formats layer: ``overlapping(doc, start, end, touching)`` gives the chunks' starts and ends)."""
    check_arithmetic(arithmetic)
    if chunking is None:
        return np.full(s.n_cases, np.nan)
    touching = arithmetic == "chroma"
    groups, starts, ends = [], [], []
    for g, doc, start, end in zip(s.lab_group.tolist(), s.lab_doc.tolist(), s.lab_start.tolist(),
                                  s.lab_end.tolist()):
        cs, ce = chunking.overlapping(s.docs[doc], start, end, touching)
        groups.append(np.full(cs.size, g, dtype=np.int64))
        starts.append(cs)
        ends.append(ce)
    n_groups = s.group_case.size
    cg = np.concatenate(groups) if groups else np.empty(0, dtype=np.int64)
    cs = np.concatenate(starts) if starts else np.empty(0, dtype=np.int64)
    ce = np.concatenate(ends) if ends else np.empty(0, dtype=np.int64)
    li, ci = _pairs(s.lab_group, cg)
    i_start = np.maximum(s.lab_start[li], cs[ci])
    i_end = np.minimum(s.lab_end[li], ce[ci])
    hit = i_end > i_start
    covered = _per_case(s, _union(s.lab_group[li[hit]], i_start[hit], i_end[hit], n_groups))
    labelled = _per_case(s, _union(s.lab_group, s.lab_start, s.lab_end, n_groups))
    chosen = _per_case(s, _union(cg, cs, ce, n_groups))
    return _ratio(s, covered, chosen + labelled - covered)


#: metric base name -> kernel ``f(span_sets, k, arithmetic)`` (``precision_omega``: ``f(span_sets,
#: chunking, arithmetic)``)
KERNELS = {"span_recall": recall, "span_precision": precision, "span_iou": iou,
           "precision_omega": precision_omega}


# --------------------------------------------------------------------------------------------- what is missed


def _field(item: Any, name: str) -> Any:
    return item.get(name) if type(item) is dict else getattr(item, name, None)


def _first_words(text: str, n: int = 6) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def missed_spans(spans: Sequence[Any], chunks: Sequence[Any], k: int, min_overlap: float,
                 matched_only: bool = False) -> list[dict[str, Any]]:
    """Each span label of grade >= 1 that the top ``k`` chunks do not wholly cover (``matched_only``:
    that no top-k chunk matches by the span rule), in the order listed: ``doc``, ``start``, ``end``,
    ``grade``, ``covered`` (its characters the top k hold, overlapping chunks merged), ``matched``
    (a top-k chunk matches it by the span rule, `ragbridge.schema.span_overlap_matches`), ``rank``
    (of the first chunk of the whole list matching it, None when none does) and ``words`` (its
    first words: from its quote, else from a retrieved chunk that holds its start; None when
    neither does). Spans and chunks are mappings or objects with ``doc``, ``start`` and ``end``
    (placed); repeated chunk ids count once, as for ranking."""
    from ..schema import span_overlap_matches

    seen: set = set()
    ranked = []
    for c in chunks:
        cid = _field(c, "id")
        if cid in seen:
            continue
        seen.add(cid)
        ranked.append(c)
    out = []
    for span in spans:
        if grade_of(span) <= 0:
            continue
        doc, start, end = placement(span)
        if start is None:
            continue
        pieces, matched, rank, words = [], False, None, None
        quote = _field(span, "quote")
        if quote:
            words = _first_words(quote)
        for i, c in enumerate(ranked, 1):
            cdoc, cs, ce = placement(c)
            if cdoc != doc or cs is None:
                continue
            shared = min(ce, end) - max(cs, start)
            hit = span_overlap_matches(shared, end - start, ce - cs, min_overlap)
            if hit and rank is None:
                rank = i
            if i <= k and shared > 0:
                pieces.append((max(cs, start), min(ce, end)))
                matched = matched or hit
            text = _field(c, "text")
            if words is None and text and cs <= start < ce and len(text) == ce - cs:
                words = _first_words(text[start - cs:min(end, ce) - cs])
        covered, reach = 0, start
        for a, b in sorted(pieces):
            covered += max(0, b - max(a, reach))
            reach = max(reach, b)
        if covered < end - start and not (matched_only and matched):
            out.append({"doc": doc, "start": start, "end": end, "grade": grade_of(span), "covered": covered,
                        "matched": matched, "rank": rank, "words": words})
    return out


def describe_missed(missed: Sequence[dict[str, Any]], k: int, limit: int = 3) -> str:
    """One line naming the spans of `missed_spans` (the first ``limit``, then how many more)."""
    parts = []
    for m in missed[:limit]:
        words = f' "{m["words"]}"' if m["words"] else ""
        n = m["end"] - m["start"]
        where = (f", a top-{k} chunk matches it" if m["matched"] else
                 f", first matched at rank {m['rank']}" if m["rank"] else ", no retrieved chunk matches it")
        parts.append(f"{m['doc']}[{m['start']}:{m['end']}]{words} ({m['covered']} of {n} characters in "
                     f"the top {k}{where})")
    more = len(missed) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


#: the metrics whose values below 1 name the span labels missed: metric base -> whether only the labels
#: no top-k chunk matches are named (else: every label the top k do not wholly cover)
MISSED_BY = {"recall": True, "hit": True, "span_recall": False}


def missed_reason(base: str, spans: Sequence[Any], chunks: Sequence[Any], k: int,
                  min_overlap: float) -> tuple[list[dict[str, Any]], Optional[str]]:
    """What a value below 1 of ``base@k`` (a metric of `MISSED_BY`) misses: the labels
    (`missed_spans`) and the reason naming them (None when none is missed)."""
    matched_only = MISSED_BY[base]
    missed = missed_spans(spans, chunks, k, min_overlap, matched_only)
    if not missed:
        return missed, None
    what = f"no top-{k} chunk matches" if matched_only else f"not wholly in the top {k}"
    return missed, f"{what}: {describe_missed(missed, k)}"
