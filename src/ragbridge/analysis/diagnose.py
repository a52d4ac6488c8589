"""Diagnosis: each failing case of a run to one layer, with the evidence that decided it.

A case *fails* when one of its scores is below its pass mark (`ragbridge.analysis.Thresholds`), or
when a human label (``labels``) says it fails. Each failing case gets one layer of `LAYERS` by
walking the questions of `QUESTIONS` in order (the decision table, written once in
docs/diagnose.md):

1. was a relevant chunk in the top k? no: ``retrieval`` (naming the labels or spans the top k miss,
   as the retrieval score's own reason does);
2. is every claim of the answer supported by the chunks? no: ``generation`` (an answer that states
   no claim makes none the chunks do not support: yes);
3. is the supported answer correct? no: the claim checks decide (`_wrong_answer`, from
   `ragbridge.analysis.claim_evidence`): a human label against the judge, or an answer right by
   the reference, is ``reference_or_judge``; a chunk the answer follows that contradicts a claim of
   the reference is ``knowledge_base``; a reference claim a chunk states and the answer does not, or
   an answer claim no chunk states, is ``generation``; without claim checks, or without a
   reference, or when they show none of these, ``undetermined``, naming what is missing (never a
   human label the case has already);
4. every answer yes (or only retrieval metrics fail and the first answer is yes), yet a metric
   fails: a metric a human label overrules is ``reference_or_judge``; else a retrieval metric is
   ``retrieval`` (a deterministic retrieval metric is never overruled by another), its reason the
   score's own (`ragbridge.native.ranking.reasons`: the labels missed, the rank of the first relevant
   chunk, chunks matching no label above relevant ones) with the labelled text the top k miss; a
   deterministic answer check (or a human's fail) is ``generation``; a metric a question's deciding
   evidence overrules, or a judged metric rating a correct, faithful answer poorly, is
   ``reference_or_judge``.

An unanswerable case (``answerable`` false) asks one question first: did the system decline? (no:
``generation``). A case whose relevance labels all have grade 0 has nothing labelled to find: its
ranking metrics (recall, precision, hit, MRR, nDCG, MAP) are no evidence and fail nothing, and
question 1 without other evidence leaves it ``undetermined``, saying to label it.
Each question is answered by the first source of its evidence that has a value for
the case: a human label on a metric of the question, then the question's metrics in order (of
several backends scoring one metric, one whose score carries claims first, then native, then by
name). A question no source answers makes the case ``undetermined``, and the diagnosis names every
source and why it is missing. The walk stops at the first question answered no (or unanswered), so
later questions need no evidence.

`diagnose` returns a `Diagnosis`: one `CaseDiagnosis` per failing case (layer, the one-line reason,
the deciding evidence, the failing scores, the details: relevant chunks and spans missing from the
top k, the unsupported claims, the claims and chunks that decided a wrong answer's layer, the wrong
claims and the chunks that state them), and the counts overall and per tag.

Size: the walk, each rule and the words of the reason it gives sit in one module, so that a rule
and what it says can be read together; the findings the claim checks give are in
`ragbridge.analysis.claim_evidence` and the ranking metrics' reasons in `ragbridge.native.ranking`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..formats.files import no_cycle_collection
from ..metrics import CLAIM_DIAGNOSTICS, JUDGED, NOTHING_RETRIEVED, RAGCHECKER, find, half_of
from ..metrics import METRICS as CANONICAL
from ..native.ranking import METRICS, NEEDS_K, missed_labels, prepare, reasons
from ..native.spans import MISSED_BY, missed_reason
from ..run import Run
from ..run.summary import ALL
from ..schema import SPAN_MIN_OVERLAP, Case, Score
from .claim_evidence import ClaimEvidence, case_claims, quoted
from .rows import Rows, Spool
from .table import AnalysisError, open_run
from ..verdicts import against, verdict
from .thresholds import Thresholds, pass_marks

__all__ = ["LAYERS", "QUESTIONS", "Question", "CaseDiagnosis", "Diagnosis", "diagnose", "default_marks",
           "DIAGNOSIS_LISTED", "NOT_IN_RUN"]

#: the failing cases listed by name per layer (``diagnose``'s lines and every report, its JSON too;
#: ``diagnose --json`` and ``diagnose --all`` list them all)
DIAGNOSIS_LISTED = 50

#: how a case's missing evidence ends when its metric was not scored in the run at all (the same for
#: every case)
NOT_IN_RUN = " not scored in this run"

LAYERS = ("retrieval", "generation", "knowledge_base", "reference_or_judge", "undetermined")


@dataclass(frozen=True)
class Question:
    """One question of the walk: its evidence (metric names, ``@k`` for any cut-off, first
    preferred), the metrics whose human labels answer it, and the layer a no gives (None: the claim
    checks decide it)."""

    name: str
    text: str
    whether: str
    sources: tuple[str, ...]
    labelled_by: tuple[str, ...]
    layer: Optional[str]


QUESTIONS: tuple[Question, ...] = (
    Question("declined", "did the system decline a question it cannot answer?",
             "the system declined a question it cannot answer", ("abstention",), ("abstention",),
             "generation"),
    Question("retrieval", "was a relevant chunk in the top k?", "a relevant chunk was in the top k",
             ("recall@k", "hit@k", "span_recall@k", "context_recall", "claim_recall"),
             ("*retrieval",), "retrieval"),
    Question("faithfulness", "is every claim of the answer supported by the chunks?",
             "every claim of the answer is supported by the chunks",
             ("faithfulness", "hallucination"), ("faithfulness", "hallucination"), "generation"),
    Question("correctness", "is the supported answer correct?", "the answer is correct",
             ("answer_correctness", "must_contain", "answer_claim_precision"),
             ("answer_correctness", "must_contain", "answer_claim_precision", "answer_claim_recall",
              "answer_claim_f1"), None),
)
_BY_NAME = {q.name: q for q in QUESTIONS}


def _walk(case: Case) -> list[Question]:
    if not case.answerable:
        return [_BY_NAME["declined"]]
    return [_BY_NAME[n] for n in ("retrieval", "faithfulness", "correctness")]


def _labels_answer(q: Question, metric: str) -> bool:
    if "*retrieval" in q.labelled_by:
        return half_of(metric) == "retrieval"
    return metric in q.labelled_by


def default_marks(run: Run) -> Thresholds:
    """The run's pass marks when none are given: the backends' own, then each metric's default
    (`ragbridge.analysis.thresholds.pass_marks`, as every other output)."""
    return pass_marks(run)


@dataclass
class CaseDiagnosis:
    """The layer of one failing case and what decided it.

    ``decided_by``: the evidence that decided the layer (``metric``, ``backend``, ``value``,
    ``pass_mark``, ``passed``, ``source``: ``score`` or ``label``): the entry that answered the
    deciding question no; past the questions, the human label or score that overrules a failing
    metric (``details["overruled"]`` lists what it overrules), else the failing metric itself; None
    for ``undetermined`` at a question nothing answers. ``failing``: every score below its pass mark
    and every human fail. ``missing``: for ``undetermined``, what is missing (each source of an
    unanswered question and why it has no value, or the evidence that would place a wrong answer).
    ``details``: what the evidence shows (relevant labels missing from the top k, the unsupported
    claims and where each stands, the judge's faithfulness beside a human label, the chunk that held
    the answer, wrong claims and the chunks stating them, the metrics a human label or a question's
    evidence overrules)."""

    case_id: str
    layer: str
    question: Optional[str]
    reason: str
    tags: list[str]
    decided_by: Optional[dict[str, Any]]
    failing: list[dict[str, Any]]
    missing: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "layer": self.layer, "question": self.question,
                "reason": self.reason, "tags": self.tags, "decided_by": self.decided_by,
                "failing": self.failing, "missing": self.missing, "details": self.details}


@dataclass
class Diagnosis:
    """Every failing case's diagnosis, and the counts: ``counts`` (per layer, over all cases) and
    ``by_tag`` (per tag: ``n_cases``, ``n_failing`` and per layer). ``cases`` lists the failing cases
    in run order; in a large run they are kept on disk (a scratch file that goes with the object) and
    read back as they are listed; ``layer_codes`` gives each case of the run (by its place in
    `ragbridge.run.Run.columns`) its layer's index in `LAYERS`, -1 for a case that does not fail."""

    run: str
    n_cases: int
    cases: Sequence[CaseDiagnosis]
    by_tag: dict[str, dict[str, int]]
    thresholds: dict[str, float]
    #: human labels naming a case that is not in the run
    unknown_labels: int = 0
    layer_codes: Any = None
    _at: Any = None  # each failing case's place among ``cases``, by its place in the run
    _texts: Any = None  # each failing case's JSON text where the cases are kept on disk (`case_texts`)
    _describe: Any = None  # places in the run -> the diagnoses of those cases, described (``listed``)

    @property
    def counts(self) -> dict[str, int]:
        return self.by_tag[ALL]

    def share(self, layer: str, tag: Optional[str] = None) -> Optional[float]:
        """Cases diagnosed ``layer`` as a share of all cases (of those carrying ``tag``)."""
        row = self.by_tag.get(tag or ALL)
        return row[layer] / row["n_cases"] if row and row["n_cases"] else None

    def of_cases(self, places: Sequence[int]) -> list[CaseDiagnosis]:
        """The diagnoses of the failing cases at ``places`` in the run (see ``layer_codes``); of a
        diagnosis made with ``listed``, a case it placed only is read and described now."""
        failing = [int(p) for p in places if self.layer_codes[p] >= 0]
        later = [p for p in failing if self._at[p] < 0]
        described = dict(zip(later, self._describe(later))) if later and self._describe else {}
        return [self.cases[int(self._at[p])] if self._at[p] >= 0 else described[p] for p in failing
                if self._at[p] >= 0 or p in described]

    def in_layer(self, layer: str) -> "Rows":
        """The failing cases diagnosed ``layer``, in run order, read as they are listed."""
        at = self._at[np.flatnonzero(self.layer_codes == LAYERS.index(layer))]
        at = at[at >= 0]  # of a diagnosis made with ``listed``, those it kept
        return Rows(len(at), lambda start, stop: [self.cases[int(k)] for k in at[start:stop]])

    def case_texts(self) -> Sequence[Union[str, CaseDiagnosis]]:
        """Per failing case, in run order: ``to_dict()``'s case as the JSON text `json.dumps(indent=2)`
        writes (`ragbridge.analysis.rows.plain_json`) where the case holds plain JSON values and is
        kept as that text, else its `CaseDiagnosis` (what writes every case as JSON reads)."""
        return self._texts if self._texts is not None else self.cases

    def to_dict(self) -> dict[str, Any]:
        rows = [{"tag": t, **c} for t, c in self.by_tag.items() if t != ALL]
        cases = (self.cases.mapped(CaseDiagnosis.to_dict) if isinstance(self.cases, Rows)
                 else [c.to_dict() for c in self.cases])
        return {"run": self.run, "n_cases": self.n_cases, "n_failing": self.counts["n_failing"],
                "counts": {layer: self.counts[layer] for layer in LAYERS}, "by_tag": rows,
                "thresholds": self.thresholds, "cases": cases}


