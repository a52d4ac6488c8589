"""Native, deterministic ranking metrics over canonical :class:`~ragbridge.schema.Case` objects.

In the style of ranx: one pass over the cases (:func:`prepare`) turns every case into a few flat
NumPy arrays (:class:`Ranked`), and each metric is a small vectorised kernel over those arrays that
returns one ``float64`` per case (``NaN`` where the metric is undefined). :func:`evaluate` is the
one dispatcher: it parses metric names such as ``"ndcg@10"`` and runs the kernels. The native
backend scores through it (the CLI and ``ragbridge.evaluate``), and so do the oracle tests against
pytrec_eval and ranx (``tests/test_ranking.py``) and ``benchmarks/bench_ranking.py``.

Size: the kernels are a few lines each; they sit beside the conventions below and the one
dispatcher, as in ranx, so that each convention is stated once next to the code that keeps it.

Conventions (trec_eval's, with ragbridge's relevance rule). With chunk-level labels and no repeated
chunk ids every value equals trec_eval's (pytrec_eval) to floating-point rounding.

Relevance rule
    A retrieved chunk *matches* a label when its ``id`` is a key of ``Case.relevant``, or else (its id
    is not a key) when its ``source`` is, or else when it overlaps a span label of
    ``Case.relevant_spans`` by the span rule. An id match always takes precedence, even when the id's
    grade is 0 and the source's is higher. A chunk is *relevant* when the grade of the label it
    matches is >= 1. Grades are non-negative integers (the schema enforces this); ``R`` is the number
    of labels with grade >= 1 (ids, sources and spans together), retrieved or not.
Span rule
    A placed chunk matches a span label of grade >= 1 in the same document when they share at least
    one character and at least ``min_overlap`` (default 0.5, ``--span-min-overlap``) of the shorter of
    the two (`ragbridge.schema.span_overlap_matches`). A chunk can match several span labels (a
    long chunk holding two labelled sentences, or a phrase and the paragraph around it): it matches
    every one of them. ``span_recall@k`` (`ragbridge.native.spans`) measures how much of each span the
    top k cover.
Duplicates
    A chunk id repeated in ``Case.contexts`` is dropped after its first occurrence *before* ranking,
    so later chunks move up; the number dropped per case is ``Ranked.duplicates``. (trec_eval rejects
    such a run outright.) Chunks with distinct ids from the same source are not duplicates.
Rank
    The 1-based position in the de-duplicated ``contexts`` list (best first). Chunk scores are
    ignored, so there are no ties and no float32 effects.
Counting, per metric
    Each label is *found* at the first chunk matching it; the labels one chunk finds form a *group*
    (with chunk-id and section labels a chunk matches one label, so every group is one label).
    ``recall@k`` counts the labels found in the top k, however many chunks match them: one chunk
    holding two labels counts both, so larger chunks never lose recall for holding more; it cannot
    exceed 1. ``hit@k`` is 1 when some top-k chunk matches a label. ``precision@k`` counts the
    relevant *chunks* in the top k, so two chunks of the same labelled section both count. ``mrr``
    uses the first relevant chunk. ``ndcg`` and ``map`` below credit each label once, at the chunk
    that finds it; a chunk finding no label (a second chunk of a section found above) adds no gain
    and is non-relevant for AP. With chunk-id labels every value is trec_eval's.
k beyond the list
    Missing ranks are non-relevant: ``precision@k = hits / k`` (trec_eval ``P_k``).
nDCG
    Gain is the grade (``gain="linear"``, trec_eval ``ndcg_cut``, ranx ``ndcg``) or ``2**grade - 1``
    (``gain="exponential"``, ranx ``ndcg_burges``); discount ``1 / log2(rank + 1)``. DCG@k sums each
    label's gain at the rank of the chunk that finds it (<= k), so a chunk finding a group carries
    the sum of its labels' gains. The ideal DCG ranks the groups (each label no chunk finds a group
    of its own) by their gain at ranks 1 .. min(k, groups). So DCG <= ideal (a group's gain is at a
    rank no better than its place in the ideal), and a ranking of the groups by gain with nothing
    between them scores 1: one chunk holding every label at rank 1 is perfect. With chunk-id labels
    the ideal is the top ``min(k, R)`` grades. ``ndcg`` without k is over the whole list.
AP
    Sum, over the labels found at rank <= k, of the precision at that rank (counting the chunks that
    find a label), divided by ``R`` (trec_eval ``map_cut``; ``map`` without k is trec_eval
    ``map``). Each term is at most 1, so AP is; every label found with only label-finding chunks
    above it scores 1.
MRR
    ``mrr`` = 1 / rank of the first relevant chunk over the whole list (trec_eval ``recip_rank``,
    which has no cut-off), 0 if there is none; ``mrr@k`` is 0 when that rank is > k.
Undefined values
    A case whose ``relevant`` is empty (unlabelled) is ``NaN`` for every metric. A case with labels
    but ``R = 0`` (only grade-0 labels) is ``NaN`` for recall, mrr, ndcg and map, and a defined 0 for
    precision and hit. (trec_eval scores the latter 0 everywhere and silently drops the former.)
    ``NaN`` must never be averaged as 0: use ``np.nanmean`` and report the count.

Cost: :func:`prepare` reads each chunk's ``id`` (and, for labelled cases, ``source``) once in a
comprehension, finds duplicates and id matches with set operations, and visits only matched
chunks; every metric is then a few NumPy passes over arrays whose length is the number of relevant
retrieved chunks. See ``benchmarks/bench_ranking.py``.
"""

from __future__ import annotations

import re
from itertools import chain, compress, count
from operator import itemgetter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from ..schema import SPAN_MIN_OVERLAP, span_overlap_matches
from . import spans as span_kernels

if TYPE_CHECKING:  # pragma: no cover
    from ..schema import Case

__all__ = [
    "Ranked",
    "prepare",
    "recall",
    "precision",
    "hit",
    "mrr",
    "ndcg",
    "average_precision",
    "METRICS",
    "NEEDS_K",
    "GAINS",
    "NO_RELEVANT",
    "evaluate",
    "parse_metric",
    "Prepared",
    "reasons",
    "missed_labels",
]

