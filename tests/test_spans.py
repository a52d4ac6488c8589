"""Span labels: placing chunks and quotes in a corpus, the span rule, and the character-level metrics.

The oracle of the character-level metrics is Chroma's own arithmetic (`chroma_reference`, transcribed
from its chunking-evaluation code), run on generated corpora, fixed-size chunkings with and without
overlap, and generated spans; ragbridge's values must equal it case by case. The merged arithmetic
is checked against the characters themselves (sets of offsets), and the ranking metrics on span
labels against pytrec_eval on the equivalent chunk-id labels.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragbridge
from ragbridge import RunOptions
from ragbridge.formats import DatasetError
from ragbridge.formats.corpus import Chunking, Corpus, read_chunking, read_corpus
from ragbridge.native import ranking
from ragbridge.schema import Case

from chroma_reference import full_precision_score, scores_from_retrievals
from conftest import ragbridge_cli, warnings_in

K = (1, 3, 5)
SPAN_METRICS = [f"span_{m}@{k}" for k in K for m in ("recall", "precision", "iou")] + ["precision_omega"]
#: (size, overlap) of the fixed-size chunkings: without overlap, and sliding windows
CHUNKINGS = [(200, 0), (250, 50), (300, 150)]


# ------------------------------------------------------------------------------------------------
# Generated corpora, chunkings, spans and retrievals


def make_corpus(rng: random.Random, n_docs: int = 3) -> dict[str, str]:
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    docs = {}
    for d in range(n_docs):
        words = []
        for _ in range(rng.randint(500, 800)):
            words.append(rng.choice(vocab))
            words.append(rng.choice([" "] * 12 + ["\n", "  ", ". "]))
        docs[f"doc{d}.md"] = "".join(words)
    return docs


def fixed_size(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """A fixed-size chunker in characters: windows of ``size`` every ``size - overlap``."""
    step = size - overlap
    return [
        (s, min(s + size, len(text)))
        for s in range(0, len(text), step)
        if s < len(text) and (s == 0 or s + overlap < len(text))
    ]


def make_question(rng: random.Random, docs: dict[str, str]) -> tuple[str, list[tuple[int, int]]]:
    """A document and 1-3 references in it; some start or end on a multiple of 50 (where chunks
    of these chunkings start and end: touching ranges are where Chroma's arithmetic differs)."""
    doc = rng.choice(sorted(docs))
    n = len(docs[doc])
    refs = []
    for _ in range(rng.randint(1, 3)):
        length = rng.randint(15, 400)
        start = rng.randrange(0, n - length)
        if rng.random() < 0.3:
            start = start // 50 * 50
        end = start + length
        if rng.random() < 0.2:
            end = max(start + 1, end // 50 * 50)
        refs.append((start, end))
    return doc, refs


def retrieve(
    rng: random.Random,
    chunks: list[tuple[str, int, int]],
    doc: str,
    refs: list[tuple[int, int]],
    depth: int = 8,
) -> list[tuple[str, int, int]]:
    """The top ``depth`` chunks of a noisy retriever that favours the chunks holding a reference."""

    def score(chunk):
        d, s, e = chunk
        held = sum(max(0, min(e, re) - max(s, rs)) for rs, re in refs) if d == doc else 0
        return held / (e - s) + rng.random() * 0.8

    return sorted(chunks, key=score, reverse=True)[:depth]


def chunking_of(docs: dict[str, str], size: int, overlap: int) -> list[tuple[str, int, int]]:
    return [(d, s, e) for d in sorted(docs) for s, e in fixed_size(docs[d], size, overlap)]


def golden(
    rng: random.Random, docs: dict[str, str], chunks: list[tuple[str, int, int]], n_cases: int, questions=None
) -> tuple[list[dict], list]:
    """Cases whose chunks carry their text and document (no offsets: placed by their text) and
    whose labels are offsets or quotes; with the questions they were made from."""
    questions = questions or [make_question(rng, docs) for _ in range(n_cases)]
    records = []
    for i, (doc, refs) in enumerate(questions):
        top = retrieve(rng, chunks, doc, refs)
        spans = []
        for j, (s, e) in enumerate(refs):
            if j == 1:  # a quote, located in its document
                spans.append({"doc": doc, "quote": docs[doc][s:e]})
            else:
                spans.append({"doc": doc, "start": s, "end": e})
        records.append(
            {
                "id": f"q{i}",
                "question": f"question {i}",
                "contexts": [{"id": f"{d}:{s}", "text": docs[d][s:e], "doc": d} for d, s, e in top],
                "relevant_spans": spans,
            }
        )
    return records, questions


def chroma_values(questions, retrieved: list[list[tuple[str, int, int]]], chunks) -> dict:
    """Chroma's values per case: ``{(case, metric): value}``."""
    out = {}
    collection = [{"start_index": s, "end_index": e, "corpus_id": d} for d, s, e in chunks]
    for i, ((doc, refs), top) in enumerate(zip(questions, retrieved)):
        references = [{"start_index": s, "end_index": e} for s, e in refs]
        metadatas = [{"start_index": s, "end_index": e, "corpus_id": d} for d, s, e in top]
        for k in K:
            iou, recall, precision = scores_from_retrievals(references, doc, metadatas, k)
            out[(f"q{i}", f"span_recall@{k}")] = recall
            out[(f"q{i}", f"span_precision@{k}")] = precision
            out[(f"q{i}", f"span_iou@{k}")] = iou
        out[(f"q{i}", "precision_omega")] = full_precision_score(references, doc, collection)[0]
    return out


def merged_values(questions, retrieved, chunks) -> dict:
    """The merged arithmetic from the characters themselves: sets of (document, offset)."""
    out = {}
    for i, ((doc, refs), top) in enumerate(zip(questions, retrieved)):
        g = {(doc, c) for s, e in refs for c in range(s, e)}
        for k in K:
            r = {(d, c) for d, s, e in top[:k] for c in range(s, e)}
            out[(f"q{i}", f"span_recall@{k}")] = len(r & g) / len(g)
            out[(f"q{i}", f"span_precision@{k}")] = len(r & g) / len(r)
            out[(f"q{i}", f"span_iou@{k}")] = len(r & g) / len(r | g)
        c_all = {
            (d, c)
            for d, s, e in chunks
            if any(d == doc and min(e, re) > max(s, rs) for rs, re in refs)
            for c in range(s, e)
        }
        out[(f"q{i}", "precision_omega")] = len(c_all & g) / len(c_all | g)
    return out


def write_inputs(tmp: Path, docs, chunks, records) -> tuple[Path, Path, Path]:
    corpus = tmp / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, text in docs.items():
        (corpus / name).write_bytes(text.encode("utf-8"))
    chunk_file = tmp / "chunks.jsonl"
    chunk_file.write_text(
        "".join(json.dumps({"id": f"{d}:{s}", "text": docs[d][s:e], "doc": d}) + "\n" for d, s, e in chunks),
        encoding="utf-8",
    )
    data = tmp / "golden.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return corpus, chunk_file, data


def _scores(run_dir: Path) -> dict:
    lines = (run_dir / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    return {(s["case_id"], s["metric"]): s["value"] for s in map(json.loads, lines)}


# ------------------------------------------------------------------------------------------------
# The oracle: Chroma's arithmetic, case by case


@pytest.mark.parametrize("size, overlap", CHUNKINGS)
def test_the_cli_equals_chromas_arithmetic_case_by_case(tmp_path, size, overlap):
    """Through the CLI, on files: corpus folder, chunking file, golden set with chunks placed by
    their text; --span-arithmetic chroma equals Chroma's code on every case and metric, and the
    default (merged) equals the characters counted as sets."""
    rng = random.Random(size * 7 + overlap)
    docs = make_corpus(rng)
    chunks = chunking_of(docs, size, overlap)
    records, questions = golden(rng, docs, chunks, 25)
    corpus, chunk_file, data = write_inputs(tmp_path, docs, chunks, records)
    retrieved = [
        [
            (c["doc"], int(c["id"].split(":")[1]), int(c["id"].split(":")[1]) + len(c["text"]))
            for c in r["contexts"]
        ]
        for r in records
    ]
    expected = {
        "chroma": chroma_values(questions, retrieved, chunks),
        "merged": merged_values(questions, retrieved, chunks),
    }
    for arithmetic, want in expected.items():
        run_dir = tmp_path / arithmetic
        res = ragbridge_cli(
            "run",
            data,
            "--out",
            run_dir,
            "--corpus",
            corpus,
            "--chunks",
            chunk_file,
            "--span-arithmetic",
            arithmetic,
            "--no-progress",
            "--json",
            *[a for m in SPAN_METRICS for a in ("--metric", m)],
        )
        assert res.returncode == 0, res.stderr
        got = _scores(run_dir)
        assert set(got) == set(want)
        wrong = {
            key: (got[key], want[key]) for key in want if got[key] != pytest.approx(want[key], abs=1e-12)
        }
        assert not wrong, f"{arithmetic}: {len(wrong)} of {len(want)} differ, e.g. {list(wrong.items())[:3]}"
    # the chunks were placed where they were cut, and the quotes where they were taken
    placed = [json.loads(line) for line in (tmp_path / "merged" / "cases.jsonl").read_text().splitlines()]
    for rec, top, (doc, refs) in zip(placed, retrieved, questions):
        assert [(c["doc"], c["start"], c["end"]) for c in rec["contexts"]] == top
        assert [(s["start"], s["end"]) for s in rec["relevant_spans"]] == refs


def test_the_two_arithmetics_differ_where_chroma_counts_overlaps_twice():
    """Sliding windows: Chroma's precision divides by the windows' summed lengths (the overlap
    twice), the merged one by the characters they cover; without overlap the two agree."""
    text = "x" * 1000
    corpus = Corpus({"d": text})
    label = [{"doc": "d", "start": 100, "end": 300}]
    windows = [{"id": f"w{s}", "doc": "d", "start": s, "end": s + 200} for s in (0, 100, 200)]
    cases = [Case(id="q", question="q", contexts=windows, relevant_spans=label)]
    merged = ranking.evaluate(cases, ["span_precision@3", "span_iou@3", "span_recall@3"])
    chroma = ranking.evaluate(cases, ["span_precision@3", "span_iou@3", "span_recall@3"], arithmetic="chroma")
    assert merged["span_precision@3"][0] == pytest.approx(200 / 400)  # 0..400 covered once
    assert chroma["span_precision@3"][0] == pytest.approx(200 / 600)  # three windows of 200
    assert merged["span_iou@3"][0] == pytest.approx(200 / 400)
    assert chroma["span_iou@3"][0] == pytest.approx(200 / 600)
    assert merged["span_recall@3"][0] == chroma["span_recall@3"][0] == 1.0
    tiles = [{"id": f"t{s}", "doc": "d", "start": s, "end": s + 200} for s in (0, 200, 400)]
    cases = [Case(id="q", question="q", contexts=tiles, relevant_spans=label)]
    assert (
        ranking.evaluate(cases, ["span_precision@3"])["span_precision@3"][0]
        == ranking.evaluate(cases, ["span_precision@3"], arithmetic="chroma")["span_precision@3"][0]
        == 200 / 600
    )
    assert corpus.locate("d", "xxx")[3]  # repeated text: placed at its first occurrence, flagged


def test_precision_omega_takes_touching_chunks_only_in_chromas_arithmetic(tmp_path):
    docs = {"d.md": "".join(f"w{i:04d} " for i in range(200))}  # 1200 characters
    corpus = Corpus(docs)
    chunking = Chunking.from_places([("d.md", s, s + 100) for s in range(0, 1200, 100)])
    case = Case(
        id="q",
        question="q",
        relevant_spans=[{"doc": "d.md", "start": 200, "end": 250}],
        contexts=[{"id": "c", "doc": "d.md", "start": 200, "end": 300}],
    )
    merged = ranking.evaluate([case], ["precision_omega"], chunking=chunking)["precision_omega"][0]
    chroma = ranking.evaluate([case], ["precision_omega"], chunking=chunking, arithmetic="chroma")[
        "precision_omega"
    ][0]
    assert merged == pytest.approx(50 / 100)  # the chunk 200..300
    assert chroma == pytest.approx(50 / 200)  # and 100..200, which ends where the label starts
    refs = [{"start_index": 200, "end_index": 250}]
    collection = [
        {"start_index": s, "end_index": e, "corpus_id": "d.md"}
        for _, (ss, ee) in chunking.by_doc.items()
        for s, e in zip(ss.tolist(), ee.tolist())
    ]
    assert chroma == full_precision_score(refs, "d.md", collection)[0]
    assert corpus.length("d.md") == 1200


# ------------------------------------------------------------------------------------------------
# The ranking metrics on span labels


def test_span_labels_that_are_the_chunks_equal_trec_eval_on_their_ids():
    """A non-overlapping chunking, each span label exactly one chunk: every ranking metric on the
    span labels equals pytrec_eval on the same labels given as chunk ids."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(3)
    docs = make_corpus(rng, 2)
    chunks = chunking_of(docs, 200, 0)
    metrics = ["recall@3", "precision@3", "ndcg@5", "map", "mrr", "hit@3", "ndcg"]
    span_cases, qrels, run = [], {}, {}
    for i in range(40):
        top = rng.sample(chunks, 8)
        labelled = rng.sample(chunks, rng.randint(1, 4)) + top[: rng.randint(0, 2)]
        grades = {f"{d}:{s}": rng.randint(0, 3) for d, s, e in labelled}
        where = {f"{d}:{s}": (d, s, e) for d, s, e in chunks}
        span_cases.append(
            Case(
                id=f"q{i}",
                question="q",
                contexts=[{"id": f"{d}:{s}", "doc": d, "start": s, "end": e} for d, s, e in top],
                relevant_spans=[
                    {"doc": where[c][0], "start": where[c][1], "end": where[c][2], "grade": g}
                    for c, g in grades.items()
                ],
            )
        )
        qrels[f"q{i}"] = grades
        run[f"q{i}"] = {f"{d}:{s}": float(8 - r) for r, (d, s, e) in enumerate(top)}
    ours = ranking.evaluate(span_cases, metrics)
    trec = pytrec_eval.RelevanceEvaluator(
        qrels, {"recall_3", "P_3", "ndcg_cut_5", "map", "recip_rank", "success_3", "ndcg"}
    ).evaluate(run)
    names = {
        "recall@3": "recall_3",
        "precision@3": "P_3",
        "ndcg@5": "ndcg_cut_5",
        "map": "map",
        "mrr": "recip_rank",
        "hit@3": "success_3",
        "ndcg": "ndcg",
    }
    for i, case in enumerate(span_cases):
        if not any(s.grade > 0 for s in case.relevant_spans):
            continue
        for m in metrics:
            assert ours[m][i] == pytest.approx(trec[case.id][names[m]], abs=1e-9), (case.id, m)


def test_each_span_label_is_credited_once_and_the_overlap_rule_decides():
    """Two chunks of one span: precision counts both, recall and nDCG credit the label once. A
    chunk that grazes a span matches only when the overlap reaches the rule's share."""
    label = [{"doc": "d", "start": 100, "end": 200, "grade": 2}, {"doc": "d", "start": 900, "end": 950}]
    chunks = [
        {"id": "a", "doc": "d", "start": 90, "end": 150},
        {"id": "b", "doc": "d", "start": 150, "end": 260},
        {"id": "c", "doc": "d", "start": 940, "end": 1100},
    ]
    case = Case(id="q", question="q", contexts=chunks, relevant_spans=label)
    v = ranking.evaluate([case], ["precision@3", "recall@2", "recall@3", "ndcg@3"])
    assert v["precision@3"][0] == pytest.approx(2 / 3)  # a and b hold half of the first label each
    assert v["recall@2"][0] == pytest.approx(1 / 2)  # the first label, once
    assert v["recall@3"][0] == pytest.approx(1 / 2)  # c shares 10 of the second label's 50: too little
    assert v["ndcg@3"][0] == pytest.approx(2 / (2 + 1 / 1.584962500721156))
    loose = ranking.evaluate([case], ["recall@3", "precision@3"], min_overlap=0.2)
    assert loose["recall@3"][0] == 1.0 and loose["precision@3"][0] == 1.0
    strict = ranking.evaluate([case], ["precision@3"], min_overlap=1.0)
    assert strict["precision@3"][0] == 0.0  # no chunk lies inside a label, nor a label inside a chunk


def test_a_chunk_holding_several_labels_carries_their_gains_so_a_perfect_ranking_scores_1():
    """One chunk holding all three labels at rank 1 is perfect retrieval: nDCG and MAP are 1, as recall
    and MRR are (they were 0.469 and 0.333 when a chunk carried one label's gain). The labels a chunk
    matches first are one group: its gain is the sum of theirs, and the ideal ranks the groups by
    gain, so retrieving them in two chunks in the other order costs nDCG. A chunk repeating labels
    found above adds nothing and is non-relevant for AP."""
    labels = [{"doc": "d", "start": 0, "end": 40}, {"doc": "d", "start": 50, "end": 90},
              {"doc": "d", "start": 100, "end": 140}]
    whole = {"id": "whole", "doc": "d", "start": 0, "end": 150}
    noise = [{"id": f"n{i}", "doc": "e", "start": 100 * i, "end": 100 * i + 90} for i in range(4)]
    case = Case(id="q", question="q", contexts=[whole, *noise], relevant_spans=labels)
    v = {m: float(x[0]) for m, x in ranking.evaluate(
        [case], ["recall@5", "mrr", "ndcg@5", "ndcg", "map", "map@5"]).items()}
    assert v == {"recall@5": 1.0, "mrr": 1.0, "ndcg@5": 1.0, "ndcg": 1.0, "map": 1.0, "map@5": 1.0}
    exp = ranking.evaluate([case], ["ndcg@5"], gain="exponential")["ndcg@5"][0]
    assert exp == 1.0
    # graded: the grade-3 label alone, then the two grade-1 labels together (gain 2 < 3)
    graded = [{**labels[0], "grade": 1}, {**labels[1], "grade": 1}, {**labels[2], "grade": 3}]
    pair = {"id": "pair", "doc": "d", "start": 0, "end": 95}
    third = {"id": "third", "doc": "d", "start": 95, "end": 145}
    best = Case(id="q", question="q", contexts=[third, pair], relevant_spans=graded)
    worse = Case(id="q", question="q", contexts=[pair, third], relevant_spans=graded)
    v = ranking.evaluate([best, worse], ["ndcg@2", "map", "recall@1"])
    assert v["ndcg@2"][0] == 1.0 and v["map"][0] == 1.0
    assert v["ndcg@2"][1] == pytest.approx((2 + 3 / math.log2(3)) / (3 + 2 / math.log2(3)))
    assert v["map"][1] == 1.0  # every label's first chunk has only label-finding chunks above it
    assert v["recall@1"].tolist() == [pytest.approx(1 / 3), pytest.approx(2 / 3)]
    # a chunk repeating a label found above: no gain, non-relevant for AP, relevant for precision
    again = {"id": "again", "doc": "d", "start": 0, "end": 45}
    case = Case(id="q", question="q", contexts=[pair, again, third], relevant_spans=labels)
    v = {m: float(x[0]) for m, x in ranking.evaluate([case], ["ndcg@3", "map", "precision@3"]).items()}
    assert v["precision@3"] == 1.0
    assert v["map"] == pytest.approx((1 + 1 + 2 / 3) / 3)
    assert v["ndcg@3"] == pytest.approx((2 + 1 / 2) / (2 + 1 / math.log2(3)))


@st.composite
def span_rankings(draw):
    """A labelled document set, a chunking of it (fixed windows, with or without overlap, or pieces
    of random length) and a retrieved list drawn from the chunking (some chunks repeated), as
    offsets; Hypothesis draws the sizes and a seed, the offsets come from the seed."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    lengths = {f"doc{d}.md": rng.randint(200, 1200) for d in range(draw(st.integers(1, 3)))}
    labels = []
    for _ in range(draw(st.integers(1, 6))):
        doc = rng.choice(list(lengths))
        start = rng.randrange(0, lengths[doc] - 5)
        labels.append({"doc": doc, "start": start, "end": min(lengths[doc], start + rng.randint(5, 300)),
                       "grade": rng.choice([0, 1, 1, 1, 2, 3])})
    chunking = []
    size = draw(st.integers(20, 600))
    overlap = draw(st.sampled_from([0, 0, size // 4, size // 2]))
    for doc, n in lengths.items():
        if draw(st.booleans()):
            chunking += [(doc, s, e) for s, e in fixed_size("x" * n, size, overlap)]
        else:
            cut = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(1, 12))))
            chunking += [(doc, s, e) for s, e in zip([0, *cut], [*cut, n])]
    retrieved = rng.sample(chunking, min(len(chunking), draw(st.integers(0, 15))))
    if retrieved and draw(st.booleans()):
        retrieved.insert(rng.randrange(len(retrieved) + 1), rng.choice(retrieved))  # a repeated id
    return labels, chunking, retrieved


def _span_case(labels, retrieved) -> Case:
    return Case(id="q", question="q", relevant_spans=labels,
                contexts=[{"id": f"{d}:{s}:{e}", "doc": d, "start": s, "end": e} for d, s, e in retrieved])


def _matches(chunk, label) -> bool:
    (cd, cs, ce), (ld, ls, le) = chunk, (label["doc"], label["start"], label["end"])
    shared = len(set(range(cs, ce)) & set(range(ls, le))) if cd == ld else 0
    return shared >= 1 and shared >= 0.5 * min(ce - cs, le - ls)


def _by_the_rule(labels, retrieved, k, gain):
    """nDCG@k and AP@k read off docs/metrics.md, on sets of character offsets: each label's gain at
    its first matching chunk; the ideal ranks the groups (labels one chunk matches first; every other
    label alone) by gain; AP's precision counts the chunks that match a new label."""
    g = (lambda x: x) if gain == "linear" else (lambda x: 2**x - 1)
    ranked = list(dict.fromkeys(retrieved))
    rel = [lab for lab in labels if lab["grade"] >= 1]
    first = {}
    for i, chunk in enumerate(ranked, 1):
        for j, lab in enumerate(rel):
            if j not in first and _matches(chunk, lab):
                first[j] = i
    groups: dict = {}
    for j, lab in enumerate(rel):
        groups.setdefault(first.get(j, ("alone", j)), []).append(g(lab["grade"]))
    ideal = sorted((sum(v) for v in groups.values()), reverse=True)[:k]
    idcg = sum(x / math.log2(i + 2) for i, x in enumerate(ideal))
    dcg = sum(g(rel[j]["grade"]) / math.log2(r + 1) for j, r in first.items() if r <= k)
    new = set(first.values())
    ap = sum(sum(1 for x in new if x <= r) / r for r in first.values() if r <= k) / len(rel)
    return dcg / idcg, ap


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=span_rankings(), k=st.sampled_from([1, 3, 5, 10]))
def test_ndcg_and_map_of_span_labels_stay_within_0_and_1_and_reach_1_for_a_perfect_ranking(drawn, k):
    """Over random span labellings, chunkings (windows with overlap, pieces) and retrieved lists:
    nDCG (either gain) and AP never exceed 1, equal the rule computed on character offsets, and a
    perfect ranking (each next chunk the one adding the most gain, until every label is found)
    scores 1."""
    labels, chunking, retrieved = drawn
    if not any(lab["grade"] >= 1 for lab in labels):
        return
    case = _span_case(labels, retrieved)
    for gain in ("linear", "exponential"):
        v = ranking.evaluate([case], [f"ndcg@{k}", f"map@{k}", "ndcg", "map", f"recall@{k}"], gain=gain)
        for name in v:
            assert 0.0 <= v[name][0] <= 1.0, (name, gain)
        want_ndcg, want_ap = _by_the_rule(labels, retrieved, k, gain)
        assert v[f"ndcg@{k}"][0] == pytest.approx(want_ndcg, abs=1e-12), gain
        assert v[f"map@{k}"][0] == pytest.approx(want_ap, abs=1e-12)
        # the perfect ranking of this chunking, greedily by gain
        g = (lambda x: x) if gain == "linear" else (lambda x: 2**x - 1)
        rel = [lab for lab in labels if lab["grade"] >= 1]
        if not all(any(_matches(c, lab) for c in chunking) for lab in rel):
            continue  # some label no chunk of this chunking matches: nothing scores 1
        left, perfect = set(range(len(rel))), []
        while left:
            best = max(chunking, key=lambda c: sum(g(rel[j]["grade"]) for j in left if _matches(c, rel[j])))
            perfect.append(best)
            left -= {j for j in left if _matches(best, rel[j])}
        v = ranking.evaluate([_span_case(labels, perfect)], ["ndcg", f"ndcg@{len(perfect)}", "map"],
                             gain=gain)
        assert [float(x[0]) for x in v.values()] == pytest.approx([1.0, 1.0, 1.0], abs=1e-12), (gain, perfect)


# ------------------------------------------------------------------------------------------------
# Placing chunks and quotes; errors and warnings


def test_chunks_are_placed_exactly_then_with_white_space_collapsed():
    corpus = Corpus({"a.md": "Refunds  are due\nwithin 14 days.\r\nShipping is free."})
    assert corpus.locate("a.md", "within 14 days.") == (17, 32, True, False)
    start, end, exact, again = corpus.locate("a.md", "  Refunds are due within 14\tdays. ")
    assert (start, end, exact, again) == (0, 32, False, False)
    assert corpus.locate("a.md", "Refunds are due within 15 days") is None


def test_what_cannot_be_placed_is_an_error_naming_the_case_and_the_chunk(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("Refunds are due within 14 days.", encoding="utf-8")
    rows = [
        {
            "id": "ok",
            "question": "q",
            "contexts": [{"id": "c0", "text": "Refunds are due", "doc": "a.md"}],
            "relevant_spans": [{"doc": "a.md", "quote": "14 days"}],
        },
        {
            "id": "bad",
            "question": "q",
            "contexts": [
                {"id": "c0", "text": "Refunds are due", "doc": "a.md"},
                {"id": "c9", "text": "Returns take a week", "doc": "a.md"},
            ],
            "relevant_spans": [{"doc": "a.md", "start": 0, "end": 7}],
        },
    ]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--corpus", corpus)
    assert res.returncode == 2
    assert "golden.jsonl:2" in res.stderr and "'bad'" in res.stderr and "'c9'" in res.stderr
    assert "contexts[1]" in res.stderr and not (tmp_path / "run").exists()
    # without --corpus, a chunk that gives no offsets cannot be placed: said, with what to do
    res = ragbridge_cli("run", data, "--out", tmp_path / "run")
    assert res.returncode == 2 and "'ok'" in res.stderr and "--corpus" in res.stderr
    # a quote that is not in its document
    rows[1] = {"id": "q2", "question": "q", "relevant_spans": [{"doc": "a.md", "quote": "30 days"}]}
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--corpus", corpus)
    assert res.returncode == 2 and "'q2'" in res.stderr and "relevant_spans[0]" in res.stderr
    # a document the corpus does not hold
    rows[1] = {"id": "q3", "question": "q", "relevant_spans": [{"doc": "b.md", "start": 0, "end": 4}]}
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--corpus", corpus)
    assert res.returncode == 2 and "'b.md'" in res.stderr and "'a.md'" in res.stderr


def test_bad_span_labels_and_corpora_are_refused_with_their_place(tmp_path):
    for bad, words in [
        ({"doc": "a.md", "start": 5, "end": 5}, "greater than its start"),
        ({"doc": "a.md", "start": 3}, "go together"),
        ({"doc": "a.md"}, "start and end"),
        ({"doc": "a.md", "start": -1, "end": 4}, "non-negative"),
        ({"doc": "a.md", "quote": "x", "grade": 1.5}, "grade"),
    ]:
        data = tmp_path / "golden.jsonl"
        data.write_text(json.dumps({"id": "q", "question": "q", "relevant_spans": [bad]}) + "\n")
        res = ragbridge_cli("run", data, "--out", tmp_path / "run")
        assert res.returncode == 2 and "golden.jsonl:1" in res.stderr and words in res.stderr, res.stderr
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        json.dumps({"doc": "a", "text": "x"}) + "\n" + json.dumps({"doc": "a", "text": "y"}) + "\n"
    )
    with pytest.raises(DatasetError, match="docs.jsonl:2.*given twice"):
        read_corpus(corpus)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="holds no document"):
        read_corpus(tmp_path / "empty")
    chunks = tmp_path / "chunks.jsonl"
    chunks.write_text(json.dumps({"id": "c", "text": "zzz", "doc": "a"}) + "\n")
    with pytest.raises(DatasetError, match="chunks.jsonl:1.*not in 'a'"):
        read_chunking(chunks, Corpus({"a": "x"}))


def test_repeated_chunk_text_is_placed_at_its_first_occurrence_with_one_warning(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "faq.md").write_text(
        "Contact support. Refunds take 14 days. Contact support.", encoding="utf-8"
    )
    rows = [
        {
            "id": f"q{i}",
            "question": "q",
            "relevant_spans": [{"doc": "faq.md", "quote": "14 days"}],
            "contexts": [{"id": "c", "text": "Contact support.", "source": "faq.md#contact"}],
        }
        for i in range(3)
    ]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # batches of one case: the golden set is read back batch by batch, placed as it was checked
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--corpus", corpus, "--no-progress",
                        "--batch-size", "1")
    assert res.returncode == 0, res.stderr
    warnings = warnings_in(res.stderr)
    placing = [line for line in warnings if "chunk(s) or quote(s)" in line]
    assert len(placing) == 1 and placing[0].startswith("warning: 3 chunk(s)")
    # and, true of these cases, no chunk matches their label
    assert any("3 of 3 case(s) with relevance labels have no retrieved chunk" in line for line in warnings)
    placed = json.loads((tmp_path / "run" / "cases.jsonl").read_text().splitlines()[0])
    assert placed["contexts"][0] == {
        "id": "c",
        "text": "Contact support.",
        "source": "faq.md#contact",
        "doc": "faq.md",
        "start": 0,
        "end": 16,
    }
    assert placed["relevant_spans"] == [{"doc": "faq.md", "start": 30, "end": 37, "quote": "14 days"}]