def diagnose(run: Union[Run, str, Path], thresholds: Optional[Thresholds] = None,
             labels: Any = None, label_threshold: float = 0.5, chunk_details: bool = True,
             as_text: bool = False, listed: Optional[int] = None, progress: Any = None) -> Diagnosis:
    """Diagnose every failing case of ``run`` (see the module docstring).

    ``thresholds``: the pass marks (default: each metric's default pass mark, `default_marks`).
    ``labels``: human labels (a file or the frame of `ragbridge.analysis.load_labels`); a graded
    label passes at ``label_threshold``. ``chunk_details=False`` for cases read without their
    chunks: the details read from them (the top k, the relevant chunks) are left out. ``as_text``:
    keep each case as its JSON text (`Diagnosis.case_texts`: what writes every case as JSON reads;
    reading the cases back as objects then costs a parse each). ``listed``: keep the first ``listed``
    failing cases of each layer whole (``cases``, what a report lists); every other failing case is
    placed in its layer (the counts, ``layer_codes``) without the words of its reason, and described
    when `Diagnosis.of_cases` asks for it (read again from the run). ``progress``: a
    `ragbridge.run.progress.Steps`, a step a failing case.

    The failing cases are found over the run's columns at once; each is then read with its scores,
    a batch at a time, and diagnosed: memory holds a batch, whatever the run's size."""
    run = open_run(run)
    th = thresholds if thresholds is not None else default_marks(run)
    human = _human(labels, label_threshold)
    cols = run.columns
    index = cols.cases
    n = index.described
    if not n:
        raise AnalysisError(f"{run.path}: the run folder holds no cases.jsonl: diagnosis needs the cases")
    failing, marks = _failing(run, th)
    for cid, verdicts in human.items():
        i = index.place(cid)
        if i is not None and i < n and not all(verdicts.values()):
            failing[i] = True
    in_run = set(cols.metrics())
    options = run.manifest.options or {}
    k = options.get("k")
    spans = _SpanRule(options.get("span_min_overlap", SPAN_MIN_OVERLAP), chunk_details)
    codes = np.full(len(index), -1, np.int8)
    at = np.full(len(index), -1, np.int64)
    spool = Spool(CaseDiagnosis.to_dict, _from_dict) if as_text else Spool()
    seen: dict[tuple[str, str], float] = {}  # each (backend, metric)'s pass mark, looked up once
    kept = dict.fromkeys(LAYERS, 0)
    # the layers that have their ``listed`` cases: their other cases are placed only
    full: set[str] = set(LAYERS) if listed == 0 else set()
    places = np.flatnonzero(failing)
    steps = progress.start(len(places)) if progress is not None else contextlib.nullcontext()
    with steps, no_cycle_collection():  # a batch's cases, scores and diagnoses: many objects, no cycle
        for batch in cols.case_batches(places, views=True):
            for i, case, scores in batch:
                d = _diagnose_case(case, scores, th, human.get(case.id, {}), in_run, k, seen, spans, full)
                if d is None:  # a human label it fails names no metric in a way that fails (cannot happen)
                    continue
                codes[i] = LAYERS.index(d.layer)
                if d.layer in full:
                    continue
                at[i] = len(spool)
                spool.add(d)
                kept[d.layer] += 1
                if listed is not None and kept[d.layer] >= listed:
                    full.add(d.layer)
            if progress is not None:  # the batch diagnosed
                progress.advance(len(batch))
    by_tag = _counts(index, codes)

    def describe(places: list[int]) -> list[CaseDiagnosis]:  # cases placed only, described on request
        out = {}
        for batch in cols.case_batches(np.unique(np.asarray(places, np.int64)), views=True):
            for i, case, scores in batch:
                out[i] = _diagnose_case(case, scores, th, human.get(case.id, {}), in_run, k, seen, spans)
        return [out[p] for p in places]

    return Diagnosis(run=str(run.path) if run.path else "", n_cases=n, cases=spool.rows(), by_tag=by_tag,
                     _texts=spool.texts() if as_text else None,
                     _describe=describe if listed is not None else None,
                     thresholds=dict(sorted(marks.items())),
                     unknown_labels=sum(len(v) for (cid, v), i in zip(human.items(), index.find(list(human)))
                                        if not 0 <= i < n),
                     layer_codes=codes, _at=at)


