"""TREC run and qrels files, as trec_eval, pytrec_eval and ranx read them.

A TREC *run* file holds one retrieved document a line::

    <query id> Q0 <docno> <rank> <score> <run tag>

and a *qrels* file one relevance judgement a line::

    <query id> <iteration> <docno> <grade>

Reading (``--format trec`` / ``--from trec``, or a ``.trec`` / ``.run`` suffix; the qrels from
``--qrels FILE``, read option ``qrels``, else the file beside the run with the suffix ``.qrels`` if
there is one):
each query of the run becomes one case, in the order the run first names it, with ``id`` the query
id, ``question`` empty (a run holds no query text), ``contexts`` the query's documents ranked as
trec_eval ranks them, and ``relevant`` the query's judgements from the qrels. The run is read a query
at a time (`records`): every line is checked first, keeping where each query's lines are (`index_run`),
then each query's lines are read back and ranked, so a run read in batches
(`ragbridge.formats.source.open_cases`) holds one batch, the qrels and that index, grouped by query
or not.

Ranking, as trec_eval does it (and pytrec_eval and ranx after it): the rank column is ignored;
documents are sorted by score, highest first, and documents with equal scores by docno in
*descending* string order (trec_eval's ``qsort`` comparator: ``strcmp(docno2, docno1)``). Each
chunk keeps its score. A docno repeated within a query is kept at its first place in that order and
its repeats are dropped, as for every case (counted in the run's ``duplicate_chunk_ids``; trec_eval
refuses such a run, pytrec_eval keeps one of them).

Judgements: the grade is the relevance level, any integer; a negative grade (some collections mark
"judged, unusable" with -1) is read as 0, judged not relevant, which is how trec_eval counts it (one
warning says how many). Queries of the qrels that the run does not name are not cases: trec_eval
averages over the run's queries only (unless ``-c``), and one warning says how many were left out.

Writing (``--to trec``): the run to the path given, the qrels beside it (same name, suffix
``.qrels``). A case's chunks are written in their order with ranks 1..n; the score column is the
chunks' own scores when they are strictly decreasing (so trec_eval's sort gives back the same
order), otherwise ``n - position`` and ``contexts.score`` is reported as not held. A TREC run holds
only ids, ranks and scores, and qrels only chunk-id judgements: the question, answer, chunk texts,
sources, references, checks, tags and metadata are not held, nor a case without chunks (a run names
a query only through its documents: ``cases without contexts``); ids and labels with white space
are refused; a chunk id repeated within a case is written once, at its first place (``contexts
(repeated ids)``: trec_eval refuses a repeated docno, and ranking drops repeats anyway); labels
that name a *source* (a section matched through ``Chunk.source``) are written as judgements of
every retrieved chunk of that source that has no label of its own, which trec_eval then credits
once per chunk rather than once per label (recall and nDCG can then differ: reported as
``relevant (by source)``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Sequence

import logging

import numpy as np

from ..hookspecs import hookimpl
from ..schema import Case, Chunk
from . import Format
from .files import DatasetError, atomic_path, output_name

logger = logging.getLogger("ragbridge")

SUFFIXES = (".trec", ".run")


def _decode(path: Path, n: int, raw: bytes) -> list[str]:
    try:
        return raw.decode("utf-8").split()
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                           path=path, line=n, hint="save the file as UTF-8") from None


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            parts = _decode(path, n, raw)
            if parts:
                yield n, parts


def read_qrels(path: Path) -> tuple[dict[str, dict[str, int]], int]:
    """``{query id: {docno: grade}}`` and the number of negative grades read as 0."""
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    negative = 0
    for n, parts in _lines(path):
        if len(parts) != 4:
            raise DatasetError(
                f"has {len(parts)} columns, a qrels line has 4: query id, iteration, docno, grade",
                path=path, line=n, hint="is this a run file? pass it as the dataset, not --qrels")
        qid, _, docno, grade_text = parts
        try:
            grade = int(grade_text)
        except ValueError:
            raise DatasetError(f"grade {grade_text!r} is not an integer", path=path, line=n,
                               field="grade") from None
        if grade < 0:
            negative += 1
            grade = 0
        qrels[qid][docno] = grade
    return dict(qrels), negative


def _run_line(path: Path, n: int, parts: list[str]) -> tuple[str, str, float]:
    """A run line's query id, docno and score, or the `DatasetError` saying what is wrong with it."""
    if len(parts) != 6:
        raise DatasetError(
            f"has {len(parts)} columns, a run line has 6: query id, Q0, docno, rank, score, run tag",
            path=path, line=n, hint="is this a qrels file? pass it with --qrels")
    qid, _, docno, _, score_text, _ = parts
    try:
        score = float(score_text)
    except ValueError:
        raise DatasetError(f"score {score_text!r} is not a number", path=path, line=n,
                           field="score") from None
    if not math.isfinite(score):
        raise DatasetError(f"score {score_text!r} is not a finite number", path=path, line=n,
                           field="score")
    return qid, docno, score