def test_the_span_metrics_are_planned_only_for_span_labels(tmp_path):
    """A golden set without span labels runs as before (no span metric); one with span labels gets
    them by default, and the report, diff and gate read them like any metric."""
    ids = tmp_path / "ids.jsonl"
    ids.write_text(
        json.dumps({"id": "q", "question": "q", "contexts": [{"id": "a"}], "relevant": ["a"]}) + "\n"
    )
    res = ragbridge_cli("run", ids, "--out", tmp_path / "ids", "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert not [r for r in json.loads(res.stdout)["summary"] if "span" in r["metric"]]
    spans = tmp_path / "spans.jsonl"
    spans.write_text(
        json.dumps(
            {
                "id": "q",
                "question": "q",
                "contexts": [{"id": "a", "doc": "d", "start": 0, "end": 10}],
                "relevant_spans": [{"doc": "d", "start": 5, "end": 10}],
            }
        )
        + "\n"
    )
    res = ragbridge_cli("run", spans, "--out", tmp_path / "spans", "--json", "--no-progress", "--k", "3")
    assert res.returncode == 0, res.stderr
    summary = {r["metric"]: r for r in json.loads(res.stdout)["summary"]}
    assert summary["span_recall@3"]["mean"] == 1.0 and summary["span_precision@3"]["mean"] == 0.5
    assert summary["recall@3"]["mean"] == 1.0 and "precision_omega" not in summary
    manifest = json.loads((tmp_path / "spans" / "run.json").read_text())
    assert (
        manifest["options"]["span_arithmetic"] == "merged" and manifest["options"]["span_min_overlap"] == 0.5
    )
    res = ragbridge_cli("report", tmp_path / "spans", "--format", "md", "--out", tmp_path / "r.md")
    assert res.returncode == 0, res.stderr
    assert "span\\_iou@3" in (tmp_path / "r.md").read_text()  # Markdown escapes the underscore
    undefined = ragbridge_cli(
        "run", spans, "--out", tmp_path / "omega", "--metric", "precision_omega", "--json"
    )
    score = json.loads((tmp_path / "omega" / "scores.jsonl").read_text())
    # every score undefined: the run says so and exits 5 (nothing computed), naming the reason
    assert undefined.returncode == 5 and score["value"] is None and "--chunks" in score["reason"]
    assert "--chunks" in json.dumps(json.loads(undefined.stdout)["nothing_computed"])


def test_the_python_api_places_cases_against_a_corpus():
    docs = {"a.md": "Refunds are due within 14 days of the charge. Shipping is free over 50 euros."}
    case = Case(
        id="q",
        question="refund window?",
        contexts=[
            {"id": "s", "text": "Shipping is free over 50 euros.", "doc": "a.md"},
            {"id": "r", "text": "Refunds are due within 14 days", "doc": "a.md"},
        ],
        relevant_spans=[{"doc": "a.md", "quote": "within 14 days"}],
    )
    run = ragbridge.evaluate(
        [case],
        metrics=["recall@1", "recall@2", "span_precision@2"],
        corpus=Corpus(docs),
        options=RunOptions(k=2),
    )
    values = {s.metric: s.value for s in run.scores}
    assert values == {"recall@1": 0.0, "recall@2": 1.0, "span_precision@2": pytest.approx(14 / 61)}
    with pytest.raises(DatasetError, match="--corpus"):
        ragbridge.evaluate([case], metrics=["recall@1"])


def test_anchor_turns_chunk_id_section_and_document_labels_into_spans(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    text = "# Refunds\nWithin 14 days.\n# Shipping\nFree over 50 euros. Takes three days."
    corpus.write_text(
        json.dumps({"doc": "faq.md", "text": text})
        + "\n"
        + json.dumps({"doc": "terms.md", "text": "All terms."})
        + "\n"
    )
    chunks = tmp_path / "chunks.jsonl"
    chunks.write_text(
        "".join(
            json.dumps(c) + "\n"
            for c in [
                {
                    "id": "faq#0",
                    "text": "# Refunds\nWithin 14 days.",
                    "doc": "faq.md",
                    "source": "faq.md#refunds",
                },
                {"id": "faq#1", "text": "# Shipping\nFree over 50 euros.", "source": "faq.md#shipping"},
                {"id": "faq#2", "text": "Takes  three days.", "source": "faq.md#shipping"},
            ]
        )
    )
    golden = tmp_path / "golden.jsonl"
    golden.write_text(
        json.dumps({"id": "q1", "question": "refund?", "relevant": {"faq#0": 2, "terms.md": 1, "gone#7": 1}})
        + "\n"
        + json.dumps({"id": "q2", "question": "shipping?", "relevant": ["faq.md#shipping"]})
        + "\n"
    )
    # a label it cannot place: refused, the label named, nothing written
    anchor = ("anchor", golden, "--corpus", corpus, "--chunks", chunks, "--out", tmp_path / "out.jsonl")
    res = ragbridge_cli(*anchor)
    assert res.returncode == 2 and not (tmp_path / "out.jsonl").exists()
    assert res.stderr.startswith("error: 1 label(s) cannot be placed: case 'q1', label 'gone#7': no chunk")
    assert "--keep-unplaced" in res.stderr
    res = ragbridge_cli(*anchor, "--keep-unplaced", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert set(report) == {"out", "cases", "placed", "unplaced"}  # as the README's JSON table says
    assert report["placed"] == 3 and report["unplaced"] == [
        {"case": "q1", "label": "gone#7", "reason": report["unplaced"][0]["reason"]}
    ]
    assert "no chunk has this id" in report["unplaced"][0]["reason"] and "1 label(s)" in res.stderr
    q1, q2 = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert q1["relevant"] == {"gone#7": 1}  # kept as it was, not dropped
    assert q1["relevant_spans"] == [
        {"doc": "faq.md", "start": 0, "end": 25, "grade": 2},
        {"doc": "terms.md", "start": 0, "end": 10},
    ]
    shipping = text.index("# Shipping")
    assert q2["relevant_spans"] == [
        {"doc": "faq.md", "start": shipping, "end": len(text)}
    ]  # the section's hull
    assert "relevant" not in q2


# ------------------------------------------------------------------------------------------------
# Real chunkings: LangChain's splitter over the handbook corpus, labels by quote, BM25 retrieval

HANDBOOK = Path(__file__).resolve().parent.parent / "examples" / "chunking"
#: labels as a person writes them: the sentence that answers, and inside it the phrase that does
NESTED = [
    {"id": "deposits", "question": "How much deposit is taken for an e-bike?", "relevant_spans": [
        {"doc": "rentals.md", "grade": 1, "quote": "Every rental takes a deposit on the payment card: "
         "50 euros for a city bike, 150 euros for an e-bike and 200 euros for a cargo bike."},
        {"doc": "rentals.md", "quote": "150 euros for an e-bike", "grade": 2}]},
    {"id": "full-cover-price", "question": "What does full cover cost per day?", "relevant_spans": [
        {"doc": "insurance.md", "grade": 1, "quote": "Full cover costs 3 euros a day and removes the deposit "
         "charge for accidental damage."},
        {"doc": "insurance.md", "quote": "3 euros a day", "grade": 2}]},
    {"id": "theft-report", "question": "Who do I tell first when my bike is stolen?", "relevant_spans": [
        {"doc": "insurance.md", "quote": "Report the theft to the police within 24 hours and ask for a "
         "report number, then call the shop.", "grade": 1},
        {"doc": "insurance.md", "quote": "Report the theft to the police within 24 hours", "grade": 2},
        {"doc": "insurance.md", "quote": "Bring back the key of the lock", "grade": 1}]},
]


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[a-z0-9]+", text.lower())


def _quote_at(text: str, quote: str) -> tuple[int, int]:
    """Where a quote written with line breaks as spaces stands in ``text`` (the oracle's own search)."""
    import re

    m = re.search(r"\s+".join(map(re.escape, quote.split())), text)
    assert m, quote
    return m.start(), m.end()


@pytest.mark.parametrize("size,overlap", [(200, 0), (500, 0), (1000, 150)])
def test_recall_counts_every_label_a_real_chunkings_top_k_matches(size, overlap):
    """Each label a top-k chunk matches by the span rule counts for recall@k, also when one chunk
    matches two labels (a sentence and the phrase in it); nDCG and MAP stay within [0, 1]. The
    oracle places the chunks by LangChain's own start index and the quotes by its own search, and
    checks the rule on sets of character offsets."""
    splitters = pytest.importorskip("langchain_text_splitters")
    bm25_module = pytest.importorskip("rank_bm25")
    docs = {p.name: p.read_bytes().decode("utf-8") for p in sorted((HANDBOOK / "corpus").glob("*.md"))}
    splitter = splitters.RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap,
                                                        add_start_index=True)
    chunks = []  # (doc, start, end, text)
    for name, text in docs.items():
        for d in splitter.create_documents([text]):
            start = d.metadata["start_index"]
            chunks.append((name, start, start + len(d.page_content), d.page_content))
    bm25 = bm25_module.BM25Okapi([_words(c[3]) for c in chunks])
    golden = [json.loads(line) for line in (HANDBOOK / "golden.jsonl").read_text().splitlines()] + NESTED
    cases, truth = [], []
    for g in golden:
        scores = bm25.get_scores(_words(g["question"]))
        top = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[:5]
        cases.append(Case(id=g["id"], question=g["question"], relevant_spans=g["relevant_spans"],
                          contexts=[{"id": f"{chunks[i][0]}#{i}", "text": chunks[i][3], "doc": chunks[i][0]}
                                    for i in top]))
        labels = [(s["doc"], *_quote_at(docs[s["doc"]], s["quote"])) for s in g["relevant_spans"]
                  if s.get("grade", 1) >= 1]
        truth.append(([chunks[i][:3] for i in top], labels))
    ks = (1, 3, 5)
    metrics = [f"{m}@{k}" for k in ks for m in ("recall", "hit", "ndcg")] + ["map"]
    run = ragbridge.evaluate(cases, metrics=metrics, corpus=Corpus(docs))
    got = {(s.case_id, s.metric): s.value for s in run.scores}
    two_labels = 0
    for case, (top, labels) in zip(cases, truth):
        def matches(chunk, label):
            (cd, cs, ce), (ld, ls, le) = chunk, label
            shared = len(set(range(cs, ce)) & set(range(ls, le))) if cd == ld else 0
            return shared >= 1 and shared >= 0.5 * min(ce - cs, le - ls)

        two_labels += sum(sum(matches(c, label) for label in labels) >= 2 for c in top)
        for k in ks:
            found = sum(any(matches(c, label) for c in top[:k]) for label in labels)
            assert got[(case.id, f"recall@{k}")] == pytest.approx(found / len(labels)), (case.id, k)
            assert got[(case.id, f"hit@{k}")] == float(found > 0), (case.id, k)
            assert 0.0 <= got[(case.id, f"ndcg@{k}")] <= 1.0 + 1e-12, (case.id, k)
        assert 0.0 <= got[(case.id, "map")] <= 1.0 + 1e-12, case.id
    assert two_labels > 0  # the chunking has chunks holding two labels: the rule is exercised


def test_a_case_missing_part_of_its_labelled_text_names_the_span_and_what_the_top_k_hold():
    """A short chunk inside a long labelled paragraph matches it (recall@1 = 1), yet the top 1 holds a
    third of the paragraph: the diagnosis is retrieval and names the span (document, offsets, first
    words, characters held), as span_recall@1's own reason does; not "no relevant chunk", and not
    the reference's or the judge's fault."""
    splitters = pytest.importorskip("langchain_text_splitters")
    bm25_module = pytest.importorskip("rank_bm25")
    from ragbridge.analysis.diagnose import diagnose

    docs = {p.name: p.read_bytes().decode("utf-8") for p in sorted((HANDBOOK / "corpus").glob("*.md"))}
    splitter = splitters.RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
    chunks = [(name, i, t) for name, text in docs.items() for i, t in enumerate(splitter.split_text(text))]
    bm25 = bm25_module.BM25Okapi([_words(t) for _, _, t in chunks])
    question = "What deposit is taken on the payment card for a city bike?"
    quote = ("Every rental takes a deposit on the payment card: 50 euros for a city bike, 150 euros for an "
             "e-bike and 200 euros for a cargo bike. The deposit is held, not charged, and it is released "
             "within three working days of the return when the bike comes back undamaged.")
    scores = bm25.get_scores(_words(question))
    top = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[:3]
    case = Case(id="deposit", question=question, relevant_spans=[{"doc": "rentals.md", "quote": quote}],
                contexts=[{"id": f"{chunks[i][0]}#{chunks[i][1]}", "text": chunks[i][2], "doc": chunks[i][0]}
                          for i in top])
    run = ragbridge.evaluate([case], metrics=["recall@1", "span_recall@1"], corpus=Corpus(docs))
    values = {s.metric: s for s in run.scores}
    start, end = _quote_at(docs["rentals.md"], quote)
    first = chunks[top[0]][2]
    held = len(first)  # the top chunk lies inside the label
    assert first in quote and values["recall@1"].value == 1.0
    assert values["span_recall@1"].value == pytest.approx(held / (end - start))
    span = (f'rentals.md[{start}:{end}] "Every rental takes a deposit on ..." ({held} of {end - start} '
            "characters in the top 1, a top-1 chunk matches it)")
    assert values["span_recall@1"].reason == f"not wholly in the top 1: {span}"
    (d,) = diagnose(run).cases
    assert d.layer == "retrieval" and d.decided_by["metric"] == "span_recall@1"
    assert d.reason == ("a relevant chunk is in the top 1 (recall@1), but span_recall@1 (native) "
                        f"{values['span_recall@1'].value:.2f} < 0.5 fails: the top 1 misses part of what is "
                        f"relevant (not wholly in the top 1: {span})")