def _failing(run: Run, th: Thresholds) -> tuple[np.ndarray, dict[str, float]]:
    """Which described cases of ``run`` fail a metric at ``th``'s pass marks, and the pass mark of
    each ``backend:metric`` that counted (`Diagnosis.thresholds`)."""
    cols = run.columns
    n = cols.cases.described
    failing = np.zeros(n, bool)
    marks: dict[str, float] = {}
    answerable = cols.cases.answerable[:n]
    for (b, m), col in cols.columns.items():
        counted = col.scored[:n] & (answerable if half_of(m) == "retrieval" else True)
        if counted.any():
            mark = marks[f"{b}:{m}"] = th.get(b, m)
            failing |= counted & ~col.verdicts(mark)[:n]
    return failing, marks


def made_by(d: Diagnosis, run: Run, th: Thresholds) -> bool:
    """Whether ``d``, a diagnosis of ``run`` made without human labels, is what ``diagnose(run, th)``
    makes: the same pass mark for every metric that counts (so the same cases fail, in the same
    layers). A report hands its diagnosis to its gate this way."""
    return d.thresholds == dict(sorted(_failing(run, th)[1].items()))


def _from_dict(row: dict[str, Any]) -> CaseDiagnosis:
    return CaseDiagnosis(**row)


# --------------------------------------------------------------------------------------------
# One case


def _human(labels: Any, threshold: float) -> dict[str, dict[str, bool]]:
    """Human verdicts by case and metric (True: passes)."""
    if labels is None:
        return {}
    if isinstance(labels, (str, Path)):
        from .labels import load_labels

        labels = load_labels(labels)
    out: dict[str, dict[str, bool]] = {}
    for row in labels.to_dict("records"):
        out.setdefault(str(row["case_id"]), {})[str(row["metric"])] = bool(row["grade"] >= threshold)
    return out


def _backend_order(s: Score) -> tuple:
    claims = s.evidence is not None and bool(s.evidence.claims)
    return (not claims, s.backend != "native", s.backend)


def _entry(s: Score, mark: float) -> dict[str, Any]:
    return {"metric": s.metric, "backend": s.backend, "value": s.value, "pass_mark": mark,
            "passed": bool(verdict(s, mark)), "source": "score", "reason": s.reason}