GAINS = ("linear", "exponential")
#: the reason of a ranking score of a case whose labels all have grade 0 (R = 0), where it is a number
NOTHING_TO_FIND = "no label with grade >= 1"
#: what recall, MRR, nDCG and MAP are for a case whose labels all have grade 0 (R = 0): undefined
#: (ragbridge's default, left out of means) or 0 (trec_eval, which averages such a query as 0)
NO_RELEVANT = ("undefined", "zero")
_R_DIVIDES = ("recall", "mrr", "ndcg", "map")


@dataclass(frozen=True, eq=False)
class Ranked:
    """Every case's matches as flat NumPy arrays (built by :func:`prepare`; treat as read-only).

    Per case (length ``n_cases``):

    - ``duplicates``: repeated chunk ids dropped before ranking.
    - ``labelled``: ``relevant`` (or ``relevant_spans``) is non-empty.
    - ``n_relevant``: ``R``, the number of labels with grade >= 1.
    - ``n_retrieved``: length of the de-duplicated ``contexts``.
    - ``first_rank``: rank of the first relevant chunk, 0 when none was retrieved.
    - ``by_chunk``: matched chunk by chunk (a chunk's source is a label, or the case has span labels).

    Per relevant retrieved chunk (grade >= 1), sorted by (case, rank): ``case_index``, ``rank``
    (1-based), ``new`` (it matches a label no chunk above it matches).

    Per label with grade >= 1 that some retrieved chunk matches (unsorted): ``found_case``,
    ``found_rank`` (the rank of the first chunk matching it), ``found_grade`` and ``found_ap`` (the
    precision at that rank, counting the chunks that are ``new``): what recall, hit, nDCG's DCG and
    AP count.

    Per label with grade >= 1, retrieved or not (for the ideal DCG): ``label_case``,
    ``label_grade``, ``label_group`` (the labels one chunk matches first share a group; every other
    label is a group of its own).
    """

    n_cases: int
    duplicates: np.ndarray
    labelled: np.ndarray
    n_relevant: np.ndarray
    n_retrieved: np.ndarray
    first_rank: np.ndarray
    by_chunk: np.ndarray
    case_index: np.ndarray
    rank: np.ndarray
    new: np.ndarray
    found_case: np.ndarray
    found_rank: np.ndarray
    found_grade: np.ndarray
    found_ap: np.ndarray
    label_case: np.ndarray
    label_grade: np.ndarray
    label_group: np.ndarray
    _ideal: dict = field(default_factory=dict, repr=False)
    #: per cut-off k, the reasons `reasons` gave of recall@k or hit@k below 1 for cases whose chunk ids
    #: were ranked as read (the same words for both metrics: the labels the top k miss)
    _missed: dict = field(default_factory=dict, repr=False)

    def ideal(self, gain: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ideal ranking for ``gain``: per group, ``(case, rank, gain)``, each case's groups
        ordered by their gain (the sum of their labels' gains), highest first."""
        got = self._ideal.get(gain)
        if got is None:
            n_groups = int(self.label_group.max()) + 1 if self.label_group.size else 0
            sizes = np.bincount(self.label_group, minlength=n_groups)
            if bool((sizes <= 1).all()):  # every label alone (chunk-id labels): order by grade
                cases, grades = self.label_case, self.label_grade
                top = int(grades.max()) if grades.size else 0
                if top < 2**20 and self.n_cases < 2**40:  # one stable sort on a combined key
                    order = np.argsort(cases * (top + 1) + (top - grades), kind="stable")
                else:
                    order = np.lexsort((-grades, cases))
                cases, gains = cases[order], _gain(grades[order], gain)
            else:
                present = sizes > 0
                gains = np.bincount(self.label_group, weights=_gain(self.label_grade, gain),
                                    minlength=n_groups)[present]
                cases = np.zeros(n_groups, dtype=np.int64)
                cases[self.label_group] = self.label_case
                cases = cases[present]
                order = np.lexsort((-gains, cases))
                cases, gains = cases[order], gains[order]
            per_case = np.bincount(cases, minlength=self.n_cases)
            start = np.cumsum(per_case) - per_case
            ranks = np.arange(1, cases.size + 1, dtype=np.int64) - start[cases]
            got = self._ideal[gain] = (cases, ranks, gains)
        return got


def _to_int64(values: list, what: str) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError as exc:  # a grade beyond int64
        raise ValueError(f"{what} must fit in a 64-bit integer") from exc


def _first_occurrences(ids: list) -> list[int]:
    """The positions in ``ids`` of each id's first occurrence (a repeated id's later chunks dropped)."""
    seen: set = set()
    kept = []
    for i, cid in enumerate(ids):
        if cid not in seen:
            seen.add(cid)
            kept.append(i)
    return kept


def _match_slow(ci, ids, chunks, rel, spans, min_overlap, s_case, s_rank, s_new, f_case, f_rank, f_grade,
                groups, next_group):
    """Match one case chunk by chunk (used only when some chunk's source is a label, or the case
    has span labels): the id rule first (ids, then sources, of ``rel``), else the span rule (see
    the module docstring). Each relevant chunk is appended to ``s_*`` (``s_new``: it matches a label
    no chunk above it matches); each label of grade >= 1 some chunk matches, with the 0-based rank of
    the first such chunk, to ``f_*``; each label (``rel``'s, then the spans, as their grades are
    listed) gets its group id in ``groups``: the labels a chunk matches first share one, every other
    label has its own. Returns the next free group id."""
    labels: dict[str, list] = {}  # doc -> [(label index, start, end, grade)] of grade >= 1
    for j, span in enumerate(spans):
        grade = span_kernels.grade_of(span)
        if grade > 0:
            doc, start, end = span_kernels.placement(span)
            if start is None:
                raise span_kernels.unplaced(f"span label {j} of case {ci}")
            labels.setdefault(doc, []).append((j, start, end, grade))
    found: dict = {}  # label -> rank of the first chunk matching it
    if chunks is None:
        if ids:
            raise span_kernels.unplaced(f"chunk {ids[0]!r} of case {ci}")
    else:
        sources = _sources(chunks)
        for i, cid in enumerate(ids):
            label: Any = cid if cid in rel else (sources[i] if sources[i] in rel else None)
            if label is not None:
                if rel[label] <= 0:
                    continue
                new = found.setdefault(label, i) == i
            elif not labels:
                continue
            else:
                doc, start, end = span_kernels.placement(chunks[i])
                if start is None:
                    raise span_kernels.unplaced(f"chunk {cid!r} of case {ci}")
                new = matched = False
                for j, ls, le, lg in labels.get(doc, ()):
                    overlap = min(end, le) - max(start, ls)
                    if span_overlap_matches(overlap, le - ls, end - start, min_overlap):
                        matched = True
                        new = found.setdefault(("span", j), i) == i or new
                if not matched:
                    continue
            s_case.append(ci)
            s_rank.append(i)
            s_new.append(new)
    by_rank: dict[int, int] = {}  # rank -> the group of the labels first matched there
    keys = [*rel, *(("span", j) for j in range(len(spans)))]
    grades = [*rel.values(), *map(span_kernels.grade_of, spans)]
    for key, grade in zip(keys, grades):
        rank = found.get(key)
        if rank is None:
            groups.append(next_group)
            next_group += 1
            continue
        if rank not in by_rank:
            by_rank[rank] = next_group
            next_group += 1
        groups.append(by_rank[rank])
        f_case.append(ci)
        f_rank.append(rank)
        f_grade.append(grade)
    return next_group


def _chunk_rows(cases):
    """Per case ``(chunk ids, chunks, relevant, ranked)``: from a `~ragbridge.formats.batches.CaseBatch`
    (what a run scores: its records read as they are, ``chunks`` None where every chunk is an id
    alone; ``ranked``, where not None, the number of chunk ids, of repeated ones and each label's rank
    among them, in place of the ids: `CaseBatch.chunk_rows`), else from `Case` objects."""
    chunk_rows = getattr(cases, "chunk_rows", None)
    if chunk_rows is not None:
        return chunk_rows()
    return (([c.id for c in case.contexts], case.contexts, case.relevant, None) for case in cases)


def _sources(chunks: list) -> list:
    if chunks and type(chunks[0]) is dict:
        return [c.get("source") for c in chunks]
    return [c.source for c in chunks]


def prepare(cases: Sequence["Case"], min_overlap: float = SPAN_MIN_OVERLAP) -> Ranked:
    """Walk the cases once, apply the relevance rule and return flat arrays for the metric kernels.

    ``min_overlap`` is the span rule's (see the module docstring); a span-labelled case is matched
    chunk by chunk, and its chunks and labels must be placed (ValueError otherwise).

    ``cases`` is a sequence of :class:`~ragbridge.schema.Case` (anything with ``contexts``, a list of
    chunks with ``id`` and ``source``, and ``relevant``, a mapping of id or source to grade), or a
    ``CaseBatch`` of canonical records (read as they are: no object per chunk; a record whose chunks
    are ids alone gives its list of ids as it was read). Per chunk, the only Python work is reading
    ``id`` (and, for labelled cases, ``source``) in a comprehension, where the ids are not given
    already; duplicates and id matches are found with set operations, and only matched chunks are
    visited one by one.
    """
    n_ctx: list[int] = []  # raw context length per case
    dup_case: list[int] = []  # sparse: cases with repeated ids, and how many were dropped
    dup_n: list[int] = []
    lab_case: list[int] = []  # labelled cases, their label count, and all their grades
    lab_n: list[int] = []
    all_grades: list[int] = []
    groups: list[int] = []  # per label (as all_grades): its group id
    hit_case: list[int] = []  # fast path: cases with id matches and how many
    hit_n: list[int] = []
    m_rank: list[int] = []  # 0-based rank of each matched chunk (grade filtered later)
    m_grade: list[int] = []
    s_case: list[int] = []  # slow path (sources, spans): one entry per relevant chunk
    s_rank: list[int] = []
    s_new: list[bool] = []
    f_case: list[int] = []  # slow path: one entry per label (grade >= 1) some chunk matches
    f_rank: list[int] = []
    f_grade: list[int] = []
    slow: list[int] = []  # cases matched chunk by chunk
    ranked_case: list[int] = []  # cases whose chunk ids were ranked as they were read, their label
    ranked_n: list[int] = []  # count, and each label's rank (0: not retrieved)
    ranked_rank: list[int] = []
    ranked_case_append, ranked_n_append, ranked_rank_extend = \
        ranked_case.append, ranked_n.append, ranked_rank.extend
    n_ctx_append, lab_case_append, lab_n_append = n_ctx.append, lab_case.append, lab_n.append
    grades_extend, hit_case_append, hit_n_append = all_grades.extend, hit_case.append, hit_n.append
    rank_extend, grade_extend = m_rank.extend, m_grade.extend
    next_group = 0

    _check_min_overlap(min_overlap)
    ci = -1
    whole = getattr(cases, "ranked_rows", None)
    whole = whole() if whole is not None else None
    if whole is not None:  # every case's chunk ids ranked as they were read: the loop's lists at once
        rels, ranks = whole  # (arrays where the loop's lists go to NumPy: no list of a value a label)
        ci = len(ranks) - 1
        n_ctx = np.fromiter(map(itemgetter(0), ranks), dtype=np.int64, count=len(ranks))
        repeats = list(map(itemgetter(1), ranks))
        dup_case = list(compress(count(), repeats))
        dup_n = list(filter(None, repeats))
        lab_case = ranked_case = list(compress(count(), rels))
        labelled_rels = list(filter(None, rels))
        lab_n = ranked_n = list(map(len, labelled_rels))
        all_grades = np.fromiter(chain.from_iterable(map(dict.values, labelled_rels)), dtype=np.int64)
        groups = np.arange(all_grades.size, dtype=np.int64)
        ranked_rank = np.fromiter(chain.from_iterable(compress(map(itemgetter(2), ranks), rels)),
                                  dtype=np.int64, count=all_grades.size)
    rows = zip(_chunk_rows(cases), span_kernels.span_lists(cases)) if whole is None else ()
    for ci, ((ids, ctx, rel, ranked), spans) in enumerate(rows):
        if ranked is not None:  # chunk ids alone, ranked as they were read (no spans)
            n_ids, repeats, ranks = ranked
            n_ctx_append(n_ids)
            if repeats:
                dup_case.append(ci)
                dup_n.append(repeats)
            if not rel:
                continue
            lab_case_append(ci)
            lab_n_append(len(rel))
            grades_extend(rel.values())
            groups.extend(range(next_group, next_group + len(rel)))
            next_group += len(rel)
            ranked_case_append(ci)  # every label's rank: the matches are picked out below, at once
            ranked_n_append(len(rel))
            ranked_rank_extend(ranks)
            continue
        idset = set(ids)
        n_ctx_append(len(ids))
        if len(idset) != len(ids):  # repeated ids: keep each id's first chunk
            dup_case.append(ci)
            dup_n.append(len(ids) - len(idset))
            kept = _first_occurrences(ids)
            if ctx is not None:
                ctx = [ctx[i] for i in kept]
            ids = [ids[i] for i in kept]
        if spans:
            lab_case_append(ci)
            lab_n_append(len(rel or ()) + len(spans))
            grades_extend((rel or {}).values())
            grades_extend(map(span_kernels.grade_of, spans))
            slow.append(ci)
            next_group = _match_slow(ci, ids, ctx, rel or {}, spans, min_overlap, s_case, s_rank, s_new,
                                     f_case, f_rank, f_grade, groups, next_group)
            continue
        if not rel:
            continue
        lab_case_append(ci)
        lab_n_append(len(rel))
        grades_extend(rel.values())
        sources = None if ctx is None else _sources(ctx)
        if sources is None or rel.keys().isdisjoint(sources):
            # Id matches only: a label matches at most one chunk and a chunk one label, so every
            # label is its own group and every relevant chunk matches a new label.
            groups.extend(range(next_group, next_group + len(rel)))
            next_group += len(rel)
            hits = idset.intersection(rel)
            if hits:
                hit_case_append(ci)
                hit_n_append(len(hits))
                # in rank order: a set's order follows the process's string hashing, and the sums
                # over a case's labels (nDCG's DCG) must not change in their last bit between runs
                at = sorted(map(ids.index, hits))
                rank_extend(at)
                grade_extend([rel[ids[i]] for i in at])
        else:
            slow.append(ci)
            next_group = _match_slow(ci, ids, ctx, rel, (), min_overlap, s_case, s_rank, s_new,
                                     f_case, f_rank, f_grade, groups, next_group)

    n_cases = ci + 1
    n_ctx_a = np.array(n_ctx, dtype=np.int64)
    duplicates = np.zeros(n_cases, dtype=np.int64)
    if dup_case:
        duplicates[np.array(dup_case, dtype=np.int64)] = dup_n
    labelled = np.zeros(n_cases, dtype=bool)
    labelled[np.array(lab_case, dtype=np.int64)] = True
    by_chunk = np.zeros(n_cases, dtype=bool)
    by_chunk[np.array(slow, dtype=np.int64)] = True
    n_labels_a = np.zeros(n_cases, dtype=np.int64)
    n_labels_a[np.array(lab_case, dtype=np.int64)] = lab_n

    # Every label with grade >= 1, with its group (the ideal ranking is built from them per gain).
    grades = _to_int64(all_grades, "grades")
    owner = np.repeat(np.arange(n_cases, dtype=np.int64), n_labels_a)  # each label's case
    keep = grades > 0
    label_case = owner[keep]
    label_grade = grades[keep]
    label_group = np.array(groups, dtype=np.int64)[keep]
    n_relevant = np.bincount(label_case, minlength=n_cases).astype(np.int64)

    # Relevant retrieved chunks (fast and slow path together), sorted by (case, rank).
    fast_case = np.repeat(np.array(hit_case, dtype=np.int64), np.array(hit_n, dtype=np.int64))
    fast_rank = np.array(m_rank, dtype=np.int64) + 1
    fast_grade = _to_int64(m_grade, "grades")
    if ranked_case:  # the ranked cases' matches, each case's in rank order (as the loop appends them)
        r_case = np.repeat(np.array(ranked_case, dtype=np.int64), np.array(ranked_n, dtype=np.int64))
        r_rank = np.array(ranked_rank, dtype=np.int64)
        is_ranked = np.zeros(n_cases, dtype=bool)
        is_ranked[ranked_case] = True
        r_grade = grades[is_ranked[owner]]  # their labels' grades, in the same order
        hit = r_rank > 0
        r_case, r_rank, r_grade = r_case[hit], r_rank[hit], r_grade[hit]
        order = np.argsort(r_case * (int(r_rank.max(initial=0)) + 1) + r_rank, kind="stable")
        fast_case = np.concatenate([fast_case, r_case[order]])
        fast_rank = np.concatenate([fast_rank, r_rank[order]])
        fast_grade = np.concatenate([fast_grade, r_grade[order]])
    fast = fast_grade > 0
    fast_case, fast_rank, fast_grade = fast_case[fast], fast_rank[fast], fast_grade[fast]
    case_index = np.concatenate([fast_case, np.array(s_case, dtype=np.int64)])
    rank = np.concatenate([fast_rank, np.array(s_rank, dtype=np.int64) + 1])
    new = np.concatenate([np.ones(fast_case.size, dtype=bool), np.array(s_new, dtype=bool)])
    # Labels some chunk matches: on the fast path each id match is its label's only match.
    found_case = np.concatenate([fast_case, np.array(f_case, dtype=np.int64)])
    found_rank = np.concatenate([fast_rank, np.array(f_rank, dtype=np.int64) + 1])
    found_grade = np.concatenate([fast_grade, _to_int64(f_grade, "grades")])
    width = int(max(rank.max(initial=0), found_rank.max(initial=0))) + 1
    if case_index.size:
        key = case_index * width + rank
        if key.size > 1 and not bool(np.all(key[1:] > key[:-1])):
            order = np.argsort(key, kind="stable")
            case_index, rank, new = case_index[order], rank[order], new[order]
    first_rank = np.zeros(n_cases, dtype=np.int64)
    found_ap = np.zeros(found_case.size, dtype=np.float64)
    if case_index.size:
        starts = np.flatnonzero(np.r_[True, case_index[1:] != case_index[:-1]])
        first_rank[case_index[starts]] = rank[starts]
    if found_case.size:
        # precision at each label's first matching chunk, counting the chunks that match a new label
        new_key = (case_index * width + rank)[new]
        found_key = found_case * width + found_rank
        upto = np.searchsorted(new_key, found_key, side="right")
        before = np.searchsorted(new_key, found_case * width, side="left")
        found_ap = (upto - before) / found_rank

    return Ranked(
        n_cases=n_cases,
        duplicates=duplicates,
        labelled=labelled,
        n_relevant=n_relevant,
        n_retrieved=n_ctx_a - duplicates,
        first_rank=first_rank,
        by_chunk=by_chunk,
        case_index=case_index,
        rank=rank,
        new=new,
        found_case=found_case,
        found_rank=found_rank,
        found_grade=found_grade,
        found_ap=found_ap,
        label_case=label_case,
        label_grade=label_grade,
        label_group=label_group,
    )


def _check_min_overlap(min_overlap: Any) -> None:
    if isinstance(min_overlap, bool) or not isinstance(min_overlap, (int, float)) or \
            not 0 <= min_overlap <= 1:
        raise ValueError(f"the span rule's min_overlap must be a number from 0 to 1, got {min_overlap!r}")


# --------------------------------------------------------------------------- kernels


def _check_k(k: Any, optional: bool = False) -> Optional[int]:
    if k is None and optional:
        return None
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _nan_where(values: np.ndarray, undefined: np.ndarray) -> np.ndarray:
    values[undefined] = np.nan
    return values


def _per_case_sum(r: Ranked, mask: np.ndarray, weights: Optional[np.ndarray] = None) -> np.ndarray:
    w = None if weights is None else weights[mask]
    return np.bincount(r.case_index[mask], weights=w, minlength=r.n_cases).astype(np.float64)


def _ratio_over_r(r: Ranked, numer: np.ndarray) -> np.ndarray:
    """``numer / R`` with NaN where R = 0 (which includes unlabelled cases)."""
    out = np.full(r.n_cases, np.nan)
    np.divide(numer, r.n_relevant, out=out, where=r.n_relevant > 0)
    return out


def _found(r: Ranked, k: int) -> np.ndarray:
    """Per case, the labels (grade >= 1) some top-k chunk matches."""
    return np.bincount(r.found_case[r.found_rank <= k], minlength=r.n_cases).astype(np.float64)


def recall(r: Ranked, k: int) -> np.ndarray:
    """Labels (grade >= 1) some top-k chunk matches / R, every label a chunk matches counted. NaN
    where R = 0 or unlabelled (trec ``recall_k``)."""
    k = _check_k(k)
    return _ratio_over_r(r, _found(r, k))


def precision(r: Ranked, k: int) -> np.ndarray:
    """Relevant chunks in the top k / k, every relevant chunk counted. NaN only where unlabelled
    (trec ``P_k``)."""
    k = _check_k(k)
    return _nan_where(_per_case_sum(r, r.rank <= k) / k, ~r.labelled)


def hit(r: Ranked, k: int) -> np.ndarray:
    """1 if some top-k chunk matches a label of grade >= 1 (a relevant chunk is in the top k), else
    0. NaN only where unlabelled (trec ``success_k``)."""
    k = _check_k(k)
    return _nan_where((_found(r, k) > 0).astype(np.float64), ~r.labelled)


def mrr(r: Ranked, k: Optional[int] = None) -> np.ndarray:
    """1 / rank of the first relevant chunk, 0 if none (or if it is beyond k). NaN where R = 0.

    Without k this is trec ``recip_rank`` (no cut-off); with k it is 0 when that rank is > k.
    """
    k = _check_k(k, optional=True)
    fr = r.first_rank
    found = fr > 0 if k is None else (fr > 0) & (fr <= k)
    out = np.zeros(r.n_cases, dtype=np.float64)
    np.divide(1.0, fr, out=out, where=found)
    return _nan_where(out, r.n_relevant == 0)


def _gain(grades: np.ndarray, gain: str) -> np.ndarray:
    if gain == "linear":
        return grades.astype(np.float64)
    if gain == "exponential":
        return np.exp2(grades.astype(np.float64)) - 1.0
    raise ValueError(f"gain must be one of {', '.join(GAINS)}, got {gain!r}")


def ndcg(r: Ranked, k: Optional[int] = None, gain: str = "linear") -> np.ndarray:
    """DCG@k / ideal DCG@k, discount 1/log2(rank+1). NaN where R = 0.

    DCG: each label's gain at the rank of the first chunk matching it (<= k), so a chunk matching
    several labels first carries the sum of their gains. Ideal: the groups of labels (those one
    chunk matches first; every other label alone), by gain, at ranks 1..min(k, groups). With
    chunk-id labels every group is one label: trec ``ndcg_cut_k``. ``gain="linear"`` (grade) or
    ``"exponential"`` (2**grade - 1). Without k: the whole list.
    """
    k = _check_k(k, optional=True)
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {', '.join(GAINS)}, got {gain!r}")
    mask = np.ones(r.found_case.size, dtype=bool) if k is None else r.found_rank <= k
    dcg = np.bincount(
        r.found_case[mask],
        weights=_gain(r.found_grade[mask], gain) / np.log2(r.found_rank[mask] + 1.0),
        minlength=r.n_cases,
    )
    icase, irank, igain = r.ideal(gain)
    imask = np.ones(icase.size, dtype=bool) if k is None else irank <= k
    idcg = np.bincount(icase[imask], weights=igain[imask] / np.log2(irank[imask] + 1.0), minlength=r.n_cases)
    out = np.full(r.n_cases, np.nan)
    np.divide(dcg, idcg, out=out, where=r.n_relevant > 0)
    # DCG <= ideal DCG exactly; summed in another order, a perfect ranking can round to 1 + 2e-16
    return np.minimum(out, 1.0, out=out, where=r.n_relevant > 0)


def average_precision(r: Ranked, k: Optional[int] = None) -> np.ndarray:
    """(1/R) x the sum, over the labels whose first matching chunk is at rank <= k, of the precision
    at that rank, counting the chunks that match a new label. NaN where R = 0.

    trec ``map_cut_k``; without k trec ``map`` (the whole list).
    """
    k = _check_k(k, optional=True)
    mask = np.ones(r.found_case.size, dtype=bool) if k is None else r.found_rank <= k
    numer = np.bincount(r.found_case[mask], weights=r.found_ap[mask], minlength=r.n_cases)
    return _ratio_over_r(r, numer)


# --------------------------------------------------------------------------- why a value is below 1


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def missed_labels(ids: list, chunks: Optional[list], rel: Optional[dict], spans: Any, k: int,
                  min_overlap: float = SPAN_MIN_OVERLAP, base: str = "recall", by_source: bool = True,
                  repeats: bool = True) -> Optional[str]:
    """The labels no top-``k`` chunk matches, as a value of ``recall@k`` or ``hit@k`` below 1 gives
    its reason: chunk-id and section labels with the rank of their first matching chunk (``not in
    the top 5: api.md#limits (rank 6), api.md#quota (not retrieved)``), span labels as
    `ragbridge.native.spans.missed_reason` names them. None when every label is found. ``ids``,
    ``chunks`` and ``rel`` as `prepare` reads a case (``by_source`` False: no chunk's source is a
    label; ``repeats`` False: no chunk id repeats, as `Ranked` knows)."""
    parts = []
    if rel and base != "span_recall":
        if repeats and len(set(ids)) != len(ids):
            kept = _first_occurrences(ids)
            ids = [ids[i] for i in kept]
            chunks = None if chunks is None else [chunks[i] for i in kept]
        sources = None if chunks is None or not by_source else _sources(chunks)
        if sources is None or rel.keys().isdisjoint(sources):  # ids alone: look up the labels missed
            top = set(ids[:k])
            missed = [label for label, g in rel.items() if g >= 1 and label not in top]
            # the ranks of the labels named (three at most: the others are counted)
            missed[:3] = [(label, _rank_after(ids, label, k)) for label in missed[:3]]
        else:
            first: dict = {}
            for i, cid in enumerate(ids):
                label = cid if cid in rel else (sources[i] if sources[i] in rel else None)
                if label is not None:
                    first.setdefault(label, i + 1)
            missed = [(label, first.get(label)) for label, g in rel.items()
                      if g >= 1 and not first.get(label, k + 1) <= k]
        if missed:
            parts.append(_missed_text(missed, k))
    if spans and chunks is not None:
        why = span_kernels.missed_reason(base, spans, chunks, k, min_overlap)[1]
        if why:
            parts.append(why)
    return "; ".join(parts) or None


def _missed_text(missed: list, k: int) -> str:
    """``not in the top k: a (rank 6), b (not retrieved), and 2 more``: the first three of ``missed``,
    (label, rank or None) pairs, named."""
    named = [f"{label} ({f'rank {r}' if r else 'not retrieved'})" for label, r in missed[:3]]
    more = f", and {len(missed) - 3} more" if len(missed) > 3 else ""
    return f"not in the top {k}: " + ", ".join(named) + more


def _missed_ranked(rel: dict, ranks: list, k: int) -> Optional[str]:
    """`missed_labels` of a case whose chunks are ids alone, from each label's rank among them (0:
    not retrieved)."""
    missed = [(label, r) for (label, g), r in zip(rel.items(), ranks) if g >= 1 and not 0 < r <= k]
    return _missed_text(missed, k) if missed else None


def _missed_ranked_at_once(rels: list, ranked: list, k: int) -> list[Optional[str]]:
    """`_missed_ranked` of many cases (``rels``: their labels, None where they have none; ``ranked``:
    `CaseBatch.chunk_rows`' ranks of them), the labels missed found with NumPy: each case's reason,
    or None."""
    ranks = list(map(itemgetter(2), ranked))  # each label's rank, 0: not retrieved
    sizes = np.fromiter(map(len, ranks), dtype=np.int64, count=len(ranks))
    grades = np.fromiter(chain.from_iterable(map(dict.values, filter(None, rels))), dtype=np.int64)
    at = np.fromiter(chain.from_iterable(ranks), dtype=np.int64, count=int(sizes.sum()))
    missed = np.flatnonzero((grades >= 1) & ~((at > 0) & (at <= k)))
    owner = np.repeat(np.arange(len(ranks)), sizes)[missed]
    counts = np.bincount(owner, minlength=len(ranks))
    # the first three missed labels of each case are named, the others counted
    named = missed[np.arange(missed.size) - (np.cumsum(counts) - counts)[owner] < 3]
    labels = list(chain.from_iterable(filter(None, rels)))
    names = [f"{label} ({f'rank {r}' if r else 'not retrieved'})"
             for label, r in zip(map(labels.__getitem__, named.tolist()), at[named].tolist())]
    out: list[Optional[str]] = [None] * len(ranks)
    head, start = f"not in the top {k}: ", 0
    for i, n in zip(np.flatnonzero(counts).tolist(), counts[counts > 0].tolist()):
        shown = n if n < 3 else 3
        out[i] = head + ", ".join(names[start:start + shown]) + (f", and {n - 3} more" if n > 3 else "")
        start += shown
    return out


def _placed(out: list, idx: list[int], values: list) -> list:
    """``out`` with ``values`` at the places ``idx``, in C loops."""
    if not idx:
        return out
    placed = np.array(out, dtype=object)
    placed[idx] = np.array(values + [None], dtype=object)[:-1]  # a list of str, never a 2-D array
    return placed.tolist()


def _rank_after(ids: list, label: str, k: int) -> Optional[int]:
    """The rank of ``label`` among ``ids`` below the top ``k`` (it is not in them), None if absent."""
    try:
        return ids.index(label, k) + 1
    except ValueError:
        return None


def reasons(cases: Any, r: Ranked, metric: str, values: np.ndarray,
            min_overlap: float = SPAN_MIN_OVERLAP, gain: str = "linear") -> list[Optional[str]]:
    """Why each value of the ranking metric ``metric`` (``recall@5``, ``mrr``, ``ndcg@10`` ...) below 1
    is below 1, in the words the native backend gives its scores and the diagnosis repeats (None for a
    value of 1 or undefined). ``cases`` and ``r`` (their `prepare`) as `evaluate` reads them:

    - ``recall@k``, ``hit@k``: the labels no top-k chunk matches (`missed_labels`); no label with a
      grade above 0, where a case has none;
    - ``mrr``, ``mrr@k``: the rank of the first relevant chunk;
    - ``precision@k``: how many of the top k hold no relevant chunk;
    - ``ndcg``, ``map`` (with or without k): how many labels the top k miss, how many chunks that
      match no label rank above relevant ones (noise), how many chunks that find no new label rank
      above ones that do; for nDCG, that a lower gain (of ``gain``) ranks above a higher one.
    """
    base, k = parse_metric(metric)
    out: list[Optional[str]] = [None] * len(values)
    short = np.flatnonzero(values < 1)
    if not short.size:
        return out
    if base in ("recall", "hit"):
        # a case whose labels all have grade 0 (R = 0): hit@k a defined 0 (recall too with
        # no_relevant="zero"), nothing there to find
        for i in short[r.n_relevant[short] == 0].tolist():
            out[i] = NOTHING_TO_FIND
        short = short[r.n_relevant[short] > 0]
        if not short.size:
            return out
        said = r._missed.setdefault(k, {})
        want = set()
        for i in short.tolist():
            if i in said:
                out[i] = said[i]
            else:
                want.add(i)
        if not want:
            return out
        whole = getattr(cases, "ranked_rows", None)
        whole = whole() if whole is not None else None
        if whole is not None:  # every case's chunk ids ranked as they were read: each label's rank
            idx = sorted(want)
            whys = _missed_ranked_at_once(list(map(whole[0].__getitem__, idx)),
                                          list(map(whole[1].__getitem__, idx)), k)
            said.update(zip(idx, whys))
            return _placed(out, idx, whys)
        lists = zip(_chunk_rows(cases), span_kernels.span_lists(cases))
        for i, ((ids, chunks, rel, ranked), spans) in enumerate(lists):
            if i not in want:
                continue
            if ranked is not None:  # chunk ids alone: each label's rank is known
                out[i] = said[i] = _missed_ranked(rel, ranked[2], k) if rel else None
                continue
            out[i] = missed_labels(ids, chunks, rel, spans, k, min_overlap, base,
                                   bool(r.by_chunk[i]), bool(r.duplicates[i]))
        return out
    idx = short.tolist()
    # each reason written once, for the cases that share it (their key), and put in place at once
    if base == "mrr":
        below = f", below the top {k}" if k else ""
        keys = r.first_rank[short].tolist()
        said = {fr: (f"the first relevant chunk is at rank {fr}" + (below if k and fr > k else "")
                     if fr else "no retrieved chunk is relevant") for fr in set(keys)}
        return _placed(out, idx, list(map(said.__getitem__, keys)))
    if base == "precision":
        held = np.bincount(r.case_index[r.rank <= k], minlength=r.n_cases)[short].tolist()
        keys = list(zip(held, np.minimum(r.n_retrieved[short], k).tolist()))
        said = {(h, n): (f"{k - h} of the top {k} hold no relevant chunk"
                         + (f" (the list has {_n(n, 'chunk', 'chunks')})" if n < k else ""))
                for h, n in set(keys)}
        return _placed(out, idx, list(map(said.__getitem__, keys)))
    # ndcg, map: labels missed; chunks above the last label-finding one in the top k that find none
    cut = np.iinfo(np.int64).max if k is None else k
    in_k = r.found_rank <= cut
    found = np.bincount(r.found_case[in_k], minlength=r.n_cases)
    last = np.zeros(r.n_cases, dtype=np.int64)
    np.maximum.at(last, r.found_case[in_k], r.found_rank[in_k])
    above = r.rank < last[r.case_index]
    relevant_above = np.bincount(r.case_index[above], minlength=r.n_cases)
    new_above = np.bincount(r.case_index[above & r.new], minlength=r.n_cases)
    unordered = np.zeros(r.n_cases, dtype=bool)
    if base == "ndcg" and in_k.any():  # a chunk finding less gain above one finding more
        fc, fr = r.found_case[in_k], r.found_rank[in_k]
        order = np.lexsort((fr, fc))
        fc, fr, fg = fc[order], fr[order], _gain(r.found_grade[in_k][order], gain)
        head = np.r_[True, (fc[1:] != fc[:-1]) | (fr[1:] != fr[:-1])]
        gc, gg = fc[head], np.add.reduceat(fg, np.flatnonzero(head))
        rises = (gc[1:] == gc[:-1]) & (gg[1:] > gg[:-1])
        unordered[gc[1:][rises]] = True
    where = f"in the top {k}" if k else "in the list"
    n_rel = r.n_relevant[short]
    keys = list(zip(n_rel.tolist(), (n_rel - found[short]).tolist(),
                    np.maximum(last[short] - 1 - relevant_above[short], 0).tolist(),
                    (relevant_above[short] - new_above[short]).tolist(), unordered[short].tolist()))
    said = {key: _order_reason(key, where) for key in set(keys)}
    return _placed(out, idx, list(map(said.__getitem__, keys)))


def _order_reason(key: tuple, where: str) -> Optional[str]:
    """The reason of an nDCG or MAP value below 1 from its case's (labels, labels missed, chunks of
    noise above, chunks finding no new label above, a lower gain above a higher)."""
    n, missed, noise, again, unordered_i = key
    parts = []
    if missed:
        parts.append(f"{missed} of {n} labels not found {where}")
    if noise:
        parts.append(f"noise: {_n(noise, 'chunk', 'chunks')} matching no label "
                     f"{'ranks' if noise == 1 else 'rank'} above relevant ones")
    if again:
        parts.append(f"{_n(again, 'chunk', 'chunks')} finding no new label "
                     f"{'ranks' if again == 1 else 'rank'} above ones that do")
    if unordered_i:
        parts.append("a chunk finding less gain ranks above one finding more")
    return "; ".join(parts) or None


# --------------------------------------------------------------------------- names

#: canonical metric name -> kernel ``f(ranked, k)`` (``ndcg`` also takes ``gain=``).
METRICS: dict[str, Callable[..., np.ndarray]] = {
    "recall": recall,
    "precision": precision,
    "hit": hit,
    "mrr": mrr,
    "ndcg": ndcg,
    "map": average_precision,
}
#: the character-level metrics on span labels (`ragbridge.native.spans`), run by the same dispatcher
SPAN_METRICS = span_kernels.KERNELS
#: metrics that need a cut-off (``recall@5``); the others also accept none (``mrr``, ``ndcg``, ``map``).
NEEDS_K = frozenset({"recall", "precision", "hit", "span_recall", "span_precision", "span_iou"})
#: metrics that take no cut-off
NO_K = frozenset({"precision_omega"})

_NAME = re.compile(r"^\s*([A-Za-z_]+)\s*(?:@\s*(\S*))?\s*$")


def parse_metric(name: str) -> tuple[str, Optional[int]]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``, ``"mrr"`` -> ``("mrr", None)``; ValueError if invalid."""
    if not isinstance(name, str):
        raise ValueError(f"metric name must be a string, got {name!r}")
    m = _NAME.match(name)
    base = m.group(1).lower() if m else None
    if base not in METRICS and base not in SPAN_METRICS:
        raise ValueError(
            f"unknown ranking metric {name!r}; known: recall@k, precision@k, hit@k, mrr, mrr@k, "
            "ndcg, ndcg@k, map, map@k, span_recall@k, span_precision@k, span_iou@k, precision_omega "
            "(k a positive integer)"
        )
    raw_k = m.group(2)
    if raw_k is None:
        if base in NEEDS_K:
            raise ValueError(f"metric {name!r} needs a cut-off: write {base}@k with k a positive integer")
        return base, None
    if base in NO_K:
        raise ValueError(f"metric {name!r} takes no cut-off: write {base}")
    if not raw_k.isdigit() or int(raw_k) < 1:
        raise ValueError(f"bad cut-off in metric {name!r}: k must be a positive integer, got {raw_k!r}")
    return base, int(raw_k)


class Prepared:
    """One list of cases prepared for the dispatcher, each form made when first asked for:
    ``ranked`` (`prepare`, for the ranking metrics) and ``spans`` (`ragbridge.native.spans.prepare`,
    for the character-level ones)."""

    def __init__(self, cases: Sequence["Case"], min_overlap: float = SPAN_MIN_OVERLAP) -> None:
        _check_min_overlap(min_overlap)
        self.cases, self.min_overlap = cases, min_overlap
        self._ranked: Optional[Ranked] = None
        self._spans: Optional[span_kernels.SpanSets] = None

    @property
    def ranked(self) -> Ranked:
        if self._ranked is None:
            self._ranked = prepare(self.cases, self.min_overlap)
        return self._ranked

    @property
    def spans(self) -> span_kernels.SpanSets:
        if self._spans is None:
            self._spans = span_kernels.prepare(self.cases)
        return self._spans


def evaluate(
    cases: Union[Sequence["Case"], Ranked, Prepared], metrics: Sequence[str], gain: str = "linear", *,
    min_overlap: float = SPAN_MIN_OVERLAP, arithmetic: str = "merged",
    chunking: Any = None, no_relevant: str = "undefined",
) -> dict[str, np.ndarray]:
    """Per-case values for each metric name, e.g. ``["recall@5", "ndcg@10", "mrr", "map@100",
    "span_iou@5"]``: the one dispatcher from metric names to kernels (the native backend, the oracle
    tests and the benchmark all run it).

    Names, ``gain`` and ``arithmetic`` are validated before any work is done (ValueError for an unknown
    name, a bad k, an unknown gain or arithmetic). Returns ``{name: float64 array with one value per
    case}``, keyed by the names as given; ``cases`` may also be an already prepared :class:`Ranked`
    or :class:`Prepared` (the native backend prepares once per run). ``gain`` applies to nDCG;
    ``min_overlap`` is the span rule's; ``arithmetic`` (``merged`` or ``chroma``) and ``chunking``
    (for ``precision_omega``) apply to the character-level metrics (`ragbridge.native.spans`).
    ``no_relevant="zero"`` scores recall, MRR, nDCG and MAP of a case whose labels all have grade 0
    as 0, as trec_eval averages it, instead of undefined.
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    parsed = [(name, *parse_metric(name)) for name in metrics]
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {', '.join(GAINS)}, got {gain!r}")
    if no_relevant not in NO_RELEVANT:
        raise ValueError(f"no_relevant must be one of {', '.join(NO_RELEVANT)}, got {no_relevant!r}")
    span_kernels.check_arithmetic(arithmetic)
    if isinstance(cases, Ranked):
        if any(base in SPAN_METRICS for _, base, _ in parsed):
            raise ValueError("the character-level span metrics need the cases, not a Ranked")
        ranked = cases
    else:
        prepared = cases if isinstance(cases, Prepared) else Prepared(cases, min_overlap)
    out: dict[str, np.ndarray] = {}
    for name, base, k in parsed:
        if base in SPAN_METRICS:
            extra = chunking if base == "precision_omega" else k
            out[name] = SPAN_METRICS[base](prepared.spans, extra, arithmetic=arithmetic)
            continue
        if not isinstance(cases, Ranked):
            ranked = prepared.ranked
        if base == "ndcg":
            out[name] = ndcg(ranked, k, gain=gain)
        else:
            out[name] = METRICS[base](ranked, k)
        if no_relevant == "zero" and base in _R_DIVIDES:
            out[name][ranked.labelled & (ranked.n_relevant == 0)] = 0.0
    return out