def index_run(path: Path) -> dict[str, list[int]]:
    """Check every line of the run, in order, and return where each query's lines are: ``{query id:
    [first line, start byte, end byte, ...]}``, one triple per stretch of consecutive lines of the
    query (one for a run grouped by query, as trec_eval's, ranx's and pytrec_eval's users write
    them), the queries in the order the run first names them. A few numbers a query, not its lines."""
    index: dict[str, list[int]] = {}
    last, ranges, at = None, None, 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            parts = _decode(path, n, raw)
            if parts:
                qid = _run_line(path, n, parts)[0]
                if qid != last:
                    ranges = index.get(qid)
                    if ranges is None:
                        ranges = index[qid] = []
                    ranges += (n, at, at + len(raw))
                    last = qid
                else:
                    ranges[-1] = at + len(raw)
            at += len(raw)
    if not index:
        raise DatasetError("holds no ranked documents", path=path, hint="a run needs at least one line")
    return index


def ranked(path: Path, fh: BinaryIO, ranges: list[int]) -> list[tuple[str, float]]:
    """A query's ``[(docno, score), ...]`` read from its ``ranges`` (`index_run`) of the open run, in
    trec_eval's order (score desc as single precision, then docno desc)."""
    docs: list[tuple[str, float]] = []
    for k in range(0, len(ranges), 3):
        line, start, end = ranges[k:k + 3]
        fh.seek(start)
        for n, raw in enumerate(fh.read(end - start).split(b"\n"), start=line):
            parts = _decode(path, n, raw)
            if parts:
                _, docno, score = _run_line(path, n, parts)
                docs.append((docno, score))
    docs.sort(key=lambda d: d[0], reverse=True)  # stable sorts: docno descending breaks score ties
    docs.sort(key=lambda d: single(d[1]), reverse=True)
    return docs


def single(score: float) -> float:
    """``score`` as trec_eval compares it: cast to single precision, so ``0.30000001`` and ``0.3`` tie."""
    with np.errstate(over="ignore"):  # beyond single precision: inf, as in trec_eval
        return float(np.float32(score))


def read(path: Path, qrels: Optional[Path] = None) -> list[Case]:
    """The run (and its judgements) as cases; the warnings go to the ``ragbridge`` logger."""
    return [Case.model_construct(
        id=r["id"], question="", answer=None,
        contexts=[Chunk.model_construct(id=c["id"], text="", score=c["score"], source=None)
                  for c in r["contexts"]],
        relevant=r.get("relevant", {}), reference=None, reference_contexts=[],
        must_contain=[], must_not_contain=[], answerable=True, tags=[], metadata={},
    ) for _, r in records(path, qrels)]


def records(path: Path, qrels: Optional[Path] = None) -> Iterator[tuple[int, dict]]:
    """The run (and its judgements) as canonical records, a query at a time: ``(line, record)``, the
    line where the run first names the query. The whole run is checked (`index_run`) and the qrels read
    before the first record, and the warnings go to the ``ragbridge`` logger then; memory holds the
    qrels, the index and one query's documents."""
    if qrels is None and qrels_path(path).exists() and qrels_path(path) != path:
        qrels = qrels_path(path)
    index = index_run(path)
    judged: dict[str, dict[str, int]] = {}
    warnings: list[str] = []
    if qrels is None:
        warnings.append(f"{path}: no --qrels given: the {len(index)} queries have no relevance labels, "
                        "so every ranking metric is undefined")
    else:
        judged, negative = read_qrels(Path(qrels))
        if negative:
            warnings.append(f"{qrels}: {negative} negative grade(s) read as 0 (judged not relevant), "
                            "as trec_eval counts them")
        unranked = sum(qid not in index for qid in judged)
        if unranked:
            warnings.append(f"{qrels}: {unranked} judged quer(ies) have no ranking in {path} and are not "
                            "cases (trec_eval averages over the run's queries; -c would count them as 0)")
    for line in warnings:
        logger.warning("warning: %s", line)
    return _records(path, index, judged)