def _matching(source: str, metric: str, k: Optional[int]) -> Optional[int]:
    """How well ``metric`` (a concrete name) matches ``source``: None (no), else a rank (0 best: the
    run's cut-off)."""
    if not source.endswith("@k"):
        return 0 if metric == source else None
    base, _, cut = metric.partition("@")
    if base != source[:-2] or not cut.isdigit():
        return None
    return 0 if k is not None and int(cut) == int(k) else int(cut)


@dataclass(frozen=True)
class _SpanRule:
    """What the details of a span-labelled case need: the run's span rule, and whether the cases hold
    their chunks."""

    min_overlap: float
    chunks: bool


def _diagnose_case(case: Case, scores: list[Score], th: Thresholds, human: dict[str, bool], in_run: set[str],
                   k: Optional[int], marks: dict[tuple[str, str], float], spans: _SpanRule,
                   placed_only: Union[set[str], tuple] = ()) -> Optional[CaseDiagnosis]:
    """The case's diagnosis (None when nothing fails); for a layer of ``placed_only``, where the walk
    stops at a question, the layer alone (no reason, details or missing evidence)."""
    scored = [s for s in scores if s.status == "scored"]
    if not case.answerable:  # nothing relevant exists to retrieve: its retrieval scores fail nothing
        scored = [s for s in scored if half_of(s.metric) != "retrieval"]
    mark_of = {}
    for s in scored:
        key = (s.backend, s.metric)
        mark = marks.get(key)
        if mark is None:  # the pass marks are the same for every case: looked up once a column
            mark = marks[key] = th.get(s.backend, s.metric)
        mark_of[key] = mark
    failing = [_entry(s, mark_of[(s.backend, s.metric)]) for s in scored
               if verdict(s, mark_of[(s.backend, s.metric)]) is False]
    failing += [{"metric": m, "backend": "human", "value": 0.0, "pass_mark": None, "passed": False,
                 "source": "label", "reason": "a human label says it fails"}
                for m, ok in sorted(human.items()) if not ok]
    if not failing:
        return None
    failing.sort(key=lambda f: (f["source"] != "score", f["metric"], f["backend"]))
    base = dict(case_id=case.id, tags=list(case.tags), failing=failing)
    unlabelled = _no_relevant_label(case)
    if unlabelled:  # the ranking metrics' zeros say nothing of the retriever: not evidence, not a failure
        scored = [s for s in scored if not _ranked_by_labels(s.metric)]
        failing = [f for f in failing if f["source"] != "score" or not _ranked_by_labels(f["metric"])]
    ctx = _Context(case, scores, scored, mark_of, human, in_run, k, spans, case_claims(scores))
    settled: dict[str, dict[str, Any]] = {}  # question -> the deciding entry (answered yes)
    for q in _walk(case):
        decided, missing = _answer(q, ctx)
        if (decided is None and "undetermined" in placed_only
                or decided is not None and not decided["passed"] and q.layer in placed_only):
            return CaseDiagnosis(layer=q.layer if decided is not None else "undetermined", question=q.name,
                                 decided_by=decided, reason="", **base)
        if decided is None:
            if q.name == "retrieval" and _nothing_retrieved(ctx):
                missing = [_NOTHING_RETRIEVED, *missing]
            if q.name == "retrieval" and unlabelled:  # the ranking metrics are no evidence here
                missing = [_NO_RELEVANT_LABEL,
                           *(m for m in missing if not _ranked_by_labels(m.split(" ", 1)[0]))]
            return CaseDiagnosis(layer="undetermined", question=q.name, decided_by=None, missing=missing,
                                 reason=f"cannot tell whether {q.whether}: " + "; ".join(missing), **base)
        if not decided["passed"]:
            if q.name == "correctness":
                return _wrong_answer(decided, ctx, settled, failing, base)
            details = _details(q, ctx, decided)
            return CaseDiagnosis(layer=q.layer, question=q.name, decided_by=decided,
                                 reason=_reason(q, ctx, decided, details), details=details, **base)
        settled[q.name] = decided
        if all(half_of(f["metric"]) == "retrieval" for f in failing):
            break  # only the retrieved list fails: the questions about the answer have nothing to explain
    if not failing:  # only the labels' zeros failed, and other evidence says the retrieval is fine
        return CaseDiagnosis(layer="undetermined", question="retrieval", decided_by=None,
                             missing=[_NO_RELEVANT_LABEL], reason="cannot tell whether "
                             f"{_BY_NAME['retrieval'].whether}: {_NO_RELEVANT_LABEL}", **base)
    return _all_yes(ctx, failing, settled, base)


@dataclass(frozen=True)
class _Context:
    """What one case's diagnosis reads: the case, its scores (all, and those with a value), each
    score's pass mark, its human labels, the metrics of the run, the run's cut-off, the span rule and
    the claim checks."""

    case: Case
    scores: list[Score]
    scored: list[Score]
    mark_of: dict
    human: dict[str, bool]
    in_run: set[str]
    k: Optional[int]
    spans: _SpanRule
    claims: Optional[ClaimEvidence]


#: what a case that retrieved nothing lacks to be placed: which of two layers, the list cannot say
_NOTHING_RETRIEVED = (f"{NOTHING_RETRIEVED}, and nothing says whether an article holds the answer (then "
                      "retrieval missed it) or none does (then the knowledge base lacks it)")


#: what a case whose relevance labels all have grade 0 lacks: its ranking metrics (hit@k and precision@k
#: 0, the others undefined) find nothing because nothing is labelled relevant, not because the retriever
#: missed it
_NO_RELEVANT_LABEL = ("its relevance labels name no relevant chunk (every grade is 0), so the ranking "
                      "metrics have nothing to find: label the chunk that answers it (grade 1 or more), "
                      "or mark the case unanswerable")


def _no_relevant_label(case: Any) -> bool:
    """Whether the case has relevance labels (no span labels) and none of grade 1 or more."""
    relevant = case.relevant
    return bool(relevant) and not case.relevant_spans and max(relevant.values()) < 1


def _ranked_by_labels(metric: str) -> bool:
    """recall, precision, hit, MRR, nDCG and MAP: what the relevance labels decide."""
    return metric.partition("@")[0] in METRICS


def _nothing_retrieved(ctx: _Context) -> bool:
    """Whether the case retrieved no chunk, as its scores say it (an undefined score's reason: the
    native ranking metrics without labels, the claim diagnostics): the same whether the cases were
    read with their chunks or without, as the report reads them."""
    return any(s.status == "undefined" and NOTHING_RETRIEVED in (s.reason or "") for s in ctx.scores)


def _answer(q: Question, ctx: _Context) -> tuple[Optional[dict[str, Any]], list[str]]:
    """The entry that answers ``q`` for the case (None: no source has a value), and why each source
    has none. An answer that states no claim (its claims split, none found) makes no unsupported
    claim: the faithfulness question is answered yes by that score."""
    for metric, ok in sorted(ctx.human.items()):
        if _labels_answer(q, metric):
            return {"metric": metric, "backend": "human", "value": 1.0 if ok else 0.0, "pass_mark": None,
                    "passed": ok, "source": "label", "reason": "human label"}, []
    missing = []
    for source in q.sources:
        found = sorted(((r, s) for s in ctx.scored if (r := _matching(source, s.metric, ctx.k)) is not None),
                       key=lambda rs: (rs[0], _backend_order(rs[1])))
        if found:
            s = found[0][1]
            return _entry(s, ctx.mark_of[(s.backend, s.metric)]), []
        missing.append(_why_missing(source, ctx.scores, ctx.in_run, ctx.k))
    if q.name == "faithfulness":
        empty = next((s for s in ctx.scores if s.status == "undefined" and _source_of(q, s.metric)
                      and s.evidence is not None and s.evidence.claims == []), None)
        if empty is not None:
            return {"metric": empty.metric, "backend": empty.backend, "value": None, "pass_mark": None,
                    "passed": True, "source": "score", "reason": "the answer states no claim"}, []
    return None, missing


def _why_missing(source: str, scores: list[Score], in_run: set[str], k: Optional[int]) -> str:
    """Why ``source`` has no value for a case: not in the run, or each of its scores' status and
    reason."""
    names = sorted(m for m in in_run if _matching(source, m, k) is not None)
    if not names:
        return f"{source}{NOT_IN_RUN}"
    found = [s for s in scores if s.metric in names]
    if not found:
        return f"{', '.join(names)} not scored for this case"
    return ", ".join(f"{s.metric} ({s.backend}) {s.status}"
                     + (f" ({s.error or s.reason})" if s.error or s.reason else "") for s in found)


#: what a question answered yes says of the case, in the words of a diagnosis
_YES_WORDS = {"declined": "declined a question it cannot answer", "retrieval": "retrieved",
              "faithfulness": "faithful", "correctness": "correct"}


def _settled_words(settled: dict[str, dict]) -> str:
    """The questions answered yes, as a diagnosis says them ("retrieved, faithful and correct"): only
    those that were asked (an unanswerable case is asked whether it declined, nothing else)."""
    words = [_YES_WORDS[q.name] for q in QUESTIONS if q.name in settled]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def _all_yes(ctx: _Context, failing: list[dict], settled: dict[str, dict], base: dict) -> CaseDiagnosis:
    """Every question answered yes: the failing metrics say what is left. ``decided_by`` is the
    evidence that decides: the human label or score that overrules a failing metric, else the
    failing metric itself."""
    deciders = {(e["metric"], e["backend"]) for e in settled.values()}
    overruled = []
    for f in failing:
        # a source of a question answered yes, or (when a human label answered it) a metric it names
        q = next((q for q in QUESTIONS if q.name in settled
                  and (_source_of(q, f["metric"])
                       or (settled[q.name]["source"] == "label" and f["metric"] in q.labelled_by))), None)
        if q is not None and (f["metric"], f["backend"]) not in deciders \
                and not _measured(f, settled[q.name]):
            overruled.append((f, settled[q.name], _rank(q, f["metric"])))
    # a human label's overruling first: it is the strongest evidence that the rating is wrong
    overruled = [(f, by) for f, by, _ in sorted(overruled, key=lambda o: (o[1]["source"] != "label", o[2]))]
    rest = [f for f in failing if all(f is not o for o, _ in overruled)]
    if overruled and overruled[0][1]["source"] == "label":
        return _overruled(ctx, overruled, settled, base)
    retrieval = [f for f in rest if half_of(f["metric"]) == "retrieval"]
    if retrieval:  # the first in the metrics' order: recall, precision, hit, mrr, ndcg, map, span, judged
        f = min(retrieval, key=lambda f: (not _source_of(_BY_NAME["retrieval"], f["metric"]),
                                          _ORDER.get(f["metric"].partition("@")[0], len(_ORDER))))
        why = _retrieval_shortfall(ctx, f, settled)
        found = settled.get("retrieval")  # the evidence that a relevant chunk is retrieved: its cut
        where = f"the top {_cut(found['metric'])} ({found['metric']})" if found and "@" in found["metric"] \
            else "the top k"
        return CaseDiagnosis(layer="retrieval", question=None, decided_by=f, reason=(
            f"a relevant chunk is in {where}, but {_named(f)} fails{why}"),
            details=_details(_BY_NAME["retrieval"], ctx, f), **base)  # (the top k of the failing metric)
    by_human = [f for f in rest if f["source"] == "label"]
    checks = [f for f in rest if f["source"] == "score" and (m := find(f["metric"])) is not None
              and m.kind != JUDGED]
    if by_human or checks:
        f = (by_human or checks)[0]
        return CaseDiagnosis(layer="generation", question=None, decided_by=f, reason=(
            f"{_settled_words(settled)}, but {_named(f)} fails"), **base)
    if overruled:
        return _overruled(ctx, overruled, settled, base)
    f = rest[0]
    passed = "; ".join(_BY_NAME[n].whether for n in settled)
    return CaseDiagnosis(layer="reference_or_judge", question=None, decided_by=f, reason=(
        f"{passed}; yet {_named(f)} rates it poorly: {_check(f)}"), **base)