def _records(path: Path, index: dict[str, list[int]], judged: dict[str, dict[str, int]]
             ) -> Iterator[tuple[int, dict]]:
    with open(path, "rb") as fh:
        for qid, ranges in index.items():
            record = {"id": qid, "question": "",
                      "contexts": [{"id": d, "score": s} for d, s in ranked(path, fh, ranges)]}
            if judged.get(qid):
                record["relevant"] = dict(judged[qid])
            yield ranges[0], record


def _scores(chunks: Sequence[Chunk]) -> tuple[list[float], bool]:
    given = [c.score for c in chunks]
    if all(s is not None for s in given) and all(single(a) > single(b) for a, b in zip(given, given[1:])):
        return [float(s) for s in given], True
    n = len(chunks)
    return [float(n - i) for i in range(n)], not chunks


def qrels_path(path: Path) -> Path:
    return path.with_suffix(".qrels")


def write(cases: Sequence[Case], path: Path) -> list[str]:
    """Write the run to ``path`` and the qrels beside it; returns what the files could not hold."""
    lost: set[str] = set()
    qrels_lines: list[str] = []
    with open(path, "w", encoding="utf-8") as fh:  # the caller writes ``path`` whole (atomic_path)
        for case in cases:
            for what, name in (("case id", case.id), *(("chunk id", c.id) for c in case.contexts),
                               *(("label", label) for label in case.relevant)):
                if not name or any(ch.isspace() for ch in name):
                    raise DatasetError(f"{what} {name!r} of case {case.id!r} is empty or has white space, "
                                       "which a TREC file cannot hold", field="id",
                                       hint="use ids without spaces")
            if not case.contexts:
                lost.add("cases without contexts")  # a run names a query only through its documents
            chunks, seen = [], set()
            for chunk in case.contexts:  # trec_eval refuses a docno twice in a query; ranking drops repeats
                if chunk.id in seen:
                    lost.add("contexts (repeated ids)")
                else:
                    seen.add(chunk.id)
                    chunks.append(chunk)
            scores, kept = _scores(chunks)
            if not kept:
                lost.add("contexts.score")
            for i, (chunk, score) in enumerate(zip(chunks, scores), start=1):
                fh.write(f"{case.id} Q0 {chunk.id} {i} {score!r} ragbridge\n")
            # a label matched by source (a section): a judgement of each chunk matching it, in its place
            by_source: dict[str, list[str]] = {}
            for chunk, label in zip(case.contexts, case.chunk_labels()):
                if label is not None and label != chunk.id:
                    by_source.setdefault(label, []).append(chunk.id)
            ids = {c.id for c in chunks}
            for label, grade in case.relevant.items():
                if label in by_source:
                    lost.add("relevant (by source)")
                    qrels_lines.extend(f"{case.id} 0 {cid} {grade}\n" for cid in by_source[label])
                if label not in by_source or label in ids:  # a retrieved docno, or nothing matched it
                    qrels_lines.append(f"{case.id} 0 {label} {grade}\n")
            held_not = (
                ("question", case.question), ("answer", case.answer is not None),
                ("contexts.text", any(c.text for c in case.contexts)),
                ("contexts.source", any(c.source for c in case.contexts)),
                ("contexts.doc", any(c.doc is not None for c in case.contexts)),
                ("relevant_spans", case.relevant_spans),
                ("reference", case.reference is not None), ("reference_contexts", case.reference_contexts),
                ("must_contain", case.must_contain), ("must_not_contain", case.must_not_contain),
                ("answerable", not case.answerable), ("tags", case.tags), ("metadata", case.metadata))
            for name, present in held_not:
                if present:
                    lost.add(name)
    with atomic_path(qrels_path(final_path(path))) as tmp:
        Path(tmp).write_text("".join(qrels_lines), encoding="utf-8")
    return sorted(lost)


def final_path(path: Path) -> Path:
    """The output a temporary path of `ragbridge.formats.files.atomic_path` stands for."""
    return path.with_name(output_name(path.name))


#: ``contexts.score`` only when a case's scores are not strictly decreasing (then ``n - position``)
CANNOT_HOLD = ("question", "answer", "contexts.text", "contexts.source", "contexts.score", "contexts.doc",
               "relevant (by source)", "relevant_spans", "reference", "reference_contexts", "must_contain",
               "must_not_contain", "answerable", "tags", "metadata", "cases without contexts",
               "contexts (repeated ids)")


TREC = Format(
    "trec", SUFFIXES, read, write,
    "a TREC run (qid Q0 docno rank score tag), with its qrels (--qrels, or <run>.qrels beside it)",
    cannot_hold=CANNOT_HOLD, options=("qrels",),
)


@hookimpl
def ragbridge_register_formats(register):
    register(TREC)