_ORDER = {m.base: i for i, m in enumerate(CANONICAL)}

#: the metrics that hold an answer against the golden set's reference or expected strings: when one of
#: them rates a correct answer poorly, the reference is as suspect as the judge
READS_REFERENCE = frozenset({
    "answer_correctness", "must_contain", "must_not_contain", "answer_claim_precision", "answer_claim_recall",
    "answer_claim_f1", "context_recall", "context_precision", "claim_recall", "claim_context_precision",
    "context_utilization", "noise_sensitivity_relevant", "noise_sensitivity_irrelevant", "hallucination",
    "self_knowledge"})


def _check(*entries: dict) -> str:
    """Where a correct answer rated poorly points: the judge, and the reference when a metric that
    rated it reads one (abstention and faithfulness do not)."""
    return ("check the reference and the judge" if any(e["metric"] in READS_REFERENCE for e in entries)
            else "check the judge")


def _without_reference(ctx: _Context) -> bool:
    """Whether the case has no reference, as its scores show it (a metric skipped for want of one):
    the same whether the cases were read with their texts or without."""
    for s in ctx.scores:
        why = s.reason or ""
        if s.status == "undefined" and why.startswith(_SKIPPED) and \
                "reference" in why[len(_SKIPPED):].split(", "):
            return True
    return False


_SKIPPED = "skipped: case has no "


def _retrieval_shortfall(ctx: _Context, f: dict, settled: dict[str, dict]) -> str:
    """Why a retrieval metric fails once a relevant chunk is in the top k: the labelled text the top k
    miss (``span_recall@k``, or the labels the retrieval question's evidence shows missed), the rank
    of the first relevant chunk (``mrr``), the noise or order of the top k (``ndcg``, ``map``,
    ``precision``), as each score's reason says it."""
    own = _shortfall(ctx, f)
    if _source_of(_BY_NAME["retrieval"], f["metric"]):
        # (a hit@k of 0: no relevant chunk at all in the top k)
        what = "holds nothing relevant" if f["value"] == 0 else "misses part of what is relevant"
        return f": the top {_cut(f['metric'])} {what}" + (f" ({own})" if own else "")
    evidence = settled.get("retrieval")
    missed = None
    if evidence is not None and \
            (evidence["source"] == "label" or (evidence["value"] is not None and evidence["value"] < 1)):
        missed = _shortfall(ctx, evidence)
    why = "; ".join(dict.fromkeys(w for w in (own, missed) if w))
    return f": {why}" if why else ""


def _shortfall(ctx: _Context, e: dict) -> Optional[str]:
    """Why the retrieval evidence ``e`` falls short, in the words of the native backend's reason (the
    labels and spans the top k miss with their ranks, the first relevant rank, the noise): the
    score's reason; for a human label, the reason of a score of the same question below 1; else
    (a run written without these reasons) computed from the case's chunks."""
    if e["source"] == "score" and e.get("reason"):
        return e["reason"]
    if e["source"] == "label":
        q = next(q for q in QUESTIONS if _labels_answer(q, e["metric"]))
        for s in sorted(ctx.scored, key=lambda s: (_rank(q, s.metric), _backend_order(s))):
            if _source_of(q, s.metric) and s.reason and s.value is not None and s.value < 1:
                return s.reason
    if not ctx.spans.chunks:
        return None
    base, _, cut = e["metric"].partition("@")
    if base not in METRICS and base not in MISSED_BY:
        return None
    k = int(cut) if cut.isdigit() else ctx.k
    if base in MISSED_BY and k:
        return missed_labels([c.id for c in ctx.case.contexts], ctx.case.contexts, ctx.case.relevant,
                             ctx.case.relevant_spans, int(k), ctx.spans.min_overlap, base)
    if e["value"] is None or base not in METRICS:
        return None
    name = f"{base}@{k}" if k and base in NEEDS_K else e["metric"]
    ranked = prepare([ctx.case], ctx.spans.min_overlap)
    return reasons([ctx.case], ranked, name, np.array([e["value"]]), ctx.spans.min_overlap)[0]


def _measured(f: dict, by: dict) -> bool:
    """Whether failing entry ``f`` is a deterministic retrieval metric and ``by``, the evidence that
    answered its question, is a score: one count of the top k cannot overrule another (a chunk
    matching each label, ``recall@k``, yet the labelled text only partly in the top k,
    ``span_recall@k``): what fails is retrieval, not the reference or the judge."""
    m = find(f["metric"])
    return (by["source"] == "score" and half_of(f["metric"]) == "retrieval" and m is not None
            and m.kind != JUDGED)


def _overruled(ctx: _Context, overruled: list[tuple[dict, dict]], settled: dict[str, dict],
               base: dict) -> CaseDiagnosis:
    f, by = overruled[0]
    more = [_named(o) for o, _ in overruled[1:]]
    said = ""  # what the overruled judge found: the claim and where it stands
    if _source_of(_BY_NAME["faithfulness"], f["metric"]):
        s = _score_of(ctx.scores, f)
        bad = s.evidence.unsupported() if s is not None and s.evidence is not None else []
        if bad:
            where = (ctx.claims.where(bad[0].text) if ctx.claims is not None else None) or (
                "contradicted by the chunks" if bad[0].verdict == "CONTRADICTED" else "unsupported")
            said = f" (it finds {quoted(bad[0].text)} {where})"
    return CaseDiagnosis(layer="reference_or_judge", question=None, decided_by=by, reason=(
        f"{_named(f)} fails{said}, but {_named(by)} decides that {_question_of(by, settled)}: "
        f"{_check(*(o for o, _ in overruled))}"
        + (f"; also overruled: {', '.join(more)}" if more else "")),
        details={"overruled": [{"failing": o, "decided_by": b} for o, b in overruled]}, **base)


def _rank(q: Question, metric: str) -> tuple[int, int]:
    """Where ``metric`` stands among ``q``'s evidence (its sources first, in order)."""
    i = next((i for i, s in enumerate(q.sources) if _matching(s, metric, None) is not None), len(q.sources))
    return (QUESTIONS.index(q), i)


def _source_of(q: Question, metric: str) -> bool:
    return any(_matching(s, metric, None) is not None for s in q.sources)


def _question_of(entry: dict, settled: dict[str, dict]) -> str:
    name = next(n for n, e in settled.items() if e is entry)
    return _BY_NAME[name].whether


def _cut(metric: str) -> str:
    """The k of a metric's top k, as a reason says it: ``10`` for ``recall@10``, ``k`` for a metric
    of no cut (``context_recall``)."""
    cut = metric.partition("@")[2]
    return cut if cut.isdigit() else "k"


def _named(e: dict[str, Any]) -> str:
    if e["source"] == "label":
        return f"{e['metric']} (human label: {'pass' if e['passed'] else 'fail'})"
    if e["value"] is None:
        return f"{e['metric']} ({e['backend']}) undefined: {e['reason']}"
    shown = against(e["value"], e["pass_mark"], ">=", ".2f")  # 0.4996 < 0.5, not 0.50 < 0.5
    return f"{e['metric']} ({e['backend']}) {shown} < {e['pass_mark']:g}" if not e["passed"] else (
        f"{e['metric']} ({e['backend']}) {shown} >= {e['pass_mark']:g}")


# --------------------------------------------------------------------------------------------
# Details


def _details(q: Question, ctx: _Context, decided: dict) -> dict[str, Any]:
    d: dict[str, Any] = {}
    case, claims = ctx.case, ctx.claims
    if q.name == "retrieval" and ctx.spans.chunks:
        relevant = case.relevant
        ids = getattr(case, "chunk_ids", None)  # chunks held as ids (and texts): no source to match
        n_chunks = len(ids) if ids is not None else len(case.contexts)
        cut = int(decided["metric"].partition("@")[2] or 0) or int(ctx.k or 0) or n_chunks
        rank = _first_ranks(case, ids, relevant)
        missed = [{"label": label, "rank": rank.get(label)} for label, g in relevant.items()
                  if g >= 1 and not rank.get(label, cut + 1) <= cut]
        if missed:
            d["relevant_not_in_top_k"] = missed
        base = decided["metric"].partition("@")[0]
        if case.relevant_spans and base in MISSED_BY:
            gaps, _ = missed_reason(base, case.relevant_spans, case.contexts, cut, ctx.spans.min_overlap)
            if gaps:
                d["spans_missed"] = gaps
        d["top_k"] = ids[:cut] if ids is not None else [ch.id for ch in case.contexts[:cut]]
    elif q.name == "faithfulness":
        s = _score_of(ctx.scores, decided) if decided["source"] == "score" else _claims_score(ctx.scores)
        if s is not None and s.evidence is not None and s.evidence.claims:
            rows = []
            for c in s.evidence.unsupported():
                row: dict[str, Any] = {"claim": c.text, "verdict": c.verdict, "reason": c.reason}
                k = claims.contradicting(c.text) if claims is not None else None
                if k is not None:
                    row["contradicted_by"] = claims.chunk_ids[k]
                elif claims is not None and c.text in claims.in_no_chunk():
                    row["in_no_chunk"] = True
                rows.append(row)
            d["unsupported_claims"] = rows
            if decided["source"] == "label":
                d["judged_by"] = _entry(s, ctx.mark_of.get((s.backend, s.metric), 1.0)) \
                    if s.status == "scored" else None
        d.update(claims.wrong_claims() if claims is not None else {})
    if q.name == "retrieval" and case.relevant_spans:
        d["span_labels"] = True
    return d


def _first_ranks(case: Any, ids: Optional[list[str]], relevant: dict[str, float]) -> dict[str, int]:
    """The rank (from 1) of the first chunk each relevant label (grade 1 or more) names, by its id or
    else its source; a label no chunk names is left out. ``ids``: the chunks' ids where the chunks
    have no source (each label's first place among them, found at once)."""
    if ids is not None:
        wanted = [label for label, g in relevant.items() if g >= 1]
        found = set(wanted).intersection(ids)
        return {label: ids.index(label) + 1 for label in wanted if label in found}
    rank: dict[str, int] = {}
    for i, ch in enumerate(case.contexts, 1):
        for label in (ch.id, ch.source):
            if label in relevant and relevant[label] >= 1:
                rank.setdefault(label, i)
                break
    return rank


def _claims_score(scores: list[Score]) -> Optional[Score]:
    """The faithfulness score whose evidence holds the answer's claims (the judge's, beside a label)."""
    found = [s for s in scores if _source_of(_BY_NAME["faithfulness"], s.metric) and s.evidence is not None
             and s.evidence.claims]
    return min(found, key=lambda s: (_rank(_BY_NAME["faithfulness"], s.metric), _backend_order(s)),
               default=None)


def _score_of(scores: list[Score], e: dict) -> Optional[Score]:
    return next((s for s in scores if s.metric == e["metric"] and s.backend == e["backend"]), None)


def _reason(q: Question, ctx: _Context, decided: dict, details: dict) -> str:
    value = decided["value"]
    if q.name == "retrieval":
        k = _cut(decided["metric"])
        if details.get("span_labels"):
            head = (f"no top-{k} chunk matches a labelled span" if not value and decided["metric"].startswith(
                ("recall@", "hit@")) else f"the top {k} misses labelled text")
        else:
            head = (f"no relevant chunk in the top {k}" if not value or decided["source"] == "label"
                    else f"the top {k} misses relevant chunks")
        extra = _shortfall(ctx, decided)
        return f"{head}: {_named(decided)}" + (f"; {extra}" if extra else "")
    if q.name == "declined":
        extra = decided.get("reason") if decided["source"] == "score" else None
        return (f"answered a question it should have declined: {_named(decided)}"
                + (f"; {extra}" if extra else ""))
    # faithfulness: the unsupported claims, where they stand, and the labels beside the judge
    rows = details.get("unsupported_claims") or []
    judged = details.get("judged_by")
    parts = [f"the answer makes claims the chunks do not support: {_named(decided)}"]
    if judged:
        parts.append(_named(judged))
    if rows:
        parts.append("unsupported: " + "; ".join(
            quoted(c["claim"], 10**6)
            + (f" (contradicted by {ctx.claims.chunk(ctx.claims.chunk_ids.index(c['contradicted_by']))})"
               if c.get("contradicted_by") else " (in no retrieved chunk)" if c.get("in_no_chunk")
               else " (contradicted by the chunks)" if c.get("verdict") == "CONTRADICTED" else "")
            for c in rows))
    elif decided["source"] == "score" and decided.get("reason"):
        parts.append(decided["reason"])
    right = [m for m, ok in sorted(ctx.human.items()) if ok and m in _BY_NAME["correctness"].labelled_by]
    if right:
        ask = ": a human label on faithfulness would say whether the chunks state it in other words"
        parts.append(f"{right[0]} (human label: pass) says the answer is correct"
                     + ("" if decided["source"] == "label" else ask))
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# A faithful answer that is wrong: what the claim checks say


def _wrong_answer(decided: dict, ctx: _Context, settled: dict[str, dict], failing: list[dict],
                  base: dict) -> CaseDiagnosis:
    """The layer of a case whose answer follows the chunks (or a person says so) but is not correct
    by ``decided``, from the claim checks (`ragbridge.analysis.claim_evidence`), in this order:

    1. a human label passes the answer's faithfulness while the judge fails it, or its claim checks
       find a claim of the answer in no chunk: ``reference_or_judge`` (the judge's verdicts on this
       answer are in doubt);
    2. every claim of the answer is in the reference and every claim of the reference in the
       answer: ``reference_or_judge`` (the answer is right by the reference; when a person says it
       is wrong, the reference is);
    3. a wrong claim of the answer is stated by a chunk that contradicts a claim of the reference:
       ``knowledge_base``;
    4. a chunk states a claim of the reference that the answer does not: ``generation`` (the
       generator had it);
    5. a wrong claim of the answer is in no chunk: ``generation``;
    6. else (or without claim checks, or without a reference): ``undetermined``, saying what is
       missing."""
    claims = ctx.claims
    named = _named(decided)
    row = dict(question="correctness", decided_by=decided, **base)
    label = settled.get("faithfulness")
    if label is not None and label["source"] == "label":
        nowhere = claims.in_no_chunk() if claims is not None else []
        judged = [f for f in failing
                  if f["source"] == "score" and _source_of(_BY_NAME["faithfulness"], f["metric"])]
        if nowhere or judged:
            doubt = (f"the claim checks find {quoted(nowhere[0])} {claims.where(nowhere[0])}" if nowhere
                     else f"{_named(judged[0])}")
            details: dict[str, Any] = {"overruled": [{"failing": f, "decided_by": label}
                                                     for f in [*judged, decided]]}
            if nowhere:
                details["claims"] = {"in_no_chunk": nowhere}
            return CaseDiagnosis(layer="reference_or_judge", reason=(
                f"a human label disagrees with the judge: {_named(label)}, but {doubt}; and {named}: "
                + ("check the judge (and the reference)" if decided["metric"] in READS_REFERENCE
                   else "check the judge")),
                details=details, **{**row, "decided_by": label})
    if _without_reference(ctx):
        missing = ["the case has no reference to hold the answer and the chunks against"]
    elif claims is None:
        missing = _claim_checks_missing(ctx.scores, ctx.in_run)
    elif claims.reference_claims is None or claims.lacks("reference_in_chunks"):
        missing = ["claim checks without the reference's claims checked against the chunks "
                   "(--metric claim_diagnostics)"]
    elif not claims.reference_claims:
        missing = ["the reference states no claim to check against the chunks"]
    else:
        missing = []
    if missing:
        return CaseDiagnosis(layer="undetermined", missing=missing, reason=(
            f"{named}, but nothing says whether the chunk the answer follows or the answer is wrong: "
            + "; ".join(missing)), **row)
    person = None
    if decided["source"] == "label":
        judge = next((_entry(s, ctx.mark_of[(s.backend, s.metric)])
                      for s in sorted(ctx.scored, key=lambda s: (_rank(_BY_NAME["correctness"], s.metric),
                                                                 _backend_order(s)))
                      if _source_of(_BY_NAME["correctness"], s.metric)), None)
        person = _named(judge) if judge is not None else ""
    layer, reason, details, missing = claims.layer_of_wrong_answer(named, person)
    return CaseDiagnosis(layer=layer, reason=reason, details=details, missing=missing, **row)


def _claim_checks_missing(scores: list[Score], in_run: set[str]) -> list[str]:
    """Why the case has no claim checks: the claim diagnostics not scored in this run, or each of
    theirs with its status."""
    names = sorted(set(RAGCHECKER) & in_run)
    if not names:
        return [f"claim checks{NOT_IN_RUN} (--metric {CLAIM_DIAGNOSTICS})"]
    found = [s for s in scores if s.metric in names]
    if not found:
        return [f"claim checks ({', '.join(names)}) not scored for this case"]
    s = found[0]
    return [f"claim checks: {s.metric} ({s.backend}) {s.status}"
            + (f" ({s.error or s.reason})" if s.error or s.reason else "")]


# --------------------------------------------------------------------------------------------
# Counts


def _counts(index: Any, codes: np.ndarray) -> dict[str, dict[str, int]]:
    """Per tag (and over all cases, `ALL`): the cases, the failing ones and each layer's."""
    n = index.described
    codes = codes[:n]

    def row(mask: np.ndarray) -> dict[str, int]:
        got = np.bincount(codes[mask] + 1, minlength=len(LAYERS) + 1)
        return {"n_cases": int(mask.sum()), "n_failing": int(got[1:].sum()),
                **{layer: int(got[j + 1]) for j, layer in enumerate(LAYERS)}}

    out = {ALL: row(np.ones(n, bool))}
    for tag in index.all_tags():
        out[tag] = row(index.tag_mask(tag)[:n])
    return out
